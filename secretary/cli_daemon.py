"""The daemon's commands: `secretary run` and `secretary schedule show|set|pause|resume|reset`.

Kept apart from ``secretary.cli`` (which registers ``run`` and ``schedule``) so that the
scheduler's imports load only for these commands.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime

import click
from loguru import logger

from secretary.cli_common import Context, host_option, pass_context, port_option
from secretary.config import Settings, load_settings
from secretary.cron import InvalidCron, validate_cron
from secretary.jobs.registry import JOB_NAMES
from secretary.scheduler import PlannedJob, ScheduleBook, plan_schedule
from store.clock import utc_now

job_argument = click.argument("job", metavar="JOB", type=click.Choice(JOB_NAMES))


@contextmanager
def _book(ctx: Context) -> Iterator[ScheduleBook]:
    # The schedule commands need the database only: opening the whole store (Chroma, the
    # embedder) would cost seconds for a one-row change.
    from store.coordination.schedules import ScheduleTable
    from store.db import check_schema, make_engine

    engine = make_engine(ctx.settings.database_url)
    try:
        check_schema(engine)
        yield ScheduleBook(ScheduleTable(engine))
    finally:
        engine.dispose()


def _with_api(settings: Settings, host: str | None, port: int | None) -> Settings:
    if not (host or port):
        return settings
    wanted = {key: value for key, value in {"host": host, "port": port}.items() if value}
    return settings.model_copy(update={"api": settings.api.model_copy(update=wanted)})


@click.command("run")
@host_option("Bind address of the API (default from config: 127.0.0.1).")
@port_option("Port of the API, 1-65535 (default from config: 8765).")
@pass_context
def run(ctx: Context, host: str | None, port: int | None) -> None:
    """Run the daemon: the read API plus the scheduled maintenance jobs.

    \b
    One daemon per store: a second one (on any host) refuses to start while the
    first holds the store's lease in the database (exit code 75).
    Under systemd (Type=notify) it reports READY, STATUS and watchdog pings.
    SIGHUP re-reads the config and the schedule; SIGTERM stops starting jobs,
    waits for the running one (schedule.stop_timeout_seconds), flushes and exits 0.
    """
    from secretary.daemon import run_daemon

    def reload_settings() -> Settings:
        return _with_api(load_settings(ctx.config, data_dir=ctx.data_dir), host, port)

    result = run_daemon(_with_api(ctx.settings, host, port), reload_settings=reload_settings)
    if result.abandoned:
        # The job's thread cannot be interrupted and would be joined at interpreter exit,
        # which is exactly the unbounded wait the stop timeout exists to prevent.
        logger.complete()
        os._exit(result.code)
    if result.code:
        raise SystemExit(result.code)


@click.group()
def schedule() -> None:
    """When the daemon runs each job: show, set, pause, resume or reset a job's schedule.

    Changes are stored in the database and override the config file's [schedule];
    a running daemon picks them up within schedule.poll_seconds, without a restart.
    """


@schedule.command("show")
@click.option("--count", default=3, show_default=True, type=click.IntRange(1, 100))
@click.option("--json", "as_json", is_flag=True, help="Print the schedule as JSON.")
@pass_context
def schedule_show(ctx: Context, count: int, as_json: bool) -> None:
    """Print each job's schedule, where it comes from, and its next fire times."""
    from store.coordination.leases import live_daemons

    now = utc_now()
    with _book(ctx) as book:
        overrides = book.entries()
        daemons = live_daemons(book.table.engine, now)
    plan = plan_schedule(ctx.settings.schedule, overrides, now=now, count=count)
    holder = ", ".join(daemon.holder for daemon in daemons) or None
    since = min((daemon.acquired_at for daemon in daemons), default=None)
    if as_json:
        jobs = [{**_job_json(job), "firing": _firing(job, since)} for job in plan]
        click.echo(json.dumps({"daemon": holder, "jobs": jobs}, indent=2))
        return
    click.echo(f"time zone: {ctx.settings.schedule.timezone}; daemon: {holder or 'not running'}")
    for job in plan:
        click.echo(_job_line(job))
        firing = _firing(job, since)
        if firing == "cut short":
            started = job.schedule.last_fired_at
            when = started.isoformat(timespec="minutes") if started else "?"
            click.echo(
                f"{'':<13} its firing of {when} was cut short (the daemon stopped while it ran):"
                " it runs again when the daemon starts, within the misfire grace"
            )


