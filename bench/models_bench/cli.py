"""Arguments and the run of `python bench/models.py` (see that file's docstring)."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchkit import RESULTS, ROOT, WORK, git, package_version, say
from families.split import REPORT, TUNE, sample
from locomo_bench.cli import DEFAULT_DATA
from locomo_bench.metrics import QuestionScore
from locomo_bench.run import machine
from loguru import logger

from models_bench.candidates import CANDIDATES
from models_bench.quality import TOP, WEIGHTS, Cache, default_top, defaults_run, score_set
from models_bench.report import markdown
from models_bench.sets import SETS, ScoredSet, load_sets
from models_bench.timing import child, time_models
from store.settings import RetrievalSettings

BASELINE = "minilm-int8"
MAX_LOSS = 0.5  # the adoption rule: no set may lose more than this (R@10 points)
BUDGET_P95_MS = 20.0  # search p95 at 100k memories, in-process
TIMING_QUESTIONS = 200
TIMING_CHATS = 100
TIMING_TOPS = 20


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Embedding models shipped in PyPI packages against the product's "
        "all-MiniLM-L6-v2 int8: ms per query, dense-only R@10, the search with their "
        "vectors, and a re-rank of the default search's top 30, on LoCoMo (turns, events) "
        "and the families (friendsqa; madial held out), per tune/report half.",
        epilog="Results: <out>/models.json and <out>/models.md (numbers only). A model whose "
        "package is not installed is skipped with the pip line that installs it.",
    )
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="LoCoMo's locomo10.json")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where results go")
    parser.add_argument(
        "--work", type=Path, default=WORK / "models", help="embedding caches, the e5 engine"
    )
    parser.add_argument(
        "--models", default=",".join(CANDIDATES), help="comma-separated (default: %(default)s)"
    )
    parser.add_argument("--sets", default=",".join(SETS), help="(default: %(default)s)")
    parser.add_argument(
        "--max-questions", type=int, default=None, help="per set, chosen by hash (default: all)"
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="threads for the bulk embedding (default: 1)"
    )
    parser.add_argument(
        "--timing-threads", default="1,2", help="thread counts timed (default: %(default)s)"
    )
    parser.add_argument("--no-timing", action="store_true", help="skip the ms/query timings")
    parser.add_argument("--time", default=None, help=argparse.SUPPRESS)  # the timing child
    parser.add_argument("--texts", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.models = [m for m in (s.strip() for s in args.models.split(",")) if m]
    args.sets = tuple(s for s in (s.strip() for s in args.sets.split(",")) if s)
    bad = sorted(set(args.models) - set(CANDIDATES)) + sorted(set(args.sets) - set(SETS))
    if bad:
        parser.error(f"unknown: {', '.join(bad)}")
    return args


def _mean(scores: Sequence[QuestionScore]) -> float:
    return round(100 * statistics.fmean(s.r10 for s in scores), 2) if scores else 0.0


def halves_of(scored: ScoredSet, run: Sequence[QuestionScore]) -> dict[str, Any]:
    parts = [scored.halves[q.qid] for _, q in scored.asked()]
    found: dict[str, Any] = {"all": _mean(run)}
    for part in (TUNE, REPORT):
        found[part] = _mean([s for s, p in zip(run, parts, strict=True) if p == part])
    return found


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.time:
        print(json.dumps(child(args.time, args.threads, args.texts, args.work)))
        return
    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    started = time.perf_counter()
    defaults = RetrievalSettings()
    usable = [n for n in args.models if CANDIDATES[n].installed()]
    for name in sorted(set(args.models) - set(usable)):
        say(f"{name}: not installed, skipped ({CANDIDATES[name].pip})")
    sets = load_sets(args.data, args.sets, args.max_questions)
    tops = {s.name: default_top(s, defaults) for s in sets}
    quality: dict[str, Any] = {}
    runs: dict[str, dict[str, Any]] = {}
    for s in sets:
        quality[s.name] = {
            "tuned": s.tuned,
            "held_out": s.held_out,
            "questions": {
                part: sum(1 for _, q in s.asked() if s.halves[q.qid] == part)
                for part in (TUNE, REPORT)
            },
            "memories": sum(len(c.turns) for c in s.conversations),
            "defaults": halves_of(s, defaults_run(tops[s.name], s)),
        }
    for name in usable:
        say(f"{name}: embedding and scoring")
        cand = CANDIDATES[name]
        cache = Cache(
            args.work / f"emb-{name}.pickle", lambda c=cand: c.make(args.threads, args.work)
        )
        runs[name] = {}
        for s in sets:
            t0 = time.perf_counter()
            scored = score_set(s, cache, defaults, tops[s.name])
            runs[name][s.name] = {run: halves_of(s, scores) for run, scores in scored.items()}
            say(f"{name} on {s.name}: {time.perf_counter() - t0:.0f} s")
    verdicts = {name: verdict(runs[name], quality) for name in usable}
    timings: dict[str, Any] = {}
    if not args.no_timing:
        threads = [int(t) for t in args.timing_threads.split(",") if t.strip()]
        texts = timing_texts(sets, tops)
        timings = time_models(usable, threads, texts, args.work, ROOT / "bench" / "models.py")
    for s in sets:
        s.materials.save()
        s.materials.store.close()
    report = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M"),
        "commit": git("rev-parse", "--short", "HEAD") or "uncommitted",
        "machine": machine(),
        "seconds": round(time.perf_counter() - started),
        "versions": {p: package_version(p) for p in ("onnxruntime", "tokenizers", "numpy")},
        "max_questions": args.max_questions,
        "bulk_threads": args.threads,
        "top": TOP,
        "weights": list(WEIGHTS),
        "rule": {"max_loss": MAX_LOSS, "budget_p95_ms": BUDGET_P95_MS},
        "latency_today": latency_today(),
        "candidates": {
            n: {k: v for k, v in vars(CANDIDATES[n]).items() if k != "make"}
            | {"installed": n in usable, "pip": CANDIDATES[n].pip}
            for n in args.models
        },
        "sets": quality,
        "runs": runs,
        "verdicts": verdicts,
        "timings": timings,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "models.json").write_text(json.dumps(report, indent=2) + "\n", "utf-8")
    (args.out / "models.md").write_text(markdown(report), encoding="utf-8")
    print(markdown(report))


def verdict(runs: dict[str, Any], quality: dict[str, Any]) -> dict[str, Any]:
    """The blend weight chosen on the tune halves of the tuned sets, and the adoption rule on
    the report halves for the embedder swap (``search``) and the blended re-rank."""
    tuned = [s for s, q in quality.items() if q["tuned"]]

    def tune_mean(run: str) -> float:
        return statistics.fmean(runs[s][run][TUNE] for s in tuned) if tuned else 0.0

    best = max(WEIGHTS, key=lambda w: (round(tune_mean(f"rerank_w{w}"), 2), -w))
    found: dict[str, Any] = {"chosen_weight": best, "tuned_on": tuned}
    for option, run in (("swap", "search"), ("rerank", f"rerank_w{best}")):
        deltas = {
            s: round(runs[s][run][REPORT] - q["defaults"][REPORT], 2) for s, q in quality.items()
        }
        mean = round(statistics.fmean(deltas.values()), 2)
        worst = min(deltas.values())
        found[option] = {
            "run": run,
            "report_deltas": deltas,
            "mean_delta": mean,
            "worst_delta": worst,
            "passes_rule": mean > 0 and worst >= -MAX_LOSS,
        }
    return found


def timing_texts(sets: Sequence[ScoredSet], tops: dict[str, Any]) -> dict[str, Any]:
    """The texts the timing child embeds, chosen by hash."""
    by_name = {s.name: s for s in sets}
    found: dict[str, Any] = {"questions": [], "chats": [], "tops": []}
    if "locomo_turns" in by_name:
        s = by_name["locomo_turns"]
        asked = {q.qid: q.text for _, q in s.asked()}
        found["questions"] = [asked[k] for k in sorted(sample("t", asked, TIMING_QUESTIONS))]
        keep = sample("r", asked, TIMING_TOPS)
        snaps = s.materials.snapshots
        found["tops"] = [
            (q.text, [snaps[c.namespace].content[m] for m in top])
            for c, q, top in tops["locomo_turns"]
            if q.qid in keep
        ]
    chats = by_name.get("locomo_events") or by_name.get("madial")
    if chats is not None:
        asked = {q.qid: q.text for _, q in chats.asked()}
        found["chats"] = [asked[k] for k in sorted(sample("c", asked, TIMING_CHATS))]
    return found


def latency_today() -> dict[str, Any]:
    """Search p95 and query-embedding p50 at 100k memories from results/latency.json."""
    path = RESULTS / "latency.json"
    try:
        size = json.loads(path.read_text("utf-8"))["sizes"]["100000"]
        inproc = size["in_process"]
        return {
            "search_p95_ms": inproc["search"]["p95_ms"],
            "embed_query_p50_ms": inproc["breakdown"]["embed_query"]["p50_ms"],
            "commit": size.get("commit"),
            "measured_at": size.get("measured_at"),
        }
    except (OSError, KeyError, ValueError):
        return {}
