"""The `secretary` command: a thin layer that parses, calls one library function, and reports.

Our errors become a one-line message on stderr and a non-zero exit code; nothing here holds logic
that the API or the daemon would need too.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from secretary import __version__
from secretary.cli_common import (
    Context,
    _Group,
    _store,
    _sync,
    hint_types,
    host_option,
    listening,
    namespace_option,
    pass_context,
    port_option,
)
from secretary.cli_daemon import run, schedule
from secretary.cli_edits import delete, edit, forget
from secretary.cli_jobs import dream, plans
from secretary.cli_mcp import mcp
from secretary.cli_memory import export, import_, memory, namespaces
from secretary.cli_records import records, undo
from secretary.cli_status import status
from secretary.config import Settings
from secretary.logs import LOG_LEVELS
from secretary.logs import configure as configure_logging
from secretary.progress import progress
from store.clock import utc_now


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--config",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="SECRETARY_CONFIG",
    help="TOML configuration file (default: $SECRETARY_CONFIG; none means built-in defaults).",
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="SECRETARY_DATA_DIR",
    help="Where the SQLite database and the embedded Chroma live "
    "(default: $SECRETARY_DATA_DIR or ~/.local/share/memory-secretary).",
)
@click.option(
    "--log-level",
    type=click.Choice(LOG_LEVELS, case_sensitive=False),
    default="INFO",
    show_default=True,
    help="How much to log to stderr.",
)
@click.option("--log-json", is_flag=True, help="Log one JSON object per line (for journald/ELK).")
@click.version_option(__version__, prog_name="secretary")
@click.pass_context
def cli(
    click_ctx: click.Context,
    config: Path | None,
    data_dir: Path | None,
    log_level: str,
    log_json: bool,
) -> None:
    """memory-secretary: keep an agent's long-term memory healthy, and serve it.

    \b
    Start here:
      secretary init                      create the data directory and database
      secretary ingest memories.jsonl     add memories (one JSON object per line)
      secretary search "what does she like?"
      secretary serve                     run the read API on 127.0.0.1:8765

    Configuration comes from a TOML file (--config) with SECRETARY_* environment
    overrides, e.g. SECRETARY_DATABASE_URL or SECRETARY_INDEX_CHROMA_URL.
    """
    configure_logging(log_level, json=log_json)
    click_ctx.obj = Context(config=config, data_dir=data_dir)


@cli.command()
@pass_context
def init(ctx: Context) -> None:
    """Create the data directory, the database schema and the vector index.

    Safe to run again: an existing store is upgraded, never emptied.
    """
    with _store(ctx, create=True) as store:
        store.index.namespaces()  # opens (and so creates) the embedded Chroma
        click.echo(f"ready: database {_safe_url(store.settings)} and index {_index_place(store)}")


@cli.group()
def db() -> None:
    """Database schema commands."""


@db.command("upgrade")
@pass_context
def db_upgrade(ctx: Context) -> None:
    """Apply pending schema migrations (SQLite or PostgreSQL)."""
    from store.db import current_revision, make_engine, upgrade

    engine = make_engine(ctx.settings.database_url)
    try:
        before = current_revision(engine)
        upgrade(engine)
        click.echo(f"schema: {before or 'empty'} -> {current_revision(engine)}")
    finally:
        engine.dispose()


@db.command("compact")
@click.option("--yes", is_flag=True, help="Do not ask first (for scripts).")
@pass_context
def db_compact(ctx: Context, yes: bool) -> None:
    """Rewrite the database's files so erased rows leave no bytes behind.

    Run it after `secretary forget` on PostgreSQL, in a maintenance window: it runs VACUUM FULL,
    which locks each table while it rewrites it (searches and writes wait), then CHECKPOINT so
    the server can recycle the write-ahead log that still holds the old rows. Backups and WAL
    archives are not touched: docs/operations.md says what remains where. On SQLite, which
    zeroes deleted rows as it goes, it only empties the write-ahead log.

    \b
    Examples:
      secretary forget --tag health --yes && secretary db compact --yes
    """
    from store.db import compact, make_engine

    engine = make_engine(ctx.settings.database_url)
    try:
        if engine.dialect.name != "sqlite" and not yes:
            question = "VACUUM FULL locks each table while it rewrites it. Compact now?"
            if not sys.stdin.isatty():
                click.echo("error: refusing to compact without --yes (nothing done)", err=True)
                raise click.exceptions.Exit(1)
            if not click.confirm(question, default=False):
                click.echo("nothing done")
                raise click.exceptions.Exit(1)
        done = compact(engine)
    finally:
        engine.dispose()
    sizes = ""
    if done.size_before is not None and done.size_after is not None:
        sizes = f": {_mib(done.size_before)} -> {_mib(done.size_after)}"
    click.echo(f"compacted the {done.backend} database{sizes}")
    for note in done.notes:
        click.echo(f"note: {note}", err=True)


def _mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"


@cli.group("config")
def config_group() -> None:
    """Configuration commands."""


@config_group.command("check")
@pass_context
def config_check(ctx: Context) -> None:
    """Validate the configuration and print the effective settings, secrets hidden."""
    from store.db import parse_url

    parse_url(ctx.settings.database_url)  # a URL no command could open fails here, not later
    click.echo(json.dumps(ctx.settings.redacted(), indent=2, sort_keys=True))


@cli.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@namespace_option
@click.option("--logs", is_flag=True, help="FILE holds conversation logs, not memories.")
@click.option("--no-index", is_flag=True, help="Leave embedding to the daemon (outbox).")
@click.option(
    "--update",
    is_flag=True,
    help="A line naming a stored memory (external_id) or log line (idempotency_key) with "
    "other content changes it (recorded, undoable) instead of failing as a conflict. The "
    "file is written in transactions of ingest.commit_every lines, each its own record, "
    "printed as it commits: an update cut short keeps the ones it committed (undo each with "
    "`secretary undo ID`, or run the same ingest again to finish it).",
)
@pass_context
def ingest(
    ctx: Context, file: Path, namespace: str, logs: bool, no_index: bool, update: bool
) -> None:
    """Add memories (or --logs) from a JSONL file; re-ingesting a file changes nothing.

    \b
    Memory lines (only "content" is required):
      {"content": "Caroline went hiking", "type": "event",
       "timestamp": "2023-05-07T14:00:00Z", "tags": ["outdoors"], "importance": 6,
       "metadata": {"task_type": "chat"}, "external_id": "D1:3", "session_id": "s1"}
    Log lines (--logs):
      {"session_id": "s1", "role": "user", "content": "...",
       "timestamp": "2023-05-07T14:00:00Z", "idempotency_key": "msg-1"}
    A file written by `secretary export` is restored as it was.

    The whole file is checked first: if any line is bad, every bad line is reported
    with its number and nothing is written (exit code 3). So is a line that names a
    stored memory (or log line) with other content, or the same one as another line
    with other content: a conflict (exit code 4), unless --update asks to change the
    stored one. The lines are then written in transactions of ingest.commit_every
    (1,000); an ingest cut short keeps those committed, and running it again finishes
    it. With --update each transaction's record is printed as it commits.
    """
    from store.changes import plural
    from store.ingest import Committed, count_lines, ingest_file

    def committed(batch: Committed) -> None:
        # An update cut short keeps what it committed: say at once what to undo.
        if update and batch.record_id is not None:
            lines = (
                f"line {batch.first_line}"
                if batch.first_line == batch.last_line
                else f"lines {batch.first_line}-{batch.last_line}"
            )
            click.echo(
                f"record #{batch.record_id}: {lines} "
                f"committed ({batch.updated} updated, {batch.created} new, {batch.skipped} "
                f"already present); `secretary undo {batch.record_id}` reverts them"
            )

    with _store(ctx) as store:
        with progress(f"ingesting {file.name}", count_lines(file)) as bar:
            report = ingest_file(
                store,
                file,
                namespace=namespace,
                logs=logs,
                update=update,
                now=utc_now(),
                advance=bar.advance,
                committed=committed,
            )
        changed = f"{report.updated} updated, " if report.updated else ""
        new = f"{report.created} new"
        if report.relations:
            memories = plural(report.created - report.relations, "memory", "memories")
            new += f" ({memories}, {plural(report.relations, 'relation')})"
        click.echo(
            f"{plural(report.lines, 'line')}: {new}, {changed}{report.skipped} already "
            f"present ({report.kind}, namespace {namespace!r})"
        )
        if report.kind != "logs" and not no_index:
            _sync(store)


@cli.command()
@click.argument("query")
@namespace_option
@click.option("--k", "-k", default=10, show_default=True, type=click.IntRange(1, 1000))
@click.option("--json", "as_json", is_flag=True, help="Print hits as JSON with score breakdowns.")
@click.option("--type", "types", multiple=True, help="Only this memory type (repeatable).")
@click.option("--tag", "tags", multiple=True, help="Only memories with this tag (repeatable: all).")
@click.option("--since", help="Only memories whose event time is at or after this ISO time.")
@click.option("--until", help="Only memories whose event time is before this ISO time.")
@click.option("--meta", multiple=True, help="KEY=VALUE: metadata equal to VALUE exactly.")
@click.option(
    "--min-score",
    type=float,
    help="Answer nothing unless a hit is at least this relevant (0-1, the same scale in any "
    'query and store; agents use 0.35 to hear "nothing relevant"). Default 0: k hits.',
)
@click.option(
    "--reinforce/--no-reinforce",
    default=True,
    show_default=True,
    help="Count this search as a recall (strengthens the memories found).",
)
@pass_context
def search(
    ctx: Context,
    query: str,
    namespace: str,
    k: int,
    as_json: bool,
    types: tuple[str, ...],
    tags: tuple[str, ...],
    since: str | None,
    until: str | None,
    meta: tuple[str, ...],
    min_score: float | None,
    reinforce: bool,
) -> None:
    """Search a namespace's memories (vector + lexical anchors, spreading activation)."""
    from store.errors import ValidationFailed
    from store.requests import search_request
    from store.shapes.memory import hit_json

    try:
        request = search_request(
            namespace=namespace,
            query=query,
            k=k,
            types=types,
            tags=tags,
            since=since,
            until=until,
            meta=meta,
            min_score=min_score,
            reinforce=reinforce,
        )
    except ValidationFailed as exc:
        where, what = exc.problems[0]
        option = "QUERY" if where == "q" else f"--{where.split('.')[0].replace('_', '-')}"
        raise click.BadParameter(what, param_hint=option) from None
    with _store(ctx, namespace=namespace) as store:  # closing the store writes the recall
        result = store.search(request, now=utc_now())
        hint_types(store, namespace, types)
    for note in result.degraded:
        click.echo(f"warning: {note}", err=True)
    if as_json:
        hits = [hit_json(hit) for hit in result.hits]
        click.echo(json.dumps({"hits": hits, "degraded": list(result.degraded)}, indent=2))
        return
    if not result.hits:
        click.echo("no memories matched")
    for rank, hit in enumerate(result.hits, start=1):
        when = hit.memory.event_time.date().isoformat()
        click.echo(f"{rank:>2}. [{hit.score:.3f}] #{hit.memory.id} {when} {hit.memory.content}")


