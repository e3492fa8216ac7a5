"""`secretary memory list|show`, `secretary namespaces`, `secretary export` and `secretary import`:
reading a store's memories page by page, and moving a namespace or a whole store."""

from __future__ import annotations

import json
import sys
from pathlib import Path
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
from store.kinds import MemoryStatus


@click.group()
def memory() -> None:
    """Read and correct memories: list them page by page, show one with its relations, edit
    or delete one (undoable)."""


@memory.command("list")
@namespace_option
@click.option("--type", "types", multiple=True, help="Only this memory type (repeatable).")
@click.option("--tag", "tags", multiple=True, help="Only memories with this tag (repeatable: all).")
@click.option(
    "--status",
    "statuses",
    multiple=True,
    type=click.Choice([s.value for s in MemoryStatus]),
    help="Only memories with this status (repeatable: any; default: active).",
)
@click.option("--since", help="Only memories whose event time is at or after this ISO time.")
@click.option("--until", help="Only memories whose event time is before this ISO time.")
@click.option("--meta", multiple=True, help="KEY=VALUE: metadata equal to VALUE exactly.")
@click.option("--cursor", help="Continue after the page that printed this cursor.")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 500))
@click.option("--json", "as_json", is_flag=True, help="Print the page as the API's JSON.")
@pass_context
def memory_list(
    ctx: Context,
    namespace: str,
    types: tuple[str, ...],
    tags: tuple[str, ...],
    statuses: tuple[str, ...],
    since: str | None,
    until: str | None,
    meta: tuple[str, ...],
    cursor: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """List a namespace's memories by id, a page at a time (with the search's filters).

    A page ends with the cursor of the next one (--cursor), unless it was the last.
    """
    from store.errors import ValidationFailed
    from store.listing import list_memories, list_request
    from store.shapes.memory import memory_json

    try:
        request = list_request(
            namespace=namespace,
            types=types,
            tags=tags,
            statuses=statuses,
            since=since,
            until=until,
            meta=meta,
            cursor=cursor,
            limit=limit,
        )
    except ValidationFailed as exc:
        where, what = exc.problems[0]
        raise click.BadParameter(what, param_hint=f"--{where.split('.')[0]}") from None
    with _store(ctx, namespace=namespace) as store:
        listed = list_memories(store.db, request)
        hint_types(store, namespace, types)
    memories = listed.page.memories
    if as_json:
        page = {"memories": [memory_json(m, detail=True) for m in memories]}
        click.echo(json.dumps({**page, "next_cursor": listed.next_cursor}, indent=2))
        return
    for m in memories:
        status = "" if m.status == MemoryStatus.ACTIVE else f" {m.status}"
        when = m.event_time.date().isoformat()
        click.echo(f"#{m.id} {when} [{m.type}{status}] {m.content}")
    if not memories:
        click.echo("no memories on this page" if cursor else "no memories matched")
    if listed.next_cursor is not None:
        click.echo(f"more: --cursor {listed.next_cursor}")


@memory.command("show")
@click.argument("memory_id", type=click.IntRange(1))
@namespace_option
@click.option("--json", "as_json", is_flag=True, help="Print it as the API's JSON, and relations.")
@pass_context
def memory_show(ctx: Context, memory_id: int, namespace: str, as_json: bool) -> None:
    """Show one memory (any status: what replaced it, if anything) and its relations."""
    from store.errors import NotFound
    from store.shapes.memory import memory_json, relation_json

    with _store(ctx, namespace=namespace) as store:
        found = store.db.memories.get(namespace, memory_id)
        if found is None:
            raise NotFound("memory", f"{memory_id} in namespace {namespace!r}")
        relations = store.db.listing.relations(namespace, memory_id)
    view = memory_json(found, detail=True)
    if as_json:
        view["relations"] = [relation_json(r) for r in relations]
        click.echo(json.dumps(view, indent=2))
        return
    replaced = f", replaced by #{found.replaced_by_id}" if found.replaced_by_id else ""
    click.echo(f"#{found.id} {found.type}, {found.status}{replaced}, version {found.version}")
    click.echo(found.content)
    for name in ("external_id", "event_time", "session_id", "tags", "importance", "pinned"):
        if view[name] not in (None, [], False):
            click.echo(f"  {name}: {_plain(view[name])}")
    if found.metadata:
        click.echo(f"  metadata: {json.dumps(dict(found.metadata), ensure_ascii=False)}")
    for r in relations:
        arrow = "->" if r.direction == "out" else "<-"
        said = f' "{r.description}"' if r.description else ""
        click.echo(f"  {arrow} #{r.other_id} {r.type} {r.strength:.2f}{said}: {r.other_content}")


def _plain(value: Any) -> str:
    return ", ".join(value) if isinstance(value, list) else str(value)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print them as the API's JSON.")
@pass_context
def namespaces(ctx: Context, as_json: bool) -> None:
    """List the namespaces that hold memories or conversation logs, with their counts."""
    from store.shapes.memory import namespace_json

    with _store(ctx) as store:
        views = store.db.listing.namespaces()
    if as_json:
        click.echo(json.dumps({"namespaces": [namespace_json(v) for v in views]}, indent=2))
        return
    if not views:
        click.echo("no namespaces: the store holds no memories or logs")
    for v in views:
        memories, logs = plural(v.memories, "memory", "memories"), plural(v.logs, "log line")
        click.echo(f"{v.namespace}: {memories}, {v.retired} retired, {logs}")


@click.command()
@namespace_option
@click.option(
    "--all",
    "whole",
    is_flag=True,
    help="The whole store: memories, relations, logs, records with their operations, job "
    "state and schedules (every namespace; `secretary import` restores it).",
)
@pass_context
def export(ctx: Context, namespace: str, whole: bool) -> None:
    """Print the namespace as deterministic JSONL: every memory (any status) and relation.

    The output is a backup of namespace NS: `secretary ingest FILE --namespace NS` restores
    it into NS, the namespace it came from (ingest refuses another); `secretary import FILE
    --namespace NEW` copies it into another namespace. With --all, the whole store, for
    `secretary import`.
    """
    from store.exports.backup import export_store

    source = click.get_current_context().get_parameter_source("namespace")
    if whole and source is click.core.ParameterSource.COMMANDLINE:
        raise click.UsageError("--all exports every namespace: drop --namespace")
    if whole:
        with _store(ctx) as store:
            for line in export_store(store.engine):
                sys.stdout.write(line + "\n")
        return
    with _store(ctx, namespace=namespace) as store:
        for line in store.db.memories.export(namespace):
            sys.stdout.write(line + "\n")


_PLURALS = {
    "memory": "memories",
    "relation": "relations",
    "log": "log lines",
    "record": "records",
    "job_state": "job states",
    "schedule": "schedules",
}


@click.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--namespace",
    "-n",
    help="Copy the file's one namespace into this one (it must hold nothing); every id is "
    "moved past those the store has used.",
)
@click.option("--no-index", is_flag=True, help="Leave embedding to the daemon (outbox).")
@pass_context
def import_(ctx: Context, file: Path, namespace: str | None, no_index: bool) -> None:
    """Restore a store from `secretary export --all` (or a namespace's export) in one go.

    Every line is checked first, then everything is written in one transaction, or
    nothing: a bad line, a relation across namespaces or an id held by other content is
    reported with its line number. Rows already stored as in the file are skipped. The
    import brings its records with it and writes none of its own. Run it while no daemon
    writes to the store.
    """
    from store.ingest import import_file

    with _store(ctx) as store:
        report = import_file(store, file, now=utc_now(), namespace=namespace)
        added = ", ".join(f"{n} {_PLURALS[kind]}" for kind, n in report.added.items())
        where = f" into namespace {report.namespace!r}" if report.namespace else ""
        click.echo(f"imported{where}: {added}; {report.present} already present")
        if report.schedules_left:
            click.echo(f"{report.schedules_left} schedule(s) left out: they belong to a store")
        if not no_index:
            _sync(store)
