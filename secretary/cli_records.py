"""`secretary records` and `secretary undo`: read what jobs did, and take it back.

Thin commands over store.shapes.records, store.shapes.diff and store.write.undo; the main group
(secretary.cli) turns our errors into a message and an exit code.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import click

from secretary.cli_common import Context, _store, _sync, pass_context
from store.clock import utc_now
from store.kinds import RecordStatus

if TYPE_CHECKING:
    from store.write.undo import UndoPlan

_STATUSES = tuple(status.value for status in RecordStatus)
_SHOWN_CHARS = 80  # longer values are cut in the text view; --json has them whole


@click.group()
def records() -> None:
    """Maintenance records: what each job run, ingest batch and undo changed."""


@records.command("list")
@click.option("--namespace", "-n", help="Only this namespace (default: all).")
@click.option("--job", help="Only records of this job (ingest, consolidator, undo, ...).")
@click.option("--status", type=click.Choice(_STATUSES), help="Only records with this status.")
@click.option(
    "--limit",
    default=20,
    show_default=True,
    type=click.IntRange(1, 100_000),
    help="At most this many.",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array of records.")
@pass_context
def records_list(
    ctx: Context,
    namespace: str | None,
    job: str | None,
    status: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """List records, newest first: job, namespace, status, duration, changes by kind, tokens,
    cost, and the error or why the run was refused, stopped or skipped."""
    from store.shapes.records import record_summary_json

    namespaces = (namespace,) if namespace else None
    with _store(ctx, namespace=namespace) as store:
        found = store.db.records.find(
            namespaces=namespaces, job=job, status=status, limit=limit + 1
        )
        more, found = len(found) > limit, found[:limit]
        changes = store.db.records.change_counts(record.id for record in found)
        # A job no record names is most likely mistyped: say which jobs have records.
        known = store.db.records.jobs(namespaces=namespaces) if job and not found else None
    views = [record_summary_json(record, changes.get(record.id, {})) for record in found]
    if as_json:
        click.echo(json.dumps(views, indent=2))
        return
    if not views:
        if known is not None and job not in known:
            having = ", ".join(known) if known else "none"
            click.echo(f"no records of job {job!r}; the jobs with records: {having}")
        else:
            click.echo("no records")
    for view in views:
        click.echo(_record_line(view))
    if more:  # as `memory list` says there is a next page
        click.echo(f"more: older records than #{views[-1]['id']}; --limit {limit * 2} shows more")


def _record_line(view: Mapping[str, Any]) -> str:
    """One record: who, when, how it ended and how long it took; what it did; what it dropped,
    quarantined and spent; and its error or why it did less than it might have."""
    from store.changes import plural

    links = ""
    if view["undoes_id"] is not None:
        links += f" (undoes #{view['undoes_id']})"
    if view["undone_by_id"] is not None:
        links += f" (undone by #{view['undone_by_id']})"
    took = f" {view['duration_seconds']:.1f}s" if view["duration_seconds"] is not None else ""
    line = (
        f"#{view['id']} {view['started_at']} {view['job']} "
        f"[{view['namespace']}] {view['status']}{links}{took}: {view['summary']}"
    )
    if view["dropped_count"]:
        line += f"; dropped {plural(view['dropped_count'], 'item')}"
    if view["quarantined_count"]:
        line += f"; quarantined {plural(view['quarantined_count'], 'item')}"
    if view["tokens_in"] or view["tokens_out"]:
        line += f"; {view['tokens_in']:,} + {view['tokens_out']:,} tokens"
        if view["cost"]:
            line += f" (cost {view['cost']:.4f})"
    if view["error"]:
        line += f"; error: {_cut(view['error'])}"
    if view["reason"]:
        line += f"; {_cut(view['reason'])}"
    return line


def _cut(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."


@records.command("show")
@click.argument("record_id", metavar="ID", type=click.IntRange(min=1))
@click.option("--json", "as_json", is_flag=True, help="Print the record and full images as JSON.")
@pass_context
def records_show(ctx: Context, record_id: int, as_json: bool) -> None:
    """Show one record with its operations, in order, and what each changed, and the items
    its run dropped or quarantined, and why."""
    from store.shapes.records import record_show_json

    with _store(ctx) as store:
        record, operations = store.db.records.get(record_id)
    view = record_show_json(record, operations)
    if as_json:
        click.echo(json.dumps(view, indent=2))
        return
    click.echo(_record_line(view))
    if view["model"]:
        click.echo(f"model {view['model']}: {view['tokens_in']} in, {view['tokens_out']} out")
    if view["error"]:
        click.echo(f"error: {view['error']}")
    if view["reason"]:
        click.echo(f"reason: {view['reason']}")
    if view["dropped"]:
        click.echo(f"dropped ({len(view['dropped'])}):")
        for item in view["dropped"]:
            click.echo(f"  {_cut(item['item'])}: {item['reason']}")
    if view["quarantined"]:
        ids = ", ".join(f"#{i}" for i in view["quarantined"])
        click.echo(f"quarantined ({len(view['quarantined'])}): {ids}")
    click.echo(f"stats: {json.dumps(view['stats'], sort_keys=True)}")
    for operation in view["operations"]:
        click.echo(
            f"  {operation['seq']:>3} {operation['op']} "
            f"{operation['target_kind']} {operation['target_id']}"
        )
        for line in _image_lines(operation["before"], operation["after"]):
            click.echo(f"        {line}")


@records.command("diff")
@click.argument("record_id", metavar="RECORD", type=click.IntRange(min=1))
@click.option("--json", "as_json", is_flag=True, help="Print the account as JSON.")
@pass_context
def records_diff(ctx: Context, record_id: int, as_json: bool) -> None:
    """Tell what a record changed, readably: memory texts before -> after, merges as
    "#12, #19 -> #31: <summary>", supersedes, archives, traits with their evidence, new
    relations with both ends' text, purges; for an undo, what it put back."""
    from store.shapes.diff import diff_json, record_diff

    with _store(ctx) as store:
        record, operations = store.db.records.get(record_id)
        memories = store.db.memories
        diff = record_diff(record, operations, lambda ids: memories.texts(record.namespace, ids))
    if as_json:
        click.echo(json.dumps(diff_json(diff), indent=2, ensure_ascii=False))
        return
    for line in diff.lines():
        click.echo(line)


