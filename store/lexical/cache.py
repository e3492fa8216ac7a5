"""The lexical index of each namespace, kept current from SQL and saved beside the store.

Per namespace a `LexicalView`: a *base* index (loaded from the newest saved snapshot, else built
from SQL and saved), the base documents that no longer hold (*dead*), and a *tail* index of the
memories added or changed since. A search asks the namespace's counters first
(``LexicalSource.revisions``); if they moved:

- only ``revision`` (memories added, statuses changed): the memories with ids past the highest
  one seen join the tail;
- ``rewritten`` (a text or a filter field changed, a memory went or came back with its old id):
  the ids and versions of the namespace are compared with the index (a scan of two integer
  columns, about a second at a million memories): base documents whose memory is gone or at
  another version are dead, and the active memories the index lacks join the tail. A memory
  that is no longer stored at all (forgotten, purged) must not stay in any file: the base is
  merged at once without it and saved, and the older snapshots are deleted.

When the tail or the dead documents outgrow a share of the base, base and tail are merged from
their token columns (no SQL read, no tokenising; seconds at a million memories) into a new base,
saved as a new snapshot. A process that opens a namespace loads the newest snapshot and catches
up the same way, so a restart costs a file mapping and a catch-up, not a build.

Reading the counters before the rows is the caller's contract (``revisions`` first): the rows
are then at least that new.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

import numpy as np
from loguru import logger

from store.lexical import files
from store.lexical.columns import Columns, Ints, merge
from store.lexical.index import (
    DEFAULT_B,
    DEFAULT_K1,
    LexDoc,
    LexicalIndex,
    TokDoc,
    release_free_memory,
    tokenise_docs,
)
from store.lexical.view import LexicalView

_NO_DEAD: Ints = np.zeros(0, dtype=np.int64)
_OPEN_ATTEMPTS = 3  # a snapshot deleted while being opened: look again


@dataclass(frozen=True, kw_only=True)
class Versions:
    """The namespace's memories as SQL has them: active ids (ascending) with their versions,
    and every id still stored, whatever its status (ascending)."""

    active_ids: Ints
    active_versions: Ints
    stored_ids: Ints


class LexicalSource(Protocol):
    """Where the cache reads a namespace's memories (SQL)."""

    def revisions(self, namespace: str) -> tuple[int, int]:
        """Return (revision, rewritten): see ``store.models.NamespaceState``."""
        ...

    def all_docs(self, namespace: str) -> Iterable[LexDoc]:
        """The active memories by id (may be a stream)."""
        ...

    def docs_after(self, namespace: str, after_id: int) -> Sequence[LexDoc]:
        """The active memories with id > ``after_id``."""
        ...

    def docs_of(self, namespace: str, ids: Sequence[int]) -> Sequence[LexDoc]:
        """The active memories among ``ids``."""
        ...

    def versions(self, namespace: str) -> Versions: ...


@dataclass(frozen=True)
class _State:
    """What the cache holds for one namespace at one pair of counters."""

    revision: int
    rewritten: int
    base: LexicalIndex
    dead: Ints  # positions in base
    tail: tuple[TokDoc, ...]
    watermark: int  # the highest memory id looked at; -1: none
    view: LexicalView


class _Slot:
    def __init__(self) -> None:
        self.lock = threading.Lock()  # one loader/builder per namespace at a time
        self.state: _State | None = None


