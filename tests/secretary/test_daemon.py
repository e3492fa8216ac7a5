"""The daemon: per-namespace serialisation, sd_notify on a real socket, and `secretary run` as a
real process (READY, /healthz, SIGHUP, a refused second daemon, SIGTERM). Threads meet through
events; only the real-process waits are timeouts, and each is bounded.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO

import httpx
import pytest
from freezegun import freeze_time

from secretary.config import ConfigError, Settings
from secretary.daemon import Daemon, Every, restart_needed
from secretary.dispatch import Dispatcher
from secretary.jobs.registry import JOB_NAMES
from secretary.notify import Notifier, watchdog_interval
from secretary.scheduler import ScheduleBook
from store.clock import utc_now
from store.coordination.dream_requests import DreamRequestView
from store.coordination.leases import Lease, current_lease
from store.coordination.schedules import ScheduleTable
from store.db import make_engine, upgrade
from store.service import Store
from tests.helpers.blocking_calls import BlockingCalls

REPO = Path(__file__).resolve().parents[2]
WAIT = 10.0  # seconds: the bound on every wait for another thread
START = 120.0  # seconds: the bound on a daemon process starting (imports, Chroma, the model)
T0 = datetime(2026, 3, 4, 12, 0, tzinfo=UTC)


# -- sd_notify ---------------------------------------------------------------------------------


class Listener:
    """A systemd stand-in: a bound AF_UNIX datagram socket that collects notify messages."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.socket.bind("\0" + address[1:] if address.startswith("@") else address)
        self.messages: list[str] = []

    def wait_for(self, field: str, timeout: float = WAIT) -> str:
        """Return the first message (new or already seen) with ``field`` on a line of its own."""
        for message in self.messages:
            if field in message.split("\n"):
                self.messages.remove(message)
                return message
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            self.socket.settimeout(left)
            try:
                message = self.socket.recv(4096).decode()
            except TimeoutError:
                break
            if field in message.split("\n"):
                return message
            self.messages.append(message)
        raise AssertionError(f"no {field} within {timeout} s; got {self.messages}")

    def close(self) -> None:
        self.socket.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    # The abstract namespace has no path length limit and leaves no file behind.
    found = Listener(f"@secretary-test-{uuid.uuid4().hex}")
    yield found
    found.close()


def test_notifier_sends_each_message_to_the_socket(listener: Listener) -> None:
    notifier = Notifier.from_env({"NOTIFY_SOCKET": listener.address})
    assert notifier.ready("serving\nhttp://x")
    assert notifier.status("running consolidator for maya")
    assert notifier.watchdog()
    assert notifier.reloading()
    assert notifier.stopping("stopping")
    notifier.close()
    assert listener.wait_for("READY=1") == "READY=1\nSTATUS=serving http://x"
    assert listener.wait_for("STATUS=running consolidator for maya")
    assert listener.wait_for("WATCHDOG=1")
    assert "MONOTONIC_USEC=" in listener.wait_for("RELOADING=1")
    assert listener.wait_for("STOPPING=1") == "STOPPING=1\nSTATUS=stopping"


def test_notifier_path_socket_receives(tmp_path: Path) -> None:
    path = Listener(str(tmp_path / "notify.sock"))
    try:
        assert Notifier(path.address).watchdog()
        assert path.wait_for("WATCHDOG=1")
    finally:
        path.close()


def test_notifier_without_systemd_does_nothing() -> None:
    notifier = Notifier.from_env({})
    assert not notifier.enabled
    assert notifier.ready("x") is False


