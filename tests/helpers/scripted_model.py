"""A scripted model: answers each job's prompt from the data in it, like a careful model would.

``ScriptedModel`` is a reply function for ``ScriptedOpenAIServer`` (chat/completions): it reads
the response schema's name from ``response_format`` and the JSON data block from the user
message, and builds a reply that follows the prompt's rules. The answers are a pure function of
the request, so the order in which jobs ask does not change what they are told.

Replies:
- extractor: one memory per user line (a preference when it says "always" or "prefer").
- linker: a thematic relation from each group's first memory to its second.
- auditor: in a group with facts, the older facts are superseded by the newest; the rest is
  left out (kept).
- soul_mapper: one trait citing every memory sent, revising the first existing trait if any.
- consolidator: one summary of every fragment sent.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from tests.helpers.openai_server import ReceivedRequest, ScriptedReply, chat_completion_body

Answer = Callable[[str], dict[str, Any]]
_BLOCK = re.compile(r"<(\w+)>\n(.*?)\n</\1>", re.DOTALL)


def data_blocks(request: ReceivedRequest) -> dict[str, Any]:
    """Return the JSON data blocks of the request's last user message, by tag name."""
    messages = request.body.get("messages", []) if isinstance(request.body, dict) else []
    user = [m["content"] for m in messages if m.get("role") == "user"]
    if not user:
        return {}
    return {tag: json.loads(text) for tag, text in _BLOCK.findall(user[0])}


def schema_name(request: ReceivedRequest) -> str:
    body = request.body if isinstance(request.body, dict) else {}
    return str(body.get("response_format", {}).get("json_schema", {}).get("name", ""))


def extractor(blocks: dict[str, Any]) -> dict[str, Any]:
    memories = []
    for line in blocks["log"]:
        if line["role"] != "user":
            continue
        text = line["text"]
        kind = "preference" if re.search(r"\b(always|prefer)", text, re.I) else "event"
        memories.append(
            {
                "content": f"The user said: {text}",
                "type": kind,
                "importance": 6,
                "tags": ["chat", "user", kind],
                "source_log_ids": [line["id"]],
            }
        )
    return {"memories": memories}


def groups_of(blocks: dict[str, Any]) -> list[list[dict[str, Any]]]:
    """The groups of a linker or auditor prompt, each as its memories (listed once, oldest
    first, a time left out when it is the one before's)."""
    by_id: dict[int, dict[str, Any]] = {}
    time = ""
    for memory in blocks["memories"]:
        time = memory.get("time", time)
        by_id[memory["id"]] = {**memory, "time": time}
    return [[by_id[i] for i in group] for group in blocks["groups"]]


def linker(blocks: dict[str, Any]) -> dict[str, Any]:
    relations = [
        {
            "source_id": group[0],
            "target_id": group[1],
            "type": "thematic",
            "strength": 0.6,
            "description": "about the same thing",
        }
        for group in blocks["groups"]
        if len(group) >= 2
    ]
    return {"relations": relations}


def _keep(memory_id: int) -> dict[str, Any]:
    return {
        "id": memory_id,
        "action": "keep",
        "superseded_by": None,
        "merge_into": None,
        "merged_content": None,
        "category": None,
        "reason": "still true",
    }


def auditor(blocks: dict[str, Any]) -> dict[str, Any]:
    verdicts = []
    for group in groups_of(blocks):
        facts = sorted(
            (m for m in group if m["type"] == "fact"), key=lambda m: (m["time"], m["id"])
        )
        if len(facts) < 2:
            continue  # nothing to change: a memory left out is kept
        newest = facts[-1]["id"]
        for memory in facts[:-1]:
            verdicts.append(
                {
                    **_keep(memory["id"]),
                    "action": "supersede",
                    "superseded_by": newest,
                    "category": "contradiction",
                    "reason": "a newer fact replaces it",
                }
            )
    return {"verdicts": verdicts}


def soul_mapper(blocks: dict[str, Any]) -> dict[str, Any]:
    ids = [m["id"] for m in blocks["memories"]]
    traits = blocks["traits"]
    return {
        "traits": [
            {
                "trait": f"The user cares about {len(ids)} recent things.",
                "confidence": 0.5 if traits else 0.75,
                "evidence_ids": ids,
                "updates_trait_id": traits[0]["id"] if traits else None,
            }
        ]
    }


def consolidator(blocks: dict[str, Any]) -> dict[str, Any]:
    fragments = blocks["fragments"]
    return {
        "summary": "Summary: " + " / ".join(f["content"] for f in fragments),
        "importance": 6,
        "tags": ["summary", "episode", "day"],
        "source_ids": [f["id"] for f in fragments],
    }


ANSWERS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "ExtractorReply": extractor,
    "LinkerReply": linker,
    "AuditorReply": auditor,
    "SoulMapperReply": soul_mapper,
    "ConsolidatorReply": consolidator,
}


class ScriptedModel:
    """A reply function for the scripted server that answers every job's prompt correctly."""

    def __init__(self, *, prompt_tokens: int = 10, completion_tokens: int = 3) -> None:
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = completion_tokens
        self.asked: list[str] = []  # schema names, in the order the prompts came

    def __call__(self, request: ReceivedRequest) -> ScriptedReply:
        name = schema_name(request)
        self.asked.append(name)
        answer = ANSWERS[name](data_blocks(request))
        body = chat_completion_body(
            json.dumps(answer),
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
        )
        body["created"] = 0
        return ScriptedReply(body=body)