@cli.group()
def index() -> None:
    """The vector index (Chroma): check it against SQL, rebuild it, catch it up."""


def _namespaces(store: Any, namespace: str | None) -> list[str]:
    return [namespace] if namespace else store.indexer.namespaces()


@index.command("verify")
@click.option("--namespace", "-n", help="Only this namespace (default: all).")
@pass_context
def index_verify(ctx: Context, namespace: str | None) -> None:
    """Report every drift between SQL and the index; exit 1 if there is any.

    Drift kinds: missing (active in SQL, not indexed), extra (indexed, not active in
    SQL), stale (indexed at another version). Pending outbox entries count as drift,
    and so does a rebuild that has not finished (REBUILDING).
    """
    drifted = False
    with _store(ctx, namespace=namespace) as store:
        pending = store.indexer.pending_rebuilds()
        for name in _namespaces(store, namespace):
            drift, mark = store.indexer.verify(name), pending.get(name)
            state = "REBUILDING" if mark else "ok" if drift.clean else "DRIFT"
            click.echo(
                f"{name}: {state} missing={len(drift.missing)} extra={len(drift.extra)} "
                f"stale={len(drift.stale)}"
            )
            if mark:
                click.echo(
                    f"  rebuild not finished: {mark.copied} of {mark.total} memories copied; "
                    "`secretary index sync` completes it"
                )
            for kind in ("missing", "extra", "stale"):
                ids = getattr(drift, kind)
                if ids:
                    shown = ", ".join(map(str, ids[:20])) + (" ..." if len(ids) > 20 else "")
                    click.echo(f"  {kind}: {shown}")
            drifted = drifted or not drift.clean or mark is not None
    if drifted:
        raise SystemExit(1)


