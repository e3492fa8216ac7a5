"""store.vector.allocator: under glibc, a block the size of a Chroma graph's lock table is mapped
on its own (and so returned when freed) even after glibc would have raised its threshold."""

from __future__ import annotations

import ctypes
import platform
from pathlib import Path

import pytest

from store.vector import allocator
from store.vector.index import VectorIndex
from tests.helpers.fake_embedder import FakeEmbedder

GRAPH_LOCKS = 65_536 * 40  # hnswlib's label-operation mutexes: one block per graph

glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc only")


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in [
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        ]
    ]


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None)
    if not hasattr(libc, "mallinfo2"):  # glibc 2.33 and later
        pytest.skip("this glibc has no mallinfo2")
    libc.mallinfo2.restype = _MallInfo2
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    return libc


def _mapped_on_its_own(libc: ctypes.CDLL, size: int) -> bool:
    before = libc.mallinfo2().hblks
    block = libc.malloc(size)
    try:
        return bool(libc.mallinfo2().hblks == before + 1)
    finally:
        libc.free(block)


@glibc
def test_a_graph_sized_block_is_mapped_on_its_own_after_a_larger_one_was_freed() -> None:
    libc = _libc()
    # What raises glibc's own threshold past a graph's block (if nothing fixed it yet).
    libc.free(libc.malloc(4 * GRAPH_LOCKS))

    assert allocator._mallopt_threshold(allocator.MMAP_THRESHOLD_BYTES)

    assert _mapped_on_its_own(libc, GRAPH_LOCKS)
    assert not _mapped_on_its_own(libc, 64 * 1024)  # small blocks stay in the heap


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
