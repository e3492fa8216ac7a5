"""The scripted model: an OpenAI-compatible server on 127.0.0.1 answering from the ground truth.

The auditor is told the truth: in each group it is sent, a copy or paraphrase is merged into
its turn (keeping the turn's text) and a turn with an update is superseded by the update, when
both are in the group; every other memory is left out of the reply, i.e. kept. The other jobs
get nothing, so that what the cycle changes is the deduplication: the extractor, linker and
soul mapper empty lists, the consolidator a refusal in its own terms (a summary of one
fragment, which the job rejects as too small to replace anything). The server counts calls
and tokens per job.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from benchkit import say
from maintenance_bench.llm import COUNT_MODEL
from maintenance_bench.scripted import SCHEMA_JOBS, block

from effect_bench.pollution import Truth
from secretary.llm.provider import import_litellm


@dataclass
class Oracle:
    """What the scripted model knows: memory id -> (action, the memory that takes its place)."""

    retire: dict[int, tuple[str, int]] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    tokens: dict[str, list[int]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def learn(self, truth: Truth) -> None:
        for memory_id, pollutant in truth.pollutants.items():
            if pollutant.hides_source:
                self.retire[truth.turn_id(pollutant)] = ("supersede", memory_id)
            else:
                self.retire[memory_id] = ("merge", truth.turn_id(pollutant))

    def auditor(self, user: str) -> dict[str, Any]:
        """A verdict for each memory the truth retires into another of its group; the rest
        is left out of the reply, which keeps it."""
        verdicts = []
        for group in groups_of(user):
            present = {m["id"]: m for m in group}
            for memory in group:
                action, into = self.retire.get(memory["id"], ("keep", 0))
                if action != "keep" and into in present:
                    verdicts.append(_verdict(memory["id"], action, present[into]))
        return {"verdicts": verdicts}

    def reply(self, schema: str, user: str) -> dict[str, Any]:
        if schema == "AuditorReply":
            return self.auditor(user)
        if schema == "ConsolidatorReply":
            first = block(user, "fragments")[0]
            return {
                "summary": str(first["content"]),
                "importance": 5,
                "tags": ["episode"],
                "source_ids": [first["id"]],
            }
        field_name = {"ExtractorReply": "memories", "LinkerReply": "relations"}
        return {field_name.get(schema, "traits"): []}

    def answer(self, request: Any) -> Any:
        from tests.helpers.openai_server import ScriptedReply, chat_completion_body, error_reply

        body = request.body
        schema = body["response_format"]["json_schema"]["name"]
        messages = body["messages"]
        user = next(m["content"] for m in messages if m["role"] == "user")
        try:
            content = json.dumps(self.reply(schema, user), ensure_ascii=False)
        except (LookupError, TypeError, ValueError) as exc:
            # A prompt this model cannot read: say so, and let the job record a failed call.
            say(f"scripted model: cannot answer {schema}: {type(exc).__name__}: {exc}")
            return error_reply(500, f"scripted model cannot answer: {exc}")
        counter = import_litellm().token_counter
        used = [
            int(counter(model=COUNT_MODEL, messages=messages)),
            int(counter(model=COUNT_MODEL, text=content)),
        ]
        job = SCHEMA_JOBS[schema]
        with self.lock:
            self.calls[job] = self.calls.get(job, 0) + 1
            total = self.tokens.setdefault(job, [0, 0])
            total[0] += used[0]
            total[1] += used[1]
        return ScriptedReply(
            body=chat_completion_body(
                content, model="scripted", prompt_tokens=used[0], completion_tokens=used[1]
            )
        )

    def usage(self) -> dict[str, Any]:
        with self.lock:
            return {
                job: {
                    "calls": n,
                    "tokens_in": self.tokens[job][0],
                    "tokens_out": self.tokens[job][1],
                }
                for job, n in sorted(self.calls.items())
            }


def groups_of(user: str) -> list[list[dict[str, Any]]]:
    """The groups of an auditor prompt, each as its memories.

    Either the memories are listed once and the groups name their ids (<memories> and
    <groups>), or <memories> holds the groups themselves (the first version of the prompt).
    """
    listed = block(user, "memories")
    named = block(user, "groups")
    if not named:
        return [list(group) for group in listed]
    by_id = {m["id"]: m for m in listed}
    return [[by_id[i] for i in group if i in by_id] for group in named]


def _verdict(memory_id: int, action: str, into: Mapping[str, Any]) -> dict[str, Any]:
    merge = action == "merge"
    return {
        "id": memory_id,
        "action": action,
        "superseded_by": None if merge else into["id"],
        "merge_into": into["id"] if merge else None,
        "merged_content": str(into["content"]) if merge else None,
        "category": "duplicate" if merge else "contradiction",
        "reason": "Says the same as the memory it is merged into."
        if merge
        else "A later memory changes this detail.",
    }


@contextmanager
def scripted_server(oracle: Oracle) -> Iterator[str]:
    """Serve the oracle's answers on 127.0.0.1; yield the api_base."""
    from tests.helpers.openai_server import CHAT_COMPLETIONS, ScriptedOpenAIServer

    with ScriptedOpenAIServer() as server:
        server.set_default(CHAT_COMPLETIONS, oracle.answer)
        yield server.api_base
