"""Maintenance benchmark: LLM calls, tokens and time of the daemon's job cycles against store size.

For each store size (default 1k, 10k, 100k memories) a base store is prepared once and cached
under --work: the synthetic memories of bench/corpus.py (the corpus bench/latency.py uses)
through Store.add_memories, plus --traits user traits (preference memories with
``trait: true``) so that the soul mapper's prompt shows a full profile, as in a store the daemon
has maintained for a while. Vectors come from Store.indexer.sync(): the real ONNX model up to
--real-max memories; above it, each text's vector is a normalised mix of two real embeddings
from a pool of --pool generated texts (bench/latency.py's PoolEmbedder), because embedding
100k memories with the model takes hours on two cores. When bench/latency.py has already
prepared the same corpus at that size (bench/.work/latency/n<SIZE>), its store is copied.
The synthetic memories are about other things than LoCoMo's dialogues, so on top of them
--related-share (default 5%) of the size is added as LoCoMo turns that never arrive as logs,
in the form the scripted extractor gives memories (real vectors): the new memories then find
neighbours, near duplicates and events in the base, more of them the bigger the store.
Every job's watermark is then set to the newest memory: the base counts as maintained.

Each measured run works on a fresh copy of the base store, in one namespace, and runs cycles:
each job of secretary.jobs.registry.JOBS in order through ``run_job`` (exactly run_cycle's loop,
timed per job), then ``store.vector.indexer.sync()`` as ``secretary dream`` does.

  N=0        a cycle on the untouched base: nothing is new, so it must make no LLM call
  arrival N  N LoCoMo dialogue turns arrive as conversation log lines, then one cycle
  follow-up  cycles with no new logs until one makes no call (the traits and summaries made in
             the arrival cycle are new memories for the linker and auditor, and work left by
             max_llm_calls_per_run waits for the next run); that last cycle is the N=0 check

The LLM is a scripted OpenAI-compatible server on 127.0.0.1 (tests/helpers/openai_server.py)
that answers each job's schema with a valid reply built from the ids and texts of the request,
and counts tokens itself: prompt tokens with litellm.token_counter(model=COUNT_MODEL) over the
request's messages (the response_format schema is counted apart, not in the prompt), completion
tokens with the same tokenizer over the reply text. The server's counts are compared with the
tokens_in/tokens_out of the maintenance records the runs wrote.

With SECRETARY_LLM_MODEL set (plus SECRETARY_LLM_API_BASE / SECRETARY_LLM_API_KEY as the model
needs), the same cycles run against that model instead; tokens then come from the records
(the provider's usage). This costs real tokens: start with --quick.

LoCoMo (CC BY-NC) is read from outside the repository and never copied into it; results hold
numbers only.

    python bench/maintenance.py --quick                        # 1k store, N in 10,50
    python bench/maintenance.py --sizes 1000,10000,100000      # what results/maintenance.md shows
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from maintenance_bench.cli import main

if __name__ == "__main__":
    sys.exit(main(description=__doc__))
