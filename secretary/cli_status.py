"""`secretary status`: the daemons and what each runs, the night's progress, the schedule, and
per namespace how its jobs are doing.

A thin command over ``store.status`` (what GET /v1/status serves too).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import click

from secretary.cli_common import Context, _store, pass_context
from store.changes import plural
from store.clock import utc_now

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from store.status import (
        DaemonStatus,
        FiringStatus,
        Holding,
        JobStatus,
        NamespaceStatus,
        ScheduleStatus,
        Status,
    )

NAMES_SHOWN = 5  # namespaces named per firing a daemon runs; the rest are counted


@click.command()
@click.option("--namespace", "-n", help="Only this namespace (default: every one with work).")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@pass_context
def status(ctx: Context, namespace: str | None, as_json: bool) -> None:
    """Show the running daemons and what each runs, the night's open firings (units done,
    running, left, and when they should end), each job's next firing, and per namespace each
    job's last outcome, failures, back-off, quarantined items, backlog and the day's tokens."""
    from secretary.status_config import status_config
    from store.status import read_status
    from store.status.shape import status_json

    config = status_config(ctx.settings)
    with _store(ctx, namespace=namespace) as store:
        found = read_status(
            store.db, config, now=utc_now(), namespaces=(namespace,) if namespace else None
        )
        planned = None if found.daemons or as_json else _planned(ctx, store.engine, found.now)
    if as_json:
        click.echo(json.dumps(status_json(found), indent=2))
        return
    for line in status_lines(found, planned=planned):
        click.echo(line)


def _planned(ctx: Context, engine: Engine, now: datetime) -> dict[str, datetime]:
    """Each job's next firing by the schedule, as `schedule show` says it, for a store that
    no daemon runs (the daemon publishes its own)."""
    from secretary.scheduler import ScheduleBook, plan_schedule
    from store.coordination.schedules import ScheduleTable

    overrides = ScheduleBook(ScheduleTable(engine)).entries()
    plan = plan_schedule(ctx.settings.schedule, overrides, now=now, count=1)
    return {job.schedule.job: job.next_times[0] for job in plan if job.next_times}


def status_lines(found: Status, *, planned: Mapping[str, datetime] | None = None) -> list[str]:
    """The status as text lines; ``planned``: each job's next firing by its schedule, shown
    while no daemon runs."""
    daemon = found.daemon
    if found.daemons:
        lines = [f"daemons: {len(found.daemons)} running"]
        lines += [f"  {_daemon_line(running, found.now)}" for running in found.daemons]
    elif daemon.holder is not None:
        lines = [
            f"daemon: not running (last {daemon.holder}, lease ran out {_at(daemon.expires_at)})"
        ]
    else:
        lines = ["daemon: not running"]
    lines += _night_lines(found.firings, found.now)
    lines.append("schedule:")
    lines += [f"  {_schedule_line(entry, planned or {})}" for entry in found.schedule]
    limit = found.max_tokens_per_day
    for space in found.namespaces:
        lines.append(f"namespace {space.namespace!r}: {_budget(space, limit)}")
        lines += [f"  {_job_line(job)}" for job in space.jobs]
    if not found.namespaces:
        lines.append("no namespace has memories or logs yet")
    return lines


def _at(value: datetime | None) -> str:
    return value.isoformat(timespec="seconds") if value is not None else "-"


def _clock(value: datetime | None, now: datetime) -> str:
    """A time in short: "02:41 UTC", with its date if not ``now``'s day."""
    if value is None:
        return "-"
    value, now = value.astimezone(UTC), now.astimezone(UTC)
    return f"{value:%H:%M} UTC" if value.date() == now.date() else f"{value:%Y-%m-%d %H:%M} UTC"


def _daemon_line(daemon: DaemonStatus, now: datetime) -> str:
    """A running daemon in words: "H since 01:58 UTC (lease until 02:03 UTC), runs linker on
    maya, sam", or "..., idle"."""
    runs = "; ".join(_holding(held) for held in daemon.holds) or "idle"
    since, until = _clock(daemon.since, now), _clock(daemon.expires_at, now)
    return f"{daemon.holder} since {since} (lease until {until}), {runs}"


def _holding(held: Holding) -> str:
    # A scheduled firing is named by its job; a dream request (often every job) by its number.
    what = ", ".join(held.jobs) if "@" in held.firing else held.label
    names = ", ".join(held.namespaces[:NAMES_SHOWN])
    more = max(len(held.namespaces) - NAMES_SHOWN, 0) + held.hidden
    if more:
        names = f"{names} and {more:,} more" if names else _namespaces(more)
    return f"runs {what} on {names}"


