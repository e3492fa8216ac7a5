"""Retrieval on other families of data: public memory and conversation datasets besides LoCoMo.

Each family (bench/families/<name>/, listed in bench/families/registry.py) is converted once
from a fetched copy of its source repository into items.jsonl.gz (outside the repository, see
bench/families/README.md). For each family the benchmark ingests every namespace (a user, an
episode) into its own namespace of one cached store through `Store.add_memories` and the
indexer, asks every question, and scores recall@5, recall@10 and NDCG@10 of the defaults
(`Searcher.search`, reinforce=False) against BM25 only, dense only, their RRF, and the
search's own dense-only and BM25-only rankings, on the whole family and on each of its two
fixed halves (tune / report). A family marked held out is never tuned on.

The stores, rankers and metrics are bench/locomo_bench's; the data is never downloaded at run
time, and the result files hold numbers only.

Run: python bench/family.py [--families a,b] [--data DIR] [--max-questions N] [--out DIR]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from families.cli import main

if __name__ == "__main__":
    main()
