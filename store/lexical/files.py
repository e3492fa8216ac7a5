"""Lexical indexes saved beside the store: one directory per namespace, one immutable snapshot
per saved version, memory-mapped by every process that reads it.

A snapshot is written whole into a temporary directory and renamed into place
(``s-<rewritten>-<revision>-<token>``: what the namespace's counters were when it was built),
so a reader sees a complete snapshot or none; readers take the newest and catch up from SQL.
Publishing, deleting and erasing hold the namespace's lock file (``flock``), which also lets a
second process that wants to build wait for the first and load its result. Processes on one
disk share the files and, through the page cache, their memory; an unlinked snapshot stays
readable by a process that has it mapped until it lets go.

Only arrays (``.npy``) and name tables are written; none is pickled.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import secrets
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from store.errors import StoreError
from store.lexical import bm25
from store.lexical.columns import Columns, Multi, Single
from store.lexical.index import TOKENIZER, LexicalIndex

FORMAT = 1
_PREFIX = "s-"
_TMP = "tmp-"
_LOCK = ".lock"
_META = "meta.json"
STALE_TMP_SECONDS = 3600.0  # a temporary directory this old belongs to a writer that died


class SnapshotUnusable(StoreError):
    """A saved snapshot is of another format, tokeniser or namespace, or is damaged."""


@dataclass(frozen=True, kw_only=True)
class Snapshot:
    """A saved snapshot's place and what the namespace's counters were when it was built."""

    path: Path
    rewritten: int
    revision: int

    @property
    def order(self) -> tuple[int, int]:
        return (self.rewritten, self.revision)


def namespace_dir(root: Path, namespace: str) -> Path:
    """Return the directory of a namespace's snapshots (names are hashed: any text is allowed)."""
    return root / hashlib.sha256(namespace.encode("utf-8")).hexdigest()[:24]


def snapshots(directory: Path) -> list[Snapshot]:
    """Return the snapshots in ``directory``, newest first."""
    found = []
    for path in _entries(directory, _PREFIX):
        parts = path.name.split("-")
        if len(parts) == 4 and parts[1].isdigit() and parts[2].isdigit():
            found.append(Snapshot(path=path, rewritten=int(parts[1]), revision=int(parts[2])))
    return sorted(found, key=lambda s: s.order, reverse=True)


