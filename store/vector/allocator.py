"""glibc's malloc and the graphs an embedded Chroma lets go of.

Each collection graph an embedded Chroma holds has a block of 2.6 MB (hnswlib's 65,536
label-operation mutexes) whatever its size, and the graphs are let go of and read again as
namespaces take turns. glibc serves a block that large from its own mapping at first, but after
the first such block is freed it raises its mapping threshold to that size (up to 32 MB), and
from then on the blocks come from its heaps, whose holes it keeps: a process dreaming
namespaces one after another held 77 MB of free heap at its 1,000th namespace, 34 MB at its
100th. A fixed threshold keeps every block of ``MMAP_THRESHOLD_BYTES`` or more in a mapping of
its own, returned to the system when freed (measured 2026-12-04, docs/operations.md).
"""

from __future__ import annotations

import ctypes
import os
import platform
import threading

# Blocks of this size or more are mapped on their own (glibc's default starts at 128 KiB and
# rises as large blocks are freed): a graph's 2.6 MB block is, a query's small ones are not.
MMAP_THRESHOLD_BYTES = 1 << 20
_M_MMAP_THRESHOLD = -3  # glibc's <malloc.h>
# The environment variable with which an operator sets glibc's threshold (it wins).
OPERATOR_SETTING = "MALLOC_MMAP_THRESHOLD_"

_lock = threading.Lock()
_set: bool | None = None  # None: not tried yet in this process


def map_large_blocks(threshold: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Make glibc map blocks of ``threshold`` bytes or more on their own, once per process;
    return whether it is so. Nothing is changed off glibc (musl, macOS), nor when the
    environment sets glibc's threshold itself (``MALLOC_MMAP_THRESHOLD_``)."""
    global _set
    with _lock:
        if _set is None:
            _set = _mallopt_threshold(threshold)
        return _set


def _mallopt_threshold(threshold: int) -> bool:
    if OPERATOR_SETTING in os.environ or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, threshold) == 1)
