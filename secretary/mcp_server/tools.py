"""The MCP tools: search, add, get, list, update, delete and forget memories (and conversation
log lines), and list the caller's namespaces. Each tool is one call of the Python client; what
the API refuses comes back as a tool error with the API's message and problems, never as a
crash.

``add_tools(server, connect)`` registers them; ``connect(ctx)`` returns the client for the
caller of this request (the front end decides whose key that is).
"""

import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any, TypeVar, cast

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from secretary.client.aio import AsyncSecretaryClient
from secretary.client.calls import (
    Filters,
    ForgetFilter,
    ListOptions,
    LogFilter,
    MemoryChanges,
    SearchOptions,
)
from secretary.client.errors import SecretaryError
from secretary.client.models import (
    Deleted,
    Edited,
    ForgetResult,
    Memory,
    Namespace,
    Page,
    SearchResult,
)

Connect = Callable[[Context], AsyncSecretaryClient]
ToolFn = TypeVar("ToolFn", bound=Callable[..., Any])

READS = ToolAnnotations(read_only_hint=True, open_world_hint=False)
WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
DESTROYS = ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False)

NamespaceArg = Annotated[
    str | None,
    Field(
        description="The namespace (one agent's or user's memories). Leave it out unless your "
        "key has several namespaces; list_namespaces shows them."
    ),
]
MemoryId = Annotated[int, Field(ge=1, description="The memory's id.")]
Version = Annotated[
    int | None,
    Field(
        ge=1,
        description="The memory's version as you last read it (get_memory, list_memories): the "
        "change applies only if nobody changed the memory since, else it fails with 409. Leave "
        "it out to change whatever version is current.",
    ),
]
Types = Annotated[
    list[str] | None,
    Field(
        description="Only memories of these types: event, fact, preference, "
        "interaction_summary, tool_experience, or your own."
    ),
]
Tags = Annotated[list[str] | None, Field(description="Only memories carrying all these tags.")]
Since = Annotated[
    str | None,
    Field(description="Only memories whose event time is at or after this ISO-8601 time."),
]
Until = Annotated[
    str | None, Field(description="Only memories whose event time is before this ISO-8601 time.")
]
Metadata = Annotated[
    dict[str, Any] | None, Field(description="Free JSON object stored with the memory.")
]


@contextmanager
def refusals() -> Iterator[None]:
    """Turn the API's refusals into tool errors that carry its message and problems."""
    try:
        yield
    except SecretaryError as exc:
        raise ToolError(str(exc)) from None


def _choose(
    chosen: Filters,
    types: list[str] | None,
    tags: list[str] | None,
    since: str | None,
    until: str | None,
) -> None:
    """Add the filters given to ``chosen`` (search's, list's or forget's options)."""
    if types:
        chosen["types"] = types
    if tags:
        chosen["tags"] = tags
    if since:
        chosen["since"] = since
    if until:
        chosen["until"] = until


def _tool(server: MCPServer, hints: ToolAnnotations) -> Callable[[ToolFn], ToolFn]:
    """Register a tool described by its docstring, without the source's indentation."""

    def register(fn: ToolFn) -> ToolFn:
        server.add_tool(fn, description=inspect.cleandoc(fn.__doc__ or ""), annotations=hints)
        return fn

    return register


