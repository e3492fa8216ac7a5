"""`secretary memory edit|delete` and `secretary forget`: a person's corrections.

Thin commands over the store's use cases (store.service.Store.edit/delete/forget), which the
API's PATCH, DELETE and POST /v1/forget call too: the same checks, records and errors.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from secretary.cli_common import (
    Context,
    _store,
    _sync,
    hint_types,
    namespace_option,
    pass_context,
)
from store.changes import plural
from store.clock import utc_now

version_option = click.option(
    "--version",
    "expected",
    type=click.IntRange(1),
    help="Change only if the memory is still at this version (as `memory show` prints it).",
)


@click.command("edit")
@click.argument("memory_id", type=click.IntRange(1))
@namespace_option
@click.option("--content", help="The new text.")
@click.option("--type", "type_", help="The new type (event, fact, preference, ...).")
@click.option("--tag", "tags", multiple=True, help="The tags, replacing all (repeatable).")
@click.option("--no-tags", is_flag=True, help="Remove every tag.")
@click.option("--importance", type=click.IntRange(1, 10), help="1 (trivial) to 10 (vital).")
@click.option("--metadata", help="The metadata as a JSON object, replacing it whole.")
@click.option("--event-time", help="When it happened (ISO-8601); moves it in the timeline.")
@click.option("--pin", is_flag=True, help="Pin it: pinned memories never fade.")
@click.option("--unpin", is_flag=True, help="Unpin it: it can fade again.")
@version_option
@click.option("--json", "as_json", is_flag=True, help="Print the memory as the API's JSON.")
@pass_context
def edit(
    ctx: Context,
    memory_id: int,
    namespace: str,
    content: str | None,
    type_: str | None,
    tags: tuple[str, ...],
    no_tags: bool,
    importance: int | None,
    metadata: str | None,
    event_time: str | None,
    pin: bool,
    unpin: bool,
    expected: int | None,
    as_json: bool,
) -> None:
    """Change a memory; one record, undoable with `secretary undo RECORD`.

    \b
    Examples:
      secretary memory edit 42 --content "Maya moved to Porto in May 2025"
      secretary memory edit 42 --tag family --tag porto --importance 8 --version 3
    """
    if tags and no_tags:
        raise click.UsageError("--tag and --no-tags contradict each other")
    if pin and unpin:  # one --pin/--unpin switch would keep the last silently
        raise click.UsageError("--pin and --unpin contradict each other")
    changes: dict[str, Any] = {
        "content": content,
        "type": type_,
        "tags": [] if no_tags else (list(tags) or None),
        "importance": importance,
        "metadata": _json_object(metadata),
        "event_time": event_time,
        "pinned": True if pin else (False if unpin else None),
    }
    changes = {name: value for name, value in changes.items() if value is not None}
    if not changes:
        raise click.UsageError("name something to change (--content, --tag, ... see --help)")
    with _store(ctx, namespace=namespace) as store:
        done = _refusing_bad_fields(
            lambda: store.edit(
                namespace,
                memory_id,
                changes,
                now=utc_now(),
                expected_version=expected,
                by="cli",
            )
        )
        _index(store, quiet=as_json)
        memory = store.db.memories.get(namespace, memory_id)
    if as_json:
        from store.shapes.memory import memory_json

        view = {"memory": memory_json(memory, detail=True), "record_id": done.record_id}
        click.echo(json.dumps(view, indent=2))
    elif done.record_id is None:
        click.echo(f"#{memory_id} already says that: nothing changed")
    else:
        click.echo(
            f"#{memory_id} edited, now version {done.version} (record #{done.record_id}; "
            f"`secretary undo {done.record_id}` takes it back)"
        )


@click.command("delete")
@click.argument("memory_id", type=click.IntRange(1))
@namespace_option
@version_option
@pass_context
def delete(ctx: Context, memory_id: int, namespace: str, expected: int | None) -> None:
    """Delete a memory: it leaves search and the timeline, and stays as a tombstone that
    `secretary undo RECORD` brings back until retention purges it. To erase content for
    good (an erasure request), use `secretary forget`."""
    with _store(ctx, namespace=namespace) as store:
        done = store.delete(
            namespace, memory_id, now=utc_now(), expected_version=expected, by="cli"
        )
        _index(store, quiet=False)
    click.echo(
        f"#{memory_id} deleted (record #{done.record_id}; "
        f"`secretary undo {done.record_id}` brings it back)"
    )


@click.command("forget")
@click.argument("memory_ids", nargs=-1, type=click.IntRange(1))
@namespace_option
@click.option("--external-id", "external_ids", multiple=True, help="By external id (repeatable).")
@click.option("--type", "types", multiple=True, help="Every memory of this type (repeatable).")
@click.option("--tag", "tags", multiple=True, help="Every memory with these tags (all of them).")
@click.option("--since", help="Every memory whose event time is at or after this ISO time.")
@click.option("--until", help="Every memory whose event time is before this ISO time.")
@click.option("--meta", multiple=True, help="KEY=VALUE: every memory with this metadata.")
@click.option("--all", "everything", is_flag=True, help="Every memory of the namespace.")
@click.option(
    "--logs",
    is_flag=True,
    help="Also the conversation log lines they came from (with --all: every line).",
)
@click.option("--session", "sessions", multiple=True, help="Log lines of this session (repeat).")
@click.option("--log-since", help="Log lines whose timestamp is at or after this ISO time.")
@click.option("--log-until", help="Log lines whose timestamp is before this ISO time.")
@click.option("--key", "keys", multiple=True, help="The log line with this idempotency key.")
@click.option(
    "--match",
    "matches",
    multiple=True,
    help="Log lines whose text holds this, in any case (repeatable: any of them).",
)
@click.option("--dry-run", is_flag=True, help="List what would be erased; erase nothing.")
@click.option("--yes", is_flag=True, help="Erase without asking (scripts).")
@click.option("--json", "as_json", is_flag=True, help="Print what was (or would be) erased.")
@click.option(
    "--compact",
    is_flag=True,
    help="Then rewrite the database's files, as `secretary db compact` does: on PostgreSQL"
    " VACUUM FULL, which locks each table while it runs (a maintenance window).",
)
@pass_context
def forget(
    ctx: Context,
    memory_ids: tuple[int, ...],
    namespace: str,
    external_ids: tuple[str, ...],
    types: tuple[str, ...],
    tags: tuple[str, ...],
    since: str | None,
    until: str | None,
    meta: tuple[str, ...],
    everything: bool,
    logs: bool,
    sessions: tuple[str, ...],
    log_since: str | None,
    log_until: str | None,
    keys: tuple[str, ...],
    matches: tuple[str, ...],
    dry_run: bool,
    yes: bool,
    as_json: bool,
    compact: bool,
) -> None:
    """Erase memories and conversation lines everywhere, for good: an erasure request.

    The memories go from the database, every maintenance record's images, the vector and
    lexical indexes (and, with --logs, the conversation lines they were extracted from), with
    what holds the same content: duplicates merged into them, what they were merged into, and
    summaries and traits derived from them. --all --logs erases every memory and every
    conversation line of the namespace.

    Conversation lines are chosen by --session, --log-since/--log-until, --key and --match:
    the lines that meet all of them (an option given twice: either value). The memories
    extracted from those lines go with them, and no job can extract them again.

    What remains is an erasure record with ids, content hashes, who and when, never the text.
    Undo cannot bring it back. On PostgreSQL the erased rows' bytes stay in the table files
    until they are rewritten: --compact does it after the forget (see `secretary db compact`).

    \b
    Examples:
      secretary forget 42 --dry-run
      secretary forget --external-id chat-7:12 --logs --yes
      secretary forget --tag health --yes
      secretary forget --all --logs -n old-agent --yes
      secretary forget --session chat-7 --log-since 2026-05-01T00:00Z --dry-run
      secretary forget --match "Jordan" --yes
    """
    from store.errors import ValidationFailed
    from store.requests import lone_surrogate, search_filters
    from store.write.forget import ForgetSelection, log_filter

    for external_id in external_ids:
        if (problem := lone_surrogate(external_id)) is not None:
            raise click.BadParameter(problem, param_hint="--external-id")

    try:
        filters = search_filters(types=types, tags=tags, since=since, until=until, meta=meta)
    except ValidationFailed as exc:
        where, what = exc.problems[0]
        raise click.BadParameter(what, param_hint=f"--{where.split('.')[0]}") from None
    try:
        lines = log_filter(
            sessions=sessions, since=log_since, until=log_until, keys=keys, match=matches
        )
    except ValidationFailed as exc:
        where, what = exc.problems[0]
        raise click.BadParameter(what, param_hint=_LINE_OPTIONS[where.split(".")[0]]) from None
    selection = ForgetSelection(
        ids=memory_ids,
        external_ids=external_ids,
        filters=None if filters.empty else filters,
        everything=everything,
        logs=logs,
        log_filter=None if lines.empty else lines,
    )
    if selection.empty:
        raise click.UsageError(
            "name what to forget: ids, --external-id, a filter, log lines (--session,"
            " --log-since, --log-until, --key, --match), or --all"
        )
    with _store(ctx, namespace=namespace) as store:
        plan = store.forget(namespace, selection, now=utc_now(), dry_run=True).plan
        hint_types(store, namespace, types)
        if not plan.memories and not plan.logs:
            click.echo("nothing matched: nothing to forget")
            return
        if dry_run:
            _show(plan, as_json, done=None)
            return
        if not yes and not _confirmed(plan):
            raise click.exceptions.Exit(1)
        result = store.forget(namespace, selection, now=utc_now(), by="cli")
        if not getattr(result, "index_pending", False):  # else it could not reach the index
            _index(store, quiet=as_json)
        if compact:
            from store.db import compact as compact_database

            done = compact_database(store.engine)
            click.echo(f"compacted the {done.backend} database", err=as_json)
    _show(
        result.plan,
        as_json,
        done=result.record_id,
        pending=getattr(result, "index_pending", False),
        warning=getattr(result, "warning", None),
    )


# The option that gives each field of a log filter.
_LINE_OPTIONS = {
    "session": "--session",
    "since": "--log-since",
    "until": "--log-until",
    "key": "--key",
    "match": "--match",
}


def _confirmed(plan: Any) -> bool:
    """Ask on a terminal; elsewhere (a script, a pipe) refuse: --yes says it."""
    _show(plan, False, done=None, asking=True)
    if not sys.stdin.isatty():
        click.echo("error: refusing to forget without --yes (nothing erased)", err=True)
        return False
    if click.confirm("erase these for good?", default=False):
        return True
    click.echo("nothing erased")
    return False


def _show(
    plan: Any,
    as_json: bool,
    *,
    done: int | None,
    asking: bool = False,
    pending: bool = False,
    warning: str | None = None,
) -> None:
    if warning is not None:  # erased in SQL, not (yet) from the vector index's files
        click.echo(f"warning: {warning}", err=True)
    if as_json:
        extra = {"index_pending": pending, "warning": warning} if done is not None else {}
        click.echo(json.dumps({**plan.as_json(), "record_id": done, **extra}, indent=2))
        return
    for memory in plan.memories:
        click.echo(f"  #{memory.id} ({memory.why})")
    by_why: dict[str, list[int]] = {}
    for line in plan.lines:
        by_why.setdefault(line.why, []).append(line.id)
    for why, ids in by_why.items():
        click.echo(f"  log lines {_spans(ids)} ({why})")
    counts = (
        f"{plural(len(plan.memories), 'memory', 'memories')}, "
        f"{plural(len(plan.relations), 'relation')}, {plural(len(plan.logs), 'log line')}"
    )
    if done is not None:
        click.echo(f"forgot {counts} (erasure record #{done}; it cannot be undone)")
    elif asking:
        click.echo(f"this forgets {counts}, for good")
    else:
        click.echo(f"would forget {counts}; nothing erased (dry run)")


def _spans(ids: list[int]) -> str:
    """Given sorted ids, return them as runs: "#1-#4, #9"."""
    runs: list[list[int]] = []
    for i in ids:
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return ", ".join(f"#{r[0]}" if len(r) == 1 else f"#{r[0]}-#{r[-1]}" for r in runs)


def _index(store: Any, *, quiet: bool) -> None:
    """Bring the vector index up to date now (a daemon would too, later); JSON output stays
    the only output."""
    _sync(store, quiet=quiet)


def _json_object(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="--metadata") from None
    if not isinstance(value, dict):
        raise click.BadParameter("must be a JSON object", param_hint="--metadata")
    return value


def _refusing_bad_fields(call: Any) -> Any:
    """Run the edit; a field the store refuses is a usage error naming its option."""
    from store.errors import ValidationFailed

    try:
        return call()
    except ValidationFailed as exc:
        where, what = exc.problems[0]
        field = where.removeprefix("body").strip(".").replace("_", "-")
        if not field:
            raise click.UsageError(what) from None
        raise click.BadParameter(what, param_hint=f"--{field}") from None
