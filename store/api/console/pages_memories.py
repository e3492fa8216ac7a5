"""Memories: search with each hit's score breakdown, the listing with filters, one memory with
its history, relations and timeline neighbours; edit, delete and forget (asked twice).

Each action calls the store as the API's route does: ``Store.edit`` (PATCH), ``Store.delete``
(DELETE), ``Store.forget`` (POST /v1/forget, its dry run first); a search is
``store.requests.search_request`` and ``Store.search`` (GET /v1/search).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request, Response

from store.api.console.web import (
    PageNotFound,
    check_namespace,
    checked_form,
    console,
    namespaces_of,
    page,
    said,
    see_other,
    see_other_saying,
    viewer,
)
from store.api.deps import MemoryId
from store.changes import plural
from store.errors import NotFound, ValidationFailed
from store.listing import list_memories, list_request
from store.requests import search_request
from store.vector.index import VectorIndexError
from store.views import MemoryView
from store.write.edits import NotActive, VersionConflict
from store.write.forget import ForgetSelection

router = APIRouter()
SEARCH_K = 20
PAGE = 50
SEARCH_ACTIVE = (
    "a search finds active memories only: empty the search box to list the others by status"
)


def _absent(stored: list[str], namespace: str) -> list[str]:
    """Why an empty page is empty when its namespace holds no memory at all (a misspelt
    name looks like an empty namespace otherwise)."""
    if namespace in stored:
        return []
    known = ", ".join(stored[:20]) + (" ..." if len(stored) > 20 else "") or "none"
    return [f"namespace {namespace!r} holds no memories (namespaces with memories: {known})"]


def _filters(request: Request) -> dict[str, str]:
    names = ("q", "type", "tag", "since", "until", "status", "cursor")
    return {n: request.query_params.get(n, "").strip() for n in names}


@router.get("/ui/memories")
def memories(request: Request, namespace: str | None = None) -> Response:
    here, who = console(request), viewer(request)
    choices = namespaces_of(request, who)
    ns = check_namespace(who, namespace or choices[0])
    wanted = _filters(request)

    def one(name: str) -> tuple[str, ...]:
        return (wanted[name],) if wanted[name] else ()

    hits: list[Any] | None = None
    degraded: tuple[str, ...] = ()  # why a search's hits may be fewer or worse than usual
    listed: list[MemoryView] = []
    next_cursor, problems = None, []
    try:
        if wanted["q"] and wanted["status"] not in ("", "active"):
            problems = [SEARCH_ACTIVE]
        elif wanted["q"]:
            search = search_request(
                namespace=ns,
                query=wanted["q"],
                k=SEARCH_K,
                types=one("type"),
                tags=one("tag"),
                since=wanted["since"] or None,
                until=wanted["until"] or None,
                reinforce=False,  # looking at memories is not an agent recalling them
            )
            result = here.store.search(search, now=here.clock())
            hits, degraded = list(result.hits), result.degraded
        else:
            listing = list_request(
                namespace=ns,
                types=one("type"),
                tags=one("tag"),
                statuses=one("status"),
                since=wanted["since"] or None,
                until=wanted["until"] or None,
                cursor=wanted["cursor"] or None,
                limit=PAGE,
            )
            found = list_memories(here.store.db, listing)
            listed, next_cursor = found.page.memories, found.next_cursor
    except ValidationFailed as exc:
        problems = [f"{where}: {what}" for where, what in exc.problems]
    except VectorIndexError as exc:
        problems = [f"the vector index is unavailable: {exc}"]
    if not listed and not hits and not problems:
        visible = [n for n in here.store.db.memories.namespaces() if who.allows(n)]
        problems = _absent(visible, ns)  # never another key's namespaces
    if ns not in choices:
        choices = [ns, *choices]  # the picker shows what is shown
    more = None
    if next_cursor is not None:
        more = urlencode({**{k: v for k, v in wanted.items() if v}, "namespace": ns}) + (
            "&" + urlencode({"cursor": next_cursor})
        )
    context = {
        "title": "Memories",
        "namespace": ns,
        "namespaces": choices,
        "wanted": wanted,
        "hits": hits,
        "degraded": degraded,
        "listed": listed,
        "more": more,
        "problems": problems,
        "message": said(request),
    }
    return page(request, "memories.html", context)


def _memory(request: Request, namespace: str, memory_id: int) -> MemoryView:
    """The memory if the viewer may see it. Raise PageNotFound otherwise (as if missing)."""
    check_namespace(viewer(request), namespace)
    found = console(request).store.db.memories.get(namespace, memory_id)
    if found is None:
        raise PageNotFound(f"memory {memory_id} does not exist")
    return found


def _versions(request: Request, memory: MemoryView) -> list[dict[str, Any]]:
    """Every record that touched the memory, oldest first, with the version it left."""
    records = console(request).store.db.records
    out = []
    for record in records.history(memory.namespace, memory.id):
        _, operations = records.get(record.id)
        after = [
            op.after
            for op in operations
            if op.target_kind == "memory" and op.target_id == memory.id and op.after is not None
        ]
        image = after[-1] if after else None
        out.append(
            {
                "record": record,
                "version": image.get("version") if image else None,
                "content": image.get("content") if image else None,
                "status": image.get("status") if image else "removed",
            }
        )
    return out


@router.get("/ui/memories/{namespace}/{memory_id}")
def memory_page(request: Request, namespace: str, memory_id: MemoryId) -> Response:
    memory = _memory(request, namespace, memory_id)
    return _memory_page(request, memory, message=said(request))


def _memory_page(
    request: Request,
    memory: MemoryView,
    *,
    message: str | None = None,
    error: str | None = None,
    status_code: int = 200,
) -> Response:
    db = console(request).store.db
    near = [i for i in (memory.prev_id, memory.next_id) if i is not None]
    neighbours = {m.id: m for m in db.memories.many(memory.namespace, near)}
    context = {
        "title": f"Memory #{memory.id}",
        "memory": memory,
        "versions": _versions(request, memory),
        "relations": db.listing.relations(memory.namespace, memory.id),
        "prev": neighbours.get(memory.prev_id) if memory.prev_id else None,
        "next": neighbours.get(memory.next_id) if memory.next_id else None,
        "replaced_by": memory.replaced_by_id,
        "message": message,
        "error": error,
    }
    return page(request, "memory.html", context, status_code=status_code)


NO_CHANGE = "nothing changed: the form was saved as it was shown"


def _by(request: Request) -> str:
    return f"console:{viewer(request).name}"


def _changes(memory: MemoryView, form: dict[str, str]) -> dict[str, Any]:
    """The fields the edit form changed (what PATCH would be sent)."""
    # Every memory has a type, an importance and a time: a field emptied is refused, not
    # taken for "unchanged".
    emptied = [name for name in _REQUIRED if name in form and not form[name].strip()]
    if emptied:
        raise ValidationFailed([(n, "cannot be empty: every memory has one") for n in emptied])
    changes: dict[str, Any] = {}
    if "content" in form and form["content"] != memory.content:
        changes["content"] = form["content"]
    if form.get("type") and form["type"] != memory.type:
        changes["type"] = form["type"]
    # The form shows the tags joined by ", ": left as shown, they are unchanged (a tag holding
    # a comma would otherwise come back split in two).
    if "tags" in form and form["tags"].strip() != ", ".join(memory.tags):
        tags = [t.strip() for t in form["tags"].split(",") if t.strip()]
        if tuple(tags) != memory.tags:
            changes["tags"] = tags
    importance = form.get("importance", "")
    if importance and importance != str(memory.importance):
        changes["importance"] = int(importance) if importance.isdigit() else importance
    pinned = form.get("pinned") == "yes"
    if pinned != memory.pinned:
        changes["pinned"] = pinned
    when = form.get("event_time", "").strip()
    if when and when != memory.event_time.isoformat():
        changes["event_time"] = when
    if "metadata" in form:
        text = form["metadata"].strip()
        metadata = _json_object(text) if text else {}  # emptied: no metadata
        if metadata != dict(memory.metadata):
            changes["metadata"] = metadata
    return changes


_REQUIRED = ("type", "importance", "event_time")


def _json_object(text: str) -> dict[str, Any]:
    """Given the metadata field's text, return the object. Raise ValidationFailed if it is not
    a JSON object."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValidationFailed([("metadata", f"not JSON: {exc.msg}")]) from None
    if not isinstance(value, dict):
        raise ValidationFailed([("metadata", "must be a JSON object")])
    return value