def add_tools(server: MCPServer, connect: Connect) -> None:
    """Register the memory tools on ``server``; each reaches the API through ``connect``."""

    @_tool(server, READS)
    async def search_memories(
        ctx: Context,
        query: Annotated[str, Field(min_length=1, description="What to recall, in words.")],
        k: Annotated[int, Field(ge=1, le=100, description="How many memories at most.")] = 10,
        types: Types = None,
        tags: Tags = None,
        since: Since = None,
        until: Until = None,
        min_score: Annotated[float | None, Field(description="Drop hits scoring less.")] = None,
        namespace: NamespaceArg = None,
    ) -> SearchResult:
        """Search long-term memory, best first. Each hit has its score and the score's
        breakdown: relevance (lexical and dense similarity, same session or period),
        importance, recency and activation (spread from related memories); `via` says whether
        the indexes found it ("anchor") or association added it ("spread")."""
        options: SearchOptions = {"k": k}
        _choose(options, types, tags, since, until)
        if min_score is not None:
            options["min_score"] = min_score
        if namespace:
            options["namespace"] = namespace
        with refusals():
            return await connect(ctx).search(query, **options)

    @_tool(server, WRITES)
    async def add_memory(
        ctx: Context,
        content: Annotated[str, Field(min_length=1, description="The memory, one statement.")],
        type: Annotated[
            str,
            Field(
                description="event, fact, preference, interaction_summary, tool_experience, "
                "or your own lower-case word."
            ),
        ] = "event",
        tags: Annotated[list[str] | None, Field(description="Short labels.")] = None,
        importance: Annotated[
            int | None, Field(ge=1, le=10, description="1-10; 5 if left out.")
        ] = None,
        timestamp: Annotated[
            str | None, Field(description="When it happened (ISO-8601); now if left out.")
        ] = None,
        metadata: Metadata = None,
        external_id: Annotated[
            str | None,
            Field(
                description="Your own id for it: adding the same id again changes nothing; "
                "with other content it is refused as a conflict."
            ),
        ] = None,
        session_id: Annotated[
            str | None, Field(description="The conversation it came from.")
        ] = None,
        pinned: Annotated[bool, Field(description="Protect it from maintenance.")] = False,
        namespace: NamespaceArg = None,
    ) -> Memory:
        """Store one memory and return it as stored (with its id and version). Adding the same
        memory again stores nothing new."""
        given = {
            "type": type,
            "tags": tags,
            "importance": importance,
            "timestamp": timestamp,
            "metadata": metadata,
            "external_id": external_id,
            "session_id": session_id,
        }
        item = {"content": content, "pinned": pinned} | {k: v for k, v in given.items() if v}
        with refusals():
            client = connect(ctx)
            added = await client.add_memories([item], namespace=namespace)
            return await client.get(added.ids[0], namespace=namespace)

    @_tool(server, READS)
    async def get_memory(
        ctx: Context, memory_id: MemoryId, namespace: NamespaceArg = None
    ) -> Memory:
        """One memory by id, any status (a superseded or merged one names what replaced it in
        replaced_by), with its version for update_memory and delete_memory."""
        with refusals():
            return await connect(ctx).get(memory_id, namespace=namespace)

    @_tool(server, READS)
    async def list_memories(
        ctx: Context,
        types: Types = None,
        tags: Tags = None,
        statuses: Annotated[
            list[str] | None,
            Field(description="active (the default), superseded, merged, archived, deleted."),
        ] = None,
        since: Since = None,
        until: Until = None,
        limit: Annotated[int, Field(ge=1, le=500, description="Memories per page.")] = 50,
        cursor: Annotated[
            str | None, Field(description="next_cursor of the previous page, for the next one.")
        ] = None,
        namespace: NamespaceArg = None,
    ) -> Page:
        """A page of memories by id, oldest first; next_cursor is null on the last page."""
        options: ListOptions = {"limit": limit}
        _choose(options, types, tags, since, until)
        if statuses:
            options["statuses"] = statuses
        if namespace:
            options["namespace"] = namespace
        with refusals():
            return await connect(ctx).list_memories(cursor, **options)

    @_tool(server, WRITES)
    async def update_memory(
        ctx: Context,
        memory_id: MemoryId,
        version: Version = None,
        content: Annotated[str | None, Field(min_length=1, description="New text.")] = None,
        type: Annotated[str | None, Field(description="New type.")] = None,
        tags: Annotated[list[str] | None, Field(description="New tags (replace all).")] = None,
        importance: Annotated[int | None, Field(ge=1, le=10, description="New importance.")] = None,
        metadata: Annotated[
            dict[str, Any] | None, Field(description="New metadata (replaces it).")
        ] = None,
        event_time: Annotated[str | None, Field(description="New event time (ISO-8601).")] = None,
        pinned: Annotated[bool | None, Field(description="Pin or unpin it.")] = None,
        namespace: NamespaceArg = None,
    ) -> Edited:
        """Correct a memory: change the fields given, leave the rest. Recorded and undoable;
        returns the memory with its new version."""
        given = {
            "content": content,
            "type": type,
            "tags": tags,
            "importance": importance,
            "metadata": metadata,
            "event_time": event_time,
            "pinned": pinned,
        }
        changes = cast(MemoryChanges, {k: v for k, v in given.items() if v is not None})
        with refusals():
            return await connect(ctx).update(
                memory_id, version=version, namespace=namespace, **changes
            )

    @_tool(server, DESTROYS)
    async def delete_memory(
        ctx: Context, memory_id: MemoryId, version: Version = None, namespace: NamespaceArg = None
    ) -> Deleted:
        """Delete a memory: it leaves search and lists at once; an operator can undo it until
        retention purges it. To erase its content for good, use forget_memories."""
        with refusals():
            return await connect(ctx).delete(memory_id, version=version, namespace=namespace)

    @_tool(server, DESTROYS)
    async def forget_memories(
        ctx: Context,
        ids: Annotated[list[int] | None, Field(description="These memories.")] = None,
        external_ids: Annotated[
            list[str] | None, Field(description="The memories with these external ids.")
        ] = None,
        types: Types = None,
        tags: Tags = None,
        since: Since = None,
        until: Until = None,
        all_memories: Annotated[bool, Field(description="Every memory of the namespace.")] = False,
        logs: Annotated[
            bool,
            Field(
                description="Also the conversation log lines they came from (with "
                "all_memories: every line of the namespace)."
            ),
        ] = False,
        sessions: Annotated[
            list[str] | None, Field(description="Conversation log lines of these sessions.")
        ] = None,
        log_since: Annotated[
            str | None,
            Field(description="Conversation log lines timestamped at or after this ISO time."),
        ] = None,
        log_until: Annotated[
            str | None,
            Field(description="Conversation log lines timestamped before this ISO time."),
        ] = None,
        keys: Annotated[
            list[str] | None,
            Field(description="The conversation log lines with these idempotency keys."),
        ] = None,
        match: Annotated[
            list[str] | None,
            Field(description="Conversation log lines whose text holds one of these, any case."),
        ] = None,
        confirm: Annotated[
            bool,
            Field(
                description="false (the default): a dry run that only lists what would be "
                "erased. true: erase it, irreversibly."
            ),
        ] = False,
        namespace: NamespaceArg = None,
    ) -> ForgetResult:
        """Erase memories everywhere, for good: text, history, index (an erasure request, "forget
        that"). Conversation log lines go by sessions, log_since/log_until, keys and match (the
        lines meeting all of those given), with the memories extracted from them. Cannot be
        undone. Call it first without confirm to see what would go, and only with confirm=true
        once that is what the user asked for."""
        chosen: ForgetFilter = {}
        _choose(chosen, types, tags, since, until)
        lines: LogFilter = {}
        if sessions:
            lines["sessions"] = sessions
        if log_since:
            lines["since"] = log_since
        if log_until:
            lines["until"] = log_until
        if keys:
            lines["keys"] = keys
        if match:
            lines["match"] = match
        with refusals():
            return await connect(ctx).forget(
                ids=ids or (),
                external_ids=external_ids or (),
                filter=chosen or None,
                all=all_memories,
                logs=logs,
                log_filter=lines or None,
                dry_run=not confirm,
                namespace=namespace,
            )

    @_tool(server, READS)
    async def list_namespaces(ctx: Context) -> list[Namespace]:
        """The namespaces your key may use, with their active and retired memories and log
        lines."""
        with refusals():
            return list(await connect(ctx).namespaces())
