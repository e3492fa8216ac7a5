"""The Markdown rendering of a families report (the JSON file holds the same numbers)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from locomo_bench.metrics import K
from locomo_bench.report import ablation_table

from families.run import BASELINES
from families.split import REPORT, TUNE

RUN_TITLES = {
    "defaults": "defaults, end to end",
    "bm25": "BM25 only",
    "dense": "dense only",
    "rrf": "RRF (BM25, dense)",
    "search_dense": "the search, dense part only",
    "search_lexical": "the search, BM25 part only",
    "defaults_rerank": "defaults, re-ranked (check)",
    "bm25_last_line": "BM25, latest line only",
    "dense_last_line": "dense, latest line only",
    "rrf_last_line": "RRF, latest line only",
}
NOTES = [
    "## How to read this",
    "",
    f"- Every question is one search of k = {K} with reinforce=false at the family's 'now' (a "
    "day after the namespace's last memory); recall@5 and recall@10 are the share of a "
    "question's gold memories in the top 5 / 10, NDCG@10 uses binary gains, all in percent "
    "and averaged over questions.",
    "- 'defaults, end to end' is `Searcher.search` with the default `RetrievalSettings`. "
    "BM25, dense and RRF read the query as given (for chat queries: the whole excerpt): "
    "the store's BM25 index, the cosine of the query's MiniLM embedding with each memory's, "
    "and their reciprocal-rank fusion (k = 60), as in bench/locomo.py. 'The search, dense "
    "part only' / 'BM25 part only' are the service's own ranking with every other weight at "
    "0, so a chat query is shaped as the search shapes it (its latest turn weighted). "
    "'Latest line only' gives the baselines just the chat's last line. 'Defaults, "
    "re-ranked' ranks cached evidence with the same code as tuning does: it should equal "
    "the end-to-end run.",
    "- Each family is split once, by the hash of its namespaces (or, with too few "
    "namespaces, of its question ids), into a tune half and a report half: weights may be "
    "chosen on the tune half only, and the report half says how they generalise. A family "
    "marked 'held out' is never tuned on at all, neither half.",
    "- The data is converted by bench/families/<name>/convert.py from a fetched copy of its "
    "source repository at the commit named, and read from outside the repository; these "
    "files hold numbers only.",
    "",
]


def markdown(report: Mapping[str, Any]) -> str:
    machine = report["machine"]
    lines = [
        "# Retrieval on other families of data (bench/family.py)",
        "",
        f"- date (UTC): {report['date']}",
        f"- git commit: {report['commit']}",
        f"- machine: {machine['platform']}, {machine['cpu_count']} CPUs, "
        f"Python {machine['python']}",
        f"- run time: {report['seconds']:.0f} s; "
        + (
            f"questions subsampled to {report['max_questions']} per family (by hash)"
            if report.get("max_questions")
            else "every question of every family"
        ),
        "",
        *_summary(report),
        *NOTES,
    ]
    for name, family in report["families"].items():
        lines += _family_section(name, family)
    lines += _losses(report)
    return "\n".join(lines)


def _summary(report: Mapping[str, Any]) -> list[str]:
    lines = [
        "## Summary: R@10 on the report half",
        "",
        "| family | held out | questions | defaults | "
        + " | ".join(RUN_TITLES[b] for b in BASELINES)
        + " | defaults - best other |",
        "|---|---|---:|---:|" + "---:|" * len(BASELINES) + "---:|",
    ]
    for name, family in report["families"].items():
        runs = family["runs"]
        r10 = {run: runs[run][REPORT]["r10"] for run in ("defaults", *BASELINES)}
        best = max(r10[b] for b in BASELINES)
        lines.append(
            f"| {name} | {'yes' if family['held_out'] else 'no'} | "
            f"{runs['defaults'][REPORT]['n']} | {r10['defaults']:.1f} | "
            + " | ".join(f"{r10[b]:.1f}" for b in BASELINES)
            + f" | {r10['defaults'] - best:+.1f} |"
        )
    return [*lines, ""]


def _family_section(name: str, family: Mapping[str, Any]) -> list[str]:
    source, data, split = family["source"], family["data"], family["split"]
    held = " (held out: never tuned on)" if family["held_out"] else ""
    lines = [
        f"## {name}{held}: {family['title']}",
        "",
        f"- shape: {family['shape']}",
        f"- source: {source['source_url']} at commit `{source['source_commit']}`",
        f"- licence: {source['licence']}",
        f"- converted: {family['converted']} (items sha256 `{family['items_sha256']}`)",
        f"- data: {data['namespaces']} namespaces, {data['memories']} memories"
        + (f" in {data['sessions']} sessions" if data.get("sessions") else "")
        + f", {data['questions']} questions",
        f"- halves by {split['by']}: tune {split[TUNE]['units']} units / "
        f"{split[TUNE]['questions']} questions, report {split[REPORT]['units']} units / "
        f"{split[REPORT]['questions']} questions",
        f"- search latency (defaults, end to end): p50 {family['latency_ms']['p50']:.1f} ms, "
        f"p95 {family['latency_ms']['p95']:.1f} ms",
        f"- {_check(family['runs'])}",
        "",
        "| ranking | tune R@5 | tune R@10 | tune NDCG@10 | report R@5 | report R@10 | "
        "report NDCG@10 | all R@10 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run_name, run in family["runs"].items():
        t, r = run[TUNE], run[REPORT]
        lines.append(
            f"| {RUN_TITLES.get(run_name, run_name)} | {t['r5']:.1f} | {t['r10']:.1f} | "
            f"{t['ndcg10']:.1f} | {r['r5']:.1f} | {r['r10']:.1f} | {r['ndcg10']:.1f} | "
            f"{run['all']['r10']:.1f} |"
        )
    shown = ("defaults", *BASELINES)
    lines += [
        "",
        "R@10 by question type (all questions):",
        "",
        "| type | n | " + " | ".join(RUN_TITLES[r] for r in shown) + " |",
        "|---|---:|" + "---:|" * len(shown),
    ]
    for kind, means in family["runs"]["defaults"]["all"]["by_type"].items():
        cells = [family["runs"][r]["all"]["by_type"][kind]["r10"] for r in shown]
        lines.append(f"| {kind} | {means['n']} | " + " | ".join(f"{c:.1f}" for c in cells) + " |")
    return [*lines, "", *_ablations(name, family)]


def _check(runs: Mapping[str, Any]) -> str:
    """Whether re-ranking cached evidence (what tuning scores) reproduces the search."""
    e2e, rerank = runs["defaults"]["all"]["r10"], runs["defaults_rerank"]["all"]["r10"]
    verdict = "matches" if abs(e2e - rerank) <= 0.5 else "DOES NOT match"
    return f"re-ranking {verdict} the search: R@10 {rerank:.1f} re-ranked, {e2e:.1f} end to end"


def _ablations(name: str, family: Mapping[str, Any]) -> list[str]:
    title = (
        f"{name}: ablations, R@10 over all questions (a diagnostic: values are never chosen here)"
    )
    return ablation_table(title, family)


def _losses(report: Mapping[str, Any]) -> list[str]:
    """Every half on which a baseline's R@10 beats the defaults'."""
    found = []
    for name, family in report["families"].items():
        runs = family["runs"]
        for part in (TUNE, REPORT):
            mine = runs["defaults"][part]["r10"]
            for run_name, run in runs.items():
                if run_name in ("defaults", "defaults_rerank"):
                    continue
                if run[part]["r10"] > mine:
                    found.append(
                        f"- {name}, {part} half: {RUN_TITLES.get(run_name, run_name)} "
                        f"{run[part]['r10']:.1f} > defaults {mine:.1f}"
                    )
    lines = ["## Where the defaults lose (R@10)", ""]
    return [*lines, *(found or ["- nowhere: the defaults lead on every half."]), ""]
