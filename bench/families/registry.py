"""The families the benchmark knows, and where their converted data is looked for."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from benchkit import ROOT, WORK

# Where converted data is looked for, in this order: a shared copy beside the checkout (as
# LoCoMo's), then what convert.py writes by default (git-ignored). Never the repository.
SHARED = ROOT.parent / "shared" / "data" / "families"
CONVERTED = WORK / "families" / "data"
DATA_ROOTS = (SHARED, CONVERTED)


@dataclass(frozen=True, kw_only=True)
class Family:
    name: str
    title: str
    shape: str  # what the memories and the queries look like
    held_out: bool  # never tuned on: no weight may be chosen by looking at any of it
    split_by: Literal["namespace", "question"]  # the unit the tune/report halves divide
    chat: bool  # queries are conversation excerpts (the conversation so far)
    data: str | None = None  # another family whose data (and store) it reads
    view: str | None = None  # how its questions are asked (bench/families/views.py)

    @property
    def source(self) -> str:
        """The family whose converted data this one reads."""
        return self.data or self.name


FAMILIES: dict[str, Family] = {
    family.name: family
    for family in (
        Family(
            name="friendsqa",
            title="FriendsQA: short factual questions over an episode's scenes",
            shape="one namespace per Friends episode; every utterance of its scenes a memory, "
            "each scene a session (scripted human dialogue, not generated); short wh-questions "
            "about one scene, gold = the utterances holding an annotated answer",
            held_out=False,
            split_by="namespace",
            chat=False,
        ),
        Family(
            name="friendsqa-chat",
            title="FriendsQA asked in chats: the question after 3-6 turns of its scene",
            shape="FriendsQA's memories; each question the latest line of a chat excerpt of "
            "3-6 other utterances of the scene holding its answer (excerpts about what is "
            "asked, the opposite of LoCoMo's chat view)",
            held_out=False,
            split_by="namespace",
            chat=True,
            data="friendsqa",
            view="scene_chat",
        ),
        Family(
            name="prefeval",
            title="PrefEval: a request that a preference stated once should shape",
            shape="10 users of 100 preferences each (about 5 of each of 20 topics: diet, "
            "hotels, games, pets, ...), each stated once on a day of its own, no sessions; "
            'each question a request that never names its preference ("can you recommend '
            'cafes in San Francisco?" for a gluten-free diet), gold = that preference',
            held_out=False,
            split_by="namespace",
            chat=False,
        ),
        Family(
            name="prefeval-chat",
            title="PrefEval asked in chats: each request after 2-4 turns of another chat",
            shape="PrefEval's users and memories; each request the latest line of 2-4 user "
            "turns from the start of another of the user's chats (PrefEval's persona-driven "
            "conversation of the next topic), in which they talk of their life and let another "
            "stored preference show",
            held_out=False,
            split_by="namespace",
            chat=True,
        ),
        Family(
            name="madial",
            title="MADial-Bench: the conversation so far recalls a past personal event",
            shape="one namespace per user, each memory a dated personal event with its "
            "emotion; the query is the dialogue up to the assistant turn that should bring a "
            "memory up (3-9 chatty lines), gold = the annotated relevant memories",
            held_out=True,
            split_by="question",
            chat=True,
        ),
        Family(
            name="molweni",
            title="Molweni: questions about a help channel's log",
            shape="4 namespaces of 25 short multiparty dialogues of the Ubuntu IRC channel "
            "(real people helping each other with their systems), each dialogue a session, "
            "every utterance a memory (lowercase, terse, usernames and commands); short "
            "wh-questions, gold = the utterances holding an annotated answer",
            held_out=True,
            split_by="question",
            chat=False,
        ),
        Family(
            name="molweni-chat",
            title="Molweni asked in chats: the question after 3-6 utterances of its dialogue",
            shape="Molweni's memories; each question the latest line of a chat excerpt of 3-6 "
            "other utterances of the dialogue holding its answer",
            held_out=True,
            split_by="question",
            chat=True,
            data="molweni",
            view="scene_chat",
        ),
    )
}
