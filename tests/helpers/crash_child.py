"""The child process of the crash-safety tests: one action on a store, SIGKILLed at a chosen point.

A kill point wraps an internal function of the store or the jobs for the life of the child
only; production code has no test hooks. ``main`` runs in a process forked by
``multiprocessing``'s forkserver, whose server has imported ``PRELOAD`` (litellm and Chroma,
seconds of imports) once, so each child starts at once.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from functools import wraps
from pathlib import Path
from typing import Any, Literal, NoReturn

from chromadb.api.models.Collection import Collection
from loguru import logger

import store.vector.index
from secretary import runner
from secretary.approval import approve_plan
from secretary.config import Settings
from store.coordination.rebuilds import RebuildTable
from store.ingest import ingest_file
from store.service import Store
from store.write.undo import undo
from store.write.unit import UnitOfWork
from store.write.writer import Writer
from tests.helpers.fake_embedder import FakeEmbedder

# What the forkserver imports before forking any child: this module, then the lazy imports of
# a first LLM call and a first Chroma client (seconds of them), which each child would repeat.
PRELOAD = (
    "tests.helpers.crash_child",
    "litellm",
    "litellm.litellm_core_utils.default_encoding",
    "litellm.proxy.openai_files_endpoints.common_utils",
    "openai.resources",
    "chromadb.api.rust",
)

Action = Literal["dream", "ingest", "undo", "approve", "sync", "rebuild"]
KillPoint = Literal[
    "planned", "flushed", "committed", "mid-upsert", "before-ack", "rebuild-copied", "mid-promote"
]


@dataclass(frozen=True, kw_only=True)
class Task:
    """What the child does, and where it dies (``kill_at`` None: it runs to the end)."""

    settings: Settings
    action: Action
    namespace: str
    now: datetime
    kill_at: KillPoint | None = None
    hit: int = 1  # die the hit-th time the point is reached
    job: str = "extractor"
    path: Path | None = None  # the file to ingest
    record_id: int | None = None  # the record to undo, or the plan to approve


def die() -> NoReturn:
    """End this process the way the OOM killer or a power cut would: no cleanup at all."""
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("SIGKILL cannot be caught")  # pragma: no cover


class _Counter:
    def __init__(self, hit: int) -> None:
        self.left = hit

    def reached(self) -> bool:
        self.left -= 1
        return self.left == 0


def _install(point: KillPoint, hit: int) -> None:
    counter = _Counter(hit)
    if point == "planned":
        # The plan is made (the LLM answered) and nothing is written yet.
        settle = runner._Run._settle

        @wraps(settle)
        def settle_then_die(*args: Any, **kwargs: Any) -> Any:
            if counter.reached():
                die()
            return settle(*args, **kwargs)

        runner._Run._settle = settle_then_die  # type: ignore[method-assign]
    elif point == "flushed":
        # Every row, operation and outbox entry is flushed into the open transaction.
        finish = UnitOfWork.finish

        @wraps(finish)
        def finish_then_die(self: UnitOfWork) -> Any:
            done = finish(self)
            if counter.reached():
                die()
            return done

        UnitOfWork.finish = finish_then_die  # type: ignore[method-assign]
    elif point == "committed":
        # The transaction committed; the vector index has not seen it yet.
        # Every write with a record goes through Writer.unit: the die comes once its ``with``
        # block has left, that is after the commit.
        unit = Writer.unit

        @contextmanager
        def unit_then_die(self: Writer, *args: Any, **kwargs: Any) -> Iterator[Any]:
            with unit(self, *args, **kwargs) as opened:
                yield opened
            if counter.reached():
                die()

        Writer.unit = unit_then_die  # type: ignore[method-assign,assignment]
    elif point == "mid-upsert":
        # Chroma got the first half of a batch of vectors.
        write = store.vector.index.write_vectors

        @wraps(write)
        def write_half_then_die(
            collection: Any, *, ids: Any, embeddings: Any, metadatas: Any
        ) -> Any:
            if not counter.reached():
                return write(collection, ids=ids, embeddings=embeddings, metadatas=metadatas)
            half = max(1, len(ids) // 2)
            write(
                collection, ids=ids[:half], embeddings=embeddings[:half], metadatas=metadatas[:half]
            )
            die()

        store.vector.index.write_vectors = write_half_then_die
    elif point == "rebuild-copied":
        # A batch of a rebuild is in the new collection, and the rebuild's row says so.
        advance = RebuildTable.advance

        @wraps(advance)
        def advance_then_die(self: RebuildTable, *args: Any, **kwargs: Any) -> None:
            advance(self, *args, **kwargs)
            if counter.reached():
                die()

        RebuildTable.advance = advance_then_die  # type: ignore[method-assign]
    elif point == "mid-promote":
        # The rebuilt collection is complete; the old one was renamed aside, and the new one
        # does not have its place yet: for a moment no collection answers.
        modify = Collection.modify

        @wraps(modify)
        def modify_then_die(self: Collection, *args: Any, **kwargs: Any) -> None:
            modify(self, *args, **kwargs)
            if counter.reached():
                die()

        Collection.modify = modify_then_die  # type: ignore[method-assign]
    else:
        # Chroma holds a whole batch; its outbox entries are not yet acknowledged.
        ack = Writer.ack_outbox

        @wraps(ack)
        def die_before_ack(self: Writer, ids: Any) -> None:
            if counter.reached():
                die()
            ack(self, ids)

        Writer.ack_outbox = die_before_ack  # type: ignore[method-assign]


def _act(store_: Store, task: Task) -> object:
    settings, ns, now = task.settings, task.namespace, task.now
    if task.action == "dream":
        outcome = runner.run_job(store_, settings, task.job, ns, now=now)
        assert outcome.status != "failed", outcome.message
    elif task.action == "ingest":
        assert task.path is not None
        ingest_file(store_, task.path, namespace=ns, now=now)
    elif task.action == "undo":
        assert task.record_id is not None
        undo(store_.db.writer, task.record_id, now=now)
    elif task.action == "approve":
        assert task.record_id is not None
        outcome = approve_plan(store_, settings, task.record_id, now=now)
        assert outcome.status == "applied", outcome.message
    elif task.action == "rebuild":
        # As `secretary index rebuild` does: record the rebuild, then carry it out.
        store_.indexer.request_rebuild([ns])
        store_.indexer.rebuild(ns)
    # As `secretary dream`, `ingest` and `undo` do after writing: bring the index up to date.
    return store_.indexer.sync()


def main(task: Task) -> None:
    """Open the store, arm the kill point, act. Return normally only if no kill point fired."""
    logger.remove()
    logger.add(task.settings.data_dir / "child.log", level="DEBUG")
    if task.kill_at is not None:
        _install(task.kill_at, task.hit)
    opened = Store.open(task.settings, embedder=FakeEmbedder())
    try:
        _act(opened, task)
    finally:
        opened.close()
