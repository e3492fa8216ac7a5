"""The lexical cache: kept current from its source, saved beside the store, shared by processes.

A ``LexicalCache`` per test stands for a process; two over one directory are two processes on
one disk. ``Namespace`` is SQL as the cache sees it, with counters that move as the store's do.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from store.lexical import files
from store.lexical.cache import LexicalCache, Versions
from store.lexical.index import LexDoc, LexicalIndex
from store.lexical.view import LexicalView

QUERIES = ("dog park", "paris rainy trip", "squirrel", "tax forms", "violin", "bicycle tyre")


class Namespace:
    """SQL as the cache reads it, counting the reads; its counters move as the store's."""

    def __init__(self, docs: Sequence[LexDoc] = ()) -> None:
        self.active: dict[int, LexDoc] = {doc.memory_id: doc for doc in docs}
        self.stored: set[int] = set(self.active)
        self.next_id = max(self.stored, default=0) + 1
        self.revision, self.rewritten = 1, 0
        self.reads: dict[str, int] = {"all": 0, "after": 0, "of": 0, "versions": 0}
        self._lock = threading.Lock()

    # -- writes ----------------------------------------------------------------------------------

    def add(self, text: str, session: str | None = None) -> int:
        with self._lock:
            memory_id, self.next_id = self.next_id, self.next_id + 1
            self.active[memory_id] = _doc(memory_id, text, session)
            self.stored.add(memory_id)
            self.revision += 1
            return memory_id

    def edit(self, memory_id: int, text: str) -> None:
        doc = self.active[memory_id]
        self.active[memory_id] = replace(doc, text=text, version=doc.version + 1)
        self.revision, self.rewritten = self.revision + 1, self.rewritten + 1

    def retire(self, memory_id: int) -> None:
        """Archive: the row stays, inactive; only the revision moves."""
        del self.active[memory_id]
        self.revision += 1

    def forget(self, memory_id: int) -> None:
        self.active.pop(memory_id, None)
        self.stored.discard(memory_id)
        self.revision, self.rewritten = self.revision + 1, self.rewritten + 1

    # -- LexicalSource -----------------------------------------------------------------------

    def revisions(self, namespace: str) -> tuple[int, int]:
        return self.revision, self.rewritten

    def all_docs(self, namespace: str) -> Iterator[LexDoc]:
        self.reads["all"] += 1
        with self._lock:
            docs = sorted(self.active.values(), key=lambda d: d.memory_id)
        yield from docs

    def docs_after(self, namespace: str, after_id: int) -> list[LexDoc]:
        self.reads["after"] += 1
        with self._lock:
            return sorted(
                (d for d in self.active.values() if d.memory_id > after_id),
                key=lambda d: d.memory_id,
            )

    def docs_of(self, namespace: str, ids: Sequence[int]) -> list[LexDoc]:
        self.reads["of"] += 1
        return [self.active[i] for i in sorted(ids) if i in self.active]

    def versions(self, namespace: str) -> Versions:
        self.reads["versions"] += 1
        ids = sorted(self.active)
        return Versions(
            active_ids=np.array(ids, dtype=np.int64),
            active_versions=np.array([self.active[i].version for i in ids], dtype=np.int64),
            stored_ids=np.array(sorted(self.stored), dtype=np.int64),
        )


def _doc(memory_id: int, text: str, session: str | None = None) -> LexDoc:
    return LexDoc(memory_id=memory_id, text=text, session_key=session)


CORPUS = [
    _doc(1, "2023-05-01 I went running in the park with my dog", "s1"),
    _doc(2, "2023-05-01 The dog chased a squirrel up a tree", "s1"),
    _doc(3, "2023-06-12 We talked about the trip to Paris in 2024", "s2"),
    _doc(4, "2023-06-12 Paris was rainy but the museums were great", "s2"),
    _doc(5, "A note without a session about tax forms"),
]


def _same_as_a_fresh_build(view: LexicalView, namespace: Namespace) -> None:
    fresh = LexicalIndex.build(sorted(namespace.active.values(), key=lambda d: d.memory_id))
    for query in QUERIES:
        assert view.search(query, 10) == fresh.search(query, 10)  # the same floats
        assert view.search_sessions(query, 10) == fresh.search_sessions(query, 10)


def _files_holding(root: Path, needle: bytes) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


# -- in memory ---------------------------------------------------------------------------------


def test_get_first_time_builds_base() -> None:
    ns = Namespace(CORPUS)
    view = LexicalCache().get("ns", ns)
    assert (len(view), view.tail_size) == (5, 0)
    assert ns.reads == {"all": 1, "after": 0, "of": 0, "versions": 0}


