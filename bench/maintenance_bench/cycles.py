"""Cycles on a copy of the base: each job in order through ``run_job``, timed, then a sync.

A cycle is ``secretary.runner.run_cycle``'s loop (every job of ``JOBS`` on every namespace with
work), timed per job, followed by ``store.vector.indexer.sync()`` as ``secretary dream`` does.
"""

from __future__ import annotations

import argparse
import shutil
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from benchkit import say

from maintenance_bench.base import BASE_NOW, NAMESPACE
from maintenance_bench.facts import (
    base_reach,
    by_source,
    created_ids,
    newest_record_id,
    operations_since,
    records_since,
    tokens_by_job,
)
from maintenance_bench.llm import COUNT_MODEL, LlmTarget, Meter, bench_settings
from maintenance_bench.related import related_store
from secretary.config import Settings
from secretary.jobs.registry import JOBS
from secretary.llm.provider import import_litellm
from secretary.runner import run_job
from store.service import Store

CYCLE_GAP = timedelta(hours=1)  # the clock moves this much between cycles


def run_cycle_measured(
    store: Store, settings: Settings, *, now: datetime, meter: Meter | None
) -> dict[str, Any]:
    """run_cycle's loop (every job on every namespace with work), timed per job, then a sync."""
    db = store.db
    first_record = newest_record_id(db)
    jobs: dict[str, dict[str, Any]] = {}
    started = time.perf_counter()
    for namespace in db.work.namespaces_with_work():
        for name in JOBS:
            mark = meter.mark() if meter else 0
            job_started = time.perf_counter()
            outcome = run_job(store, settings, name, namespace, now=now)
            entry = jobs.setdefault(name, {"calls": 0, "seconds": 0.0, "status": []})
            entry["seconds"] += time.perf_counter() - job_started
            entry["calls"] += int(outcome.stats.get("llm_calls", 0))
            entry["status"].append(outcome.status)
            entry["work"] = {
                k: v
                for k, v in outcome.stats.items()
                if isinstance(v, int | float | str) and k not in ("llm_calls", "cutoff")
            }
            if outcome.status == "failed":
                entry["error"] = outcome.message
            if meter:
                server = meter.since(mark)
                entry["server"] = server
    sync_started = time.perf_counter()
    store.indexer.sync()
    sync_seconds = time.perf_counter() - sync_started
    records = tokens_by_job(records_since(db, first_record))
    for name, entry in jobs.items():
        entry["seconds"] = round(entry["seconds"], 2)
        entry["status"] = "/".join(entry["status"])
        entry["tokens_in"], entry["tokens_out"] = records.get(name, (0, 0))
    created = by_source(db, NAMESPACE, created_ids(operations_since(db, first_record)))
    totals = {
        "calls": sum(e["calls"] for e in jobs.values()),
        "tokens_in": sum(e["tokens_in"] for e in jobs.values()),
        "tokens_out": sum(e["tokens_out"] for e in jobs.values()),
        "seconds": round(time.perf_counter() - started, 2),
        "index_sync_seconds": round(sync_seconds, 2),
    }
    if meter:
        servers = [e["server"] for e in jobs.values()]
        totals["server_requests"] = sum(s["requests"] for s in servers)
        totals["server_prompt_tokens"] = sum(s["prompt_tokens"] for s in servers)
        totals["server_completion_tokens"] = sum(s["completion_tokens"] for s in servers)
        totals["records_match_server"] = (
            totals["server_prompt_tokens"] == totals["tokens_in"]
            and totals["server_completion_tokens"] == totals["tokens_out"]
            and totals["server_requests"] == totals["calls"]
        )
    return {"jobs": jobs, "totals": totals, "new_memories": created}


