"""Selective undo against the replay of random histories, and one undo's time at 100k memories.

Histories (issue 25, item 3). Each of --histories seeded random histories (tests/helpers/
histories.py: ingests, a person's edits and deletes, extractor, linker, auditor merge,
supersede and archive, soul mapper, consolidator plans, undos and undos of undos) runs in a
namespace of its own on a SQLite file store under bench/.work/undo_histories/. A random record
in force is then undone:

  single   undo without cascade: applied and equal to the replay of the history without the
           record ("exact"), or refused naming dependents (later records in force); refused
           naming none is a failure, as is a difference from the replay
  redo     the undo is undone: the store must be as before it
  cascade  the same record undone with cascade=True (once the single undo's redo put it back in
           force): applied, and equal to the replay without it and the records it cascaded to
  derived  conflicts whose every field is derived state (prev_id, next_id, version,
           updated_at, content_hash): an undo recomputes those, so the target is 0

Every failure is listed with its seed; `--show SEED` replays that one history and prints it
with the full differences.

Scale (--sizes, default 100000). The store bench/latency.py prepares at that size (reused and
prepared if missing, then copied to bench/.work/undo_histories/n<SIZE>/) is opened with the
default embedder (the real ONNX model; the stored vectors are latency.py's pool vectors). Each
of --trials rounds applies an auditor-like merge of --merge memories and a linker-like run of
--relations relations, syncs the index, then times undo of each run plus Indexer.sync over the
outbox it left; the median is reported (target < 2 s).

    python bench/undo_histories.py                      # 2000 histories and 100k: ~6 min
    python bench/undo_histories.py --histories 200 --sizes 0     # a quick look
    python bench/undo_histories.py --show 1234          # one history, in full
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import shutil
import statistics
import sys
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from benchkit import RESULTS, WORK, git, package_version, say, settings_for

from store.database import Database
from store.db import make_engine, upgrade
from tests.helpers.histories import (
    PICK,
    Check,
    History,
    check_undo,
    in_force,
    namespaces,
    pick_record,
    random_steps,
    record,
    run_history,
)

HERE = WORK / "undo_histories"
MAX_PROBLEM_CHARS = 1500

# -- histories -----------------------------------------------------------------------------------


def draw(seed: int, max_steps: int) -> tuple[list[Any], bool, int]:
    """The steps, whether the history starts with an ingest, and the record selector."""
    rng = random.Random(seed)
    steps = random_steps(rng, rng.randint(1, max_steps))
    return steps, rng.random() < 0.5, rng.randint(0, PICK)


def run_one(db: Database, seed: int, max_steps: int) -> tuple[dict[str, Any], History, list[Check]]:
    steps, seeded, chosen = draw(seed, max_steps)
    namespace = f"h{seed}"
    history = run_history(db, namespace, steps, seeded=seeded)
    out: dict[str, Any] = {
        "seed": seed,
        "steps": len(steps),
        "records": len(history.done),
        "refused_in_history": history.refused,
    }
    record_id = pick_record(db, history, chosen)
    out["record"] = record_id
    if record_id is None:
        return out, history, []
    out["job"] = record(db, record_id).job
    replays = namespaces(namespace)
    single = check_undo(db, history, record_id, cascade=False, replays=replays)
    checks = [single]
    out["single"] = summary(single)
    if in_force(record(db, record_id)):  # the single undo's redo put it back (or it was refused)
        cascade = check_undo(db, history, record_id, cascade=True, replays=replays)
        checks.append(cascade)
        out["cascade"] = summary(cascade)
    return out, history, checks


def summary(check: Check) -> dict[str, Any]:
    problems = "\n".join(check.problems)
    return {
        "outcome": check.outcome,
        "exact": check.exact,
        "kind": check.kind,
        "dependents": [d.record_id for d in check.dependents],
        "cascaded": list(check.cascaded),
        "conflicts": len(check.conflicts),
        "derived_only": check.derived_only,
        "problem": problems[:MAX_PROBLEM_CHARS]
        + ("..." if len(problems) > MAX_PROBLEM_CHARS else ""),
    }


def worker(index: int, seeds: Sequence[int], max_steps: int) -> list[dict[str, Any]]:
    """Run ``seeds`` in a SQLite store of this worker's own."""
    from secretary.logs import configure as configure_logging

    configure_logging("WARNING")
    path = HERE / f"histories-{index}.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    engine = make_engine(f"sqlite:///{path}")
    upgrade(engine)
    db = Database(engine)
    results = []
    started = time.monotonic()
    for n, seed in enumerate(seeds, 1):
        try:
            results.append(run_one(db, seed, max_steps)[0])
        except Exception as exc:  # noqa: BLE001 - a harness failure is a finding too, with its seed
            results.append(
                {"seed": seed, "record": None, "harness_error": f"{type(exc).__name__}: {exc}"}
            )
        if n % 100 == 0:
            rate = n / (time.monotonic() - started)
            say(f"  worker {index}: {n}/{len(seeds)} histories ({rate:.1f}/s)")
    engine.dispose()
    return results


