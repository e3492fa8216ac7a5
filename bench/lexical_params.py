"""BM25's k1 and b, chosen on one half of LoCoMo and scored on the other.

Each view's memories are indexed again with every (k1, b) of the grid (the memory and the
session index alike); the rest of the search keeps the default settings. For each fold, the
pair with the best mean R@10 over the tuned views (turns, observations, chat) on one half of
the conversations is scored on the other half, against the shipped defaults. The events view
is never tuned on: it is reported for every pair.

Run: python bench/lexical_params.py [--data PATH] [--work DIR] [--out DIR]
Results: <out>/lexical_params.json and .md (numbers only, no LoCoMo text).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchkit import git, say
from locomo_bench.cli import every_view
from locomo_bench.metrics import recall10
from locomo_bench.rankers import run_ranker, settings_ranker
from locomo_bench.tuning import FOLDS, choose_on_folds, half, half_mean

from store.lexical.index import DEFAULT_B, DEFAULT_K1
from store.settings import RetrievalSettings

TEXTBOOK = "1.5,0.75"  # bm25s's (and Lucene's) defaults, shipped before this bench
GRID = [(k1, b) for k1 in (0.9, 1.2, 1.5, 2.0) for b in (0.4, 0.6, 0.75, 0.9)]
TUNED = ("turns", "observations", "chat")

Scores = dict[str, dict[str, float]]  # "k1,b" -> "view:fold" -> R@10 in percent


def main() -> None:
    args, materials, benches = every_view(__doc__.split("\n\n")[0])
    ranker = settings_ranker(RetrievalSettings())
    scores: Scores = {}
    for k1, b in GRID:
        for done in materials.values():
            done.use_bm25(k1, b)
        scores[f"{k1},{b}"] = {
            f"{bench.name}:{fold}": round(
                100 * recall10(run_ranker(bench, ranker, half(bench, members))), 2
            )
            for bench in benches
            for fold, members in FOLDS
        }
        say(f"k1={k1} b={b}: {scores[f'{k1},{b}']}")
    for done in materials.values():
        done.save()
        done.store.close()
    report = {"commit": git("rev-parse", "--short", "HEAD"), "scores": scores,
              "defaults": f"{DEFAULT_K1},{DEFAULT_B}", "folds": folds(scores)}  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "lexical_params.json").write_text(json.dumps(report, indent=1) + "\n")
    (args.out / "lexical_params.md").write_text(markdown(report))
    print(markdown(report))


def mean(row: dict[str, float], fold: str) -> float:
    return half_mean(row, fold, TUNED)


def folds(scores: Scores) -> list[dict[str, object]]:
    """Per fold: the pair best on its half, and that pair and the defaults on the other."""
    return choose_on_folds(scores, TUNED)


def markdown(report: dict[str, object]) -> str:
    scores: Scores = report["scores"]  # type: ignore[assignment]
    halves = {fold: f"conversations {members[0]}-{members[-1]}" for fold, members in FOLDS}
    lines = [
        "# BM25 k1 and b on LoCoMo, two folds",
        "",
        f"- commit {report['commit']}; `python bench/lexical_params.py`; R@10 in percent, "
        f"default settings otherwise; shipped: k1,b = {report['defaults']}",
        f"- fold A = {halves['A']}, fold B = {halves['B']}; 'tuned' is the mean over "
        f"{', '.join(TUNED)}; events is never tuned on",
        "",
        "| k1,b | tuned A | tuned B | " + " | ".join(scores[next(iter(scores))]) + " |",
        "|---|---:|---:|" + "---:|" * len(scores[next(iter(scores))]),
    ]
    for pair, row in scores.items():
        cells = " | ".join(f"{value:.1f}" for value in row.values())
        lines.append(f"| {pair} | {mean(row, 'A'):.2f} | {mean(row, 'B'):.2f} | {cells} |")
    lines += ["", "| tuned on | chosen k1,b | its mean on the other half | "
              f"{TEXTBOOK} on it | shipped ({report['defaults']}) on it |",
              "|---|---|---:|---:|---:|"]  # fmt: skip
    for fold in report["folds"]:  # type: ignore[attr-defined]
        other = fold["scored_on"]
        textbook = mean(scores[TEXTBOOK], other)
        shipped = mean(scores[str(report["defaults"])], other)
        lines.append(f"| {fold['tuned_on']} | {fold['chosen']} | {fold['chosen_score']:.2f} "
                     f"| {textbook:.2f} | {shipped:.2f} |")  # fmt: skip
    lines += ["", "The shipped pair is the one chosen on fold A; on fold B's half it was tuned on."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
