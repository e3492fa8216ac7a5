"""litellm, imported on first use (it takes seconds), offline and quiet, and the exceptions its
calls raise for provider and HTTP failures."""

from __future__ import annotations

import os
import warnings
from typing import Any


class NoChoices(Exception):
    """A provider (or a proxy before it) answered 200 with no choices: nothing was generated.

    Nothing in it says the request was at fault; it is retried, and fails the call, as a 502.
    """

    status_code = 502

    def __init__(self) -> None:
        super().__init__("the provider answered 200 with no choices (nothing was generated)")


def provider_errors() -> tuple[type[Exception], ...]:
    """Exceptions a litellm call raises for provider and HTTP failures."""
    import httpx
    import openai

    # Every litellm.exceptions class that reports a provider failure derives from openai's.
    return (openai.OpenAIError, httpx.HTTPError, NoChoices)


def require_choice(response: Any) -> Any:
    """The response if it holds a choice; raise NoChoices if it holds none."""
    if not getattr(response, "choices", None):
        raise NoChoices()
    return response


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