def _version(form: dict[str, str]) -> int | None:
    text = form.get("version", "")
    return int(text) if text.isdigit() else None


@router.post("/ui/memories/{namespace}/{memory_id}/edit")
async def edit(request: Request, namespace: str, memory_id: MemoryId) -> Response:
    form = await checked_form(request)
    memory = _memory(request, namespace, memory_id)
    here = console(request)
    try:
        changes = _changes(memory, form)
        if not changes:  # saved as it was shown: nothing to record
            return see_other_saying(request, f"/ui/memories/{namespace}/{memory_id}", NO_CHANGE)
        done = here.store.edit(
            namespace,
            memory_id,
            changes,
            now=here.clock(),
            expected_version=_version(form),
            by=_by(request),
        )
    except ValidationFailed as exc:
        what = "; ".join(f"{where}: {what}" for where, what in exc.problems)
        return _memory_page(request, memory, error=what, status_code=422)
    except (NotActive, VersionConflict) as exc:
        return _memory_page(request, memory, error=str(exc), status_code=409)
    told = f"saved as record #{done.record_id}" if done.record_id else NO_CHANGE
    return see_other_saying(request, f"/ui/memories/{namespace}/{memory_id}", told)


@router.post("/ui/memories/{namespace}/{memory_id}/delete")
async def delete(request: Request, namespace: str, memory_id: MemoryId) -> Response:
    form = await checked_form(request)
    memory = _memory(request, namespace, memory_id)
    here = console(request)
    try:
        done = here.store.delete(
            namespace,
            memory_id,
            now=here.clock(),
            expected_version=_version(form),
            by=_by(request),
        )
    except (NotActive, VersionConflict) as exc:
        return _memory_page(request, memory, error=str(exc), status_code=409)
    told = f"deleted (record #{done.record_id}; undo it from its run page)"
    return see_other_saying(request, f"/ui/memories/{namespace}/{memory_id}", told)


