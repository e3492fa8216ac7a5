"""How a job run ended (``RunOutcome``), what its record says, and what deciding it reads.

Shared by ``secretary.runner`` (a run) and ``secretary.approval`` (a stored plan approved or
rejected later), so that neither imports the other's internals.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

from loguru import logger

from secretary.jobs.base import Plan
from secretary.jobs.context import LlmCalls
from secretary.jobs.guardrails import (
    Filtered,
    ProtectionFacts,
    cap_refusal,
    count_changes,
    drop_protected,
    named_ids,
    overtaken,
    protected_ids,
    too_long,
)
from secretary.jobs.settings import GuardrailSettings
from store.changes import plural
from store.database import Database
from store.kinds import RecordStatus
from store.operations import Operation, changed_ids
from store.service import Store
from store.shapes.records import dropped_total

Status = Literal["applied", "planned", "refused", "failed", "skipped", "nothing"]


@dataclass(frozen=True, kw_only=True)
class RunOutcome:
    job: str
    namespace: str
    status: Status
    record_id: int | None = None
    stats: Mapping[str, Any] = field(default_factory=dict)
    message: str = ""
    # The plan as it would be (dry run) or was applied, after the guardrails.
    plan: Plan | None = None
    # Every record the run wrote (a two-part job writes one per part); record_id is the last.
    records: tuple[int, ...] = ()
    # Skipped because another process runs this job on the namespace right now.
    busy: bool = False


def make_outcome(
    job: str,
    namespace: str,
    status: Status,
    message: str,
    record_id: int | None = None,
    stats: Mapping[str, Any] | None = None,
    plan: Plan | None = None,
) -> RunOutcome:
    return RunOutcome(
        job=job,
        namespace=namespace,
        status=status,
        record_id=record_id,
        stats=dict(stats or {}),
        message=message,
        plan=plan,
    )


def protected_targets(
    db: Database, namespace: str, plan: Plan, guardrails: GuardrailSettings, *, now: datetime
) -> Filtered:
    """Return which changes of the plan may go ahead: those that retire or rewrite no protected
    memory (only a pinned one, for the merge of an exact duplicate: ``drop_protected``)."""
    rows = db.memories.many(namespace, changed_ids(plan.operations))
    facts = [
        ProtectionFacts(
            id=m.id, pinned=m.pinned, importance=m.importance, last_accessed=m.last_accessed
        )
        for m in rows
    ]
    return drop_protected(
        [c.operations for c in plan.changes],
        protected_ids(facts, guardrails, now=now),
        lossless={i for i, c in enumerate(plan.changes) if c.lossless},
        pinned={m.id for m in rows if m.pinned},
    )


def guarded(
    store: Store, namespace: str, plan: Plan, guardrails: GuardrailSettings, *, now: datetime
) -> tuple[Plan, Filtered]:
    """The plan without the changes writing content over the store's limit (``too_long``) or
    overtaken by another writer (``without_overtaken``), and which of the rest may go ahead
    (``protected_targets``)."""
    longest = store.limits.max_content_chars
    plan = _without(plan, too_long([c.operations for c in plan.changes], longest))
    plan = without_overtaken(store.db, namespace, plan)
    return plan, protected_targets(store.db, namespace, plan, guardrails, now=now)


def _without(plan: Plan, reasons: Mapping[int, str]) -> Plan:
    """The plan without the changes at the indexes of ``reasons``, each listed with its reason
    among the plan's ``rejected``."""
    if not reasons:
        return plan
    logger.warning("{}: dropping {} change(s): {}", plan.job, len(reasons), list(reasons.values()))
    rejected = [{"item": plan.changes[i].label, "reason": why} for i, why in reasons.items()]
    kept = plan.keeping(i for i in range(len(plan.changes)) if i not in reasons)
    return replace(kept, rejected=(*plan.rejected, *rejected))


def without_overtaken(db: Database, namespace: str, plan: Plan) -> Plan:
    """The plan without the changes another writer overtook while the job planned and waited
    on the model (``overtaken``: a supersede by a memory deleted meanwhile would retire both; a
    merge's new text would undo a person's edit). Each dropped change is listed in the plan's
    ``rejected`` with why. What a forget erased meanwhile is the writer's to check
    (``store.write.stale``), in the transaction that applies or stores the plan."""
    named = named_ids(plan.operations) | {i for c in plan.changes for i in c.read}
    current = {m.id: (m.status, m.version) for m in db.memories.many(namespace, named)}
    return _without(plan, overtaken([(c.operations, c.read) for c in plan.changes], current))


