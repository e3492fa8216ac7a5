"""LLM calls through litellm: structured output, one repair, bounded retries, usage and budgets.

``LlmClient.complete`` sends a rendered prompt with its response schema as ``response_format``,
validates the reply with pydantic and, if it is invalid, asks once for a corrected reply (the
``repair`` prompt). Transient failures are retried by tenacity under one policy
(``secretary.llm.retrying``); litellm's and the provider SDK's own retries are off so the policy
is ours. A call gives up after ``max_attempts`` failed attempts or ``retry_max_seconds``; a rate
limit's refusal (429) is waited out within the time bound but is not counted as a failed attempt.
litellm is imported on first use: importing it takes seconds.

With a ``Throttle`` (``secretary.llm.throttle``), every HTTP attempt, each retry included (the
provider counts them), first waits its turn under the rate limit every daemon of the store
shares, reserving the prompt's estimate plus the reply cap; once answered it counts the tokens
used. A failed attempt counts as a request; its tokens are none if the provider refused it (a
4xx, such as a 429: nothing was processed), else the prompt's estimate (a 5xx, a timeout or a
lost connection may have been processed, and no reply came). A transient failure with a
``Retry-After`` pauses every process, not only this one.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from loguru import logger
from pydantic import BaseModel
from tenacity import Retrying, retry_if_exception, stop_before_delay, wait_exponential, wait_random

from prompts import Dropped, ReplyModel, Salvage
from prompts.render import RenderedPrompt, prompt_record, render
from secretary.llm.budget import Budget
from secretary.llm.errors import LlmCallFailed, LlmInvalidReply, LlmNotConfigured
from secretary.llm.provider import import_litellm, provider_errors, require_choice
from secretary.llm.retrying import (
    StopAfterFailures,
    WaitAtLeastRetryAfter,
    failure_hint,
    is_transient,
    log_retry,
    retry_after,
)
from secretary.llm.settings import LlmSettings
from secretary.llm.usage import LlmUsage
from store.changes import plural

if TYPE_CHECKING:  # the throttle's module opens the store: only the runner brings one
    from secretary.llm.throttle import Throttle, Ticket

T = TypeVar("T", bound=ReplyModel)
# A caller's rule over a whole valid reply: why it cannot be used, or None if it can.
Check = Callable[[T], str | None]


@dataclass(frozen=True, kw_only=True)
class LlmReply(Generic[T]):
    """A validated reply and what it took: usage, HTTP attempts (retries and repair included)."""

    value: T
    usage: LlmUsage
    attempts: int
    repaired: bool
    # The prompt sent, then the repair prompt if one was needed.
    prompts: tuple[RenderedPrompt, ...]
    # Items of the reply left out (with why), and harmless deviations that were mended.
    dropped: tuple[Dropped, ...] = ()
    mended: tuple[str, ...] = ()

    def prompt_records(self) -> list[dict[str, Any]]:
        """What the run's record stores about the prompts behind this reply."""
        return [prompt_record(prompt, self.usage.model) for prompt in self.prompts]


@dataclass(frozen=True, kw_only=True)
class _Exchange:
    """One request answered: the raw reply text, its usage and the HTTP attempts it took."""

    content: str
    usage: LlmUsage
    attempts: int


def response_format_for(schema: type[BaseModel]) -> dict[str, Any]:
    """The OpenAI ``response_format`` that asks for JSON matching ``schema`` (strict mode)."""
    return {
        "type": "json_schema",
        "json_schema": {
            "name": schema.__name__,
            # A copy: what a request is sent with is its own, whatever the sending does to it.
            "schema": copy.deepcopy(_json_schema(schema)),
            "strict": True,
        },
    }


@functools.cache
def _json_schema(schema: type[BaseModel]) -> dict[str, Any]:
    # Built once per schema: pydantic takes about a millisecond for it, every call.
    return schema.model_json_schema()


