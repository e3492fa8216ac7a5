"""The maintenance jobs in /metrics, computed from the records and the jobs' state at scrape time.

`secretary serve` may run without the daemon, so nothing here is counted as jobs run: the
records are the truth. Counters (runs by job and status, run durations, tokens, cost, changes
applied by kind, items dropped) fold each record once, in id order, as the record was when first
read (an undone record counts as the applied run it was); a scrape reads at most ``PAGES`` pages
of new records, so a large store is caught up over a few scrapes rather than in one long one.
Ids skipped below a recent record may belong to a transaction still committing (PostgreSQL hands
out ids before commit): they are looked for again at each scrape for ``GRACE``. The gauges
(backlog, quarantined items, namespaces backing off, the daemon) are read fresh from
``store.status``.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime, timedelta

from loguru import logger
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from sqlalchemy.exc import SQLAlchemyError

from store.database import Database
from store.kinds import RecordStatus
from store.reads.records import RecordReads
from store.status import Status, StatusConfig, read_status
from store.views import RecordView

PAGE = 500
PAGES = 20  # at most PAGE * PAGES new records per scrape
GRACE = timedelta(minutes=10)
MAX_GAP = 10_000  # ids looked for again below one record, at most
BUCKETS = (0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0)


class RecordFold:
    """Counters over the records folded so far (see the module docstring)."""

    def __init__(self) -> None:
        self.top = 0  # the highest record id folded
        self.missing: dict[int, datetime] = {}  # ids skipped, looked for until GRACE passes
        self.runs: Counter[tuple[str, str]] = Counter()
        self.buckets: dict[str, list[int]] = {}  # per job: count per bucket (not cumulative)
        self.seconds: dict[str, float] = {}
        self.tokens: Counter[tuple[str, ...]] = Counter()
        self.cost: dict[tuple[str, ...], float] = {}
        self.changes: Counter[tuple[str, ...]] = Counter()
        self.dropped: Counter[tuple[str, ...]] = Counter()

    def update(self, records: RecordReads, *, now: datetime) -> None:
        """Fold the records written since the last update, and any skipped id that appeared."""
        if self.missing:
            late = records.many(self.missing)
            self._fold(records, late)
            for record in late:
                del self.missing[record.id]
            self.missing = {i: t for i, t in self.missing.items() if now - t < GRACE}
        for _ in range(PAGES):
            page = records.after(self.top, limit=PAGE)
            for record in page:
                if now - (record.finished_at or record.started_at) < GRACE:
                    for gap in range(max(self.top + 1, record.id - MAX_GAP), record.id):
                        self.missing[gap] = now
                self.top = record.id
            self._fold(records, page)
            if len(page) < PAGE:
                break

    def _fold(self, records: RecordReads, found: list[RecordView]) -> None:
        changes = records.change_counts(record.id for record in found)
        for record in found:
            job = record.job
            status = RecordStatus.APPLIED.value if record.status == "undone" else record.status
            self.runs[(job, status)] += 1
            if record.finished_at is not None:
                took = max((record.finished_at - record.started_at).total_seconds(), 0.0)
                counts = self.buckets.setdefault(job, [0] * (len(BUCKETS) + 1))
                counts[next((i for i, b in enumerate(BUCKETS) if took <= b), len(BUCKETS))] += 1
                self.seconds[job] = self.seconds.get(job, 0.0) + took
            if record.tokens_in or record.tokens_out:
                self.tokens[(job, "in")] += record.tokens_in
                self.tokens[(job, "out")] += record.tokens_out
            if record.cost:
                self.cost[(job,)] = self.cost.get((job,), 0.0) + record.cost
            for kind, count in changes.get(record.id, {}).items():
                self.changes[(job, kind)] += count
            stats = record.stats
            for why, count in (
                ("invalid", len(stats.get("dropped") or ())),
                ("outside_batch", len(stats.get("dropped_ids") or ())),
                ("protected", int(stats.get("dropped_protected") or 0)),
            ):
                if count:
                    self.dropped[(job, why)] += count


class JobMetrics(Collector):
    """A prometheus_client collector over the store's records and job state."""

    def __init__(self, db: Database, config: StatusConfig, clock: Callable[[], datetime]) -> None:
        self._db = db
        self._config = config
        self._clock = clock
        self._fold = RecordFold()
        self._lock = threading.Lock()  # scrapes may overlap; the fold is updated by one

    def collect(self) -> Iterator[Metric]:
        now = self._clock()
        with self._lock:
            try:
                self._fold.update(self._db.records, now=now)
            except SQLAlchemyError as exc:
                logger.warning("metrics: cannot read the records: {}", exc)
            yield from _counters(self._fold)
        try:
            status = read_status(self._db, self._config, now=now)
        except SQLAlchemyError as exc:
            logger.warning("metrics: cannot read the jobs' state: {}", exc)
            return
        yield from _gauges(status)


def _counters(fold: RecordFold) -> Iterator[Metric]:
    runs = CounterMetricFamily(
        "secretary_job_runs", "Records of runs by job and status.", labels=["job", "status"]
    )
    for (job, status), count in sorted(fold.runs.items()):
        runs.add_metric([job, status], count)
    yield runs
    durations = HistogramMetricFamily(
        "secretary_job_run_duration_seconds", "How long runs took, by job.", labels=["job"]
    )
    for job, counts in sorted(fold.buckets.items()):
        cumulative, total = [], 0
        for bound, count in zip((*map(str, BUCKETS), "+Inf"), counts, strict=True):
            total += count
            cumulative.append((bound, float(total)))
        durations.add_metric([job], cumulative, sum_value=fold.seconds.get(job, 0.0))
    yield durations
    totals: tuple[tuple[str, str, list[str], Mapping[tuple[str, ...], float]], ...] = (
        ("secretary_llm_tokens", "LLM tokens by job.", ["job", "direction"], fold.tokens),
        ("secretary_llm_cost", "LLM cost (as litellm prices it) by job.", ["job"], fold.cost),
        ("secretary_changes_applied", "Changes written, by job and kind.", ["job", "kind"],
         fold.changes),
        ("secretary_items_dropped", "Items runs dropped, by job and why.", ["job", "reason"],
         fold.dropped),
    )  # fmt: skip
    for name, doc, labels, values in totals:
        family = CounterMetricFamily(name, doc, labels=labels)
        for key, value in sorted(values.items()):
            family.add_metric(list(key), value)
        yield family


def _gauges(status: Status) -> Iterator[Metric]:
    daemon = GaugeMetricFamily(
        "secretary_daemon_running", "1 while a daemon holds the store's lease."
    )
    daemon.add_metric([], 1.0 if status.daemon.running else 0.0)
    yield daemon
    backlog: dict[str, int] = {}
    quarantined: dict[str, int] = {}
    backing_off: dict[str, int] = {}
    for space in status.namespaces:
        for entry in space.jobs:
            name = entry.job
            if entry.backlog_total is not None:
                backlog[name] = backlog.get(name, 0) + entry.backlog_total
            quarantined[name] = quarantined.get(name, 0) + entry.quarantined
            backing_off[name] = backing_off.get(name, 0) + int(entry.backing_off)
    for name, doc, values in (
        ("secretary_job_backlog", "Items past the job's watermarks, all namespaces.", backlog),
        ("secretary_job_quarantined", "Items the job has quarantined.", quarantined),
        ("secretary_job_backing_off", "Namespaces where the job backs off.", backing_off),
    ):
        family = GaugeMetricFamily(name, doc, labels=["job"])
        for job, value in sorted(values.items()):
            family.add_metric([job], value)
        yield family
