"""The JSON shape of a memory, shared by the API and the CLI's ``search --json``.

One function builds it so that both print exactly the same fields; internal bookkeeping (hashes,
timeline links, row versions) stays out of it.
"""

from __future__ import annotations

from typing import Any

from store.search.searcher import Hit
from store.views import MemoryView, NamespaceView, RelationView


def memory_json(memory: MemoryView, *, detail: bool = False) -> dict[str, Any]:
    """Given a memory, return its public JSON dict; ``detail`` adds status, what replaced it
    and recall stats."""
    view: dict[str, Any] = {
        "id": memory.id,
        "external_id": memory.external_id,
        "content": memory.content,
        "type": memory.type,
        "tags": list(memory.tags),
        "importance": memory.importance,
        "event_time": memory.event_time.isoformat(),
        "session_id": memory.session_id,
        "metadata": dict(memory.metadata),
    }
    if detail:
        view.update(
            namespace=memory.namespace,
            status=memory.status,
            version=memory.version,  # send it back as If-Match to change only this version
            # What took a superseded or merged memory's place (None for others).
            replaced_by=memory.replaced_by_id,
            pinned=memory.pinned,
            source=memory.source,
            base_importance=memory.base_importance,
            access_count=memory.access_count,
            last_accessed=memory.last_accessed.isoformat() if memory.last_accessed else None,
            created_at=memory.created_at.isoformat(),
            updated_at=memory.updated_at.isoformat(),
        )
    return view


def hit_json(hit: Hit) -> dict[str, Any]:
    """Given a search hit, return the memory's view plus its score, breakdown and route."""
    return {
        **memory_json(hit.memory),
        "score": hit.score,
        "breakdown": hit.breakdown.as_dict(),
        "via": hit.via,
    }


def relation_json(relation: RelationView) -> dict[str, Any]:
    """Given a relation seen from one memory, return it with the memory at the other end."""
    return {
        "id": relation.id,
        "direction": relation.direction,
        "other_id": relation.other_id,
        "other_type": relation.other_type,
        "other_status": relation.other_status,
        "other_content": relation.other_content,
        "type": relation.type,
        "strength": relation.strength,
        "description": relation.description,
        "created_at": relation.created_at.isoformat(),
    }


def namespace_json(view: NamespaceView) -> dict[str, Any]:
    return {
        "namespace": view.namespace,
        "memories": view.memories,
        "retired": view.retired,
        "logs": view.logs,
    }
