"""The MCP tools: search, add, get, list, update, delete and forget memories, hand over a
conversation's turns (and ask for a dream), and list the caller's namespaces. Each tool is a
call of the Python client; what the API refuses comes back as a tool error with the API's
message and problems, never as a crash.

Every description says first when the host's model should call the tool. Every answer is
compact JSON (no indentation: it lands in the model's context); a search answers one line a
hit (``#id type date score text``) unless asked for ``detail``.

``memory_tools(connect)`` makes them (for ``MCPServer(tools=...)``); ``connect(ctx)`` returns the
client for the caller of this request (the front end decides whose key that is).
"""

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar, cast

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import ConfigDict, Field, StrictInt

from secretary.client.aio import AsyncSecretaryClient
from secretary.client.calls import (
    AGENT_MIN_SCORE,
    MAX_QUERY_CHARS,
    Filters,
    ForgetFilter,
    ListOptions,
    LogFilter,
    MemoryChanges,
    SearchOptions,
)
from secretary.client.models import (
    Deleted,
    Edited,
    ForgetResult,
    Memory,
    Namespace,
    Page,
)
from secretary.mcp_server.refusals import (
    EDIT,
    FORGET,
    LISTING,
    ONE_ITEM,
    SEARCH,
    TURNS,
    ToolOfArgs,
    refusals,
)
from secretary.mcp_server.shapes import Found, HandedOver, Turn, compact

Connect = Callable[[Context], AsyncSecretaryClient]
ToolFn = TypeVar("ToolFn", bound=Callable[..., Any])

READS = ToolAnnotations(read_only_hint=True, open_world_hint=False)
WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
DESTROYS = ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False)

