"""The retry policy of an LLM call: which failures are retried, how long to wait, when to stop.

Transient failures (rate limits, timeouts, lost connections, 5xx) are retried with exponential
backoff and jitter, never sooner than the provider's ``Retry-After``. A call gives up after
``max_attempts`` failed attempts or ``retry_max_seconds``; a rate limit's refusal (429) is waited
out within the time bound but is not counted as a failed attempt. ``LlmClient`` builds its
tenacity ``Retrying`` from these parts.
"""

from __future__ import annotations

from email.utils import parsedate_to_datetime

from loguru import logger
from tenacity import RetryCallState
from tenacity.stop import stop_base
from tenacity.wait import wait_base

from prompts.render import RenderedPrompt
from secretary.llm.provider import import_litellm
from secretary.llm.settings import LlmSettings
from store.clock import utc_now

# HTTP statuses worth another try: request timeout, rate limit; every 5xx is checked apart.
_TRANSIENT_STATUSES = frozenset({408, 429})


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


def log_retry(prompt: RenderedPrompt, settings: LlmSettings, state: RetryCallState) -> None:
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


class StopAfterFailures(stop_base):
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


class WaitAtLeastRetryAfter(wait_base):
    """A tenacity wait that is never shorter than the provider's Retry-After."""

    def __init__(self, wait: wait_base) -> None:
        self._wait = wait

    def __call__(self, retry_state: RetryCallState) -> float:
        planned = float(self._wait(retry_state))
        outcome = retry_state.outcome
        asked = retry_after(outcome.exception() if outcome is not None else None)
        return max(planned, asked or 0.0)
