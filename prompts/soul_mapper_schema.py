"""Response schema of the ``soul_mapper`` prompt: events and facts -> lasting user traits."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from prompts import NON_BLANK, ReplyModel, clamp


class ProposedTrait(ReplyModel):
    trait: str = Field(pattern=NON_BLANK)
    confidence: float = Field(ge=0, le=1)
    evidence_ids: list[int] = Field(min_length=1, description="Ids of supporting memories.")
    updates_trait_id: int | None = Field(description="Id of the existing trait it revises.")

    @classmethod
    def mend(cls, raw: dict[str, Any]) -> list[str]:
        notes: list[str] = []
        clamp(raw, "confidence", 0.0, 1.0, notes)
        return notes


class SoulMapperReply(ReplyModel):
    items_field = "traits"
    traits: list[ProposedTrait]

    def referenced_ids(self) -> set[int]:
        """Every memory or trait id the reply mentions, to compare with the ids that were sent."""
        ids = {i for trait in self.traits for i in trait.evidence_ids}
        ids.update(t.updates_trait_id for t in self.traits if t.updates_trait_id is not None)
        return ids