class LexicalCache:
    """Thread-safe cache of one lexical index per namespace, saved under ``directory``.

    Without a directory nothing is saved and each process builds its own, as before. Builds,
    merges and catch-ups run inside `get` (searches of that namespace wait for them).
    """

    def __init__(
        self,
        directory: Path | None = None,
        *,
        max_tail: int = 2000,
        tail_share: float = 0.01,
        max_namespaces: int = 64,
        k1: float = DEFAULT_K1,
        b: float = DEFAULT_B,
    ) -> None:
        """``max_tail`` documents (or ``tail_share`` of the base, if more) in the tail, and as
        many dead ones, before base and tail are merged."""
        if max_tail < 0 or max_namespaces < 1 or tail_share < 0:
            raise ValueError("LexicalCache: need max_tail >= 0 and max_namespaces >= 1")
        self.directory = directory
        self._max_tail = max_tail
        self._tail_share = tail_share
        self._max_namespaces = max_namespaces
        self._k1 = k1
        self._b = b
        self._lock = threading.Lock()  # guards _slots only; builds run under a slot's lock
        self._slots: OrderedDict[str, _Slot] = OrderedDict()
        self.builds = 0  # full builds from SQL (loaded snapshots and merges are not)
        self.merges = 0

    @property
    def capacity(self) -> int:
        """How many namespaces the cache keeps (least recently used ones are dropped)."""
        return self._max_namespaces

    def get(self, namespace: str, source: LexicalSource) -> LexicalView:
        """Return a view of ``namespace`` as of its current counters, loading only what changed."""
        slot = self._slot(namespace)
        counters = source.revisions(namespace)  # before any row is read
        state = slot.state  # states are immutable; reading the reference needs no lock
        if state is not None and (state.revision, state.rewritten) == counters:
            return state.view
        with slot.lock:
            state = slot.state  # another thread may have refreshed it meanwhile
            if state is None or (state.revision, state.rewritten) != counters:
                state = self._refresh(namespace, state, counters, source)
                slot.state = state
            return state.view

    def erase(self, namespace: str, source: LexicalSource) -> None:
        """After memories went for good: leave none of them in this cache or any saved file."""
        slot = self._slot(namespace)
        with slot.lock, self._locked(namespace):
            counters = source.revisions(namespace)
            state = slot.state
            if state is None and self.directory is not None:
                state = self._load_newest(namespace, counters, holding_lock=True)
            if state is not None:
                state = self._catch_up(namespace, state, counters, source, locked=True)
            slot.state = state
            directory = self._namespace_dir(namespace)
            if directory is not None:
                stored = source.versions(namespace).stored_ids
                for snapshot in files.snapshots(directory):
                    if _holds_gone(snapshot, stored):
                        files.remove_snapshot(snapshot)
                files.remove_all(directory, stale_only=False, snapshots_too=False)

    def invalidate(self, namespace: str) -> None:
        """Forget ``namespace`` in memory, so its next `get` loads it again."""
        with self._lock:
            self._slots.pop(namespace, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._slots)

    # -- refreshing ------------------------------------------------------------------------------

    def _refresh(
        self,
        namespace: str,
        state: _State | None,
        counters: tuple[int, int],
        source: LexicalSource,
    ) -> _State:
        if state is None and self.directory is not None:
            state = self._load_newest(namespace, counters)
        if state is None:
            return self._build(namespace, counters, source)
        return self._catch_up(namespace, state, counters, source, locked=False)

    def _catch_up(
        self,
        namespace: str,
        state: _State,
        counters: tuple[int, int],
        source: LexicalSource,
        *,
        locked: bool,
    ) -> _State:
        revision, rewritten = counters
        if (state.revision, state.rewritten) == counters:
            return state
        if state.rewritten == rewritten and state.revision < revision:
            state = self._extend(namespace, state, counters, source)
            gone = False
        else:  # rewritten moved (or the counters went back: another database, check it all)
            state, gone = self._reconcile(namespace, state, counters, source)
        limit = max(self._max_tail, int(len(state.base) * self._tail_share))
        if gone or len(state.tail) > limit or state.dead.size > limit:
            state = self._merge(namespace, state, source, locked=locked)
        return state

    def _extend(
        self, namespace: str, state: _State, counters: tuple[int, int], source: LexicalSource
    ) -> _State:
        # Filter too: a loader returning older ids would otherwise duplicate documents.
        fresh = [
            d
            for d in source.docs_after(namespace, state.watermark)
            if d.memory_id > state.watermark
        ]
        watermark = max([state.watermark, *(doc.memory_id for doc in fresh)])
        return self._with(
            state, counters, tail=state.tail + tuple(tokenise_docs(fresh)), watermark=watermark
        )

    def _reconcile(
        self, namespace: str, state: _State, counters: tuple[int, int], source: LexicalSource
    ) -> tuple[_State, bool]:
        """Compare the index with SQL's ids and versions; return the new state and whether a
        document of a memory that is no longer stored is still in the base."""
        started = time.monotonic()
        truth = source.versions(namespace)
        columns = state.base.columns
        alive = _matching(np.asarray(columns.keys), np.asarray(columns.versions), truth)
        dead = np.flatnonzero(~alive).astype(np.int64)
        gone = bool(dead.size) and bool(
            (~np.isin(np.asarray(columns.keys)[dead], truth.stored_ids)).any()
        )
        tail = tuple(
            doc
            for doc, ok in zip(
                state.tail,
                _matching(
                    np.array([d.memory_id for d in state.tail], dtype=np.int64),
                    np.array([d.version for d in state.tail], dtype=np.int64),
                    truth,
                ),
                strict=True,
            )
            if ok
        )
        held = np.concatenate(
            (np.asarray(columns.keys)[alive], np.array([d.memory_id for d in tail], np.int64))
        )
        missing = truth.active_ids[~np.isin(truth.active_ids, held)]
        fresh = source.docs_of(namespace, missing.tolist()) if missing.size else []
        watermark = max(state.watermark, int(truth.active_ids[-1]) if truth.active_ids.size else -1)
        new = self._with(
            state,
            counters,
            tail=tail + tuple(tokenise_docs(list(fresh))),
            dead=dead,
            watermark=watermark,
        )
        logger.info(
            "lexical index of namespace {!r} compared with SQL in {:.1f} s: {} documents no"
            " longer hold, {} read again",
            namespace,
            time.monotonic() - started,
            dead.size,
            len(fresh),
        )
        return new, gone

    def _with(
        self,
        state: _State,
        counters: tuple[int, int],
        *,
        tail: tuple[TokDoc, ...],
        watermark: int,
        dead: Ints | None = None,
    ) -> _State:
        dead = state.dead if dead is None else dead
        tail_index = LexicalIndex.from_tokenised(tail, k1=self._k1, b=self._b) if tail else None
        return replace(
            state,
            revision=counters[0],
            rewritten=counters[1],
            dead=dead,
            tail=tail,
            watermark=watermark,
            view=LexicalView(state.base, tail_index, dead=dead),
        )

    # -- building, merging, saving ---------------------------------------------------------------

    def _build(self, namespace: str, counters: tuple[int, int], source: LexicalSource) -> _State:
        """Build from SQL, unless (waiting for the lock) another process saved one meanwhile."""
        with self._locked(namespace):
            if self.directory is not None:
                counters = source.revisions(namespace)  # another process may have written
                loaded = self._load_newest(namespace, counters, holding_lock=True)
                if loaded is not None:
                    return self._catch_up(namespace, loaded, counters, source, locked=True)
            started = time.monotonic()
            base = LexicalIndex.build(source.all_docs(namespace), k1=self._k1, b=self._b)
            self.builds += 1
            logger.info(
                "lexical index of namespace {!r} built from SQL ({} documents) in {:.1f} s",
                namespace,
                len(base),
                time.monotonic() - started,
            )
            # The build's garbage is freed now; give its pages back to the OS, which malloc
            # would otherwise keep.
            release_free_memory()
            state = self._state(base, counters)
            return self._save(namespace, state, source, locked=True)

    def _merge(
        self, namespace: str, state: _State, source: LexicalSource, *, locked: bool
    ) -> _State:
        """Merge base (without its dead documents) and tail into a new base; save it."""
        columns = state.base.columns
        keep = np.setdiff1d(np.arange(len(columns), dtype=np.int64), state.dead)
        parts = [columns.take(keep)]
        if state.tail:
            parts.append(Columns.from_docs(state.tail))
        started = time.monotonic()
        base = LexicalIndex.from_columns(merge(parts), k1=self._k1, b=self._b)
        self.merges += 1
        logger.info(
            "lexical index of namespace {!r} merged ({} documents) in {:.1f} s",
            namespace,
            len(base),
            time.monotonic() - started,
        )
        merged = replace(
            self._state(base, (state.revision, state.rewritten)), watermark=state.watermark
        )
        release_free_memory()
        return self._save(namespace, merged, source, locked=locked)

    def _save(
        self, namespace: str, state: _State, source: LexicalSource, *, locked: bool
    ) -> _State:
        """Save the state's base (no tail, no dead documents) and map it back from the files."""
        directory = self._namespace_dir(namespace)
        if directory is None:
            return state
        counters = (state.revision, state.rewritten)

        def still_current() -> bool:
            # A forget since the rows were read: the base may hold a memory no longer stored.
            return source.revisions(namespace)[1] == state.rewritten

        snapshot = files.save(
            directory,
            state.base,
            namespace=namespace,
            revision=state.revision,
            rewritten=state.rewritten,
            still_current=still_current,
            holding_lock=locked,
        )
        if snapshot is None:
            return state
        try:
            base = files.load(snapshot, namespace=namespace, k1=self._k1, b=self._b)
        except (OSError, files.SnapshotUnusable) as exc:
            logger.warning("cannot map the lexical snapshot just saved: {}", exc)
            return state
        mapped = replace(self._state(base, counters), watermark=state.watermark)
        release_free_memory()
        return mapped

    def _load_newest(
        self, namespace: str, counters: tuple[int, int], *, holding_lock: bool = False
    ) -> _State | None:
        """Map the newest usable snapshot, if any; ``holding_lock``: delete the ones that
        cannot be used (unreadable, of another format, ahead of the database) on the way."""
        directory = self._namespace_dir(namespace)
        if directory is None:
            return None
        vanished = 0
        while newest := next(iter(files.snapshots(directory)), None):
            if newest.order > (counters[1], counters[0]):
                # Built at counters this database never had (it was replaced): not usable.
                logger.warning("lexical snapshot {} is ahead of the database", newest.path)
                if not holding_lock:
                    return None
                files.remove_snapshot(newest)
                continue
            try:
                base = files.load(newest, namespace=namespace, k1=self._k1, b=self._b)
            except FileNotFoundError:
                vanished += 1  # deleted meanwhile by a process that saved a newer one
                if vanished >= _OPEN_ATTEMPTS:
                    return None
                continue
            except files.SnapshotUnusable as exc:
                logger.warning("{}: not used", exc)
                if not holding_lock:
                    return None
                files.remove_snapshot(newest)
                continue
            logger.info("lexical index of namespace {!r} mapped from {}", namespace, newest.path)
            return self._state(base, (newest.revision, newest.rewritten))
        return None

    def _state(self, base: LexicalIndex, counters: tuple[int, int]) -> _State:
        watermark = -1 if base.max_memory_id is None else base.max_memory_id
        return _State(
            revision=counters[0],
            rewritten=counters[1],
            base=base,
            dead=_NO_DEAD,
            tail=(),
            watermark=watermark,
            view=LexicalView(base),
        )

    def _namespace_dir(self, namespace: str) -> Path | None:
        return None if self.directory is None else files.namespace_dir(self.directory, namespace)

    def _locked(self, namespace: str) -> AbstractContextManager[None]:
        directory = self._namespace_dir(namespace)
        return nullcontext() if directory is None else files.locked(directory)

    def _slot(self, namespace: str) -> _Slot:
        with self._lock:
            slot = self._slots.get(namespace)
            if slot is None:
                slot = self._slots[namespace] = _Slot()
                while len(self._slots) > self._max_namespaces:
                    self._slots.popitem(last=False)  # least recently used
            else:
                self._slots.move_to_end(namespace)
            return slot


def _matching(ids: Ints, versions: Ints, truth: Versions) -> np.ndarray:
    """Tell for each (id, version) whether SQL has that memory active at that version."""
    at = np.searchsorted(truth.active_ids, ids)
    inside = at < truth.active_ids.size
    found = np.zeros(ids.size, dtype=np.bool_)
    found[inside] = truth.active_ids[at[inside]] == ids[inside]
    same = np.zeros(ids.size, dtype=np.bool_)
    same[found] = truth.active_versions[at[found]] == versions[found]
    return same


def _holds_gone(snapshot: files.Snapshot, stored: Ints) -> bool:
    """Tell whether a snapshot holds a memory that is no longer stored (unreadable: assume so)."""
    try:
        keys = files.load_keys(snapshot)
    except (OSError, ValueError):
        return True
    return bool((~np.isin(keys, stored)).any())
