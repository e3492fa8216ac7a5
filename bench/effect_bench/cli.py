"""Arguments and the run of `python bench/maintenance_effect.py` (see that file's docstring)."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from benchkit import RESULTS, ROOT, WORK, say
from locomo_bench.data import Conversation, load_conversations
from loguru import logger

from effect_bench.days import run_days
from effect_bench.effect import run_effect
from effect_bench.recall import asked
from effect_bench.report import markdown, run_info
from effect_bench.stores import Stores

DEFAULT_DATA = ROOT.parent / "shared" / "data" / "locomo" / "locomo10.json"
DEFAULT_WORK = WORK / "maintenance_effect"
REAL_NOT_SET = (
    "SECRETARY_LLM_MODEL is not set where this ran (no model to call from this machine); "
    "set it, with SECRETARY_LLM_API_BASE / SECRETARY_LLM_API_KEY as the model needs, to run "
    "the same cycle against that model"
)
# --quick: the first sessions of one conversation, a few days of arrivals, and enough nights
# after them for retention to purge the first tombstones (30-day window).
QUICK = {"conversations": 1, "sessions": 6, "days": 33, "arrival_days": 2, "undo_every": 2}


def parse_args(argv: Sequence[str] | None, description: str | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add = parser.add_argument
    add("--quick", action="store_true",
        help="smoke run in about a minute: the first 6 sessions of one conversation, "
        "33 nights with arrivals on the first 2; results under --work")  # fmt: skip
    add("--data", type=Path, default=DEFAULT_DATA,
        help="LoCoMo locomo10.json (default: %(default)s)")  # fmt: skip
    add("--work", type=Path, default=DEFAULT_WORK,
        help="the clean store (cached) and the run's copies (default: %(default)s)")  # fmt: skip
    add("--out", type=Path, default=None,
        help="directory for maintenance_effect.{json,md} (default bench/results; with --quick "
        "<work>/quick)")  # fmt: skip
    add("--conversations", type=int, default=None,
        help="use the first N conversations (default all; --quick 1)")  # fmt: skip
    add("--sessions", type=int, default=None,
        help="use each conversation's first N sessions and the questions whose evidence "
        "lies in them (default all; --quick 6)")  # fmt: skip
    add("--share", type=float, default=0.04,
        help="share of a conversation's turns each pollution kind takes: exact copies, "
        "later copies, paraphrases, updates (default %(default)s)")  # fmt: skip
    add("--seed", type=int, default=0, help="seed of the choice of turns (default 0)")
    add("--days", type=int, default=None,
        help="simulated nights, one cycle each (default 100; --quick 33; 0: none)")  # fmt: skip
    add("--arrival-days", type=int, default=None,
        help="days over which each conversation's sessions arrive (default = --days; "
        "--quick 2)")  # fmt: skip
    add("--undo-every", type=int, default=None,
        help="run the undo checks every N-th night (default 10; --quick 2)")  # fmt: skip
    add("--llm", choices=("auto", "scripted", "real"), default="auto",
        help="the dream cycle's model: scripted (answers from the ground truth), real "
        "(SECRETARY_LLM_MODEL), or auto: scripted, plus real when SECRETARY_LLM_MODEL is set "
        "(default); the simulated days always use the scripted model")  # fmt: skip
    add("--skip-effect", action="store_true", help="only the simulated days")
    args = parser.parse_args(argv)
    quick = QUICK if args.quick else {"days": 100, "undo_every": 10}
    for name, value in quick.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.arrival_days is None:
        args.arrival_days = args.days
    return args


def truncated(conv: Conversation, sessions: int | None) -> Conversation:
    """The conversation's first ``sessions`` sessions, and the questions answered in them."""
    if sessions is None:
        return conv
    kept = list(dict.fromkeys(t["session_id"] for t in conv.turns))[:sessions]
    turns = tuple(t for t in conv.turns if t["session_id"] in kept)
    known = {t["external_id"] for t in turns}
    questions = tuple(q for q in conv.questions if q.evidence and set(q.evidence) <= known)
    # As bench/locomo.py: "now" is a day after the last session kept.
    now = max(t["timestamp"] for t in turns) + timedelta(days=1)
    return replace(conv, turns=turns, questions=questions, now=min(now, conv.now))


def llms(choice: str) -> list[str]:
    real = bool(os.environ.get("SECRETARY_LLM_MODEL"))
    if choice == "real" and not real:
        raise SystemExit(f"--llm real: {REAL_NOT_SET}")
    return {"scripted": ["scripted"], "real": ["real"]}.get(
        choice, ["scripted", "real"] if real else ["scripted"]
    )


def main(argv: Sequence[str] | None = None, description: str | None = None) -> int:
    args = parse_args(argv, description)
    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    errors = args.data.parent / "audit" / "errors.json"
    conversations = load_conversations(args.data, errors)[: args.conversations]
    conversations = [truncated(c, args.sessions) for c in conversations]
    out = args.out or (args.work / "quick" if args.quick else RESULTS)
    stores = Stores(work=args.work)
    results: dict[str, Any] = {
        "run": run_info(),
        "command": "python bench/maintenance_effect.py " + shlex.join(argv or sys.argv[1:]),
        "data": {
            "conversations": len(conversations),
            "turns": sum(len(c.turns) for c in conversations),
            "questions": sum(len(asked(c)) for c in conversations),
        },
    }
    if not args.skip_effect:
        chosen = llms(args.llm)
        results["effect"] = run_effect(
            stores, conversations, share=args.share, seed=args.seed, llms=chosen
        )
        if "real" not in chosen:
            results["effect"]["dreamed"]["real"] = {"not_run": REAL_NOT_SET}
    if args.days > 0:
        results["days"] = run_days(
            stores,
            conversations,
            days=args.days,
            arrival_days=args.arrival_days,
            share=args.share,
            seed=args.seed,
            undo_every=args.undo_every,
        )
    out.mkdir(parents=True, exist_ok=True)
    (out / "maintenance_effect.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "maintenance_effect.md").write_text(markdown(results))
    say(f"results in {out}/maintenance_effect.{{json,md}}")
    print(markdown(results))
    return 0
