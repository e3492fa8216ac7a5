"""Response schema of the ``linker`` prompt: groups of memories -> typed relations."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from prompts import MAX_DESCRIPTION_CHARS, NON_BLANK, ReplyModel, clamp, cut


class ProposedRelation(ReplyModel):
    source_id: int
    target_id: int
    type: Literal["causal", "thematic"]
    strength: float = Field(ge=0, le=1)
    description: str = Field(pattern=NON_BLANK)

    @classmethod
    def mend(cls, raw: dict[str, Any]) -> list[str]:
        notes: list[str] = []
        clamp(raw, "strength", 0.0, 1.0, notes)
        cut(raw, "description", MAX_DESCRIPTION_CHARS, notes)
        return notes

    @model_validator(mode="after")
    def _not_a_loop(self) -> ProposedRelation:
        if self.source_id == self.target_id:
            raise ValueError("source_id and target_id must differ")
        return self


class LinkerReply(ReplyModel):
    items_field = "relations"
    relations: list[ProposedRelation]

    def referenced_ids(self) -> set[int]:
        """Every memory id the reply mentions, to compare with the ids that were sent."""
        return {i for relation in self.relations for i in (relation.source_id, relation.target_id)}
