"""Response schema of the ``auditor`` prompt: groups of candidates -> one verdict per memory."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from prompts import NON_BLANK, ReplyModel

Action = Literal["keep", "supersede", "merge", "archive"]
Category = Literal["contradiction", "hallucination", "stale_preference", "duplicate"]


class Verdict(ReplyModel):
    id: int
    action: Action
    superseded_by: int | None = Field(description="For supersede: the replacing memory's id.")
    merge_into: int | None = Field(description="For merge: the id of the memory that stays.")
    merged_content: str | None = Field(description="For merge: the combined content.")
    category: Category | None = Field(description="Null exactly when the action is keep.")
    reason: str = Field(pattern=NON_BLANK)

    @model_validator(mode="after")
    def _consistent(self) -> Verdict:
        # Cross-field rules a JSON schema cannot say; a violation goes back to the model
        # through the repair attempt like any other.
        _require(self.action == "supersede", self.superseded_by, "superseded_by")
        _require(self.action == "merge", self.merge_into, "merge_into")
        _require(self.action == "merge", self.merged_content, "merged_content")
        _require(self.action != "keep", self.category, "category")
        if self.id in (self.superseded_by, self.merge_into):
            raise ValueError("a memory cannot supersede or absorb itself")
        if self.merged_content is not None and not self.merged_content.strip():
            raise ValueError("merged_content must not be blank")
        return self


def _require(wanted: bool, value: object, name: str) -> None:
    if wanted and value is None:
        raise ValueError(f"{name} is required for this action")
    if not wanted and value is not None:
        raise ValueError(f"{name} must be null for this action")


class AuditorReply(ReplyModel):
    verdicts: list[Verdict]

    def referenced_ids(self) -> set[int]:
        """Every memory id the reply mentions, to compare with the ids that were sent."""
        ids: set[int] = set()
        for verdict in self.verdicts:
            ids.add(verdict.id)
            ids.update(i for i in (verdict.superseded_by, verdict.merge_into) if i is not None)
        return ids
