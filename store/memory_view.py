"""The JSON shape of a memory, shared by the API and the CLI's ``search --json``.

One function builds it so that both print exactly the same fields; internal bookkeeping (hashes,
timeline links, row versions) stays out of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from store.models import Memory

if TYPE_CHECKING:
    from store.search import Hit


def memory_json(memory: Memory, *, detail: bool = False) -> dict[str, Any]:
    """Given a memory row, return its public JSON dict; ``detail`` adds status and recall stats."""
    view: dict[str, Any] = {
        "id": memory.id,
        "external_id": memory.external_id,
        "content": memory.content,
        "type": memory.type,
        "tags": list(memory.tags or ()),
        "importance": memory.importance,
        "event_time": memory.event_time.isoformat(),
        "session_id": memory.session_id,
        "metadata": dict(memory.metadata_ or {}),
    }
    if detail:
        view.update(
            namespace=memory.namespace,
            status=memory.status,
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
