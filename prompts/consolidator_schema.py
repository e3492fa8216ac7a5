"""Response schema of the ``consolidator`` prompt: event fragments -> one interaction summary."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from prompts import NON_BLANK, ReplyModel, clamp, drop_long_tags


class ConsolidatorReply(ReplyModel):
    summary: str = Field(pattern=NON_BLANK)
    importance: int = Field(ge=1, le=10)
    # 3 to 5 asked for; fewer or more protect nothing (the job keeps at most five).
    tags: list[str]
    source_ids: list[int] = Field(min_length=1, description="Ids of the fragments covered.")

    @classmethod
    def mend(cls, raw: dict[str, Any]) -> list[str]:
        notes: list[str] = []
        clamp(raw, "importance", 1, 10, notes)
        drop_long_tags(raw, notes)
        return notes

    def referenced_ids(self) -> set[int]:
        """Every fragment id the reply mentions, to compare with the ids that were sent."""
        return set(self.source_ids)
