"""Convert Molweni (its MRC test file) into the family format (see bench/families/items.py).

Molweni (Li et al., COLING 2020; https://github.com/HIT-SCIR/Molweni, Apache-2.0) asks
reading-comprehension questions about short multiparty dialogues of the Ubuntu IRC channel
(the Ubuntu Chat Corpus): people asking for and giving help with their systems, 7-14
utterances each, each answerable question with answer spans in the dialogue's "context"
(its utterances as "speaker: text", lowercased, joined by spaces).

- The test file's 100 dialogues are dealt, in their order, into `NAMESPACES` namespaces of
  25: a help channel's log that an agent keeps, each dialogue a session. Every utterance is a
  memory, "speaker: text" (the source is tokenised: put back together by `detokenise`, as
  FriendsQA's).
- IRC logs of the corpus carry no dates here: timestamps are synthetic and keep the order.
  Dialogue d of a namespace starts at 20:00 on day d after 2024-03-01, utterance u at +30 u
  seconds. Questions are asked a day after the namespace's last utterance.
- Every answerable question is one question, asked of the whole namespace (not only its
  dialogue); gold = the utterances the annotated answer spans lie in (the union of every
  answer's); type = its wh-word. Unanswerable ones (``is_impossible``) are left out.
- Only the MRC test file is read: the train and dev files are over the 4 MiB that fetched
  snapshots keep.

Run: .venv/bin/python bench/families/molweni/convert.py --source PATH [--out DIR]
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # bench/, run from a checkout

from families.converting import run_converter
from families.items import ItemQuestion, Meta, NamespaceItems
from families.source import SourceRepo

FAMILY = "molweni"
SOURCE_URL = "https://github.com/HIT-SCIR/Molweni"
LICENCE = (
    "Apache-2.0 (LICENSE: Copyright 2020 Research Center for Social Computing and Information "
    "Retrieval, Harbin Institute of Technology); the dialogues come from the Ubuntu Chat "
    "Corpus (public IRC logs): research use"
)
TEST_FILE = "MRC(withDiscourse)/test.json"
NAMESPACES = 4
FIRST_DAY = datetime(2024, 3, 1, 20, tzinfo=UTC)
WH_WORDS = ("what", "how", "why", "where", "who", "when", "which")

_DETOKENISE = (
    (re.compile(r" (n['\u2019]t|['\u2019](?:s|re|ve|ll|d|m))\b", re.I), r"\1"),  # straight or curly
    (re.compile(r"\b(gon|wan|got) na\b", re.I), r"\1na"),
    (re.compile(r" ([.,!?;:%)\]])"), r"\1"),
    (re.compile(r"([(\[]) "), r"\1"),
)


def detokenise(text: str) -> str:
    """Undo the source's tokenisation: "it 's treated" -> "it's treated", "fstab ?" -> "fstab?"."""
    for pattern, replacement in _DETOKENISE:
        text = pattern.sub(replacement, text)
    return " ".join(text.split())


def question_type(question: str) -> str:
    """The question's wh-word ("what's" is "what"); "other" for yes/no and the rest."""
    first = re.split(r"[\s'\u2019]", question.strip().lower(), maxsplit=1)[0]
    return first if first in WH_WORDS else "other"


def spans(edus: Sequence[Mapping[str, Any]], context: str) -> list[tuple[int, int]]:
    """Each utterance's [start, end) in the dialogue's context; raise if they do not line up."""
    places = []
    at = 0
    for edu in edus:
        piece = f"{edu['speaker']}: {edu['text']}".lower()
        if context[at : at + len(piece)] != piece:
            raise ValueError(f"utterance {len(places)} is not at {at} of the context")
        places.append((at, at + len(piece)))
        at += len(piece) + 1
    return places


def gold(answers: Sequence[Mapping[str, Any]], places: Sequence[tuple[int, int]]) -> list[int]:
    """The utterances (indexes) that some answer span overlaps."""
    hit = set()
    for answer in answers:
        start = int(answer["answer_start"])
        end = start + len(answer["text"])
        hit.update(i for i, (lo, hi) in enumerate(places) if start < hi and end > lo)
    return sorted(hit)


def convert_text(text: str) -> list[NamespaceItems]:
    """Return `NAMESPACES` `NamespaceItems` from the MRC file's text."""
    dialogues = json.loads(text)["data"]["dialogues"]
    size = -(-len(dialogues) // NAMESPACES)
    return [
        _namespace(n, dialogues[n * size : (n + 1) * size], first=n * size)
        for n in range(NAMESPACES)
    ]


def _namespace(n: int, dialogues: Sequence[Mapping[str, Any]], *, first: int) -> NamespaceItems:
    memories: list[dict[str, Any]] = []
    questions: list[ItemQuestion] = []
    for d, dialogue in enumerate(dialogues):
        number = first + d
        start = FIRST_DAY + timedelta(days=d)
        ids = [f"d{number:03d}:u{u}" for u in range(len(dialogue["edus"]))]
        for u, edu in enumerate(dialogue["edus"]):
            memories.append(
                {
                    "external_id": ids[u],
                    "content": f"{edu['speaker']}: {detokenise(edu['text'])}",
                    "timestamp": start + timedelta(seconds=30 * u),
                    "session_id": f"dialogue-{number:03d}",
                }
            )
        places = spans(dialogue["edus"], dialogue["context"])
        for qa in dialogue["qas"]:
            if qa.get("is_impossible") or not qa.get("answers"):
                continue
            hit = gold(qa["answers"], places)
            if not hit:
                raise ValueError(f"question {qa['id']}: no utterance holds its answer")
            questions.append(
                ItemQuestion(
                    qid=f"molweni-{qa['id']}",
                    text=detokenise(qa["question"]),
                    type=question_type(qa["question"]),
                    evidence=tuple(ids[i] for i in hit),
                )
            )
    latest = max(m["timestamp"] for m in memories)
    return NamespaceItems(
        namespace=f"molweni-channel{n + 1}",
        now=latest + timedelta(days=1),
        memories=tuple(memories),
        questions=tuple(questions),
    )


def convert(source: SourceRepo) -> tuple[Meta, list[NamespaceItems]]:
    namespaces = convert_text(source.read_text(TEST_FILE))
    meta = Meta(
        family=FAMILY,
        source_url=SOURCE_URL,
        source_commit=source.commit,
        licence=LICENCE,
        converted=f"the MRC test file whole: its 100 dialogues dealt in order into "
        f"{NAMESPACES} namespaces (each dialogue a session), every utterance a memory, "
        "synthetic order-keeping timestamps; every answerable question, asked of its whole "
        "namespace, gold = the utterances its answer spans lie in",
        files=(TEST_FILE,),
    )
    return meta, namespaces


if __name__ == "__main__":
    run_converter(FAMILY, "Convert Molweni (the MRC test file) for bench/family.py.", convert)
