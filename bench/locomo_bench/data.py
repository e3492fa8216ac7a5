"""LoCoMo conversations as memory items and questions with their evidence ids."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from store.search.scoring import MONTHS

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}


@dataclass(frozen=True, kw_only=True)
class Question:
    qid: str  # the audit's id: locomo_<conversation>_qa<index>
    text: str
    category: int
    evidence: tuple[str, ...]  # dialogue ids that exist in the conversation
    flagged: bool  # listed in the audit's errors.json


@dataclass(frozen=True, kw_only=True)
class Conversation:
    index: int
    namespace: str
    turns: tuple[dict[str, Any], ...]  # raw memory items for Store.add_memories
    questions: tuple[Question, ...]
    now: datetime


_SESSION_DATE = re.compile(r"(\d{1,2}):(\d\d)\s*(am|pm) on (\d{1,2}) (\w+),? (\d{4})", re.I)


def parse_session_date(text: str) -> datetime:
    """Parse LoCoMo's '1:56 pm on 8 May, 2023' as UTC."""
    match = _SESSION_DATE.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"unexpected session date {text!r}")
    hour, minute, half, day, month, year = match.groups()
    hour24 = int(hour) % 12 + (12 if half.lower() == "pm" else 0)
    return datetime(int(year), MONTHS[month.lower()], int(day), hour24, int(minute), tzinfo=UTC)


def turn_content(turn: Mapping[str, Any]) -> str:
    """Return "speaker: text", with a shared photo's caption appended in brackets."""
    content = f"{turn['speaker']}: {turn['text']}"
    if turn.get("blip_caption"):
        content += f" [shares a photo: {turn['blip_caption']}]"
    return content


def normalise_evidence(raw: Iterable[str], known: set[str]) -> tuple[str, ...]:
    """Split "D8:6; D9:17"-style entries, repair "D:11:26" and "D30:05", keep known ids."""
    found: list[str] = []
    for entry in raw:
        for part in re.split(r"[;,\s]+", entry):
            match = re.fullmatch(r"D:?(\d+):0*(\d+)", part.strip())
            if match is not None:
                dia_id = f"D{match.group(1)}:{match.group(2)}"
                if dia_id in known and dia_id not in found:
                    found.append(dia_id)
    return tuple(found)


def load_conversations(data: Path, errors: Path | None) -> list[Conversation]:
    """Read locomo10.json (and the audit's errors.json, if given and present)."""
    samples = json.loads(data.read_text(encoding="utf-8"))
    flagged: set[str] = set()
    if errors is not None and errors.exists():
        flagged = {entry["question_id"] for entry in json.loads(errors.read_text("utf-8"))}
    return [_conversation(i, sample, flagged) for i, sample in enumerate(samples)]


def _conversation(index: int, sample: Mapping[str, Any], flagged: set[str]) -> Conversation:
    conv = sample["conversation"]
    numbers = sorted(int(key.split("_")[1]) for key in conv if re.fullmatch(r"session_\d+", key))
    turns: list[dict[str, Any]] = []
    last = None
    for n in numbers:
        when = parse_session_date(conv[f"session_{n}_date_time"])
        last = when if last is None else max(last, when)
        turns.extend(
            {
                "content": turn_content(turn),
                "timestamp": when,
                "session_id": f"session_{n}",
                "external_id": turn["dia_id"],
            }
            for turn in conv[f"session_{n}"]
        )
    known = {turn["external_id"] for turn in turns}
    questions = tuple(
        Question(
            qid=f"locomo_{index}_qa{q_index}",
            text=str(qa["question"]),
            category=int(qa["category"]),
            evidence=normalise_evidence(qa.get("evidence", []), known),
            flagged=f"locomo_{index}_qa{q_index}" in flagged,
        )
        for q_index, qa in enumerate(sample["qa"])
    )
    assert last is not None
    return Conversation(
        index=index,
        namespace=str(sample["sample_id"]),
        turns=tuple(turns),
        questions=questions,
        now=last + timedelta(days=1),
    )
