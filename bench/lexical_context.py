"""Choose ``lexical_context``: BM25 that also scores each memory with the one before it.

A dialogue turn often answers the turn before it ("Yes! It was amazing."), and the question's
words are in that turn, not in the answer. With ``retrieval.lexical_context`` = w above 0 the
search scores each memory's BM25 part as max(own, w x context), each divided by its best, where
the context score is the BM25 of the memory's text followed by that of the memory before it in
its session (store/lexical/chain.py); everything else keeps the default settings. For each fold,
the weight with the best mean R@10 over the tuned views (turns, observations, chat) on one half
of the conversations is scored on the other half, against the ranking without it ('off').
Memories without a session get no context, so the observation and event views only show that
nothing else moves. Two views are never tuned on: events, and 'extracted', the observations with
their session ids as the extractor writes memories (facts of one chat chained, not dialogue
turns).

Run: python bench/lexical_context.py [--data PATH] [--work DIR] [--out DIR]
Results: <out>/lexical_context.json and .md (numbers only, no LoCoMo text).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Container
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchkit import git, say
from locomo_bench.cli import every_view
from locomo_bench.metrics import recall10
from locomo_bench.prepared import Bench
from locomo_bench.rankers import Ranker, run_ranker, settings_ranker
from locomo_bench.run import machine as run_machine
from locomo_bench.tuning import FOLDS, choose_on_folds, half_mean

from store.settings import RetrievalSettings

OFF = "off"
GRID = [OFF, "0.5", "0.6", "0.7", "0.8", "0.9", "1.0"]
TUNED = ("turns", "observations", "chat")

Scores = dict[str, dict[str, float]]  # variant -> "view:fold" -> R@10 in percent


def main() -> None:
    args, materials, benches = every_view(__doc__.split("\n\n")[0], extracted=True)
    scores: Scores = {}
    for variant in GRID:
        weight = 0.0 if variant == OFF else float(variant)
        ranker = settings_ranker(RetrievalSettings(lexical_context=weight))
        scores[variant] = {}
        for bench in benches:
            scores[variant] |= view_scores(bench, ranker)
        say(f"{variant}: {scores[variant]}")
    for done in materials.values():
        done.save()
        done.store.close()
    report = {"date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M"), "machine": machine(),
              "commit": git("rev-parse", "--short", "HEAD"), "scores": scores,
              "folds": folds(scores)}  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "lexical_context.json").write_text(json.dumps(report, indent=1) + "\n")
    (args.out / "lexical_context.md").write_text(markdown(report))
    print(markdown(report))


def view_scores(bench: Bench, ranker: Ranker) -> dict[str, float]:
    """R@10 on each fold's half ("view:A", "view:B") and, for the turn view, on all ten
    conversations ("turns:all"), each question ranked once."""
    # A view may have several namespaces per conversation (events: one per speaker).
    ranked = [(conv.index, run_ranker(bench, ranker, [conv])) for conv in bench.conversations]

    def r10(members: Container[int] | None) -> float:  # None: every conversation
        got = [s for i, part in ranked if members is None or i in members for s in part]
        return round(100 * recall10(got), 2)

    out = {f"{bench.name}:{fold}": r10(members) for fold, members in FOLDS}
    if bench.name == "turns":
        out["turns:all"] = r10(None)
    return out


def machine() -> str:
    found = run_machine()
    return f"{found['platform']}, {found['cpu_count']} CPUs, Python {found['python']}"


def mean(row: dict[str, float], fold: str) -> float:
    return half_mean(row, fold, TUNED)


def folds(scores: Scores) -> list[dict[str, object]]:
    """Per fold: the variant best on its half, and it and the shipped ranking on the other."""
    return [
        fold
        | {
            "off_score": round(mean(scores[OFF], fold["scored_on"]), 2),
            "chosen_turns": scores[fold["chosen"]][f"turns:{fold['scored_on']}"],
            "off_turns": scores[OFF][f"turns:{fold['scored_on']}"],
        }
        for fold in choose_on_folds(scores, TUNED)
    ]


def markdown(report: dict[str, object]) -> str:
    scores: Scores = report["scores"]  # type: ignore[assignment]
    halves = {fold: f"conversations {members[0]}-{members[-1]}" for fold, members in FOLDS}
    columns = list(scores[OFF])
    lines = [
        "# BM25 with the memory before each memory (lexical_context), LoCoMo, two folds",
        "",
        f"- date (UTC) {report['date']}; commit {report['commit']}; machine {report['machine']}"
        "; re-ranking (`python bench/lexical_context.py`); R@10 in percent, "
        "default settings otherwise; a variant w is lexical_context = w: the BM25 part is "
        "max(own, w x context), each divided by its best, the context being the BM25 of the "
        "memory's text followed by that of the memory before it in its session; 'off' is "
        "lexical_context = 0",
        f"- fold A = {halves['A']}, fold B = {halves['B']}; 'tuned' is the mean over "
        f"{', '.join(TUNED)}; events and extracted (the observations with their session ids) "
        "are never tuned on",
        "",
        "| variant | tuned A | tuned B | " + " | ".join(columns) + " |",
        "|---|---:|---:|" + "---:|" * len(columns),
    ]
    for variant, row in scores.items():
        cells = " | ".join(f"{row[column]:.2f}" for column in columns)
        lines.append(f"| {variant} | {mean(row, 'A'):.2f} | {mean(row, 'B'):.2f} | {cells} |")
    lines += ["", "| tuned on | chosen | tuned mean on the other half | off on it "
              "| turns on it | turns off on it |", "|---|---|---:|---:|---:|---:|"]  # fmt: skip
    for fold in report["folds"]:  # type: ignore[attr-defined]
        lines.append(f"| {fold['tuned_on']} | {fold['chosen']} | {fold['chosen_score']:.2f} "
                     f"| {fold['off_score']:.2f} | {fold['chosen_turns']:.1f} "
                     f"| {fold['off_turns']:.1f} |")  # fmt: skip
    lines += ["", "'turns:all' is the turn view over all ten conversations (its overall R@10, "
              "as in locomo.md)."]  # fmt: skip
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