def _image_lines(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> list[str]:
    """Describe an operation: changed fields for an update, the content for a create/delete."""
    if before is not None and after is not None:
        return [
            f"{name}: {_short(before.get(name))} -> {_short(after.get(name))}"
            for name in sorted(before.keys() | after.keys())
            if before.get(name) != after.get(name)
        ]
    image = after if after is not None else before or {}
    shown = "content" if "content" in image else "type"
    return [f"{shown}: {_short(image.get(shown))}"]


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."


@click.command()
@click.argument("record_id", metavar="RECORD", type=click.IntRange(min=1))
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print what would be restored, any conflicts and the records they come from; write"
    " nothing. With --cascade, print every record the cascade would undo.",
)
@click.option(
    "--cascade",
    is_flag=True,
    help="Also undo the later records that depend on this one (a refused undo names them),"
    " newest first, in the same transaction and as one undo record.",
)
@click.option(
    "--force",
    is_flag=True,
    help="Apply the parts that do not conflict; the undo record lists what was skipped. With"
    " --cascade: skip only what no later record explains (what an erasure made final).",
)
@click.option("--no-index", is_flag=True, help="Leave re-embedding to the daemon (outbox).")
@pass_context
def undo(
    ctx: Context, record_id: int, dry_run: bool, cascade: bool, force: bool, no_index: bool
) -> None:
    """Undo a record: put back the fields it changed, in one transaction.

    Only what the record changed is restored: a later change to other fields of the same
    memories stays, and the timeline and versions are recomputed. The undo is a record of its
    own (job "undo"), so it can be undone in turn.

    If a later record changed the same fields, or built on what this one created (a relation
    to a memory it added, say), nothing is written and the later records are named, newest
    first: undo them first, or add --cascade to undo them with this one. --force instead
    applies only the parts that do not conflict. Recall statistics are kept. --dry-run exits
    with 1 if the undo, as asked, would be refused.

    \b
    Examples:
      secretary undo 42 --dry-run            what it would do, and what blocks it
      secretary undo 42 --cascade --dry-run  every record a cascade would take back
      secretary undo 42 --cascade
    """
    from store.changes import plural
    from store.write.undo import (
        NothingToUndo,
        UndoConflict,
        cascade_order,
        plan_cascade,
        plan_undo,
    )
    from store.write.undo import undo as undo_record

    with _store(ctx) as store:
        try:
            if dry_run and cascade:
                parts = plan_cascade(store.db.writer, record_id, now=utc_now(), force=force).parts
                if len(parts) > 1:
                    order = ", ".join(f"#{part.record_id}" for part in parts)
                    click.echo(f"undoing record {record_id} with --cascade undoes {order}:")
                for part in parts:
                    _print_plan(part, cascading=True)
                click.echo("dry run: nothing written")
                return
            if dry_run:
                plan = plan_undo(store.db.writer, record_id)
                later = None
                if plan.dependents and not any(d.final for d in plan.dependents):
                    later = cascade_order(store.db.writer, record_id, now=utc_now(), force=force)
                _print_plan(plan, cascade=later)
                if plan.conflicts and not (force and plan.applicable):
                    click.echo("dry run: nothing written; this undo would be refused")
                    raise click.exceptions.Exit(1)
                click.echo("dry run: nothing written")
                return
            result = undo_record(
                store.db.writer, record_id, now=utc_now(), force=force, cascade=cascade
            )
        except NothingToUndo as exc:  # not a failure: the store is as undoing it would leave it
            click.echo(f"nothing to undo: {exc}")
            return
        except UndoConflict as exc:  # a line each, not one run-on sentence
            click.echo("error: " + "\n".join(exc.lines()), err=True)
            raise click.exceptions.Exit(1) from None
        also = ""
        if result.cascaded:
            also = " with " + ", ".join(f"#{rid}" for rid in result.cascaded) + " (--cascade)"
        click.echo(
            f"record {record_id}{also} undone by record {result.record_id}: "
            f"{plural(result.restored, 'row')} put back as before"
        )
        for conflict in result.skipped:
            click.echo(f"  skipped {conflict.describe()}")
        if not no_index:
            _sync(store)


