"""Per-turn readings of a chat excerpt, an experiment (issue 26; not the shipped ranking).

The search reads a chat excerpt by its focus and as given (with the tail the embedder reads
well, store/search/query_shape.py). Here each turn of the excerpt (its text without the
"speaker:" label, if it has at least ``min`` words) is one more reading: its embedding, and
with ``lex`` its BM25 too, each memory keeping its best match over every reading (the
search's own ``rank``). A variant's weight is each turn reading's; ``fixed`` uses it as it is,
otherwise it is scaled by the excerpt reading's weight (after a question that leaves the chat,
its turns are chatter); ``early`` keeps the turns before the focus only, ``capN`` the latest N.

The evidence is what `locomo_bench.prepared.Materials` gathers for the search (exact cosines
with the memories' vectors, the stores' own BM25), with the turn readings added; the defaults
("off") re-rank as bench/locomo.py and bench/family.py do. Sets: LoCoMo's chat, telling,
events and turns views (tune half conversations 0-4), the families' halves
(bench/families/split.py); MADial-Bench and Molweni are held out and scored only with
``--held-out``. ``--latency N`` times ``Searcher.search`` end to end over N chats of each set
with the variant patched in (each turn one more embedding in one batch, one more vector
query; an upper bound of what one multi-embedding query would cost).

Measured 2026-12-04 (docs/retrieval.md, "Tried and left: each turn a reading of its own"):
--half tune with off, w0.8, w1.0:early, w1.5, w2.0, w3.0, w2.0:early, w2.0:fixed, w2.0:cap4,
w0.5:lex, w0.7:lex, w0.85:lex, w1.0:lex, w1.0:lex:early, w1.0:lex:fixed, w1.0:lex:cap4,
w1.0:lex:min6 (not each on every set); then --half report with off and w0.7:lex; then
--held-out once.

Run: python bench/turn_readings.py --half tune --variants off,w0.7:lex [--sets ...]
Results: merged into --out (JSON, numbers only) and printed as a table.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchkit import WORK, say
from families.items import find_items, load_family
from families.registry import DATA_ROOTS, FAMILIES
from families.run import split_family, unit_of
from families.views import viewed
from locomo_bench import prepared
from locomo_bench import views as lv
from locomo_bench.cli import DEFAULT_DATA
from locomo_bench.data import Conversation, Question, load_conversations
from locomo_bench.metrics import K, score_question
from locomo_bench.prepared import Materials, prepare, prepare_views
from locomo_bench.rankers import run_end_to_end
from locomo_bench.tuning import FOLDS
from locomo_bench.views import build_views
from loguru import logger

import store.search.searcher as searcher_module
from store.requests import SearchRequest
from store.search.query_shape import QueryShape, Reading, focus_of, turns_of, weigh
from store.search.searcher import Evidence, query_shape, rank
from store.settings import RetrievalSettings

LOCOMO_SETS = ("chat", "telling", "telling-long", "events", "turns")
# telling-long: the telling view with 8-16 turns before the telling (docs/retrieval.md: "Long
# excerpts", p50 263 words), beyond what the embedder reads.
LONG_BEFORE = (8, 16)
TUNABLE = ("friendsqa-chat", "prefeval-chat", "friendsqa", "prefeval")
HELD_OUT = ("madial", "molweni-chat", "molweni")
# Only the search's 200 nearest are read here: caching 600 per text holds too many hits.
prepared.WIDE_DENSE = RetrievalSettings().dense_candidates
_SPEAKER = re.compile(r"[^:\n]{1,40}:\s+")
_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class Variant:
    weight: float
    early: bool = False
    cap: int | None = None
    lex: bool = False
    fixed: bool = False
    min: int = 4

    @classmethod
    def parse(cls, spec: str) -> Variant | None:
        if spec == "off":
            return None
        head, *flags = spec.split(":")
        found = cls(weight=float(head.removeprefix("w")))
        for flag in flags:
            if flag.startswith("cap"):
                found = replace(found, cap=int(flag[3:]))
            elif flag.startswith("min"):
                found = replace(found, min=int(flag[3:]))
            else:
                found = replace(found, **{flag: True})
        return found


def unlabelled(turn: str) -> str:
    label = _SPEAKER.match(turn)
    return turn[label.end() :] if label else turn


def turn_texts(shape: QueryShape, variant: Variant) -> list[str]:
    """The texts of a chat's turn readings under ``variant``, oldest first, each once."""
    turns = turns_of(shape.text)
    chosen = turns[: focus_of(turns)] if variant.early else turns
    texts = [unlabelled(t) for t in chosen if len(_WORD.findall(unlabelled(t))) >= variant.min]
    texts = list(dict.fromkeys(texts))
    return texts[-variant.cap :] if variant.cap else texts


