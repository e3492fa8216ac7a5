"""Per job prompt and completion tokens per new memory, and a baseline to compare them with.

Computed from the cycles of a results file (each arrival with its follow-up cycles), so that
an older results file, written before this split existed, can be the baseline of a newer run:
``python bench/maintenance.py --baseline OLD.json``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from secretary.jobs.registry import JOBS

# The jobs that ask the LLM (retention never does).
LLM_JOBS = tuple(job for job in JOBS if job != "retention")


def arrivals(cycles: Sequence[Mapping[str, Any]]) -> list[list[Mapping[str, Any]]]:
    """Each arrival cycle with the follow-up cycles after it."""
    groups: list[list[Mapping[str, Any]]] = []
    for cycle in cycles:
        if cycle["kind"] == "arrival":
            groups.append([cycle])
        elif cycle["kind"] == "follow-up" and groups:
            groups[-1].append(cycle)
    return groups


def job_split(cycles: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per arrival of N log lines: per job calls, prompt and completion tokens per new memory.

    "New memory" is what tokens / new memory divides by: the memories the extractor made.
    """
    split: dict[str, dict[str, Any]] = {}
    for group in arrivals(cycles):
        made = group[0]["new_memories"].get("extractor", 0)
        if not made:
            continue
        jobs = {}
        for job in LLM_JOBS:
            entries = [c["jobs"][job] for c in group if job in c["jobs"]]
            jobs[job] = {
                "calls": sum(e["calls"] for e in entries),
                "prompt": round(sum(e["tokens_in"] for e in entries) / made, 1),
                "completion": round(sum(e["tokens_out"] for e in entries) / made, 1),
            }
        total = sum(j["prompt"] + j["completion"] for j in jobs.values())
        split[str(group[0]["new_logs"])] = {
            "new_memories": made,
            "jobs": jobs,
            "total": round(total, 1),
        }
    return split


def baseline_from(path: Path, section: str) -> dict[str, Any]:
    """The split of every size of ``section`` in an earlier results file, with its commit."""
    results = json.loads(path.read_text())
    entry = results.get("sections", {}).get(section)
    if entry is None:
        raise SystemExit(f"{path} has no section {section!r} to compare with")
    return {
        "file": str(path),
        "commit": entry["run"]["git_commit"],
        "measured_at": entry["run"]["date_utc"],
        "sizes": {size: job_split(data["cycles"]) for size, data in entry["sizes"].items()},
    }


def split_tables(sizes: Sequence[tuple[str, Any]], baseline: Mapping[str, Any] | None) -> list[str]:
    """Markdown: per job prompt+completion tokens per new memory, before (baseline) and now."""
    head = "| store | N logs | run | " + " | ".join(LLM_JOBS) + " | total |"
    lines = [
        "### Per job, per new memory (prompt + completion tokens; calls)",
        "",
    ]
    if baseline:
        lines += [
            f"Before: commit {baseline['commit']} (measured {baseline['measured_at']}); "
            "now: this run.",
            "",
        ]
    lines += [head, "|---:|---:|---|" + "---|" * len(LLM_JOBS) + "---:|"]
    for size, data in sizes:
        now = job_split(data["cycles"])
        before = (baseline or {}).get("sizes", {}).get(size, {})
        for n, row in now.items():
            for label, split in (("before", before.get(n)), ("now", row)):
                if split is None:
                    continue
                cells = [
                    f"{j['prompt']:g}+{j['completion']:g} ({j['calls']})"
                    for j in (split["jobs"][job] for job in LLM_JOBS)
                ]
                lines.append(
                    f"| {int(size):,} | {n} | {label} | "
                    + " | ".join(cells)
                    + f" | {split['total']:g} |"
                )
    return [*lines, ""]
