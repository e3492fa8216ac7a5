"""Arguments and the run of `python bench/family.py` (see that file's docstring)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchkit import RESULTS, WORK, git, say
from locomo_bench.prepared import Bench, prepare
from locomo_bench.run import machine
from loguru import logger

from families.items import FamilyDataMissing, find_items, load_family
from families.registry import DATA_ROOTS, FAMILIES
from families.report import markdown
from families.run import family_report, split_family, subsample
from families.views import viewed
from store.settings import RetrievalSettings


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Retrieval quality of memory-secretary's search on other public "
        "memory/conversation datasets (families), against BM25, dense and RRF baselines.",
        epilog="Results: <out>/families.json and <out>/families.md (numbers only). Each "
        "family's data must be converted first: see bench/families/README.md.",
    )
    parser.add_argument(
        "--families",
        default=",".join(FAMILIES),
        help="comma-separated families to run (default: %(default)s)",
    )
    parser.add_argument(
        "--data",
        type=Path,
        action="append",
        default=None,
        help="a folder holding <family>/items.jsonl.gz; repeatable (default: "
        + ", then ".join(str(p) for p in DATA_ROOTS)
        + ")",
    )
    parser.add_argument(
        "--work",
        type=Path,
        default=WORK / "families",
        help="cache of the ingested stores and embeddings (default: %(default)s)",
    )
    parser.add_argument(
        "--out", type=Path, default=RESULTS, help="where results go (default: %(default)s)"
    )
    parser.add_argument(
        "--max-questions",
        type=int,
        default=None,
        help="score at most this many questions per family, chosen by hash (default: all)",
    )
    args = parser.parse_args(argv)
    args.families = [f.strip() for f in args.families.split(",") if f.strip()]
    unknown = sorted(set(args.families) - set(FAMILIES))
    if unknown or not args.families:
        parser.error(
            f"--families: unknown {', '.join(unknown) or 'nothing'}; "
            f"choose from {', '.join(FAMILIES)}"
        )
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    roots = args.data or list(DATA_ROOTS)
    try:
        items = {name: find_items(FAMILIES[name].source, roots) for name in args.families}
    except FamilyDataMissing as error:
        sys.exit(str(error))
    started = time.perf_counter()
    defaults = RetrievalSettings()
    families: dict[str, Any] = {}
    for name, path in items.items():
        family = FAMILIES[name]
        whole = viewed(load_family(path), family.view)
        split = split_family(family, whole)
        loaded = subsample(whole, args.max_questions)
        say(f"{name}: preparing the store of {path}")
        materials = prepare(args.work, path, f"family-{family.source}", loaded.conversations)
        bench = Bench(
            name=name,
            conversations=loaded.conversations,
            materials=materials,
            tuned=not family.held_out,
        )
        try:
            families[name] = family_report(family, loaded, split, bench, defaults)
        finally:
            materials.save()
            materials.store.close()
    report = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M"),
        "commit": git("rev-parse", "--short", "HEAD") or "uncommitted",
        "machine": machine(),
        "seconds": round(time.perf_counter() - started),
        "max_questions": args.max_questions,
        "settings": defaults.model_dump(),
        "families": families,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "families.json").write_text(json.dumps(report, indent=2) + "\n", "utf-8")
    (args.out / "families.md").write_text(markdown(report), encoding="utf-8")
    print(markdown(report))
