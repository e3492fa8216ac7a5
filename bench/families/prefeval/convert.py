"""Convert PrefEval (its explicit preferences) into the family format (see bench/families/items.py).

PrefEval (Zhao et al., ICLR 2025; https://github.com/amazon-science/PrefEval, CC BY-NC 4.0)
pairs a user's stated preference ("I follow a strict gluten-free and dairy-free diet due to
severe intolerances.") with a later request that never names it but should be answered with it
in mind ("Can you recommend some local cafes or bakeries in San Francisco that I should check
out while visiting?"): 1,000 pairs over 20 topics (dietary, hotels, games, pets, ...). The
shape no other family has: the memory and the question share almost no words; what links
them is what the request implies.

- Users: the items of each topic are dealt, in their order, into `NAMESPACES` namespaces
  (item i of a topic goes to user i mod `NAMESPACES`), so each user holds about 5 preferences
  of every topic, 100 in all: a question must find its one among others of its own topic.
- Memories: each preference, stated once (a text given twice to the same user is one memory,
  the gold of both questions). No sessions: each was said on a day of its own, in an order
  drawn by the hash of its text, from 2024-01-01 at 19:00, one a day. Questions are asked a
  day after the user's latest preference.
- Questions: every item's request, gold = its preference; type = the topic's group (the first
  word of its file name: education, entertain, lifestyle, pet, professional, shop, travel).

Run: .venv/bin/python bench/families/prefeval/convert.py --source PATH [--out DIR]
"""

from __future__ import annotations

import hashlib
import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # bench/, run from a checkout

from families.converting import run_converter
from families.items import ItemQuestion, Meta, NamespaceItems
from families.source import SourceRepo

FAMILY = "prefeval"
SOURCE_URL = "https://github.com/amazon-science/PrefEval"
LICENCE = (
    "CC BY-NC 4.0 (LICENSE: Attribution-NonCommercial 4.0 International), as LoCoMo: for "
    "evaluation only, never copied into this repository"
)
FOLDER = "benchmark_dataset/explicit_preference"
TOPICS = (
    "education_learning_styles",
    "education_resources",
    "entertain_games",
    "entertain_music_book",
    "entertain_shows",
    "entertain_sports",
    "lifestyle_beauty",
    "lifestyle_dietary",
    "lifestyle_fit",
    "lifestyle_health",
    "pet_ownership",
    "professional_work_location_style",
    "shop_fashion",
    "shop_home",
    "shop_motors",
    "shop_technology",
    "travel_activities",
    "travel_hotel",
    "travel_restaurant",
    "travel_transportation",
)
NAMESPACES = 10
FIRST_DAY = datetime(2024, 1, 1, 19, tzinfo=UTC)


def convert_topics(topics: dict[str, list[dict[str, Any]]]) -> list[NamespaceItems]:
    """Return `NAMESPACES` users from each topic's items (topic -> its file's list)."""
    users: list[dict[str, Any]] = [{"texts": {}, "questions": []} for _ in range(NAMESPACES)]
    for topic in TOPICS:
        for i, item in enumerate(topics[topic]):
            user = users[i % NAMESPACES]
            text = " ".join(str(item["preference"]).split())
            memory_id = user["texts"].setdefault(text, f"{topic}:{i}")
            user["questions"].append(
                ItemQuestion(
                    qid=f"prefeval-{topic}-{i}",
                    text=" ".join(str(item["question"]).split()),
                    type=topic.split("_")[0],
                    evidence=(memory_id,),
                )
            )
    return [_namespace(n, user["texts"], user["questions"]) for n, user in enumerate(users)]


def _namespace(n: int, texts: dict[str, str], questions: list[ItemQuestion]) -> NamespaceItems:
    order = sorted(texts, key=lambda text: hashlib.sha256(text.encode()).hexdigest())
    memories = tuple(
        {
            "external_id": texts[text],
            "content": text,
            "timestamp": FIRST_DAY + timedelta(days=day),
            "metadata": {"topic": texts[text].split(":")[0]},
        }
        for day, text in enumerate(order)
    )
    return NamespaceItems(
        namespace=f"prefeval-user{n + 1:02d}",
        now=FIRST_DAY + timedelta(days=len(order)),
        memories=memories,
        questions=tuple(questions),
    )


def read_topics(source: SourceRepo, folder: str) -> tuple[tuple[str, ...], dict[str, Any]]:
    """Return the files ``folder/<topic>.json`` of every topic and topic -> its parsed file."""
    files = tuple(f"{folder}/{topic}.json" for topic in TOPICS)
    return files, {t: json.loads(source.read_text(f)) for t, f in zip(TOPICS, files, strict=True)}


def convert(source: SourceRepo) -> tuple[Meta, list[NamespaceItems]]:
    files, topics = read_topics(source, FOLDER)
    meta = Meta(
        family=FAMILY,
        source_url=SOURCE_URL,
        source_commit=source.commit,
        licence=LICENCE,
        converted=f"the 20 topics of explicit preferences whole (1,000 items): dealt into "
        f"{NAMESPACES} users, about 5 preferences of each topic each, every preference a "
        "memory stated once on a day of its own (no sessions); every item's request a "
        "question, gold = its preference",
        files=files,
    )
    return meta, convert_topics(topics)


if __name__ == "__main__":
    run_converter(FAMILY, "Convert PrefEval (explicit preferences) for bench/family.py.", convert)
