"""`secretary run`: the read API and the scheduled jobs in one process, supervised for systemd.

The main thread supervises: it owns the signal handlers, renews the store's lease, pings the
watchdog, re-reads the schedule and looks for dream requests. uvicorn serves the API in a thread
of its own, APScheduler's pool runs the jobs, and a thread of its own runs the dream requests.
Every event reaches the main thread through one queue, so a signal handler only enqueues
(``SimpleQueue.put`` is reentrant) and all real work happens in ordinary code, never inside a
handler.
"""

from __future__ import annotations

import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import FrameType
from typing import Any

from loguru import logger

from secretary.config import ConfigError, Settings
from secretary.dispatch import Dispatcher, JobCalls, RunnerCalls
from secretary.jobs.registry import JOB_NAMES
from secretary.notify import Notifier, watchdog_interval
from secretary.scheduler import JobScheduler
from secretary.status_config import status_config
from store.clock import utc_now
from store.coordination.dream_requests import DreamRequestView
from store.coordination.dream_worker import Dreamer, run_claimed, run_pending
from store.coordination.leases import Lease, daemon_lease_name, holder_id
from store.db import DatabaseError, check_schema, make_engine
from store.service import Store

API_START_SECONDS = 60.0  # uvicorn binds and runs the app's startup well within this
API_STOP_SECONDS = 15.0  # uvicorn's graceful shutdown (10 s) plus the reinforcement flush
TERM, HUP, API_READY, API_STOPPED, LEASE_LOST = "term", "hup", "api-ready", "api-stopped", "lost"
# Finished firings (what each unit's runs said) are kept this long, then deleted hourly.
FIRINGS_KEPT = timedelta(days=7)
TIDY_SECONDS = 3600.0


# -- the API thread ----------------------------------------------------------------------------


class _Server:
    """uvicorn's server, telling the supervisor once it listens (or that it stopped)."""

    def __init__(
        self,
        store: Store,
        settings: Settings,
        inbox: queue.SimpleQueue[str],
        clock: Callable[[], datetime],
    ):
        import uvicorn

        from secretary.console_ops import console_ops
        from store.api.app import create_app

        api = store.settings.api
        app = create_app(
            store,
            clock=clock,
            status=status_config(settings),
            # The daemon runs the dream requests itself: the API only queues them.
            dreamer=Dreamer(jobs=JOB_NAMES),
            console=console_ops(store, settings),
            settle=True,
        )
        config = uvicorn.Config(
            app,
            host=api.host,
            port=api.port,
            log_config=None,
            timeout_graceful_shutdown=10,
        )

        class Server(uvicorn.Server):
            async def startup(self, sockets: Any = None) -> None:
                await super().startup(sockets=sockets)
                if self.started:
                    inbox.put(API_READY)

        self._server = Server(config)
        self._inbox = inbox
        self.address = f"http://{api.host}:{api.port}"
        # Outside the main thread uvicorn installs no signal handlers: the supervisor owns them.
        self._thread = threading.Thread(target=self._serve, name="api", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self, timeout: float) -> bool:
        """Ask uvicorn to shut down (the app's lifespan then flushes); return whether it did."""
        self._server.should_exit = True
        if self._thread.ident is not None:  # never started: nothing to join
            self._thread.join(timeout)
        return not self._thread.is_alive()

    def _serve(self) -> None:
        try:
            self._server.run()
        except SystemExit:
            # uvicorn exits this way when it cannot listen (it logged why just before).
            logger.error("the API server could not start")
        finally:
            self._inbox.put(API_STOPPED)


# -- the supervisor ----------------------------------------------------------------------------


@dataclass(kw_only=True)
class Every:
    """Something the main loop does every ``seconds`` (monotonic time)."""

    seconds: float
    action: Callable[[], None]
    next_at: float = 0.0

    def due(self, now: float) -> bool:
        if now < self.next_at:
            return False
        self.next_at = now + self.seconds
        return True


@dataclass(frozen=True, kw_only=True)
class DaemonResult:
    code: int
    # A job still ran when the stop bound ran out: the caller must end the process without
    # joining its thread (os._exit); the database rolls the job's transaction back.
    abandoned: bool = False