def _night_lines(firings: Sequence[FiringStatus], now: datetime) -> list[str]:
    """The night in words: "tonight: linker@02:00 42 of 1,000 namespaces done, 16 running, 942
    left; ends about 03:10 UTC"; with several firings open, a line each under their count."""
    if not firings:
        return ["tonight: no night in progress"]
    if len(firings) == 1:
        return [f"tonight: {_firing_line(firings[0], now)}"]
    return [f"tonight: {len(firings)} firings open"] + [
        f"  {_firing_line(firing, now)}" for firing in firings
    ]


def _firing_line(firing: FiringStatus, now: datetime) -> str:
    end = firing.estimated_end
    ends = f"ends about {_clock(end, now)}" if end else "end unknown until a unit is done"
    return (
        f"{firing.label} {firing.done:,} of {_namespaces(firing.total)} done, "
        f"{firing.running:,} running, {firing.left:,} left; {ends}"
    )


def _namespaces(count: int) -> str:
    return f"{count:,} namespace{'' if count == 1 else 's'}"


def _schedule_line(entry: ScheduleStatus, planned: Mapping[str, datetime]) -> str:
    parts = []
    if entry.paused:
        parts.append("paused")
    if entry.firing == "interrupted":
        parts.append(
            f"INTERRUPTED: the firing of {_at(entry.last_fired_at)} never finished "
            "(a restarted daemon runs it again)"
        )
    elif entry.firing == "running":
        parts.append(f"running since {_at(entry.last_fired_at)}")
    if entry.next_fire_at is not None:
        parts.append(f"next {_at(entry.next_fire_at)}")
    elif not entry.paused and entry.job in planned:
        parts.append(f"next {_at(planned[entry.job])} if a daemon runs then")
    elif not entry.paused:
        parts.append("next: when a daemon runs")
    return f"{entry.job:<13} {'; '.join(parts)}"


def _budget(space: NamespaceStatus, limit: int | None) -> str:
    cost = f", cost {space.cost_today:.4f}" if space.cost_today else ""
    if limit is None:
        budget = "budget unknown"
    elif limit == 0:
        budget = "no daily budget"
    else:
        budget = f"of {limit:,} a day" + (" - BUDGET REACHED" if space.budget_reached else "")
    return f"{space.tokens_today:,} tokens today {budget}{cost}"


def _job_line(job: JobStatus) -> str:
    last = job.last
    if last is None:
        said = "never ran"
    else:
        record = f" #{last['record']}" if last.get("record") is not None else ""
        if last.get("undone_by") is not None:
            record += f" (undone by #{last['undone_by']})"
        if last.get("applied_as") is not None:
            record += f" (applied as #{last['applied_as']})"
        message = f": {last['message']}" if last.get("message") else ""
        said = f"{last.get('status')} {str(last.get('at', ''))[:19]}{record}{message}"
    parts = [said]
    if job.failures:
        parts.append(f"{plural(job.failures, 'failure')} in a row")
    if job.backing_off:
        parts.append(f"backing off until {_at(job.backoff_until)}")
    if job.failing:
        parts.append(f"{plural(job.failing, 'item')} failing")
    if job.quarantined:
        parts.append(f"{job.quarantined} quarantined")
    if job.backlog is not None:
        parts.append(f"backlog {_backlog(job)}")
    return f"{job.job:<13} {'; '.join(parts)}"


def _backlog(job: JobStatus) -> str:
    """The items a job has yet to read; for a job of two parts, what each part waits on."""
    counts = dict(job.backlog or {})
    if len(set(counts.values())) <= 1:
        return str(job.backlog_total)
    parts = _parts_of(job.job)
    said = (f"{count} {parts.get(key, f'past its {key}')}" for key, count in counts.items())
    return f"{job.backlog_total} (" + ", ".join(said) + ")"


def _parts_of(name: str) -> dict[str, str]:
    """A job's watermarks, as what waits past each: the part without a model, the model's."""
    from secretary.jobs.registry import JOBS

    job = JOBS.get(name)
    model, rules = (getattr(job, key, None) for key in ("llm_watermark", "deterministic_watermark"))
    words = {model: "for the model"} if model else {}
    if rules:
        words[rules] = "for the part that needs no model"
    return words
