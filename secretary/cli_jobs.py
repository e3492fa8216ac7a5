"""`secretary dream` and `secretary plans`: run the maintenance jobs now, and approve plans.

Thin commands over ``secretary.runner`` and ``secretary.approval``; registered on the main group
by ``secretary.cli``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Any

import click
from loguru import logger

from secretary.cli_common import Context, _store, _sync, pass_context
from secretary.jobs.base import Plan
from secretary.jobs.registry import JOB_NAMES
from secretary.logs import Outage
from secretary.progress import StatusLine
from store.changes import plural
from store.clock import utc_now
from store.errors import SecretaryError
from store.operations import (
    CarryRecalls,
    CreateMemory,
    CreateRelation,
    InheritRelations,
    Operation,
    SetStatus,
    UpdateMemory,
)

if TYPE_CHECKING:  # the runner opens the whole store: loaded only by the commands using it
    from secretary.approval import PendingPlan
    from secretary.outcomes import RunOutcome
    from store.coordination.dream_requests import DreamRequests, DreamRequestView


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
@click.option(
    "--retry-quarantined",
    is_flag=True,
    help="Send the items quarantined after repeated failures to the model again.",
)
@click.option(
    "--no-wait",
    is_flag=True,
    help="With a daemon running: print the request's id and return at once.",
)
@pass_context
def dream(
    ctx: Context,
    job_names: tuple[str, ...],
    namespace: str | None,
    dry_run: bool,
    retry_quarantined: bool,
    no_wait: bool,
) -> None:
    """Run the maintenance jobs now: extract, link, audit, map traits, consolidate, purge.

    \b
    Each job only looks at what changed since its last run. Jobs that need the LLM are
    skipped while no model is configured ([llm] model). A job that backs off after
    failed runs runs all the same (the back-off holds the schedule's firings only), and
    its line says it overrode the back-off.
    Each job's outcome is printed as it finishes (on a terminal, a line on stderr says
    which job runs meanwhile).
    While a daemon runs on the store (`secretary run`), the daemon runs them: this
    command queues a request, waits and prints the outcomes as they come (--no-wait:
    prints the request's id; GET /v1/dream/ID shows it later). Without a daemon, and
    always with --dry-run, they run in this process. Ctrl-C ends with exit code 130:
    jobs that finished stay applied, the one cut short changes nothing.

    \b
    Exit codes:
      0    every job ran (a plan kept for approval included) or had nothing to
           do, or was skipped: no model configured, or a plan of it awaits
           approval (`secretary plans list`)
      1    a job failed (a batch that failed too often is quarantined then)
      75   none failed, but one did not run now: another process kept running
           it, or the daemon stopped before it was done; try again later
      130  interrupted (Ctrl-C)
    """
    with _interruptible() as interrupted, _store(ctx, namespace=namespace) as store:
        holder = None if dry_run else _live_daemon(store)
        if holder is not None:
            request = DreamAsk(
                namespace=namespace, jobs=job_names, retry_quarantined=retry_quarantined
            )
            outcomes = _ask_daemon(store, holder, request, wait=not no_wait, on=interrupted)
            if outcomes is None:
                return
        else:
            interrupted.message = (
                "jobs that finished stay applied; the one cut short changed nothing"
            )
            outcomes = _dream_here(ctx, store, namespace, job_names, dry_run, retry_quarantined)
    if not outcomes:
        click.echo("no namespace has memories or logs yet")
    code = dream_exit_code(outcomes)
    if code:
        raise SystemExit(code)


# What `secretary dream` exits with (its --help and the README say the same).
FAILED = 1
NOT_RUN = 75  # EX_TEMPFAIL: worth trying later
# How secretary.runner words a run it skipped for a while: another process running the job, or
# backing off after failed runs (a scheduled firing's words: a dream overrides the back-off, but
# an older daemon may still answer so). The outcomes a daemon stores keep only the words.
_NOT_NOW = ("backing off after ", "already running on ")


def dream_exit_code(outcomes: Sequence[Mapping[str, Any]]) -> int:
    """Given a dream's outcomes (as ``outcome_json`` shapes them), return its exit code:
    FAILED if a job failed, else NOT_RUN if one did not run now, else 0."""
    if any(outcome["status"] == "failed" for outcome in outcomes):
        return FAILED
    if any(
        outcome["status"] == "skipped" and str(outcome.get("message") or "").startswith(_NOT_NOW)
        for outcome in outcomes
    ):
        return NOT_RUN
    return 0


def _dream_here(
    ctx: Context,
    store: Any,
    namespace: str | None,
    job_names: tuple[str, ...],
    dry_run: bool,
    retry_quarantined: bool,
) -> list[dict[str, Any]]:
    from secretary.cycle import run_cycle
    from secretary.dispatch import outcome_json

    outcomes = run_cycle(
        store,
        ctx.settings,
        now=utc_now(),
        namespaces=[namespace] if namespace else None,
        jobs=job_names,
        dry_run=dry_run,
        retry_quarantined=retry_quarantined,
        manual=True,
        watch=_Echo(dry_run=dry_run),
    )
    if not dry_run:
        _sync(store)
    return [outcome_json(outcome) for outcome in outcomes]


class _Echo:
    """Print each run's line as it ends; on a terminal, say which one runs meanwhile."""

    def __init__(self, *, dry_run: bool) -> None:
        self.dry_run = dry_run
        self.line = StatusLine()

    def starting(self, job: str, namespace: str, *, done: int, total: int) -> None:
        self.line.show(f"[{done + 1}/{total}] {namespace} {job}: running...")

    def finished(self, outcome: RunOutcome) -> None:
        self.line.clear()
        click.echo(_outcome_line(outcome))
        if self.dry_run and outcome.plan is not None:
            _echo_plan(outcome.plan)


# -- asking the daemon -------------------------------------------------------------------------

WAIT_POLL_SECONDS = 0.5
WAIT_DOWN_SECONDS = 60.0  # how long a waiting `secretary dream` outlasts a database not answering


@dataclass(frozen=True, kw_only=True)
class DreamAsk:
    namespace: str | None
    jobs: tuple[str, ...]
    retry_quarantined: bool


def _live_daemon(store: Any) -> str | None:
    """Return the holder of the store's daemon lease, unless it expired or its process (on
    this host) is gone."""
    from store.coordination.leases import live_daemons

    daemons = live_daemons(store.engine, utc_now())
    return ", ".join(daemon.holder for daemon in daemons) or None


def _ask_daemon(
    store: Any, holder: str, ask: DreamAsk, *, wait: bool, on: Interrupted
) -> list[dict[str, Any]] | None:
    """Queue a request for the daemon; wait for its outcomes and print them (None: not waited).

    Raise DaemonGone if the daemon stops before it is done, DreamFailed if it failed.
    """
    requests = store.db.dream_requests
    request_id = requests.enqueue(
        namespace=ask.namespace,
        jobs=ask.jobs,
        retry_quarantined=ask.retry_quarantined,
        requested_by=f"cli:{socket.gethostname()}:{os.getpid()}",
        now=utc_now(),
    )
    on.describe = lambda: _stop_waiting(requests, request_id)
    if not wait:
        click.echo(f"dream request #{request_id} queued for the daemon ({holder})", err=True)
        click.echo(request_id)
        return None
    click.echo(f"dream request #{request_id}: the daemon ({holder}) runs it; waiting", err=True)
    request = _wait(store, requests, request_id)
    on.describe = None
    if request.status == "failed":
        raise DreamFailed(request_id, request.error or "no reason given")
    return [dict(outcome) for outcome in request.outcomes]


def _wait(store: Any, requests: DreamRequests, request_id: int) -> DreamRequestView:
    """Wait for the request to finish, printing each run's line once as the daemon stores it
    (each unit stores its runs as they end, so a new one may come before those printed), and
    reading again while the database does not answer, for at most ``WAIT_DOWN_SECONDS``."""
    from store.db import DatabaseError

    printed, line = set[str](), StatusLine()
    down = Outage("the database does not answer, trying again")
    while True:
        try:
            request, gone = _look(store, requests, request_id)
        except DatabaseError as exc:
            down.failed(exc)
            if down.lasted() > WAIT_DOWN_SECONDS:
                raise
            line.show(f"dream request #{request_id}: the database does not answer, trying again")
            time.sleep(WAIT_POLL_SECONDS)
            continue
        down.ok()
        for outcome in request.outcomes:
            if (key := json.dumps(outcome, sort_keys=True)) not in printed:
                printed.add(key)
                line.clear()
                click.echo(_stored_line(outcome))
        if request.finished or gone:
            line.clear()
            if gone:
                raise DaemonGone(request_id)
            return request
        line.show(
            f"dream request #{request_id}: {request.status}, {plural(len(printed), 'run')} done"
        )
        time.sleep(WAIT_POLL_SECONDS)


def _look(store: Any, requests: DreamRequests, request_id: int) -> tuple[DreamRequestView, bool]:
    """The request now, and whether it is gone: unfinished, and no live daemon to take it."""
    request = requests.get(request_id)
    assert request is not None  # nothing deletes requests
    if request.finished:
        return request, False
    picker, now = request.picked_by, utc_now()
    taken = request.status == "running" and picker and requests.picker_alive(picker, now=now)
    return request, not taken and _live_daemon(store) is None


def _stop_waiting(requests: DreamRequests, request_id: int) -> str:
    if requests.cancel(request_id, reason="cancelled: interrupted while waiting", now=utc_now()):
        return f"dream request #{request_id} cancelled before the daemon started it"
    return (
        f"the daemon goes on with dream request #{request_id}"
        f" (GET /v1/dream/{request_id} shows its outcomes)"
    )


class DaemonGone(SecretaryError):
    exit_code = NOT_RUN

    def __init__(self, request_id: int) -> None:
        super().__init__(
            f"the daemon stopped before dream request #{request_id} was done; it stays queued"
            " for the next daemon (or `secretary serve`) to run"
        )


class DreamFailed(SecretaryError):
    exit_code = FAILED

    def __init__(self, request_id: int, error: str) -> None:
        super().__init__(f"dream request #{request_id} failed: {error}")


# -- Ctrl-C --------------------------------------------------------------------------------------


@dataclass
class Interrupted:
    """What to say if Ctrl-C comes: a fixed line, or one worked out then (e.g. after a cancel)."""

    message: str = "nothing was changed"
    describe: Callable[[], str] | None = None


@contextmanager
def _interruptible() -> Iterator[Interrupted]:
    """End a Ctrl-C with one line on stderr and exit code 130 instead of a traceback."""
    said = Interrupted()

    def handler(_number: int, _frame: FrameType | None) -> None:
        # From here on the command says one line: the job boundary would log the interrupted
        # run's traceback, and a second Ctrl-C would break off the rollback and the cleanup.
        logger.remove()
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        yield said  # only the main thread gets signals (and may set their handlers)
        return
    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield said
    except KeyboardInterrupt:
        line = said.describe() if said.describe is not None else said.message
        click.echo(f"interrupted: {line}", err=True)
        raise SystemExit(130) from None
    finally:
        signal.signal(signal.SIGINT, previous)


@click.group()
def plans() -> None:
    """Plans waiting for approval ([jobs] approval = "changes" or "all")."""


@plans.command("list")
@click.option("--namespace", "-n", help="Only this namespace (default: all).")
@pass_context
def plans_list(ctx: Context, namespace: str | None) -> None:
    """List the plans awaiting approval, oldest first."""
    from secretary.approval import pending_plans

    with _store(ctx) as store:
        pending = pending_plans(store.db, namespace)
    if not pending:
        click.echo("no plans await approval")
    for plan in pending:
        click.echo(_pending_line(plan))


@plans.command("show")
@click.argument("record_id", type=int)
@pass_context
def plans_show(ctx: Context, record_id: int) -> None:
    """Show every change of a pending plan."""
    from secretary.approval import get_pending

    with _store(ctx) as store:
        pending = get_pending(store.db, record_id)
    click.echo(_pending_line(pending))
    _echo_plan(pending.as_plan())


@plans.command("approve")
@click.argument("record_id", type=int)
@pass_context
def plans_approve(ctx: Context, record_id: int) -> None:
    """Apply a pending plan, unless what it changes has changed since (exit code 1 then)."""
    from secretary.approval import approve_plan

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
    from secretary.approval import reject_plan

    with _store(ctx) as store:
        outcome = reject_plan(store, record_id, now=utc_now())
    click.echo(_outcome_line(outcome))


def _outcome_line(outcome: RunOutcome) -> str:
    return _line(
        outcome.namespace,
        outcome.job,
        outcome.status,
        outcome.record_id,
        outcome.message,
        outcome.records,
    )


def _stored_line(outcome: Mapping[str, Any]) -> str:
    """The line of an outcome as a dream request stores it (see ``outcome_json``)."""
    return _line(
        str(outcome.get("namespace")),
        str(outcome.get("job")),
        str(outcome.get("status")),
        outcome.get("record_id"),
        str(outcome.get("message") or ""),
        outcome.get("records") or (),
    )


def _line(
    namespace: str,
    job: str,
    status: str,
    record_id: int | None,
    message: str,
    records: Sequence[int] = (),
) -> str:
    """An outcome as a line, naming every record the run wrote ("records #3, #4")."""
    if len(records) > 1:
        record = " (records " + ", ".join(f"#{r}" for r in records) + ")"
    else:
        record = f" (record #{record_id})" if record_id is not None else ""
    if status == "nothing" and message.startswith("nothing"):  # not "nothing: nothing to do"
        return f"{namespace} {job}{record}: {message}"
    return f"{namespace} {job}: {status}{record}: {message}"


def _pending_line(plan: PendingPlan) -> str:
    return (
        f"#{plan.record_id} {plan.job} on {plan.namespace}, planned"
        f" {plan.planned_at.isoformat(timespec='seconds')}: {plural(len(plan.changes), 'change')}"
    )


def _echo_plan(plan: Plan) -> None:
    for change in plan.changes:
        click.echo(f"  - {change.label}")
        for op in change.operations:
            click.echo(f"      {describe(op)}")


def describe(op: Operation) -> str:
    """One line saying what an operation does, for dry runs and `secretary plans show`."""
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
        context = " and their place in the timeline" if op.context else ""
        return f"copy the relations{context} of {list(op.from_ids)} to {_ref(op.to)}"
    if isinstance(op, CarryRecalls):
        return f"add the recalls of #{op.from_id} to {_ref(op.to)}"
    return f"purge #{op.memory_id}"


def _ref(ref: int | str | None) -> str:
    return f"#{ref}" if isinstance(ref, int) else f"[{ref}]"


def _short(text: str, limit: int = 100) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
