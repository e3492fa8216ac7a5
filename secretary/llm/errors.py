"""What an LLM call can fail with; each error builds its own message.

A job that gets one stops cleanly: the job boundary records the failed run.
"""

from __future__ import annotations

from secretary.llm.usage import LlmUsage
from store.changes import plural
from store.errors import SecretaryError


class LlmError(SecretaryError):
    """Base class of the LLM layer's errors; a job that gets one stops cleanly.

    ``items_at_fault``: whether the failure says something of what the call was about (the
    model answered, but not validly for these items; the request was too long or refused for
    its content), so that a call failing again and again quarantines its items. An unreachable
    server, timeouts, 5xx, rate limits or a refused key say nothing of them.
    """

    items_at_fault = False


class LlmNotConfigured(LlmError):
    """No model is configured, so LLM jobs are skipped."""

    def __init__(self) -> None:
        super().__init__(
            "no LLM is configured: set [llm] model in the config file or SECRETARY_LLM_MODEL"
        )


# litellm's errors for a request refused for what it holds (too long, or its content).
REFUSED_FOR_THE_REQUEST = frozenset({"ContextWindowExceededError", "ContentPolicyViolationError"})


class LlmCallFailed(LlmError):
    """The provider refused the call, or transient failures outlasted the retry bound."""

    def __init__(
        self,
        *,
        prompt_id: str,
        model: str,
        attempts: int,
        seconds: float,
        cause: BaseException,
        retry_after: float | None = None,
        hint: str = "",
    ) -> None:
        self.prompt_id = prompt_id
        self.model = model
        self.attempts = attempts
        self.items_at_fault = type(cause).__name__ in REFUSED_FOR_THE_REQUEST
        # The provider's Retry-After, in seconds, if it asked to wait longer than we could.
        self.retry_after = retry_after
        wait = f"; the provider asks to retry after {retry_after:.0f}s" if retry_after else ""
        # What to do about it, when the failure says (an unreachable server, a refused key).
        fix = f". {hint}" if hint else ""
        # Providers' messages often end in a full stop ("Request timed out."): one is enough.
        said = str(cause).rstrip().rstrip(".") if fix or wait else str(cause)
        super().__init__(
            f"LLM call for prompt {prompt_id!r} to model {model!r} failed after"
            f" {plural(attempts, 'attempt')} in {seconds:.1f} s: {type(cause).__name__}: {said}"
            f"{wait}{fix}"
        )


class LlmInvalidReply(LlmError):
    """The reply did not match the response schema, even after one repair attempt."""

    items_at_fault = True

    def __init__(
        self, *, prompt_id: str, model: str, detail: str, usage: LlmUsage | None = None
    ) -> None:
        self.prompt_id = prompt_id
        self.model = model
        # The tokens were spent even though the reply is unusable; the run records them.
        self.usage = usage
        super().__init__(
            f"model {model!r} gave an invalid reply to prompt {prompt_id!r}"
            f" after one repair attempt: {detail}"
        )


class BudgetExhausted(LlmError):
    """The next LLM call would exceed the token budget of the run or of the day."""

    def __init__(self, *, scope: str, namespace: str, limit: int, used: int, needed: int) -> None:
        self.scope = scope
        self.namespace = namespace
        self.limit = limit
        self.used = used
        self.needed = needed
        super().__init__(
            f"token budget per {scope} for namespace {namespace!r} is exhausted:"
            f" {used} of {limit} tokens used, the next call needs up to {needed}"
        )
