"""Figures from the meter's transactions (pure): waits and holds, the lock's busy share, the
time the lock lay free while a transaction waited for it, and where the time went by what
the transactions wrote and by which thread ran them."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

WAITED = 0.001  # a wait longer than this counts as having queued (BEGIN IMMEDIATE alone: ~20 us)


def percentile(values: Sequence[float], share: float) -> float:
    """Nearest-rank percentile of ``values`` (0 for none)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(share * len(ordered)))
    return ordered[rank - 1]


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def spread(values: Sequence[float]) -> dict[str, float]:
    """Total in seconds, p50/p95/p99/max in milliseconds."""
    return {
        "total_s": round(sum(values), 3),
        "p50_ms": _ms(percentile(values, 0.50)),
        "p95_ms": _ms(percentile(values, 0.95)),
        "p99_ms": _ms(percentile(values, 0.99)),
        "max_ms": _ms(max(values, default=0.0)),
        "mean_ms": _ms(sum(values) / len(values)) if values else 0.0,
    }


def idle_while_waiting(txns: Iterable[Mapping[str, Any]]) -> float:
    """Seconds during which at least one transaction waited for the lock and none held it.

    On SQLite a waiter polls (the busy handler sleeps 1, 2, 5, 10, ... ms between tries), so
    the lock can lie free for a while after its holder let it go: the cost of the polling,
    not of the work. Meaningful only when holds do not overlap (one writer at a time)."""
    events: list[tuple[float, int, int]] = []  # (time, order at equal times, kind)
    for txn in txns:
        if txn["acquired"] is None:
            continue
        if txn["acquired"] > txn["asked"]:
            events += [(txn["asked"], 1, +1), (txn["acquired"], 0, -1)]  # waiting
        if txn["released"] is not None:
            events += [(txn["acquired"], 1, +2), (txn["released"], 0, -2)]  # holding
    events.sort()
    waiting = holding = 0
    idle = 0.0
    last = None
    for at, _order, kind in events:
        if last is not None and waiting > 0 and holding == 0:
            idle += at - last
        if abs(kind) == 1:
            waiting += 1 if kind > 0 else -1
        else:
            holding += 1 if kind > 0 else -1
        last = at
    return idle


def overlapping_holds(txns: Sequence[Mapping[str, Any]]) -> int:
    """How many holds began before an earlier one ended (0 on SQLite: one writer)."""
    held = sorted(
        (t["acquired"], t["released"]) for t in txns if t["outcome"] in ("commit", "rollback")
    )
    overlapping, latest_end = 0, -math.inf
    for start, end in held:
        overlapping += start < latest_end
        latest_end = max(latest_end, end)
    return overlapping


def overlap_ms(txns: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """How long holds overlapped in all and at most, in ms. On SQLite a hold cannot overlap
    another: what overlaps is the committing thread getting the GIL back (its release is
    recorded late) while the next holder already runs."""
    held = sorted((t["acquired"], t["released"]) for t in txns)
    overlaps, latest_end = [], -math.inf
    for start, end in held:
        if start < latest_end:
            overlaps.append(min(latest_end, end) - start)
        latest_end = max(latest_end, end)
    return {"total_ms": _ms(sum(overlaps)), "max_ms": _ms(max(overlaps, default=0.0))}


LONG_WAIT = 0.1


def long_waits(txns: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The waits over LONG_WAIT: how many, how many other transactions took the lock while each
    waited (on average), and the share of their waiting during which the lock lay free."""
    held = sorted((t["acquired"], t["released"]) for t in txns)
    long = [t for t in txns if t["acquired"] - t["asked"] > LONG_WAIT]
    overtaken = free = waited = 0.0
    for txn in long:
        asked, got = txn["asked"], txn["acquired"]
        others = [(a, r) for a, r in held if asked < a < got]
        overtaken += len(others)
        busy = sum(min(r, got) - max(a, asked) for a, r in held if a < got and r > asked)
        busy -= max(0.0, min(txn["released"], got) - max(txn["acquired"], asked))  # itself
        waited += got - asked
        free += max(0.0, (got - asked) - busy)
    return {
        "count": len(long),
        "mean_overtaken_by": round(overtaken / len(long), 1) if long else 0.0,
        "lock_free_share": round(free / waited, 3) if waited else 0.0,
    }


def _thread_group(name: str) -> str:
    """'dream_3' -> 'dream'; 'Thread-5 (renew)' -> 'Thread (renew)'."""
    head, _, rest = name.partition(" ")
    head = head.rstrip("0123456789").rstrip("_-")
    return f"{head} {rest}".strip() or name


def _breakdown(txns: Sequence[Mapping[str, Any]], key: str, top: int = 10) -> list[dict[str, Any]]:
    groups: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for txn in txns:
        if key == "tables":
            label = ",".join(txn["tables"][:3]) + (",..." if len(txn["tables"]) > 3 else "")
            groups[label or "(wrote nothing)"].append(txn)
        else:
            groups[_thread_group(txn["thread"])].append(txn)
    rows = []
    for label, members in groups.items():
        waits = [t["acquired"] - t["asked"] for t in members]
        holds = [t["released"] - t["acquired"] for t in members]
        rows.append(
            {
                "label": label,
                "count": len(members),
                "wait_total_s": round(sum(waits), 3),
                "wait_p95_ms": _ms(percentile(waits, 0.95)),
                "held_total_s": round(sum(holds), 3),
                "held_p50_ms": _ms(percentile(holds, 0.50)),
                "held_p95_ms": _ms(percentile(holds, 0.95)),
            }
        )
    rows.sort(key=lambda row: -(row["wait_total_s"] + row["held_total_s"]))
    return rows[:top]


def summarise(metered: Mapping[str, Any], wall: float) -> dict[str, Any]:
    """The figures of one night from the meter's dump and the night's wall seconds."""
    txns = [t for t in metered["transactions"] if t["outcome"] in ("commit", "rollback")]
    failed = [t for t in metered["transactions"] if t["outcome"] == "failed"]
    waits = [t["acquired"] - t["asked"] for t in txns]
    holds = [t["released"] - t["acquired"] for t in txns]
    held = sum(holds)
    held_cpu = sum(t.get("held_cpu", 0.0) for t in txns)
    return {
        "write_transactions": len(txns),
        "rolled_back": sum(1 for t in txns if t["outcome"] == "rollback"),
        "failed_to_lock": len(failed),
        "still_open_at_end": metered["still_open"],
        "waited_over_1ms": sum(1 for w in waits if w > WAITED),
        "wait": spread(waits),
        "held": spread(holds),
        "held_cpu_s": round(held_cpu, 3),
        "held_off_cpu_share": round(1 - held_cpu / held, 3) if held else 0.0,
        "lock_busy_share": round(held / wall, 3) if wall else 0.0,
        "idle_while_waiting_s": round(idle_while_waiting(txns), 3),
        "overlapping_holds": overlapping_holds(txns),
        "overlap": overlap_ms(txns),
        "long_waits": long_waits(txns),
        "dml_statements": sum(t["statements"] for t in txns),
        "dml_outside_write_transactions": dict(metered["dml_outside"]),
        "by_tables": _breakdown(txns, "tables"),
        "by_thread": _breakdown(txns, "thread"),
    }
