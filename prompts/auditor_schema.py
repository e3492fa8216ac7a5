"""Response schema of the ``auditor`` prompt: groups of candidates -> one verdict per memory."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from prompts import MAX_DESCRIPTION_CHARS, NON_BLANK, ReplyModel, cut

Action = Literal["keep", "supersede", "merge", "archive"]
Category = Literal["contradiction", "hallucination", "stale_preference", "duplicate"]


class Verdict(ReplyModel):
    id: int
    action: Action
    superseded_by: int | None = Field(description="For supersede: the replacing memory's id.")
    merge_into: int | None = Field(description="For merge: the id of the memory that stays.")
    merged_content: str | None = Field(description="For merge: the combined content.")
    category: Category | None = Field(description="Null when the action is keep.")
    reason: str = Field(pattern=NON_BLANK)

    @classmethod
    def mend(cls, raw: dict[str, Any]) -> list[str]:
        """Clear the fields that do not apply to the chosen action: they change nothing; cut
        a reason longer than MAX_DESCRIPTION_CHARS.

        What the action needs is still required: a supersede without ``superseded_by`` or a
        merge without ``merge_into`` cannot be applied, and is dropped.
        """
        notes: list[str] = []
        cut(raw, "reason", MAX_DESCRIPTION_CHARS, notes)  # it goes into the run's record
        action = raw.get("action")
        if action not in _USES:
            return notes
        for name in ("superseded_by", "merge_into", "merged_content", "category"):
            if name not in _USES[action] and raw.get(name) is not None:
                notes.append(f"{name} ignored for action {action!r}")
                raw[name] = None
        return notes

    @model_validator(mode="after")
    def _consistent(self) -> Verdict:
        # Cross-field rules a JSON schema cannot say: a verdict breaking one is dropped (see
        # prompts.ReplyModel.salvage). A missing category protects nothing: it may be null.
        _require(self.action == "supersede", self.superseded_by, "superseded_by")
        _require(self.action == "merge", self.merge_into, "merge_into")
        _require(self.action == "merge", self.merged_content, "merged_content")
        if self.action == "keep" and self.category is not None:
            raise ValueError("category must be null for this action")
        if self.id in (self.superseded_by, self.merge_into):
            raise ValueError("a memory cannot supersede or absorb itself")
        if self.merged_content is not None and not self.merged_content.strip():
            raise ValueError("merged_content must not be blank")
        return self


# The fields each action reads; the others must be null.
_USES: dict[str, frozenset[str]] = {
    "keep": frozenset(),
    "supersede": frozenset({"superseded_by", "category"}),
    "merge": frozenset({"merge_into", "merged_content", "category"}),
    "archive": frozenset({"category"}),
}


def _require(wanted: bool, value: object, name: str) -> None:
    if wanted and value is None:
        raise ValueError(f"{name} is required for this action")
    if not wanted and value is not None:
        raise ValueError(f"{name} must be null for this action")


class AuditorReply(ReplyModel):
    items_field = "verdicts"
    verdicts: list[Verdict]

    def referenced_ids(self) -> set[int]:
        """Every memory id the reply mentions, to compare with the ids that were sent."""
        ids: set[int] = set()
        for verdict in self.verdicts:
            ids.add(verdict.id)
            ids.update(i for i in (verdict.superseded_by, verdict.merge_into) if i is not None)
        return ids