def test_notifier_gone_socket_is_not_fatal(tmp_path: Path) -> None:
    notifier = Notifier(str(tmp_path / "nobody-listens.sock"))
    assert notifier.watchdog() is False
    assert notifier.watchdog() is False  # warned once, never raised


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, None),
        ({"WATCHDOG_USEC": "60000000"}, 30.0),
        ({"WATCHDOG_USEC": "60000000", "WATCHDOG_PID": "42"}, 30.0),
        ({"WATCHDOG_USEC": "60000000", "WATCHDOG_PID": "43"}, None),
        ({"WATCHDOG_USEC": "0"}, None),
        ({"WATCHDOG_USEC": "soon"}, None),
    ],
)
def test_watchdog_interval_is_half_the_timeout_for_this_pid(
    env: dict[str, str], expected: float | None
) -> None:
    assert watchdog_interval(env, 42) == expected


# -- small pure parts --------------------------------------------------------------------------


def test_every_is_due_once_per_interval() -> None:
    tick = Every(seconds=5, action=lambda: None, next_at=10)
    assert not tick.due(9.9)
    assert tick.due(10)
    assert not tick.due(14)
    assert tick.due(15.5)
    assert tick.next_at == 20.5


def test_restart_needed_lists_what_a_reload_cannot_apply() -> None:
    old = Settings()
    new = old.model_copy(
        update={
            "api": old.api.model_copy(update={"port": 9999}),
            "schedule": old.schedule.model_copy(update={"consolidator": "0 4 * * *"}),
            "jobs": old.jobs.model_copy(update={"concurrency": 16}),
        }
    )
    assert restart_needed(old, new) == ["api", "jobs.concurrency"]
    assert restart_needed(old, old) == []


# -- the real process --------------------------------------------------------------------------

SCRIPT = (
    "from secretary.cli import cli\n"
    "from secretary.cli_daemon import run\n"
    "if 'run' not in cli.commands:\n"
    "    cli.add_command(run)\n"
    "cli(prog_name='secretary')\n"
)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class DaemonProcess:
    """`secretary run` in a child process, its stderr in a file."""

    def __init__(
        self,
        data_dir: Path,
        port: int,
        log: Path,
        notify: str | None,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SECRETARY_", "NOTIFY_"))}
        env |= {
            "SECRETARY_DATA_DIR": str(data_dir),
            "SECRETARY_API_PORT": str(port),
            "ANONYMIZED_TELEMETRY": "False",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            # Nothing fires on its own during the test: each job is switched off.
            **{f"SECRETARY_SCHEDULE_{job.upper()}": "" for job in JOB_NAMES},
        }
        if notify is not None:
            env |= {"NOTIFY_SOCKET": notify, "WATCHDOG_USEC": "1000000"}
        env |= extra_env or {}
        self.port = port
        self.log = log
        self._stderr: IO[bytes] = log.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-c", SCRIPT, "run"],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
        )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait(self, timeout: float) -> int:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"still running after {timeout} s:\n{self.output()}") from None

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(WAIT)
        self._stderr.close()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    engine = make_engine(f"sqlite:///{tmp_path / 'data' / 'secretary.db'}")
    upgrade(engine)
    engine.dispose()
    return tmp_path / "data"


