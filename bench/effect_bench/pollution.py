"""Pollution of a conversation, with its ground truth: which turn each polluting memory copies.

Four kinds, on disjoint sets of turns chosen by a seeded shuffle (pure functions):

- ``exact``: the turn ingested again as it is (same text, time and session) under a new
  external id, as a client re-sending a batch with fresh ids would;
- ``later``: the same text a few minutes later in the same session, every other one with no
  external id and the rest with a new one (a client retry);
- ``paraphrase``: the turn reworded (``rewording.paraphrase``) a minute or two later in the
  same session;
- ``update``: the turn restated with one detail changed (``rewording.change_detail``) at the
  start of the next session (or half an hour later in the last one): the turn is out of date.

Ground truth: a copy or paraphrase should end merged into its turn; for an update, the turn
should end superseded by the update, which stays. Everything else stays as it is.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from locomo_bench.data import Conversation

from effect_bench.rewording import change_detail, paraphrase

KINDS = ("exact", "later", "paraphrase", "update")
# The kinds whose polluting memory should be hidden (merged into its turn); for an update the
# turn is the one hidden (superseded by the update).
COPIES = ("exact", "later", "paraphrase")


@dataclass(frozen=True, kw_only=True)
class Pollutant:
    """One polluting memory and the turn it is about."""

    kind: str
    source: str  # the dia_id of the turn it copies, rewords or updates
    session: str  # the session it arrives with
    item: Mapping[str, Any]  # a memory item for Store.add_memories

    @property
    def hides_source(self) -> bool:
        """True when the ground truth retires the source turn (an update), not this one."""
        return self.kind == "update"


def counts_for(turns: int, share: float) -> dict[str, int]:
    """How many turns each kind pollutes: ``share`` of the turns each, rounded."""
    return {kind: round(turns * share) for kind in KINDS}


def pollute(conv: Conversation, counts: Mapping[str, int], *, seed: int) -> tuple[Pollutant, ...]:
    """The conversation's pollutants, in arrival order within each session.

    Turns whose text occurs twice in the conversation are left alone, so that the ground truth
    names one turn per text. A kind that finds too few suitable turns pollutes fewer.
    """
    turns = list(conv.turns)
    texts = Counter(t["content"] for t in turns)
    order = [i for i, t in enumerate(turns) if texts[t["content"]] == 1]
    random.Random(f"{seed}:{conv.namespace}").shuffle(order)
    taken: set[int] = set()
    sessions = _next_sessions(turns)
    out: list[Pollutant] = []
    # The kinds that need something of the turn choose first.
    for kind in ("update", "paraphrase", "exact", "later"):
        wanted = counts.get(kind, 0)
        for index in order:
            if wanted <= 0:
                break
            if index in taken:
                continue
            made = _pollutant(kind, turns[index], sessions, number=len(out))
            if made is not None:
                out.append(made)
                taken.add(index)
                wanted -= 1
    position = {t["session_id"]: n for n, t in enumerate(turns)}
    return tuple(sorted(out, key=lambda p: (position[p.session], _time(p.item), p.source)))


def _time(item: Mapping[str, Any]) -> datetime:
    value = item["timestamp"]
    assert isinstance(value, datetime)
    return value


def _next_sessions(turns: Sequence[Mapping[str, Any]]) -> dict[str, tuple[str, datetime] | None]:
    """Session id -> the next session's id and time (None for the last one)."""
    starts: dict[str, datetime] = {}
    for turn in turns:
        starts.setdefault(turn["session_id"], turn["timestamp"])
    ordered = list(starts)
    return {
        s: (ordered[n + 1], starts[ordered[n + 1]]) if n + 1 < len(ordered) else None
        for n, s in enumerate(ordered)
    }


def _pollutant(
    kind: str,
    turn: Mapping[str, Any],
    sessions: Mapping[str, tuple[str, datetime] | None],
    *,
    number: int,
) -> Pollutant | None:
    dia_id, session, when = turn["external_id"], turn["session_id"], turn["timestamp"]
    content = str(turn["content"])
    item: dict[str, Any] = {"content": content, "timestamp": when, "session_id": session}
    if kind == "exact":
        item["external_id"] = f"exact:{dia_id}"
    elif kind == "later":
        item["timestamp"] = when + timedelta(minutes=2 + number % 8)
        if number % 2:
            item["external_id"] = f"later:{dia_id}"
    elif kind == "paraphrase":
        reworded = paraphrase(content)
        if reworded is None:
            return None
        item |= {
            "content": reworded,
            "timestamp": when + timedelta(minutes=1 + number % 2),
            "external_id": f"paraphrase:{dia_id}",
        }
    else:
        restated = change_detail(content)
        if restated is None:
            return None
        following = sessions[session]
        if following is None:
            later_session, later = session, when + timedelta(minutes=30)
        else:
            later_session, later = following[0], following[1] + timedelta(minutes=5)
        item |= {
            "content": restated,
            "timestamp": later,
            "session_id": later_session,
            "external_id": f"update:{dia_id}",
        }
    return Pollutant(kind=kind, source=dia_id, session=item["session_id"], item=item)


def changed_words(conv: Conversation, pollutants: Iterable[Pollutant]) -> dict[str, set[str]]:
    """dia_id -> the words (lower case) an update took out of the turn it changes."""
    texts = {t["external_id"]: str(t["content"]) for t in conv.turns}
    return {
        p.source: _words(texts[p.source]) - _words(str(p.item["content"]))
        for p in pollutants
        if p.hides_source
    }


def _words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


@dataclass(frozen=True, kw_only=True)
class Truth:
    """A namespace's ground truth in memory ids, once the turns and pollutants are stored."""

    turns: Mapping[str, int]  # dia_id -> memory id
    pollutants: Mapping[int, Pollutant]  # memory id of each pollutant

    def turn_id(self, pollutant: Pollutant) -> int:
        return self.turns[pollutant.source]

    def expected_retired(self) -> dict[int, int]:
        """Memory id -> the memory the ground truth retires it into (merged or superseded)."""
        out: dict[int, int] = {}
        for memory_id, p in self.pollutants.items():
            if p.hides_source:
                out[self.turn_id(p)] = memory_id
            else:
                out[memory_id] = self.turn_id(p)
        return out

    def source_of(self) -> dict[int, str]:
        """Memory id -> the dia_id it stands for: each turn itself, each pollutant its turn."""
        out = {memory_id: dia_id for dia_id, memory_id in self.turns.items()}
        out |= {memory_id: p.source for memory_id, p in self.pollutants.items()}
        return out
