"""Deterministic rewordings of a turn: a paraphrase, and a restatement with one detail changed.

Pure functions over the memory text ``"<speaker>: <text>"`` (with an optional
``" [shares a photo: <caption>]"`` at the end, which both leave as it is).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Words a paraphrase swaps (whole words; the first letter's case is kept).
SYNONYMS = {
    "great": "wonderful",
    "awesome": "fantastic",
    "amazing": "incredible",
    "really": "truly",
    "love": "adore",
    "happy": "glad",
    "glad": "happy",
    "kids": "children",
    "pic": "photo",
    "picture": "photo",
    "photo": "picture",
    "thanks": "thank you",
    "big": "huge",
    "nice": "lovely",
    "lovely": "nice",
    "tough": "hard",
    "difficult": "hard",
    "started": "began",
    "excited": "thrilled",
    "beautiful": "gorgeous",
    "friends": "pals",
    "recently": "lately",
    "lately": "recently",
    "wonderful": "great",
    "fantastic": "awesome",
    "important": "vital",
    "enjoy": "like",
    "often": "frequently",
    "totally": "completely",
    "definitely": "certainly",
    "maybe": "perhaps",
    "yeah": "yes",
    "hey": "hi",
    "stuff": "things",
    "cool": "neat",
    "helps": "aids",
    "journey": "path",
    "proud": "pleased",
    "inspiring": "uplifting",
    "support": "backing",
}
MAX_SWAPS = 3

# Details an update changes: one of these, the first found in the text.
DETAILS = {
    # numbers in words
    "one": "two",
    "two": "three",
    "three": "four",
    "four": "five",
    "five": "six",
    "six": "seven",
    "seven": "eight",
    "eight": "nine",
    "nine": "ten",
    "ten": "twelve",
    "first": "second",
    # days and months (capitalised only, so that "may" the verb stays)
    "Monday": "Wednesday",
    "Tuesday": "Thursday",
    "Wednesday": "Friday",
    "Thursday": "Saturday",
    "Friday": "Sunday",
    "Saturday": "Monday",
    "Sunday": "Tuesday",
    "January": "February",
    "February": "March",
    "March": "April",
    "April": "May",
    "May": "June",
    "June": "July",
    "July": "August",
    "August": "September",
    "September": "October",
    "October": "November",
    "November": "December",
    "December": "January",
    # colours
    "red": "blue",
    "blue": "green",
    "green": "yellow",
    "yellow": "purple",
    "purple": "orange",
    "orange": "red",
    "pink": "white",
    "black": "white",
    "white": "black",
    # family, pets, places, pastimes
    "dog": "cat",
    "cat": "dog",
    "dogs": "cats",
    "cats": "dogs",
    "son": "daughter",
    "daughter": "son",
    "brother": "sister",
    "sister": "brother",
    "beach": "lake",
    "lake": "beach",
    "park": "museum",
    "museum": "park",
    "mountains": "coast",
    "painting": "pottery",
    "pottery": "painting",
    "guitar": "piano",
    "piano": "guitar",
    "violin": "cello",
    "running": "swimming",
    "swimming": "running",
    "hiking": "cycling",
    "camping": "fishing",
    "books": "podcasts",
}
_CASE_SENSITIVE = frozenset(k for k in DETAILS if k[0].isupper())

_PHOTO = re.compile(r"( \[shares a photo: .*\])$", re.S)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_WORD = re.compile(r"[A-Za-z]+")
_NUMBER = re.compile(r"\b\d+\b")


@dataclass(frozen=True, kw_only=True)
class Parts:
    speaker: str  # "Caroline: " (or "" when the text has no speaker)
    text: str
    photo: str  # " [shares a photo: ...]" or ""

    def joined(self, text: str) -> str:
        return f"{self.speaker}{text}{self.photo}"


def split(content: str) -> Parts:
    """Split a memory text into its speaker prefix, its words and a shared photo's caption."""
    photo_match = _PHOTO.search(content)
    photo = photo_match.group(1) if photo_match else ""
    body = content[: len(content) - len(photo)]
    speaker, sep, text = body.partition(": ")
    if not sep or len(speaker) > 40:
        return Parts(speaker="", text=body, photo=photo)
    return Parts(speaker=speaker + sep, text=text, photo=photo)


def _with_case(word: str, replacement: str) -> str:
    return replacement[:1].upper() + replacement[1:] if word[:1].isupper() else replacement


def swap_words(text: str, limit: int = MAX_SWAPS) -> tuple[str, int]:
    """Replace up to ``limit`` words by their synonyms; return the text and how many."""
    swapped = 0

    def one(match: re.Match[str]) -> str:
        nonlocal swapped
        word = match.group(0)
        replacement = SYNONYMS.get(word.lower())
        if replacement is None or swapped >= limit:
            return word
        swapped += 1
        return _with_case(word, replacement)

    return _WORD.sub(one, text), swapped


def reorder(text: str) -> str:
    """Move the first sentence to the end; for one sentence, swap the clauses around a comma."""
    sentences = [s for s in _SENTENCE_END.split(text.strip()) if s]
    if len(sentences) >= 2:
        return " ".join([*sentences[1:], sentences[0]])
    head, comma, tail = text.strip().partition(", ")
    if not comma or len(head.split()) < 3 or len(tail.split()) < 3:
        return text
    end = tail[-1] if tail[-1] in ".!?" else ""
    tail = tail[:-1] if end else tail
    head = head[:1].lower() + head[1:] if not head.startswith("I ") else head
    return f"{tail[:1].upper()}{tail[1:]}, {head}{end or '.'}"


def paraphrase(content: str) -> str | None:
    """A rewording of the turn: synonyms swapped and clauses reordered; None if it cannot be
    reworded (too short, or nothing to swap or reorder)."""
    parts = split(content)
    if len(parts.text.split()) < 6:
        return None
    text, swapped = swap_words(reorder(parts.text))
    if swapped == 0 and text == parts.text:
        return None
    return parts.joined(text) if text != parts.text else None


def change_detail(content: str) -> str | None:
    """The turn restated with one detail changed (a number, day, month, colour, relative,
    pet, place or pastime: the first found); None if it names none of them."""
    parts = split(content)
    found: list[tuple[int, int, str]] = []
    number = _NUMBER.search(parts.text)
    if number is not None:
        value = int(number.group(0))
        found.append((number.start(), number.end(), str(value + 1)))
    for match in _WORD.finditer(parts.text):
        word = match.group(0)
        if word in _CASE_SENSITIVE:
            replacement = DETAILS[word]
        elif word.lower() in DETAILS and word.lower() not in _CASE_SENSITIVE:
            replacement = _with_case(word, DETAILS[word.lower()])
        else:
            continue
        found.append((match.start(), match.end(), replacement))
        break
    if not found:
        return None
    start, end, replacement = min(found)
    return parts.joined(parts.text[:start] + replacement + parts.text[end:])
