"""The scripted model's replies: valid answers to each job's schema, built from the request.

Pure functions of the prompt text: the ids and texts inside its <log>, <memories>, <groups>,
<traits> and <fragments> blocks.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Mapping
from typing import Any

_WORD = re.compile(r"[A-Za-z][A-Za-z'-]{4,}")


_STOP = frozenset(
    """about after again being could doing going great really right share shares something
    their there these thing things think those though would where which while yeah thanks
    always never still photo years today other""".split()  # noqa: SIM905
)


def keywords(text: str, count: int = 3) -> list[str]:
    """The first ``count`` longer words of the text that are not filler, padded to ``count``."""
    words = [w.lower() for w in _WORD.findall(text)]
    found = list(dict.fromkeys(w for w in words if w not in _STOP))[:count]
    return [*found, *(w for w in ("conversation", "personal", "life") if w not in found)][:count]


def block(text: str, tag: str) -> Any:
    """The JSON between <tag> and </tag> in a prompt; [] if there is none."""
    match = re.search(rf"<{tag}>\n(.*?)\n</{tag}>", text, re.S)
    return json.loads(match.group(1)) if match else []


def stable_hash(*parts: object) -> int:
    """A hash that is the same in every process (unlike ``hash``)."""
    return zlib.crc32("\x1f".join(map(str, parts)).encode())


def memory_type(line: Mapping[str, Any]) -> str:
    """The type the scripted extractor gives a log line, by a hash of its id and text."""
    bucket = stable_hash(line["id"], line["text"]) % 100
    if bucket < 50:
        return "event"
    if bucket < 75:
        return "fact"
    return "preference" if bucket < 95 else "tool_experience"


def extractor_reply(user: str) -> dict[str, Any]:
    """One memory per log line of six words or more (shorter lines count as small talk)."""
    memories = []
    time = ""
    for line in block(user, "log"):
        time = str(line.get("time", time))  # left out when it is the line before's
        text = str(line["text"])
        if len(text.split()) < 6:
            continue
        memories.append(
            {
                "content": f"On {time[:10]}, {text}",
                "type": memory_type(line),
                "importance": 3 + stable_hash(line["id"]) % 5,
                "tags": keywords(text),
                "source_log_ids": [line["id"]],
            }
        )
    return {"memories": memories}


def groups(user: str) -> list[list[dict[str, Any]]]:
    """The groups of a linker or auditor prompt, each as its memories (listed once, by id)."""
    by_id = {m["id"]: m for m in block(user, "memories")}
    return [[by_id[i] for i in group] for group in block(user, "groups")]


def linker_reply(user: str) -> dict[str, Any]:
    """One thematic relation per group: the seed's nearest neighbour to the seed."""
    relations = []
    for group in groups(user):
        if len(group) < 2:
            continue
        seed, other = group[0], group[1]
        shared = set(keywords(seed["content"], 6)) & set(keywords(other["content"], 6))
        topic = sorted(shared)[0] if shared else "the same topic"
        relations.append(
            {
                "source_id": other["id"],
                "target_id": seed["id"],
                "type": "thematic",
                "strength": 0.6,
                "description": f"Both memories are about {topic}.",
            }
        )
    return {"relations": relations}


def auditor_reply(user: str) -> dict[str, Any]:
    """A verdict for each exact repeat of a group, merged into the first; the rest is kept."""
    verdicts = []
    for group in groups(user):
        first_of: dict[str, int] = {}
        for memory in group:
            text = str(memory["content"]).strip().lower()
            keeper = first_of.setdefault(text, memory["id"])
            if keeper == memory["id"]:
                continue  # left out of the reply: kept
            verdicts.append(
                {
                    "id": memory["id"],
                    "action": "merge",
                    "superseded_by": None,
                    "merge_into": keeper,
                    "merged_content": memory["content"],
                    "category": "duplicate",
                    "reason": "Says the same as another memory.",
                }
            )
    return {"verdicts": verdicts}


def soul_mapper_reply(user: str) -> dict[str, Any]:
    """One trait per ten memories; every other one revises a trait that was shown."""
    memories, traits = block(user, "memories"), block(user, "traits")
    proposed = []
    for start in range(0, len(memories), 10):
        chunk = memories[start : start + 10]
        topic = keywords(" ".join(str(m["content"]) for m in chunk), 1)[0]
        number = start // 10
        revises = (
            traits[stable_hash(topic, number) % len(traits)]["id"]
            if traits and number % 2
            else None
        )
        proposed.append(
            {
                "trait": f"The user often talks about {topic} and cares about it.",
                "confidence": 0.6,
                "evidence_ids": [m["id"] for m in chunk[:3]],
                "updates_trait_id": revises,
            }
        )
    # Two revisions of one trait in a call would be a conflict: keep the first.
    seen: set[int] = set()
    for trait in proposed:
        if trait["updates_trait_id"] in seen:
            trait["updates_trait_id"] = None
        elif trait["updates_trait_id"] is not None:
            seen.add(trait["updates_trait_id"])
    return {"traits": proposed}


def consolidator_reply(user: str) -> dict[str, Any]:
    """A summary of about 60 words covering every fragment sent."""
    fragments = block(user, "fragments")
    words = " ".join(str(f["content"]) for f in fragments).split()
    return {
        "summary": "The user's episode: " + " ".join(words[:60]),
        "importance": 5,
        "tags": keywords(" ".join(words)),
        "source_ids": [f["id"] for f in fragments],
    }


REPLIES = {
    "ExtractorReply": extractor_reply,
    "LinkerReply": linker_reply,
    "AuditorReply": auditor_reply,
    "SoulMapperReply": soul_mapper_reply,
    "ConsolidatorReply": consolidator_reply,
}


SCHEMA_JOBS = {
    "ExtractorReply": "extractor",
    "LinkerReply": "linker",
    "AuditorReply": "auditor",
    "SoulMapperReply": "soul_mapper",
    "ConsolidatorReply": "consolidator",
}
