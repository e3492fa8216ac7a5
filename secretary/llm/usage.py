"""What LLM calls used: tokens and cost."""

from __future__ import annotations

from dataclasses import dataclass


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
