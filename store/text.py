"""Pure text helpers for indexing: sentence splitting and content hashing."""

from __future__ import annotations

import hashlib
import re

# A fragment with fewer words than this is merged into a neighbour: "Yes." or
# "1." alone would make a vector that matches almost anything.
MIN_SENTENCE_WORDS = 3

# Lower-cased tokens whose final "." does not end a sentence.
ABBREVIATIONS = frozenset(
    {
        "mr.", "mrs.", "ms.", "dr.", "prof.", "sr.", "jr.", "st.", "mt.",
        "e.g.", "i.e.", "cf.", "vs.", "etc.", "approx.", "ca.", "fig.",
        "inc.", "ltd.", "co.", "corp.", "dept.", "no.", "vol.", "p.", "pp.",
        "jan.", "feb.", "mar.", "apr.", "jun.", "jul.", "aug.", "sep.", "sept.",
        "oct.", "nov.", "dec.",
    }
)  # fmt: skip

# Sentence-ending punctuation, optional closing quotes/brackets, then whitespace.
_END = re.compile(r"[.!?]+[\"'\u201d\u2019)\]]*(?=\s)")
_PARAGRAPH = re.compile(r"\n[ \t\r\f\v]*\n\s*")
# An initial ("J.") or a dotted acronym ("U.S.") also keeps its dot.
_DOTTED = re.compile(r"(?:[a-z]\.)+")
_OPENERS = "\"'(\u201c\u2018["


def split_sentences(text: str) -> list[str]:
    """Split text into stripped sentences; very short fragments join a neighbour."""
    spans: list[tuple[int, int]] = []
    for start, end in _paragraph_spans(text):
        spans.extend(_sentence_spans(text, start, end))
    merged = _merge_short(text, spans)
    return [text[s:e].strip() for s, e in merged]


def content_hash(text: str) -> str:
    """Return the sha256 hex digest of text with whitespace stripped and collapsed."""
    normalised = " ".join(text.split())
    return hashlib.sha256(normalised.encode("utf-8")).hexdigest()


def _paragraph_spans(text: str) -> list[tuple[int, int]]:
    """Return (start, end) spans of the paragraphs (blank-line separated)."""
    spans, start = [], 0
    for match in _PARAGRAPH.finditer(text):
        spans.append((start, match.start()))
        start = match.end()
    spans.append((start, len(text)))
    return [(s, e) for s, e in spans if text[s:e].strip()]


def _sentence_spans(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """Return the sentence spans of text[start:end]."""
    spans = []
    for match in _END.finditer(text, start, end):
        if _is_abbreviation(text, start, match):
            continue
        spans.append((start, match.end()))
        start = match.end()
    if text[start:end].strip():
        spans.append((start, end))
    return spans


def _is_abbreviation(text: str, start: int, match: re.Match[str]) -> bool:
    """Tell whether the "." ending at match belongs to an abbreviation."""
    if match.group() != ".":
        return False  # "!", "?", "..." and closing quotes always end a sentence
    words = text[start : match.end()].split()
    token = words[-1].lstrip(_OPENERS).lower() if words else ""
    return token in ABBREVIATIONS or _DOTTED.fullmatch(token) is not None


def _merge_short(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Merge spans with fewer than MIN_SENTENCE_WORDS words into the next (or previous) one."""
    merged: list[tuple[int, int]] = []
    pending: int | None = None  # start of short fragments waiting for a neighbour
    last_end = 0
    for start, end in spans:
        last_end = end
        start = start if pending is None else pending
        if len(text[start:end].split()) < MIN_SENTENCE_WORDS:
            pending = start
            continue
        merged.append((start, end))
        pending = None
    if pending is not None:
        if merged:
            merged[-1] = (merged[-1][0], last_end)
        else:
            merged.append((pending, last_end))
    return merged