def test_get_counters_unchanged_does_not_load() -> None:
    ns, cache = Namespace(CORPUS), LexicalCache()
    assert cache.get("ns", ns) is cache.get("ns", ns)
    assert ns.reads["all"] == 1
    assert ns.reads["after"] == 0


def test_get_new_memories_found_in_tail_without_rebuild() -> None:
    ns, cache = Namespace(CORPUS), LexicalCache()
    cache.get("ns", ns)
    new_id = ns.add("Bought a new bicycle in 2024")
    view = cache.get("ns", ns)
    assert list(view.search("bicycles", 10)) == [new_id]
    assert next(iter(view.search("paris bicycle", 10))) == new_id  # rarer term ranks first
    newer_id = ns.add("The bicycle has a flat tyre", "s2")
    view = cache.get("ns", ns)
    assert set(view.search("bicycle", 10)) == {new_id, newer_id}
    assert "s2" in view.search_sessions("tyre", 10)
    assert ns.reads == {"all": 1, "after": 2, "of": 0, "versions": 0}
    assert view.tail_size == 2


def test_get_retired_memory_keeps_the_index() -> None:
    ns, cache = Namespace(CORPUS), LexicalCache()
    first = cache.get("ns", ns)
    ns.retire(2)  # search drops inactive memories itself: no rebuild needed
    assert cache.get("ns", ns).base is first.base
    assert ns.reads["versions"] == 0


def test_get_edit_marks_old_text_dead_and_indexes_the_new_one() -> None:
    ns, cache = Namespace(CORPUS), LexicalCache()
    cache.get("ns", ns)
    ns.edit(2, "The dog learned the violin")
    view = cache.get("ns", ns)
    assert list(view.search("squirrel", 10)) == []
    assert list(view.search("violin", 10)) == [2]
    assert (view.dead_count, view.tail_size, cache.builds, cache.merges) == (1, 1, 1, 0)
    assert ns.reads == {"all": 1, "after": 0, "of": 1, "versions": 1}


def test_get_forgotten_memory_merged_out_at_once() -> None:
    ns, cache = Namespace(CORPUS), LexicalCache()
    cache.get("ns", ns)
    ns.forget(2)
    view = cache.get("ns", ns)
    assert (view.dead_count, cache.merges) == (0, 1)
    assert "squirrel" not in view.base.vocab  # the word itself is gone, not only its document
    _same_as_a_fresh_build(view, ns)


def test_get_tail_beyond_max_tail_merges_without_reading_everything_again() -> None:
    ns, cache = Namespace(CORPUS), LexicalCache(max_tail=2)
    cache.get("ns", ns)
    ns.add("first extra memory")
    ns.add("second extra memory")
    assert cache.get("ns", ns).tail_size == 2
    ns.add("third extra memory")
    view = cache.get("ns", ns)
    assert (view.tail_size, len(view), cache.builds, cache.merges) == (0, 8, 1, 1)
    assert len(view.search("extra", 10)) == 3
    assert ns.reads["all"] == 1
    _same_as_a_fresh_build(view, ns)
    ns.add("fourth extra memory")
    assert cache.get("ns", ns).tail_size == 1


def test_get_empty_namespace_then_writes_uses_tail() -> None:
    ns, cache = Namespace(), LexicalCache()
    assert cache.get("ns", ns).search("anything", 5) == {}
    ns.add("hello world")
    assert list(cache.get("ns", ns).search("world", 5)) == [1]
    assert ns.reads["all"] == 1


def test_invalidate_forces_a_new_load() -> None:
    ns, cache = Namespace(CORPUS), LexicalCache()
    cache.get("ns", ns)
    cache.invalidate("ns")
    cache.get("ns", ns)
    assert ns.reads["all"] == 2


def test_get_beyond_max_namespaces_evicts_least_recently_used() -> None:
    namespaces = {name: Namespace(CORPUS) for name in ("a", "b", "c")}
    cache = LexicalCache(max_namespaces=2)
    for name in ("a", "b", "a", "c"):  # a is more recent than b when c comes
        cache.get(name, namespaces[name])
    assert len(cache) == 2
    for name in ("a", "b", "c"):
        cache.get(name, namespaces[name])
    assert [namespaces[n].reads["all"] for n in ("a", "b", "c")] == [1, 2, 2]