NamespaceArg = Annotated[
    str | None,
    Field(
        description="The namespace (one agent's or user's memories). Leave it out unless your "
        "key has several namespaces (list_namespaces shows them): left out, it is your key's "
        "one namespace ('default' on a store without keys); a tool given a memory's id finds "
        "its namespace itself."
    ),
]
ForgetNamespaceArg = Annotated[
    str | None,
    Field(
        description="The namespace to erase from. Leave it out unless your key has several "
        "namespaces (list_namespaces shows them): then it is required, ids included. Left "
        "out, it is your key's one namespace ('default' on a store without keys)."
    ),
]
# Strict: a JSON true is no id 1, nor a version or a count.
MemoryId = Annotated[int, Field(ge=1, strict=True, description="The memory's id.")]
Version = Annotated[
    int | None,
    Field(
        ge=1,
        strict=True,
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


def _choose(
    chosen: Filters,
    types: list[str] | None,
    tags: list[str] | None,
    since: str | None,
    until: str | None,
) -> None:
    """Add the filters given to ``chosen`` (search's, list's or forget's options)."""
    # An empty list filters nothing; an empty time is passed on, for the API to refuse.
    if types:
        chosen["types"] = types
    if tags:
        chosen["tags"] = tags
    if since is not None:
        chosen["since"] = since
    if until is not None:
        chosen["until"] = until


def _tool(tools: list[Tool], hints: ToolAnnotations) -> Callable[[ToolFn], ToolFn]:
    """Add to ``tools`` a tool described by its docstring (without the source's indentation)
    whose answer goes out as compact JSON; its schema is still that of what ``fn`` returns.
    Its arguments are strict: one the tool does not have (a misspelt ``min_score``) is refused,
    not ignored, and its schema says so (``additionalProperties: false``)."""

    def register(fn: ToolFn) -> ToolFn:
        @functools.wraps(fn)
        async def answered(*args: Any, **kwargs: Any) -> CallToolResult:
            return compact(await cast(Callable[..., Awaitable[Any]], fn)(*args, **kwargs))

        description = inspect.cleandoc(fn.__doc__ or "")
        tool = ToolOfArgs.from_function(answered, description=description, annotations=hints)
        loose = tool.fn_metadata.arg_model
        strict = cast(
            type[ArgModelBase],
            type(loose.__name__, (loose,), {"model_config": ConfigDict(extra="forbid")}),
        )
        metadata = tool.fn_metadata.model_copy(update={"arg_model": strict})
        parameters = strict.model_json_schema(by_alias=True)
        tools.append(tool.model_copy(update={"fn_metadata": metadata, "parameters": parameters}))
        return fn

    return register


def memory_tools(connect: Connect) -> list[Tool]:
    """The memory tools, each reaching the API through ``connect``."""
    tools: list[Tool] = []

    @_tool(tools, READS)
    async def search_memories(
        ctx: Context,
        query: Annotated[
            str,
            Field(
                min_length=1,
                max_length=MAX_QUERY_CHARS,
                description="What to recall, in words (a question, a request, or the "
                "conversation so far).",
            ),
        ],
        k: Annotated[
            int, Field(ge=1, le=100, strict=True, description="How many memories at most.")
        ] = 10,
        types: Types = None,
        tags: Tags = None,
        since: Since = None,
        until: Until = None,
        min_score: Annotated[
            float | None,
            Field(
                ge=0,
                le=1,
                description="Answer nothing unless a hit is at least this relevant (0-1). "
                f"Default {AGENT_MIN_SCORE}: a question about something never stored comes "
                "back empty. Pass 0 (k hits, each with its relevance) when the query is the "
                "user's request rather than a question: a request shares few words with the "
                f"preference it implies and often scores below {AGENT_MIN_SCORE}.",
            ),
        ] = None,
        detail: Annotated[
            bool,
            Field(
                description="false (the default): one line a hit. true: each hit as an object "
                "with its score's breakdown (relevance, importance, recency, activation)."
            ),
        ] = False,
        namespace: NamespaceArg = None,
    ) -> Found:
        """Call it before you answer anything that may depend on what you were told earlier
        (the user's life, preferences, plans, past conversations), and whenever the user asks
        what you remember. Searches long-term memory, best first: each hit is one line
        `#id type date score text` (the score is its relevance, 0-1, meaning the same in any
        search; the order also weighs importance, recency and the links between memories, so
        a less relevant hit may come before a more relevant one). No hits means nothing stored
        is relevant to the question; a hit is not proof that something is: a question about
        something never stored can still bring back a weak hit sharing a word or a name with
        it, so check that a hit answers the question before you rely on it. To apply what you
        know of the user to a request ("recommend a restaurant"), search with min_score 0 and
        weigh the scores. detail=true gives each hit's full score breakdown instead."""
        options: SearchOptions = {"k": k}
        _choose(options, types, tags, since, until)
        if min_score is not None:
            options["min_score"] = min_score
        if namespace is not None:
            options["namespace"] = namespace
        with refusals(SEARCH):
            recall = await connect(ctx).recall(query, detail=detail, **options)
        hits = list(recall.hits) if detail else [hit.line for hit in recall.hits]
        found: Found = {"hits": hits}
        if recall.degraded:
            found["degraded"] = list(recall.degraded)
        return found

    @_tool(tools, WRITES)
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
            int | None, Field(ge=1, le=10, strict=True, description="1-10; 5 if left out.")
        ] = None,
        event_time: Annotated[
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
        """Call it when the user tells you something worth remembering about themselves or
        their world (a fact, a preference, an event, a plan), or asks you to remember
        something: one statement per call. Returns the memory as stored (with its id and
        version); adding the same memory again stores nothing new. For a whole conversation,
        use add_conversation instead."""
        given = {
            "type": type,
            "tags": tags,
            "importance": importance,
            "timestamp": event_time,  # the API's name for it on the way in
            "metadata": metadata,
            "external_id": external_id,
            "session_id": session_id,
        }
        # None is "not given"; anything else (an empty external_id too) goes to the API.
        item = {"content": content, "pinned": pinned}
        item |= {k: v for k, v in given.items() if v is not None}
        with refusals(ONE_ITEM):
            client = connect(ctx)
            added = await client.add_memories([item], namespace=namespace)
            return await client.get(added.ids[0], namespace=namespace)

    @_tool(tools, WRITES)
    async def add_conversation(
        ctx: Context,
        session_id: Annotated[
            str,
            Field(
                min_length=1,
                description="This conversation's id, the same on every call for it (e.g. the "
                "chat's id).",
            ),
        ],
        turns: Annotated[
            list[Turn],
            Field(min_length=1, description="The turns, oldest first, as they were said."),
        ],
        dream: Annotated[
            bool,
            Field(
                description="Also ask for a dream of the namespace now: the maintenance jobs, "
                "the extractor first, turn the new turns into memories within a minute or so "
                "instead of at the next scheduled run."
            ),
        ] = False,
        namespace: NamespaceArg = None,
    ) -> HandedOver:
        """Call it at the end of a conversation, or every few turns of a long one, with the
        turns so far (or since your last call): the memory's own extractor later picks out
        what is worth remembering, so you need not call add_memory for each thing said (only
        where the store's operator configured a model for it: without one the turns are kept
        and nothing is extracted, so store what must be remembered with add_memory). Sending
        a turn again stores nothing new. Returns the turns' log line ids, the new ones, and
        the dream request's id when dream=true (and dream_note, saying why, when the dream
        will extract nothing)."""
        lines = [{"session_id": session_id, **turn.model_dump(exclude_none=True)} for turn in turns]
        with refusals(TURNS):
            client = connect(ctx)
            added = await client.add_logs(lines, namespace=namespace)
            handed: HandedOver = {"ids": list(added.ids), "created": list(added.created)}
            if dream:
                accepted = await client.dream(namespace=namespace)
                handed["dream_request"] = accepted.id
                if accepted.note:
                    handed["dream_note"] = accepted.note
        return handed

    @_tool(tools, READS)
    async def get_memory(
        ctx: Context, memory_id: MemoryId, namespace: NamespaceArg = None
    ) -> Memory:
        """Call it when you need the whole of one memory a search or list named (its tags,
        metadata, status), or its version before update_memory or delete_memory. Any status:
        a superseded or merged one names what replaced it in replaced_by."""
        with refusals():
            return await connect(ctx).get(memory_id, namespace=namespace)

    @_tool(tools, READS)
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
        limit: Annotated[
            int, Field(ge=1, le=500, strict=True, description="Memories per page.")
        ] = 50,
        cursor: Annotated[
            str | None, Field(description="next_cursor of the previous page, for the next one.")
        ] = None,
        namespace: NamespaceArg = None,
    ) -> Page:
        """Call it when the user wants to see or review everything remembered (or all of a
        type or tag), not to answer a question (search_memories does that). A page of
        memories by id, oldest first; next_cursor is null on the last page."""
        options: ListOptions = {"limit": limit}
        _choose(options, types, tags, since, until)
        if statuses:
            options["statuses"] = statuses
        if namespace is not None:
            options["namespace"] = namespace
        with refusals(LISTING):
            return await connect(ctx).list_memories(cursor, **options)

    @_tool(tools, WRITES)
    async def update_memory(
        ctx: Context,
        memory_id: MemoryId,
        version: Version = None,
        content: Annotated[str | None, Field(min_length=1, description="New text.")] = None,
        type: Annotated[str | None, Field(description="New type.")] = None,
        tags: Annotated[list[str] | None, Field(description="New tags (replace all).")] = None,
        importance: Annotated[
            int | None, Field(ge=1, le=10, strict=True, description="New importance.")
        ] = None,
        metadata: Annotated[
            dict[str, Any] | None, Field(description="New metadata (replaces it).")
        ] = None,
        event_time: Annotated[str | None, Field(description="New event time (ISO-8601).")] = None,
        pinned: Annotated[bool | None, Field(description="Pin or unpin it.")] = None,
        namespace: NamespaceArg = None,
    ) -> Edited:
        """Call it when the user corrects something you remembered, or a memory turns out
        wrong or outdated. Changes the fields given and leaves the rest; recorded and
        undoable by an operator; returns the memory with its new version."""
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
        with refusals(EDIT):
            return await connect(ctx).update(
                memory_id, version=version, namespace=namespace, **changes
            )

    @_tool(tools, DESTROYS)
    async def delete_memory(
        ctx: Context, memory_id: MemoryId, version: Version = None, namespace: NamespaceArg = None
    ) -> Deleted:
        """Call it when a memory is wrong or no longer wanted and the user did not ask to erase
        it for good. It leaves search and lists at once; an operator can undo it until
        retention purges it (after the undo window). To erase content for good, use
        forget_memories."""
        with refusals(EDIT):
            return await connect(ctx).delete(memory_id, version=version, namespace=namespace)

    @_tool(tools, DESTROYS)
    async def forget_memories(
        ctx: Context,
        ids: Annotated[list[StrictInt] | None, Field(description="These memories.")] = None,
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
            Field(description="Log lines whose text holds one of these, any case."),
        ] = None,
        confirm: Annotated[
            bool,
            Field(
                description="false (the default): a dry run that only lists what would be "
                "erased. true: erase it, irreversibly."
            ),
        ] = False,
        namespace: ForgetNamespaceArg = None,
    ) -> ForgetResult:
        """Call it only when the user asks you to forget something for good ("forget that",
        "delete everything about X"). Erases memories everywhere: text, history, index. Memories
        go by ids (for everything about X: search_memories for X with min_score 0, then the ids
        of the hits about it), external_ids or the filters; log lines by sessions, log_since /
        log_until, keys and match (lines meeting all given; match reads lines, not memories),
        with what was extracted from them. Cannot be undone. Call it first without confirm to
        see what would go, and only with confirm=true once that is what the user asked for."""
        chosen: ForgetFilter = {}
        _choose(chosen, types, tags, since, until)
        lines: LogFilter = {}
        if sessions:
            lines["sessions"] = sessions
        if log_since is not None:
            lines["since"] = log_since
        if log_until is not None:
            lines["until"] = log_until
        if keys:
            lines["keys"] = keys
        if match:
            lines["match"] = match
        with refusals(FORGET):
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

    @_tool(tools, READS)
    async def list_namespaces(ctx: Context) -> list[Namespace]:
        """Call it when a tool says a namespace is required (your key has several), or to see
        how much is remembered. The namespaces your key may use, with their active and retired
        memories and log lines."""
        with refusals():
            return list(await connect(ctx).namespaces())

    return tools
