"""LLM calls through litellm: structured output, one repair, bounded retries, usage and budgets.

``LlmClient.complete`` sends a rendered prompt with its response schema as ``response_format``,
validates the reply with pydantic and, if it is invalid, asks once for a corrected reply (the
``repair`` prompt). Transient failures are retried by tenacity under one predicate
(``is_transient``); litellm's and the provider SDK's own retries are off so the policy is ours.
litellm is imported on first use: importing it takes seconds.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from loguru import logger
from pydantic import BaseModel, ValidationError
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_before_delay,
    wait_exponential,
    wait_random,
)

from prompts.render import RenderedPrompt, prompt_record, render
from secretary.budget import Budget
from secretary.config import LlmSettings
from secretary.errors import LlmCallFailed, LlmInvalidReply, LlmNotConfigured

T = TypeVar("T", bound=BaseModel)

# HTTP statuses worth another try: request timeout, rate limit; every 5xx is checked apart.
_TRANSIENT_STATUSES = frozenset({408, 429})
# Validation errors quoted back to the model in a repair request.
_MAX_QUOTED_ERRORS = 10


@dataclass(frozen=True, kw_only=True)
class LlmUsage:
    """Tokens and cost of one or more calls; cost is None where litellm knows no price."""

    prompt_tokens: int
    completion_tokens: int
    cost: float | None
    model: str

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: LlmUsage) -> LlmUsage:
        both_priced = self.cost is not None and other.cost is not None
        return LlmUsage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            # A partial sum would understate the spend; unknown stays unknown.
            cost=(self.cost or 0.0) + (other.cost or 0.0) if both_priced else None,
            model=self.model,
        )


@dataclass(frozen=True, kw_only=True)
class LlmReply(Generic[T]):
    """A validated reply and what it took: usage, HTTP attempts (retries and repair included)."""

    value: T
    usage: LlmUsage
    attempts: int
    repaired: bool
    # The prompt sent, then the repair prompt if one was needed.
    prompts: tuple[RenderedPrompt, ...]

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
    litellm = _import_litellm()
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


class LlmClient:
    """Structured completions from the configured model."""

    def __init__(self, settings: LlmSettings) -> None:
        self._settings = settings

    @property
    def configured(self) -> bool:
        return bool(self._settings.model)

    @property
    def model(self) -> str:
        return self._settings.model

    def complete(
        self, prompt: RenderedPrompt, schema: type[T], *, budget: Budget | None = None
    ) -> LlmReply[T]:
        """Given a rendered prompt and its response model, return the validated reply.

        Raise LlmNotConfigured without a model, BudgetExhausted before a call the budget cannot
        afford, LlmCallFailed if the provider refuses or transient failures outlast the retry
        bound, and LlmInvalidReply if the reply is still invalid after one repair attempt.
        """
        if not self.configured:
            raise LlmNotConfigured()
        messages = [message.as_dict() for message in prompt.messages]
        first = self._exchange(prompt, messages, schema, budget)
        checked = _validate(first.content, schema)
        if not isinstance(checked, str):
            return self._reply(checked, [first], (prompt,))
        logger.warning(
            "LLM reply to {} v{} is invalid, asking once for a repair: {}",
            prompt.id,
            prompt.version,
            checked.replace("\n", "; "),
        )
        repair = render("repair", errors=checked)
        messages.append({"role": "assistant", "content": first.content})
        messages.extend(message.as_dict() for message in repair.messages)
        second = self._exchange(prompt, messages, schema, budget)
        repaired = _validate(second.content, schema)
        if isinstance(repaired, str):
            raise LlmInvalidReply(
                prompt_id=prompt.id,
                model=self.model,
                detail=repaired.replace("\n", "; "),
                usage=first.usage + second.usage,
            )
        return self._reply(repaired, [first, second], (prompt, repair))

    def _reply(
        self, value: T, exchanges: list[_Exchange], prompts: tuple[RenderedPrompt, ...]
    ) -> LlmReply[T]:
        usage = exchanges[0].usage
        for exchange in exchanges[1:]:
            usage = usage + exchange.usage
        return LlmReply(
            value=value,
            usage=usage,
            attempts=sum(exchange.attempts for exchange in exchanges),
            repaired=len(exchanges) > 1,
            prompts=prompts,
        )

    def _exchange(
        self,
        prompt: RenderedPrompt,
        messages: list[dict[str, str]],
        schema: type[BaseModel],
        budget: Budget | None,
    ) -> _Exchange:
        """Send one request (with retries), within the budget, and count what it used."""
        litellm = _import_litellm()
        prompt_estimate = int(litellm.token_counter(model=self.model, messages=messages))
        if budget is not None:
            budget.ensure_affordable(prompt_estimate + self._settings.max_reply_tokens)
        response, attempts = self._send(litellm, prompt, messages, response_format_for(schema))
        content = _content_of(response)
        usage = self._usage_of(litellm, response, prompt_estimate, content)
        if budget is not None:
            budget.record(usage.total_tokens)
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
    ) -> tuple[Any, int]:
        """Call litellm under the retry policy; return the response and the attempts made."""
        settings = self._settings
        retrying = Retrying(
            retry=retry_if_exception(is_transient),
            stop=stop_after_attempt(settings.max_attempts)
            | stop_before_delay(settings.retry_max_seconds),
            # Exponential backoff plus up to one initial interval of jitter, so that clients
            # throttled together do not retry together.
            wait=wait_exponential(
                multiplier=settings.backoff_initial_seconds, max=settings.backoff_max_seconds
            )
            + wait_random(0, settings.backoff_initial_seconds),
            before_sleep=lambda state: _log_retry(prompt, settings.max_attempts, state),
            reraise=True,
        )
        try:
            response = retrying(
                litellm.completion,
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
            ) from exc
        return response, int(retrying.statistics["attempt_number"])

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


def _validate(content: str, schema: type[T]) -> T | str:
    """The reply parsed into ``schema``, or a short description of why it does not fit."""
    try:
        return schema.model_validate_json(_strip_code_fence(content))
    except ValidationError as exc:
        return _describe(exc)


def _strip_code_fence(content: str) -> str:
    # Models often wrap JSON in a ```json fence even when told not to; that is no reason to
    # spend a repair round trip.
    text = content.strip()
    if text.startswith("```") and text.endswith("```") and "\n" in text:
        return text[text.index("\n") + 1 : -3]
    return text


def _describe(exc: ValidationError) -> str:
    # Locations and messages only: quoting the offending input back could be long.
    errors = exc.errors(include_url=False, include_input=False)
    lines = [
        f"{'.'.join(str(part) for part in error['loc']) or '(reply)'}: {error['msg']}"
        for error in errors[:_MAX_QUOTED_ERRORS]
    ]
    if len(errors) > _MAX_QUOTED_ERRORS:
        lines.append(f"... and {len(errors) - _MAX_QUOTED_ERRORS} more errors")
    return "\n".join(lines)


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


def _log_retry(prompt: RenderedPrompt, max_attempts: int, state: RetryCallState) -> None:
    error = state.outcome.exception() if state.outcome else None
    logger.warning(
        "LLM {} v{}: attempt {}/{} failed ({}: {}); retrying in {:.2f}s",
        prompt.id,
        prompt.version,
        state.attempt_number,
        max_attempts,
        type(error).__name__,
        error,
        state.upcoming_sleep,
    )


def _provider_errors() -> tuple[type[Exception], ...]:
    """Exceptions a litellm call raises for provider and HTTP failures."""
    import httpx
    import openai

    # Every litellm.exceptions class that reports a provider failure derives from openai's.
    return (openai.OpenAIError, httpx.HTTPError)


def _import_litellm() -> Any:
    # Without this, importing litellm fetches the model cost map over the network.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    # litellm prints a "Give Feedback / Get Help" banner to stdout on failures; we report them.
    litellm.suppress_debug_info = True
    # Token counts only estimate budgets: never download a Hugging Face tokenizer for them
    # (a llama-3 model name would, and the daemon may run offline). tiktoken is bundled.
    litellm.disable_hf_tokenizer_download = True
    return litellm
