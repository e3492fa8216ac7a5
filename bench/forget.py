"""Forget at scale: how long erasing one memory takes as a namespace grows.

A forget must leave no copy of the text anywhere (store.write.forget): it removes the memory, scrubs
every record image of the namespace that holds or quotes it, and rewrites the saved lexical
index without it. Each ingested memory leaves a record image, so the scrub grows with the
namespace. For each size this script prepares a store of that many synthetic memories
(bench/corpus.py, through Store.add_memories in batches of 1000; vectors are not made, so the
vector side, which erases the memory from Chroma at once and compacts its files, has nothing to
do here) with its lexical index saved, then, on fresh copies of it, times `Store.forget` of one
memory from the middle.

Results are merged into --out (JSON, one entry per size) and rendered beside it as Markdown.

    python bench/forget.py                          # 20k and 100k, about 6 minutes from scratch
    python bench/forget.py --sizes 1000000          # long: about an hour to prepare
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from benchkit import RESULTS, WORK, git, say, schema_current, settings_for
from corpus import EXTERNAL_PREFIX, memories
from loguru import logger
from sqlalchemy import func, select

from store.models import MaintenanceOperation
from store.service import Store
from store.write.forget import ForgetSelection

NAMESPACE = "bench"
NOW = datetime(2026, 1, 1, tzinfo=UTC)
BATCH = 1000


def prepare(size: int, work: Path) -> Path:
    """Return the cached store of ``size`` memories, making it if needed."""
    directory = work / "forget" / f"n{size}"
    marker = directory / "prepared.json"
    if marker.exists() and schema_current(directory / "secretary.db", upgrade_first=True):
        return directory
    shutil.rmtree(directory, ignore_errors=True)
    say(f"preparing {size:,} memories in {directory}")
    started = time.perf_counter()
    store = Store.open(settings_for(directory), create=True)
    try:
        items = list(memories(size))
        for start in range(0, size, BATCH):
            store.add_memories(NAMESPACE, items[start : start + BATCH], now=NOW, source="bench")
            if (start + BATCH) % 20_000 == 0:
                say(f"  {start + BATCH:,} memories")
        store.searcher.lexical_view(NAMESPACE)  # build and save the lexical index
    finally:
        store.close()
    marker.write_text(
        json.dumps({"prepared": _now(), "seconds": round(time.perf_counter() - started, 1)})
    )
    return directory


def measure(size: int, prepared: Path, work: Path, trials: int) -> dict[str, Any]:
    """Forget one memory on ``trials`` fresh copies of the prepared store."""
    target = f"{EXTERNAL_PREFIX}{size // 2}"
    runs = []
    for trial in range(trials):
        copy = work / "forget" / f"n{size}-trial"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(prepared, copy)
        store = Store.open(settings_for(copy))
        try:
            store.searcher.lexical_view(NAMESPACE)  # mapped from its saved files, as a server has
            selection = ForgetSelection(external_ids=(target,))
            started = time.perf_counter()
            store.forget(NAMESPACE, selection, now=NOW, by="bench")
            runs.append(time.perf_counter() - started)
            with store.engine.connect() as connection:
                images = connection.scalar(select(func.count()).select_from(MaintenanceOperation))
        finally:
            store.close()
        shutil.rmtree(copy, ignore_errors=True)
        say(f"  trial {trial + 1}: {runs[-1]:.2f} s ({images:,} record images in the store)")
    return {
        "memories": size,
        "record_images": images,
        "forget_s": {
            "median": round(statistics.median(runs), 2),
            "min": round(min(runs), 2),
            "max": round(max(runs), 2),
        },
        "trials": trials,
        "measured": _now(),
        "commit": git("rev-parse", "--short", "HEAD") or "uncommitted",
        "load_average": list(os.getloadavg()),
    }


def markdown(results: dict[str, Any]) -> str:
    lines = [
        "# Forget at scale",
        "",
        "Written by `python bench/forget.py` (raw numbers: `forget.json`): `Store.forget` of one "
        "memory from the middle of a namespace of synthetic memories (bench/corpus.py), on a "
        "fresh copy of a prepared SQLite store whose lexical index is saved; the SQL "
        "transaction (the memory, its relations, every record image scrubbed), the checkpoint "
        "and the lexical index rewritten without it. Vectors are not made, so the vector index "
        "(erased at once and compacted since a27e90b) has nothing to do here.",
        "",
        "| memories | record images | forget median s (min-max) | trials | commit | measured |",
        "|---:|---:|---|---:|---|---|",
    ]
    for entry in sorted(results.values(), key=lambda e: e["memories"]):
        t = entry["forget_s"]
        lines.append(
            f"| {entry['memories']:,} | {entry['record_images']:,} | {t['median']} "
            f"({t['min']}-{t['max']}) | {entry['trials']} | `{entry['commit']}` | "
            f"{entry['measured']} |"
        )
    return "\n".join(lines) + "\n"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0] if __doc__ else None,
        epilog="Results: <out>/forget.json and <out>/forget.md.",
    )
    parser.add_argument(
        "--sizes",
        default="20000,100000",
        help="comma-separated namespace sizes (default: %(default)s)",
    )
    parser.add_argument("--trials", type=int, default=3, help="forgets per size (default: 3)")
    parser.add_argument("--work", type=Path, default=WORK, help="cache (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="results (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    except ValueError:
        parser.error(f"--sizes: expected numbers separated by commas, got {args.sizes!r}")
    if not sizes or min(sizes) < 2 or args.trials < 1:
        parser.error("--sizes: each at least 2; --trials: at least 1")
    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    out = args.out / "forget.json"
    results = json.loads(out.read_text()) if out.exists() else {}
    for size in sizes:
        prepared = prepare(size, args.work)
        results[str(size)] = measure(size, prepared, args.work, args.trials)
    args.out.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    (args.out / "forget.md").write_text(markdown(results))
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
