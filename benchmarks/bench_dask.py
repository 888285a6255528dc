"""Checkpoint jobs on a local Dask cluster of two worker processes against ``--jobs``.

A 256 MiB checkpoint (16 F32 tensors of 16 MiB) is hashed and verified by the real
command line, each run a fresh ``python -m strided`` process (so every side pays the
same interpreter start): ``--scheduler`` pointing at a ``LocalCluster(n_workers=2)``
started before anything is timed, against ``--jobs 2`` and ``--jobs 1``. A ``hash``
row in this process (Dask already imported) shows the cost without the import of
``distributed``, against ``--jobs 1`` in this process (``--jobs 2`` is left out there:
with Dask's threads running, its workers could not be forked). Then
``strided.dask.exact_sum`` of one 64 MiB tensor read by ``from_checkpoint`` on that
cluster, against ``Tensor.sum()`` in this process. Needs the ``dask`` extra.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import strided as st
from strided.cli import main

from ._harness import Row, optional

_TENSORS = 16  # of 4096 x 1024 F32 = 16 MiB each
_MIB = 1 << 20


def _write(path: str) -> None:
    rng = np.random.default_rng(0)
    tensors = {
        f"model.layers.{i}.weight": st.Tensor.from_numpy(
            rng.standard_normal((4096, 1024), dtype=np.float32)
        )
        for i in range(_TENSORS)
    }
    tensors["lm_head.weight"] = st.Tensor.from_numpy(
        rng.standard_normal((16384, 1024), dtype=np.float32)
    )
    st.save_safetensors(path, tensors)


def _command(*args: str) -> Callable[[], object]:
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}

    def run() -> object:
        return subprocess.run(
            [sys.executable, "-m", "strided", *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=environment,
            check=True,
        )

    return run


def _in_process(*args: str) -> Callable[[], object]:
    def run() -> object:
        with contextlib.redirect_stdout(io.StringIO()):
            return main(list(args))

    return run


def rows() -> Iterator[Row]:
    distributed: Any = optional("distributed")
    if distributed is None:
        print("dask.distributed is not installed: pip install 'strided[dask]'", flush=True)
        return
    import strided.dask as sd

    folder = tempfile.mkdtemp(prefix="strided-bench-dask-")
    try:
        path = os.path.join(folder, "model.safetensors")
        _write(path)
        mib = os.path.getsize(path) >> 20
        with (
            distributed.LocalCluster(
                n_workers=2,
                threads_per_worker=1,
                processes=True,
                dashboard_address=":0",
                scheduler_kwargs={"dashboard": False},
                silence_logs=40,
            ) as cluster,
            distributed.Client(cluster) as client,
        ):
            address = cluster.scheduler_address
            client.submit(sum, [1]).result()  # workers up before any timing
            for job in ("hash", "verify"):
                yield Row(
                    f"{job} {mib} MiB, Dask 2 workers",
                    _command(job, path, "--scheduler", address),
                    {
                        "--jobs 2": _command(job, path, "--jobs", "2"),
                        "--jobs 1": _command(job, path),
                    },
                    "B",
                    mib * _MIB,
                )
            yield Row(
                f"hash {mib} MiB in this process, Dask 2 workers",
                _in_process("hash", path, "--scheduler", address),
                {"--jobs 1": _in_process("hash", path)},
                "B",
                mib * _MIB,
            )
            head = sd.from_checkpoint(path, chunks={"lm_head.weight": (4096, 1024)})[
                "lm_head.weight"
            ]
            tensor = st.open_checkpoint(path)["lm_head.weight"]
            assert sd.exact_sum(head) == tensor.sum()
            yield Row(
                "exact_sum 64 MiB F32 (4 chunks), Dask 2 workers",
                lambda: sd.exact_sum(head),
                {"Tensor.sum (one process)": tensor.sum},
                "B",
                64 * _MIB,
            )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
