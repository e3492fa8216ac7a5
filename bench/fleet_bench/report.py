"""The results file (one entry per configuration, each with the run that measured it) and its
Markdown: a summary row per configuration, the issue's targets, then each configuration."""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchkit import git, package_version
from maintenance_bench.llm import COUNT_MODEL

from fleet_bench import judge

NOTES = [
    "The scripted model answers every call after the configured latency; calls overlap (a "
    "thread per request). Tokens are counted by the server with "
    f"litellm.token_counter(model={COUNT_MODEL!r}) over the request's messages (prompt) and the "
    "reply text (completion), the response_format schema apart (not in the prompt figure); "
    "the daemons' records hold the same counts (the server reports them as usage).",
    "Peak RSS is the larger of VmHWM and the most VmRSS sampled every 0.5 s, per daemon process.",
    "Throughput is namespaces (units) done per second of wall time; wall time runs from POST "
    "/v1/dream to the request's finished_at.",
    "The machine's two cores are shared with the PostgreSQL server, the Chroma server, the "
    "model server (in the benchmark's process) and anything else running: each configuration "
    "gives the machine's busy share over its night and the CPU seconds of each daemon.",
    "Reading the results on one two-core machine: with a model answering in 1 s a night there "
    "is bound by the CPU, not the model (one daemon keeps the machine 80-90% busy), so more "
    "daemons on the same cores cannot go faster. With a model answering in 5 s (the *-l5 "
    "configurations; hosted models often take 3-10 s for structured output) one daemon leaves "
    "the machine mostly idle (26% busy at 300 namespaces), and a second and third daemon add "
    "their calls in flight, until the two cores are the bound again (86% busy with three). At "
    "100 namespaces 48 slots are filled in about two waves of ~30 s units, which caps what a "
    "third daemon can show. What the extra daemons also show is correctness: every unit once, "
    "a killed daemon's units taken over, the rate limit held across them.",
    "Code changed between configurations only where a configuration names another commit. What "
    "took the 1,000-namespace night from 1,600 s (eb45140) to under 600 s: runs stopped queueing "
    "on the index-sync lease (8cb5f0c); the embedder runs one inference at a time (2dbb745); "
    "run leases are renewed when due, not each time another run starts (3955bae: 52 lease "
    "writes per namespace before); and Chroma saves each collection's graph every 20 changes "
    "(48f3b8c): with Chroma's default of 1,000 its write-ahead log kept all 300,000 vectors and "
    "every write read it, so the Chroma server spent 1,096 CPU-seconds on the night against "
    "70 after (bench/results/chroma_sync.md). The kill night at 1,000 namespaces and the "
    "100-namespace nights ran before a run's index sync was limited to its own namespace "
    "(bcbf9fa): in n1000-d3-l1-kill one unit drained every namespace's outbox for ten minutes "
    "while the other runs kept adding to it, and finished 190 s after all the others (done at "
    "522 s). The 300-namespace nights ran after it, and n1000-d1-l1 was run again after it "
    "(521 s; 549 s at 48f3b8c), on a PostgreSQL without pg_stat_statements (loaded for the "
    "earlier nights, to count their statements).",
    "The rate-limit nights (2026-11-28). n1000-d3-l1-rpm600: three daemons on two cores made "
    "at most 495 requests in any 60 s (the cores 100% busy; three daemons spent about twice "
    "the CPU of one on the same night), so its limit was never pressed; n300-d3-l1-rpm240 "
    "presses on its limit (240 requests in its busiest 60 s, none over, no 429 from a provider "
    "with the same limit). n200-d2-l1-provider429 sets no limit against a provider allowing "
    "400 a minute: about 90 calls are answered 429 with Retry-After and wait, every run "
    "finishes. Before 2352498 a 429 counted as one of a call's four attempts, and the same "
    "night, run beside another benchmark, failed an auditor run after four 429s in a row.",
    "Where a namespace's work goes on the host (2026-12-01, e550370, every job of 12 namespaces "
    "of the 100-namespace store run in one process against a model answering at once): about "
    "0.8 s each, of which embedding its ~25 new texts 0.2 s (ONNX), 390 SQL statements 0.16 s "
    "(166 transactions committed), litellm 16 ms a call (5 calls) and the rest SQLAlchemy and "
    "the jobs' own Python; in the 100-namespace night the daemon spent 0.64 CPU-seconds per "
    "namespace. No single step dominates, which is why a 1 s model leaves two cores the bound.",
    "n10000-d1-l1 (2026-12-03, 54a6184): 10,000 namespaces of 100 memories (a store prepared in "
    "35 min: 1,000,000 memories through the API at ~1,600/s, their vectors at ~800/s into one "
    "Chroma server bounded as docs/operations.md says, 10,000 collections, 11 GB RSS) dreamed "
    "in 6,984 s by one daemon: every unit once, 0 failed runs, 51,562 calls. The machine was "
    "98% busy; for about 50 min of the night two QA helpers and a CI run shared the two cores "
    "(1.3 namespaces/s then, 1.6 alone). Its peak RSS, 917 MiB, grew with the namespaces "
    "served (526 MiB at 100, 566 at 1,000, 731 at 4,579, about 40 KB each): a third of that "
    "was a Chroma collection handle kept per namespace, bounded to the last 256 since 74587b0 "
    "(not rerun); the rest is not found. An hour in, 88,580 of the night's new memories over "
    "3,471 namespaces waited in the outbox: runs skip the index sync while another holds it, "
    "and the daemon's worker drains it behind the night (lexical search finds them meanwhile). "
    "Its bookkeeping was the cheap form of 54a6184 (progress counted in SQL, outcomes stored "
    "ten times less often than they take).",
    "Every night above but those run on 2026-12-04 ran with collections saving their graph "
    "every 20 changes. On "
    "2026-12-04 (d8da0f5) that was found to lose vectors once Chroma lets go of a graph (a "
    "server past its config's capacity, an embedded one past a fifth of its open-file limit): "
    "read again from disk, a graph lacks what was written since its last save, and a "
    "namespace of fewer than 20 vectors fails every query. The nights up to 1,000 namespaces "
    "stayed under the capacity (4,000); in n10000-d1-l1 the graphs of some 6,000 namespaces "
    "were let go during the night, and a search there afterwards would have missed up to 19 "
    "of its newest vectors (what the night checks, units and extraction, does not search). "
    "Collections now save at every write (the upsert's cost measured the same at 30,000 "
    "vectors). n1000-d1-l1 was run again with it (2026-12-04): at 163aa97, beside a test run "
    "and two helpers' work, 629.5 s; at bd65e95 alone on the machine, 564.2 s (521 s at "
    "9c12579), the Chroma server's CPU 80 s against 65 and the daemon's 743 CPU-seconds "
    "against 664 (0.74 s a namespace against 0.66): what landed since 2026-11-28 costs the "
    "daemon about 12% more CPU a namespace, not yet found where. n1000-d1-l5 "
    "(8453f00) ran beside two helpers' benchmarks too, the machine 100% busy: 1,839 s, 0.54 "
    "namespaces/s where 16 calls of 5 s allow about 0.64; its two- and three-daemon nights "
    "were begun and stopped (load average 16: they would have measured the other work), so "
    "the 1,000-namespace scaling at 5 s is not measured.",
]


