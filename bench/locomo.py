"""LoCoMo retrieval benchmark: evidence recall of `Searcher.search` over every dialogue turn.

Every turn of a LoCoMo conversation becomes a memory through the public ingestion path
(`Store.add_memories`, then `store.vector.indexer.sync()`), one namespace per conversation; each
question is one search at "now" = one day after the conversation's last session, k=10,
reinforce=False. A question's hits are mapped back to dialogue ids and compared with its
evidence: recall@5, recall@10 and NDCG@10, per category and overall.

Beside the default settings the same run scores, over the same indexes, BM25 alone, dense
alone (the cosine of the whole turn), their reciprocal-rank fusion, and the defaults with
importance decay off. Weights are tuned on one half of the conversations and scored on the
other, both ways round (two folds), by re-ranking cached per-question candidates with the
same `store.search.searcher.rank` the service uses.

The data (CC BY-NC) is read from outside the repository and never copied into it; the result
files hold numbers only. The ingested store is cached under --work, so reruns skip ingestion.

Run: python bench/locomo.py [--quick] [--no-tune] [--data PATH] [--work DIR] [--out DIR]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from locomo_bench.cli import main

if __name__ == "__main__":
    main()
