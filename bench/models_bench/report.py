"""Markdown of models.json: numbers only."""

from __future__ import annotations

from typing import Any

RUNS = (
    ("dense", "dense only (query shaped as the search does)"),
    ("dense_raw", "dense only (query as given)"),
    ("search", "the default search with this model's vectors"),
)


def _cell(row: dict[str, Any]) -> str:
    return f"{row['tune']:.1f} / {row['report']:.1f}"


def markdown(report: dict[str, Any]) -> str:
    sets = report["sets"]
    names = list(sets)
    today = report.get("latency_today") or {}
    lines = [
        "# Embedding models from PyPI packages (`bench/models.py`)",
        "",
        f"{report['date']} UTC, commit {report['commit']}, {report['machine']}, "
        f"{report['seconds']} s. Versions: "
        + ", ".join(f"{k} {v}" for k, v in report["versions"].items())
        + f". Bulk embedding on {report['bulk_threads']} thread(s)"
        + (
            f"; at most {report['max_questions']} questions per set, chosen by hash."
            if report["max_questions"]
            else "; every question."
        ),
        "",
        "R@10 in percent, **tune / report** half. LoCoMo's halves are conversations 0-4 / 5-9; "
        "`locomo_events` and `madial` are never tuned on (madial is held out).",
        "",
        "## Sets",
        "",
        "| set | memories | questions tune / report | tuned on | defaults R@10 |",
        "|---|---|---|---|---|",
    ]
    for name, q in sets.items():
        lines.append(
            f"| {name} | {q['memories']} | {q['questions']['tune']} / "
            f"{q['questions']['report']} | {'yes' if q['tuned'] else 'no'} | "
            f"{_cell(q['defaults'])} |"
        )
    lines += ["", "## Candidates", ""]
    lines += [
        "| model | package | model licence / package licence | wheel MB | runtime | installed |",
        "|---|---|---|---|---|---|",
    ]
    for name, c in report["candidates"].items():
        lines.append(
            f"| {name} | {c['package']} {c['version']} | {c['model_licence']} / "
            f"{c['package_licence']} | {c['wheel_mb']} | {c['runtime']} | "
            f"{'yes' if c['installed'] else 'no: ' + c['pip']} |"
        )
    for run, title in RUNS:
        lines += ["", f"## {title}", "", "| model | " + " | ".join(names) + " |"]
        lines.append("|---" * (len(names) + 1) + "|")
        lines.append(
            "| (defaults) | " + " | ".join(_cell(sets[n]["defaults"]) for n in names) + " |"
        )
        for model, by_set in report["runs"].items():
            lines.append(f"| {model} | " + " | ".join(_cell(by_set[n][run]) for n in names) + " |")
    lines += [
        "",
        f"## Re-rank of the default search's top {report['top']}, blended",
        "",
        "`(1 - w) / (60 + default rank) + w / (60 + model rank)`; w chosen on the tune halves of "
        "the tuned sets (ties: the smaller w). Columns: R@10 tune / report at the chosen w, and at "
        "w = 1 (the model's order alone).",
        "",
        "| model | w | " + " | ".join(names) + " | w = 1: " + " | ".join(names) + " |",
    ]
    lines.append("|---" * (2 * len(names) + 2) + "|")
    for model, by_set in report["runs"].items():
        w = report["verdicts"][model]["chosen_weight"]
        chosen = [_cell(by_set[n][f"rerank_w{w}"]) for n in names]
        alone = [_cell(by_set[n]["rerank_w1.0"]) for n in names]
        lines.append(f"| {model} | {w} | " + " | ".join(chosen + alone) + " |")
    lines += [
        "",
        "## The adoption rule on the report halves",
        "",
        f"Gain on average over the sets and lose no more than {report['rule']['max_loss']} "
        "R@10 on any; deltas are report-half R@10 minus the defaults'.",
        "",
        "| model | option | " + " | ".join(names) + " | mean | passes |",
    ]
    lines.append("|---" * (len(names) + 4) + "|")
    for model, v in report["verdicts"].items():
        for option in ("swap", "rerank"):
            o = v[option]
            lines.append(
                f"| {model} | {option} ({o['run']}) | "
                + " | ".join(f"{o['report_deltas'][n]:+.1f}" for n in names)
                + f" | {o['mean_delta']:+.2f} | {'yes' if o['passes_rule'] else 'no'} |"
            )
    if report["timings"]:
        lines += [
            "",
            "## Milliseconds (median of 3 repeats; p50 / p95)",
            "",
            "One text embedded per call after 10 warm-up calls. `rerank30`: the query and the 30 "
            "memories of the default top 30 embedded in one batch (a re-rank that stores no "
            "second vectors). Today's search at 100k memories: p95 "
            f"{today.get('search_p95_ms', '?')} ms, of which the query embedding p50 "
            f"{today.get('embed_query_p50_ms', '?')} ms (results/latency.json).",
            "",
            "| model | threads | load s | question | chat | rerank30 |",
            "|---|---|---|---|---|---|",
        ]
        for model, by_threads in report["timings"].items():
            for threads, t in by_threads.items():
                if "error" in t:
                    lines.append(f"| {model} | {threads} | error: {t['error']} | | | |")
                    continue
                lines.append(
                    f"| {model} | {threads} | {t['load_s']} | "
                    + " | ".join(
                        f"{t[k]['p50_ms']} / {t[k]['p95_ms']}"
                        for k in ("question", "chat", "rerank30")
                    )
                    + " |"
                )
    return "\n".join(lines) + "\n"
