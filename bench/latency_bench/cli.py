"""Arguments and the run of `python bench/latency.py` (see that file's docstring)."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import corpus
from benchkit import ROOT, say

from latency_bench.common import WARMUP
from latency_bench.inprocess import measure_in_process
from latency_bench.prepare import Prepared, prepare
from latency_bench.restart import measure_restart
from latency_bench.results import size_result, write_results
from latency_bench.served import measure_http
from secretary.logs import configure as configure_logging


def parse_args(argv: Sequence[str] | None, description: str | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--sizes", default="10000,100000",
        help="comma-separated store sizes (default 10000,100000: under 30 min from scratch)",
    )  # fmt: skip
    parser.add_argument("--http", action="store_true", help="also measure over HTTP, and RSS")
    parser.add_argument(
        "--restart", action="store_true",
        help="also time restarts of the server: warm again from the saved lexical index, and"
        " after writes made while it was down (on a copy of the store)",
    )  # fmt: skip
    parser.add_argument("--bare", action="store_true", help="also time a bare Chroma query")
    parser.add_argument(
        "--out", type=Path, default=ROOT / "bench/results/latency.json",
        help="results JSON, merged per size (Markdown written beside it)",
    )  # fmt: skip
    parser.add_argument("--queries", type=int, default=200, help="questions per measurement")
    parser.add_argument("--seed", type=int, default=0, help="corpus seed (default 0)")
    parser.add_argument(
        "--real-max", type=int, default=10_000,
        help="largest size indexed with the real model; bigger ones use pool vectors",
    )  # fmt: skip
    parser.add_argument("--pool", type=int, default=20_000, help="texts in the vector pool")
    parser.add_argument(
        "--budget", type=float, default=300.0, help="seconds at most per measurement loop"
    )
    parser.add_argument(
        "--prepare-only", action="store_true", help="build the stores, measure nothing"
    )
    parser.add_argument(
        "--sql-only",
        action="store_true",
        help="ingest and the lexical check only: no vectors, no search measurements",
    )
    parser.add_argument("--fresh", action="store_true", help="discard cached stores first")
    parser.add_argument("--profile", action="store_true", help="cProfile 100 searches per size")
    args = parser.parse_args(argv)
    args.sizes = [int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip()]
    return args


def main(argv: Sequence[str] | None = None, *, description: str | None = None) -> int:
    """Run the benchmark; ``description`` is the --help text (the entry script's docstring)."""
    args = parse_args(argv, description)
    configure_logging("WARNING")
    queries = corpus.queries(args.queries + WARMUP)  # the warm-up's first, never measured
    for size in args.sizes:
        prep = Prepared(size, args.seed)
        prep.load(fresh=args.fresh)
        durations: dict[str, float] = {}
        started = time.perf_counter()
        prepare(prep, args)
        durations["preparation"] = round(time.perf_counter() - started)
        if args.prepare_only:
            say(f"n={size}: prepared in {durations['preparation']} s")
            continue
        if args.sql_only:
            write_results(args, {str(size): size_result(prep, {"sql_only": True})})
            continue
        result: dict[str, Any] = {}
        started = time.perf_counter()
        result["in_process"] = measure_in_process(prep, queries, args)
        durations["in_process"] = round(time.perf_counter() - started)
        if args.http:
            started = time.perf_counter()
            result["http"] = measure_http(prep, queries, args)
            durations["http"] = round(time.perf_counter() - started)
        if args.restart:
            started = time.perf_counter()
            result["restart"] = measure_restart(prep, queries, args)
            durations["restart"] = round(time.perf_counter() - started)
        result["durations_s"] = durations
        say(f"n={size}: {json.dumps(result)}")
        write_results(args, {str(size): size_result(prep, result)})
    return 0
