"""The converted form of a family, shared by its converter (writes) and the benchmark (reads).

A family's folder holds two files:

- ``items.jsonl.gz``: one JSON line per namespace (a user, an episode, ...):
  ``{"namespace", "now", "memories": [...], "questions": [...]}``. A memory is an item for
  ``Store.add_memories`` (``external_id``, ``content``, ``timestamp`` as ISO 8601, optional
  ``session_id`` and ``metadata``); a question is ``{"qid", "text", "type", "evidence"}``,
  ``evidence`` the external ids of its gold memories in the same namespace. ``now`` is when
  the questions are asked.
- ``meta.json``: where the data came from (URL, commit, licence), how it was converted, the
  counts and the SHA-256 of ``items.jsonl.gz``.

`load_family` turns them into the `Conversation` and `Question` values of
``bench/locomo_bench`` so that its stores, rankers and metrics run unchanged; a question's
``category`` is the position of its type in the family's sorted list of types.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from locomo_bench.data import Conversation, Question

ITEMS = "items.jsonl.gz"
META = "meta.json"


class FamilyDataMissing(Exception):
    """A family's converted data is not where the benchmark looks for it."""

    def __init__(self, family: str, looked: Sequence[Path]) -> None:
        places = ", ".join(str(p) for p in looked)
        super().__init__(
            f"family {family!r}: no {ITEMS} in {places}. The data is never downloaded at run "
            f"time: fetch the source repository and convert it once, as "
            f"bench/families/{family}/README.md says "
            f"(.venv/bin/python bench/families/{family}/convert.py --source PATH)."
        )


class InvalidItems(ValueError):
    """A converter produced items the benchmark cannot score."""


@dataclass(frozen=True, kw_only=True)
class ItemQuestion:
    qid: str
    text: str
    type: str
    evidence: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class NamespaceItems:
    namespace: str
    now: datetime
    memories: tuple[dict[str, Any], ...]
    questions: tuple[ItemQuestion, ...]


@dataclass(frozen=True, kw_only=True)
class Meta:
    """What a family's results must say about its data."""

    family: str
    source_url: str
    source_commit: str
    licence: str
    converted: str  # what was converted and how, in a sentence or two
    files: tuple[str, ...]  # the source files read, repository-relative
    extra: dict[str, Any] = field(default_factory=dict)


def check(namespaces: Sequence[NamespaceItems]) -> None:
    """Raise InvalidItems if ids repeat or a question names no memory of its namespace."""
    seen_ns: set[str] = set()
    seen_q: set[str] = set()
    for ns in namespaces:
        if ns.namespace in seen_ns:
            raise InvalidItems(f"namespace {ns.namespace!r} appears twice")
        seen_ns.add(ns.namespace)
        ids = [str(m["external_id"]) for m in ns.memories]
        if len(ids) != len(set(ids)):
            raise InvalidItems(f"{ns.namespace}: repeated external ids")
        known = set(ids)
        for q in ns.questions:
            if q.qid in seen_q:
                raise InvalidItems(f"question {q.qid!r} appears twice")
            seen_q.add(q.qid)
            if not q.evidence or not set(q.evidence) <= known:
                raise InvalidItems(f"{q.qid}: evidence {q.evidence} not among the memories")


def write_family(out: Path, meta: Meta, namespaces: Sequence[NamespaceItems]) -> dict[str, Any]:
    """Check and write ``items.jsonl.gz`` and ``meta.json`` into ``out``; return the meta."""
    check(namespaces)
    out.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(_namespace_json(ns), ensure_ascii=False) for ns in namespaces]
    payload = ("\n".join(lines) + "\n").encode("utf-8")
    # mtime=0: the same data gives the same bytes, so the checksum names the content.
    (out / ITEMS).write_bytes(gzip.compress(payload, mtime=0))
    record = {
        "family": meta.family,
        "source_url": meta.source_url,
        "source_commit": meta.source_commit,
        "licence": meta.licence,
        "converted": meta.converted,
        "files": list(meta.files),
        "counts": counts(namespaces),
        "sha256": hashlib.sha256((out / ITEMS).read_bytes()).hexdigest(),
        **meta.extra,
    }
    (out / META).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return record


def counts(namespaces: Sequence[NamespaceItems]) -> dict[str, Any]:
    types = Counter(q.type for ns in namespaces for q in ns.questions)
    sessions = {
        (ns.namespace, m["session_id"])
        for ns in namespaces
        for m in ns.memories
        if m.get("session_id")
    }
    return {
        "namespaces": len(namespaces),
        "memories": sum(len(ns.memories) for ns in namespaces),
        "sessions": len(sessions),
        "questions": sum(len(ns.questions) for ns in namespaces),
        "question_types": dict(sorted(types.items())),
    }


def _namespace_json(ns: NamespaceItems) -> dict[str, Any]:
    return {
        "namespace": ns.namespace,
        "now": ns.now.isoformat(),
        "memories": [_memory_json(m) for m in ns.memories],
        "questions": [
            {"qid": q.qid, "text": q.text, "type": q.type, "evidence": list(q.evidence)}
            for q in ns.questions
        ],
    }


def _memory_json(memory: Mapping[str, Any]) -> dict[str, Any]:
    stamp = memory.get("timestamp")
    if isinstance(stamp, datetime):
        return {**memory, "timestamp": stamp.isoformat()}
    return dict(memory)


@dataclass(frozen=True, kw_only=True)
class LoadedFamily:
    """A family as the benchmark uses it."""

    meta: dict[str, Any]
    path: Path  # its items.jsonl.gz (the cached store is named by its hash)
    conversations: list[Conversation]
    types: tuple[str, ...]  # Question.category indexes this


def find_items(family: str, roots: Sequence[Path]) -> Path:
    """Return the first ``<root>/<family>/items.jsonl.gz``; raise FamilyDataMissing."""
    looked = [root / family for root in roots]
    for folder in looked:
        if (folder / ITEMS).is_file():
            return folder / ITEMS
    raise FamilyDataMissing(family, looked)


def load_family(items: Path) -> LoadedFamily:
    """Read a family's converted files (``items`` and the meta.json beside it)."""
    meta_path = items.parent / META
    meta = json.loads(meta_path.read_text("utf-8")) if meta_path.exists() else {}
    rows = [json.loads(line) for line in gzip.decompress(items.read_bytes()).splitlines() if line]
    types = tuple(sorted({q["type"] for row in rows for q in row["questions"]}))
    conversations = [_conversation(i, row, types) for i, row in enumerate(rows)]
    return LoadedFamily(meta=meta, path=items, conversations=conversations, types=types)


def _conversation(index: int, row: Mapping[str, Any], types: Sequence[str]) -> Conversation:
    turns = tuple(
        {**m, "timestamp": _utc(m["timestamp"])} if m.get("timestamp") else dict(m)
        for m in row["memories"]
    )
    questions = tuple(
        Question(
            qid=str(q["qid"]),
            text=str(q["text"]),
            category=types.index(q["type"]),
            evidence=tuple(str(e) for e in q["evidence"]),
            flagged=False,
        )
        for q in row["questions"]
    )
    return Conversation(
        index=index,
        namespace=str(row["namespace"]),
        turns=turns,
        questions=questions,
        now=_utc(row["now"]),
    )


def _utc(text: str) -> datetime:
    stamp = datetime.fromisoformat(text)
    return stamp if stamp.tzinfo is not None else stamp.replace(tzinfo=UTC)
