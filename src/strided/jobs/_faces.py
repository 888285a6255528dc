"""``st.hash`` and ``st.verify``: the ``strided hash`` and ``strided verify`` commands
as Python functions returning reports.

The command line calls the same work (``hash_checkpoint``, ``verify_checkpoint``) and
only prints what it returns, so a report's ``to_json()`` is the command's ``--json``
output and its ``ok`` the command's exit status 0.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from ._checkpoint import open_checkpoint
from ._hash import HashReport, hash_checkpoint
from ._manifest import read_manifest
from ._pool import JobError
from ._sweep import as_path, check_workers, token_scope
from ._verify import VerifyReport, verify_checkpoint

__all__ = ["hash", "verify"]


def hash(
    path: str | os.PathLike[str],
    *,
    names: str | None = None,
    jobs: int = 1,
    scheduler: str | None = None,
    skip_unreadable: bool = False,
    allow_expanded: bool = False,
    lenient: bool = False,
    token: str | None = None,
) -> HashReport:
    """Every tensor's digest, the metadata's and the checkpoint's: ``strided hash``.

    Reads every tensor of the checkpoint at ``path`` (any format ``open_checkpoint``
    reads, or an http(s) URL) once. The checkpoint digest does not depend on the file
    format, the shard split or the tensor order, and ignores metadata, which has its
    own digest; both are the same for any ``jobs``.

    Args:
        path: a checkpoint file, shard folder or index, or an http(s) URL.
        names: a glob (``fnmatch``, case-sensitive); only matching tensors (and
            unreadable members) are hashed, and the checkpoint digest covers them
            alone. None hashes everything (``strided hash --name``).
        jobs: worker processes (1 to 1024); the report is the same for every value.
        scheduler: a Dask scheduler address (``tcp://host:8786``, ``local:N``) to run
            on instead of ``jobs`` (needs ``strided[dask]``).
        skip_unreadable: go on past members strided cannot read (an ``.npz`` object
            array, a distributed checkpoint item that is not plain data), recording the
            SHA-256 of each one's stored bytes in ``HashReport.unreadable``.
        allow_expanded: hash tensors whose logical size is more than 2^20 times their
            stored bytes (a PyTorch ``expand`` view); the work then costs that size.
        lenient: read PyTorch pickles whose globals strict mode refuses, as inert
            records (never imported or run).
        token: a bearer token sent only to the origin of an http(s) ``path``.

    Returns:
        A ``HashReport``: ``digest``, ``metadata_digest``, ``tensors`` (name ->
        ``TensorDigest``), ``unreadable``; ``to_json()`` is ``strided hash --json``'s
        output, ``lines()`` the manifest lines ``strided hash`` prints.

    Raises:
        FormatError: a malformed file, an unreadable member without
            ``skip_unreadable``, ``names`` matching nothing, or ``jobs`` given with
            ``scheduler``.
        LimitError: a cap exceeded (an expanded view without ``allow_expanded``,
            ``jobs`` out of range).
        DataError: any other bad input, as the reader raised it (naming the tensor).
        OSError: ``path`` cannot be opened.

    Example:
        >>> import numpy as np, strided as st
        >>> st.save_safetensors("model.safetensors", {"w": st.tensor([[1.0, 2.0]], "F32")})
        >>> report = st.hash("model.safetensors")
        >>> report.digest == st.open_checkpoint("model.safetensors").digest()
        True
        >>> print("\\n".join(report.lines()))  # doctest: +SKIP
    """
    check_workers("hash", jobs, scheduler)
    where = as_path(path)
    with token_scope(token, where), open_checkpoint(where, lenient=lenient, token=token) as found:
        try:
            return hash_checkpoint(
                found, where, glob="*" if names is None else names, jobs=jobs,
                scheduler=scheduler, allow_expanded=allow_expanded, lenient=lenient,
                skip_unreadable=skip_unreadable,
            )  # fmt: skip
        except JobError as error:
            raise error.as_data_error() from None


def verify(
    path: str | os.PathLike[str],
    manifest: str | os.PathLike[str] | None = None,
    *,
    names: str | None = None,
    allow_nonfinite: str | Sequence[str] = (),
    jobs: int = 1,
    scheduler: str | None = None,
    skip_unreadable: bool = False,
    allow_expanded: bool = False,
    lenient: bool = False,
    token: str | None = None,
) -> VerifyReport:
    """Read every element, count NaN and infinity, check a manifest: ``strided verify``.

    Each tensor's exact statistics (min, max, mean, NaN and infinity counts, the first
    non-finite index) are computed from every element. The report is ``ok`` when
    every tensor was scanned, none holds NaN or infinity (unless its name matches an
    ``allow_nonfinite`` glob: it is then still reported, marked ``allowed``) and, with
    a ``manifest``, every digest matches it, the metadata digest included. Metadata
    values are data and never judged.

    Args:
        path: a checkpoint file, shard folder or index, or an http(s) URL.
        manifest: the output of ``strided hash`` (text or ``--json``; ``HashReport.lines()``
            or ``to_json()`` written to a file) to check every digest against.
        names: a glob; only matching tensors are read, and only the manifest's
            entries matching it are expected (``strided verify --name``).
        allow_nonfinite: a glob, or several, of tensors that may hold NaN or infinity.
        jobs: worker processes (1 to 1024); the report is the same for every value.
        scheduler: a Dask scheduler address to run on instead of ``jobs``.
        skip_unreadable: go on past members strided cannot read (listed in
            ``VerifyReport.unreadable``; with a manifest the digest of their stored
            bytes is checked).
        allow_expanded: read tensors whose logical size is more than 2^20 times their
            stored bytes.
        lenient: read PyTorch pickles whose globals strict mode refuses, as inert records.
        token: a bearer token sent only to the origin of an http(s) ``path``.

    Returns:
        A ``VerifyReport``: ``tensors`` (name -> ``TensorCheck``), ``manifest``
        (a ``ManifestCheck`` or None), ``verdict``, ``ok``; ``to_json()`` is
        ``strided verify --json``'s output.

    Raises:
        FormatError: a malformed checkpoint or manifest, an unreadable member without
            ``skip_unreadable``, ``names`` matching nothing, ``jobs`` with ``scheduler``.
        LimitError: a cap exceeded (an expanded view, a manifest over 256 MiB).
        DataError: any other bad input, as the reader raised it.
        OSError: ``path`` or ``manifest`` cannot be opened.

    Example:
        >>> import strided as st
        >>> st.save_safetensors("model.safetensors", {"w": st.tensor([1.0, float("nan")], "F32")})
        >>> report = st.verify("model.safetensors")
        >>> report.ok, report.verdict, report.tensors["w"].nan
        (False, '1 tensor with NaN or inf', 1)
        >>> st.verify("model.safetensors", allow_nonfinite="w").ok
        True
    """
    check_workers("verify", jobs, scheduler)
    where = as_path(path)
    expected = None if manifest is None else read_manifest(as_path(manifest))
    with token_scope(token, where), open_checkpoint(where, lenient=lenient, token=token) as found:
        try:
            return verify_checkpoint(
                found, where, expected, glob="*" if names is None else names,
                allow_nonfinite=allow_nonfinite, jobs=jobs, scheduler=scheduler,
                allow_expanded=allow_expanded, lenient=lenient,
                skip_unreadable=skip_unreadable,
            )  # fmt: skip
        except JobError as error:
            raise error.as_data_error() from None
