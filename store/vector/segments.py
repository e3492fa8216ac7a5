"""An embedded Chroma's HNSW segment directories, and zeroing what hnswlib leaves in their files.

hnswlib (Chroma's fork, chroma-core/hnswlib) allocates the level-0 layer and the vectors' lengths
with ``malloc`` for ``max_elements`` slots and, when it creates a persistent index, writes both
whole (``initPersistentIndex``): every slot past the elements added goes to ``data_level0.bin``
and ``length.bin`` as it was in the process's heap, i.e. whatever freed memory held (SQLite
pages, JSON bodies, memories' text). Tests found a forgotten memory's tags there, in the
collection a rebuild created after they were read. Nothing reads those slots (one is zeroed
before an element goes in), and later saves write only the elements that changed, so zeroing
them on disk while no one writes the index removes that copy for good: a process that has the
index loaded keeps its own in memory, and never writes it again.
"""

from __future__ import annotations

import errno
import os
import struct
import uuid
from pathlib import Path

HEADER, LEVEL0, LENGTHS = "header.bin", "data_level0.bin", "length.bin"
# The start of header.bin: version (int32), then offsetLevel0, max_elements, cur_element_count,
# size_data_per_element (size_t each); the rest is not needed here.
_HEADER = struct.Struct("<i4Q")
_VERSION = 1
_FLOAT = 4  # bytes of one length
_CHUNK = 1 << 20


def segment_dirs(path: Path) -> list[Path]:
    """The directories of HNSW segments (named by their uuid) under an embedded Chroma."""
    return [found for found in path.iterdir() if found.is_dir() and _is_uuid(found.name)]


def scrub(segment: Path) -> int:
    """Zero what the segment's files hold past its elements (see the module's docstring);
    return how many bytes were written. A segment with no header yet, or a header of another
    version, is left as it is (0)."""
    try:
        header = (segment / HEADER).read_bytes()[: _HEADER.size]
    except FileNotFoundError:
        return 0
    if len(header) < _HEADER.size:
        return 0
    version, _, _, elements, per_element = _HEADER.unpack(header)
    if version != _VERSION:
        return 0
    level0 = _zero_past(segment / LEVEL0, elements * per_element)
    return level0 + _zero_past(segment / LENGTHS, elements * _FLOAT)


def _zero_past(file: Path, used: int) -> int:
    """Zero the bytes of ``file`` past ``used`` that are not zero already (holes are skipped);
    return how many bytes were written."""
    try:
        handle = file.open("r+b")
    except FileNotFoundError:
        return 0
    written = 0
    with handle:
        fd = handle.fileno()
        end = os.fstat(fd).st_size
        position = used
        while position < end:
            start, stop = _data_extent(fd, position, end)
            for offset in range(start, stop, _CHUNK):
                size = min(_CHUNK, stop - offset)
                if os.pread(fd, size, offset).count(0) != size:
                    os.pwrite(fd, bytes(size), offset)
                    written += size
            position = stop
        if written:
            os.fsync(fd)
    return written


def _data_extent(fd: int, position: int, end: int) -> tuple[int, int]:
    """Return the next stretch of the file from ``position`` that holds data, (start, stop);
    (end, end) if only a hole is left. Where the file system cannot tell, all the rest."""
    try:
        start = os.lseek(fd, position, os.SEEK_DATA)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            return end, end
        return position, end
    return start, min(os.lseek(fd, start, os.SEEK_HOLE), end)


def _is_uuid(name: str) -> bool:
    try:
        uuid.UUID(name)
    except ValueError:
        return False
    return True
