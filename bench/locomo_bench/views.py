"""The benchmark's views of LoCoMo: which memories a store holds and how questions are asked.

- ``turns``: every dialogue turn a memory (with its session), each question as asked.
- ``observations``: each session's observation facts the memories, dated by their session,
  without session ids (what a store holds after extraction); a question's gold set is the
  observations whose dia_ids meet its evidence. Questions without any are not scored.
- ``chat``: the turn memories, each question asked as the last line of a chat excerpt of
  3-6 consecutive other turns of the same conversation (none of them evidence).
- ``events`` (a generalisation check, never tuned on): one namespace per speaker holding
  that speaker's observations as independent events at random times over four years, no
  sessions; questions asked as in ``chat``. Timeline neighbours are unrelated events weeks
  or months apart, the shape of the held-out set of issue 11.
- ``telling``: the events' namespaces, each query the conversation so far while a speaker
  tells something: 3-6 turns of a session up to a turn the speaker's observations come from,
  going on 1-3 turns past it (so the latest turn is the chat going on, often small talk or a
  question back); gold = the speaker's observations whose dia_ids are in the excerpt. The
  cue runs through the excerpt, the shape of issue 26's held-out set; tuned on.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from locomo_bench.data import Conversation, Question, normalise_evidence, parse_session_date

EXCERPT_TURNS = (3, 6)
TELLING_BEFORE = (2, 5)  # turns of the excerpt before the telling turn
TELLING_AFTER = (1, 3)  # ... and after it
TELLING_PER_SPEAKER = 40  # telling turns asked about per speaker, at most
EVENT_YEARS = 4
SEED = 11


@dataclass(frozen=True, kw_only=True)
class View:
    name: str
    kind: str  # which memories its store holds: "turns", "observations", "events", "extracted"
    conversations: list[Conversation]
    tuned: bool  # whether the two-fold tuning may look at it


def build_views(data: Path, turns: Sequence[Conversation]) -> dict[str, View]:
    """Return every view of the conversations ``turns`` (as `load_conversations` made them)."""
    samples = json.loads(data.read_text(encoding="utf-8"))
    by_index = {conv.index: samples[conv.index] for conv in turns}
    observations = [observation_conversation(c, by_index[c.index]) for c in turns]
    events = [e for c in turns for e in event_conversations(c, by_index[c.index])]
    by_namespace = {e.namespace: e for e in events}
    telling = [t for c in turns for t in telling_conversations(c, by_index[c.index], by_namespace)]
    return {
        "turns": View(name="turns", kind="turns", conversations=list(turns), tuned=True),
        "observations": View(
            name="observations", kind="observations", conversations=observations, tuned=True
        ),
        "chat": View(
            name="chat",
            kind="turns",
            conversations=[chat_conversation(c) for c in turns],
            tuned=True,
        ),
        "events": View(name="events", kind="events", conversations=events, tuned=False),
        "telling": View(name="telling", kind="events", conversations=telling, tuned=True),
    }


def extracted_view(data: Path, turns: Sequence[Conversation]) -> View:
    """The observations with their session ids, as the extractor writes memories (never
    tuned on; bench/lexical_context.py reports it)."""
    samples = json.loads(data.read_text(encoding="utf-8"))
    return View(
        name="extracted",
        kind="extracted",
        conversations=[observation_conversation(c, samples[c.index], sessions=True) for c in turns],
        tuned=False,
    )


def observations_of(
    conv: Conversation, sample: Mapping[str, Any]
) -> list[tuple[str, str, str, tuple[str, ...]]]:
    """Return (external id, speaker, text, dia_ids) of every observation, session by session."""
    known = {str(turn["external_id"]) for turn in conv.turns}
    found = []
    for key, by_speaker in sample["observation"].items():
        session = int(key.split("_")[1])
        number = 0
        for speaker, items in by_speaker.items():
            for text, ids in items:
                raw = ids if isinstance(ids, list) else [ids]
                number += 1
                dia_ids = normalise_evidence(raw, known)
                found.append((f"O{session}:{number}", speaker, str(text), dia_ids))
    return found


def observation_conversation(
    conv: Conversation, sample: Mapping[str, Any], *, sessions: bool = False
) -> Conversation:
    """The observations as memories, dated by their session; with ``sessions``, they also
    carry its id, as the extractor's memories carry their log's."""
    conversation = sample["conversation"]
    memories = []
    gold: dict[str, set[str]] = {}  # dia_id -> observation ids
    for external_id, _speaker, text, dia_ids in observations_of(conv, sample):
        session = external_id[1:].split(":")[0]
        when = parse_session_date(conversation[f"session_{session}_date_time"])
        memory = {"content": text, "timestamp": when, "external_id": external_id}
        memories.append(memory | ({"session_id": f"session_{session}"} if sessions else {}))
        for dia_id in dia_ids:
            gold.setdefault(dia_id, set()).add(external_id)
    questions = tuple(
        replace(q, evidence=_gold(q.evidence, gold, {m["external_id"] for m in memories}))
        for q in conv.questions
    )
    return replace(conv, turns=tuple(memories), questions=questions)


def _gold(
    evidence: Sequence[str], gold: Mapping[str, set[str]], allowed: set[str]
) -> tuple[str, ...]:
    found = {obs for dia_id in evidence for obs in gold.get(dia_id, ()) if obs in allowed}
    return tuple(sorted(found))


def chat_conversation(conv: Conversation) -> Conversation:
    questions = tuple(replace(q, text=chat_query(conv, q)) for q in conv.questions)
    return replace(conv, questions=questions)


def chat_query(conv: Conversation, question: Question) -> str:
    """Return the question as the last line of 3-6 consecutive other turns of ``conv``.

    Seeded by the question's id; no turn of the excerpt is evidence of the question.
    """
    rng = random.Random(f"{SEED}-{question.qid}")
    size = rng.randint(*EXCERPT_TURNS)
    evidence = set(question.evidence)
    turns = conv.turns
    starts = [
        i
        for i in range(len(turns) - size + 1)
        if turns[i]["session_id"] == turns[i + size - 1]["session_id"]
        and not any(t["external_id"] in evidence for t in turns[i : i + size])
    ]
    start = rng.choice(starts)
    window = turns[start : start + size]
    lines = [_spoken(turn) for turn in window]
    last_speaker = lines[-1].split(":", 1)[0]
    speakers = sorted({line.split(":", 1)[0] for line in lines} - {last_speaker})
    asker = speakers[0] if speakers else last_speaker
    return "\n".join([*lines, f"{asker}: {question.text}"])


def _spoken(turn: Mapping[str, Any]) -> str:
    """A turn as said in a chat: "speaker: text" without the stored photo caption."""
    content = str(turn["content"])
    return content.split(" [shares a photo: ", 1)[0]


def event_conversations(conv: Conversation, sample: Mapping[str, Any]) -> list[Conversation]:
    """One namespace per speaker: their observations at random times, questions as chats."""
    rng = random.Random(f"{SEED}-events-{conv.index}")
    span = timedelta(days=365 * EVENT_YEARS)
    start = conv.now - timedelta(days=1) - span
    by_speaker: dict[str, list[dict[str, Any]]] = {}
    gold: dict[str, dict[str, set[str]]] = {}  # speaker -> dia_id -> observation ids
    for external_id, speaker, text, dia_ids in observations_of(conv, sample):
        when = start + timedelta(seconds=rng.uniform(0, span.total_seconds()))
        memory = {"content": text, "timestamp": when, "external_id": external_id}
        by_speaker.setdefault(speaker, []).append(memory)
        for dia_id in dia_ids:
            gold.setdefault(speaker, {}).setdefault(dia_id, set()).add(external_id)
    owner = _question_owners(conv, gold)
    found = []
    for speaker, memories in by_speaker.items():
        allowed = {m["external_id"] for m in memories}
        questions = tuple(
            replace(
                q,
                text=chat_query(conv, q),
                evidence=_gold(q.evidence, gold.get(speaker, {}), allowed),
            )
            for q in conv.questions
            if owner.get(q.qid) == speaker
        )
        found.append(
            replace(
                conv,
                namespace=f"{conv.namespace}-{speaker.lower()}",
                turns=tuple(memories),
                questions=questions,
            )
        )
    return found


def _question_owners(
    conv: Conversation, gold: Mapping[str, Mapping[str, set[str]]]
) -> dict[str, str]:
    """Each question goes to the speaker holding most of its gold observations (ties: the
    later name); a question with none goes nowhere."""
    owners = {}
    for q in conv.questions:
        counts = {
            speaker: len({o for d in q.evidence for o in by_dia.get(d, ())})
            for speaker, by_dia in gold.items()
        }
        best = max(counts, key=lambda s: (counts[s], s), default=None)
        if best is not None and counts[best] > 0:
            owners[q.qid] = best
    return owners


def telling_conversations(
    conv: Conversation, sample: Mapping[str, Any], events: Mapping[str, Conversation]
) -> list[Conversation]:
    """The speakers' event namespaces (``events``, by namespace), each question a stretch of
    a session around a turn the speaker's observations come from (see the module's doc)."""
    rng = random.Random(f"{SEED}-telling-{conv.index}")
    told: dict[str, dict[str, set[str]]] = {}  # speaker -> dia_id -> observation ids
    for external_id, speaker, _text, dia_ids in observations_of(conv, sample):
        for dia_id in dia_ids:
            told.setdefault(speaker, {}).setdefault(dia_id, set()).add(external_id)
    turns = conv.turns
    position = {str(turn["external_id"]): i for i, turn in enumerate(turns)}
    found = []
    for speaker, by_dia in sorted(told.items()):
        namespace = f"{conv.namespace}-{speaker.lower()}"
        tellings = sorted(position[d] for d in by_dia if d in position)
        rng.shuffle(tellings)
        questions = []
        for number, at in enumerate(tellings[:TELLING_PER_SPEAKER]):
            first = _session_step(turns, at, -rng.randint(*TELLING_BEFORE))
            last = _session_step(turns, at, rng.randint(*TELLING_AFTER))
            if last == at:  # the telling ends its session: nothing goes on after it
                continue
            window = turns[first : last + 1]
            gold = {o for turn in window for o in by_dia.get(str(turn["external_id"]), ())}
            questions.append(
                Question(
                    qid=f"{namespace}-telling{number}",
                    text="\n".join(_spoken(turn) for turn in window),
                    category=4,  # reported with single-hop: one told thing, said just now
                    evidence=tuple(sorted(gold)),
                    flagged=False,
                )
            )
        found.append(replace(events[namespace], questions=tuple(questions)))
    return found


def _session_step(turns: Sequence[Mapping[str, Any]], at: int, step: int) -> int:
    """The index ``step`` turns from ``at`` (back if negative), not leaving its session."""
    session = turns[at]["session_id"]
    direction = 1 if step > 0 else -1
    for _ in range(abs(step)):
        nxt = at + direction
        if not 0 <= nxt < len(turns) or turns[nxt]["session_id"] != session:
            break
        at = nxt
    return at
