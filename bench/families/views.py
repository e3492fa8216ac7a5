"""Families read another way: the same data, its questions asked differently (pure).

``friendsqa-chat`` asks each FriendsQA question as the latest line of a chat excerpt: 3-6
consecutive other utterances of the scene that holds its answer (none of them gold), then the
question. Its excerpts are about what is asked, the opposite of LoCoMo's chat view (random
unrelated turns of the same conversation), so the two together can weigh a chat's readings.
The memories are FriendsQA's, in the same store.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace

from locomo_bench.data import Conversation

from families.items import LoadedFamily

EXCERPT_TURNS = (3, 6)


def scene_chat(conv: Conversation) -> Conversation:
    """Each question as the last line of 3-6 non-gold utterances of its answer's scene,
    chosen by the question's id; a question whose scene has fewer than 2 others is left out."""
    by_session: dict[object, list[dict[str, object]]] = {}
    for turn in conv.turns:
        by_session.setdefault(turn.get("session_id"), []).append(dict(turn))
    session_of = {turn["external_id"]: turn.get("session_id") for turn in conv.turns}
    questions = []
    for question in conv.questions:
        if not question.evidence:
            continue
        rng = random.Random(f"scene-{question.qid}")
        gold = set(question.evidence)
        pool = [
            t for t in by_session[session_of[question.evidence[0]]] if t["external_id"] not in gold
        ]
        size = min(len(pool), rng.randint(*EXCERPT_TURNS))
        if size < 2:
            continue
        start = rng.randrange(0, len(pool) - size + 1)
        lines = [str(t["content"]) for t in pool[start : start + size]]
        questions.append(replace(question, text="\n".join([*lines, question.text])))
    return replace(conv, questions=tuple(questions))


VIEWS: dict[str, Callable[[Conversation], Conversation]] = {"scene_chat": scene_chat}


def viewed(loaded: LoadedFamily, view: str | None) -> LoadedFamily:
    """The family as ``view`` asks it (None: as converted)."""
    if view is None:
        return loaded
    return replace(loaded, conversations=[VIEWS[view](c) for c in loaded.conversations])
