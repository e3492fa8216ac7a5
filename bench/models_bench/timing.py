"""Milliseconds per query embedding (and per re-rank of 30 memories) of each model.

Each (model, threads) pair is timed in a child process (``python bench/models.py --time
NAME --threads N``) whose OMP/OpenBLAS/MKL thread variables are set before numpy is
imported, so numpy, onnxruntime (``intra_op_num_threads``) and OpenMP all use N threads. The
child embeds each text alone after 10 warm-up calls, three times over; the parent keeps, for
each statistic, the median of the three repeats (the machine is shared).

Texts (passed through a temporary file, never kept): questions as asked (LoCoMo turns),
chat excerpts as asked (LoCoMo events view, the search embeds a chat twice: whole and
focus), and, for the re-rank cost, the 30 memories of the default search's top 30 embedded
as one batch with their query.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPEATS = 3
WARMUP = 10


def _stats(samples: Sequence[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": round(1000 * statistics.median(ordered), 2),
        "p95_ms": round(1000 * ordered[int(0.95 * (len(ordered) - 1))], 2),
    }


def child(name: str, threads: int, texts_file: Path, work: Path) -> dict[str, Any]:
    """Run in the child: time one model at ``threads`` on the texts; return the medians."""
    from models_bench.candidates import CANDIDATES

    texts = json.loads(texts_file.read_text("utf-8"))
    started = time.perf_counter()
    encoder = CANDIDATES[name].make(threads, work)
    encoder.queries(["warm the model up"])
    load_s = time.perf_counter() - started
    for text in texts["questions"][:WARMUP]:
        encoder.queries([text])
    runs: dict[str, list[dict[str, float]]] = {"question": [], "chat": [], "rerank30": []}
    for _ in range(REPEATS):
        for kind, key in (("question", "questions"), ("chat", "chats")):
            samples = []
            for text in texts[key]:
                t0 = time.perf_counter()
                encoder.queries([text])
                samples.append(time.perf_counter() - t0)
            runs[kind].append(_stats(samples))
        samples = []
        for query, docs in texts["tops"]:
            t0 = time.perf_counter()
            encoder.queries([query])
            encoder.docs(docs)
            samples.append(time.perf_counter() - t0)
        runs["rerank30"].append(_stats(samples))
    return {
        "load_s": round(load_s, 2),
        **{
            kind: {
                stat: round(statistics.median(r[stat] for r in repeats), 2)
                for stat in ("p50_ms", "p95_ms")
            }
            for kind, repeats in runs.items()
        },
        "n": {k: len(texts[v]) for k, v in (("question", "questions"), ("chat", "chats"))}
        | {"rerank30": len(texts["tops"])},
    }


def time_models(
    names: Sequence[str],
    thread_counts: Sequence[int],
    texts: dict[str, Any],
    work: Path,
    entry: Path,
) -> dict[str, dict[str, Any]]:
    """Time every model at every thread count in child processes; model -> threads -> stats."""
    found: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        texts_file = Path(tmp) / "texts.json"
        texts_file.write_text(json.dumps(texts), "utf-8")
        for name in names:
            found[name] = {}
            for threads in thread_counts:
                env = dict(os.environ)
                for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
                    env[var] = str(threads)
                done = subprocess.run(
                    [
                        *(sys.executable, str(entry), "--time", name),
                        *("--threads", str(threads), "--texts", str(texts_file)),
                        *("--work", str(work)),
                    ],
                    env=env,
                    capture_output=True,
                    text=True,
                    check=False,
                )
                if done.returncode != 0:
                    said = done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"]
                    if done.returncode < 0:
                        said = [f"stopped by signal {-done.returncode}"]
                    found[name][str(threads)] = {"error": said}
                    continue
                found[name][str(threads)] = json.loads(done.stdout.strip().splitlines()[-1])
                print(f"timed {name} at {threads} thread(s)", file=sys.stderr, flush=True)
    return found
