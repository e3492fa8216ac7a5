"""The command line every ``bench/families/<name>/convert.py`` shares: read, convert, write."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from families.items import Meta, NamespaceItems, write_family
from families.registry import CONVERTED
from families.source import SourceError, SourceRepo

Converter = Callable[[SourceRepo], tuple[Meta, list[NamespaceItems]]]


def run_converter(
    family: str, description: str, convert: Converter, argv: Sequence[str] | None = None
) -> None:
    """Parse ``--source PATH [--out DIR] [--commit SHA]``, convert, write, print the meta."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--source",
        type=Path,
        required=True,
        help="the source repository: a git checkout, a bare git directory (as the fetch tool "
        "brings) or an unpacked archive",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=CONVERTED / family,
        help="where items.jsonl.gz and meta.json go (default: %(default)s)",
    )
    parser.add_argument(
        "--commit",
        default=None,
        help="the source's commit, for a folder that is not a git repository (for a git "
        "repository: checked against its HEAD)",
    )
    args = parser.parse_args(argv)
    try:
        source = SourceRepo(args.source, args.commit)
        meta, namespaces = convert(source)
    except SourceError as error:
        sys.exit(f"{family}: {error}")
    record = write_family(args.out, meta, namespaces)
    print(json.dumps({"out": str(args.out), **record}, indent=2))