class LlmClient:
    """Structured completions from the configured model."""

    def __init__(self, settings: LlmSettings, throttle: Throttle | None = None) -> None:
        self._settings = settings
        self._throttle = throttle

    def with_throttle(self, throttle: Throttle | None) -> LlmClient:
        """Return a copy of this client whose HTTP attempts wait their turn under ``throttle``."""
        return LlmClient(self._settings, throttle)

    @property
    def configured(self) -> bool:
        return bool(self._settings.model)

    @property
    def model(self) -> str:
        return self._settings.model

    def complete(
        self,
        prompt: RenderedPrompt,
        schema: type[T],
        *,
        budget: Budget | None = None,
        check: Check[T] | None = None,
    ) -> LlmReply[T]:
        """Given a rendered prompt and its response model, return the reply's valid items.

        The reply is checked item by item (``ReplyModel.salvage``): invalid items are dropped
        and listed in the reply, the valid ones kept. Only a reply with nothing usable (not
        JSON, not the expected shape, or every item invalid) is sent back once for repair; so
        is one that ``check`` (a rule of the caller's that a schema cannot express, such as
        "cite the lines you were sent") finds unusable as a whole, saying why.
        Raise LlmNotConfigured without a model, BudgetExhausted before a call the budget cannot
        afford, LlmCallFailed if the provider refuses or transient failures outlast the retry
        bound, LlmInvalidReply if the repaired reply still has nothing usable, and the
        throttle's RateLimitUnavailable (nothing sent) if the shared rate limit cannot be read.
        """
        if not self.configured:
            raise LlmNotConfigured()
        messages = [message.as_dict() for message in prompt.messages]
        first = self._exchange(prompt, messages, schema, budget)
        salvaged = _checked(schema.salvage(_strip_code_fence(first.content)), check)
        if salvaged.reply is not None:
            return self._reply(salvaged, [first], (prompt,))
        problems = salvaged.problems()
        logger.warning(
            "LLM reply to {} v{} has nothing usable, asking once for a repair: {}",
            prompt.id,
            prompt.version,
            problems.replace("\n", "; "),
        )
        repair = render("repair", errors=problems)
        messages.append({"role": "assistant", "content": first.content})
        messages.extend(message.as_dict() for message in repair.messages)
        second = self._exchange(prompt, messages, schema, budget)
        repaired = _checked(schema.salvage(_strip_code_fence(second.content)), check)
        if repaired.reply is None:
            raise LlmInvalidReply(
                prompt_id=prompt.id,
                model=self.model,
                detail=repaired.problems().replace("\n", "; "),
                usage=first.usage + second.usage,
            )
        return self._reply(repaired, [first, second], (prompt, repair))

    def _reply(
        self, salvaged: Salvage[T], exchanges: list[_Exchange], prompts: tuple[RenderedPrompt, ...]
    ) -> LlmReply[T]:
        assert salvaged.reply is not None  # checked by the caller
        usage = exchanges[0].usage
        for exchange in exchanges[1:]:
            usage = usage + exchange.usage
        for dropped in salvaged.dropped:
            logger.warning(
                "LLM {}: dropping an item of the reply: {}", prompts[0].id, dropped.reason
            )
        return LlmReply(
            value=salvaged.reply,
            usage=usage,
            attempts=sum(exchange.attempts for exchange in exchanges),
            repaired=len(exchanges) > 1,
            prompts=prompts,
            dropped=salvaged.dropped,
            mended=salvaged.mended,
        )

    def _exchange(
        self,
        prompt: RenderedPrompt,
        messages: list[dict[str, str]],
        schema: type[BaseModel],
        budget: Budget | None,
    ) -> _Exchange:
        """Send one request (with retries), within the budget, and count what it used."""
        litellm = import_litellm()
        prompt_estimate = int(litellm.token_counter(model=self.model, messages=messages))
        if budget is not None:
            budget.ensure_affordable(prompt_estimate + self._settings.max_reply_tokens)
        response, attempts, ticket = self._send(
            litellm, prompt, messages, response_format_for(schema), prompt_estimate
        )
        content = _content_of(response)
        usage = self._usage_of(litellm, response, prompt_estimate, content)
        if budget is not None:
            budget.record(usage.total_tokens)
        if self._throttle is not None and ticket is not None:
            self._throttle.settle(ticket, usage.total_tokens)
        logger.info(
            "LLM {} v{} via {}: {} prompt + {} completion tokens, {}",
            prompt.id,
            prompt.version,
            self.model,
            usage.prompt_tokens,
            usage.completion_tokens,
            plural(attempts, "attempt"),
        )
        return _Exchange(content=content, usage=usage, attempts=attempts)

    def _send(
        self,
        litellm: Any,
        prompt: RenderedPrompt,
        messages: list[dict[str, str]],
        response_format: dict[str, Any],
        prompt_estimate: int,
    ) -> tuple[Any, int, Ticket | None]:
        """Call litellm under the retry policy; return the response, the attempts made and the
        answered attempt's throttle ticket (None without a throttle)."""
        settings = self._settings
        tickets: list[Ticket] = []

        def attempt(**request: Any) -> Any:
            if self._throttle is None:
                return require_choice(litellm.completion(**request))
            ticket = self._throttle.acquire(prompt_estimate + settings.max_reply_tokens)
            try:
                response = require_choice(litellm.completion(**request))
            except Exception as exc:
                self._after_failure(self._throttle, ticket, exc, prompt_estimate)
                raise
            tickets.append(ticket)
            return response

        retrying = Retrying(
            retry=retry_if_exception(is_transient),
            stop=StopAfterFailures(settings.max_attempts)
            | stop_before_delay(settings.retry_max_seconds),
            # Exponential backoff plus up to one initial interval of jitter, so that clients
            # throttled together do not retry together; never sooner than Retry-After asks.
            wait=WaitAtLeastRetryAfter(
                wait_exponential(
                    multiplier=settings.backoff_initial_seconds, max=settings.backoff_max_seconds
                )
                + wait_random(0, settings.backoff_initial_seconds)
            ),
            before_sleep=lambda state: log_retry(prompt, settings, state),
            reraise=True,
        )
        try:
            response = retrying(
                attempt,
                model=settings.model,
                messages=messages,
                api_base=settings.api_base or None,
                api_key=settings.api_key or None,
                response_format=response_format,
                max_tokens=settings.max_reply_tokens,
                timeout=settings.timeout_seconds,
                # Our retry policy is the only one: no litellm retries, no SDK retries.
                num_retries=0,
                max_retries=0,
            )
        except provider_errors() as exc:
            attempts = int(retrying.statistics.get("attempt_number", 1))
            seconds = float(retrying.statistics.get("delay_since_first_attempt", 0.0))
            logger.warning(
                "LLM {} v{} via {}: giving up after {}: {}: {}",
                prompt.id,
                prompt.version,
                self.model,
                plural(attempts, "attempt"),
                type(exc).__name__,
                exc,
            )
            raise LlmCallFailed(
                prompt_id=prompt.id,
                model=self.model,
                attempts=attempts,
                seconds=seconds,
                cause=exc,
                retry_after=retry_after(exc),
                hint=failure_hint(exc, settings),
            ) from exc
        answered = tickets[-1] if tickets else None
        return response, int(retrying.statistics["attempt_number"]), answered

    @staticmethod
    def _after_failure(
        throttle: Throttle, ticket: Ticket, exc: Exception, prompt_estimate: int
    ) -> None:
        """Pause every process if the provider asked to wait; count the failed attempt."""
        wait = retry_after(exc) if is_transient(exc) else None
        if wait:
            throttle.pause(wait)
        throttle.settle(ticket, _failed_attempt_tokens(exc, prompt_estimate))

    def _usage_of(
        self, litellm: Any, response: Any, prompt_estimate: int, content: str
    ) -> LlmUsage:
        # Some OpenAI-compatible servers omit usage, or report what cannot be (a negative count
        # would hand the day's budget tokens back); estimates keep the budget honest.
        usage = getattr(response, "usage", None)
        prompt_tokens = getattr(usage, "prompt_tokens", None)
        completion_tokens = getattr(usage, "completion_tokens", None)
        if not isinstance(prompt_tokens, int) or prompt_tokens < 0:
            prompt_tokens = prompt_estimate
        if not isinstance(completion_tokens, int) or completion_tokens < 0:
            completion_tokens = int(litellm.token_counter(model=self.model, text=content))
        return LlmUsage(
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cost=_cost_of(litellm, response, self.model),
            model=self.model,
        )


