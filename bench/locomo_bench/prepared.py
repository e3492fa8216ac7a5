"""The cached stores of the views, their snapshots, and the evidence of any query and settings.

A snapshot holds one namespace's search rows, relations and external ids in memory: it is a
``store.search.searcher.MemorySource``, so evidence can be ranked with
``store.search.searcher.rank`` without
touching SQL. `Materials` computes the evidence a search would gather, for any settings, the
way ``Searcher.evidence`` does: the same query shaping (``store.search.searcher.query_shape`` and
``query_vector``), the store's own BM25 index, and exact cosines against the memories'
vectors (the same model's embeddings of the same texts; Chroma's HNSW over a few hundred
vectors returns the same neighbours). Embeddings of memories and queries are cached on disk.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import pickle
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import numpy.typing as npt

from locomo_bench.data import Conversation
from locomo_bench.views import View
from secretary.config import Settings
from store.db import MIGRATIONS
from store.lexical.index import LexicalIndex
from store.lexical.source import SqlLexicalSource
from store.lexical.view import LexicalView
from store.reads.search import SearchRow
from store.search.query_shape import QueryShape, query_terms, query_vector, weigh
from store.search.scoring import mix_scores, parse_periods
from store.search.searcher import SESSION_CANDIDATES, Evidence, Seen, query_shape, supports
from store.service import Store
from store.settings import RetrievalSettings
from store.vector.index import VectorHit
from store.views import Edge

INGEST_VERSION = 2  # bump when the way memories (or vectors) are made changes
# The widest pools any setting may ask for; narrower ones are a prefix (pools are best first).
WIDE_LEXICAL = 1000
WIDE_DENSE = 600

Vector = npt.NDArray[np.float32]


def store_name(data: Path, kind: str) -> str:
    """Name a view's cached store by the data and the schema migrations, so neither goes stale."""
    digest = hashlib.sha256(data.read_bytes())
    for migration in sorted(MIGRATIONS.rglob("*.py")):
        digest.update(migration.read_bytes())
    prefix = "store" if kind == "turns" else f"store-{kind}"  # the turn store keeps its name
    return f"{prefix}-{digest.hexdigest()[:16]}-v{INGEST_VERSION}"


def open_store(work: Path, name: str, conversations: Sequence[Conversation]) -> Store:
    """Open (creating and filling if needed) the cached store of these conversations."""
    store = Store.open(Settings(data_dir=work / name), create=True)
    marker = store.settings.data_dir / "ingested.json"
    done = set(json.loads(marker.read_text())) if marker.exists() else set()
    for conv in [conv for conv in conversations if conv.namespace not in done]:
        started = time.perf_counter()
        store.add_memories(conv.namespace, conv.turns, now=conv.now, source="bench")
        store.indexer.sync()
        print(
            f"ingested {conv.namespace}: {len(conv.turns)} memories in "
            f"{time.perf_counter() - started:.0f} s",
            file=sys.stderr,
        )
        done.add(conv.namespace)
        marker.write_text(json.dumps(sorted(done)))
    return store


@dataclass
class Snapshot:
    """One namespace's active memories and relations in memory: a `MemorySource`."""

    search: dict[int, SearchRow]
    external: dict[int, str]  # memory id -> external id (dialogue or observation id)
    content: dict[int, str]
    relations: list[Edge] = field(default_factory=list)

    def search_rows(self, namespace: str, ids: Iterable[int]) -> dict[int, SearchRow]:
        return {i: self.search[i] for i in ids if i in self.search}

    def edges(self, namespace: str, ids: Iterable[int]) -> list[Edge]:
        wanted = set(ids)
        return [e for e in self.relations if e.source_id in wanted or e.target_id in wanted]

    def external_ids(self, memory_ids: Iterable[int]) -> list[str]:
        return [self.external[i] for i in memory_ids]


def snapshot(store: Store, namespace: str) -> Snapshot:
    db = store.db
    ids = db.memories.index_state(namespace)  # the active ones
    views = db.memories.many(namespace, ids)
    return Snapshot(
        search=db.search.search_rows(namespace, ids),
        external={m.id: str(m.external_id) for m in views},
        content={m.id: m.content for m in views},
        relations=db.search.edges(namespace, ids),
    )


