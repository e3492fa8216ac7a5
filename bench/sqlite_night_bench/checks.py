"""What a night left in the store, per namespace, to compare nights run at different
concurrency: memories by status, a digest of every memory's (type, status, content), relations
by type; and the night's records by job and outcome. Read-only SQL over ``store.models``."""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from fleet_bench.checks import records_report
from sqlalchemy import func, select

from store.db import make_engine
from store.models import Memory, MemoryRelation


def store_facts(database_url: str, night_started: datetime) -> dict[str, Any]:
    """Per namespace: counts by status, the contents digest, relations by type; the records of
    runs started at or after ``night_started`` by job:status; tokens they hold."""
    engine = make_engine(database_url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                select(Memory.namespace, Memory.type, Memory.status, Memory.content)
            ).all()
            relations = connection.execute(
                select(MemoryRelation.namespace, MemoryRelation.type, func.count()).group_by(
                    MemoryRelation.namespace, MemoryRelation.type
                )
            ).all()
        records = records_report(engine, night_started)
    finally:
        engine.dispose()
    contents: dict[str, list[str]] = defaultdict(list)
    statuses: dict[str, Counter[str]] = defaultdict(Counter)
    for ns, kind, status, content in rows:
        contents[ns].append(f"{kind}\x1f{status}\x1f{content}")
        statuses[ns][status] += 1
    edges: dict[str, dict[str, int]] = defaultdict(dict)
    for ns, kind, count in relations:
        edges[ns][kind] = int(count)
    namespaces = {
        ns: {
            "memories": sum(statuses[ns].values()),
            "by_status": dict(sorted(statuses[ns].items())),
            "contents_sha": hashlib.sha256("\x1e".join(sorted(contents[ns])).encode()).hexdigest(),
            "relations": dict(sorted(edges[ns].items())),
        }
        for ns in sorted(contents)
    }
    return {
        "namespaces": namespaces,
        "memories": sum(n["memories"] for n in namespaces.values()),
        "relations": sum(sum(n["relations"].values()) for n in namespaces.values()),
        "records": records["by_job"],
        "tokens": {"in": records["tokens_in"], "out": records["tokens_out"]},
    }


def compare(base: Mapping[str, Any], other: Mapping[str, Any]) -> dict[str, Any]:
    """Namespaces whose memory count, contents digest or relations differ between two nights."""
    names = sorted(set(base["namespaces"]) | set(other["namespaces"]))
    missing = {"memories": None, "contents_sha": None, "relations": None, "by_status": None}
    differing: dict[str, list[str]] = {"memories": [], "contents": [], "relations": []}
    for ns in names:
        a = base["namespaces"].get(ns, missing)
        b = other["namespaces"].get(ns, missing)
        if a["memories"] != b["memories"]:
            differing["memories"].append(ns)
        if a["contents_sha"] != b["contents_sha"]:
            differing["contents"].append(ns)
        if a["relations"] != b["relations"]:
            differing["relations"].append(ns)
    return {
        "namespaces": len(names),
        "same_memory_count": len(names) - len(differing["memories"]),
        "same_contents": len(names) - len(differing["contents"]),
        "same_relations": len(names) - len(differing["relations"]),
        "differing": {key: value[:10] for key, value in differing.items() if value},
        "identical": not any(differing.values()),
    }
