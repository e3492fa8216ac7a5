"""extractor: unprocessed conversation log lines -> memories, linked into the timeline.

Lines are read past the namespace's watermark (a log id) in id order and sent in batches; a
memory's event time and session come from the lines it cites, never from "now". The
watermark moves only over batches whose reply was used, so nothing is read twice or skipped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from prompts.extractor_schema import ExtractedMemory, ExtractorReply
from prompts.render import RenderedPrompt, render
from secretary.jobs.base import (
    Call,
    Change,
    Draft,
    WatermarkJob,
    chunks,
    listed,
    split_ids,
    tidy_tags,
)
from secretary.jobs.context import JobContext
from secretary.jobs.prompt_data import prompt_time
from store.operations import CreateMemory
from store.text import content_hash
from store.views import LogView

Lines = Sequence[LogView]


def lines_for_prompt(lines: Lines) -> list[dict[str, Any]]:
    """The lines as data for the prompt, in order; a line's time is left out when it is the
    same as the line before's (the prompt says so), as it is along most of a conversation."""
    shown: list[dict[str, Any]] = []
    before = None
    for line in lines:
        time = prompt_time(line.timestamp)
        item: dict[str, Any] = {"id": line.id}
        if time != before:
            item["time"] = time
        shown.append(item | {"role": line.role, "text": line.content})
        before = time
    return shown


def memory_ops(
    key: str, extracted: ExtractedMemory, lines: Lines
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


def once(creates: Sequence[CreateMemory], draft: Draft) -> list[CreateMemory]:
    """The memories with the same text said once: a memory a reply gives twice (in one call
    or two) is one memory, citing the lines of both, at the earlier one's time and session,
    with the higher importance and the tags of both; each repetition is noted as left out."""
    kept: dict[str, CreateMemory] = {}
    for create in creates:
        text = content_hash(create.content)
        first = kept.get(text)
        if first is None:
            kept[text] = create
            continue
        draft.reject(f"memory {create.content[:60]!r}", "said again in the reply: kept once")
        earlier = min(first, create, key=lambda c: c.event_time)
        kept[text] = replace(
            first,
            event_time=earlier.event_time,
            session_id=earlier.session_id,
            importance=max(first.importance, create.importance),
            tags=tidy_tags((*first.tags, *create.tags)),
            metadata={
                **first.metadata,
                "source_log_ids": sorted(
                    {*first.metadata["source_log_ids"], *create.metadata["source_log_ids"]}
                ),
            },
        )
    return list(kept.values())


@dataclass
class Extracted:
    creates: list[CreateMemory] = field(default_factory=list)
    uncited: int = 0


class Extractor(WatermarkJob[LogView, Extracted, Lines, ExtractorReply]):
    name = "extractor"
    summary = "conversation logs since its watermark -> memories linked into the timeline"
    default_cron = "*/15 * * * *"
    needs_llm = True
    prompt_id = "extractor"
    reply_schema = ExtractorReply

    def read(self, ctx: JobContext, after: int) -> Sequence[LogView]:
        return ctx.db.work.logs_after(ctx.namespace, after, limit=ctx.jobs.max_items_per_run)

    def read_ids(self, ctx: JobContext, ids: Sequence[int]) -> Sequence[LogView]:
        return ctx.db.work.logs(ctx.namespace, ids)

    def id_of(self, item: LogView) -> int:
        return item.id

    def prepare(self, ctx: JobContext, new: Sequence[LogView]) -> Extracted:
        return Extracted()

    def calls(
        self, ctx: JobContext, work: Extracted, fresh: Sequence[LogView], draft: Draft
    ) -> list[Call[Lines]]:
        return [
            Call(about=batch, ids=tuple(line.id for line in batch))
            for batch in chunks(fresh, ctx.jobs.batch_size)
        ]

    def prompt(self, ctx: JobContext, work: Extracted, call: Call[Lines]) -> RenderedPrompt:
        return render(self.prompt_id, today=ctx.now.date(), lines=lines_for_prompt(call.about))

    def unusable(self, work: Extracted, call: Call[Lines], reply: ExtractorReply) -> str | None:
        # Memories none of which cites a line that was sent (a model numbering the lines 1, 2,
        # 3... instead of by their ids, say) would be dropped to the last one and the lines
        # passed by as if they held nothing: such a reply is sent back for repair, and failing
        # that the lines wait (and a batch that keeps failing is quarantined).
        sent = set(call.ids)
        if not reply.memories or any(sent & set(m.source_log_ids) for m in reply.memories):
            return None
        cited = sorted({i for m in reply.memories for i in m.source_log_ids})
        return (
            f"none of the {len(reply.memories)} memories cites a line that was sent (they cite "
            f"{listed(cited)}): source_log_ids must be the ids of the lines given, "
            f"{listed(sorted(sent))}"
        )

    def collect(
        self,
        ctx: JobContext,
        work: Extracted,
        call: Call[Lines],
        reply: ExtractorReply,
        number: int,
        draft: Draft,
    ) -> None:
        for index, extracted in enumerate(reply.memories):
            made = memory_ops(f"b{number}m{index}", extracted, call.about)
            if made is None:
                work.uncited += 1
                draft.dropped.extend(extracted.source_log_ids)
                draft.reject(
                    f"memory {extracted.content[:60]!r}",
                    f"cites no log line of its batch ({extracted.source_log_ids})",
                )
                continue
            work.creates.append(made[0])
            draft.dropped.extend(made[1])

    def finish(
        self,
        ctx: JobContext,
        work: Extracted,
        draft: Draft,
        answered: Sequence[tuple[Call[Lines], Any]],
    ) -> None:
        creates = once(work.creates, draft)
        hashes = [content_hash(c.content) for c in creates]
        present = {
            m.content_hash
            for m in ctx.db.memories.with_hashes(ctx.namespace, hashes, active_only=False)
        }
        fresh = [c for c in creates if content_hash(c.content) not in present]
        draft.changes.extend(
            Change(label=f"extract {list(c.metadata['source_log_ids'])}", operations=(c,))
            for c in fresh
        )
        draft.stats.update(
            logs_read=sum(len(call.ids) for call, _ in answered),
            memories=len(fresh),
            already_present=len(creates) - len(fresh),
            uncited_memories=work.uncited,
        )
