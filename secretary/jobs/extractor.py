"""extractor: unprocessed conversation log lines -> memories, linked into the timeline.

Lines are read past the namespace's watermark (a log id) in id order and sent in batches; a
memory's event time and session come from the lines it cites, never from "now". The
watermark moves only over batches whose reply was used, so nothing is read twice or skipped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select

from prompts.extractor_schema import ExtractedMemory, ExtractorReply
from prompts.render import render
from secretary.jobs.base import (
    Change,
    Job,
    JobContext,
    Plan,
    advance,
    ask_each,
    chunks,
    dropped_note,
    tidy_tags,
)
from secretary.jobs.guardrails import split_ids
from store.models import ConversationLog, Memory
from store.operations import CreateMemory
from store.repository import Repository
from store.text import content_hash


@dataclass(frozen=True, kw_only=True)
class LogLine:
    id: int
    session_id: str
    role: str
    content: str
    timestamp: datetime

    def for_prompt(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "time": self.timestamp.isoformat(),
            "role": self.role,
            "text": self.content,
        }


def logs_after(repository: Repository, namespace: str, after_id: int, limit: int) -> list[LogLine]:
    query = (
        select(ConversationLog)
        .where(ConversationLog.namespace == namespace, ConversationLog.id > after_id)
        .order_by(ConversationLog.id)
        .limit(limit)
    )
    with repository.reading() as session:
        return [
            LogLine(
                id=row.id,
                session_id=row.session_id,
                role=row.role,
                content=row.content,
                timestamp=row.timestamp,
            )
            for row in session.scalars(query)
        ]


def existing_hashes(repository: Repository, namespace: str, hashes: Sequence[str]) -> set[str]:
    """Return which content hashes the namespace already holds (any status)."""
    if not hashes:
        return set()
    query = select(Memory.content_hash).where(
        Memory.namespace == namespace, Memory.content_hash.in_(sorted(set(hashes)))
    )
    with repository.reading() as session:
        return set(session.scalars(query))


def memory_ops(
    key: str, extracted: ExtractedMemory, lines: Sequence[LogLine]
) -> tuple[CreateMemory, list[int]] | None:
    """Turn one extracted memory into a CreateMemory, citing only lines of its batch.

    Return it with the cited ids that were not in the batch, or None if it cites none that were.
    """
    by_id = {line.id: line for line in lines}
    known, unknown = split_ids(extracted.source_log_ids, by_id)
    if not known:
        return None
    sources = sorted((by_id[i] for i in known), key=lambda line: (line.timestamp, line.id))
    create = CreateMemory(
        key=key,
        content=extracted.content.strip(),
        type=extracted.type,
        event_time=sources[0].timestamp,
        importance=extracted.importance,
        tags=tidy_tags(extracted.tags),
        session_id=sources[0].session_id,
        metadata={"source_log_ids": sorted(known)},
        source="extractor",
    )
    return create, sorted(unknown)


class Extractor(Job):
    name = "extractor"
    needs_llm = True

    def plan(self, ctx: JobContext) -> Plan:
        watermark = ctx.watermark()
        lines = logs_after(ctx.repository, ctx.namespace, watermark, ctx.jobs.max_items_per_run)
        if not lines:
            return self.empty_plan(ctx)
        if not ctx.llm.available:
            return self.empty_plan(ctx, skipped="LLM not configured", stats={"pending": len(lines)})
        batches = chunks(lines, ctx.jobs.batch_size)
        answered, stopped = ask_each(
            ctx.llm,
            batches,
            lambda batch: ctx.llm.ask(
                render(
                    "extractor",
                    today=ctx.now.date(),
                    lines=[line.for_prompt() for line in batch],
                ),
                ExtractorReply,
            ),
        )
        creates: list[CreateMemory] = []
        dropped: list[int] = []
        uncited = 0
        for number, (batch, reply) in enumerate(answered):
            for index, extracted in enumerate(reply.memories):
                made = memory_ops(f"b{number}m{index}", extracted, batch)
                if made is None:
                    uncited += 1
                    dropped.extend(extracted.source_log_ids)
                    continue
                creates.append(made[0])
                dropped.extend(made[1])
        present = existing_hashes(
            ctx.repository, ctx.namespace, [content_hash(c.content) for c in creates]
        )
        fresh = [c for c in creates if content_hash(c.content) not in present]
        done = [line.id for batch, _ in answered for line in batch]
        left = [line.id for batch in batches[len(answered) :] for line in batch]
        changes = tuple(
            Change(label=f"extract {list(c.metadata['source_log_ids'])}", operations=(c,))
            for c in fresh
        )
        return Plan(
            job=self.name,
            namespace=ctx.namespace,
            changes=changes,
            job_state={**ctx.state, "watermark": advance(watermark, done, left)},
            stats={
                "logs_read": len(done),
                "memories": len(fresh),
                "already_present": len(creates) - len(fresh),
                "uncited_memories": uncited,
                "dropped_ids": dropped_note(self.name, dropped),
            },
            stopped=stopped,
        )