def with_turns(shape: QueryShape, variant: Variant | None) -> QueryShape:
    """``shape`` (weighed) with its turn readings appended; a query that is no chat as is."""
    if variant is None or not shape.also:
        return shape
    weight = variant.weight * (1.0 if variant.fixed else shape.also[0].weight)
    added = tuple(
        Reading(lexical=((t, 1.0),) if variant.lex else (), dense=((t, 1.0),), weight=weight)
        for t in turn_texts(shape, variant)
    )
    return replace(shape, also=shape.also + added)


def evidence(
    materials: Materials,
    conv: Conversation,
    text: str,
    settings: RetrievalSettings,
    variant: Variant | None,
) -> Evidence:
    """`Materials.evidence` with the variant's turn readings."""
    shape = with_turns(weigh(query_shape(text, settings), materials.embed), variant)
    return materials.evidence_of(conv, shape, settings)


@dataclass
class ScoredSet:
    name: str
    held_out: bool
    materials: Materials
    asked: list[tuple[Conversation, Question, str]]  # (conversation, question, half)


def load_sets(names: Sequence[str], data: Path, work: Path) -> list[ScoredSet]:
    found = []
    views = [n for n in names if n in LOCOMO_SETS]
    if views:
        convs = load_conversations(data, data.parent / "audit" / "errors.json")
        built = build_views(data, convs)
        if "telling-long" in views:
            before, lv.TELLING_BEFORE = lv.TELLING_BEFORE, LONG_BEFORE
            try:
                longer = build_views(data, convs)["telling"]
                built["telling-long"] = replace(longer, name="telling-long")
            finally:
                lv.TELLING_BEFORE = before
        _, benches = prepare_views(work, data, {v: built[v] for v in views})
        tune = FOLDS[0][1]
        for bench in benches:
            asked = [
                (c, q, "tune" if c.index in tune else "report")
                for c in bench.conversations
                for q in c.questions
                if q.evidence
            ]
            found.append(ScoredSet(f"locomo-{bench.name}", False, bench.materials, asked))
    opened: dict[str, Materials] = {}
    for name in (n for n in names if n not in LOCOMO_SETS):
        family = FAMILIES[name]
        path = find_items(family.source, list(DATA_ROOTS))
        loaded = viewed(load_family(path), family.view)
        tune_units, _ = split_family(family, loaded)
        if family.source not in opened:
            kind = f"family-{family.source}"
            opened[family.source] = prepare(work / "families", path, kind, loaded.conversations)
        asked = [
            (c, q, "tune" if unit_of(family, c, q) in tune_units else "report")
            for c in loaded.conversations
            for q in c.questions
            if q.evidence
        ]
        found.append(ScoredSet(name, family.held_out, opened[family.source], asked))
    return found


def prefill(scored: ScoredSet, settings: RetrievalSettings) -> None:
    """Embed every text the variants may embed, in batches."""
    texts: list[str] = []
    for _, question, _ in scored.asked:
        shape = query_shape(question.text, settings)
        texts += [t for t, _ in shape.dense] + [t for r in shape.also for t, _ in r.dense]
        if shape.follows:
            texts += list(shape.follows)
        if shape.chat:
            texts += [unlabelled(t) for t in turns_of(shape.text)]
    scored.materials.embed_many(texts)


def r10_by_half(
    scored: ScoredSet, settings: RetrievalSettings, variant: Variant | None, halves: set[str]
) -> dict[str, float]:
    got: dict[str, list[float]] = {}
    for conv, question, half in scored.asked:
        if half not in halves:
            continue
        request = SearchRequest(namespace=conv.namespace, query=question.text, k=K, reinforce=False)
        found = evidence(scored.materials, conv, question.text, settings, variant)
        snap = scored.materials.snapshots[conv.namespace]
        ids = [r.memory_id for r in rank(found, snap, request, settings, now=conv.now)]
        got.setdefault(half, []).append(score_question(question, snap.external_ids(ids)).r10)
    return {half: round(100 * statistics.fmean(v), 2) for half, v in sorted(got.items())}


