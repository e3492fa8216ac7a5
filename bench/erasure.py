"""Erasure trials: does a forgotten name stay gone, every time?

Runs the two end-to-end erasure checks of tests/secretary/test_erasure_holds.py again and again,
each trial in a fresh process and a fresh data directory:

  idle     the store in-process: conversation lines, tags and metadata holding a name, a night
           of every job against the scripted model (extracted memories, a summary and a trait
           carry it), one forget (lines by match, memories by tag), then every byte of every
           file under the data directory read, and ten more dream cycles
  daemon   the same through `secretary run` (API, index worker and dream requests in the
           daemon's process): the forget over POST /v1/forget while it runs, then three dreams

A trial passes when the name is found 0 times in every file after the forget and after the
dreams (and 0 times in SQL after each dream). Results: bench/results/erasure.{json,md}.

With --forget-at DIR (a store prepared by `bench/latency.py`, e.g. bench/.work/latency/n100000),
it also times `Store.forget` of one memory with its vector on fresh copies of that store: the
SQL erasure, the vector deleted and confirmed, and the embedded Chroma compacted.

    python bench/erasure.py --trials 20
    python bench/erasure.py --trials 0 --forget-at bench/.work/latency/n100000
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEST = "tests/secretary/test_erasure_holds.py"
SCENARIOS = {
    "idle": "test_a_forgotten_name_is_nowhere_on_disk_and_ten_dreams_bring_nothing_back",
    "daemon": "test_a_forget_through_the_daemon_leaves_no_byte_and_dreams_bring_nothing_back",
}


def trial(test: str) -> tuple[bool, float, str]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"{TEST}::{test}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    tail = "\n".join(done.stdout.strip().splitlines()[-3:])
    return done.returncode == 0, time.monotonic() - started, tail


def time_forget(prepared: Path, trials: int) -> dict[str, object]:
    """Time Store.forget of one memory (from the middle) on fresh copies of a prepared store."""
    sys.path.insert(0, str(ROOT))
    from bench.benchkit import settings_for
    from store.service import Store
    from store.write.forget import ForgetSelection

    seconds: list[float] = []
    sizes: list[int] = []
    count = 0
    for n in range(trials):
        with tempfile.TemporaryDirectory(dir=prepared.parent) as scratch:
            data = Path(scratch) / "data"
            shutil.copytree(prepared / "data", data)
            sizes.append((data / "chroma" / "chroma.sqlite3").stat().st_size)
            store = Store.open(settings_for(data))
            try:
                namespace = store.db.work.namespaces_with_work()[0]
                count = store.db.memories.count(namespace)
                victim = store.db.memories.many(namespace, range(count // 2, count // 2 + 50))[0]
                store.index.namespaces()  # open Chroma before the clock starts, as a server has
                started = time.monotonic()
                result = store.forget(
                    namespace, ForgetSelection(ids=(victim.id,)), now=datetime.now(UTC), by="bench"
                )
                seconds.append(round(time.monotonic() - started, 3))
                assert not getattr(result, "index_pending", False), getattr(result, "warning", "")
            finally:
                store.close()
        print(f"forget {n + 1}/{trials}: {seconds[-1]:.2f} s")
    return {
        "store": str(prepared),
        "memories": count,
        "chroma_sqlite_bytes": sizes[0] if sizes else None,
        "seconds": seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=20, help="trials per scenario (20)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "erasure.json")
    parser.add_argument("--forget-at", type=Path, help="a store prepared by bench/latency.py")
    parser.add_argument("--forget-trials", type=int, default=3, help="copies to forget on (3)")
    args = parser.parse_args()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    changed = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no", "--", "store", "secretary"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout.strip()
    if changed:
        commit += " with uncommitted changes to store/ or secretary/"
    results: dict[str, dict[str, object]] = {}
    previous = json.loads(args.out.read_text()) if args.out.exists() else {}
    for name, test in SCENARIOS.items() if args.trials else ():
        passed, seconds, failures = 0, [], []
        for n in range(1, args.trials + 1):
            ok, took, tail = trial(test)
            passed += ok
            seconds.append(round(took, 1))
            if not ok:
                failures.append({"trial": n, "output": tail})
            print(f"{name} {n}/{args.trials}: {'held' if ok else 'FAILED'} in {took:.1f} s")
        results[name] = {
            "trials": args.trials,
            "held": passed,
            "seconds": seconds,
            "failures": failures,
        }
    report = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit,
        "machine": f"{platform.platform()}, Python {platform.python_version()}",
        "scenarios": results or previous.get("scenarios", {}),
        "forget": time_forget(args.forget_at, args.forget_trials)
        if args.forget_at
        else previous.get("forget"),
    }
    results = report["scenarios"]  # type: ignore[assignment]
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    lines = [
        "# Erasure trials (`bench/erasure.py`)",
        "",
        f"- date: {report['date']}; commit {commit}; {report['machine']}",
        "- each trial: a fresh process and data directory; the name in conversation lines, tags,",
        "  metadata and what the scripted model wrote from them (memories, a summary, a trait);",
        "  held = 0 occurrences in every file under the data directory after the forget and after",
        "  the dreams that follow (idle: 10, daemon: 3), and 0 in SQL after each dream",
        "",
        "| scenario | trials | held | seconds per trial (min-max) |",
        "|---|---:|---:|---|",
    ]
    for name, result in results.items():
        took = result["seconds"]
        assert isinstance(took, list)
        lines.append(
            f"| {name} | {result['trials']} | {result['held']} | {min(took):.1f}-{max(took):.1f} |"
        )
    forget = report["forget"]
    if isinstance(forget, dict):
        took = forget["seconds"]
        assert isinstance(took, list)
        lines += [
            "",
            "## Forget of one memory with its vector",
            "",
            f"`Store.forget` of one memory from the middle of {forget['memories']:,} memories, on",
            f"fresh copies of `{forget['store']}` (Chroma's file {forget['chroma_sqlite_bytes']:,}",
            "bytes): the SQL erasure and every record image scrubbed, the vector deleted and read",
            "back, the embedded Chroma compacted (its log purged, the file vacuumed), the lexical",
            f"index rewritten. Seconds per trial: {', '.join(f'{s:.2f}' for s in took)}.",
        ]
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {args.out} and {args.out.with_suffix('.md')}")


if __name__ == "__main__":
    main()
