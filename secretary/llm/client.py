"""LLM calls through litellm: structured output, one repair, bounded retries, usage and budgets.

``LlmClient.complete`` sends a rendered prompt with its response schema as ``response_format``,
validates the reply with pydantic and, if it is invalid, asks once for a corrected reply (the
``repair`` prompt). Transient failures are retried by tenacity under one predicate
(``is_transient``); litellm's and the provider SDK's own retries are off so the policy is ours.
A call gives up after ``max_attempts`` failed attempts or ``retry_max_seconds``; a rate limit's
refusal (429) is waited out within the time bound but is not counted as a failed attempt.
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

import os
import warnings
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from loguru import logger
from pydantic import BaseModel
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_before_delay,
    wait_exponential,
    wait_random,
)
from tenacity.stop import stop_base
from tenacity.wait import wait_base

from prompts import Dropped, ReplyModel, Salvage
from prompts.render import RenderedPrompt, prompt_record, render
from secretary.llm.budget import Budget
from secretary.llm.errors import LlmCallFailed, LlmInvalidReply, LlmNotConfigured
from secretary.llm.settings import LlmSettings
from secretary.llm.usage import LlmUsage
from store.clock import utc_now

if TYPE_CHECKING:  # the throttle's module opens the store: only the runner brings one
    from secretary.llm.throttle import Throttle, Ticket

T = TypeVar("T", bound=ReplyModel)

# HTTP statuses worth another try: request timeout, rate limit; every 5xx is checked apart.
_TRANSIENT_STATUSES = frozenset({408, 429})


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
            "schema": schema.model_json_schema(),
            "strict": True,
        },
    }


def is_transient(exc: BaseException) -> bool:
    """Return True for failures worth retrying: rate limits, timeouts, lost connections, 5xx."""
    litellm = import_litellm()
    transient = (
        litellm.RateLimitError,
        litellm.Timeout,
        litellm.APIConnectionError,
        litellm.InternalServerError,
        litellm.ServiceUnavailableError,
    )
    if isinstance(exc, transient):
        return True
    # Providers map some failures to generic classes (e.g. litellm.APIError); their status says.
    status = getattr(exc, "status_code", None)
    return isinstance(status, int) and (status in _TRANSIENT_STATUSES or status >= 500)


def is_rate_limited(exc: BaseException) -> bool:
    """Return True for a provider's rate-limit refusal (429): nothing was processed, and it
    passes. Not for a 429 about a used-up quota (OpenAI's ``insufficient_quota``): that one
    stays until someone pays, so it counts as a failed attempt like any other."""
    litellm = import_litellm()
    limited = isinstance(exc, litellm.RateLimitError) or getattr(exc, "status_code", None) == 429
    return limited and "quota" not in str(exc).lower()


def failure_hint(exc: BaseException, settings: LlmSettings) -> str:
    """Given a failed call, return what the operator can do about it ("" if nothing clear)."""
    status = getattr(exc, "status_code", None)
    text = str(exc)
    if status in (401, 403) or "AuthenticationError" in type(exc).__name__:
        return "The provider refused the key: check [llm] api_key (SECRETARY_LLM_API_KEY)"
    if status == 404 or "NotFoundError" in type(exc).__name__:
        return (
            f"The provider does not know model {settings.model!r} (or the path): check [llm] "
            "model and api_base (SECRETARY_LLM_MODEL, SECRETARY_LLM_API_BASE)"
        )
    if "Connection error" in text or "ConnectionError" in type(exc).__name__:
        where = settings.api_base or "the provider"
        return (
            f"Cannot reach {where}: check that it runs and [llm] api_base (SECRETARY_LLM_API_BASE)"
        )
    if status == 429 and "quota" in text.lower():
        return "The provider says the account's quota is used up: check its plan or billing"
    if "Timeout" in type(exc).__name__:
        return (
            f"No answer within {settings.timeout_seconds:g} s: check the server, or raise "
            "[llm] timeout_seconds"
        )
    return ""


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
        self, prompt: RenderedPrompt, schema: type[T], *, budget: Budget | None = None
    ) -> LlmReply[T]:
        """Given a rendered prompt and its response model, return the reply's valid items.

        The reply is checked item by item (``ReplyModel.salvage``): invalid items are dropped
        and listed in the reply, the valid ones kept. Only a reply with nothing usable (not
        JSON, not the expected shape, or every item invalid) is sent back once for repair.
        Raise LlmNotConfigured without a model, BudgetExhausted before a call the budget cannot
        afford, LlmCallFailed if the provider refuses or transient failures outlast the retry
        bound, LlmInvalidReply if the repaired reply still has nothing usable, and the
        throttle's RateLimitUnavailable (nothing sent) if the shared rate limit cannot be read.
        """
        if not self.configured:
            raise LlmNotConfigured()
        messages = [message.as_dict() for message in prompt.messages]
        first = self._exchange(prompt, messages, schema, budget)
        salvaged = schema.salvage(_strip_code_fence(first.content))
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
        repaired = schema.salvage(_strip_code_fence(second.content))
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
            "LLM {} v{} via {}: {} prompt + {} completion tokens, {} attempt(s)",
            prompt.id,
            prompt.version,
            self.model,
            usage.prompt_tokens,
            usage.completion_tokens,
            attempts,
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
                return litellm.completion(**request)
            ticket = self._throttle.acquire(prompt_estimate + settings.max_reply_tokens)
            try:
                response = litellm.completion(**request)
            except Exception as exc:
                self._after_failure(self._throttle, ticket, exc, prompt_estimate)
                raise
            tickets.append(ticket)
            return response

        retrying = Retrying(
            retry=retry_if_exception(is_transient),
            stop=_StopAfterFailures(settings.max_attempts)
            | stop_before_delay(settings.retry_max_seconds),
            # Exponential backoff plus up to one initial interval of jitter, so that clients
            # throttled together do not retry together; never sooner than Retry-After asks.
            wait=_WaitAtLeastRetryAfter(
                wait_exponential(
                    multiplier=settings.backoff_initial_seconds, max=settings.backoff_max_seconds
                )
                + wait_random(0, settings.backoff_initial_seconds)
            ),
            before_sleep=lambda state: _log_retry(prompt, settings, state),
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
        except _provider_errors() as exc:
            attempts = int(retrying.statistics.get("attempt_number", 1))
            seconds = float(retrying.statistics.get("delay_since_first_attempt", 0.0))
            logger.warning(
                "LLM {} v{} via {}: giving up after {} attempt(s): {}: {}",
                prompt.id,
                prompt.version,
                self.model,
                attempts,
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
        # Some OpenAI-compatible servers omit usage; estimates keep the budget honest.
        usage = getattr(response, "usage", None)
        prompt_tokens = getattr(usage, "prompt_tokens", None)
        completion_tokens = getattr(usage, "completion_tokens", None)
        if not isinstance(prompt_tokens, int):
            prompt_tokens = prompt_estimate
        if not isinstance(completion_tokens, int):
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


def _strip_code_fence(content: str) -> str:
    # Models often wrap JSON in a ```json fence even when told not to; that is no reason to
    # spend a repair round trip.
    text = content.strip()
    if text.startswith("```") and text.endswith("```") and "\n" in text:
        return text[text.index("\n") + 1 : -3]
    return text


def _content_of(response: Any) -> str:
    # A reply without text (no choices, a refusal, a tool call) is simply an invalid reply.
    try:
        content = response.choices[0].message.content
    except (AttributeError, IndexError, TypeError):
        return ""
    return content if isinstance(content, str) else ""


def _cost_of(litellm: Any, response: Any, model: str) -> float | None:
    """The call's price in USD, or None if litellm knows no price for the model."""
    try:
        cost = litellm.completion_cost(completion_response=response, model=model)
    except (litellm.exceptions.ModelNotMappedError, ValueError, KeyError) as exc:
        logger.debug("no price for model {}: {}", model, exc)
        return None
    return float(cost) if isinstance(cost, int | float) else None


def _log_retry(prompt: RenderedPrompt, settings: LlmSettings, state: RetryCallState) -> None:
    error = state.outcome.exception() if state.outcome else None
    if error is not None and is_rate_limited(error):
        logger.warning(
            "LLM {} v{}: attempt {} refused by the provider's rate limit ({}: {}); retrying in "
            "{:.2f}s (rate limits are waited out for up to {:g}s, not counted as failures)",
            prompt.id,
            prompt.version,
            state.attempt_number,
            type(error).__name__,
            error,
            state.upcoming_sleep,
            settings.retry_max_seconds,
        )
        return
    logger.warning(
        "LLM {} v{}: attempt {}/{} failed ({}: {}); retrying in {:.2f}s",
        prompt.id,
        prompt.version,
        state.attempt_number,
        settings.max_attempts,
        type(error).__name__,
        error,
        state.upcoming_sleep,
    )


class _StopAfterFailures(stop_base):
    """Stop once ``max_attempts`` attempts have failed, not counting those a rate limit refused.

    A 429 says "not now", not "this failed": the provider processed nothing, and with many
    calls in flight (several daemons, a provider stricter than ``max_requests_per_minute``)
    several retries in a row can be refused while the window drains. Those are waited out
    under ``retry_max_seconds`` alone (``stop_before_delay`` beside this), so a night slowed by
    a provider's limit finishes its runs instead of failing them. Tenacity asks a stop once
    per failed attempt that may be retried; one instance serves one call.
    """

    def __init__(self, max_attempts: int) -> None:
        self._max_attempts = max_attempts
        self._failures = 0

    def __call__(self, retry_state: RetryCallState) -> bool:
        outcome = retry_state.outcome
        error = outcome.exception() if outcome is not None else None
        if error is None or not is_rate_limited(error):
            self._failures += 1
        return self._failures >= self._max_attempts


def retry_after(exc: BaseException | None) -> float | None:
    """Return how long a failed request's provider asked to wait (Retry-After), in seconds."""
    for headers in (
        getattr(exc, "litellm_response_headers", None),
        getattr(getattr(exc, "response", None), "headers", None),
    ):
        if headers is None:
            continue
        milliseconds = headers.get("retry-after-ms")
        if milliseconds is not None:
            try:
                return max(0.0, float(milliseconds) / 1000)
            except ValueError:
                pass
        value = headers.get("retry-after")
        if value is None:
            continue
        try:
            return max(0.0, float(value))
        except ValueError:
            pass
        try:
            moment = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            continue
        return max(0.0, (moment - utc_now()).total_seconds())
    return None


class _WaitAtLeastRetryAfter(wait_base):
    """A tenacity wait that is never shorter than the provider's Retry-After."""

    def __init__(self, wait: wait_base) -> None:
        self._wait = wait

    def __call__(self, retry_state: RetryCallState) -> float:
        planned = float(self._wait(retry_state))
        outcome = retry_state.outcome
        asked = retry_after(outcome.exception() if outcome is not None else None)
        return max(planned, asked or 0.0)


def _provider_errors() -> tuple[type[Exception], ...]:
    """Exceptions a litellm call raises for provider and HTTP failures."""
    import httpx
    import openai

    # Every litellm.exceptions class that reports a provider failure derives from openai's.
    return (openai.OpenAIError, httpx.HTTPError)


def import_litellm() -> Any:
    """Import and return litellm, configured to stay offline and quiet."""
    # Without this, importing litellm fetches the model cost map over the network.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    # pydantic (>= 2.12) warns, on the first reply, that litellm's response types mark TypedDict
    # items ReadOnly: nothing the daemon's log needs.
    warnings.filterwarnings("ignore", message=".*`ReadOnly` qualifier", category=UserWarning)
    # litellm prints a "Give Feedback / Get Help" banner to stdout on failures; we report them.
    litellm.suppress_debug_info = True
    # Token counts only estimate budgets: never download a Hugging Face tokenizer for them
    # (a llama-3 model name would, and the daemon may run offline). tiktoken is bundled.
    litellm.disable_hf_tokenizer_download = True
    return litellm
