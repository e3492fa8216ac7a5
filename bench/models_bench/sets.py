"""The sets every model is scored on, with the half each question belongs to.

- ``locomo_turns`` and ``locomo_events``: LoCoMo's turns and events views (bench/locomo_bench,
  read from ../shared/data/locomo, never copied). Their halves are the two folds of
  bench/locomo_bench/tuning.py: conversations 0-4 the tune half, 5-9 the report half. The
  events view is never tuned on (bench/locomo_bench/views.py), so nothing is chosen on it.
- ``friendsqa`` (halves by episode) and ``madial`` (held out: reported only, halves by
  question) from bench/families, halves from bench/families/split.py.

Each set's store is the cached one of bench/locomo.py and bench/family.py (prepared if
missing, with the product's embedder); its `Materials` give snapshots and the default search's
evidence.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from benchkit import WORK, say
from families.items import find_items, load_family
from families.registry import DATA_ROOTS, FAMILIES
from families.run import split_family, subsample, unit_of
from families.split import REPORT, TUNE
from locomo_bench.data import Conversation, Question, load_conversations
from locomo_bench.prepared import Materials, prepare, prepare_views
from locomo_bench.tuning import FOLDS
from locomo_bench.views import build_views

SETS = ("locomo_turns", "locomo_events", "friendsqa", "madial")


@dataclass
class ScoredSet:
    name: str
    tuned: bool  # whether a weight may be chosen on its tune half
    held_out: bool
    conversations: list[Conversation]
    materials: Materials
    halves: dict[str, str]  # qid -> "tune" | "report"

    def asked(self) -> list[tuple[Conversation, Question]]:
        return [(c, q) for c in self.conversations for q in c.questions if q.evidence]


def load_sets(locomo: Path, names: tuple[str, ...], max_questions: int | None) -> list[ScoredSet]:
    found: list[ScoredSet] = []
    views = [n.removeprefix("locomo_") for n in names if n.startswith("locomo_")]
    if views:
        convs = load_conversations(locomo, locomo.parent / "audit" / "errors.json")
        built = build_views(locomo, convs)
        say(f"LoCoMo: preparing the stores of {', '.join(views)}")
        _, benches = prepare_views(WORK, locomo, {v: built[v] for v in views})
        tune_members = dict(FOLDS)["A"]
        for bench in benches:
            conversations = _sample(bench.name, bench.conversations, max_questions)
            halves = {
                q.qid: TUNE if c.index in tune_members else REPORT
                for c in conversations
                for q in c.questions
            }
            found.append(
                ScoredSet(
                    name=f"locomo_{bench.name}",
                    tuned=bench.tuned,
                    held_out=False,
                    conversations=conversations,
                    materials=bench.materials,
                    halves=halves,
                )
            )
    for name in names:
        if name.startswith("locomo_"):
            continue
        family = FAMILIES[name]
        path = find_items(name, list(DATA_ROOTS))
        whole = load_family(path)
        tune, _ = split_family(family, whole)
        loaded = subsample(whole, max_questions)
        say(f"{name}: preparing the store of {path}")
        materials = prepare(WORK / "families", path, f"family-{name}", loaded.conversations)
        halves = {
            q.qid: TUNE if unit_of(family, c, q) in tune else REPORT
            for c in loaded.conversations
            for q in c.questions
        }
        found.append(
            ScoredSet(
                name=name,
                tuned=not family.held_out,
                held_out=family.held_out,
                conversations=loaded.conversations,
                materials=materials,
                halves=halves,
            )
        )
    order = {n: i for i, n in enumerate(names)}
    return sorted(found, key=lambda s: order[s.name])


def _sample(name: str, convs: list[Conversation], n: int | None) -> list[Conversation]:
    """Keep ``n`` questions chosen by hash (bench/families/split.py's sample), all memories."""
    if n is None:
        return convs
    from dataclasses import replace

    from families.split import sample

    keep = sample(f"locomo_{name}", (q.qid for c in convs for q in c.questions), n)
    return [replace(c, questions=tuple(q for q in c.questions if q.qid in keep)) for c in convs]
