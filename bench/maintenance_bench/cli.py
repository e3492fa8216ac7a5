"""Arguments and the run of `python bench/maintenance.py` (see that file's docstring)."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchkit import RESULTS, ROOT, say

from maintenance_bench.base import WORK
from maintenance_bench.cycles import measure_size
from maintenance_bench.llm import LlmTarget, bench_settings, scripted_llm
from maintenance_bench.related import locomo_logs
from maintenance_bench.report import merge_results, render_markdown, run_info
from maintenance_bench.split import baseline_from
from secretary.logs import configure as configure_logging

DEFAULT_DATA = ROOT.parent / "shared" / "data" / "locomo" / "locomo10.json"
DEFAULT_OUT = RESULTS / "maintenance.json"


def parse_args(argv: Sequence[str] | None, description: str | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default=None,
                        help="comma-separated base store sizes "
                        "(default 1000,10000,100000)")  # fmt: skip
    parser.add_argument("--new", default=None,
                        help="log lines arriving before each measured cycle (default "
                        "10,50,200); a cycle with nothing new always runs first")  # fmt: skip
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: --sizes 1000 --new 10,50, results under --work",
    )
    parser.add_argument("--out", type=Path, default=None,
                        help=f"results JSON, merged per LLM and size, Markdown beside it "
                        f"(default {DEFAULT_OUT.relative_to(ROOT)}; with --quick "
                        "<work>/quick.json)")  # fmt: skip
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA,
                        help="LoCoMo locomo10.json (default: %(default)s)")  # fmt: skip
    parser.add_argument(
        "--work",
        type=Path,
        default=WORK,
        help="cached base stores and run copies (default: %(default)s)",
    )
    parser.add_argument("--seed", type=int, default=0, help="corpus seed (default 0)")
    parser.add_argument("--traits", type=int, default=50,
                        help="user traits in the base store (default 50 = "
                        "jobs.soul_mapper_max_traits)")  # fmt: skip
    parser.add_argument(
        "--real-max",
        type=int,
        default=10_000,
        help="largest base indexed with the real model (default %(default)s)",
    )
    parser.add_argument(
        "--pool",
        type=int,
        default=20_000,
        help="texts in the vector pool above --real-max (default %(default)s)",
    )
    parser.add_argument(
        "--max-follow-ups",
        type=int,
        default=5,
        help="follow-up cycles after an arrival at most (default %(default)s)",
    )
    parser.add_argument("--related-share", type=float, default=0.05,
                        help="LoCoMo memories related to the new logs added to the base, as a "
                        "share of the size (default %(default)s; 0 = synthetic only)")  # fmt: skip
    parser.add_argument("--fresh", action="store_true", help="rebuild the base stores")
    parser.add_argument("--baseline", type=Path, default=None,
                        help="an earlier results JSON of the same LLM and related share: its "
                        "per job tokens per new memory are shown beside this run's")  # fmt: skip
    args = parser.parse_args(argv)
    if args.quick:
        args.out = args.out or args.work / "quick.json"
    args.sizes = args.sizes or ("1000" if args.quick else "1000,10000,100000")
    args.new = args.new or ("10,50" if args.quick else "10,50,200")
    args.out = args.out or DEFAULT_OUT
    args.sizes = [int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip()]
    args.new = [int(s) for s in args.new.split(",") if s.strip()]
    return args


def main(argv: Sequence[str] | None = None, *, description: str | None = None) -> int:
    """Run the benchmark; ``description`` is the --help text (the entry script's docstring)."""
    args = parse_args(argv, description)
    configure_logging("WARNING")
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    logs = locomo_logs(args.data)
    if sum(args.new) > len(logs):
        raise SystemExit(f"--new asks for {sum(args.new)} log lines; LoCoMo has {len(logs)}")
    real_model = os.environ.get("SECRETARY_LLM_MODEL", "")
    measured: dict[str, Any] = {}
    with scripted_llm(start=not real_model) as (meter, api_base):
        target = (
            LlmTarget(label=real_model, api_base=None, meter=None)
            if real_model
            else LlmTarget(label="scripted", api_base=api_base, meter=meter)
        )
        for size in args.sizes:
            say(f"n={size}: LLM {target.label}")
            measured[str(size)] = measure_size(size, args, logs, target)
            write(args, target, measured)
    failed = [
        (size, check)
        for size, data in measured.items()
        for check in data["zero_checks"]
        if check["calls"] or check["server_requests"]
    ]
    unsettled = [
        (size, row["new_logs"])
        for size, data in measured.items()
        for row in data["per_n"]
        if not row["settled"]
    ]
    assert not failed, f"a cycle with nothing new made LLM calls: {failed}"
    assert not unsettled, f"follow-up cycles still made calls after {args.max_follow_ups}"
    return 0


def write(args: argparse.Namespace, target: LlmTarget, measured: Mapping[str, Any]) -> None:
    settings = bench_settings(args.work, api_base=target.api_base)
    section = f"LLM {target.label}, related share {args.related_share:g}"
    info = run_info(settings, target.label) | {"related_share": args.related_share}
    baseline = baseline_from(args.baseline, section) if args.baseline else None
    results = merge_results(args.out, section, info, measured, baseline)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(render_markdown(results))
    say(f"wrote {args.out} and {args.out.with_suffix('.md')}")