def _firing(job: PlannedJob, daemon_since: datetime | None) -> str | None:
    """ "running" while the live daemon runs a firing, "cut short" if one started and never
    ended (the daemon died), else None."""
    started = job.schedule.last_fired_at
    if not job.schedule.interrupted or started is None:
        return None
    running = daemon_since is not None and started >= daemon_since
    return "running" if running else "cut short"


def _state(job: PlannedJob) -> str:
    if job.problem:
        return "invalid"
    if job.schedule.paused:
        return "paused"
    return "active" if job.schedule.cron else "off"


def _job_json(job: PlannedJob) -> dict[str, object]:
    entry = job.schedule
    return {
        "job": entry.job,
        "cron": entry.cron,
        "source": entry.source,
        "state": _state(job),
        "next": [time.isoformat() for time in job.next_times],
        "last_fired_at": entry.last_fired_at.isoformat() if entry.last_fired_at else None,
        "problem": job.problem or None,
    }


def _job_line(job: PlannedJob) -> str:
    entry = job.schedule
    cron = entry.cron or "(none)"
    times = ", ".join(time.isoformat(timespec="minutes") for time in job.next_times)
    after = job.problem or (f"next: {times}" if times else "")
    return f"{entry.job:<13} {cron:<16} {entry.source:<8} {_state(job):<7} {after}".rstrip()


@schedule.command("set")
@job_argument
@click.argument("cron")
@pass_context
def schedule_set(ctx: Context, job: str, cron: str) -> None:
    """Run JOB on the cron expression CRON, e.g. set consolidator "0 4 * * *".

    \b
    CRON has 5 fields: minute hour day-of-month month day-of-week (0 or 7 = Sunday),
    read in schedule.timezone; @hourly, @daily, @weekly and @monthly work too.
    `secretary schedule reset JOB` returns to the config file's expression.
    To stop JOB from running, use `secretary schedule pause JOB` (and resume).
    """
    if not cron.strip():  # the config file's "" = never; here pause says it
        raise click.BadParameter(
            f"an empty expression: to stop {job} from running use `secretary schedule pause"
            f" {job}` (and `secretary schedule resume {job}` to start it again)",
            param_hint="CRON",
        )
    try:
        normal = validate_cron(cron)
    except InvalidCron as exc:
        raise click.BadParameter(str(exc), param_hint="CRON") from None
    with _book(ctx) as book:
        book.set_cron(job, normal, now=utc_now())
    click.echo(f"{job}: {normal} (stored; a running daemon applies it within seconds)")
    _echo_next(ctx, job)


@schedule.command("pause")
@job_argument
@pass_context
def schedule_pause(ctx: Context, job: str) -> None:
    """Stop starting JOB until `secretary schedule resume JOB` (a running JOB finishes)."""
    with _book(ctx) as book:
        book.set_paused(job, True, now=utc_now())
    click.echo(f"{job}: paused")


@schedule.command("resume")
@job_argument
@pass_context
def schedule_resume(ctx: Context, job: str) -> None:
    """Start running a paused JOB on its schedule again."""
    with _book(ctx) as book:
        book.set_paused(job, False, now=utc_now())
    click.echo(f"{job}: resumed")
    _echo_next(ctx, job)


@schedule.command("reset")
@job_argument
@pass_context
def schedule_reset(ctx: Context, job: str) -> None:
    """Forget JOB's expression set with `schedule set`: the config file's applies again."""
    with _book(ctx) as book:
        book.reset(job, now=utc_now())
    click.echo(f"{job}: back to the config file's schedule")
    _echo_next(ctx, job)


def _echo_next(ctx: Context, job: str) -> None:
    with _book(ctx) as book:
        overrides = book.entries()
    plan = plan_schedule(ctx.settings.schedule, overrides, now=utc_now(), count=3)
    click.echo(next(_job_line(entry) for entry in plan if entry.schedule.job == job))


__all__ = ["run", "schedule"]
