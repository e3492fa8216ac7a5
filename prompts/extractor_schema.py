"""Response schema of the ``extractor`` prompt: conversation log lines -> memories."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from prompts import NON_BLANK, ReplyModel, clamp, drop_long_tags

MemoryKind = Literal["event", "fact", "preference", "interaction_summary", "tool_experience"]


class ExtractedMemory(ReplyModel):
    content: str = Field(pattern=NON_BLANK, description="One self-contained statement.")
    type: MemoryKind
    importance: int = Field(ge=1, le=10)
    # 3 to 5 asked for; fewer or more protect nothing (the job keeps at most five).
    tags: list[str]
    source_log_ids: list[int] = Field(min_length=1, description="Ids of the log lines used.")

    @classmethod
    def mend(cls, raw: dict[str, Any]) -> list[str]:
        notes: list[str] = []
        clamp(raw, "importance", 1, 10, notes)
        drop_long_tags(raw, notes)
        return notes


class ExtractorReply(ReplyModel):
    items_field = "memories"
    memories: list[ExtractedMemory]

    def referenced_ids(self) -> set[int]:
        """Every log id the reply mentions, to compare with the ids that were sent."""
        return {log_id for memory in self.memories for log_id in memory.source_log_ids}
