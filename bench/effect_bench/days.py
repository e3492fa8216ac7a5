"""Simulated days: arrivals by day and one dream cycle per night, with time frozen.

Each conversation is a namespace of a fresh store; its sessions are spread evenly over the
arrival days in order, so that a day brings a slice of a conversation's turns (the sessions
whose day it is) plus the pollution of those sessions (``pollution.pollute``: copies and
paraphrases with their turn, an update with the session after its turn's). Turns keep their
LoCoMo times; the simulation's clock starts the day after the latest conversation ends:
arrivals are ingested at 10:00 and the night's ``run_cycle`` (every job, every namespace with
memories) runs at 23:00, then the index is synced. Time is passed in, never read.

After every night (``Ledger.check``): no turn may be lost (each arrived turn active, or
carried by an active memory through replaced_by chains remembered past purges), no memory
the ground truth keeps may be retired, and each tombstone must be purged by retention once it
is older than the undo window, not before. Every ``undo_every``-th night the checks of
``undoing`` run: the night's records undone and redone, a sample of earlier retirements
within the window restored (and put back), and a sample of older ones gone.
"""

from __future__ import annotations

import re
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from datetime import time as clock
from functools import partial
from pathlib import Path
from typing import Any

from benchkit import say
from locomo_bench.data import Conversation
from maintenance_bench.facts import newest_record_id, records_since

from effect_bench.metrics import ACTIVE, Chains, effect, total
from effect_bench.model import Oracle, scripted_server
from effect_bench.pollution import Pollutant, Truth, counts_for, pollute
from effect_bench.stores import Stores, database_copy, export_lines, images
from effect_bench.undoing import (
    Retirement,
    night_round_trip,
    purged_gone,
    restore_retired,
    retirements,
    roll_back,
)
from secretary.cycle import run_cycle
from store.service import Store

ARRIVAL = clock(10, 0)
NIGHT = clock(23, 0)
SAMPLE = 3  # earlier retirements restored, and old ones checked gone, per undo check


@dataclass(frozen=True, kw_only=True)
class Arrival:
    namespace: str
    turns: tuple[dict[str, Any], ...]
    pollutants: tuple[Pollutant, ...]