def _print_plan(
    plan: UndoPlan, *, cascading: bool = False, cascade: tuple[int, ...] | None = None
) -> None:
    """Print what undoing a record would do; ``cascade``: the later records --cascade would
    undo with it (None: it would be refused, or was not asked)."""
    click.echo(f"undoing record {plan.record_id} ({plan.job}, namespace {plan.namespace!r}) would:")
    for step in plan.applicable:
        click.echo(f"  {step.describe()}")
    if not plan.applicable:
        click.echo("  nothing: every part conflicts")
    if plan.conflicts and not cascading:
        skipped = "refused unless --force skips them" if plan.applicable else "refused"
        click.echo(f"conflicts ({len(plan.conflicts)}), {skipped}:")
        for conflict in plan.conflicts:
            click.echo(f"  {conflict.describe()}")
    if plan.dependents and not cascading:
        click.echo("later records it depends on, newest first:")
        for dependent in plan.dependents:
            click.echo(f"  {dependent.describe()}")
        if any(dependent.final for dependent in plan.dependents):
            click.echo(
                "an erasure cannot be undone, so --cascade cannot take it back;"
                " --force skips what it erased"
            )
        elif cascade is None:
            click.echo("--cascade would be refused too (--cascade --dry-run says why)")
        else:
            order = ", ".join(f"#{rid}" for rid in cascade)
            click.echo(f"--cascade undoes {order} with it (--cascade --dry-run shows each part)")
