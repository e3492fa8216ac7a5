"""The stores of a run: the clean one (cached), copies of it, pollution, and reading them back.

Every memory is read back through the namespace's export (``db.memories.export``): every
memory of any status with every field, as the ``secretary export`` command writes it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from benchkit import say
from locomo_bench.data import Conversation
from maintenance_bench.llm import bench_settings

from effect_bench.pollution import Pollutant, Truth
from secretary.config import Settings
from secretary.jobs.registry import JOBS
from store.db import MIGRATIONS
from store.kinds import MemoryStatus
from store.service import Store
from store.vector.embedder import Embedder

DATABASE = "secretary.db"  # the default SQLite file in a data directory
CLEAN_VERSION = 1  # bump when the way the clean store is built changes
ACTIVE = MemoryStatus.ACTIVE.value
Images = dict[int, dict[str, Any]]  # memory id -> its export image


@dataclass(frozen=True, kw_only=True)
class Stores:
    """Where stores live, and how they are opened (a test passes a fake embedder)."""

    work: Path
    embedder: Embedder | None = None

    def settings(self, data_dir: Path, api_base: str | None = "") -> Settings:
        """Settings for ``data_dir``: the scripted model at ``api_base``, the model of
        SECRETARY_LLM_* if it is None (SECRETARY_JOBS_* / _GUARDRAILS_* apply either way)."""
        return bench_settings(data_dir, api_base=api_base)

    @contextmanager
    def opened(self, data_dir: Path, api_base: str | None = "") -> Iterator[Store]:
        """Open the store in ``data_dir``; ``store.settings`` are ``settings(data_dir, ...)``."""
        store = Store.open(self.settings(data_dir, api_base), create=True, embedder=self.embedder)
        try:
            yield store
        finally:
            store.close()

    def copy(self, source: Path, name: str) -> Path:
        target = self.work / name
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(source, target)
        return target


def database_copy(source: Path, target: Path) -> Path:
    """Copy a store's SQLite database (not its vector index) into ``target``, consistently
    (SQLite's backup API), for checks that change it; return ``target``."""
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    with (
        closing(sqlite3.connect(source / DATABASE)) as src,
        closing(sqlite3.connect(target / DATABASE)) as dst,
    ):
        src.backup(dst)
    return target


def fingerprint(conversations: Sequence[Conversation], embedder: Embedder | None) -> str:
    """Name a clean store by its turns, the schema migrations and the embedder."""
    digest = hashlib.sha256(f"v{CLEAN_VERSION}:{embedder.model_id if embedder else ''}".encode())
    for conv in conversations:
        digest.update(json.dumps([conv.namespace, len(conv.turns)]).encode())
        for turn in conv.turns:
            digest.update(f"{turn['external_id']}\x1f{turn['content']}".encode())
    for migration in sorted(MIGRATIONS.rglob("*.py")):
        digest.update(migration.read_bytes())
    return digest.hexdigest()[:16]


def clean_store(stores: Stores, conversations: Sequence[Conversation]) -> Path:
    """Build (or reuse) the clean store: every turn a memory, as bench/locomo.py ingests them,
    then every job's watermark set past them (the clean store counts as maintained)."""
    data_dir = stores.work / f"clean-{fingerprint(conversations, stores.embedder)}"
    done = data_dir / "complete.json"
    if done.exists():
        return data_dir
    shutil.rmtree(data_dir, ignore_errors=True)
    with stores.opened(data_dir) as store:
        for conv in conversations:
            store.add_memories(conv.namespace, conv.turns, now=conv.now, source="bench")
            store.indexer.sync()
            mark_maintained(store, conv.namespace, conv.now)
            say(f"clean store: {conv.namespace} ingested ({len(conv.turns)} turns)")
    done.write_text(json.dumps([c.namespace for c in conversations]))
    return data_dir


def mark_maintained(store: Store, namespace: str, now: datetime) -> None:
    """Set every job's watermarks to the newest memory: nothing counts as new any more.

    The keys are the jobs' own (``deterministic_watermark``, ``llm_watermark``); the
    extractor's watermark counts log lines, of which there are none here.
    """
    newest = max(store.db.memories.index_state(namespace), default=0)
    with store.db.writer.unit(namespace, "bench", now) as unit:
        for name, job in JOBS.items():
            keys = {
                getattr(job, "llm_watermark", None),
                getattr(job, "deterministic_watermark", None),
            }
            state = {key: 0 if name == "extractor" else newest for key in keys if key}
            if state:
                unit.save_job_state(name, state)


def images(store: Store, namespace: str) -> Images:
    """Every memory of the namespace, any status, as its export image."""
    out: Images = {}
    for line in store.db.memories.export(namespace):
        data = json.loads(line)
        if data.get("kind") == "memory":
            out[int(data["id"])] = data
    return out


def export_lines(store: Store, namespaces: Sequence[str]) -> dict[str, list[str]]:
    """The export of each namespace (memories and relations), as `secretary export` writes."""
    return {ns: list(store.db.memories.export(ns)) for ns in namespaces}


def add_pollution(
    store: Store, conv: Conversation, pollutants: Sequence[Pollutant], *, now: datetime
) -> Truth:
    """Ingest the pollutants; return the namespace's ground truth in memory ids."""
    added = store.add_memories(
        conv.namespace, [p.item for p in pollutants], now=now, source="bench-pollution"
    )
    if added.skipped:
        raise SystemExit(f"{conv.namespace}: {added.skipped} pollutant(s) were not new")
    return Truth(
        turns=turn_ids(images(store, conv.namespace), conv),
        pollutants=dict(zip(added.ids, pollutants, strict=True)),
    )


def turn_ids(found: Mapping[int, Mapping[str, Any]], conv: Conversation) -> dict[str, int]:
    """dia_id -> memory id of the conversation's turns that are stored."""
    wanted = {t["external_id"] for t in conv.turns}
    return {
        str(image["external_id"]): memory_id
        for memory_id, image in found.items()
        if image.get("external_id") in wanted
    }
