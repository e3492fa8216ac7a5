"""The results file (a section per LLM and base variant, a row per size) and its Markdown."""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchkit import git, package_version

from maintenance_bench.llm import COUNT_MODEL
from maintenance_bench.split import split_tables
from secretary.config import Settings
from secretary.jobs.registry import JOBS


def run_info(settings: Settings, label: str) -> dict[str, Any]:
    return {
        "date_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "git_commit": git("rev-parse", "--short", "HEAD") or "uncommitted",
        "worktree_dirty": bool(git("status", "--porcelain", "--", "store", "secretary")),
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpu_count": os.cpu_count(),
            "load_average": [round(x, 2) for x in os.getloadavg()],
        },
        "versions": {
            n: package_version(n) for n in ("litellm", "tiktoken", "chromadb", "onnxruntime")
        },
        "llm": label,
        "token_counting": (
            f"scripted server: litellm.token_counter(model={COUNT_MODEL!r}) over the request's "
            "messages (prompt) and over the reply text (completion); the response_format schema "
            "is counted apart (schema_tokens), not in the prompt"
            if label == "scripted"
            else "the provider's usage, as stored in the maintenance records"
        ),
        "settings": {
            "jobs": settings.jobs.model_dump(),
            "guardrails": settings.guardrails.model_dump(),
            "llm": {
                k: v
                for k, v in settings.llm.model_dump().items()
                if k not in ("api_key", "api_base")
            },
        },
    }


