"""The Markdown rendering of the latency results (the JSON file holds the same numbers)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from latency_bench.common import WARMUP

TARGETS = [
    # (label, path into a size's result, limit, smaller is better)
    ("search p95 in-process, incl. query embedding (ms)",
     ("in_process", "search", "p95_ms"), 30, True),
    ("the same, issue 11's limit (ms)", ("in_process", "search", "p95_ms"), 20, True),
    ("search p95 over HTTP (ms)", ("http", "search", "p95_ms"), 40, True),
    ("ours / bare Chroma at p95", ("in_process", "ratio_p95"), 3, True),
    ("server RSS after warm-up and searches (MiB)",
     ("http", "rss_mib", "after_searches", "VmRSS"), 500, True),
    ("ingest, memories/s made durable", ("ingest", "memories_per_s"), 500, False),
    ("indexing, every embedding, real model (memories/s)",
     ("index", "memories_per_s"), 50, False),
    ("restart to warm at 1M, saved lexical index (s)",
     ("restart", "restart", "warm_s"), 10, True),
    ("restart to warm at 1M after writes while down (s)",
     ("restart", "restart_after_writes", "warm_s"), 10, True),
]  # fmt: skip
# Targets measured at another size than TARGET_SIZE.
TARGET_SIZES = {"restart": "1000000"}


TARGET_SIZE = "100000"


def _dig(data: Any, path: Sequence[str]) -> Any:
    for key in path:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def render_markdown(results: dict[str, Any]) -> str:
    info, sizes = results["run"], results["sizes"]
    machine = info["machine"]
    dirty = " (with uncommitted changes)" if info.get("worktree_dirty") else ""
    lines = [
        "# Latency and scale",
        "",
        f"Written by `python bench/latency.py` (raw numbers: `latency.json`). Last run"
        f" {info['date_utc']}, commit `{info['git_commit']}`{dirty}, {machine['platform']},"
        f" {machine['cpu_count']} CPUs, {machine['memory_gib']} GiB RAM, Python"
        f" {machine['python']}; "
        + ", ".join(f"{k} {v}" for k, v in info["versions"].items())
        + ".",
        "",
        "| memories | vectors | ingest mem/s | index mem/s | in-process p50 / p95 / p99 ms"
        " | HTTP p50 / p95 / p99 ms | bare Chroma p50 / p95 / p99 ms | ours/bare p50 / p95"
        " | server RSS MiB (peak) |",
        "|---:|---:|---:|---:|---|---|---|---|---:|",
        *(_row(sizes[size]) for size in sorted(sizes, key=int)),
        "",
        "## Against the targets",
        "",
        "| target | limit | measured | met |",
        "|---|---:|---:|---|",
        *(_target_row(sizes, *target) for target in TARGETS),
        *_restart_table(sizes),
        "",
        "## How it was measured",
        "",
        *(f"- {note}" for note in results.get("notes", [])),
    ]
    for size in sorted(sizes, key=int):
        lines += ["", f"### {int(size):,} memories", "", *_size_notes(sizes[size])]
    return "\n".join(lines) + "\n"


def _target_row(
    sizes: dict[str, Any], label: str, path: Sequence[str], limit: float, smaller: bool
) -> str:
    value, where = _target_value(sizes, path)
    if value is None:
        return f"| {label} | {limit} | not measured | - |"
    met = value <= limit if smaller else value >= limit
    return f"| {label} | {limit} | {value} ({where}) | {'yes' if met else '**no**'} |"


def _target_value(sizes: dict[str, Any], path: Sequence[str]) -> tuple[Any, str]:
    """Take the value at 100k; ingest and indexing fall back to the largest size measured."""
    candidates = [TARGET_SIZES.get(path[0], TARGET_SIZE)]
    if path[0] in ("ingest", "index"):
        candidates += sorted(sizes, key=int, reverse=True)
    for size in candidates:
        entry = sizes.get(size, {})
        if path[0] == "index" and _dig(entry, ("index", "mode")) != "real":
            continue
        value = _dig(entry, path)
        if value is not None:
            return value, f"n={int(size):,}"
    return None, ""


def _restart_table(sizes: dict[str, Any]) -> list[str]:
    measured = [size for size in sorted(sizes, key=int) if "restart" in sizes[size]]
    if not measured:
        return []
    lines = [
        "",
        "## Restarts",
        "",
        "`--restart`: the lexical index built from SQL (what every start cost before it was"
        " saved), mapped from its saved files, and `secretary serve` restarted on the store: to"
        " /healthz warm, and again after writes made while it was down (see each size).",
        "",
        "| memories | saved index MiB | build from SQL s | map saved s | restart: warm s"
        " | RSS MiB warm / after searches | after writes: warm s | RSS MiB warm / after searches |",
        "|---:|---:|---:|---:|---:|---|---:|---|",
    ]
    for size in measured:
        block = sizes[size]["restart"]
        plain, written = block.get("restart", {}), block.get("restart_after_writes", {})
        lines.append(
            f"| {int(size):,} | {block.get('saved_index_mib')} | {block.get('build_from_sql_s')}"
            f" | {block.get('open_saved_s')} | {plain.get('warm_s')} | {_rss_pair(plain)}"
            f" | {written.get('warm_s')} | {_rss_pair(written)} |"
        )
    return lines


def _rss_pair(block: dict[str, Any]) -> str:
    rss = block.get("rss_mib", {})
    if not rss:
        return "-"
    return f"{rss['after_warm']['VmRSS']} / {rss['after_searches']['VmRSS']}"


def _ms3(block: Any) -> str:
    if not isinstance(block, dict):
        return "-"
    return f"{block['p50_ms']} / {block['p95_ms']} / {block['p99_ms']}"


def _row(entry: dict[str, Any]) -> str:
    inproc, http, index_ = entry.get("in_process", {}), entry.get("http", {}), entry["index"]
    rss = _dig(http, ("rss_mib", "after_searches"))
    ratio = f"{inproc['ratio_p50']} / {inproc['ratio_p95']}" if "ratio_p95" in inproc else "-"
    vectors = f"{inproc['vectors']:,}" if "vectors" in inproc else "-"
    indexed = index_.get("memories_per_s") or "-"
    if index_.get("mode") == "pool":
        indexed = "synthetic vectors"
    if entry.get("sql_only"):
        indexed = "not built (SQL + BM25 only)"
    return (
        f"| {entry['memories']:,} | {vectors} | {entry['ingest'].get('memories_per_s') or '-'}"
        f" | {indexed} | {_ms3(inproc.get('search'))} | {_ms3(http.get('search'))}"
        f" | {_ms3(inproc.get('bare'))} | {ratio}"
        f" | {_rss_cell(rss)} |"
    )


def _rss_cell(rss: dict[str, float] | None) -> str:
    return f"{rss['VmRSS']} ({rss['VmHWM']})" if rss else "-"


def _size_notes(entry: dict[str, Any]) -> list[str]:
    ingest_, index_ = entry["ingest"], entry["index"]
    notes = [
        f"- Store prepared {entry['prepared_at']}, measured {entry['measured_at']}"
        + (f" at commit `{entry['commit']}`." if "commit" in entry else "."),
        f"- Ingest: {ingest_.get('memories', 0):,} memories in {ingest_.get('seconds', 0):.0f} s"
        f" = {ingest_.get('memories_per_s')} memories/s (load average at the end:"
        f" {ingest_.get('load_average')}).",
    ]
    busy = [
        name
        for name, record in (("ingest", ingest_), ("index", index_))
        if max((record.get("load_average") or [0.0])[:2]) > (os.cpu_count() or 1)
    ]
    if busy:
        notes.append(
            f"- The {' and '.join(busy)} ran while the machine was busy (load average above the"
            " CPU count): treat those rates as lower bounds."
        )
    if index_.get("mode") == "pool":
        pool = index_.get("pool", {})
        notes.append(
            f"- Index: synthetic vectors. Each text's vector is a normalised mix of two of"
            f" {pool.get('texts'):,} real embeddings of generated texts, written by the real"
            f" indexer and VectorIndex ({index_.get('memories', 0):,} memories in"
            f" {index_.get('seconds', 0):.0f} s, {index_.get('memories_per_s')} memories/s: a fill"
            " rate, not the model's). Query embeddings and the search path are real."
        )
    elif not index_.get("memories"):
        notes.append("- Index: not built (`--sql-only`): SQL and the lexical index only.")
    else:
        notes.append(
            f"- Index: real model, {index_.get('memories', 0):,} memories in"
            f" {index_.get('seconds', 0):.0f} s = {index_.get('memories_per_s')} memories/s"
            f" (load average at the end: {index_.get('load_average')})."
        )
    notes += _search_notes(entry)
    return notes


def _search_notes(entry: dict[str, Any]) -> list[str]:
    notes = []
    check = entry.get("lexical_before_sync")
    if check:
        notes.append(
            f"- Before any embedding ({check['outbox_pending']:,} memories in the outbox), a"
            f" search for memory {check['memory_id']} by its text: found={check['found']}"
            f" (rank {check['rank']}), {check['seconds_incl_lexical_build']} s including the"
            " BM25 build."
        )
        if "searches_without_vectors" in check:
            block = check["searches_without_vectors"]
            notes.append(
                f"- Searches in that state (BM25 + SQL, no vectors yet), {block['n']} questions:"
                f" p50 / p95 / p99 {_ms3(block)} ms."
            )
    inproc, http = entry.get("in_process", {}), entry.get("http", {})
    if "breakdown" in inproc:
        parts = "; ".join(
            f"{name} p50 {v['p50_ms']} ms, p95 {v['p95_ms']} ms"
            for name, v in inproc["breakdown"].items()
        )
        notes.append(f"- Parts of a search timed alone: {parts}.")
    if "cold_first_search_ms" in inproc:
        notes.append(
            f"- First search after opening, in-process (model load, BM25 build, HNSW load):"
            f" {inproc['cold_first_search_ms']} ms."
        )
    if "warm_s" in http:
        notes.append(
            f"- The server listened {http['listening_s']} s after its start and had warmed up"
            f" (model, BM25, collection: /healthz warm) {http['warm_s']} s after it; its first"
            f" request then took {http['cold_first_request_ms']} ms."
        )
    if http:
        notes.append(f"- Server RSS (MiB): {http['rss_mib']}.")
    if "bare_process_rss_mib" in inproc:
        notes.append(
            "- For scale, a process doing only the bare baseline (embedded Chroma with this"
            f" collection + the ONNX model, {WARMUP} queries):"
            f" {inproc['bare_process_rss_mib']} MiB."
        )
    restart = entry.get("restart", {})
    if "writes_while_down" in restart:
        writes = restart["writes_while_down"]
        notes.append(
            f"- Restart after writes: on a copy of the store ({writes['copy_s']} s to copy), one"
            f" memory forgotten by the writing process ({writes['forget_s']} s: it merged and"
            f" saved the lexical index without it), then {writes['new']:,} memories ingested"
            f" ({writes['ingest_s']} s) and {writes['edited']} edited, their vectors written"
            f" ({writes['vectors_s']} s); the server then caught up with them while warming up."
            f" Restarts: {restart.get('restart')}; after writes:"
            f" {restart.get('restart_after_writes')}."
        )
    loads = [inproc.get("load_average_before"), http.get("load_average_after")]
    if any(loads):
        notes.append(f"- Load average (1/5/15 min) before and after the measurements: {loads}.")
    if "durations_s" in entry:
        notes.append(f"- Wall time of this run's steps (s): {entry['durations_s']}.")
    return notes