def capped_operations(plan: Plan) -> list[Operation]:
    """The operations the change cap counts: all but the merges of exact duplicates."""
    return [op for c in plan.changes if not c.lossless for op in c.operations]


def cap_refused(
    db: Database, namespace: str, plan: Plan, guardrails: GuardrailSettings
) -> str | None:
    """Why the plan is over the per-run cap (``cap_refusal``), or None. The namespace's active
    memories are counted only for a plan that changes more of them than the share's floor:
    below it the share cannot refuse, and most plans (new memories, relations) change none."""
    count = count_changes(capped_operations(plan))
    over_floor = count.existing > guardrails.change_share_floor
    return cap_refusal(count, db.memories.count(namespace) if over_floor else 0, guardrails)


def run_stats(
    plan: Plan,
    kept: Plan,
    llm: LlmCalls,
    *,
    dropped: Sequence[str],
    protected_hit: Sequence[int],
) -> dict[str, Any]:
    """What a run's record says about a plan after the guardrails.

    ``dropped`` are the labels of the changes dropped for touching ``protected_hit``. Items
    left out (invalid reply items, replies naming what was not sent, protected memories) are
    listed under "dropped" with their reasons.
    """
    rejected = [*llm.dropped, *plan.rejected]
    reason = f"touches protected memories {list(protected_hit)}"
    rejected += [{"item": label, "reason": reason} for label in dropped]
    stats: dict[str, Any] = {
        **plan.stats,
        "changes": len(kept.changes),
        "operations": len(kept.operations),
        "llm_calls": llm.calls,
        "dropped_protected": len(dropped),
        "protected_ids": list(protected_hit),
    }
    if rejected:
        stats["dropped"] = rejected
    if llm.mended:
        stats["mended"] = list(llm.mended)
    if plan.stopped:
        stats["stopped"] = plan.stopped
    if plan.skipped:
        stats["skipped"] = plan.skipped
    return stats


def cap_of(guardrails: GuardrailSettings) -> dict[str, Any]:
    """The change cap, as a refused plan remembers it."""
    return guardrails.model_dump(
        include={"max_changes_per_run", "max_change_share", "change_share_floor"}
    )


def current_refusal(
    db: Database, job: str, namespace: str, guardrails: GuardrailSettings
) -> str | None:
    """Why not to plan again: the job's last plan was refused by the change cap and neither
    the cap nor the namespace changed since (planning again would ask the model again)."""
    latest = db.records.find(namespaces=[namespace], job=job, limit=1)
    if not latest or latest[0].status != RecordStatus.REFUSED:
        return None
    record = latest[0]
    if record.stats.get("refused_by") != "cap" or "plan" not in record.stats:
        return None
    if record.stats.get("cap") != cap_of(guardrails):
        return None
    if record.stats.get("revision") != db.search.revision(namespace):
        return None
    return (
        f"plan #{record.id} was refused by the change cap and nothing changed since: raise"
        " [guardrails] max_changes_per_run, or approve it:"
        f" `secretary plans approve {record.id}`"
    )


def with_records(outcome: RunOutcome, records: Sequence[int]) -> RunOutcome:
    return replace(outcome, records=tuple(records))