class Materials:
    """Evidence of any query under any settings, over one store's snapshots."""

    def __init__(self, store: Store, snapshots: dict[str, Snapshot]) -> None:
        self.store = store
        self.snapshots = snapshots
        self._cache = store.settings.data_dir / "embeddings.pickle"
        self._embedded: dict[str, Vector] = {}
        if self._cache.exists():
            self._embedded = pickle.loads(self._cache.read_bytes())
        self._dirty = False
        self._matrices = {ns: self._matrix(snap) for ns, snap in snapshots.items()}
        self._lexical: dict[tuple[str, str, float], dict[int, float]] = {}
        self._sessions: dict[tuple[str, str], dict[str, float]] = {}
        self._dense: dict[tuple[str, tuple[tuple[str, float], ...]], list[VectorHit]] = {}
        self._bm25: dict[str, LexicalView] = {}  # namespace -> an index with other parameters
        self.save()

    def use_bm25(self, k1: float, b: float) -> None:
        """Search BM25 indexes built with these parameters from now on (bench/lexical_params)."""
        source = SqlLexicalSource(self.store.db.search)
        self._bm25 = {
            ns: LexicalView(LexicalIndex.build(source.all_docs(ns), k1=k1, b=b))
            for ns in self.snapshots
        }
        self._lexical.clear()
        self._sessions.clear()

    def _lexical_view(self, namespace: str) -> LexicalView:
        found = self._bm25.get(namespace)
        return found if found is not None else self.store.searcher.lexical_view(namespace)

    def embed(self, text: str) -> Vector:
        vector = self._embedded.get(text)
        if vector is None:
            vector = self.embed_many([text])[0]
        return vector

    def embed_many(self, texts: Sequence[str]) -> list[Vector]:
        todo = sorted({t for t in texts if t not in self._embedded})
        for start in range(0, len(todo), 256):
            chunk = todo[start : start + 256]
            vectors = np.asarray(self.store.embedder.embed(chunk), dtype=np.float32)
            self._embedded.update(zip(chunk, vectors, strict=True))
            self._dirty = True
        return [self._embedded[t] for t in texts]

    def save(self) -> None:
        if self._dirty:
            self._cache.write_bytes(pickle.dumps(self._embedded))
            self._dirty = False

    def _matrix(self, snap: Snapshot) -> tuple[list[int], Vector]:
        ids = sorted(snap.content)
        vectors = self.embed_many([snap.content[i] for i in ids])
        return ids, np.vstack(vectors) if vectors else np.zeros((0, 384), dtype=np.float32)

    def lexical(self, namespace: str, text: str, n: int, context: float = 0.0) -> dict[int, float]:
        """The ``n`` best BM25 hits of ``text``, scored with their context as the search
        scores them (``context``: its weight, 0 for plain BM25)."""
        key = (namespace, text, context)
        if key not in self._lexical:
            view = self._lexical_view(namespace)
            self._lexical[key] = view.search(text, WIDE_LEXICAL, context=context)
        return dict(itertools.islice(self._lexical[key].items(), n))

    def sessions(self, namespace: str, text: str) -> dict[str, float]:
        key = (namespace, text)
        if key not in self._sessions:
            view = self._lexical_view(namespace)
            self._sessions[key] = view.search_sessions(text, SESSION_CANDIDATES)
        return self._sessions[key]

    def dense(
        self, namespace: str, texts: tuple[tuple[str, float], ...], n: int
    ) -> list[VectorHit]:
        """The ``n`` nearest memories to the query vector of ``texts``, nearest first."""
        key = (namespace, texts)
        if key not in self._dense:
            shape = QueryShape(text="", focus="", lexical=(), dense=texts)
            vector = query_vector(shape, self.embed)
            ids, matrix = self._matrices[namespace]
            sims = matrix @ vector if len(ids) else np.zeros(0, dtype=np.float32)
            order = np.argsort(-sims, kind="stable")[:WIDE_DENSE]
            self._dense[key] = [
                VectorHit(memory_id=ids[i], similarity=float(sims[i])) for i in order
            ]
        return self._dense[key][:n]

    def evidence(self, conv: Conversation, text: str, settings: RetrievalSettings) -> Evidence:
        """The evidence ``Searcher.evidence`` gathers for ``text`` under ``settings``."""
        return self.evidence_of(conv, weigh(query_shape(text, settings), self.embed), settings)

    def evidence_of(
        self, conv: Conversation, shape: QueryShape, settings: RetrievalSettings
    ) -> Evidence:
        """The evidence for a query already read (and weighed) as ``shape``."""
        ns = conv.namespace
        n_lexical = settings.lexical_candidates
        seen = [
            Seen(
                lexical=mix_scores(
                    [
                        (self.lexical(ns, part, n_lexical, settings.lexical_context), w)
                        for part, w in reading.lexical
                    ],
                    n_lexical,
                ),
                sessions=mix_scores(
                    [(self.sessions(ns, part), w) for part, w in reading.lexical],
                    SESSION_CANDIDATES,
                ),
                hits=self.dense(ns, reading.dense, settings.dense_candidates),
                weight=reading.weight,
            )
            for reading in shape.readings
        ]
        terms = query_terms(shape)
        view = self._lexical_view(ns)
        idf = view.idf(frozenset().union(*terms))
        found = supports(view, [s.lexical for s in seen], terms, idf, settings)
        main, *also = [replace(s, support=f) for s, f in zip(seen, found, strict=True)]
        return Evidence(
            lexical=main.lexical,
            sessions=main.sessions,
            hits=main.hits,
            weight=main.weight,
            support=main.support,
            periods=parse_periods(shape.focus, conv.now),
            also=tuple(also),
            terms=terms,
            echoes=shape.echoes,
            idf=idf,
        )


@dataclass
class Bench:
    """One view: its conversations (questions as asked) over its store's materials."""

    name: str
    conversations: list[Conversation]
    materials: Materials
    tuned: bool

    @property
    def store(self) -> Store:
        return self.materials.store

    @property
    def snapshots(self) -> dict[str, Snapshot]:
        return self.materials.snapshots


def prepare(work: Path, data: Path, kind: str, convs: Sequence[Conversation]) -> Materials:
    """Open (filling if needed) the store of one kind of memories and snapshot it."""
    store = open_store(work, store_name(data, kind), convs)
    return Materials(store, {c.namespace: snapshot(store, c.namespace) for c in convs})


def prepare_views(
    work: Path, data: Path, views: Mapping[str, View]
) -> tuple[dict[str, Materials], list[Bench]]:
    """Open one store per kind of memories and a `Bench` per view, in the order given; return
    the materials by kind (to save and close) and the benches."""
    materials: dict[str, Materials] = {}
    benches = []
    for name, view in views.items():
        if view.kind not in materials:
            materials[view.kind] = prepare(work, data, view.kind, view.conversations)
        benches.append(
            Bench(
                name=name,
                conversations=view.conversations,
                materials=materials[view.kind],
                tuned=view.tuned,
            )
        )
    return materials, benches