@index.command("rebuild")
@click.option("--namespace", "-n", help="Only this namespace (default: all).")
@pass_context
def index_rebuild(ctx: Context, namespace: str | None) -> None:
    """Rebuild the index from SQL (the truth) into a new collection, then swap it in.

    \b
    Searches use the old index until the new one is complete (and say so).
    The rebuild is recorded in the database first: if it is cut short, the
    next `secretary index sync`, daemon or `secretary serve` carries it on.
    """
    with _store(ctx, namespace=namespace) as store:
        names = _namespaces(store, namespace)
        store.indexer.request_rebuild(names)
        _rebuild(store, names)
        _sync(store, strict=True)


@index.command("sync")
@pass_context
def index_sync(ctx: Context) -> None:
    """Finish any rebuild cut short, then apply the pending outbox (the daemon does
    both continuously)."""
    with _store(ctx) as store:
        _rebuild(store, list(store.indexer.pending_rebuilds()))
        _sync(store, strict=True)
        left = store.db.work.outbox_size()
        click.echo(
            "the vector index is up to date: nothing waits in the outbox"
            if left == 0
            else f"{left} change(s) still wait in the outbox (written while this ran): "
            "run it again, or let the daemon apply them"
        )


def _rebuild(store: Any, names: list[str]) -> None:
    """Carry on the rebuild of each namespace from where it is, with a progress bar."""
    pending = store.indexer.pending_rebuilds()
    for name in names:
        mark = pending.get(name)
        done = mark.copied if mark is not None else 0
        with progress(f"rebuilding {name}", store.db.memories.count(name)) as bar:
            bar.advance(done)
            count = store.indexer.rebuild(name, progress=bar.advance)
        resumed = f" (resumed after {done})" if done else ""
        click.echo(f"{name}: indexed {count} memories{resumed}")


