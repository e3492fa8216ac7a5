"""Convert FriendsQA (its dev and test files) into the family format (see bench/families/items.py).

FriendsQA (Yang and Choi, SIGDIAL 2019; https://github.com/emorynlp/FriendsQA, Apache-2.0)
asks wh-questions about scenes of the TV show Friends (seasons 1-4), each with one or more
annotated answer spans, each span inside one utterance (or naming its speaker).

- Each episode is a namespace; each utterance of its scenes a memory, "Speaker: text" ("Joey
  Tribbiani: ...", "All: ..." for #ALL#; a stage note (#NOTE#) is its text alone), with the
  scene as its session. The source is tokenised ("do n't", "Pete , you 're"); the text is
  put back together (`detokenise`), questions too.
- The show has no dates: timestamps are synthetic and only keep the order. Episode e of
  season s is day 40 (s - 1) + e - 1 after 2024-01-01, scene c starts at 18:00 + 2 (c - 1)
  hours, utterance u at + 10 u seconds. Questions are asked a day after the episode's last
  utterance.
- Each question (the original and the "_Paraphrased" one alike) is scored against the whole
  episode; gold = every utterance an annotator's answer lies in (the union); type = its
  wh-word.
- Only the dev and test files are read (episodes 21-25 of each season): the train file is
  over the 4 MiB that fetched snapshots keep.

Run: .venv/bin/python bench/families/friendsqa/convert.py --source PATH [--out DIR]
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

FAMILY = "friendsqa"
SOURCE_URL = "https://github.com/emorynlp/FriendsQA"
LICENCE = (
    "Apache-2.0 (LICENSE.txt: Copyright 2019, 2020 Emory University); the dialogue is "
    "transcribed from the TV show Friends, whose rights stay with their owners: research use"
)
FILES = ("dat/friendsqa_dev.json", "dat/friendsqa_tst.json")
FIRST_DAY = datetime(2024, 1, 1, 18, tzinfo=UTC)

_TITLE = re.compile(r"s(?P<season>\d+)_e(?P<episode>\d+)_c(?P<scene>\d+)")
_DETOKENISE = (
    (re.compile(r" (n't|'s|'re|'ve|'ll|'d|'m)\b", re.I), r"\1"),
    (re.compile(r"\b(gon|wan|got) na\b", re.I), r"\1na"),
    (re.compile(r" ([.,!?;:%)\]])"), r"\1"),
    (re.compile(r"([(\[]) "), r"\1"),
)


def detokenise(text: str) -> str:
    """Undo the source's tokenisation: "do n't" -> "don't", "Pete , you" -> "Pete, you"."""
    for pattern, replacement in _DETOKENISE:
        text = pattern.sub(replacement, text)
    return " ".join(text.split())


def speaker_of(speakers: Sequence[str]) -> str | None:
    """The speaker label of an utterance; None for a stage note."""
    if not speakers or "#NOTE#" in speakers:
        return None
    names = ["All" if s == "#ALL#" else s for s in speakers]
    return " and ".join(names)


def convert_files(texts: Sequence[str]) -> list[NamespaceItems]:
    """Return one `NamespaceItems` per episode from the files' texts."""
    scenes = [scene for text in texts for scene in json.loads(text)["data"]]
    episodes: dict[tuple[int, int], list[Mapping[str, Any]]] = {}
    for scene in scenes:
        match = _TITLE.fullmatch(scene["title"])
        if match is None:
            raise ValueError(f"unexpected scene title {scene['title']!r}")
        key = (int(match["season"]), int(match["episode"]))
        episodes.setdefault(key, []).append(scene)
    return [_episode(key, episodes[key]) for key in sorted(episodes)]


def _episode(key: tuple[int, int], scenes: list[Mapping[str, Any]]) -> NamespaceItems:
    season, episode = key
    day = FIRST_DAY + timedelta(days=40 * (season - 1) + episode - 1)
    memories: list[dict[str, Any]] = []
    questions: list[ItemQuestion] = []
    for scene in sorted(scenes, key=lambda s: s["title"]):
        title = scene["title"]
        match = _TITLE.fullmatch(title)
        assert match is not None  # checked by convert_files
        start = day + timedelta(hours=2 * (int(match["scene"]) - 1))
        for paragraph in scene["paragraphs"]:
            for u in paragraph["utterances:"]:
                text = detokenise(u["utterance"])
                speaker = speaker_of(u["speakers"])
                memories.append(
                    {
                        "external_id": f"{title}:u{u['uid']}",
                        "content": text if speaker is None else f"{speaker}: {text}",
                        "timestamp": start + timedelta(seconds=10 * int(u["uid"])),
                        "session_id": title,
                    }
                )
            questions += [_question(title, qa) for qa in paragraph["qas"]]
    return NamespaceItems(
        namespace=f"friends-s{season:02d}e{episode:02d}",
        now=max(m["timestamp"] for m in memories) + timedelta(days=1),
        memories=tuple(memories),
        questions=tuple(questions),
    )


def _question(title: str, qa: Mapping[str, Any]) -> ItemQuestion:
    evidence = sorted({int(a["utterance_id"]) for a in qa["answers"]})
    return ItemQuestion(
        qid=str(qa["id"]),
        text=detokenise(qa["question"]),
        type=str(qa["id"]).removeprefix(f"{title}_").split("_")[0],
        evidence=tuple(f"{title}:u{uid}" for uid in evidence),
    )


def convert(source: SourceRepo) -> tuple[Meta, list[NamespaceItems]]:
    namespaces = convert_files([source.read_text(path) for path in FILES])
    meta = Meta(
        family=FAMILY,
        source_url=SOURCE_URL,
        source_commit=source.commit,
        licence=LICENCE,
        converted="the dev and test files whole (episodes 21-25 of seasons 1-4): one namespace "
        "per episode, every utterance a memory with its scene as session, synthetic "
        "order-keeping timestamps; every question (originals and paraphrases), gold = the "
        "utterances of all its annotated answers",
        files=FILES,
    )
    return meta, namespaces


if __name__ == "__main__":
    run_converter(FAMILY, "Convert FriendsQA (dev and test) for bench/family.py.", convert)