def run_info(command: str) -> dict[str, Any]:
    return {
        "date_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "git_commit": git("rev-parse", "--short", "HEAD") or "uncommitted",
        "worktree_dirty": bool(git("status", "--porcelain", "--", "store", "secretary")),
        "command": command,
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpu_count": os.cpu_count(),
            "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30),
            "load_average_before": [round(x, 2) for x in os.getloadavg()],
        },
        "versions": {
            name: package_version(name)
            for name in ("litellm", "chromadb", "onnxruntime", "psycopg", "sqlalchemy")
        },
    }


def load(path: Path) -> dict[str, Any]:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return {}


def merge(
    path: Path, name: str, measured: Mapping[str, Any], info: Mapping[str, Any]
) -> dict[str, Any]:
    """The results at ``path`` with ``name``'s entry replaced by this run's."""
    results = load(path)
    nights = dict(results.get("nights", {}))
    nights[name] = {"run": dict(info), **measured, "problems": judge.problems(measured)}
    return {
        **results,
        "benchmark": "fleet: a night's dreaming for many namespaces (issue 27)",
        "notes": NOTES,
        "nights": nights,
        "targets": judge.targets(nights),
    }


def rejudged(results: Mapping[str, Any]) -> dict[str, Any]:
    """The results with every night's problems and the targets judged again (by this code)."""
    nights = {
        name: {**night, "problems": judge.problems(night)}
        for name, night in results.get("nights", {}).items()
    }
    return {**results, "notes": NOTES, "nights": nights, "targets": judge.targets(nights)}


def merge_coordination(
    path: Path, measured: list[dict[str, Any]], info: Mapping[str, Any]
) -> dict[str, Any]:
    """The results at ``path`` with the bookkeeping measures replaced by these."""
    results = load(path)
    results.setdefault("nights", {})
    results.setdefault("targets", judge.targets(results["nights"]))
    results.setdefault("notes", NOTES)
    return {**results, "coordination": {"run": dict(info), "sizes": measured}}


