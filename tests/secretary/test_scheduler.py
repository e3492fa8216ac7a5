"""The schedule: cron expressions read as cron reads them, overrides in the database, and a
running APScheduler that follows them without a restart. Time is frozen, never slept through.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import click
import pytest
from click.testing import CliRunner, Result
from freezegun import freeze_time
from sqlalchemy import Engine

from secretary.cli import cli
from secretary.cli_common import _Group
from secretary.cli_daemon import run, schedule
from secretary.config import ConfigError, ScheduleBase, ScheduleSettings, load_settings
from secretary.cron import InvalidCron, cron_trigger, missed_fire, next_fire_times, validate_cron
from secretary.jobs.registry import JOB_NAMES, JOBS, UnknownJob
from secretary.scheduler import (
    JobScheduler,
    ScheduleBook,
    effective_schedule,
    plan_schedule,
)
from store.clock import utc_now
from store.coordination.schedules import Override, ScheduleTable
from store.db import make_engine, upgrade

UTC_ZONE = ZoneInfo("UTC")
Invoke = Callable[..., Result]
T0 = datetime(2026, 3, 4, 2, 0, tzinfo=UTC)  # a Wednesday


def at(day: int, hour: int, minute: int = 0) -> datetime:
    return datetime(2026, 3, day, hour, minute, tzinfo=UTC)


def fires(expression: str, count: int = 3, now: datetime = T0) -> list[datetime]:
    return next_fire_times(cron_trigger(expression, UTC_ZONE), now, count)


# -- cron expressions --------------------------------------------------------------------------


def test_next_fire_times_daily_gives_consecutive_days() -> None:
    assert fires("0 3 * * *") == [at(4, 3), at(5, 3), at(6, 3)]


def test_next_fire_times_now_on_a_fire_time_includes_it() -> None:
    assert fires("0 2 * * *", 1) == [T0]


@pytest.mark.parametrize(
    ("weekdays", "expected"),
    [
        ("0", ["Sunday"]),
        ("7", ["Sunday"]),
        ("sun", ["Sunday"]),
        ("1-5", ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]),
        ("fri-sun", ["Friday", "Saturday", "Sunday"]),
        ("5-7", ["Friday", "Saturday", "Sunday"]),
        ("*/2", ["Sunday", "Tuesday", "Thursday", "Saturday"]),
        ("1,3", ["Monday", "Wednesday"]),
    ],
)
def test_cron_trigger_weekdays_count_from_sunday_like_cron(
    weekdays: str, expected: list[str]
) -> None:
    days = {time.strftime("%A") for time in fires(f"0 5 * * {weekdays}", 14)}
    assert days == set(expected)


def test_cron_trigger_shortcut_daily_is_midnight() -> None:
    assert fires("@daily", 1) == [at(5, 0)]


def test_cron_trigger_time_zone_reads_hours_locally() -> None:
    berlin = cron_trigger("0 3 * * *", ZoneInfo("Europe/Berlin"))
    assert next_fire_times(berlin, at(4, 2, 1), 1) == [at(5, 2)]  # 03:00 CET is 02:00 UTC


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("x", "1 field"),
        ("* * * *", "4 field"),
        ("61 * * * *", "the minute field '61' is not valid: it allows 0-59"),
        ("0 24 * * *", "the hour field '24' is not valid: it allows 0-23"),
        ("0 3 0 * *", "the day-of-month field '0' is not valid: it allows 1-31"),
        ("0 3 * 1-13 *", "the month field '1-13' is not valid: it allows 1-12 or jan-dec"),
        ("*/0 * * * *", "a step \\*/n or a-b/n with n at least 1"),
        ("0 5 * * 8", "not a day of the week"),
        ("0 5 * * sat-mon", "runs backwards"),
        ("0 5 * * 2/2", "a step needs a range"),
        ("0 0 1 * mon", "restricts both"),
        ("a b c d e", "the minute field 'a' is not valid"),
        ("0 0 32 * mon", "the day-of-month field '32' is not valid"),
        ("0 2 1 * xyz", "'xyz' is not a day of the week"),
        ("0 \uff13 * * *", "'\uff13' \\(U\\+FF13\\) is not ASCII"),  # a full-width 3
    ],
)
def test_validate_cron_bad_expression_raises_clear_error(expression: str, message: str) -> None:
    with pytest.raises(InvalidCron, match=message) as caught:
        validate_cron(expression)
    assert repr(expression) in str(caught.value)
    # It speaks of cron's fields, not of the scheduler library underneath.
    assert "APScheduler" not in str(caught.value)
    assert "Error validating" not in str(caught.value)


def test_validate_cron_normalises_spacing() -> None:
    assert validate_cron("  0  3 * *  * ") == "0 3 * * *"


def test_missed_fire_within_grace_after_last_run_is_found() -> None:
    trigger = cron_trigger("0 3 * * *", UTC_ZONE)
    hour = timedelta(hours=1)
    found = missed_fire(trigger, last_fired=at(3, 3), now=at(4, 3, 30), grace=hour)
    assert found == at(4, 3)
    assert missed_fire(trigger, last_fired=at(3, 3), now=at(4, 4, 30), grace=hour) is None
    assert missed_fire(trigger, last_fired=at(4, 3), now=at(4, 3, 30), grace=hour) is None
    assert missed_fire(trigger, last_fired=None, now=at(4, 3, 30), grace=hour) is None


# -- the effective schedule --------------------------------------------------------------------


def test_effective_schedule_database_overrides_config() -> None:
    overrides = {"linker": Override(cron="5 * * * *"), "auditor": Override(paused=True)}
    entries = {e.job: e for e in effective_schedule(ScheduleSettings(), overrides)}
    assert list(entries) == list(JOB_NAMES)
    assert (entries["linker"].cron, entries["linker"].source) == ("5 * * * *", "database")
    assert entries["auditor"].source == "config"
    assert not entries["auditor"].active
    assert entries["consolidator"].cron == ScheduleSettings().consolidator


def test_plan_schedule_frozen_time_lists_next_fire_times() -> None:
    with freeze_time(T0):
        plan = {
            p.schedule.job: p for p in plan_schedule(ScheduleSettings(), {}, now=utc_now(), count=2)
        }
    assert plan["consolidator"].next_times == (at(4, 3), at(5, 3))
    assert plan["extractor"].next_times == (at(4, 2, 0), at(4, 2, 15))
    assert plan["soul_mapper"].next_times[0].strftime("%A") == "Sunday"


def test_plan_schedule_empty_cron_is_off() -> None:
    settings = ScheduleSettings(linker="")
    plan = {p.schedule.job: p for p in plan_schedule(settings, {}, now=T0, count=2)}
    assert plan["linker"].next_times == ()
    assert not plan["linker"].schedule.active


def test_schedule_settings_bad_cron_in_config_names_the_key(tmp_path: Path) -> None:
    path = tmp_path / "secretary.toml"
    path.write_text('[schedule]\nconsolidator = "0 25 * * *"\n')
    with pytest.raises(ConfigError, match=r"schedule\.consolidator"):
        load_settings(path, {})
    with pytest.raises(ConfigError, match=r"schedule\.timezone"):
        load_settings(None, {"SECRETARY_SCHEDULE_TIMEZONE": "Nowhere/Atlantis"})


def test_scheduled_jobs_match_the_job_registry() -> None:
    scheduled = set(ScheduleSettings.model_fields) - set(ScheduleBase.model_fields)
    assert scheduled == set(JOBS)
    assert tuple(JOBS) == JOB_NAMES


# -- the schedule table ------------------------------------------------------------------------


def test_schedule_book_set_pause_resume_reset_persist(engine: Engine) -> None:
    book = ScheduleBook(ScheduleTable(engine))
    assert book.set_cron("consolidator", "0  4 * * *", now=T0) == "0 4 * * *"
    book.set_paused("linker", True, now=T0)
    again = ScheduleBook(ScheduleTable(engine)).entries()  # a fresh reader: it is in the database
    assert again["consolidator"] == Override(cron="0 4 * * *")
    assert again["linker"].paused
    book.set_paused("linker", False, now=T0)
    book.reset("consolidator", now=T0)
    entries = book.entries()
    assert entries["consolidator"].cron is None
    assert not entries["linker"].paused


def test_schedule_book_bad_input_changes_nothing(engine: Engine) -> None:
    book = ScheduleBook(ScheduleTable(engine))
    with pytest.raises(InvalidCron):
        book.set_cron("consolidator", "every night", now=T0)
    with pytest.raises(UnknownJob, match="known jobs: extractor"):
        book.set_cron("dreamer", "0 4 * * *", now=T0)
    assert book.entries() == {}


# -- the running scheduler ---------------------------------------------------------------------


@pytest.fixture
def sqlite(tmp_path: Path) -> Iterator[Engine]:
    engine = make_engine(f"sqlite:///{tmp_path / 'store.db'}")
    upgrade(engine)
    yield engine
    engine.dispose()


class Fired:
    def __init__(self) -> None:
        self.jobs: list[str] = []
        self.event = threading.Event()

    def __call__(self, job: str) -> None:
        self.jobs.append(job)
        self.event.set()


@pytest.fixture
def running(sqlite: Engine) -> Iterator[tuple[JobScheduler, ScheduleBook, Fired]]:
    book = ScheduleBook(ScheduleTable(sqlite))
    fired = Fired()
    with freeze_time(T0 + timedelta(minutes=1)):  # just after the extractor's 02:00 run
        scheduler = JobScheduler(table=book.table, settings=ScheduleSettings(), fire=fired)
        scheduler.start()
        try:
            yield scheduler, book, fired
        finally:
            scheduler.shutdown()


def test_job_scheduler_set_cron_is_picked_up_without_restart(
    running: tuple[JobScheduler, ScheduleBook, Fired],
) -> None:
    scheduler, book, _ = running
    assert scheduler.next_run_time("consolidator") == at(4, 3)
    book.set_cron("consolidator", "30 4 * * *", now=T0)
    assert scheduler.refresh() == ["consolidator: 30 4 * * * [database]"]
    assert scheduler.next_run_time("consolidator") == at(4, 4, 30)
    assert scheduler.refresh() == []  # nothing changed since: nothing is rescheduled


def test_job_scheduler_pause_and_resume(
    running: tuple[JobScheduler, ScheduleBook, Fired],
) -> None:
    scheduler, book, _ = running
    book.set_paused("linker", True, now=T0)
    assert scheduler.refresh() == ["linker: paused"]
    assert scheduler.next_run_time("linker") is None
    book.set_paused("linker", False, now=T0)
    assert scheduler.refresh() == ["linker: 20 * * * * [config]"]
    assert scheduler.next_run_time("linker") == at(4, 2, 20)


def test_job_scheduler_reload_applies_new_settings(
    running: tuple[JobScheduler, ScheduleBook, Fired],
) -> None:
    scheduler, _, _ = running
    changes = scheduler.refresh(ScheduleSettings(retention="0 6 * * *", auditor=""))
    assert sorted(changes) == ["auditor: not scheduled", "retention: 0 6 * * * [config]"]
    assert scheduler.next_run_time("retention") == at(4, 6)
    assert scheduler.next_run_time("auditor") is None


def test_job_scheduler_start_catches_up_a_run_missed_while_stopped(sqlite: Engine) -> None:
    book = ScheduleBook(ScheduleTable(sqlite))
    book.table.mark_fired("consolidator", now=at(3, 3))
    fired = Fired()
    with freeze_time(at(4, 3, 31)):
        scheduler = JobScheduler(table=book.table, settings=ScheduleSettings(), fire=fired)
        changes = scheduler.start()
        try:
            assert "consolidator: 0 3 * * * [config] (missed while stopped: running now)" in changes
            assert fired.event.wait(10)  # the scheduler's own thread runs it at once
        finally:
            scheduler.shutdown()
    assert fired.jobs == ["consolidator"]
    assert book.entries()["consolidator"].last_fired_at == at(4, 3, 31)


def test_job_scheduler_start_reruns_a_firing_cut_short(sqlite: Engine) -> None:
    # The daemon died while the consolidator's 03:00 firing ran: it started, never finished.
    book = ScheduleBook(ScheduleTable(sqlite))
    book.table.mark_finished("consolidator", now=at(3, 3, 5), next_fire_at=None)
    book.table.mark_fired("consolidator", now=at(4, 3))
    assert book.entries()["consolidator"].interrupted
    fired = Fired()
    with freeze_time(at(4, 3, 10)):
        scheduler = JobScheduler(table=book.table, settings=ScheduleSettings(), fire=fired)
        changes = scheduler.start()
        try:
            assert (
                "consolidator: 0 3 * * * [config] (its last firing was cut short:"
                " running it again now)"
            ) in changes
            assert fired.event.wait(10)
        finally:
            scheduler.shutdown()
    assert fired.jobs == ["consolidator"]


def test_job_scheduler_firing_counts_as_done_only_once_it_finished(sqlite: Engine) -> None:
    book = ScheduleBook(ScheduleTable(sqlite))
    release, started = threading.Event(), threading.Event()

    def slow(job: str) -> None:
        started.set()
        release.wait(10)

    book.table.mark_fired("consolidator", now=at(3, 3))
    book.table.mark_finished("consolidator", now=at(3, 3, 1), next_fire_at=None)
    with freeze_time(at(4, 3, 31)):  # a missed 03:00 firing: it runs at once
        scheduler = JobScheduler(table=book.table, settings=ScheduleSettings(), fire=slow)
        scheduler.start()
        try:
            assert started.wait(10)
            assert book.entries()["consolidator"].interrupted  # started, not finished yet
            release.set()
            deadline = time.monotonic() + 10
            while book.entries()["consolidator"].interrupted and time.monotonic() < deadline:
                time.sleep(0.01)
        finally:
            scheduler.shutdown()
    entry = book.entries()["consolidator"]
    assert not entry.interrupted
    assert entry.next_fire_at == at(5, 3)  # published for `secretary status`


def test_job_scheduler_publishes_next_fire_times(
    running: tuple[JobScheduler, ScheduleBook, Fired],
) -> None:
    _, book, _ = running
    entries = book.entries()
    assert entries["consolidator"].next_fire_at == at(4, 3)
    assert entries["linker"].next_fire_at == at(4, 2, 20)


def test_validate_cron_that_can_never_fire_is_refused() -> None:
    with pytest.raises(InvalidCron, match="never comes"):
        validate_cron("0 0 30 2 *")
    assert validate_cron("0 0 29 2 *") == "0 0 29 2 *"  # once every four years is fine


# -- the commands ------------------------------------------------------------------------------


def daemon_cli() -> click.Group:
    """The real `secretary` group plus this module's commands, without touching the global one."""
    return _Group(
        name="secretary",
        callback=cli.callback,
        params=cli.params,
        commands={**cli.commands, "run": run, "schedule": schedule},
    )


