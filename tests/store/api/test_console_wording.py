"""What the console says of a run: honest outcomes, human labels, and a dream's progress."""

from __future__ import annotations

import re
from pathlib import Path
from typing import NoReturn

import pytest
from fastapi.testclient import TestClient

from store.api.app import create_app
from store.kinds import Outcome
from store.operations import CreateRelation
from store.service import Store
from store.vector.index import VectorIndexError
from store.write.forget import ForgetSelection
from store.write.record_info import RecordInfo
from store.write.undo import undo as undo_record
from tests.store.api.test_console import KEY_A, KEYS, NOW, login, open_store


def dropped_everything(store: Store) -> int:
    """A run that spent tokens and dropped all ten items the model returned."""
    dropped = [{"item": f"memory {n}", "reason": "cites no log line"} for n in range(10)]
    info = RecordInfo(
        outcome=Outcome.NOTHING, tokens_in=800, tokens_out=27, stats={"dropped": dropped}
    )
    record = store.db.writer.apply("a", "extractor", (), now=NOW, info=info).record_id
    assert record is not None
    return record


def test_console_run_that_dropped_all_it_got_is_a_warning_not_applied(tmp_path: Path) -> None:
    store = open_store(tmp_path / "open")
    try:
        record = dropped_everything(store)
        with TestClient(create_app(store, clock=lambda: NOW, start_workers=False)) as web:
            overnight = web.get("/ui/overnight").text
            run = web.get(f"/ui/runs/{record}").text
    finally:
        store.close()
    row = overnight.split(f'data-record="{record}"')[1].split("</tr>")[0]
    assert '<span class="badge warn">applied nothing</span>' in row
    assert 'class="badge applied"' not in row
    assert "827 /" in row  # tokens
    assert "10 / 0" in row  # dropped / quarantined
    assert '<span class="badge warn">applied nothing</span> dropped 10 items</dd>' in run


def test_console_change_chips_read_as_words(tmp_path: Path) -> None:
    store = open_store(tmp_path / "open")
    try:
        ids = sorted(store.db.memories.index_state("a"))
        relate = CreateRelation(source=ids[0], target=ids[1], type="related_to", strength=0.5)
        record = store.db.writer.apply("a", "linker", [relate], now=NOW).record_id
        with TestClient(create_app(store, clock=lambda: NOW, start_workers=False)) as web:
            run = web.get(f"/ui/runs/{record}").text
    finally:
        store.close()
    assert '<span class="chip">1 relation created</span>' in run
    assert ">relations_created<" not in run  # (a class name may keep it)
    assert "related to 0.50" in run


def test_console_dream_progress_answers_its_runs_so_far_to_its_viewer_only(
    tmp_path: Path,
) -> None:
    store = open_store(tmp_path / "keyed", KEYS)
    requests = store.db.dream_requests
    mine = requests.enqueue(
        namespace="a", jobs=(), retry_quarantined=False, requested_by="t", now=NOW
    )
    other = requests.enqueue(
        namespace="b", jobs=(), retry_quarantined=False, requested_by="t", now=NOW
    )
    assert requests.claim(picker="daemon", now=NOW) is not None
    run = {"job": "extractor", "namespace": "a", "status": "nothing", "record_id": None}
    requests.progress(mine, picker="daemon", outcomes=[{**run, "message": "applied nothing"}])
    try:
        with TestClient(create_app(store, clock=lambda: NOW, start_workers=False)) as web:
            login(web, KEY_A)
            shown = web.get(f"/ui/status/dreams/{mine}")
            hidden = web.get(f"/ui/status/dreams/{other}")
            page = web.get("/ui/status").text
    finally:
        store.close()
    assert shown.json() == {
        "id": mine,
        "status": "running",
        "finished": False,
        "error": None,
        "runs": [
            {
                "job": "extractor",
                "status": "nothing",
                "record_id": None,
                "message": "applied nothing",
                "tone": "warn",
            }
        ],
    }
    assert hidden.status_code == 404
    assert f'data-dream="{mine}" data-following' in page
    assert '<script src="/ui/static/dream.js" defer></script>' in page


