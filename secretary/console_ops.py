"""What the web console (store.api.console) needs from the secretary: approval and the schedule.

The store cannot import the jobs, the approval rules or the cron rules, so `secretary serve`
and `secretary run` hand the console these as a ``ConsoleOps``: each is the one library call
the matching command makes (`plans approve|reject`, `schedule show|set|pause|resume`).
"""

from __future__ import annotations

from datetime import datetime

from secretary.approval import PlanRefused, approve_plan, pending_plans, reject_plan
from secretary.config import Settings
from secretary.cron import cron_trigger, next_fire_times, validate_cron, zone
from secretary.scheduler import PlannedJob, ScheduleBook, plan_schedule
from store.api.console.ops import ConsoleOps, CronPreview, JobSchedule
from store.service import Store


def _state(job: PlannedJob) -> str:
    if job.problem:
        return "invalid"
    if job.schedule.paused:
        return "paused"
    return "active" if job.schedule.cron else "off"


def console_ops(store: Store, settings: Settings) -> ConsoleOps:
    """Given the store and the settings, return the console's operations over them."""
    book = ScheduleBook(store.db.schedules)
    timezone = settings.schedule.timezone

    def approve(record_id: int, now: datetime) -> str:
        outcome = approve_plan(store, settings, record_id, now=now)
        if outcome.status != "applied":  # stale: `plans approve` exits 1 then
            raise PlanRefused(record_id, outcome.message)
        return outcome.message

    def reject(record_id: int, now: datetime) -> str:
        return reject_plan(store, record_id, now=now).message

    def pending() -> list[int]:
        return [plan.record_id for plan in pending_plans(store.db)]

    def schedule(now: datetime, count: int) -> list[JobSchedule]:
        planned = plan_schedule(settings.schedule, book.entries(), now=now, count=count)
        return [
            JobSchedule(
                job=job.schedule.job,
                cron=job.schedule.cron or None,
                source=job.schedule.source,
                state=_state(job),
                next_times=job.next_times,
                problem=job.problem,
            )
            for job in planned
        ]

    def preview(cron: str, now: datetime, count: int) -> CronPreview:
        normal = validate_cron(cron)
        times = next_fire_times(cron_trigger(normal, zone(timezone)), now, count)
        return CronPreview(cron=normal, next_times=tuple(times))

    def set_cron(job: str, cron: str, now: datetime) -> str:
        return book.set_cron(job, cron, now=now)

    def set_paused(job: str, paused: bool, now: datetime) -> None:
        book.set_paused(job, paused, now=now)

    return ConsoleOps(
        approve=approve,
        reject=reject,
        pending=pending,
        schedule=schedule,
        preview=preview,
        set_cron=set_cron,
        set_paused=set_paused,
        timezone=timezone,
    )
