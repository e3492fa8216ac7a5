"""`secretary dream` and `secretary plans`: run the maintenance jobs now, and approve plans.

Thin commands over ``secretary.jobs.runner``; registered on the main group by ``secretary.cli``.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

import click

from secretary.cli_common import Context, _store, _sync, pass_context
from secretary.clock import utc_now
from secretary.errors import SecretaryError
from secretary.jobs import JOB_NAMES

if TYPE_CHECKING:
    from secretary.jobs.base import Plan
    from secretary.jobs.runner import PendingPlan, RunOutcome
    from store.operations import Operation


@click.command()
@click.option(
    "--job",
    "-j",
    "job_names",
    multiple=True,
    type=click.Choice(JOB_NAMES),
    help="Only this job (repeatable; default: every job, in order).",
)
@click.option(
    "--namespace", "-n", help="Only this namespace (default: every one with memories or logs)."
)
@click.option("--dry-run", is_flag=True, help="Print what each job would do; write nothing.")
@pass_context
def dream(ctx: Context, job_names: tuple[str, ...], namespace: str | None, dry_run: bool) -> None:
    """Run the maintenance jobs now: extract, link, audit, map traits, consolidate, purge.

    \b
    Each job only looks at what changed since its last run. Jobs that need the LLM are
    skipped while no model is configured ([llm] model). Exit code 1 if a job failed.
    Refused while a daemon runs on the store (its jobs would race these).
    """
    from secretary.jobs.runner import run_cycle

    with _store(ctx) as store:
        if not dry_run:
            _refuse_if_daemon_running(store)
        outcomes = run_cycle(
            store,
            ctx.settings,
            now=utc_now(),
            namespaces=[namespace] if namespace else None,
            jobs=job_names,
            dry_run=dry_run,
        )
        for outcome in outcomes:
            click.echo(_outcome_line(outcome))
            if dry_run and outcome.plan is not None:
                _echo_plan(outcome.plan)
        if not dry_run:
            _sync(store)
    if not outcomes:
        click.echo("no namespace has memories or logs yet")
    if any(outcome.status == "failed" for outcome in outcomes):
        raise SystemExit(1)


def _refuse_if_daemon_running(store: Any) -> None:
    from secretary.lease import current_lease

    held = current_lease(store.engine)
    if held is not None and held.expires_at > utc_now():
        raise DaemonRunning(held.holder, held.expires_at)


class DaemonRunning(SecretaryError):
    exit_code = 75

    def __init__(self, holder: str, expires_at: datetime) -> None:
        super().__init__(
            f"a secretary daemon ({holder}) runs on this store, and its scheduled jobs would race"
            " these: stop it first, or change its schedule with `secretary schedule set`"
            f" (its lease runs until {expires_at.isoformat(timespec='seconds')})"
        )


@click.group()
def plans() -> None:
    """Plans waiting for approval ([jobs] approval = "changes" or "all")."""


@plans.command("list")
@click.option("--namespace", "-n", help="Only this namespace (default: all).")
@pass_context
def plans_list(ctx: Context, namespace: str | None) -> None:
    """List the plans awaiting approval, oldest first."""
    from secretary.jobs.runner import pending_plans

    with _store(ctx) as store:
        pending = pending_plans(store.repository, namespace)
    if not pending:
        click.echo("no plans await approval")
    for plan in pending:
        click.echo(_pending_line(plan))


@plans.command("show")
@click.argument("record_id", type=int)
@pass_context
def plans_show(ctx: Context, record_id: int) -> None:
    """Show every change of a pending plan."""
    from secretary.jobs.runner import get_pending

    with _store(ctx) as store:
        pending = get_pending(store.repository, record_id)
    click.echo(_pending_line(pending))
    _echo_plan(pending.as_plan())


@plans.command("approve")
@click.argument("record_id", type=int)
@pass_context
def plans_approve(ctx: Context, record_id: int) -> None:
    """Apply a pending plan, unless what it changes has changed since (exit code 1 then)."""
    from secretary.jobs.runner import approve_plan

    with _store(ctx) as store:
        outcome = approve_plan(store, ctx.settings, record_id, now=utc_now())
        if outcome.status == "applied":
            _sync(store)
    click.echo(_outcome_line(outcome))
    if outcome.status != "applied":
        raise SystemExit(1)


@plans.command("reject")
@click.argument("record_id", type=int)
@pass_context
def plans_reject(ctx: Context, record_id: int) -> None:
    """Drop a pending plan; the job will not propose the same changes again."""
    from secretary.jobs.runner import reject_plan

    with _store(ctx) as store:
        outcome = reject_plan(store, record_id, now=utc_now())
    click.echo(_outcome_line(outcome))


def _outcome_line(outcome: RunOutcome) -> str:
    record = f" (record #{outcome.record_id})" if outcome.record_id is not None else ""
    return f"{outcome.namespace} {outcome.job}: {outcome.status}{record}: {outcome.message}"


def _pending_line(plan: PendingPlan) -> str:
    return (
        f"#{plan.record_id} {plan.job} on {plan.namespace}, planned"
        f" {plan.planned_at.isoformat(timespec='seconds')}: {len(plan.changes)} change(s)"
    )


def _echo_plan(plan: Plan) -> None:
    for change in plan.changes:
        click.echo(f"  - {change.label}")
        for op in change.operations:
            click.echo(f"      {describe(op)}")


def describe(op: Operation) -> str:
    """One line saying what an operation does, for dry runs and `secretary plans show`."""
    # Imported here: the store's models are not needed to start the CLI.
    from store.operations import (
        CreateMemory,
        CreateRelation,
        InheritRelations,
        SetStatus,
        UpdateMemory,
    )

    if isinstance(op, CreateMemory):
        where = f", replacing {list(op.replaces_in_timeline)}" if op.replaces_in_timeline else ""
        return (
            f"create {op.type} [{op.key}] at {op.event_time.isoformat()}{where}:"
            f" {_short(op.content)}"
        )
    if isinstance(op, UpdateMemory):
        return f"update #{op.memory_id}: {_short(repr(dict(op.changes)))}"
    if isinstance(op, SetStatus):
        by = f" (replaced by {_ref(op.replaced_by)})" if op.replaced_by is not None else ""
        return f"set #{op.memory_id} {op.status.value}{by}"
    if isinstance(op, CreateRelation):
        return f"relate {_ref(op.source)} -{op.type}-> {_ref(op.target)} ({op.strength:.2f})" + (
            f": {_short(op.description)}" if op.description else ""
        )
    if isinstance(op, InheritRelations):
        return f"copy the relations of {list(op.from_ids)} to {_ref(op.to)}"
    return f"purge #{op.memory_id}"


def _ref(ref: int | str | None) -> str:
    return f"#{ref}" if isinstance(ref, int) else f"[{ref}]"


def _short(text: str, limit: int = 100) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
