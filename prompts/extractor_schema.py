"""Response schema of the ``extractor`` prompt: conversation log lines -> memories."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from prompts import NON_BLANK, ReplyModel

MemoryKind = Literal["event", "fact", "preference", "interaction_summary", "tool_experience"]


class ExtractedMemory(ReplyModel):
    content: str = Field(pattern=NON_BLANK, description="One self-contained statement.")
    type: MemoryKind
    importance: int = Field(ge=1, le=10)
    tags: list[str] = Field(min_length=3, max_length=5)
    source_log_ids: list[int] = Field(min_length=1, description="Ids of the log lines used.")


class ExtractorReply(ReplyModel):
    memories: list[ExtractedMemory]

    def referenced_ids(self) -> set[int]:
        """Every log id the reply mentions, to compare with the ids that were sent."""
        return {log_id for memory in self.memories for log_id in memory.source_log_ids}
