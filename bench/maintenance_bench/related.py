"""LoCoMo turns: as the conversation log lines that arrive, and as related base memories."""

from __future__ import annotations

import argparse
import json
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchkit import settings_for
from locomo_bench.data import load_conversations

from maintenance_bench.base import (
    BASE_NOW,
    BATCH,
    NAMESPACE,
    base_store,
    index_outbox,
    mark_maintained,
)
from maintenance_bench.scripted import keywords, memory_type, stable_hash
from store.service import Store


def locomo_logs(data: Path) -> list[dict[str, Any]]:
    """Every LoCoMo turn as a LogIn item, conversation after conversation, in dialogue order.

    The conversation's first speaker is the "user", the other the "assistant"; the text keeps
    the speaker's name ("<speaker>: <text>"), as bench/locomo.py writes it.
    """
    lines: list[dict[str, Any]] = []
    for conv in load_conversations(data, None):
        first = str(conv.turns[0]["content"]).split(":", 1)[0]
        for turn in conv.turns:
            speaker = str(turn["content"]).split(":", 1)[0]
            lines.append(
                {
                    "session_id": f"{conv.namespace}-{turn['session_id']}",
                    "role": "user" if speaker == first else "assistant",
                    "content": turn["content"],
                    "timestamp": turn["timestamp"],
                    "idempotency_key": f"{conv.namespace}-{turn['external_id']}",
                }
            )
    return lines


def related_items(
    lines: Sequence[Mapping[str, Any]], start: int, wanted: int
) -> list[dict[str, Any]]:
    """LoCoMo lines from ``start`` as the scripted extractor would have made them memories."""
    items = []
    for number, line in enumerate(lines[start:], start=start):
        if len(items) == wanted:
            break
        text = str(line["content"])
        if len(text.split()) < 6:  # the scripted extractor's small-talk rule
            continue
        when = line["timestamp"]
        items.append(
            {
                "content": f"On {when.date().isoformat()}, {text}",
                "type": memory_type({"id": number, "text": text}),
                "timestamp": when.isoformat(),
                "tags": keywords(text),
                "importance": 3 + stable_hash(number) % 5,
                "session_id": line["session_id"],
                "external_id": f"bench-related-{number}",
            }
        )
    return items


def related_store(
    size: int, args: argparse.Namespace, logs: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """The base store plus LoCoMo memories related to the new logs (cached); return its state.

    ``--related-share`` of ``size`` LoCoMo turns that never arrive as logs (the rest of the
    conversation the logs come from first, then the next conversations) are added as memories
    in the scripted extractor's form, with real vectors, before the watermarks are set.
    """
    base = base_store(size, args)
    base["dir"] = str(args.work / f"base-n{size}")
    wanted = round(args.related_share * size)
    if not wanted:
        return base | {"related": 0}
    first = sum(args.new)
    items = related_items(logs, first, wanted)
    target = args.work / f"base-n{size}-related{len(items)}"
    state_path = target / "state.json"
    if state_path.exists() and not args.fresh:
        state = json.loads(state_path.read_text())
        if state.get("fingerprint") == base["fingerprint"] and state.get("first") == first:
            return dict(state)
    shutil.rmtree(target, ignore_errors=True)
    started = time.perf_counter()
    shutil.copytree(args.work / f"base-n{size}" / "data", target / "data")
    store = Store.open(settings_for(target / "data"), create=True)
    try:
        for start in range(0, len(items), BATCH):
            batch = items[start : start + BATCH]
            store.add_memories(NAMESPACE, batch, now=BASE_NOW, source="bench")
        index_seconds = index_outbox(store, size)
        state = {**base, **mark_maintained(store)}
    finally:
        store.close()
    state |= {
        "dir": str(target),
        "first": first,
        "related": len(items),
        "related_index_seconds": index_seconds,
        "related_seconds": round(time.perf_counter() - started, 1),
    }
    state_path.write_text(json.dumps(state, indent=2))
    return state