def coordination_rows(coordination: Mapping[str, Any]) -> list[str]:
    run = coordination["run"]
    rows = [
        f"Measured {run['date_utc']}, commit {run['git_commit']}, `{run['command']}`: on an "
        "empty store of its own, one dream request's firing opened with N units; 200 claims "
        "(16 other units running) each followed by the unit's finish with six outcomes and the "
        "progress read an opener polls every 0.5 s; then, every unit done, the outcomes of all "
        "units read and written to the request, which the opener does each time the count of "
        "units done has changed since its last poll.",
        "",
        "| units | open the firing | claim p50 / p95 | finish p50 / p95 | progress poll p50 / p95 "
        "| all outcomes read | written to the request |",
        "|---|---|---|---|---|---|---|",
    ]
    for m in coordination["sizes"]:
        rows.append(
            f"| {m['units']:,} | {m['open_firing_seconds']} s | {m['claim_ms']['p50']} / "
            f"{m['claim_ms']['p95']} ms | {m['finish_ms']['p50']} / {m['finish_ms']['p95']} ms | "
            f"{m['progress_poll_ms']['p50']} / {m['progress_poll_ms']['p95']} ms | "
            f"{m['outcomes_read_seconds']} s ({m['all_outcomes']:,}) | "
            f"{m['request_progress_write_seconds']} s |"
        )
    return rows


def _mib(values: Mapping[str, float]) -> str:
    return " / ".join(f"{v:.0f}" for v in values.values()) or "-"


def _yes(met: bool | None) -> str:
    return {True: "yes", False: "**no**", None: "not run"}[met]


def _kilo(number: int) -> str:
    return f"{number / 1000:,.0f}k" if number >= 10_000 else f"{number:,}"


def summary_rows(nights: Mapping[str, Mapping[str, Any]]) -> list[str]:
    head = (
        "| configuration | namespaces | daemons x concurrency | latency | wall | calls | calls/s "
        "| peak in flight | tokens in / out | peak RSS per daemon (MiB) | run twice | lost "
        "| limit / busiest 60 s | 429s |"
    )
    rows = [head, "|" + "---|" * 14]
    for name, r in nights.items():
        night, calls = r["night"], r.get("calls", {})
        tokens = calls.get("tokens", {})
        limit = calls.get("rpm_limit") or "none"
        exceeded = " **exceeded**" if calls.get("rpm_exceeded") else ""
        wall = f"{r['wall_seconds']:.0f} s" + (" (timed out)" if r.get("timed_out") else "")
        rows.append(
            f"| {name} | {night['sizes']['namespaces']:,} | {night['daemons']} x "
            f"{night['concurrency']} | {night['latency']:g} s | {wall} | "
            f"{calls.get('answered', 0):,} | {calls.get('calls_per_second', 0):.2f} | "
            f"{calls.get('peak_in_flight', 0)} | {_kilo(tokens.get('prompt', 0))} / "
            f"{_kilo(tokens.get('completion', 0))} | {_mib(r.get('daemon_memory_mib', {}))} | "
            f"{judge.units_run_twice(r)} | {judge.units_lost(r)} | {limit} / "
            f"{calls.get('busiest_60s_all_requests', 0)}{exceeded} | "
            f"{calls.get('rate_limited_429', 0)} |"
        )
    return rows


def target_rows(targets: list[Mapping[str, Any]]) -> list[str]:
    rows = ["| target | wanted | measured | met |", "|---|---|---|---|"]
    for t in targets:
        unit = t["unit"] if t["unit"] in ("", "x") else f" {t['unit']}"
        measured = "-" if t["measured"] is None else f"{t['measured']}{unit}"
        rows.append(f"| {t['target']} | {t['wanted']} | {measured} | {_yes(t['met'])} |")
    return rows