def merged_stats(parts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The parts' stats as one: counts added, lists joined, anything else the last part's."""
    out: dict[str, Any] = {}
    for stats in parts:
        for key, value in stats.items():
            if key != "part":
                out[key] = _together(out.get(key), value)
    return out


def _together(old: Any, new: Any) -> Any:
    if isinstance(old, list) and isinstance(new, list):
        return [*old, *new]
    both_counts = all(isinstance(v, int) and not isinstance(v, bool) for v in (old, new))
    return old + new if both_counts else new


def state_moved(old: Mapping[str, Any], new: Mapping[str, Any] | None) -> bool:
    # Watermarks start at 0, so a missing key and 0 mean the same.
    return new is not None and any(value != old.get(key, 0) for key, value in new.items())


def dropped_count(stats: Mapping[str, Any]) -> int:
    """How many items a run left out, as its record counts them (``records list``, the
    console): invalid reply items, ids its replies named that were not sent, changes that
    would have touched protected memories."""
    return dropped_total(stats)


def spent_words(stats: Mapping[str, Any], info: Mapping[str, Any]) -> str:
    """What a run's message adds of what it left out and spent, whatever it applied:
    "; dropped 10 items (3 ids the model was not sent); 1 LLM call, 827 tokens" ("" if it
    dropped nothing and asked nothing). ``info`` is ``LlmCalls.record_info()``."""
    words = []
    if items := dropped_count(stats):
        ids = len(stats.get("dropped_ids") or ())
        unsent = f" ({plural(ids, 'id')} the model was not sent)" if ids else ""
        words.append(f"dropped {plural(items, 'item')}{unsent}")
    if calls := int(stats.get("llm_calls") or 0):
        tokens = int(info.get("tokens_in") or 0) + int(info.get("tokens_out") or 0)
        words.append(f"{plural(calls, 'LLM call')}, {plural(tokens, 'token')}")
    return "".join(f"; {word}" for word in words)


def applied_words(
    plan: Plan, operations: int, stats: Mapping[str, Any], info: Mapping[str, Any]
) -> str:
    """An applied plan in words: what it applied, left out and spent, and what it did not do."""
    if operations:
        changes = plural(len(plan.changes), "change")
        message = f"{changes} applied ({plural(operations, 'operation')})"
    else:
        message = "applied nothing (every change was in place already)"
    message += spent_words(stats, info)
    if plan.skipped:
        message += f"; {plan.skipped}: its LLM part was skipped"
    if plan.stopped:
        message += f"; stopped early: {plan.stopped}"
    if plan.left:
        message += f"; {plan.left}"
    return message


def nothing_words(stats: Mapping[str, Any]) -> str:
    """A run that changed nothing, in words: it dropped what it got, or the model found
    nothing to change, or there was nothing to do."""
    if dropped_count(stats):
        return "applied nothing"
    return "nothing to change" if stats.get("llm_calls") else "nothing to do"


def part_words(outcome: RunOutcome, *, with_record: bool) -> str:
    """One part's words in a run's message: "deterministic: 20 changes applied (record #3)"."""
    words = outcome.message
    if outcome.plan is not None and outcome.plan.part:
        words = f"{outcome.plan.part}: {words}"
    if with_record and outcome.record_id is not None:
        words += f" (record #{outcome.record_id})"
    return words


def run_words(outcomes: Sequence[RunOutcome], *, with_record: bool) -> str:
    """The parts' words in a run's message. Records one after the other that applied changes
    of one part (a backlog worked through a read at a time) are said once: "deterministic:
    437 changes applied in 3 records (#3-#5)"."""
    said: list[str] = []
    start = 0
    while start < len(outcomes):
        end = start + 1
        while end < len(outcomes) and _same_batch(outcomes[start], outcomes[end]):
            end += 1
        group = outcomes[start:end]
        if len(group) == 1:
            said.append(part_words(group[0], with_record=with_record))
        else:
            said.append(_batch_words(group))
        start = end
    return "; ".join(said)


def _part(outcome: RunOutcome) -> str | None:
    return outcome.plan.part if outcome.plan is not None else None


def _same_batch(first: RunOutcome, other: RunOutcome) -> bool:
    return (
        first.status == other.status == "applied"
        and _part(first) == _part(other)
        and first.record_id is not None
        and other.record_id is not None
    )


def _batch_words(group: Sequence[RunOutcome]) -> str:
    changes = sum(int(o.stats.get("changes") or 0) for o in group)
    records = f"#{group[0].record_id}-#{group[-1].record_id}"
    words = f"{plural(changes, 'change')} applied in {len(group)} records ({records})"
    tails: list[str] = []
    for outcome in group:
        for tail in outcome.message.split("; ")[1:]:
            if tail not in tails:
                tails.append(tail)
    part = _part(group[0])
    return (f"{part}: " if part else "") + "; ".join([words, *tails])