def _selection(memory_id: int, form: dict[str, str] | None = None) -> ForgetSelection:
    return ForgetSelection(ids=(memory_id,), logs=bool(form and form.get("logs") == "yes"))


@router.get("/ui/memories/{namespace}/{memory_id}/forget")
def forget_preview(request: Request, namespace: str, memory_id: MemoryId) -> Response:
    memory = _memory(request, namespace, memory_id)
    here = console(request)
    plan = here.store.forget(
        namespace, _selection(memory_id), now=here.clock(), by=_by(request), dry_run=True
    ).plan
    context = {"title": f"Forget memory #{memory_id}?", "memory": memory, "plan": plan}
    return page(request, "forget.html", context)


@router.post("/ui/memories/{namespace}/{memory_id}/forget")
async def forget(request: Request, namespace: str, memory_id: MemoryId) -> Response:
    form = await checked_form(request)
    _memory(request, namespace, memory_id)
    if form.get("confirm") != "irreversible":
        return see_other(f"/ui/memories/{namespace}/{memory_id}/forget")
    here = console(request)
    try:
        result = here.store.forget(
            namespace, _selection(memory_id, form), now=here.clock(), by=_by(request)
        )
    except NotFound:
        raise PageNotFound(f"memory {memory_id} does not exist") from None
    forgot = plural(len(result.plan.memories), "memory", "memories")
    told = f"forgot {forgot} for good (record #{result.record_id})"
    return see_other_saying(request, "/ui/memories", told, namespace=namespace)
