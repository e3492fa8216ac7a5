"""Arguments and the run of `python bench/fleet.py` (see that file's docstring)."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchkit import RESULTS, ROOT, say

from fleet_bench import coordination, judge, nights, prepare
from fleet_bench.content import parse_lines
from fleet_bench.night import Night, run_night
from fleet_bench.report import load, merge, merge_coordination, rejudged, render, run_info

DEFAULT_OUT = RESULTS / "fleet.json"


def parse_args(argv: Sequence[str] | None, description: str | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: 20 namespaces, a 0.2 s model, 2 daemons; results "
        "under --work unless --out is given",
    )
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated configuration names to run (see --list); the "
        "10,000-namespace one runs only when named",
    )
    parser.add_argument("--list", action="store_true", help="print the configurations and exit")
    parser.add_argument(
        "--lines", default="20", help="new log lines per namespace: N or LO-HI, seeded (default 20)"
    )
    parser.add_argument("--seed", type=int, default=0, help="content seed (default 0)")
    parser.add_argument(
        "--prepare-only",
        action="store_true",
        help="prepare (or finish preparing) the stores of the chosen configurations, run no night",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"results JSON, merged per configuration, Markdown beside it "
        f"(default {DEFAULT_OUT.relative_to(ROOT)}; --quick: <work>/quick.json)",
    )
    parser.add_argument(
        "--work",
        type=Path,
        default=prepare.WORK,
        help="prepared stores and each night's files (default: %(default)s)",
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep each night's database and Chroma copy (fleet_run_<name>)",
    )
    parser.add_argument("--fresh", action="store_true", help="prepare the stores again")
    parser.add_argument(
        "--render",
        action="store_true",
        help="write the Markdown (and the verdicts) again from the results JSON, run nothing",
    )
    parser.add_argument(
        "--coordination",
        default="",
        help="comma-separated unit counts (e.g. 1000,10000): time the night's bookkeeping "
        "(opening, claiming, finishing units, the request's progress) at each, then stop",
    )
    parser.add_argument(
        "--prepare-workers",
        type=int,
        default=2,
        help="processes ingesting namespaces while preparing a store (default %(default)s)",
    )
    args = parser.parse_args(argv)
    args.lines = parse_lines(args.lines)
    if args.quick:
        args.out = args.out or args.work / "quick.json"
    args.out = args.out or DEFAULT_OUT
    return args


def chosen(args: argparse.Namespace) -> list[Night]:
    every = (nights.quick if args.quick else nights.full)(args.lines, args.seed)
    wanted = [name for name in args.only.split(",") if name.strip()]
    unknown = sorted(set(wanted) - {night.name for night in every})
    if unknown:
        raise SystemExit(f"unknown configuration(s) {unknown}; --list shows them")
    if wanted:
        return [night for night in every if night.name in wanted]
    return [night for night in every if night.name not in nights.BIG]


def main(argv: Sequence[str] | None = None, *, description: str | None = None) -> int:
    """Run the benchmark; ``description`` is the --help text (the entry script's docstring)."""
    args = parse_args(argv, description)
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    selected = chosen(args)
    if args.list:
        for night in (
            selected
            if args.only
            else (nights.quick if args.quick else nights.full)(args.lines, args.seed)
        ):
            print(f"{night.name:<26} {night.describe}")
        return 0
    command = shlex.join(["python", "bench/fleet.py", *(sys.argv[1:] if argv is None else argv)])
    if args.render:
        _write(args.out, rejudged(load(args.out)))
        return 0
    if args.coordination:
        sizes = [int(n.replace("_", "")) for n in args.coordination.split(",") if n.strip()]
        scales = []
        for units in sizes:
            say(f"coordination: {units} units")
            scales.append(coordination.measure(units, args.work))
            say(f"coordination: {scales[-1]}")
        results = merge_coordination(args.out, scales, run_info(command))
        _write(args.out, results)
        return 0
    pool = prepare.QUICK_POOL_TEXTS if args.quick else prepare.POOL_TEXTS
    templates = {}
    for night in selected:
        if night.sizes not in templates:
            template = prepare.template_for(night.sizes, args.work, pool)
            state = prepare.prepare(template, fresh=args.fresh, workers=args.prepare_workers)
            templates[night.sizes] = (template, state)
            say(f"{night.sizes.label}: prepared ({_prep_line(state)})")
    if args.prepare_only:
        return 0
    failed = []
    for night in selected:
        template, state = templates[night.sizes]
        info = run_info(command)  # the code and the time the night starts with
        measured = run_night(night, template, args.work, keep=args.keep)
        measured["store"] = _store_json(template, state)
        _write(args.out, merge(args.out, night.name, measured, info))
        failed += [f"{night.name}: {problem}" for problem in judge.problems(measured)]
    for line in failed:
        say(f"PROBLEM {line}")
    return 1 if failed else 0


def _write(out: Path, results: dict[str, Any]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, default=str) + "\n")
    out.with_suffix(".md").write_text(render(results))
    say(f"wrote {out} and {out.with_suffix('.md')}")


def _prep_line(state: dict[str, Any]) -> str:
    ingest, vectors = state["ingest"], state["vectors"]
    return (
        f"{ingest['memories']} memories and {ingest['lines']} lines in {ingest['seconds']} s, "
        f"{vectors['memories']} vectors in {vectors['seconds']} s"
    )


def _store_json(template: prepare.Template, state: dict[str, Any]) -> dict[str, Any]:
    return {
        "template": template.database,
        "sizes": state["sizes"],
        "prepared_at": state["created_at"],
        "ingest": state["ingest"],
        "vectors": state["vectors"],
        "database_mib": round(state.get("database_bytes", 0) / 2**20, 1),
        "chroma_mib": round(state.get("chroma_bytes", 0) / 2**20, 1),
    }