@pytest.fixture
def invoke(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Invoke:
    for name in ("SECRETARY_CONFIG", "SECRETARY_DATA_DIR"):
        monkeypatch.delenv(name, raising=False)
    engine = make_engine(f"sqlite:///{tmp_path / 'data' / 'secretary.db'}")
    upgrade(engine)
    engine.dispose()
    group = daemon_cli()

    def call(*args: str, code: int = 0) -> Result:
        result = CliRunner().invoke(group, ["--data-dir", str(tmp_path / "data"), *args])
        assert result.exit_code == code, (result.output, result.exception)
        return result

    return call


def test_schedule_show_lists_every_job_with_next_times(invoke: Invoke) -> None:
    with freeze_time(T0):
        out = invoke("schedule", "show", "--count", "2").output
    assert "daemon: not running" in out
    for job in JOB_NAMES:
        assert job in out
    assert "consolidator  0 3 * * *" in out
    assert "2026-03-04T03:00+00:00, 2026-03-05T03:00+00:00" in out


def test_schedule_show_says_a_firing_was_cut_short(invoke: Invoke, tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'data' / 'secretary.db'}")
    table = ScheduleTable(engine)
    table.mark_finished("consolidator", now=at(2, 3, 5), next_fire_at=None)
    table.mark_fired("consolidator", now=at(3, 3))  # no daemon finished it
    engine.dispose()

    with freeze_time(T0):
        out = invoke("schedule", "show").output
        shown = json.loads(invoke("schedule", "show", "--json").output)

    assert "its firing of 2026-03-03T03:00+00:00 was cut short" in out
    jobs = {job["job"]: job for job in shown["jobs"]}
    assert (jobs["consolidator"]["firing"], jobs["linker"]["firing"]) == ("cut short", None)


def test_schedule_set_then_show_uses_the_database(invoke: Invoke) -> None:
    with freeze_time(T0):
        out = invoke("schedule", "set", "consolidator", "0 4 * * *").output
        assert "consolidator: 0 4 * * * (stored" in out
        shown = invoke("schedule", "show", "--json").output
    jobs = {job["job"]: job for job in json.loads(shown)["jobs"]}
    assert jobs["consolidator"]["cron"] == "0 4 * * *"
    assert jobs["consolidator"]["source"] == "database"
    assert jobs["consolidator"]["next"][0] == "2026-03-04T04:00:00+00:00"


def test_schedule_set_bad_cron_or_job_fails_and_changes_nothing(invoke: Invoke) -> None:
    bad = invoke("schedule", "set", "consolidator", "0 25 * * *", code=2)
    assert "invalid cron expression '0 25 * * *'" in bad.output
    unknown = invoke("schedule", "set", "dreamer", "0 4 * * *", code=2)
    assert "'dreamer' is not one of" in unknown.output
    shown = invoke("schedule", "show").output
    assert "database" not in shown


def test_schedule_set_empty_cron_points_to_pause(invoke: Invoke) -> None:
    refused = invoke("schedule", "set", "linker", " ", code=2)
    assert "to stop linker from running use `secretary schedule pause linker`" in refused.output
    assert "`secretary schedule resume linker` to start it again" in refused.output
    assert "database" not in invoke("schedule", "show").output


def test_schedule_pause_resume_reset_commands(invoke: Invoke) -> None:
    assert "linker: paused" in invoke("schedule", "pause", "linker").output
    assert "paused" in invoke("schedule", "show").output
    out = invoke("schedule", "resume", "linker").output
    assert "linker: resumed" in out
    invoke("schedule", "set", "linker", "@hourly")
    out = invoke("schedule", "reset", "linker").output
    assert "20 * * * *" in out


@pytest.mark.parametrize("path", ["run", "schedule", "schedule show", "schedule set"])
def test_daemon_commands_have_help(path: str) -> None:
    result = CliRunner().invoke(daemon_cli(), [*path.split(), "--help"])
    assert result.exit_code == 0
    assert len(result.output) > 100
