"""Arguments and the run of `python bench/locomo.py` (see that file's docstring)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from benchkit import RESULTS, ROOT, WORK
from loguru import logger

from locomo_bench.data import load_conversations
from locomo_bench.prepared import Bench, Materials, prepare_views
from locomo_bench.report import markdown
from locomo_bench.run import build_report
from locomo_bench.views import build_views, extracted_view

DEFAULT_DATA = ROOT.parent / "shared" / "data" / "locomo" / "locomo10.json"
QUICK_CONVERSATIONS = 2


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="LoCoMo evidence-recall benchmark of memory-secretary's search.",
        epilog="Results: <out>/locomo.json and <out>/locomo.md (numbers only, no LoCoMo text).",
    )
    parser.add_argument(
        "--data", type=Path, default=DEFAULT_DATA, help="locomo10.json (default: %(default)s)"
    )
    parser.add_argument(
        "--errors",
        type=Path,
        default=None,
        help="the audit's errors.json (default: audit/errors.json beside --data); "
        "flagged questions are also reported separately",
    )
    parser.add_argument(
        "--work",
        type=Path,
        default=WORK,
        help="cache of the ingested store and of per-question candidates (default: %(default)s)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="where to write the results (default: bench/results, or <work>/quick with --quick)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"smoke run: the first {QUICK_CONVERSATIONS} conversations, no tuning",
    )
    parser.add_argument(
        "--no-tune", action="store_true", help="skip the two-fold tuning (the slow part)"
    )
    parser.add_argument(
        "--views",
        default=",".join(VIEWS),
        help="comma-separated views of the data to score (default: %(default)s): turns (every "
        "turn a memory, questions as asked), observations (the observation facts the memories), "
        "chat (questions asked as the last line of a chat excerpt), events (one namespace per "
        "speaker of independent, undated-session events over years; never tuned on), telling "
        "(the events' namespaces, each query the conversation so far while a speaker tells "
        "something)",
    )
    args = parser.parse_args(argv)
    args.views = [v.strip() for v in args.views.split(",") if v.strip()]
    unknown = sorted(set(args.views) - set(VIEWS))
    if unknown or not args.views:
        parser.error(f"--views: unknown {', '.join(unknown) or 'nothing'}; choose from {VIEWS}")
    return args


VIEWS = ("turns", "observations", "chat", "events", "telling")


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    errors = args.errors or args.data.parent / "audit" / "errors.json"
    conversations = load_conversations(args.data, errors)
    if args.quick:
        conversations = conversations[:QUICK_CONVERSATIONS]
    out = args.out or (args.work / "quick" if args.quick else RESULTS)
    views = build_views(args.data, conversations)
    materials, benches = prepare_views(
        args.work, args.data, {name: views[name] for name in args.views}
    )
    report = build_report(benches, tune_folds=not (args.quick or args.no_tune))
    for done in materials.values():
        done.save()
    out.mkdir(parents=True, exist_ok=True)
    (out / "locomo.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    (out / "locomo.md").write_text(markdown(report), encoding="utf-8")
    for done in materials.values():
        done.store.close()
    print(markdown(report))


def every_view(
    description: str, *, extracted: bool = False
) -> tuple[argparse.Namespace, dict[str, Materials], list[Bench]]:
    """For a bench that re-ranks every view (bench/lexical_params.py, lexical_context.py): its
    arguments (--data, --work, --out), the materials by kind and a `Bench` per view (with
    ``extracted``, also the observations with their session ids, after the others)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="locomo10.json")
    parser.add_argument("--work", type=Path, default=WORK, help="the views' cached stores")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where results go")
    args = parser.parse_args()
    logger.remove()
    conversations = load_conversations(args.data, args.data.parent / "audit" / "errors.json")
    views = build_views(args.data, conversations)
    chosen = {name: views[name] for name in VIEWS}
    if extracted:
        chosen["extracted"] = extracted_view(args.data, conversations)
    materials, benches = prepare_views(args.work, args.data, chosen)
    return args, materials, benches