def patched(variant: Variant | None) -> Callable[[], None]:
    """Patch `Searcher._weighed` to add the variant's turn readings (their texts embedded in
    one batch); return the undo."""
    original = searcher_module.Searcher._weighed

    def weighed(self: searcher_module.Searcher, shape: QueryShape, embedded: dict) -> QueryShape:  # type: ignore[type-arg]
        shape = original(self, shape, embedded)
        if variant is None or not shape.also:
            return shape
        todo = [t for t in turn_texts(shape, variant) if t not in embedded]
        if todo:
            embedded.update(zip(todo, self._index().embed_documents(todo), strict=True))
        return with_turns(shape, variant)

    searcher_module.Searcher._weighed = weighed  # type: ignore[method-assign]
    return lambda: setattr(searcher_module.Searcher, "_weighed", original)


def latency(
    scored: ScoredSet, settings: RetrievalSettings, variant: Variant | None, n: int
) -> dict[str, float]:
    """p50 / p95 ms of `Searcher.search` end to end over the first ``n`` chats of the set."""
    convs: dict[str, Conversation] = {}
    for conv, question, _ in scored.asked:
        if "\n" in question.text.strip() and sum(len(c.questions) for c in convs.values()) < n:
            kept = convs.get(conv.namespace, replace(conv, questions=()))
            convs[conv.namespace] = replace(kept, questions=(*kept.questions, question))
    bench = argparse.Namespace(store=scored.materials.store, conversations=list(convs.values()))
    undo = patched(variant)
    try:
        run_end_to_end(bench, settings)  # type: ignore[arg-type]  # warm
        scores, times = run_end_to_end(bench, settings)  # type: ignore[arg-type]
    finally:
        undo()
    ms = sorted(1000 * t for t in times)
    return {
        "p50_ms": round(statistics.median(ms), 1),
        "p95_ms": round(ms[int(0.95 * (len(ms) - 1))], 1),
        "n": len(ms),
        "r10": round(100 * statistics.fmean(s.r10 for s in scores), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="LoCoMo's locomo10.json")
    parser.add_argument("--work", type=Path, default=WORK, help="the cached stores")
    parser.add_argument("--out", type=Path, default=WORK / "turn_readings.json")
    parser.add_argument("--sets", default=",".join(("chat", "telling", *TUNABLE[:2])))
    parser.add_argument("--variants", default="off")
    parser.add_argument("--half", default="tune", choices=("tune", "report", "all"))
    parser.add_argument("--held-out", action="store_true", help="allow MADial and Molweni")
    parser.add_argument("--latency", type=int, default=0, help="time N chats per set instead")
    args = parser.parse_args()
    logger.remove()
    names = [s for s in args.sets.split(",") if s]
    if any(n in HELD_OUT for n in names) and not args.held_out:
        parser.error("MADial and Molweni are held out: pass --held-out to check them once")
    settings = RetrievalSettings()
    variants = {spec: Variant.parse(spec) for spec in args.variants.split(",") if spec}
    halves = {"tune", "report"} if args.half == "all" else {args.half}
    results = json.loads(args.out.read_text()) if args.out.exists() else {}
    sets = load_sets(names, args.data, args.work)
    for scored in sets:
        prefill(scored, settings)
        scored.materials.save()
        for spec, variant in variants.items():
            started = time.perf_counter()
            if args.latency:
                got = latency(scored, settings, variant, args.latency)
                key = f"latency:{spec}"
            else:
                got = r10_by_half(scored, settings, variant, halves)
                key = spec
            entry = results.setdefault(scored.name, {}).setdefault(key, {})
            entry.update(got)
            say(f"{scored.name} {key}: {got} ({time.perf_counter() - started:.0f} s)")
            args.out.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
        scored.materials.save()
    for materials in {id(s.materials): s.materials for s in sets}.values():
        materials.store.close()
    table(results, [s.name for s in sets], list(variants))


def table(results: dict, names: Sequence[str], specs: Sequence[str]) -> None:  # type: ignore[type-arg]
    print("| variant | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    for spec in specs:
        cells = []
        for name in names:
            got = results.get(name, {}).get(spec, {})
            cells.append(" / ".join(f"{got[h]:.1f}" for h in ("tune", "report") if h in got))
        print(f"| {spec} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
