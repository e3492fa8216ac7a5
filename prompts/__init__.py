"""The daemon's prompts: one versioned ``<id>.md`` file each, its response schema in
``<id>_schema.py``, all rendered by ``prompts.render``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

# A string field must hold at least one non-space character. Expressed as a pattern because
# OpenAI's strict structured outputs accept "pattern" but not "minLength".
NON_BLANK = r"\S"


class ReplyModel(BaseModel):
    """Base of every response schema: frozen, and its JSON schema fit for strict mode.

    Strict structured outputs need ``additionalProperties: false`` and every property required,
    so fields have no defaults (optional ones are ``X | None``). Extra keys from a server that
    does not constrain decoding are ignored rather than failing the reply.
    """

    model_config = ConfigDict(
        frozen=True, extra="ignore", json_schema_extra={"additionalProperties": False}
    )
