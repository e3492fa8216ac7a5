"""Arguments, the nights in order, the results files."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchkit import RESULTS, say
from fleet_bench.content import Sizes
from fleet_bench.prepare import POOL_TEXTS, admin
from fleet_bench.report import run_info

from secretary.logs import configure as configure_logging
from sqlite_night_bench import checks, prepare, report, worker
from sqlite_night_bench.night import Night, run_night


def parse_args(argv: Sequence[str] | None, description: str | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--namespaces", type=int, default=50, help="namespaces (default 50)")
    parser.add_argument("--memories", type=int, default=300, help="maintained memories each")
    parser.add_argument("--lines", type=int, default=20, help="new log lines each")
    parser.add_argument(
        "--concurrency", default="1,4,16", help="[jobs] concurrency of the SQLite nights"
    )
    parser.add_argument("--latency", type=float, default=1.0, help="model latency (s)")
    parser.add_argument(
        "--postgres",
        type=int,
        default=16,
        metavar="C",
        help="also a night on PostgreSQL at concurrency C (0: none; default 16)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="3 namespaces, 0.2 s model; results in --work"
    )
    parser.add_argument("--fresh", action="store_true", help="rebuild the prepared store")
    parser.add_argument("--prepare-only", action="store_true", help="prepare, run no night")
    parser.add_argument("--work", type=Path, default=prepare.WORK, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=None, help="results JSON (Markdown beside)")
    parser.add_argument("--worker", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.namespaces, args.latency = 3, 0.2
    if args.out is None:
        args.out = (args.work / "quick.json") if args.quick else (RESULTS / "sqlite_night.json")
    return args


def main(argv: Sequence[str] | None = None, *, description: str | None = None) -> int:
    args = parse_args(argv, description)
    if args.worker is not None:
        return worker.run(args.worker)
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    configure_logging("WARNING")  # the store's DEBUG lines would drown the progress lines
    command = shlex.join(
        ["python", "bench/sqlite_night.py", *(sys.argv[1:] if argv is None else argv)]
    )
    info = run_info(command)
    sizes = Sizes(
        namespaces=args.namespaces, memories=args.memories, lines_lo=args.lines, lines_hi=args.lines
    )
    prepared = prepare.prepared_for(sizes, POOL_TEXTS, args.work)
    state = prepare.prepare(prepared, fresh=args.fresh)
    say(f"{sizes.label}: prepared ({report.prep_line(state)})")
    if args.prepare_only:
        return 0
    nights = [
        Night(name=f"sqlite-c{c}", backend="sqlite", concurrency=c)
        for c in (int(part) for part in args.concurrency.split(",") if part.strip())
    ]
    if args.postgres:
        nights.append(
            Night(
                name=f"postgres-c{args.postgres}", backend="postgresql", concurrency=args.postgres
            )
        )
    results: dict[str, Any] = {"run": info, "sizes": state["sizes"], "store": state, "nights": {}}
    for night in nights:
        run_dir = args.work / "runs" / night.name
        shutil.rmtree(run_dir, ignore_errors=True)
        run_dir.mkdir(parents=True)
        if night.backend == "sqlite":
            data, seconds = prepare.copy(prepared, run_dir)
            measured = run_night(
                night, data_dir=data, database_url="", run_dir=run_dir, latency=args.latency
            )
            measured["copy_seconds"] = seconds
        else:
            measured = _postgres_night(night, sizes, run_dir, args.latency)
        results["nights"][night.name] = measured
    base = next(iter(results["nights"].values()))
    for measured in results["nights"].values():
        measured["same_as"] = {
            "night": base["name"],
            **checks.compare(base["store"], measured["store"]),
        }
    for measured in results["nights"].values():
        measured["store_namespaces"] = measured["store"].pop("namespaces")
    _write(args.out, results)
    differing = [m["name"] for m in results["nights"].values() if not m["same_as"]["identical"]]
    failed = [m["name"] for m in results["nights"].values() if m["dream"]["exit_code"]]
    for name in differing:
        say(f"PROBLEM {name}: the store differs from {base['name']}'s")
    for name in failed:
        say(f"PROBLEM {name}: secretary dream exited non-zero")
    return 1 if differing or failed else 0


def _postgres_night(night: Night, sizes: Sizes, run_dir: Path, latency: float) -> dict[str, Any]:
    """Build the same store on a PostgreSQL database of its own, dream it, drop it."""
    database = f"sqlite_night_{uuid.uuid4().hex[:8]}"
    data = run_dir / "data"
    say(f"{night.name}: building the store in PostgreSQL database {database}")
    admin(f'CREATE DATABASE "{database}"')
    try:
        started = time.perf_counter()
        settings = prepare.postgres_settings(data, database)
        built = prepare.build(settings, sizes, POOL_TEXTS)
        built["seconds"] = round(time.perf_counter() - started, 1)
        measured = run_night(
            night,
            data_dir=data,
            database_url=settings.database_url,
            run_dir=run_dir,
            latency=latency,
        )
        measured["prepared"] = built
        measured["database"] = database
        return measured
    finally:
        admin(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        say(f"{night.name}: dropped {database}")


def _write(out: Path, results: dict[str, Any]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, default=str) + "\n")
    out.with_suffix(".md").write_text(report.render(results))
    say(f"wrote {out} and {out.with_suffix('.md')}")
