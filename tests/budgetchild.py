"""Open a checkpoint in a child process and report what the open built (tracemalloc).

tracemalloc, not ``ru_maxrss``: a child's RSS peak is inherited from its parent.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

_CHILD = """
import json, resource, sys, tracemalloc, time
limit = int(sys.argv[3])
if limit:  # a runaway open fails in the child instead of taking the host's memory
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
import strided as st
import strided.io._open, strided.jobs._checkpoint  # the readers' code is not what an open builds
tracemalloc.start()  # NumPy's buffers are traced too
start = time.perf_counter()
try:
    st.open_checkpoint(sys.argv[1], lenient=sys.argv[2] == "lenient")
    outcome = "opened"
except st.DataError as error:
    outcome = type(error).__name__ + ": " + str(error)
grew = tracemalloc.get_traced_memory()[1] // 1024
print(json.dumps({"outcome": outcome, "grew_kib": grew,
                  "seconds": time.perf_counter() - start}))
"""


def opened_in_child(
    path: Path, lenient: bool = False, *, address_limit: int = 0, timeout: float = 300
) -> dict[str, object]:
    """``{"outcome", "grew_kib", "seconds"}`` of ``open_checkpoint(path, lenient=...)``
    in a child (whose address space is capped at ``address_limit`` bytes, when given)."""
    found = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path), "lenient" if lenient else "strict",
         str(address_limit)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=True,
    )  # fmt: skip
    result: dict[str, object] = json.loads(found.stdout)
    return result
