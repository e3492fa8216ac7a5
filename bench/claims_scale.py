"""What a daemon pays to claim a night's units, by the size of the night (PostgreSQL).

Claims are serialised across daemons (``store.coordination.firings``): their cost bounds how
fast any number of daemons can start units. This opens one firing of N units and claims them
all, 48 running at a time (three daemons at concurrency 16), finishing the oldest to make
room, and reports the claim's p50 / p95 and the mean of the first and last 100 claims, with
the statistics update that opening a firing of ``ANALYZE_UNITS`` or more makes, and without it
(as a night starts when autovacuum has not analysed the table yet).

    python bench/claims_scale.py                    # 1,000 and 10,000 units
    python bench/claims_scale.py --units 1000,10000,30000
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.benchkit import RESULTS, git, say, scratch_postgres, write_results
from store.coordination import firings as firings_module
from store.coordination.firings import Firings
from store.db import make_engine, upgrade

DATABASE = "bench_claims_scale"
IN_FLIGHT = 48


def night(units: int, *, analyze: bool) -> dict[str, float]:
    saved = firings_module.ANALYZE_UNITS
    firings_module.ANALYZE_UNITS = saved if analyze else units + 1
    with scratch_postgres(DATABASE) as url:
        engine = make_engine(url)
        try:
            upgrade(engine)
            firings = Firings(engine)
            now = datetime.now(UTC)
            names = [f"ns-{i:05d}" for i in range(units)]
            firings.open("bench", jobs=["extractor"], namespaces=names, opened_by="bench", now=now)
            claims: list[float] = []
            running: list[int] = []
            for _ in range(units):
                started = time.perf_counter()
                unit = firings.claim(holder="bench", now=now, ttl=timedelta(minutes=5))
                claims.append((time.perf_counter() - started) * 1000)
                assert unit is not None
                running.append(unit.id)
                if len(running) >= IN_FLIGHT:
                    firings.finish(running.pop(0), holder="bench", outcomes=[], now=now)
        finally:
            firings_module.ANALYZE_UNITS = saved
            engine.dispose()
    ordered = sorted(claims)
    return {
        "p50_ms": round(statistics.median(ordered), 2),
        "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))], 2),
        "first_100_mean_ms": round(statistics.mean(claims[:100]), 2),
        "last_100_mean_ms": round(statistics.mean(claims[-100:]), 2),
        "all_claims_s": round(sum(claims) / 1000, 1),
    }


def render(results: dict[str, Any]) -> str:
    lines = [
        "# Claiming a night's units (`bench/claims_scale.py`)",
        "",
        f"{results['measured']}, commit {results['commit']}, {results['machine']}; "
        f"`{results['command']}`. One firing, every unit claimed, {IN_FLIGHT} running at a "
        "time; milliseconds per claim.",
        "",
        "| units | statistics on open | p50 | p95 | first 100 | last 100 | all claims (s) |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for row in results["rows"]:
        m = row["measured"]
        lines.append(
            f"| {row['units']:,} | {'yes' if row['analyze'] else 'no'} | {m['p50_ms']:.2f} | "
            f"{m['p95_ms']:.2f} | {m['first_100_mean_ms']:.2f} | {m['last_100_mean_ms']:.2f} | "
            f"{m['all_claims_s']:.1f} |"
        )
    lines += ["", *results["notes"], ""]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--units", default="1000,10000")
    parser.add_argument("--out", type=Path, default=RESULTS / "claims_scale.json")
    args = parser.parse_args()
    rows = []
    for units in (int(value) for value in args.units.split(",")):
        for analyze in (True, False):
            say(f"{units:,} units, statistics on open: {analyze}")
            rows.append(
                {"units": units, "analyze": analyze, "measured": night(units, analyze=analyze)}
            )
    results = {
        "measured": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": git("rev-parse", "--short", "HEAD"),
        "machine": f"{platform.platform()}, Python {platform.python_version()}",
        "command": " ".join(["python", "bench/claims_scale.py", *sys.argv[1:]]),
        "rows": rows,
        "notes": [
            "Before the claim looked up lapsed and pending units apart (one query with "
            "`state = pending OR a lapsed lease`; measured at e0fd7d0 by the same loop): "
            "10,000 units p50 16.2 ms, first 100 26.1 ms, all claims 160 s; with the table "
            "analysed, p50 13.6 ms, 135 s. PostgreSQL then checked and sorted every unit of the "
            "night for each claim.",
        ],
    }
    write_results(args.out, results, render)
    return 0


if __name__ == "__main__":
    sys.exit(main())
