"""Clean, polluted and dreamed: LoCoMo stores before and after one dream cycle, measured.

1. The clean store (``stores.clean_store``) is searched: LoCoMo evidence recall@10.
2. A copy is polluted (``pollution.pollute``), indexed and searched again.
3. A copy of the polluted store gets one full dream cycle per conversation (``run_cycle``,
   every job, at the conversation's "now"), with the scripted model or the real one; then the
   index is synced (as `secretary dream` does), the effect is compared with the ground truth
   (``metrics.effect``) and the store is searched again, hits mapped to the turns they carry.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchkit import say
from locomo_bench.data import Conversation
from maintenance_bench.facts import newest_record_id, operations_since, records_since, tokens_by_job

from effect_bench.metrics import Images, active_ids, chains_of, effect, total
from effect_bench.model import Oracle, scripted_server
from effect_bench.pollution import Truth, changed_words, counts_for, pollute
from effect_bench.recall import (
    PARTS,
    Hits,
    Represents,
    asked,
    attribution,
    by_carrier,
    by_turn,
    placed,
    recall,
    search_all,
)
from effect_bench.stores import Stores, add_pollution, clean_store, images
from secretary.cycle import run_cycle
from secretary.outcomes import RunOutcome
from store.views import RecordView


def evidence_of(conv: Conversation) -> set[str]:
    return {dia_id for q in conv.questions for dia_id in q.evidence}


def updated_turns(truths: Mapping[str, Truth]) -> dict[str, set[str]]:
    """Namespace -> the dia_ids of the turns an update changed."""
    return {
        ns: {p.source for p in truth.pollutants.values() if p.hides_source}
        for ns, truth in truths.items()
    }


def recalls(
    conversations: Sequence[Conversation],
    hits: Hits,
    represents: Mapping[str, Represents],
    truths: Mapping[str, Truth],
) -> dict[str, Any]:
    """Recall over every question, and over those whose evidence no update changed (an
    update may change the very detail a question asks about: then the store rightly answers
    with the update, which no longer matches the question)."""
    return {
        "all": recall(conversations, hits, represents),
        "unchanged": recall(conversations, hits, represents, skip=updated_turns(truths)),
    }


@contextmanager
def llm_for(label: str, oracle: Oracle) -> Iterator[str | None]:
    """The api_base of the scripted server, or None for the model of SECRETARY_LLM_*."""
    if label != "scripted":
        yield None
        return
    with scripted_server(oracle) as api_base:
        yield api_base


def run_effect(
    stores: Stores,
    conversations: Sequence[Conversation],
    *,
    share: float,
    seed: int,
    llms: Sequence[str] = ("scripted",),
) -> dict[str, Any]:
    """Measure clean, polluted and (per LLM) dreamed stores; return the report's section."""
    started = time.perf_counter()
    clean = clean_store(stores, conversations)
    with stores.opened(clean) as store:
        clean_hits = search_all(store, conversations)
    say("clean store searched")
    polluted = stores.copy(clean, "polluted")
    truths: dict[str, Truth] = {}
    with stores.opened(polluted) as store:
        for conv in conversations:
            pollutants = pollute(conv, counts_for(len(conv.turns), share), seed=seed)
            truths[conv.namespace] = add_pollution(store, conv, pollutants, now=conv.now)
        store.indexer.sync()
        before = {c.namespace: images(store, c.namespace) for c in conversations}
        polluted_hits = search_all(store, conversations)
    say("polluted store searched")
    turns = {ns: by_turn(truth) for ns, truth in truths.items()}
    lenient = {
        ns: by_carrier(truth, chains_of(before[ns]), lenient=True) for ns, truth in truths.items()
    }
    section: dict[str, Any] = {
        "pollution": {
            "share_per_kind": share,
            "seed": seed,
            "per_kind": dict(
                Counter(p.kind for t in truths.values() for p in t.pollutants.values())
            ),
        },
        "recall": {
            "clean": recalls(conversations, clean_hits, turns, truths),
            "polluted": recalls(conversations, polluted_hits, turns, truths),
            "polluted_lenient": recalls(conversations, polluted_hits, lenient, truths),
        },
        "dreamed": {},
    }
    for label in llms:
        dreamed, hits, carried = dream(stores, polluted, conversations, truths, before, label)
        changed = {
            c.namespace: changed_words(c, truths[c.namespace].pollutants.values())
            for c in conversations
        }
        dreamed["moved_from_clean"] = attribution(
            conversations, (clean_hits, turns), (hits, carried), changed
        )
        dreamed["moved_from_polluted"] = attribution(
            conversations, (polluted_hits, turns), (hits, carried), changed
        )
        dreamed["update_context"] = update_context(
            stores, clean, stores.work / f"dreamed-{label}", conversations, truths
        )
        section["dreamed"][label] = dreamed
    section["seconds"] = round(time.perf_counter() - started, 1)
    return section