def merge_results(
    path: Path,
    section: str,
    info: Mapping[str, Any],
    sizes: Mapping[str, Any],
    baseline: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Merge one run into the results file: a section per LLM and base variant, a row per size.

    ``baseline`` (``split.baseline_from``) is kept with the section until another replaces it.
    """
    results: dict[str, Any] = {}
    if path.exists():
        results = json.loads(path.read_text())
    entry = results.setdefault("sections", {}).setdefault(section, {"sizes": {}})
    entry["run"] = dict(info)
    if baseline is not None:
        entry["baseline"] = dict(baseline)
    for size, data in sizes.items():
        entry["sizes"][size] = {
            **data,
            "measured_at": info["date_utc"],
            "commit": info["git_commit"],
        }
    results["notes"] = NOTES
    return results


NOTES = [
    "Base store: synthetic memories of bench/corpus.py (the corpus of bench/latency.py), plus "
    "user traits, plus (related share) LoCoMo turns that never arrive as logs, written as the "
    "scripted extractor writes memories (the rest of conversation 0, then conversations 1, "
    "2, ...); every job's watermark set to the newest memory, so the base counts as "
    "maintained. Store sizes in the tables are the synthetic part. Sizes above --real-max hold "
    "pool vectors (mixes of real embeddings of "
    "generated texts); new memories and every job's own embeddings use the real ONNX model.",
    "New logs: LoCoMo turns in dialogue order, the same turns for every size (conversation 0 "
    "first); the clock moves one hour per cycle.",
    "Scripted extractor: one memory per log line of six words or more (shorter lines are small "
    "talk); types by a hash of the line: 50% event, 25% fact, 20% preference, 5% tool "
    "experience. Linker: one thematic relation per group. Auditor: a merge verdict for each "
    "memory of a group with the same text as an earlier one, and none for the rest (a memory "
    "left out of the reply is kept). Soul mapper: one trait per ten "
    "memories, every other one revising a trait shown. Consolidator: a 60-word summary of all "
    "fragments sent. Completion tokens are those of these replies: a real model's differ.",
    "A cycle is run_cycle's loop (each job in JOBS order via run_job) followed by "
    "store.vector.indexer.sync(), as `secretary dream` does. Wall times include the local "
    "HTTP round trips and the scripted server's token counting, and the machine was shared with "
    "other work.",
]


def render_markdown(results: Mapping[str, Any]) -> str:
    lines = ["# Maintenance benchmark: LLM calls and tokens per cycle", ""]
    lines += [f"- {note}" for note in results.get("notes", [])]
    for section, entry in results.get("sections", {}).items():
        run = entry["run"]
        machine = run["machine"]
        lines += [
            "",
            f"## {section}",
            "",
            f"- measured {run['date_utc']} at commit {run['git_commit']}"
            f"{' (worktree changed)' if run.get('worktree_dirty') else ''}; {machine['platform']}, "
            f"{machine['cpu_count']} CPUs, Python {machine['python']}, load average at the end "
            f"{machine['load_average']}",
            f"- versions: {', '.join(f'{k} {v}' for k, v in run['versions'].items())}",
            f"- tokens: {run['token_counting']}",
            "",
        ]
        sizes = sorted(entry["sizes"].items(), key=lambda item: int(item[0]))
        lines += _summary_table(sizes)
        lines += split_tables(sizes, entry.get("baseline"))
        lines += _reach_table(sizes)
        lines += _zero_table(sizes)
        lines += _job_tables(sizes)
        lines += _base_table(sizes)
        lines += ["### Settings", "", "```json", json.dumps(run["settings"], indent=2), "```"]
    return "\n".join(lines) + "\n"


def _summary_table(sizes: Sequence[tuple[str, Any]]) -> list[str]:
    lines = [
        "### Per arrival of N log lines (the arrival cycle plus its follow-ups)",
        "",
        "| store | N logs | memories extracted | made (all jobs) | calls arrival + follow-ups "
        "| prompt tokens | completion tokens | tokens / new memory | tokens / log line "
        "| wall s | records = server |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for size, data in sizes:
        checked = [c["totals"].get("records_match_server") for c in data["cycles"]]
        matches = "n/a" if None in checked else "yes" if all(checked) else "NO"
        for row in data["per_n"]:
            made = sum(row["memories_made"].values())
            lines.append(
                f"| {int(size):,} | {row['new_logs']} | {row['extracted_memories']} | {made} | "
                f"{row['arrival_calls']} + {row['follow_up_calls']} "
                f"({row['follow_up_cycles']} cycles) | {row['tokens_in']:,} | "
                f"{row['tokens_out']:,} | {row['tokens_per_new_memory']} | "
                f"{row['tokens_per_log_line']} | {row['seconds']} | {matches} |"
            )
    return [*lines, ""]


def _reach_table(sizes: Sequence[tuple[str, Any]]) -> list[str]:
    lines = [
        "### What the cycles touched in the base store (all arrivals together)",
        "",
        "| store | related LoCoMo memories in base | relations made (to base) "
        "| base memories retired |",
        "|---:|---:|---|---:|",
    ]
    for size, data in sizes:
        reach = data["base_reach"]
        made = ", ".join(
            f"{kind} {n} ({reach['relations_to_base'].get(kind, 0)})"
            for kind, n in sorted(reach["relations_made"].items())
        )
        lines.append(
            f"| {int(size):,} | {data['base'].get('related', 0):,} | {made} | "
            f"{reach['base_memories_retired']} |"
        )
    return [*lines, ""]


def _zero_table(sizes: Sequence[tuple[str, Any]]) -> list[str]:
    lines = [
        "### Cycles with nothing new (must make no LLM call)",
        "",
        "| store | cycle | kind | LLM calls | server requests | tokens | wall s |",
        "|---:|---:|---|---:|---:|---:|---:|",
    ]
    for size, data in sizes:
        for check in data["zero_checks"]:
            lines.append(
                f"| {int(size):,} | {check['cycle']} | {check['kind']} | {check['calls']} | "
                f"{check['server_requests']} | {check['tokens']} | {check['seconds']} |"
            )
    return [*lines, ""]


def _job_tables(sizes: Sequence[tuple[str, Any]]) -> list[str]:
    lines = [
        "### Per job and cycle (calls / prompt+completion tokens / wall s)",
        "",
        "| store | cycle | N logs | " + " | ".join(JOBS) + " | index sync s |",
        "|---:|---|---:|" + "---|" * len(JOBS) + "---:|",
    ]
    for size, data in sizes:
        for number, cycle in enumerate(data["cycles"]):
            cells = []
            for job in JOBS:
                e = cycle["jobs"].get(job)
                cells.append(
                    "-"
                    if e is None
                    else f"{e['calls']} / {e['tokens_in']:,}+{e['tokens_out']:,} / {e['seconds']}"
                )
            lines.append(
                f"| {int(size):,} | {number} {cycle['kind']} | {cycle['new_logs']} | "
                + " | ".join(cells)
                + f" | {cycle['totals']['index_sync_seconds']} |"
            )
    return [*lines, ""]


def _base_table(sizes: Sequence[tuple[str, Any]]) -> list[str]:
    lines = [
        "### Base stores",
        "",
        "| store | memories (with traits) | vectors | prepared how | prepared s "
        "| copied per run s |",
        "|---:|---:|---|---|---:|---:|",
    ]
    for size, data in sizes:
        base = data["base"]
        source = base["source"]
        how = f"copied from {source['copied_from']}" if "copied_from" in source else "built here"
        how += f" (ingest {source.get('ingest_seconds')} s, index {source.get('index_seconds')} s)"
        lines.append(
            f"| {int(size):,} | {base['memories']:,} | {base['vectors']} | {how} | "
            f"{base['seconds']} | {data['copy_seconds']} |"
        )
    return [*lines, ""]
