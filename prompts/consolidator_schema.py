"""Response schema of the ``consolidator`` prompt: event fragments -> one interaction summary."""

from __future__ import annotations

from pydantic import Field

from prompts import NON_BLANK, ReplyModel


class ConsolidatorReply(ReplyModel):
    summary: str = Field(pattern=NON_BLANK)
    importance: int = Field(ge=1, le=10)
    tags: list[str] = Field(min_length=3, max_length=5)
    source_ids: list[int] = Field(min_length=1, description="Ids of the fragments covered.")

    def referenced_ids(self) -> set[int]:
        """Every fragment id the reply mentions, to compare with the ids that were sent."""
        return set(self.source_ids)