def dream(
    stores: Stores,
    polluted: Path,
    conversations: Sequence[Conversation],
    truths: Mapping[str, Truth],
    before: Mapping[str, Images],
    label: str,
) -> tuple[dict[str, Any], Hits, dict[str, Represents]]:
    """One full cycle per conversation on a copy of the polluted store; return what it did,
    the dreamed store's hits and what each hit represents."""
    data_dir = stores.copy(polluted, f"dreamed-{label}")
    oracle = Oracle()
    for truth in truths.values():
        oracle.learn(truth)
    started = time.perf_counter()
    with llm_for(label, oracle) as api_base:
        settings = stores.settings(data_dir, api_base)
        with stores.opened(data_dir, api_base) as store:
            first = newest_record_id(store.db)
            outcomes: list[RunOutcome] = []
            for conv in conversations:
                outcomes += run_cycle(store, settings, now=conv.now, namespaces=[conv.namespace])
            store.indexer.sync()
            cycle_seconds = time.perf_counter() - started
            records = records_since(store.db, first)
            relations = sum(
                1
                for op in operations_since(store.db, first)
                if op.target_kind == "relation" and op.before is None
            )
            after = {c.namespace: images(store, c.namespace) for c in conversations}
            hits = search_all(store, conversations)
    say(f"dreamed store ({label}) searched")
    effects = {
        c.namespace: effect(
            active_ids(before[c.namespace]),
            chains_of(after[c.namespace]),
            truths[c.namespace],
            evidence_of(c),
            sources={i: str(image["source"]) for i, image in after[c.namespace].items()},
        )
        for c in conversations
    }
    chains = {ns: chains_of(found) for ns, found in after.items()}
    carried: dict[str, Represents] = {ns: by_carrier(truths[ns], chains[ns]) for ns in truths}
    lenient = {ns: by_carrier(truths[ns], chains[ns], lenient=True) for ns in truths}
    measured: dict[str, Any] = {
        "llm": settings.llm.model if label != "scripted" else "answers the auditor from the truth",
        "effect": total(effects.values()),
        "per_conversation": {ns: e.as_json() for ns, e in effects.items()},
        "recall": recalls(conversations, hits, carried, truths),
        "recall_lenient": recalls(conversations, hits, lenient, truths),
        "jobs": job_summary(outcomes, tokens_by_job(records), prompts_by_job(records)),
        "relations_created": relations,
        "server": oracle.usage() if label == "scripted" else None,
        "cycle_seconds": round(cycle_seconds, 1),
    }
    return measured, hits, carried


def prompts_by_job(records: Sequence[RecordView]) -> dict[str, list[str]]:
    """Job -> the prompts its records say it sent ("auditor v2")."""
    found: dict[str, set[str]] = {}
    for record in records:
        for prompt in record.prompts:
            found.setdefault(record.job, set()).add(f"{prompt.get('id')} v{prompt.get('version')}")
    return {job: sorted(names) for job, names in found.items()}


def update_context(
    stores: Stores,
    clean: Path,
    dreamed: Path,
    conversations: Sequence[Conversation],
    truths: Mapping[str, Truth],
) -> dict[str, Any]:
    """For the questions whose evidence turn the cycle superseded by its update: the turn's
    mean rank and score parts in the clean store against the update's in the dreamed one."""
    pairs: list[tuple[dict[str, float], dict[str, float]]] = []
    with stores.opened(clean) as before, stores.opened(dreamed) as after:
        for conv in conversations:
            truth = truths[conv.namespace]
            updates = {p.source: i for i, p in truth.pollutants.items() if p.hides_source}
            status = {
                m.id: m.status for m in after.db.memories.many(conv.namespace, truth.turns.values())
            }
            for question in asked(conv):
                changed = [d for d in question.evidence if d in updates]
                turn = truth.turns[changed[0]] if changed else None
                if turn is None or status.get(turn) == "active":
                    continue
                pairs.append(
                    (
                        placed(before, conv, question, turn),
                        placed(after, conv, question, updates[changed[0]]),
                    )
                )
    keys = ["rank", *PARTS]
    return {
        "questions": len(pairs),
        "turn_in_clean": {k: _mean(p[0][k] for p in pairs) for k in keys},
        "update_in_dreamed": {k: _mean(p[1][k] for p in pairs) for k in keys},
    }


def _mean(values: Iterable[float]) -> float:
    found = list(values)
    return round(sum(found) / len(found), 3) if found else 0.0


def job_summary(
    outcomes: Sequence[RunOutcome],
    tokens: Mapping[str, tuple[int, int]],
    prompts: Mapping[str, list[str]],
) -> dict[str, Any]:
    """Per job: outcomes by status, LLM calls, tokens (from the records), the prompts sent,
    notable messages."""
    out: dict[str, Any] = {}
    for outcome in outcomes:
        entry = out.setdefault(outcome.job, {"status": Counter(), "llm_calls": 0, "notes": []})
        entry["status"][outcome.status] += 1
        entry["llm_calls"] += int(outcome.stats.get("llm_calls", 0))
        if outcome.status in ("failed", "refused") or "stopped" in outcome.message:
            # The same message in every namespace is said once, with how often.
            entry["notes"][re.sub(r"\d+", "N", outcome.message)] += 1
    for job, entry in out.items():
        entry["status"] = dict(entry["status"])
        entry["notes"] = dict(entry["notes"])
        entry["tokens_in"], entry["tokens_out"] = tokens.get(job, (0, 0))
        entry["prompts"] = prompts.get(job, [])
    return out