def schedule(
    conversations: Sequence[Conversation], pollution: Mapping[str, Sequence[Pollutant]], days: int
) -> dict[int, list[Arrival]]:
    """Day (1-based) -> that day's arrivals: each conversation's sessions spread evenly."""
    plan: dict[int, list[Arrival]] = {}
    for conv in conversations:
        sessions = list(dict.fromkeys(t["session_id"] for t in conv.turns))
        day_of = {s: 1 + n * days // len(sessions) for n, s in enumerate(sessions)}
        for day in sorted(set(day_of.values())):
            todays = {s for s, d in day_of.items() if d == day}
            plan.setdefault(day, []).append(
                Arrival(
                    namespace=conv.namespace,
                    turns=tuple(dict(t) for t in conv.turns if t["session_id"] in todays),
                    pollutants=tuple(p for p in pollution[conv.namespace] if p.session in todays),
                )
            )
    return plan


def _utc(text: str) -> datetime:
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


@dataclass
class Ledger:
    """What the simulation knows: ground truth, chains, retirements, and what went wrong."""

    window: timedelta
    truths: dict[str, Truth] = field(default_factory=dict)
    chains: dict[str, Chains] = field(default_factory=dict)
    updated: dict[int, datetime] = field(default_factory=dict)
    retirements: list[Retirement] = field(default_factory=list)
    lost_max: int = 0
    false_merges: set[int] = field(default_factory=set)
    purged: set[int] = field(default_factory=set)
    purged_early: set[int] = field(default_factory=set)
    kept_too_long: set[int] = field(default_factory=set)

    def arrive(self, namespace: str, ids: Sequence[int], arrival: Arrival) -> Truth:
        """Add an arrival's ground truth (ids in the order the items were sent)."""
        turns = len(arrival.turns)
        new = Truth(
            turns={t["external_id"]: i for t, i in zip(arrival.turns, ids[:turns], strict=True)},
            pollutants=dict(zip(ids[turns:], arrival.pollutants, strict=True)),
        )
        old = self.truths.get(namespace, Truth(turns={}, pollutants={}))
        self.truths[namespace] = Truth(
            turns={**old.turns, **new.turns}, pollutants={**old.pollutants, **new.pollutants}
        )
        return Truth(turns=self.truths[namespace].turns, pollutants=new.pollutants)

    def check(self, store: Store, night: datetime, *, purged_at: datetime) -> int:
        """Read every namespace back; return how many turns are lost tonight (``purged_at``:
        when tonight's retention ran)."""
        lost = 0
        for namespace, truth in self.truths.items():
            found = images(store, namespace)
            chains = self.chains.setdefault(namespace, Chains())
            gone = {i for i, s in chains.status.items() if s != "purged"} - set(found)
            self.purged |= gone
            self.purged_early |= {i for i in gone if purged_at - self.updated[i] < self.window}
            chains.see(found, purged=gone)
            for memory_id, image in found.items():
                self.updated[memory_id] = _utc(image["updated_at"])
                too_old = night - self.updated[memory_id] > self.window + timedelta(days=1)
                if image["status"] != ACTIVE and too_old:
                    self.kept_too_long.add(memory_id)
            lost += sum(1 for i in truth.turns.values() if chains.carrier(i) is None)
            keep = set(truth.turns.values()) - set(truth.expected_retired())
            keep |= {i for i, p in truth.pollutants.items() if p.hides_source}
            self.false_merges |= {i for i in keep if chains.status.get(i, ACTIVE) != ACTIVE}
        self.lost_max = max(self.lost_max, lost)
        return lost


def ingest(
    store: Store, ledger: Ledger, oracle: Oracle, arrivals: Iterable[Arrival], now: datetime
) -> int:
    """Add the day's arrivals (turns first, then their pollution); tell the oracle."""
    count = 0
    for arrival in arrivals:
        items = [*arrival.turns, *(p.item for p in arrival.pollutants)]
        added = store.add_memories(arrival.namespace, items, now=now, source="bench-days")
        if added.skipped:
            raise SystemExit(f"{arrival.namespace}: {added.skipped} arrival(s) were not new")
        oracle.learn(ledger.arrive(arrival.namespace, added.ids, arrival))
        count += len(items)
    store.indexer.sync()
    return count


def _spread(items: Sequence[Retirement], count: int) -> list[Retirement]:
    """Up to ``count`` items evenly spread, the first and the last included."""
    if len(items) <= count:
        return list(items)
    step = (len(items) - 1) / (count - 1)
    return [items[round(n * step)] for n in range(count)]


def undo_checks(
    store: Store,
    copy_of: Callable[[], AbstractContextManager[Store]],
    ledger: Ledger,
    day: int,
    night: datetime,
    tonight: tuple[Sequence[int], Mapping[str, list[str]], Mapping[str, list[str]]],
) -> dict[str, Any]:
    """The night's round trip, a sample of earlier retirements undone one by one, the oldest
    one within the window rolled back to in a copy (``copy_of``), and old ones gone."""
    records, before, after = tonight
    window_days = ledger.window.days
    earlier = [r for r in ledger.retirements if 0 < day - r.night < window_days]
    old = [r for r in ledger.retirements if day - r.night > window_days + 1]
    result: dict[str, Any] = {
        "night": day,
        "round_trip": night_round_trip(store, records, before, after, now=night),
        "restored": [
            {**restore_retired(store, r, now=night), "age_nights": day - r.night}
            for r in _spread(earlier, SAMPLE)
        ],
        "rolled_back": [],
        "gone": [
            {**purged_gone(store, r), "age_nights": day - r.night} for r in _spread(old, SAMPLE)
        ],
    }
    if earlier:
        with copy_of() as copy:
            rolled = roll_back(copy, earlier[0], now=night)
        result["rolled_back"].append({**rolled, "age_nights": day - earlier[0].night})
    store.indexer.sync()
    return result


@contextmanager
def _copy(stores: Stores, data_dir: Path) -> Iterator[Store]:
    with stores.opened(database_copy(data_dir, stores.work / "days-copy")) as copy:
        yield copy


def run_days(
    stores: Stores,
    conversations: Sequence[Conversation],
    *,
    days: int,
    arrival_days: int,
    share: float,
    seed: int,
    undo_every: int,
) -> dict[str, Any]:
    """Run the simulation in a fresh store under ``stores.work``; return the report section."""
    started = time.perf_counter()
    data_dir: Path = stores.work / "days"
    shutil.rmtree(data_dir, ignore_errors=True)
    pollution = {
        c.namespace: pollute(c, counts_for(len(c.turns), share), seed=seed) for c in conversations
    }
    plan = schedule(conversations, pollution, arrival_days)
    start = datetime.combine(max(c.now for c in conversations).date(), clock(0), tzinfo=UTC)
    oracle = Oracle()
    nights: list[dict[str, Any]] = []
    checks: list[dict[str, Any]] = []
    failures: list[str] = []
    with scripted_server(oracle) as api_base:
        settings = stores.settings(data_dir, api_base)
        ledger = Ledger(window=timedelta(days=settings.jobs.retention_undo_days))
        with stores.opened(data_dir, api_base) as store:
            for day in range(1, days + 1):
                date = start + timedelta(days=day)
                arrived = ingest(
                    store, ledger, oracle, plan.get(day, []), datetime.combine(date, ARRIVAL, UTC)
                )
                night = datetime.combine(date, NIGHT, UTC)
                namespaces = sorted(ledger.truths)
                check = undo_every > 0 and (day % undo_every == 0 or day == days)
                before = export_lines(store, namespaces) if check else {}
                first = newest_record_id(store.db)
                cycle_started = time.perf_counter()
                outcomes = run_cycle(store, settings, now=night)
                store.indexer.sync()
                seconds = time.perf_counter() - cycle_started
                records = records_since(store.db, first)
                found = [
                    r
                    for record in records
                    if (r := retirements(day, record, store.db.records.get(record.id)[1]))
                ]
                ledger.retirements += found
                failures += [
                    f"night {day} {o.job} on {o.namespace}: {o.message}"
                    for o in outcomes
                    if o.status == "failed"
                ]
                # Each run of the cycle starts at its own time: retention's is when it purged.
                purged_at = max(
                    (r.started_at for r in records if r.job == "retention"), default=night
                )
                lost = ledger.check(store, night, purged_at=purged_at)
                if check:
                    tonight = ([r.id for r in records], before, export_lines(store, namespaces))
                    copy_of = partial(_copy, stores, data_dir)
                    checks.append(undo_checks(store, copy_of, ledger, day, night, tonight))
                nights.append(
                    {
                        "night": day,
                        "arrived": arrived,
                        "retired": sum(len(r.retired) for r in found),
                        "purged_total": len(ledger.purged),
                        "lost": lost,
                        "llm_calls": sum(int(o.stats.get("llm_calls", 0)) for o in outcomes),
                        "cycle_seconds": round(seconds, 2),
                        "statuses": dict(Counter(o.status for o in outcomes)),
                    }
                )
                if day % 10 == 0 or day == days:
                    say(f"days: night {day}/{days}, lost {lost}, purged {len(ledger.purged)}")
    return summary(conversations, ledger, nights, checks, failures, started, days, arrival_days)


def summary(
    conversations: Sequence[Conversation],
    ledger: Ledger,
    nights: Sequence[Mapping[str, Any]],
    checks: Sequence[Mapping[str, Any]],
    failures: Sequence[str],
    started: float,
    days: int,
    arrival_days: int,
) -> dict[str, Any]:
    evidence = {c.namespace: {d for q in c.questions for d in q.evidence} for c in conversations}
    effects = [
        effect(
            set(truth.turns.values()) | set(truth.pollutants),
            ledger.chains[ns],
            truth,
            evidence[ns],
        )
        for ns, truth in ledger.truths.items()
    ]
    restored = [r for c in checks for r in c["restored"]]
    gone = [g for c in checks for g in c["gone"]]
    rolled = [r for c in checks for r in c["rolled_back"]]
    trips = [c["round_trip"] for c in checks]
    return {
        "days": days,
        "arrival_days": arrival_days,
        "undo_window_days": ledger.window.days,
        "namespaces": len(ledger.truths),
        "memories_arrived": sum(n["arrived"] for n in nights),
        "effect": total(effects),
        "lost_max_any_night": ledger.lost_max,
        "lost_at_end": nights[-1]["lost"] if nights else 0,
        "false_merges": len(ledger.false_merges),
        "retired": sum(len(r.retired) for r in ledger.retirements),
        "purged": len(ledger.purged),
        "purged_before_window": len(ledger.purged_early),
        "tombstones_kept_past_window": len(ledger.kept_too_long),
        "failed_runs": list(failures),
        "undo": {
            "checks": len(checks),
            "round_trips_exact": sum(
                t["undone_equals_before"] and t["redone_equals_after"] for t in trips
            ),
            "records_undone": sum(t["records_undone"] for t in trips),
            "round_trip_refused_by_job": dict(
                sum((Counter(t.get("refused_by_job", {})) for t in trips), Counter())
            ),
            "retirements_restored": sum(r["restored"] for r in restored),
            "retirements_tried": sum(r["retired"] for r in restored),
            "restore_exports_back": sum(r["export_back"] for r in restored),
            "restore_refused_whole": sum(r["refused_whole"] for r in restored),
            "restore_records": len(restored),
            "oldest_restored_nights": max((r["age_nights"] for r in restored), default=None),
            "rollbacks": len(rolled),
            "rollback_restored": sum(r["restored"] for r in rolled),
            "rollback_retired": sum(r["retired"] for r in rolled),
            "rollback_refused_records": sum(len(r["refused"]) for r in rolled),
            "rollback_refused_because": sorted(
                {re.sub(r"\d+", "N", reason) for r in rolled for reason in r["refused"]}
            )[:5],
            "rollback_oldest_nights": max((r["age_nights"] for r in rolled), default=None),
            "restore_blocked_because": sorted(
                {
                    re.sub(r"\d+", "N", b.split(":", 1)[1].strip())
                    for r in restored
                    for b in r["blocked_because"]
                }
            ),
            "purged_records_checked": len(gone),
            "purged_still_present": sum(g["still_present"] for g in gone),
            "purged_beyond_undo": sum(g["beyond_undo"] for g in gone),
            "purged_retired": sum(g["retired"] for g in gone),
            "details": list(checks),
        },
        "nights": list(nights),
        "seconds": round(time.perf_counter() - started, 1),
    }
