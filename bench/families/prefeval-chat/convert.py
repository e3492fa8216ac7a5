"""Convert PrefEval asked in chats: each request after 2-4 turns of another chat of its user.

The users, memories and gold are `prefeval`'s (``bench/families/prefeval/convert.py``). Each
request is the latest line of a chat excerpt: 2-4 user turns (chosen by the question's id) from
the start of the persona-driven conversation that PrefEval wrote for the item of the next topic
at the same place (``implicit_preference/persona-driven/<topic>.json``), in which a persona
talks about their life and lets that item's preference show; then the request. The excerpt is
about something else than what is asked, and hints at another stored preference: the request
must not be lost in it.

Run: .venv/bin/python bench/families/prefeval-chat/convert.py --source PATH [--out DIR]
"""

from __future__ import annotations

import random
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # bench/, run from a checkout

from families.converting import run_converter
from families.items import Meta, NamespaceItems
from families.prefeval.convert import (
    FOLDER,
    LICENCE,
    SOURCE_URL,
    TOPICS,
    convert_topics,
    read_topics,
)
from families.source import SourceRepo

FAMILY = "prefeval-chat"
PERSONAS = "benchmark_dataset/implicit_preference/persona-driven"
EXCERPT_TURNS = (2, 4)


def user_turns(conversation: dict[str, Any]) -> list[str]:
    """The user's lines of a persona-driven conversation, in order, each on one line."""
    return [" ".join(str(conversation[k]["user"]).split()) for k in sorted(conversation, key=int)]


def chatted(
    users: list[NamespaceItems], personas: dict[str, list[dict[str, Any]]]
) -> list[NamespaceItems]:
    """Each question of ``users`` as the last line of 2-4 turns of the next topic's persona
    chat at its item's place (a question without one is left out)."""
    out = []
    for user in users:
        questions = []
        for question in user.questions:
            topic, index = question.qid.removeprefix("prefeval-").rsplit("-", 1)
            other = personas[TOPICS[(TOPICS.index(topic) + 1) % len(TOPICS)]]
            if int(index) >= len(other):
                continue
            turns = user_turns(other[int(index)]["conversation"])
            size = min(len(turns), random.Random(f"chat-{question.qid}").randint(*EXCERPT_TURNS))
            lines = [f"user: {turn}" for turn in turns[:size]]
            questions.append(replace(question, text="\n".join([*lines, f"user: {question.text}"])))
        out.append(replace(user, questions=tuple(questions)))
    return out


def convert(source: SourceRepo) -> tuple[Meta, list[NamespaceItems]]:
    files, topics = read_topics(source, FOLDER)
    persona_files, personas = read_topics(source, PERSONAS)
    meta = Meta(
        family=FAMILY,
        source_url=SOURCE_URL,
        source_commit=source.commit,
        licence=LICENCE,
        converted="prefeval's users and memories; each request the latest line of 2-4 user "
        "turns from the start of the next topic's persona-driven conversation at its item's "
        "place, then the request; gold = its preference",
        files=files + persona_files,
    )
    return meta, chatted(convert_topics(topics), personas)


if __name__ == "__main__":
    run_converter(FAMILY, "Convert PrefEval asked in chats for bench/family.py.", convert)
