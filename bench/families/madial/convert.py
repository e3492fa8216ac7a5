"""Convert MADial-Bench (English) into the family format (see bench/families/items.py).

MADial-Bench (He et al., NAACL 2025; https://github.com/hejunqing/MADial-Bench, MIT) holds
160 memories of two users (Bart and Lisa): dated personal events with a scene and an emotion,
and 160 dialogues in which the assistant, at a marked turn ("test-turn"), should bring up one
of them ("relevant-id": the memories that fit, best first).

- Each user is a namespace; each memory an item whose content is the event, dated at noon of
  its date, without a session; its scene and emotion go to metadata.
- Each dialogue is one question: its lines before the first test turn ("Name: text", one per
  line), as the benchmark's own retrieval code embeds it, asked one day after the user's
  latest memory (that code dates every dialogue 2024-06-16, before some memories of the
  user). Gold: every relevant id. Type: the first relevant memory's scene.
- The English memory file has no user per memory; the Chinese one has (same ids), and is
  read only for that.

Run: .venv/bin/python bench/families/madial/convert.py --source PATH [--out DIR]
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # bench/, run from a checkout

from families.converting import run_converter
from families.items import ItemQuestion, Meta, NamespaceItems
from families.source import SourceRepo

FAMILY = "madial"
SOURCE_URL = "https://github.com/hejunqing/MADial-Bench"
LICENCE = "MIT (LICENSE: Copyright (c) 2025 Nicole); research use and redistribution allowed"
MEMORY_EN = "data/en/MADial-Bench-en-memory.json"
MEMORY_ZH = "data/ch/MADial-Bench-zh-memory.json"
DIALOGUE_EN = "data/en/MADial-Bench-en-dialogue.json"

_LINE = re.compile(r"^<(?P<speaker>[^>]+)>:\s*(?P<text>.*?)\s*$", re.S)


def json_lines(text: str) -> list[Any]:
    """The source files hold one JSON value per line."""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def convert_texts(memory_en: str, memory_zh: str, dialogue_en: str) -> list[NamespaceItems]:
    """Return one `NamespaceItems` per user from the three files' texts."""
    memories = {int(k): v for row in json_lines(memory_en) for k, v in row.items()}
    owner = {int(k): int(v["user-id"]) for row in json_lines(memory_zh) for k, v in row.items()}
    dialogues = json_lines(dialogue_en)
    users = sorted({owner[i] for i in memories})
    return [_user(user, memories, owner, dialogues) for user in users]


def _user(
    user: int,
    memories: Mapping[int, Mapping[str, Any]],
    owner: Mapping[int, int],
    dialogues: list[Mapping[str, Any]],
) -> NamespaceItems:
    items = tuple(
        {
            "external_id": str(i),
            "content": str(m["event"]).strip(),
            "timestamp": datetime.fromisoformat(m["time"]).replace(hour=12, tzinfo=UTC),
            "metadata": {"scene": m["scene"], "emotion": m["emotion"]},
        }
        for i, m in sorted(memories.items())
        if owner[i] == user
    )
    mine = {str(i) for i in memories if owner[i] == user}
    questions = []
    for index, dialogue in enumerate(dialogues):
        if int(dialogue["user-id"]) != user:
            continue
        evidence = tuple(str(i) for i in dialogue["relevant-id"])
        if not set(evidence) <= mine:
            raise ValueError(f"dialogue {index}: relevant ids of another user: {evidence}")
        questions.append(
            ItemQuestion(
                qid=f"madial-{index}",
                text=query(dialogue["dialogue"], int(dialogue["test-turn"][0])),
                type=str(memories[int(evidence[0])]["scene"]),
                evidence=evidence,
            )
        )
    latest = max(m["timestamp"] for m in items)
    return NamespaceItems(
        namespace=f"madial-user{user}",
        now=latest + timedelta(days=1),
        memories=items,
        questions=tuple(questions),
    )


def query(lines: list[str], test_turn: int) -> str:
    """The dialogue before ``test_turn`` as "Speaker: text" lines (markers and quotes off)."""
    spoken = []
    for line in lines[:test_turn]:
        match = _LINE.match(line.strip())
        if match is None:  # <BOD>
            continue
        text = match["text"].strip()
        if len(text) >= 2 and text[0] == text[-1] == '"':
            text = text[1:-1].strip()
        spoken.append(f"{match['speaker']}: {text}")
    return "\n".join(spoken)


def convert(source: SourceRepo) -> tuple[Meta, list[NamespaceItems]]:
    namespaces = convert_texts(
        source.read_text(MEMORY_EN), source.read_text(MEMORY_ZH), source.read_text(DIALOGUE_EN)
    )
    meta = Meta(
        family=FAMILY,
        source_url=SOURCE_URL,
        source_commit=source.commit,
        licence=LICENCE,
        converted="all 160 English memories (one namespace per user) and all 160 English "
        "dialogues, each one question: the lines before its first test turn; gold = every "
        "relevant id; asked one day after the user's latest memory",
        files=(MEMORY_EN, MEMORY_ZH, DIALOGUE_EN),
    )
    return meta, namespaces


if __name__ == "__main__":
    run_converter(FAMILY, "Convert MADial-Bench (English) for bench/family.py.", convert)
