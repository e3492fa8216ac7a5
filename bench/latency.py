"""Latency and scale benchmark: ingest, indexing, search (in-process and HTTP), RSS, bare Chroma.

For each size it prepares a store under bench/.work/latency/n<SIZE>/ (cached and resumable:
a re-run reuses it, an interrupted preparation continues where it stopped), then measures:

  ingest     Store.add_memories in batches of 1000, each committed (SQLite WAL), memories/s
  lexical    one search right after ingest, before any embedding: the memory must be found
  index      Store.indexer.sync() over the outbox: one vector per memory, memories/s.
             Sizes <= --real-max use the real ONNX embedder. Larger sizes fill Chroma through
             the same indexer and VectorIndex, but each text's vector is a normalised mix of two
             vectors from a pool of real embeddings of --pool generated texts (the model would
             take hours); the query embedding and the whole search path stay real.
  search     Store.searcher.search(k=10, reinforce=False), query embedding included, 200
             natural questions after a warm-up; p50/p95/p99
  bare       (--bare) the same embedder + one collection.query(n_results=10) on the same Chroma
             collection, interleaved with our searches; ratio = ours / bare
  http       (--http) `secretary serve` in a subprocess on 127.0.0.1, httpx keep-alive client,
             sequential requests (concurrency 1); VmRSS/VmHWM of the server from /proc

Results are merged into --out (JSON, one entry per size) and rendered beside it as Markdown.

    python bench/latency.py                                   # 10k and 100k, in-process only
    python bench/latency.py --sizes 10000,100000 --http --bare
    python bench/latency.py --sizes 1000000 --http --bare      # long: see bench/README.md
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from latency_bench.cli import main

if __name__ == "__main__":
    sys.exit(main(description=__doc__))
