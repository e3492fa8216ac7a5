"""The `secretary` command: a thin layer that parses, calls one library function, and reports.

Our errors become a one-line message on stderr and a non-zero exit code; nothing here holds logic
that the API or the daemon would need too.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import click

from secretary import __version__
from secretary.cli_common import (
    Context,
    _Group,
    _store,
    _sync,
    namespace_option,
    pass_context,
)
from secretary.cli_daemon import run, schedule
from secretary.cli_jobs import dream, plans
from secretary.cli_records import records, undo
from secretary.clock import parse_timestamp, utc_now
from secretary.config import Settings
from secretary.logs import configure as configure_logging
from secretary.progress import progress


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
@click.option("--log-level", default="INFO", show_default=True, help="DEBUG, INFO, WARNING, ...")
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


@cli.group("config")
def config_group() -> None:
    """Configuration commands."""


@config_group.command("check")
@pass_context
def config_check(ctx: Context) -> None:
    """Validate the configuration and print the effective settings, secrets hidden."""
    click.echo(json.dumps(ctx.settings.redacted(), indent=2, sort_keys=True))


@cli.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@namespace_option
@click.option("--logs", is_flag=True, help="FILE holds conversation logs, not memories.")
@click.option("--no-index", is_flag=True, help="Leave embedding to the daemon (outbox).")
@pass_context
def ingest(ctx: Context, file: Path, namespace: str, logs: bool, no_index: bool) -> None:
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
    with its number and nothing is written.
    """
    from store.ingest import count_lines, ingest_file

    with _store(ctx) as store:
        with progress(f"ingesting {file.name}", count_lines(file)) as bar:
            report = ingest_file(
                store, file, namespace=namespace, logs=logs, now=utc_now(), advance=bar.advance
            )
        click.echo(
            f"{report.lines} lines: {report.created} new, {report.skipped} already present "
            f"({report.kind}, namespace {namespace!r})"
        )
        if report.kind != "logs" and not no_index:
            _sync(store)


def _parse_meta(values: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    pairs = []
    for value in values:
        key, sep, wanted = value.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {value!r}", param_hint="--meta")
        pairs.append((key, wanted))
    return tuple(pairs)


def _parse_time(value: str | None, name: str) -> datetime | None:
    if value is None:
        return None
    try:
        return parse_timestamp(value)
    except ValueError:
        raise click.BadParameter(f"not an ISO-8601 time: {value!r}", param_hint=name) from None


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
@click.option("--min-score", type=float, help="Drop hits scoring below this.")
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
    from store.memory_view import hit_json
    from store.search import SearchFilters, SearchRequest

    filters = SearchFilters(
        types=types,
        tags=tags,
        since=_parse_time(since, "--since"),
        until=_parse_time(until, "--until"),
        metadata=_parse_meta(meta),
    )
    request = SearchRequest(
        namespace=namespace,
        query=query,
        k=k,
        filters=filters,
        min_score=min_score,
        reinforce=reinforce,
    )
    with _store(ctx) as store:
        now = utc_now()
        result = store.searcher.search(request, now=now)
        if reinforce and result.hits:
            config = store.settings.reinforcement
            store.repository.reinforce(
                {hit.memory.id: 1 for hit in result.hits},
                now=now,
                step=config.importance_step,
                max_boost=config.max_boost,
            )
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


@cli.command()
@namespace_option
@pass_context
def export(ctx: Context, namespace: str) -> None:
    """Print the namespace as deterministic JSONL: every memory (any status) and relation.

    The output is a backup: `secretary ingest FILE --namespace NS` restores it.
    """
    with _store(ctx) as store:
        for line in store.repository.export(namespace):
            sys.stdout.write(line + "\n")


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
    SQL), stale (indexed at another version). Pending outbox entries count as drift.
    """
    drifted = False
    with _store(ctx) as store:
        for name in _namespaces(store, namespace):
            drift = store.indexer.verify(name)
            state = "ok" if drift.clean else "DRIFT"
            click.echo(
                f"{name}: {state} missing={len(drift.missing)} extra={len(drift.extra)} "
                f"stale={len(drift.stale)}"
            )
            for kind in ("missing", "extra", "stale"):
                ids = getattr(drift, kind)
                if ids:
                    shown = ", ".join(map(str, ids[:20])) + (" ..." if len(ids) > 20 else "")
                    click.echo(f"  {kind}: {shown}")
            drifted = drifted or not drift.clean
    if drifted:
        raise SystemExit(1)


@index.command("rebuild")
@click.option("--namespace", "-n", help="Only this namespace (default: all).")
@pass_context
def index_rebuild(ctx: Context, namespace: str | None) -> None:
    """Drop and rebuild the index from SQL (the truth)."""
    with _store(ctx) as store:
        for name in _namespaces(store, namespace):
            total = len(store.repository.index_state(name))
            with progress(f"rebuilding {name}", total) as bar:
                count = store.indexer.rebuild(name, progress=bar.advance)
            click.echo(f"{name}: indexed {count} memories")
        _sync(store)


@index.command("sync")
@pass_context
def index_sync(ctx: Context) -> None:
    """Apply the pending outbox to the index now (the daemon does this continuously)."""
    with _store(ctx) as store:
        _sync(store)
        click.echo(f"outbox empty: {store.repository.outbox_size() == 0}")


@cli.command()
@click.option("--host", help="Bind address (default from config: 127.0.0.1).")
@click.option("--port", type=int, help="Port (default from config: 8765).")
@pass_context
def serve(ctx: Context, host: str | None, port: int | None) -> None:
    """Serve the read API (search, memories, ingest, health, metrics)."""
    from store.api import serve as serve_api

    settings = ctx.settings
    if host or port:
        api = settings.api.model_copy(
            update={k: v for k, v in {"host": host, "port": port}.items() if v}
        )
        ctx._settings = settings.model_copy(update={"api": api})
    with _store(ctx) as store:
        serve_api(store)


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


def main() -> None:
    cli(prog_name="secretary")