@pytest.mark.slow
def test_secretary_run_ready_healthz_hup_refuses_second_then_stops_cleanly(
    data_dir: Path, tmp_path: Path, listener: Listener
) -> None:
    engine = make_engine(f"sqlite:///{data_dir / 'secretary.db'}")
    first = DaemonProcess(data_dir, free_port(), tmp_path / "first.log", listener.address)
    second: DaemonProcess | None = None
    try:
        try:
            ready = listener.wait_for("READY=1", START)
        except AssertionError:
            raise AssertionError(f"no READY=1; the daemon said:\n{first.output()}") from None
        assert "STATUS=serving http://127.0.0.1" in ready
        health = httpx.get(f"http://127.0.0.1:{first.port}/healthz", timeout=WAIT)
        assert health.status_code == 200
        assert health.json()["status"] == "ok"
        assert listener.wait_for("WATCHDOG=1")

        second = DaemonProcess(data_dir, free_port(), tmp_path / "second.log", None)
        assert second.wait(START) == 75
        assert "another secretary daemon is already running on this store" in second.output()

        ScheduleBook(ScheduleTable(engine)).set_cron(
            "linker", "0 4 * * *", now=datetime.now().astimezone()
        )
        first.process.send_signal(signal.SIGHUP)
        listener.wait_for("RELOADING=1")
        listener.wait_for("READY=1")
        log = first.output()
        assert "config reloaded" in log
        assert "schedule changed: linker: 0 4 * * * [database]" in log
        assert httpx.get(f"http://127.0.0.1:{first.port}/healthz", timeout=WAIT).status_code == 200

        first.process.send_signal(signal.SIGTERM)
        listener.wait_for("STOPPING=1")
        started = time.monotonic()
        assert first.wait(60) == 0, first.output()
        assert time.monotonic() - started < 30
        assert "flushing reinforcement" in first.output()
        assert current_lease(engine) is None  # released: the next daemon may start at once
    finally:
        first.close()
        if second is not None:
            second.close()
        engine.dispose()


# -- the supervisor, in process ----------------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store.open(Settings(data_dir=tmp_path / "data"), create=True)
    yield opened
    opened.close()


def fire_in_thread(dispatcher: Dispatcher, job: str) -> threading.Thread:
    thread = threading.Thread(target=dispatcher.fire, args=(job,), daemon=True)
    thread.start()
    return thread


def make_daemon(
    store: Store,
    listener: Listener,
    calls: BlockingCalls,
    *,
    lease: Lease | None = None,
    reload_settings: Callable[[], Settings] | None = None,
) -> Daemon:
    def unchanged() -> Settings:
        return store.settings

    return Daemon(
        store=store,
        settings=store.settings,
        reload_settings=reload_settings or unchanged,
        lease=lease or Lease(store.engine, holder="me", ttl=timedelta(seconds=60)),
        notifier=Notifier(listener.address),
        calls=calls,
        environ={},
    )


def test_daemon_lease_taken_over_stops_with_exit_1(store: Store, listener: Listener) -> None:
    mine = Lease(store.engine, holder="me", ttl=timedelta(seconds=60), clock=utc_now)
    daemon = make_daemon(store, listener, BlockingCalls([]), lease=mine)  # imports unfrozen
    with freeze_time(T0) as frozen:
        mine.acquire()
        frozen.tick(timedelta(seconds=61))
        Lease(store.engine, holder="other", ttl=timedelta(seconds=60), clock=utc_now).acquire()
        daemon._renew()
        assert daemon._loop() == 1


def test_daemon_bad_config_on_reload_keeps_the_running_one(
    store: Store, listener: Listener
) -> None:
    def broken() -> Settings:
        raise ConfigError("config option 'schedule.linker': invalid cron expression 'x'")

    daemon = make_daemon(store, listener, BlockingCalls([]), reload_settings=broken)
    before = daemon.settings
    daemon._reload()
    assert daemon.settings is before
    listener.wait_for("RELOADING=1")
    assert listener.wait_for("READY=1") == "READY=1\nSTATUS=idle"


def test_daemon_stop_bound_reached_abandons_the_running_job(
    store: Store, listener: Listener
) -> None:
    calls = BlockingCalls(["maya"])
    daemon = make_daemon(store, listener, calls)
    schedule = daemon.settings.schedule.model_copy(update={"stop_timeout_seconds": 0})
    daemon.settings = daemon.settings.model_copy(update={"schedule": schedule})
    stuck = fire_in_thread(daemon.dispatcher, "consolidator")
    assert calls.entered["consolidator", "maya"].wait(WAIT)
    assert daemon._shutdown() is True
    assert "STATUS=stopping: waiting for consolidator for maya" in listener.wait_for("STOPPING=1")
    calls.release["consolidator", "maya"].set()
    stuck.join(WAIT)