def _failed_attempt_tokens(exc: BaseException, prompt_estimate: int) -> int:
    """The tokens a failed attempt counts: none if the provider refused it (a 4xx status: it
    processed nothing), else the prompt's estimate (no reply came, but it may have read it)."""
    import openai

    status = getattr(exc, "status_code", None)
    refused = isinstance(exc, openai.APIStatusError) and isinstance(status, int) and status < 500
    return 0 if refused else prompt_estimate


def _checked(salvaged: Salvage[T], check: Check[T] | None) -> Salvage[T]:
    """The salvaged reply, or none if ``check`` finds it unusable as a whole (saying why)."""
    if salvaged.reply is None or check is None:
        return salvaged
    problem = check(salvaged.reply)
    if problem is None:
        return salvaged
    return Salvage(reply=None, dropped=(Dropped(index=None, item="", reason=problem),))


def _strip_code_fence(content: str) -> str:
    # Models often wrap JSON in a ```json fence even when told not to, and some say a line
    # before or after it ("Here is the JSON:"); neither is a reason to spend a repair round trip.
    text = content.strip()
    start, end = text.find("```"), text.rfind("```")
    if text.startswith(("{", "[")) or end <= start:
        return text
    fenced = text[start : end + 3]
    if "\n" in fenced:
        return fenced[fenced.index("\n") + 1 : -3]
    return text


def _content_of(response: Any) -> str:
    # A reply without text (a refusal, a tool call) is simply an invalid reply (one without
    # choices never gets here: see ``require_choice``); a refusal says so, in the words the
    # model gave (they go into the record and the repair).
    try:
        message = response.choices[0].message
    except (AttributeError, IndexError, TypeError):
        return ""
    content = getattr(message, "content", None)
    if isinstance(content, str) and content.strip():
        return content
    refusal = getattr(message, "refusal", None)
    return refusal if isinstance(refusal, str) else ""


def _cost_of(litellm: Any, response: Any, model: str) -> float | None:
    """The call's price in USD, or None if litellm knows no price for the model."""
    # litellm prices every response it returns (None when it knows no price): read that,
    # rather than price it a second time (and raise and log for an unpriced model each call).
    hidden = getattr(response, "_hidden_params", None)
    if isinstance(hidden, dict) and "response_cost" in hidden:
        known = hidden["response_cost"]
        return float(known) if isinstance(known, int | float) else None
    try:
        cost = litellm.completion_cost(completion_response=response, model=model)
    except (litellm.exceptions.ModelNotMappedError, ValueError, KeyError) as exc:
        logger.debug("no price for model {}: {}", model, exc)
        return None
    return float(cost) if isinstance(cost, int | float) else None