def night_section(name: str, r: Mapping[str, Any]) -> list[str]:
    run, night, store = r["run"], r["night"], r.get("store", {})
    calls, units, cpu = r.get("calls", {}), r.get("units", {}), r.get("cpu", {})
    lines = [
        f"### {name}",
        "",
        f"{night['describe']}; {store.get('sizes', {}).get('memories', '?')} memories and "
        f"{night['sizes']['lines_lo']}"
        + (
            f"-{night['sizes']['lines_hi']}"
            if night["sizes"]["lines_hi"] != night["sizes"]["lines_lo"]
            else ""
        )
        + " new log lines per namespace.",
        "",
        f"- Run: {run['date_utc']}, commit {run['git_commit']}"
        + (" (working tree differs)" if run.get("worktree_dirty") else "")
        + f", `{run['command']}`; load average before {run['machine']['load_average_before']}.",
        f"- Store: prepared once ({store.get('ingest', {}).get('memories', 0):,} memories and "
        f"{store.get('ingest', {}).get('lines', 0):,} lines through the store's API in "
        f"{store.get('ingest', {}).get('seconds', 0):,.0f} s, "
        f"{store.get('vectors', {}).get('memories', 0):,} pool vectors in "
        f"{store.get('vectors', {}).get('seconds', 0):,.0f} s; database "
        f"{store.get('database_mib', 0):,.0f} MiB, Chroma {store.get('chroma_mib', 0):,.0f} MiB); "
        f"copied for this night in {r.get('copy_seconds')} s.",
        f"- Night: request {r.get('request_status')} in {r.get('wall_seconds')} s; units "
        f"{units.get('by_state', {})}, by daemon pid {units.get('holders', {})}; throughput "
        f"{judge.throughput(r):.2f} namespaces/s.",
        f"- Calls: {calls.get('answered', 0):,} answered ({calls.get('by_job', {})}), "
        f"{calls.get('rate_limited_429', 0)} answered 429, {calls.get('repairs', 0)} repairs, "
        f"{calls.get('errors', 0)} errors; peak in flight {calls.get('peak_in_flight')} "
        f"(from the log: {calls.get('peak_in_flight_from_log')}); busiest 60 s: "
        f"{calls.get('busiest_60s_all_requests')} requests, {calls.get('busiest_60s_answered')} "
        f"answered (limit {calls.get('rpm_limit') or 'none'}).",
        f"- Tokens: {calls.get('tokens', {})} by the server; the records say "
        f"{r.get('records', {}).get('tokens_in')} in / {r.get('records', {}).get('tokens_out')} "
        "out.",
        f"- CPU: machine busy {cpu.get('machine_busy_share', 0):.0%} over the night; CPU seconds "
        f"{cpu.get('seconds', {})}; load average at the end {cpu.get('load_average_end')}.",
        f"- Memory (MiB): daemons {r.get('daemon_memory_mib', {})}, Chroma server "
        f"{r.get('chroma_memory_mib')}.",
        f"- Extraction: {r.get('extraction', {}).get('memories_made', 0):,} memories made of "
        f"{r.get('extraction', {}).get('memories_expected', 0):,} expected; namespaces with "
        f"lines left {r.get('extraction', {}).get('namespaces_with_lines_left')}; lines "
        f"extracted twice {r.get('extraction', {}).get('lines_extracted_twice')}; lines sent "
        f"to the model twice {r.get('lines_sent_twice', {})}.",
        f"- Unit outcomes: {units.get('outcomes', {})}.",
    ]
    if kill := r.get("kill"):
        lease = r.get("settings", {}).get("schedule", {}).get("lease_seconds")
        lines.append(
            f"- SIGKILL: {kill['daemon']} after {kill['units_done_before']} units done, holding "
            f"{kill['units_held']}; {kill['units_finished_by_another']} finished by another, the "
            f"last {kill['finished_after_kill_seconds_max']} s after the kill (lease {lease} s)."
        )
    applied = r.get("settings", {}).get("applied", {})
    lines.append(f"- Set per night: {applied}.")
    lines.append(f"- Problems: {'; '.join(r.get('problems', [])) or 'none'}.")
    return [*lines, ""]


def render(results: Mapping[str, Any]) -> str:
    nights = results.get("nights", {})
    runs: list[Mapping[str, Any]] = [r.get("run", {}) for r in nights.values()]
    first = runs[0] if runs else {}
    machine = first.get("machine", {})
    lines = [
        "# Fleet: a night's dreaming for many namespaces",
        "",
        "`python bench/fleet.py` (see `--help`): N namespaces, each with a few hundred maintained "
        "memories and new conversation log lines, dreamed in one night by 1-3 `secretary run` "
        "daemons on PostgreSQL and a Chroma server, against a scripted model with a set latency "
        "and a requests-per-minute limit.",
        "",
        f"Machine: {machine.get('platform')}, {machine.get('cpu_count')} cores, "
        f"{machine.get('memory_gib')} GiB, Python {machine.get('python')}; versions "
        f"{first.get('versions')}. Each configuration below names its own run (date, commit, "
        "command).",
        "",
        "## Summary",
        "",
        *summary_rows(nights),
        "",
        "## Targets (issue 27)",
        "",
        *target_rows(results.get("targets", [])),
        "",
        "## Notes",
        "",
        *(f"- {note}" for note in results.get("notes", [])),
        "",
        *(
            ["## The night's bookkeeping at scale", "", *coordination_rows(coordination), ""]
            if (coordination := results.get("coordination"))
            else []
        ),
        "## Configurations",
        "",
    ]
    for name, r in nights.items():
        lines += night_section(name, r)
    return "\n".join(lines).rstrip() + "\n"