def run_histories(args: argparse.Namespace) -> list[dict[str, Any]]:
    HERE.mkdir(parents=True, exist_ok=True)
    seeds = list(range(args.seed, args.seed + args.histories))
    say(f"{len(seeds)} histories (seeds {seeds[0]}..{seeds[-1]}), {args.jobs} worker(s)")
    if args.jobs == 1:
        return worker(0, seeds, args.max_steps)
    with ProcessPoolExecutor(args.jobs) as pool:
        parts = [
            pool.submit(worker, k, seeds[k :: args.jobs], args.max_steps) for k in range(args.jobs)
        ]
        results = [r for part in parts for r in part.result()]
    return sorted(results, key=lambda r: r["seed"])


def pct(part: int, whole: int) -> float:
    return round(100.0 * part / whole, 2) if whole else 0.0


def aggregate(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    undone = [r for r in results if r.get("record") is not None]
    singles = [r["single"] for r in undone]
    cascades = [r["cascade"] for r in undone if "cascade" in r]
    n, c = len(singles), len(cascades)
    applied = [s for s in singles if s["outcome"] == "applied"]
    refused = [s for s in singles if s["outcome"] == "refused"]
    named = [s for s in refused if s["dependents"]]
    cascaded = [s for s in cascades if s["cascaded"]]
    lengths = [len(s["cascaded"]) for s in cascaded]
    failures = [
        {"seed": r["seed"], "mode": mode, "record": r["record"], "job": r.get("job"),
         "kind": r[mode]["kind"], "problem": r[mode]["problem"]}
        for r in undone
        for mode in ("single", "cascade")
        if mode in r and r[mode]["problem"]
    ]  # fmt: skip
    failures += [
        {"seed": r["seed"], "mode": "harness", "record": None, "job": None, "kind": "harness",
         "problem": r["harness_error"]}
        for r in results
        if "harness_error" in r
    ]  # fmt: skip
    return {
        "histories": len(results),
        "with_a_record_in_force": n,
        "records_per_history": round(statistics.mean(r.get("records", 0) for r in results), 2),
        "single": {
            "applied": len(applied),
            "applied_exact": sum(s["exact"] for s in applied),
            "applied_exact_pct": pct(sum(s["exact"] for s in applied), n),
            "refused": len(refused),
            "refused_naming_dependents": len(named),
            "refused_naming_dependents_pct": pct(len(named), n),
            "refused_without_dependents": len(refused) - len(named),
            "refused_without_dependents_pct": pct(len(refused) - len(named), n),
            "errors": sum(s["outcome"] == "error" for s in singles),
            "failures_by_kind": dict(Counter(s["kind"] for s in singles if s["kind"])),
        },
        "cascade": {
            "run": c,
            "applied_exact": sum(s["exact"] for s in cascades),
            "applied_exact_pct": pct(sum(s["exact"] for s in cascades), c),
            "with_dependents": len(cascaded),
            "cascade_length_mean": round(statistics.mean(lengths), 2) if lengths else 0,
            "cascade_length_max": max(lengths, default=0),
            "refused": sum(s["outcome"] == "refused" for s in cascades),
            "errors": sum(s["outcome"] == "error" for s in cascades),
            "failures_by_kind": dict(Counter(s["kind"] for s in cascades if s["kind"])),
        },
        "derived_only_conflicts": sum(s["derived_only"] for s in singles + cascades),
        "by_job": dict(Counter(r.get("job") for r in undone)),
        "failures": failures,
    }


def show(seed: int, max_steps: int) -> int:
    """Run one history in a fresh store and print it with its checks in full."""
    HERE.mkdir(parents=True, exist_ok=True)
    path = HERE / "show.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    engine = make_engine(f"sqlite:///{path}")
    upgrade(engine)
    steps, seeded, _ = draw(seed, max_steps)
    print(f"seed {seed}: seeded={seeded}, steps: {' '.join(map(str, steps))}")
    _, history, checks = run_one(Database(engine), seed, max_steps)
    print(history.describe())
    for check in checks:
        print(f"\nundo of record {check.record_id} cascade={check.cascade}: {check.outcome}"
              f" exact={check.exact} dependents={[d.record_id for d in check.dependents]}"
              f" cascaded={list(check.cascaded)}")  # fmt: skip
        for conflict in check.conflicts:
            print(f"  conflict: {conflict.describe()}")
        for dependent in check.dependents:
            print(f"  dependent: {dependent.describe()}")
        print("\n".join(check.problems) or "  no problem")
    engine.dispose()
    return 1 if any(c.problems for c in checks) else 0


# -- scale ---------------------------------------------------------------------------------------


def scale(size: int, args: argparse.Namespace) -> dict[str, Any]:
    from latency_bench.common import NAMESPACE, NOW
    from latency_bench.prepare import Prepared, prepare
    from sqlalchemy import func, select

    from store.kinds import MemoryStatus
    from store.models import Memory, MemoryRelation
    from store.operations import CreateRelation, InheritRelations, Operation, SetStatus
    from store.service import Store
    from store.write.undo import undo

    prep = Prepared(size, 0)
    prep.load(fresh=False)
    prepare(prep, argparse.Namespace(real_max=10_000, sql_only=False, pool=20_000))
    copy = HERE / f"n{size}"
    marker = copy / "copied.json"
    if not marker.exists() or json.loads(marker.read_text()).get("fingerprint") != prep.fingerprint:
        say(f"n={size}: copying the prepared store to {copy}")
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(prep.data_dir, copy / "data")
        marker.write_text(json.dumps({"fingerprint": prep.fingerprint}))
    store = Store.open(settings_for(copy / "data"), create=True)
    try:
        store.embedder.embed(["warm up the model"])  # loading it is not the undo's time
        store.indexer.sync()
        with store.engine.connect() as connection:
            active = list(
                connection.scalars(
                    select(Memory.id).where(
                        Memory.namespace == NAMESPACE, Memory.status == MemoryStatus.ACTIVE.value
                    )
                )
            )
            edges_before = connection.scalar(select(func.count()).select_from(MemoryRelation))
        rng = random.Random(args.seed)
        clock = (NOW + timedelta(minutes=n) for n in range(1, 10_000))
        runs: dict[str, list[dict[str, float]]] = {"merge": [], "link": []}
        for trial in range(args.trials):
            chosen = rng.sample(active, 2 * args.merge)
            merge: list[Operation] = []
            for dup, keeper in zip(chosen[::2], chosen[1::2], strict=True):
                merge += [
                    InheritRelations(from_ids=(dup,), to=keeper),
                    SetStatus(memory_id=dup, status=MemoryStatus.MERGED, replaced_by=keeper),
                ]
            pairs: set[tuple[int, int]] = set()
            while len(pairs) < args.relations:
                source, target = rng.sample(active, 2)
                pairs.add((source, target))
            link = [
                CreateRelation(source=s, target=t, type="associative", strength=0.5)
                for s, t in sorted(pairs)
            ]
            for name, ops, job in (("merge", merge, "auditor"), ("link", link, "linker")):
                applied = store.db.writer.apply(NAMESPACE, job, ops, now=next(clock))
                assert applied.record_id is not None
                store.indexer.sync()
                started = time.perf_counter()
                undo(store.db.writer, applied.record_id, now=next(clock))
                undone = time.perf_counter()
                indexed = 0
                while applied_now := store.indexer.sync():
                    indexed += applied_now
                finished = time.perf_counter()
                runs[name].append(
                    {
                        "undo_s": undone - started,
                        "sync_s": finished - undone,
                        "total_s": finished - started,
                        "indexed": indexed,
                    }
                )
                say(
                    f"  n={size} trial {trial + 1} {name}: undo {undone - started:.3f} s +"
                    f" sync {finished - undone:.3f} s ({indexed} vectors)"
                )
        with store.engine.connect() as connection:
            edges_after = connection.scalar(select(func.count()).select_from(MemoryRelation))
            still_active = connection.scalar(
                select(func.count())
                .select_from(Memory)
                .where(Memory.namespace == NAMESPACE, Memory.status == MemoryStatus.ACTIVE.value)
            )
        embedder = store.embedder.model_id
    finally:
        store.close()

    def medians(samples: list[dict[str, float]]) -> dict[str, Any]:
        return {
            key: round(statistics.median(s[key] for s in samples), 3)
            for key in ("undo_s", "sync_s", "total_s")
        } | {"max_total_s": round(max(s["total_s"] for s in samples), 3),
             "indexed": samples[0]["indexed"]}  # fmt: skip

    return {
        "memories": size,
        "trials": args.trials,
        "merge": {"memories_merged": args.merge, **medians(runs["merge"])},
        "link": {"relations": args.relations, **medians(runs["link"])},
        "restored": edges_after == edges_before and still_active == len(active),
        "embedder": embedder,
        "stored_vectors": prep.state.get("index", {}).get("mode", "?"),
    }


# -- report --------------------------------------------------------------------------------------


def code_diff() -> str:
    diff = git("diff", "HEAD", "--", "store", "secretary")
    return hashlib.sha256(diff.encode()).hexdigest()[:12] if diff else ""


def row(label: str, count: int | str, share: float | None = None, target: str = "") -> str:
    shown = f"{count:,}" if isinstance(count, int) else count
    return f"| {label} | {shown} | {'' if share is None else share} | {target} |"


def markdown(results: dict[str, Any]) -> str:
    h, facts = results.get("histories"), results["run"]
    lines = [
        "# Undo against the replay of random histories",
        "",
        f"Written by `python bench/undo_histories.py` ({facts['date']}, commit `{facts['commit']}`"
        + (
            f" + uncommitted changes to store/ and secretary/ (diff {facts['code_diff_sha256']})"
            if facts.get("code_diff_sha256")
            else ""
        )
        + f", {facts['machine']}); raw numbers"
        " in `undo_histories.json`. A history: random ingests, edits, deletes, job-like plans"
        " (extractor, linker, auditor merge/supersede/archive, soul mapper, consolidator) and"
        " undos, in a namespace of its own (tests/helpers/histories.py); then a random record"
        " in force is undone, compared with the replay of the history without it, and the undo"
        " is undone again.",
        "",
    ]
    if h:
        s, c = h["single"], h["cascade"]
        n = h["with_a_record_in_force"]
        failed_otherwise = sum(
            count for kind, count in s["failures_by_kind"].items() if kind != "unnamed"
        )
        lines += [
            f"{h['histories']:,} histories (seeds {facts['seeds']}, up to {facts['max_steps']}"
            f" steps, {h['records_per_history']} records each on average); {n:,} had a record"
            " in force to undo.",
            "",
            "| measure | count | % | target |",
            "|---|---:|---:|---|",
            row(
                "single undo applied, equal to the replay, redo restores",
                s["applied_exact"],
                s["applied_exact_pct"],
            ),
            row(
                "single undo refused naming dependents",
                s["refused_naming_dependents"],
                s["refused_naming_dependents_pct"],
            ),
            row(
                "single undo refused naming none",
                s["refused_without_dependents"],
                s["refused_without_dependents_pct"],
                "0",
            ),
            row("single undo failed otherwise", failed_otherwise, None, "0"),
            row(
                "cascade applied, equal to the replay, redo restores",
                f"{c['applied_exact']:,} of {c['run']:,}",
                c["applied_exact_pct"],
                "100",
            ),
            row("cascades that undid later records too", c["with_dependents"]),
            row("conflicts on derived state only", h["derived_only_conflicts"], None, "0"),
            "",
            f"Cascade length (when > 0): mean {c['cascade_length_mean']}, max"
            f" {c['cascade_length_max']}. Failures by kind: single"
            f" {s['failures_by_kind'] or 'none'}, cascade {c['failures_by_kind'] or 'none'}."
            f" Records undone, by job: {h['by_job']}.",
            "",
        ]
        if h["failures"]:
            lines += [
                f"## Failures ({len(h['failures'])}; reproduce one with"
                " `python bench/undo_histories.py --show SEED`)",
                "",
            ]
            for f in h["failures"][:40]:
                first = f["problem"].splitlines()[0] if f["problem"] else ""
                lines.append(
                    f"- seed {f['seed']} ({f['mode']}, {f['kind']}, record {f['record']}"
                    f" {f['job']}): {first[:300]}"
                )
            if len(h["failures"]) > 40:
                lines.append(f"- ... and {len(h['failures']) - 40} more in the JSON")
            lines.append("")
    for entry in results.get("scale", []):
        m, k = entry["merge"], entry["link"]
        lines += [
            f"## One undo in a store of {entry['memories']:,} memories",
            "",
            f"Median of {entry['trials']} (max in brackets): undo of the run, then"
            " Indexer.sync over the outbox it left. Upserts embed with"
            f" `{entry['embedder']}` (the real default model); the store's other vectors are"
            f" {entry['stored_vectors']} vectors from bench/latency.py's preparation."
            f" Store restored after each undo: {entry['restored']}.",
            "",
            "| run undone | undo s | index sync s | total s | vectors | target |",
            "|---|---:|---:|---:|---:|---|",
            f"| auditor-like merge of {m['memories_merged']} memories | {m['undo_s']}"
            f" | {m['sync_s']} | {m['total_s']} ({m['max_total_s']}) | {m['indexed']} | < 2 s |",
            f"| linker-like run of {k['relations']} relations | {k['undo_s']} | {k['sync_s']}"
            f" | {k['total_s']} ({k['max_total_s']}) | {k['indexed']} | < 2 s |",
            "",
        ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--histories", type=int, default=2000, help="random histories (default 2000)"
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="first history's seed; history i has seed SEED+i"
    )
    parser.add_argument(
        "--max-steps", type=int, default=16, help="steps a history has at most (default 16)"
    )
    parser.add_argument(
        "--jobs", type=int, default=2, help="worker processes for the histories (default 2)"
    )
    parser.add_argument(
        "--sizes", default="100000",
        help="store sizes for the timed undos, comma-separated (default 100000; 0: none)",
    )  # fmt: skip
    parser.add_argument(
        "--trials", type=int, default=5, help="timed undos per run and size (default 5)"
    )
    parser.add_argument("--merge", type=int, default=20, help="memories the timed merge merges")
    parser.add_argument(
        "--relations", type=int, default=200, help="relations the timed linker run makes"
    )
    parser.add_argument(
        "--show", type=int, metavar="SEED", help="run one history and print it in full"
    )
    parser.add_argument(
        "--out", type=Path, default=RESULTS / "undo_histories.json",
        help="results JSON (Markdown beside it; default bench/results/undo_histories.json)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.show is not None:
        return show(args.show, args.max_steps)
    sizes = [int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip() and int(s) > 0]
    from secretary.logs import configure as configure_logging

    configure_logging("WARNING")
    started = time.perf_counter()
    results: dict[str, Any] = {
        "run": {
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "commit": git("rev-parse", "--short", "HEAD") or "unknown",
            "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
            # Which uncommitted code was measured: the hash of the diff of store/ and secretary/.
            "code_diff_sha256": code_diff(),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores,"
            f" Python {platform.python_version()}",
            "sqlalchemy": package_version("sqlalchemy"),
            "seeds": f"{args.seed}..{args.seed + args.histories - 1}",
            "max_steps": args.max_steps,
        }
    }
    if args.histories > 0:
        t0 = time.perf_counter()
        rows = run_histories(args)
        results["histories"] = aggregate(rows)
        results["run"]["histories_s"] = round(time.perf_counter() - t0, 1)
        say(f"histories done in {results['run']['histories_s']} s")
    results["scale"] = [scale(size, args) for size in sizes]
    results["run"]["seconds"] = round(time.perf_counter() - started, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2, default=str) + "\n")
    text = markdown(results)
    args.out.with_suffix(".md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