@cli.command()
@host_option("Bind address (default from config: 127.0.0.1).")
@port_option("Port, 1-65535 (default from config: 8765).")
@pass_context
def serve(ctx: Context, host: str | None, port: int | None) -> None:
    """Serve the read API (search, memories, ingest, health, metrics, dream requests).

    \b
    Without the daemon (`secretary run`) no job runs on a schedule, but dream
    requests (POST /v1/dream) run here, unless a daemon starts and takes them.
    """
    from secretary.console_ops import console_ops
    from secretary.dispatch import in_process_dreamer
    from secretary.status_config import status_config
    from store.api.app import serve as serve_api

    settings = ctx.settings
    if host or port:
        api = settings.api.model_copy(
            update={k: v for k, v in {"host": host, "port": port}.items() if v}
        )
        ctx._settings = settings.model_copy(update={"api": api})
    with _store(ctx) as store:
        # No daemon here: the API runs the dream requests itself while no daemon does.
        dreamer = in_process_dreamer(store, ctx.settings)
        with listening(store.settings.api.host, store.settings.api.port):
            serve_api(
                store,
                status=status_config(ctx.settings),
                dreamer=dreamer,
                console=console_ops(store, ctx.settings),
            )


def _safe_url(settings: Settings) -> str:
    return str(settings.redacted()["database"]["url"] or settings.database_url)


def _index_place(store: Any) -> str:
    return store.settings.index.chroma_url or str(store.settings.chroma_path)


cli.add_command(dream)
cli.add_command(plans)
cli.add_command(run)
cli.add_command(schedule)
cli.add_command(records)
cli.add_command(undo)
cli.add_command(status)
cli.add_command(memory)
memory.add_command(edit)
memory.add_command(delete)
cli.add_command(forget)
cli.add_command(namespaces)
cli.add_command(export)
cli.add_command(import_)
cli.add_command(mcp)


def main() -> None:
    cli(prog_name="secretary")
