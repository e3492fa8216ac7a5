"""The ``[llm]`` settings section: which model, how calls are retried, token budgets and the
rate limit every daemon of the store shares."""

from __future__ import annotations

from pydantic import Field

from store.settings import Section


class LlmSettings(Section):
    model: str = ""
    api_base: str = ""
    api_key: str = ""
    # Per HTTP attempt; a call takes at most about max_attempts * timeout + retry_max_seconds.
    timeout_seconds: float = Field(default=60.0, gt=0)
    # Cap on each reply's tokens (litellm's max_tokens); budgets count it before each call.
    max_reply_tokens: int = Field(default=4096, ge=1)
    # Transient failures (timeouts, connection errors, 5xx, 429) are retried with jittered
    # exponential backoff, never sooner than a Retry-After, for at most retry_max_seconds; a
    # call gives up after max_attempts failed attempts, a rate limit's 429 not counted as one.
    max_attempts: int = Field(default=4, ge=1, le=20)
    retry_max_seconds: float = Field(default=120.0, ge=0)
    backoff_initial_seconds: float = Field(default=1.0, ge=0)
    backoff_max_seconds: float = Field(default=30.0, ge=0)
    # Token budgets (prompt + completion) per job run and per namespace per UTC day; 0 = none.
    # The daily one caps what a runaway loop or a flood of logs can cost: at about 600 tokens
    # per new memory it allows some 500 new memories a day per namespace.
    max_tokens_per_run: int = Field(default=0, ge=0)
    max_tokens_per_day: int = Field(default=300_000, ge=0)
    # Requests (each HTTP attempt, retries too) sent to the model in any 60 s, by every process
    # of the store together; 0 = no limit. Set it a little under the provider's limit.
    max_requests_per_minute: int = Field(default=0, ge=0)
    # Tokens (prompt + reply cap reserved before each attempt, the tokens used once it is
    # answered) in any 60 s, by every process of the store together; 0 = no limit.
    max_tokens_per_minute: int = Field(default=0, ge=0)