RESTART_ONLY = ("data_dir", "database", "index", "api")


def restart_needed(old: Settings, new: Settings) -> list[str]:
    """Return the changed settings that a reload cannot apply (the process must restart)."""
    changed = [name for name in RESTART_ONLY if getattr(old, name) != getattr(new, name)]
    if old.schedule.lease_seconds != new.schedule.lease_seconds:
        changed.append("schedule.lease_seconds")
    if old.jobs.concurrency != new.jobs.concurrency:
        changed.append("jobs.concurrency")
    return changed


class Daemon:
    """Serves the API, fires the scheduled jobs and answers systemd until told to stop."""

    def __init__(
        self,
        *,
        store: Store,
        settings: Settings,
        reload_settings: Callable[[], Settings],
        lease: Lease,
        notifier: Notifier,
        calls: JobCalls | None = None,
        clock: Callable[[], datetime] = utc_now,
        environ: Mapping[str, str] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self._reload_settings = reload_settings
        self._lease = lease
        self._notifier = notifier
        self._monotonic = monotonic
        self._clock = clock
        self._inbox: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._requests = store.db.dream_requests
        self._firings = store.db.firings
        self._dreaming: threading.Thread | None = None
        self.dispatcher = Dispatcher(
            calls or RunnerCalls(store),
            store.db.firings,
            settings=settings,
            holder=lease.holder,
            clock=clock,
            on_status=notifier.status,
        )
        self.scheduler = JobScheduler(
            table=store.db.schedules,
            settings=settings.schedule,
            fire=self.dispatcher.fire,
            clock=clock,
        )
        self._api = _Server(store, settings, self._inbox, clock)
        env = os.environ if environ is None else environ
        self._watchdog = watchdog_interval(env, os.getpid()) if settings.schedule.watchdog else None

    def run(self) -> DaemonResult:
        """Run until SIGTERM/SIGINT (exit 0), a lost lease or a dead API (exit 1)."""
        wanted = ((signal.SIGTERM, TERM), (signal.SIGINT, TERM), (signal.SIGHUP, HUP))
        previous = {number: signal.signal(number, self._enqueue(event)) for number, event in wanted}
        try:
            return self._run()
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)

    def _enqueue(self, event: str) -> Callable[[int, FrameType | None], None]:
        def handler(_number: int, _frame: FrameType | None) -> None:
            self._inbox.put(event)

        return handler

    def _run(self) -> DaemonResult:
        self._api.start()
        if not self._wait_for_api():
            code = 0 if self.dispatcher.stopping else 1  # a stop requested while starting is clean
            return DaemonResult(code=code, abandoned=self._shutdown())
        for change in self.scheduler.start():
            logger.info("scheduled {}", change)
        # Units of firings a daemon left open (killed, or stopped mid-night) are taken at once.
        self.dispatcher.start()
        self._notifier.ready(f"serving {self._api.address}; scheduler started")
        logger.info("daemon ready: API on {}, scheduler started", self._api.address)
        code = self._loop()
        return DaemonResult(code=code, abandoned=self._shutdown())

    def _wait_for_api(self) -> bool:
        deadline = self._monotonic() + API_START_SECONDS
        while (left := deadline - self._monotonic()) > 0:
            try:
                # Keep the watchdog fed meanwhile: systemd may arm it before READY=1.
                event = self._inbox.get(timeout=min(left, self._watchdog or left))
            except queue.Empty:
                if self._watchdog is not None and self._api.alive:
                    self._notifier.watchdog()
                continue
            if event == API_READY:
                return True
            if event == TERM:
                self.dispatcher.stop()  # marks the stop as requested: the exit is then clean
                return False
            if event == API_STOPPED:
                return False
            if event == HUP:
                logger.info("SIGHUP while starting: the config is read at start anyway")
        logger.error("the API did not start within {:.0f} s", API_START_SECONDS)
        return False

    def _ticks(self) -> list[Every]:
        schedule = self.settings.schedule
        ticks = [
            Every(seconds=schedule.poll_seconds, action=self._poll),
            Every(seconds=schedule.poll_seconds, action=self._take_requests),
            Every(seconds=schedule.lease_seconds / 3, action=self._renew),
            Every(seconds=TIDY_SECONDS, action=self._tidy),
        ]
        if self._watchdog is not None:
            ticks.append(Every(seconds=self._watchdog, action=self._ping))
        start = self._monotonic()
        for tick in ticks:
            tick.next_at = start + tick.seconds
        return ticks

    def _loop(self) -> int:
        ticks = self._ticks()
        while True:
            wait = min(tick.next_at for tick in ticks) - self._monotonic()
            try:
                event: str | None = self._inbox.get(timeout=max(0.0, wait))
            except queue.Empty:
                event = None
            if event == TERM:
                logger.info("stop requested")
                return 0
            if event == HUP:
                self._reload()
            if event == API_STOPPED:
                logger.error("the API server stopped unexpectedly: stopping the daemon")
                return 1
            if event == LEASE_LOST:
                return 1
            now = self._monotonic()
            for tick in ticks:
                if tick.due(now):
                    tick.action()

    def _poll(self) -> None:
        try:
            changes = self.scheduler.refresh()
        except DatabaseError as exc:
            logger.warning("cannot read the schedule, trying again later: {}", exc)
            return
        for change in changes:
            logger.info("schedule changed: {}", change)

    def _take_requests(self) -> None:
        """Claim the oldest dream request and run it (and those queued after it) in a thread;
        one at a time, and none once stopping."""
        if self.dispatcher.stopping or (self._dreaming is not None and self._dreaming.is_alive()):
            return
        try:
            request = self._requests.claim(picker=self._lease.holder, now=self._clock())
        except DatabaseError as exc:
            logger.warning("cannot read the dream requests, trying again later: {}", exc)
            return
        if request is not None:
            self._dreaming = threading.Thread(
                target=self._dream, args=(request,), name="dream-requests", daemon=True
            )
            self._dreaming.start()

    def _dream(self, first: DreamRequestView) -> None:
        holder, run = self._lease.holder, self.dispatcher.dream
        try:
            if run_claimed(self._requests, first, picker=holder, run=run, clock=self._clock):
                run_pending(
                    self._requests,
                    picker=holder,
                    run=run,
                    clock=self._clock,
                    stopping=lambda: self.dispatcher.stopping,
                )
        except DatabaseError as exc:
            # The request stays ours and running: the next claim takes it again.
            logger.warning("dream requests: the database failed, trying again later: {}", exc)

    def _tidy(self) -> None:
        """Delete the firings (and their units) finished more than FIRINGS_KEPT ago."""
        try:
            gone = self._firings.forget_finished(before=self._clock() - FIRINGS_KEPT)
        except DatabaseError as exc:
            logger.warning("cannot delete old firings, trying again later: {}", exc)
            return
        if gone:
            logger.info(
                "deleted {} firing(s) finished more than {} days ago", gone, FIRINGS_KEPT.days
            )

    def _renew(self) -> None:
        try:
            if self._lease.renew():
                return
            logger.error("the store's lease was taken over by another daemon: stopping")
        except DatabaseError as exc:
            if not self._lease.expired():
                logger.warning("cannot renew the store's lease, trying again: {}", exc)
                return
            logger.error("the store's lease expired while the database was unreachable: {}", exc)
        self._inbox.put(LEASE_LOST)

    def _ping(self) -> None:
        # A hung API thread or a dead scheduler means no ping, and systemd restarts us.
        if self._api.alive and self.scheduler.running:
            self._notifier.watchdog()

    def _reload(self) -> None:
        self._notifier.reloading()
        logger.info("SIGHUP: reloading the config")
        try:
            new = self._reload_settings()
        except ConfigError as exc:
            logger.error("config reload failed, keeping the running config: {}", exc)
        else:
            later = restart_needed(self.settings, new)
            if later:
                logger.warning("changes to {} take effect at the next restart", ", ".join(later))
            self.settings = new
            self.dispatcher.settings = new
            try:
                changes = self.scheduler.refresh(new.schedule)
            except DatabaseError as exc:
                logger.warning("cannot read the schedule, trying again later: {}", exc)
                changes = []
            for change in changes:
                logger.info("schedule changed: {}", change)
            logger.info("config reloaded; schedule re-applied ({} change(s))", len(changes))
        self._notifier.ready(", ".join(self.dispatcher.running()) or "idle")

    def _shutdown(self) -> bool:
        """Stop starting runs, wait (bounded) for the running ones, stop the API; True if a run
        was abandoned."""
        running = self.dispatcher.running()
        waiting = f": waiting for {', '.join(running)}" if running else ""
        self._notifier.stopping(f"stopping{waiting}")
        self.dispatcher.stop()
        self.scheduler.shutdown()
        finished = self._wait_for_runs(self.settings.schedule.stop_timeout_seconds)
        if not finished:
            logger.warning(
                "{} still running after {:.0f} s: exiting anyway; the database rolls it back",
                ", ".join(self.dispatcher.running()) or "a job",
                self.settings.schedule.stop_timeout_seconds,
            )
        if not self._api.stop(API_STOP_SECONDS):
            logger.warning("the API did not stop within {:.0f} s", API_STOP_SECONDS)
        return not finished

    def _wait_for_runs(self, bound: float) -> bool:
        # The lease and the watchdog must outlive a long wait: renew and ping between slices.
        deadline = self._monotonic() + bound
        slice_ = min(self.settings.schedule.lease_seconds / 3, self._watchdog or bound)
        while not self.dispatcher.wait_idle(max(0.0, min(slice_, deadline - self._monotonic()))):
            if self._monotonic() >= deadline:
                return False
            self._renew_quietly()
            if self._watchdog is not None:
                self._notifier.watchdog()
        return True

    def _renew_quietly(self) -> None:
        try:
            self._lease.renew()
        except DatabaseError as exc:
            logger.warning("cannot renew the store's lease while stopping: {}", exc)


