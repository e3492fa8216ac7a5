"""What each namespace of a fleet store holds: its memories and the night's new log lines.

Pure functions of (namespace number, sizes, seed): every process builds the same items. The
texts are bench/corpus.py's synthetic memories (a companion's memories of a user's life): a
namespace's first ``memories`` items are its maintained memories, the next ``lines`` items'
texts arrive as the night's conversation log lines, a minute apart in one session. Every
tenth line repeats the line five before it with a preamble ("Like I said, ..."), so the
auditor finds near duplicates among the night's new memories and has a model call to make.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import islice
from typing import Any

import corpus

REPEAT_EVERY = 10  # every tenth line repeats an earlier one
REPEAT_BACK = 5
REPEAT_PREFIX = "Like I said, "


@dataclass(frozen=True, kw_only=True)
class Sizes:
    """Namespaces, memories per namespace, and the night's lines per namespace (lo..hi)."""

    namespaces: int
    memories: int
    lines_lo: int
    lines_hi: int
    seed: int = 0

    @property
    def label(self) -> str:
        lines = (
            str(self.lines_lo)
            if self.lines_lo == self.lines_hi
            else f"{self.lines_lo}-{self.lines_hi}"
        )
        return f"n{self.namespaces}-m{self.memories}-l{lines}-s{self.seed}"


def parse_lines(text: str) -> tuple[int, int]:
    """ "20" -> (20, 20); "20-50" -> (20, 50). Raise ValueError if it is neither."""
    lo, _, hi = text.partition("-")
    low, high = int(lo), int(hi or lo)
    if not 1 <= low <= high:
        raise ValueError(f"lines {text!r}: want N or LO-HI with 1 <= LO <= HI")
    return low, high


def namespace(number: int) -> str:
    return f"fleet-{number:05d}"


def line_count(sizes: Sizes, number: int) -> int:
    """How many lines namespace ``number`` gets tonight (seeded, uniform in lo..hi)."""
    if sizes.lines_lo == sizes.lines_hi:
        return sizes.lines_lo
    rng = random.Random(f"fleet-lines:{sizes.seed}:{number}")
    return rng.randint(sizes.lines_lo, sizes.lines_hi)


def items(sizes: Sizes, number: int) -> tuple[list[dict[str, Any]], list[str]]:
    """Namespace ``number``'s memories (MemoryIn-shaped) and the texts of its night's lines."""
    lines = line_count(sizes, number)
    made = list(
        islice(corpus.memories(sizes.memories + lines, seed=sizes.seed * 1_000_003 + number), None)
    )
    memories, texts = made[: sizes.memories], [m["content"] for m in made[sizes.memories :]]
    for position in range(REPEAT_EVERY - 1, len(texts), REPEAT_EVERY):
        texts[position] = REPEAT_PREFIX + texts[position - REPEAT_BACK]
    return memories, texts


def log_lines(number: int, texts: list[str], *, night: datetime) -> list[dict[str, Any]]:
    """The night's lines (LogIn-shaped): the user speaking, a minute apart, one session."""
    return [
        {
            "session_id": f"night-{number}",
            "role": "user",
            "content": text,
            "timestamp": (night + timedelta(minutes=position)).isoformat(),
            "idempotency_key": f"fleet-{number}-{position}",
        }
        for position, text in enumerate(texts)
    ]


def expected_memories(texts: list[str]) -> int:
    """Memories the scripted extractor makes of these lines (one per line of six words or more,
    bench/maintenance_bench/scripted.py)."""
    return sum(len(text.split()) >= 6 for text in texts)