def test_console_search_shows_each_hits_date_and_relevance_and_why_it_is_degraded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An operator searching from the console sees what an agent sees: each hit's relevance
    (the score that means the same in any search) and date, and why a search answered less
    than usual (here the vector index is down: hits from the words alone)."""
    store = open_store(tmp_path / "open")
    try:
        with TestClient(create_app(store, clock=lambda: NOW, start_workers=False)) as web:
            healthy = web.get("/ui/memories?namespace=a&q=tea").text

            def down(*args: object, **kwargs: object) -> NoReturn:
                raise VectorIndexError("connection refused")

            monkeypatch.setattr(store.index, "query", down)
            degraded = web.get("/ui/memories?namespace=a&q=tea").text
    finally:
        store.close()
    hit = healthy.split('class="hit-head"')[1].split("</div>")[0]
    assert re.search(r"relevance 0\.\d\d", hit), hit
    assert NOW.strftime("%Y-%m-%d") in hit
    assert "Search degraded" not in healthy
    assert "Search degraded: vector index unavailable: connection refused" in degraded
    assert "a: I like tea" in degraded  # the words still found it


def test_console_run_says_undone_only_by_the_record_that_undid_it(tmp_path: Path) -> None:
    # The note after an undo rides in the address (?undone_by=N): a link made elsewhere, or
    # one naming another record, must not tell of an undo that did not happen.
    store = open_store(tmp_path / "open")
    try:
        ids = sorted(store.db.memories.index_state("a"))
        relate = CreateRelation(source=ids[0], target=ids[1], type="thematic", strength=0.5)
        record = store.db.writer.apply("a", "linker", [relate], now=NOW).record_id
        with TestClient(create_app(store, clock=lambda: NOW, start_workers=False)) as web:
            forged = web.get(f"/ui/runs/{record}?undone_by=1").text
            undo = undo_record(store.db.writer, record, now=NOW).record_id
            told = web.get(f"/ui/runs/{record}?undone_by={undo}").text
    finally:
        store.close()
    assert "Undone: record" not in forged
    assert f'Undone: record <a href="/ui/runs/{undo}">#{undo}</a> put back' in told


def test_console_run_with_a_memory_since_forgotten_says_its_text_is_not_kept(
    tmp_path: Path,
) -> None:
    store = open_store(tmp_path / "open")
    try:
        ids = sorted(store.db.memories.index_state("a"))
        relate = CreateRelation(source=ids[0], target=ids[1], type="thematic", strength=0.5)
        record = store.db.writer.apply("a", "linker", [relate], now=NOW).record_id
        store.forget("a", ForgetSelection(ids=(ids[1],)), now=NOW, by="test")
        with TestClient(create_app(store, clock=lambda: NOW, start_workers=False)) as web:
            run = web.get(f"/ui/runs/{record}").text
    finally:
        store.close()
    ends = run.split('class="entry kind-relations_created"')[1].split('class="entry ')[0]
    assert f"#{ids[1]}</a> (text not kept: purged or forgotten)" in ends
    assert "None" not in ends


def test_console_forget_run_says_what_it_erased_once(tmp_path: Path) -> None:
    store = open_store(tmp_path / "open")
    try:
        first = min(store.db.memories.index_state("a"))
        forgot = store.forget("a", ForgetSelection(ids=(first,)), now=NOW, by="test")
        with TestClient(create_app(store, clock=lambda: NOW, start_workers=False)) as web:
            run = web.get(f"/ui/runs/{forgot.record_id}").text
    finally:
        store.close()
    outcome = run.split("<dt>Outcome</dt>")[1].split("</dd>")[0]
    assert outcome == (
        f'<dd><span class="badge erased">erased</span> 1 memory (#{first}); 1 relinked'
    )