def test_daemon_stop_waits_for_the_running_job(store: Store, listener: Listener) -> None:
    calls = BlockingCalls(["maya"])
    daemon = make_daemon(store, listener, calls)
    running = fire_in_thread(daemon.dispatcher, "linker")
    assert calls.entered["linker", "maya"].wait(WAIT)
    abandoned: list[bool] = []
    stopper = threading.Thread(target=lambda: abandoned.append(daemon._shutdown()))
    stopper.start()
    listener.wait_for("STOPPING=1")  # the stop has begun and is waiting for the linker
    assert stopper.is_alive()
    calls.release["linker", "maya"].set()
    stopper.join(WAIT)
    running.join(WAIT)
    assert abandoned == [False]
    assert calls.log[-1] == ("end", "linker", "maya")


def released(calls: BlockingCalls, namespace: str, jobs: Sequence[str]) -> BlockingCalls:
    for job in jobs:
        calls.release[job, namespace].set()
    return calls


def finished_request(daemon: Daemon, store: Store, request_id: int) -> DreamRequestView:
    assert daemon._dreaming is not None
    daemon._dreaming.join(WAIT)
    request = store.db.dream_requests.get(request_id)
    assert request is not None
    return request


def test_daemon_takes_a_dream_request_and_stores_its_outcomes(
    store: Store, listener: Listener
) -> None:
    calls = released(BlockingCalls(["maya"]), "maya", ["auditor", "linker"])
    daemon = make_daemon(store, listener, calls)
    daemon._lease.acquire()
    request_id = store.db.dream_requests.enqueue(
        namespace="maya",
        jobs=("linker", "auditor"),
        retry_quarantined=False,
        requested_by="test",
        now=utc_now(),
    )

    daemon._take_requests()

    request = finished_request(daemon, store, request_id)
    assert (request.status, request.picked_by) == ("done", "me")
    assert [(o["job"], o["status"]) for o in request.outcomes] == [
        ("linker", "applied"),
        ("auditor", "applied"),
    ]
    daemon._take_requests()  # nothing left: no thread is started
    assert daemon._dreaming is not None
    assert not daemon._dreaming.is_alive()


def test_daemon_takes_over_the_request_of_a_daemon_that_died(
    store: Store, listener: Listener
) -> None:
    requests = store.db.dream_requests
    request_id = requests.enqueue(
        namespace="maya", jobs=("retention",), retry_quarantined=False, requested_by="t", now=T0
    )
    assert requests.claim(picker="host:9:dead-daemon", now=utc_now()) is not None
    daemon = make_daemon(store, listener, released(BlockingCalls(["maya"]), "maya", ["retention"]))
    daemon._lease.acquire()  # the dead one's lease is gone: this daemon started

    daemon._take_requests()

    request = finished_request(daemon, store, request_id)
    assert (request.status, request.picked_by) == ("done", "me")
    assert [o["job"] for o in request.outcomes] == ["retention"]


def test_daemon_stopping_takes_no_request(store: Store, listener: Listener) -> None:
    daemon = make_daemon(store, listener, BlockingCalls(["maya"]))
    store.db.dream_requests.enqueue(
        namespace="maya", jobs=(), retry_quarantined=False, requested_by="t", now=T0
    )
    daemon.dispatcher.stop()
    daemon._take_requests()
    assert daemon._dreaming is None
    assert store.db.dream_requests.recent()[0].status == "pending"


@pytest.mark.slow
def test_secretary_run_port_taken_exits_1_and_releases_the_lease(
    data_dir: Path, tmp_path: Path
) -> None:
    engine = make_engine(f"sqlite:///{data_dir / 'secretary.db'}")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        daemon = DaemonProcess(data_dir, taken.getsockname()[1], tmp_path / "d.log", None)
        try:
            assert daemon.wait(START) == 1
        finally:
            daemon.close()
    assert "the API server could not start" in daemon.output()
    assert current_lease(engine) is None
    engine.dispose()