def run_daemon(
    settings: Settings,
    *,
    reload_settings: Callable[[], Settings],
    clock: Callable[[], datetime] = utc_now,
    environ: Mapping[str, str] | None = None,
    calls: JobCalls | None = None,
) -> DaemonResult:
    """Take the store's lease, open the store and run the daemon. Raise LeaseHeld if another
    daemon runs, SchemaError if the database needs `secretary db upgrade`.
    """
    notifier = Notifier.from_env(environ)
    # The lease has an engine of its own: it is taken before the (slow) store opens, so that a
    # second daemon is refused at once, and renewals never queue behind the jobs' connections.
    engine = make_engine(settings.database_url)
    try:
        check_schema(engine)
        holder = holder_id()
        lease = Lease(
            engine,
            holder=holder,
            ttl=timedelta(seconds=settings.schedule.lease_seconds),
            clock=clock,
            # One daemon per SQLite store; on PostgreSQL each daemon holds a lease of its own.
            name=daemon_lease_name(engine, holder, shared_index=bool(settings.index.chroma_url)),
        )
        lease.acquire()
        logger.info("holding the store's daemon lease as {}", lease.holder)
        try:
            return _run_with_store(
                settings, reload_settings, lease, notifier, calls, clock, environ
            )
        finally:
            _release(lease)
    finally:
        engine.dispose()
        notifier.close()


def _run_with_store(
    settings: Settings,
    reload_settings: Callable[[], Settings],
    lease: Lease,
    notifier: Notifier,
    calls: JobCalls | None,
    clock: Callable[[], datetime],
    environ: Mapping[str, str] | None,
) -> DaemonResult:
    store = Store.open(settings)
    try:
        daemon = Daemon(
            store=store,
            settings=settings,
            reload_settings=reload_settings,
            lease=lease,
            notifier=notifier,
            calls=calls,
            clock=clock,
            environ=environ,
        )
        result = daemon.run()
    finally:
        store.close()
    logger.info("daemon stopped (exit code {})", result.code)
    return result


def _release(lease: Lease) -> None:
    try:
        lease.release()
    except DatabaseError as exc:
        logger.warning(
            "could not release the store's lease (it expires on its own at {}): {}",
            lease.expires_at,
            exc,
        )
