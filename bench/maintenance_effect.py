"""The maintenance effect: LoCoMo polluted with duplicates and contradictions, then dreamed.

Part 1, one dream cycle. Every turn of each LoCoMo conversation becomes a memory, one
namespace per conversation, as bench/locomo.py ingests them (external_id = dia_id, the
session's time and id); every job's watermark is then set past them, so the clean store counts
as maintained. A copy is polluted, on disjoint turns chosen by a seeded shuffle, --share of the
turns per kind:

  exact       the same item again under a new external id (a client re-sending a batch)
  later       the same text minutes later in the same session, with no or a new external id
  paraphrase  the turn reworded (synonyms swapped, sentences or clauses reordered)
  update      the turn restated with one detail changed, in the next session

with the ground truth kept: copies and paraphrases belong merged into their turn; a turn with
an update belongs superseded by the update. A copy of the polluted store gets one full dream
cycle per conversation (secretary.runner.run_cycle, every job, at the conversation's "now",
then the index synced, as `secretary dream` does). The model is a scripted OpenAI-compatible
server on 127.0.0.1 (tests/helpers/openai_server.py, reached through litellm) that answers
the auditor from the ground truth for the groups the auditor chooses to send, and nothing to
the other jobs. With SECRETARY_LLM_MODEL set (plus SECRETARY_LLM_API_BASE / _API_KEY as the
model needs) the same cycle also runs against that model, reported separately; it spends real
tokens (about 30k per conversation in the scripted run).

Reported: duplicates hidden (% of polluting memories, for an update of changed turns, no
longer active; and hidden into the memory the ground truth names), evidence turns lost (an
evidence turn that no active memory carries, itself or through replaced_by: must be 0), false
merges (a memory retired that the ground truth keeps), and LoCoMo evidence recall@10 of the
clean, polluted and dreamed stores as bench/locomo.py computes it (defaults, k=10,
reinforce=false), a dreamed hit counting for the turns it carries. Target: dreamed within one
point of clean.

Part 2, simulated days (--days, default 100). A fresh store receives each conversation's
sessions spread over the days, with their pollution, and runs one cycle a night with time
frozen (now passed in). Checked every night: no turn lost, no false merge, tombstones purged
by retention after the undo window and not before; every --undo-every nights: the night's
records undone and redone with the export equal before and after, earlier retirements undone
one record at a time, the oldest one within the window rolled back to in a copy, and records
past the window shown gone.

LoCoMo (CC BY-NC) is read from outside the repository and never copied into it; results hold
numbers only. SECRETARY_JOBS_* and SECRETARY_GUARDRAILS_* overrides apply and change what is
measured; no other SECRETARY_* variable does.

    python bench/maintenance_effect.py --quick     # one conversation's first sessions, ~1 min
    python bench/maintenance_effect.py             # what results/maintenance_effect.md shows
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from effect_bench.cli import main

if __name__ == "__main__":
    sys.exit(main(description=__doc__))