@contextmanager
def locked(directory: Path) -> Iterator[None]:
    """Hold the namespace's lock (blocking while another process or cache holds it)."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / _LOCK, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def save(
    directory: Path,
    index: LexicalIndex,
    *,
    namespace: str,
    revision: int,
    rewritten: int,
    still_current: Callable[[], bool],
    holding_lock: bool = False,
) -> Snapshot | None:
    """Write ``index`` as a new snapshot and delete the older ones; return it.

    The files are written first; then, holding the lock (the caller's, if ``holding_lock``),
    ``still_current()`` is asked whether the index may still be published (not after a forget
    since it was built) and the directory is renamed into place. Return None if it was not
    published: not current any more, or an equal or newer snapshot is there already.
    """
    directory.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(6)
    tmp = directory / f"{_TMP}{token}"
    meta = {
        "format": FORMAT,
        "tokenizer": TOKENIZER,
        "k1": index.k1,
        "b": index.b,
        "namespace": namespace,
        "revision": revision,
        "rewritten": rewritten,
        "docs": len(index),
    }
    try:
        _write(tmp, index, meta)
        with nullcontext() if holding_lock else locked(directory):
            newest = next(iter(snapshots(directory)), None)
            if not still_current() or (newest and newest.order >= (rewritten, revision)):
                return None
            final = directory / f"{_PREFIX}{rewritten:012d}-{revision:012d}-{token}"
            os.rename(tmp, final)
            _fsync_dir(directory)
            snapshot = Snapshot(path=final, rewritten=rewritten, revision=revision)
            remove_all(directory, keep=snapshot)
            return snapshot
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def remove_all(
    directory: Path,
    *,
    keep: Snapshot | None = None,
    stale_only: bool = True,
    snapshots_too: bool = True,
) -> None:
    """Delete every snapshot but ``keep`` (unless not ``snapshots_too``) and the temporary
    directories (with ``stale_only``, only those old enough to belong to a writer that died).
    Call it holding the lock."""
    if snapshots_too:
        for snapshot in snapshots(directory):
            if keep is None or snapshot.path != keep.path:
                remove_snapshot(snapshot)
    now = time.time()
    for tmp in _entries(directory, _TMP):
        if not stale_only or _age(tmp, now) > STALE_TMP_SECONDS:
            shutil.rmtree(tmp, ignore_errors=True)


def remove_snapshot(snapshot: Snapshot) -> None:
    """Delete a snapshot (processes that have it mapped keep reading it). Hold the lock."""
    shutil.rmtree(snapshot.path, ignore_errors=True)


def load_keys(snapshot: Snapshot) -> Any:
    """Return the memory ids a snapshot holds (memory-mapped)."""
    return _array(snapshot.path, "keys")


def load(snapshot: Snapshot, *, namespace: str, k1: float, b: float) -> LexicalIndex:
    """Memory-map a snapshot.

    Raise SnapshotUnusable if it was made for another namespace, format, tokeniser or BM25
    parameters, or a file is damaged; FileNotFoundError if it was deleted meanwhile.
    """
    path = snapshot.path
    meta = _meta(path)
    expected = {"format": FORMAT, "tokenizer": TOKENIZER, "namespace": namespace, "k1": k1, "b": b}
    differs = {key: meta.get(key) for key, value in expected.items() if meta.get(key) != value}
    if differs:
        raise SnapshotUnusable(f"lexical snapshot {path} was made with {differs}")
    try:
        columns = Columns(
            keys=_array(path, "keys"),
            versions=_array(path, "versions"),
            event_us=_array(path, "event_us"),
            tokens=Multi(
                _array(path, "tokens.lengths"),
                _array(path, "tokens.codes"),
                _names(path, "tokens"),
            ),
            facets=Multi(
                _array(path, "facets.lengths"), _array(path, "facets.codes"), _names(path, "facets")
            ),
            session=Single(_array(path, "session.codes"), _names(path, "session")),
            type=Single(_array(path, "type.codes"), _names(path, "type")),
        )
        memories = _postings(path, "memories", len(columns))
        sessions = _postings(path, "sessions", len(columns.session.names))
    except (ValueError, OSError, EOFError) as exc:  # EOFError: an empty .npy
        if isinstance(exc, FileNotFoundError):
            raise
        raise SnapshotUnusable(f"lexical snapshot {path} is damaged: {exc}") from exc
    if len(columns) != meta.get("docs"):
        raise SnapshotUnusable(f"lexical snapshot {path} is damaged: document count")
    return LexicalIndex(columns, memories, sessions, k1=k1, b=b)


def _write(tmp: Path, index: LexicalIndex, meta: dict[str, Any]) -> None:
    tmp.mkdir()
    columns = index.columns
    arrays: dict[str, npt.NDArray[Any]] = {
        "keys": columns.keys,
        "versions": columns.versions,
        "event_us": columns.event_us,
        "tokens.lengths": columns.tokens.lengths,
        "tokens.codes": columns.tokens.codes,
        "facets.lengths": columns.facets.lengths,
        "facets.codes": columns.facets.codes,
        "session.codes": columns.session.codes,
        "type.codes": columns.type.codes,
    }
    for name, postings in (
        ("memories", index.memory_part.postings),
        ("sessions", index.session_part.postings),
    ):
        arrays[f"{name}.data"] = postings.data
        arrays[f"{name}.indices"] = postings.indices
        arrays[f"{name}.indptr"] = postings.indptr
    for name, value in arrays.items():
        with open(tmp / f"{name}.npy", "wb") as handle:
            np.save(handle, np.asarray(value), allow_pickle=False)
            _flush(handle)
    texts = {
        "tokens.names.json": json.dumps(columns.tokens.names, ensure_ascii=False),
        "facets.names.json": json.dumps(columns.facets.names, ensure_ascii=False),
        "session.names.json": json.dumps(columns.session.names, ensure_ascii=False),
        "type.names.json": json.dumps(columns.type.names, ensure_ascii=False),
        _META: json.dumps(meta, indent=1),  # last: a snapshot without it is incomplete
    }
    for name, text in texts.items():
        with open(tmp / name, "w", encoding="utf-8") as handle:
            handle.write(text)
            _flush(handle)
    _fsync_dir(tmp)


def _flush(handle: Any) -> None:
    handle.flush()
    os.fsync(handle.fileno())


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _array(path: Path, name: str) -> Any:
    """Memory-map ``name``.npy, read-only."""
    file = path / f"{name}.npy"
    # A plain ndarray over the mapping: np.memmap's subclass costs time on every slice.
    return np.asarray(np.load(file, mmap_mode="r", allow_pickle=False))


def _meta(path: Path) -> dict[str, Any]:
    """Read a snapshot's meta.json. Raise SnapshotUnusable if it is not a JSON object."""
    try:
        meta = json.loads((path / _META).read_text(encoding="utf-8"))
    except ValueError as exc:  # not UTF-8, or not JSON (a write cut short, a bad disk)
        raise SnapshotUnusable(f"lexical snapshot {path} is damaged: {_META}: {exc}") from exc
    if not isinstance(meta, dict):
        raise SnapshotUnusable(f"lexical snapshot {path} is damaged: {_META} is no object")
    return meta


def _names(path: Path, name: str) -> list[str]:
    names = json.loads((path / f"{name}.names.json").read_text(encoding="utf-8"))
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ValueError(f"{name}.names.json is not a list of names")
    return names


def _postings(path: Path, name: str, n_docs: int) -> bm25.Postings:
    return bm25.Postings(
        data=_array(path, f"{name}.data"),
        indices=_array(path, f"{name}.indices"),
        indptr=_array(path, f"{name}.indptr"),
        n_docs=n_docs,
    )


def _entries(directory: Path, prefix: str) -> list[Path]:
    try:
        return [p for p in directory.iterdir() if p.name.startswith(prefix) and p.is_dir()]
    except FileNotFoundError:
        return []


def _age(path: Path, now: float) -> float:
    try:
        return now - path.stat().st_mtime
    except FileNotFoundError:
        return 0.0
