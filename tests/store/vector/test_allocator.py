"""store.vector.allocator: under glibc, a block the size of a Chroma graph's lock table is mapped
on its own (and so returned when freed) even after glibc would have raised its threshold."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from store.vector import allocator
from store.vector.index import VectorIndex
from tests.helpers.fake_embedder import FakeEmbedder

GRAPH_LOCKS = 65_536 * 40  # hnswlib's label-operation mutexes: one block per graph

glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc only")


# Run in a fresh interpreter: in a process that has run other tests, glibc may serve a block
# this size from free space already in its heap, mapping threshold or not (and it did, in CI).
_CHILD = """
import ctypes, sys
from store.vector import allocator

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split())]

libc = ctypes.CDLL(None)
if not hasattr(libc, "mallinfo2"):  # glibc 2.33 and later
    sys.exit(3)
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]

def mapped_on_its_own(size):
    before = libc.mallinfo2().hblks
    block = libc.malloc(size)
    try:
        return libc.mallinfo2().hblks == before + 1
    finally:
        libc.free(block)

graph = int(sys.argv[1])
libc.free(libc.malloc(4 * graph))  # what raises glibc's own threshold past a graph's block
if sys.argv[2] == "fixed" and not allocator._mallopt_threshold(allocator.MMAP_THRESHOLD_BYTES):
    sys.exit(4)
print(mapped_on_its_own(graph), mapped_on_its_own(64 * 1024))
"""


def _child(threshold: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != allocator.OPERATOR_SETTING}
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(GRAPH_LOCKS), threshold],
        cwd=Path(__file__).resolve().parents[3],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if done.returncode == 3:
        pytest.skip("this glibc has no mallinfo2")
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@glibc
def test_a_graph_sized_block_is_mapped_on_its_own_after_a_larger_one_was_freed() -> None:
    # Small blocks stay in the heap either way.
    assert _child("fixed") == "True False"
    assert _child("glibc's own") == "False False"  # what the fixed threshold is for


def test_the_operators_own_setting_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(allocator.OPERATOR_SETTING, "65536")

    assert not allocator._mallopt_threshold(allocator.MMAP_THRESHOLD_BYTES)


def test_opening_an_embedded_chroma_sets_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    called: list[bool] = []
    monkeypatch.setattr("store.vector.chroma.map_large_blocks", lambda: called.append(True))

    VectorIndex.open(embedder=FakeEmbedder(), path=tmp_path).close()

    assert called == [True]
