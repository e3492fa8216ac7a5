"""The results file: run facts, one entry per size, merged into what earlier runs wrote."""

from __future__ import annotations

import argparse
import json
import os
import platform
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchkit import git, package_version, say

from latency_bench.common import BARE_N_RESULTS, BATCH, MIB, WARMUP, dir_mib
from latency_bench.prepare import Prepared
from latency_bench.report import render_markdown


def run_info() -> dict[str, Any]:
    meminfo = Path("/proc/meminfo").read_text().split("\n", 1)[0].split()
    # Code only: bench/results changes with every size this run writes.
    dirty = bool(
        git("status", "--porcelain", "--", "store", "secretary", "bench", ":!bench/results")
    )
    return {
        "date_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "git_commit": git("rev-parse", "--short", "HEAD") or "uncommitted",
        "worktree_dirty": dirty,
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpu_count": os.cpu_count(),
            "memory_gib": round(int(meminfo[1]) / 1024 / 1024, 1),
        },
        "versions": {
            name: package_version(name)
            for name in ("chromadb", "onnxruntime", "sqlalchemy", "bm25s", "fastapi", "uvicorn")
        },
    }


def size_result(prep: Prepared, measured: dict[str, Any]) -> dict[str, Any]:
    state = prep.state
    ingest_ = state.get("ingest", {})
    index_ = state.get("index", {})

    def rate(record: dict[str, Any]) -> float | None:
        return round(record["memories"] / record["seconds"], 1) if record.get("seconds") else None

    return {
        **run_info_short(),
        "memories": prep.size,
        "prepared_at": state.get("created_at"),
        "ingest": {**ingest_, "memories_per_s": rate(ingest_)},
        "lexical_before_sync": state.get("lexical_before_sync"),
        "index": {**index_, "memories_per_s": rate(index_)},
        "disk_mib": {
            "sqlite": round(
                sum(f.stat().st_size for f in prep.data_dir.glob("secretary.db*")) / MIB, 1
            ),
            "chroma": dir_mib(prep.data_dir / "chroma"),
        },
        **measured,
    }


def run_info_short() -> dict[str, Any]:
    return {"measured_at": datetime.now(UTC).isoformat(timespec="seconds")}


def merge_results(
    path: Path, measured: dict[str, dict[str, Any]], notes: list[str]
) -> dict[str, Any]:
    results: dict[str, Any] = {"sizes": {}}
    if path.exists():
        results = json.loads(path.read_text())
    results["run"] = info = run_info()
    results["notes"] = notes
    # Sizes are measured in different runs: each keeps the commit it was measured at.
    commit = info["git_commit"] + (" with uncommitted changes" if info["worktree_dirty"] else "")
    results.setdefault("sizes", {}).update(
        {size: {**entry, "commit": commit} for size, entry in measured.items()}
    )
    return results


def notes(args: argparse.Namespace) -> list[str]:
    return [
        f"Queries: {args.queries} generated questions (bench/corpus.py), after {WARMUP} warm-up"
        " searches with other questions (a repeated question would reuse its embedding);"
        " k=10, reinforce=false; percentiles over single sequential searches.",
        f"Bare Chroma: the same ONNX embedder + collection.query(n_results={BARE_N_RESULTS}),"
        " default include, on the same collection (one vector per memory), interleaved"
        " with our searches in the same process. Our search asks Chroma for"
        " retrieval.dense_candidates (200) vectors and also runs BM25, SQL reads and ranking.",
        "HTTP: `secretary serve` (default settings, INFO logging to a file) in a subprocess, one"
        " httpx keep-alive client, sequential requests (concurrency 1); RSS from /proc/PID/status"
        " of the server, which embeds Chroma (HNSW in memory) and the ONNX model.",
        f"Ingest: Store.add_memories, batches of {BATCH}, each one committed (SQLite WAL,"
        " synchronous=NORMAL); the vectors follow through the outbox.",
        f"Indexing: Store.indexer.sync() with the real model for sizes up to {args.real_max:,};"
        " larger sizes hold synthetic vectors (see each size).",
        "The machine was shared with other work during the runs; load averages are recorded.",
    ]


def write_results(args: argparse.Namespace, measured: dict[str, dict[str, Any]]) -> None:
    results = merge_results(args.out, measured, notes(args))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(render_markdown(results))
    say(f"wrote {args.out} and {args.out.with_suffix('.md')}")