def test_get_many_threads_searching_and_writing_stay_consistent(tmp_path: Path) -> None:
    ns, cache = Namespace(CORPUS), LexicalCache(tmp_path, max_tail=5)
    errors: list[BaseException] = []

    def writer() -> None:
        for i in range(30):
            ns.add(f"concurrent note number{i}")

    def reader() -> None:
        try:
            for _ in range(60):
                view = cache.get("ns", ns)
                assert all(0 < s <= 1.0 for s in view.search("concurrent note", 50).values())
                assert view.search("dog", 5)
        except BaseException as exc:  # noqa: BLE001 -- reported by the main thread
            errors.append(exc)

    threads = [
        threading.Thread(target=writer),
        *(threading.Thread(target=reader) for _ in range(4)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    final = cache.get("ns", ns)
    assert len(final.search("concurrent", 100)) == 30
    assert len(final) == 35


def test_init_invalid_limits_raise() -> None:
    with pytest.raises(ValueError, match="max_namespaces"):
        LexicalCache(max_namespaces=0)


# -- saved beside the store --------------------------------------------------------------------


def test_saved_index_survives_restart_without_a_build(tmp_path: Path) -> None:
    ns = Namespace(CORPUS)
    before = LexicalCache(tmp_path).get("ns", ns)
    restarted = LexicalCache(tmp_path)
    after = restarted.get("ns", ns)
    assert (restarted.builds, ns.reads["all"]) == (0, 1)
    for query in QUERIES:
        assert after.search(query, 10) == before.search(query, 10)
        assert after.search_sessions(query, 10) == before.search_sessions(query, 10)
    assert isinstance(after.base.memory_part.postings.data.base, np.memmap)  # mapped, not read


def test_saved_index_brought_current_by_writes_made_while_down(tmp_path: Path) -> None:
    ns = Namespace(CORPUS)
    LexicalCache(tmp_path).get("ns", ns)
    # While no process runs: new memories, an edit, an archive, a forget.
    added = ns.add("Bought a new bicycle, flat tyre already", "s2")
    ns.edit(1, "I practised the violin in the park")
    ns.retire(3)
    ns.forget(2)
    restarted = LexicalCache(tmp_path)
    view = restarted.get("ns", ns)
    assert restarted.builds == 0
    assert list(view.search("bicycle", 10)) == [added]
    assert list(view.search("violin", 10)) == [1]
    assert list(view.search("running", 10)) == []  # memory 1's old text
    assert list(view.search("squirrel", 10)) == []  # forgotten
    assert ns.reads["all"] == 1  # the first process's build only


def test_caught_up_index_agrees_with_a_fresh_build(tmp_path: Path) -> None:
    ns = Namespace(CORPUS)
    LexicalCache(tmp_path).get("ns", ns)
    ns.add("Bought a new bicycle, flat tyre already", "s2")
    ns.edit(4, "Paris was sunny and the violin concert great")
    restarted = LexicalCache(tmp_path, max_tail=0)  # merge whatever changed
    view = restarted.get("ns", ns)
    assert (restarted.builds, restarted.merges, view.tail_size, view.dead_count) == (0, 1, 0, 0)
    _same_as_a_fresh_build(view, ns)
    # And the snapshot that merge saved, mapped by a third process, too.
    third = LexicalCache(tmp_path)
    _same_as_a_fresh_build(third.get("ns", ns), ns)
    assert third.builds == third.merges == 0


def test_forget_leaves_no_bytes_in_the_saved_files(tmp_path: Path) -> None:
    ns = Namespace([*CORPUS, _doc(6, "Quillon Vantabrisk hides the key", "s9")])
    api, cli = LexicalCache(tmp_path), LexicalCache(tmp_path)
    assert list(api.get("ns", ns).search("vantabrisk", 5)) == [6]
    assert _files_holding(tmp_path, b"vantabrisk")
    ns.forget(6)
    cli.erase("ns", ns)  # the process that forgot (`secretary forget`)
    assert _files_holding(tmp_path, b"vantabrisk") == []
    assert _files_holding(tmp_path, b"quillon") == []
    assert _files_holding(tmp_path, b"s9") == []  # its session, which only it had
    assert list(api.get("ns", ns).search("vantabrisk", 5)) == []  # the other catches up


def test_forget_by_another_process_purged_by_the_next_search(tmp_path: Path) -> None:
    ns = Namespace([*CORPUS, _doc(6, "Quillon Vantabrisk hides the key")])
    cache = LexicalCache(tmp_path)
    cache.get("ns", ns)
    ns.forget(6)  # a process with another directory (or none) forgot it
    cache.get("ns", ns)
    assert _files_holding(tmp_path, b"vantabrisk") == []


def test_save_not_published_after_a_forget_since_the_build(tmp_path: Path) -> None:
    index = LexicalIndex.build(CORPUS)
    directory = files.namespace_dir(tmp_path, "ns")
    saved = files.save(
        directory, index, namespace="ns", revision=3, rewritten=1, still_current=lambda: False
    )
    assert saved is None
    assert files.snapshots(directory) == []
    assert list(directory.iterdir()) == [directory / ".lock"]  # no temporary left either


def test_second_process_waits_for_the_first_build_and_loads_it(tmp_path: Path) -> None:
    ns = Namespace(CORPUS)
    directory = files.namespace_dir(tmp_path, "ns")
    second = LexicalCache(tmp_path)
    views: list[LexicalView] = []
    with files.locked(directory):  # the first process is building
        waiting = threading.Thread(target=lambda: views.append(second.get("ns", ns)))
        waiting.start()
        files.save(
            directory,
            LexicalIndex.build(CORPUS),
            namespace="ns",
            revision=ns.revision,
            rewritten=ns.rewritten,
            still_current=lambda: True,
            holding_lock=True,
        )
    waiting.join()
    assert len(views[0]) == 5
    assert (second.builds, ns.reads["all"]) == (0, 0)


def test_snapshot_of_another_tokenizer_is_built_anew(tmp_path: Path) -> None:
    ns = Namespace(CORPUS)
    LexicalCache(tmp_path).get("ns", ns)
    (snapshot,) = files.snapshots(files.namespace_dir(tmp_path, "ns"))
    meta = snapshot.path / "meta.json"
    meta.write_text(meta.read_text().replace('"tokenizer": "', '"tokenizer": "older-'))
    restarted = LexicalCache(tmp_path)
    assert len(restarted.get("ns", ns)) == 5
    assert restarted.builds == 1
    (newer,) = files.snapshots(files.namespace_dir(tmp_path, "ns"))
    assert newer.path != snapshot.path
    _restart_loads(tmp_path, ns)


def test_damaged_snapshot_is_built_anew(tmp_path: Path) -> None:
    ns = Namespace(CORPUS)
    LexicalCache(tmp_path).get("ns", ns)
    (snapshot,) = files.snapshots(files.namespace_dir(tmp_path, "ns"))
    (snapshot.path / "memories.data.npy").write_bytes(b"\x93NUMPY garbage")
    restarted = LexicalCache(tmp_path)
    assert list(restarted.get("ns", ns).search("squirrel", 5)) == [2]
    assert restarted.builds == 1
    _restart_loads(tmp_path, ns)


@pytest.mark.parametrize(
    ("name", "damage"),
    [
        ("meta.json", b'{"format'),
        ("meta.json", b"\xff\xfe"),
        ("meta.json", b"[1, 2]"),
        ("keys.npy", b""),
    ],
)
def test_snapshot_with_a_cut_short_file_is_built_anew(
    tmp_path: Path, name: str, damage: bytes
) -> None:
    ns = Namespace(CORPUS)
    LexicalCache(tmp_path).get("ns", ns)
    (snapshot,) = files.snapshots(files.namespace_dir(tmp_path, "ns"))
    (snapshot.path / name).write_bytes(damage)
    restarted = LexicalCache(tmp_path)
    assert list(restarted.get("ns", ns).search("squirrel", 5)) == [2]
    assert restarted.builds == 1
    _restart_loads(tmp_path, ns)


def test_snapshot_ahead_of_the_database_is_ignored(tmp_path: Path) -> None:
    ns = Namespace(CORPUS)
    ns.revision = 50
    LexicalCache(tmp_path).get("ns", ns)
    replaced = Namespace([_doc(1, "an entirely different store")])  # same directory
    restarted = LexicalCache(tmp_path)
    assert list(restarted.get("ns", replaced).search("different", 5)) == [1]
    assert restarted.builds == 1
    _restart_loads(tmp_path, replaced)


def _restart_loads(directory: Path, ns: Namespace) -> None:
    """The snapshot the rebuild saved took the unusable one's place."""
    restarted = LexicalCache(directory)
    restarted.get("ns", ns)
    assert restarted.builds == 0


def test_namespaces_are_kept_apart_on_disk(tmp_path: Path) -> None:
    first, second = Namespace(CORPUS), Namespace([_doc(1, "only the violin")])
    LexicalCache(tmp_path).get("a", first)
    LexicalCache(tmp_path).get("b/../a", second)  # any text is a namespace
    restarted = LexicalCache(tmp_path)
    assert list(restarted.get("a", first).search("violin dog", 5)) == [1, 2]
    assert list(restarted.get("b/../a", second).search("violin dog", 5)) == [1]
    assert restarted.builds == 0