def measure_size(
    size: int, args: argparse.Namespace, logs: Sequence[Mapping[str, Any]], llm: LlmTarget
) -> dict[str, Any]:
    """Copy the base store, then run the N=0, arrival and follow-up cycles on it."""
    base = related_store(size, args, logs)
    run_dir = args.work / f"run-n{size}"
    shutil.rmtree(run_dir, ignore_errors=True)
    started = time.perf_counter()
    shutil.copytree(Path(base["dir"]) / "data", run_dir / "data")
    copy_seconds = time.perf_counter() - started
    settings = bench_settings(run_dir / "data", api_base=llm.api_base)
    store = Store.open(settings, create=True)
    base_record = newest_record_id(store.db)
    try:
        # Load the model, Chroma (HNSW into memory), litellm and its tokenizer before timing.
        store.index.query(NAMESPACE, store.embedder.embed(["warm up"])[0], 1)
        import_litellm().token_counter(model=COUNT_MODEL, text="warm up")
        now = BASE_NOW
        cycles: list[dict[str, Any]] = []

        def cycle(kind: str, new_logs: int) -> dict[str, Any]:
            nonlocal now
            now += CYCLE_GAP
            result = run_cycle_measured(store, settings, now=now, meter=llm.meter)
            memories = store.db.memories.count(NAMESPACE, active_only=False)
            result |= {"kind": kind, "new_logs": new_logs, "store_memories": memories}
            cycles.append(result)
            t = result["totals"]
            say(f"n={size} {kind}: {t['calls']} calls, {t['tokens_in']}+{t['tokens_out']} "
                f"tokens, {t['seconds']:.1f} s, new memories {result['new_memories']}")  # fmt: skip
            return result

        cycle("nothing new", 0)
        cursor = 0
        for n in args.new:
            store.add_logs(NAMESPACE, logs[cursor : cursor + n], now=now)
            cursor += n
            cycle("arrival", n)
            for _ in range(args.max_follow_ups):
                if cycle("follow-up", 0)["totals"]["calls"] == 0:
                    break
        reach = base_reach(store.db, NAMESPACE, base["watermark"], base_record)
    finally:
        store.close()
    return {
        "memories": base["memories"],
        "base_reach": reach,
        "base": base,
        "copy_seconds": round(copy_seconds, 1),
        "cycles": cycles,
        "per_n": per_n(cycles),
        "zero_checks": zero_checks(cycles),
    }


def per_n(cycles: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each arrival with its follow-ups: calls, tokens, time and tokens per new memory."""
    out: list[dict[str, Any]] = []
    for cycle in cycles:
        if cycle["kind"] == "arrival":
            out.append({"new_logs": cycle["new_logs"], "cycles": [cycle]})
        elif cycle["kind"] == "follow-up" and out:
            out[-1]["cycles"].append(cycle)
    rows = []
    for group in out:
        arrival, follow = group["cycles"][0], group["cycles"][1:]
        extracted = arrival["new_memories"].get("extractor", 0)
        made: Counter[str] = Counter()
        for c in group["cycles"]:
            made.update(c["new_memories"])
        tokens = sum(c["totals"]["tokens_in"] + c["totals"]["tokens_out"] for c in group["cycles"])
        rows.append(
            {
                "new_logs": group["new_logs"],
                "extracted_memories": extracted,
                "memories_made": dict(made),
                "arrival_calls": arrival["totals"]["calls"],
                "follow_up_calls": sum(c["totals"]["calls"] for c in follow),
                "follow_up_cycles": len(follow),
                "settled": group["cycles"][-1]["totals"]["calls"] == 0,
                "tokens_in": sum(c["totals"]["tokens_in"] for c in group["cycles"]),
                "tokens_out": sum(c["totals"]["tokens_out"] for c in group["cycles"]),
                "tokens_per_new_memory": round(tokens / extracted, 1) if extracted else None,
                "tokens_per_log_line": round(tokens / group["new_logs"], 1),
                "seconds": round(sum(c["totals"]["seconds"] for c in group["cycles"]), 1),
                "calls_by_job": {
                    job: sum(c["jobs"][job]["calls"] for c in group["cycles"]) for job in JOBS
                },
                "tokens_by_job": {
                    job: sum(
                        c["jobs"][job]["tokens_in"] + c["jobs"][job]["tokens_out"]
                        for c in group["cycles"]
                    )
                    for job in JOBS
                },
            }
        )
    return rows


def zero_checks(cycles: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Cycles with nothing new: the first one and every follow-up that ended a settling run."""
    checks = []
    for position, cycle in enumerate(cycles):
        follows_settling = cycle["kind"] == "follow-up" and cycle["totals"]["calls"] == 0
        if cycle["kind"] == "nothing new" or follows_settling:
            checks.append(
                {
                    "cycle": position,
                    "kind": cycle["kind"],
                    "calls": cycle["totals"]["calls"],
                    "server_requests": cycle["totals"].get("server_requests"),
                    "tokens": cycle["totals"]["tokens_in"] + cycle["totals"]["tokens_out"],
                    "seconds": cycle["totals"]["seconds"],
                }
            )
    return checks
