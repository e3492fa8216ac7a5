"""What a dream cycle did to a polluted namespace, against the ground truth (pure functions).

A memory that is no longer active is *carried* by the active memory its ``replaced_by`` chain
ends at (a merge or supersede names the memory that took its place); a turn is *lost* when
nothing active carries it. ``Chains`` remembers every ``replaced_by`` it was shown, so a chain
still resolves after retention purged a tombstone on it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from effect_bench.pollution import COPIES, KINDS, Truth

ACTIVE = "active"
Images = Mapping[int, Mapping[str, Any]]


@dataclass
class Chains:
    """Status and ``replaced_by`` of every memory seen, purged ones included."""

    status: dict[int, str] = field(default_factory=dict)
    replaced_by: dict[int, int | None] = field(default_factory=dict)

    def see(self, found: Images, *, purged: Iterable[int] = ()) -> None:
        for memory_id, image in found.items():
            self.status[memory_id] = str(image["status"])
            self.replaced_by[memory_id] = image.get("replaced_by_id")
        for memory_id in purged:
            self.status[memory_id] = "purged"

    def carrier(self, memory_id: int) -> int | None:
        """The active memory that carries ``memory_id`` (itself if active); None if none does."""
        seen: set[int] = set()
        current: int | None = memory_id
        while current is not None and current not in seen:
            if self.status.get(current) == ACTIVE:
                return current
            seen.add(current)
            current = self.replaced_by.get(current)
        return None

    def carried_by(self, ids: Iterable[int]) -> dict[int, set[int]]:
        """Active memory -> the memories among ``ids`` it carries (itself included)."""
        out: dict[int, set[int]] = {}
        for memory_id in ids:
            holder = self.carrier(memory_id)
            if holder is not None:
                out.setdefault(holder, set()).add(memory_id)
        return out


def chains_of(found: Images) -> Chains:
    chains = Chains()
    chains.see(found)
    return chains


def active_ids(found: Images) -> set[int]:
    return {i for i, image in found.items() if image["status"] == ACTIVE}


@dataclass(frozen=True, kw_only=True)
class Effect:
    """The cycle's effect on one namespace, in counts."""

    polluted: dict[str, int]  # pollutants per kind
    hidden: dict[str, int]  # ... whose hidden memory is no longer active
    hidden_as_truth: dict[str, int]  # ... and carried by the memory the ground truth names
    evidence_turns: int
    evidence_lost: list[str]  # dia_ids of evidence turns nothing active carries
    turns_lost: list[str]  # dia_ids of any turn nothing active carries
    false_merges: list[dict[str, Any]]  # retired memories the ground truth keeps
    retired: int  # memories active before the cycle and not after

    def as_json(self) -> dict[str, Any]:
        return {
            "polluted": self.polluted,
            "hidden": self.hidden,
            "hidden_as_truth": self.hidden_as_truth,
            "evidence_turns": self.evidence_turns,
            "evidence_lost": self.evidence_lost,
            "turns_lost": self.turns_lost,
            "false_merges": self.false_merges,
            "retired": self.retired,
        }


def effect(
    was_active: Iterable[int],
    chains: Chains,
    truth: Truth,
    evidence: Iterable[str],
    *,
    sources: Mapping[int, str] | None = None,
) -> Effect:
    """Compare the namespace's memories that were active before the cycles (``was_active``)
    with what ``chains`` says now, against the ground truth. ``sources`` (memory id -> its
    source) names who made the memory a false merge went into."""
    polluted = dict.fromkeys(KINDS, 0)
    hidden = dict.fromkeys(KINDS, 0)
    as_truth = dict.fromkeys(KINDS, 0)
    for memory_id, pollutant in truth.pollutants.items():
        kind = pollutant.kind
        polluted[kind] += 1
        # A copy should be hidden in its turn; a turn with an update in the update.
        gone, keeper = (
            (memory_id, truth.turn_id(pollutant))
            if kind in COPIES
            else (truth.turn_id(pollutant), memory_id)
        )
        if chains.status.get(gone) != ACTIVE:
            hidden[kind] += 1
            if chains.carrier(gone) == chains.carrier(keeper) == keeper:
                as_truth[kind] += 1
    expected = truth.expected_retired()
    retired = sorted(i for i in set(was_active) if chains.status.get(i) != ACTIVE)
    false_merges = [
        {
            "id": i,
            "what": _what(i, truth),
            "status": chains.status.get(i, "unknown"),
            "into": chains.replaced_by.get(i),
            "into_source": (sources or {}).get(chains.replaced_by.get(i) or 0),
        }
        for i in retired
        if i not in expected
    ]
    lost = sorted(d for d, i in truth.turns.items() if chains.carrier(i) is None)
    wanted = set(evidence)
    return Effect(
        polluted=polluted,
        hidden=hidden,
        hidden_as_truth=as_truth,
        evidence_turns=len(wanted & set(truth.turns)),
        evidence_lost=[d for d in lost if d in wanted],
        turns_lost=lost,
        false_merges=false_merges,
        retired=len(retired),
    )


def _what(memory_id: int, truth: Truth) -> str:
    if memory_id in truth.pollutants:
        return truth.pollutants[memory_id].kind
    turns = {i: d for d, i in truth.turns.items()}
    return f"turn {turns[memory_id]}" if memory_id in turns else "made by the cycle"


def total(effects: Iterable[Effect]) -> dict[str, Any]:
    """The effects of several namespaces together, with the shares in percent."""
    items = list(effects)
    polluted = {k: sum(e.polluted[k] for e in items) for k in KINDS}
    hidden = {k: sum(e.hidden[k] for e in items) for k in KINDS}
    as_truth = {k: sum(e.hidden_as_truth[k] for e in items) for k in KINDS}
    all_polluted = sum(polluted.values())
    return {
        "polluted": polluted,
        "hidden": hidden,
        "hidden_as_truth": as_truth,
        "hidden_pct": {k: _pct(hidden[k], polluted[k]) for k in KINDS}
        | {"all": _pct(sum(hidden.values()), all_polluted)},
        "hidden_as_truth_pct": {k: _pct(as_truth[k], polluted[k]) for k in KINDS}
        | {"all": _pct(sum(as_truth.values()), all_polluted)},
        "evidence_turns": sum(e.evidence_turns for e in items),
        "evidence_lost": sum(len(e.evidence_lost) for e in items),
        "turns_lost": sum(len(e.turns_lost) for e in items),
        "false_merges": sum(len(e.false_merges) for e in items),
        "false_merges_into": dict(
            Counter(str(m.get("into_source")) for e in items for m in e.false_merges)
        ),
        "retired": sum(e.retired for e in items),
    }


def _pct(part: int, whole: int) -> float | None:
    return round(100 * part / whole, 1) if whole else None
