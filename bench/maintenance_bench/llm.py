"""The LLM of a run: the scripted server with its meter, or a real model, and its settings.

The scripted server (tests/helpers/openai_server.py on 127.0.0.1) answers with
``maintenance_bench.scripted`` and counts tokens itself: prompt tokens with
litellm.token_counter(model=COUNT_MODEL) over the request's messages, completion tokens over
the reply text, the response_format schema apart.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from maintenance_bench.scripted import REPLIES, SCHEMA_JOBS
from secretary.config import Settings, load_settings
from secretary.llm.provider import import_litellm

COUNT_MODEL = "gpt-4o-mini"  # whose tokenizer (via litellm.token_counter) the server counts with
SCRIPTED_MODEL = "openai/scripted"


@dataclass(frozen=True, kw_only=True)
class Call:
    job: str
    prompt_tokens: int
    completion_tokens: int
    schema_tokens: int
    repair: bool


@dataclass
class Meter:
    """The scripted model's answers and its count of every call, by job."""

    calls: list[Call] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, request: Any) -> Any:
        from tests.helpers.openai_server import ScriptedReply, chat_completion_body

        litellm = import_litellm()
        body = request.body
        schema = body["response_format"]["json_schema"]
        messages = body["messages"]
        user = next(m["content"] for m in messages if m["role"] == "user")
        content = json.dumps(REPLIES[schema["name"]](user), ensure_ascii=False)
        call = Call(
            job=SCHEMA_JOBS[schema["name"]],
            prompt_tokens=int(litellm.token_counter(model=COUNT_MODEL, messages=messages)),
            completion_tokens=int(litellm.token_counter(model=COUNT_MODEL, text=content)),
            schema_tokens=int(litellm.token_counter(model=COUNT_MODEL, text=json.dumps(schema))),
            repair=len(messages) > 2,
        )
        with self.lock:
            self.calls.append(call)
        return ScriptedReply(
            body=chat_completion_body(
                content,
                model="scripted",
                prompt_tokens=call.prompt_tokens,
                completion_tokens=call.completion_tokens,
            )
        )

    def mark(self) -> int:
        with self.lock:
            return len(self.calls)

    def since(self, mark: int) -> dict[str, Any]:
        with self.lock:
            calls = self.calls[mark:]
        return {
            "requests": len(calls),
            "prompt_tokens": sum(c.prompt_tokens for c in calls),
            "completion_tokens": sum(c.completion_tokens for c in calls),
            "schema_tokens": sum(c.schema_tokens for c in calls),
            "repairs": sum(c.repair for c in calls),
        }


@contextmanager
def scripted_llm(*, start: bool = True) -> Iterator[tuple[Meter, str]]:
    """Start the scripted server (unless ``start`` is false); yield its meter and api_base."""
    from tests.helpers.openai_server import CHAT_COMPLETIONS, ScriptedOpenAIServer

    meter = Meter()
    if not start:
        yield meter, ""
        return
    with ScriptedOpenAIServer() as server:
        server.set_default(CHAT_COMPLETIONS, meter.answer)
        yield meter, server.api_base


@dataclass(frozen=True, kw_only=True)
class LlmTarget:
    label: str
    api_base: str | None  # None: the real model from SECRETARY_LLM_*
    meter: Meter | None


def bench_settings(data_dir: Path, *, api_base: str | None) -> Settings:
    """Default settings, SECRETARY_JOBS_* / SECRETARY_GUARDRAILS_* overrides, and the LLM.

    The LLM is the scripted server at ``api_base``, or (api_base None) SECRETARY_LLM_* from the
    environment. No other SECRETARY_* variable changes what is measured.
    """
    wanted = ("SECRETARY_JOBS_", "SECRETARY_GUARDRAILS_")
    if api_base is None:
        wanted += ("SECRETARY_LLM_",)
    environ = {k: v for k, v in os.environ.items() if k.startswith(wanted)}
    settings = load_settings(None, environ, data_dir=data_dir)
    if api_base is not None:
        llm = settings.llm.model_copy(
            update={"model": SCRIPTED_MODEL, "api_base": api_base, "api_key": "bench"}
        )
        settings = settings.model_copy(update={"llm": llm})
    return settings
