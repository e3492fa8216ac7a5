"""The Markdown of the results: how it was run and measured, a row per night, where the lock
time went, whether the nights left the same store, and a reading of the figures."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MEASURED = (
    "**How the write-lock wait is measured.** In the night's process only, before the store is "
    "opened, listeners are registered on SQLAlchemy's `Engine` class (so they reach the engine "
    "the store makes; nothing under `store/` or `secretary/` changes). The store begins every "
    "write session on SQLite with `BEGIN IMMEDIATE` (`store/db.py`), which returns only once "
    "SQLite's one write lock is free (pysqlite's busy handler sleeps and retries meanwhile, "
    "`timeout=30`). *Asked* is `before_cursor_execute` of that statement, *acquired* its "
    "`after_cursor_execute`, *released* the moment the dialect's `do_commit` or `do_rollback` "
    "returned (the engine's dialect object wraps both, since SQLAlchemy has no after-commit "
    "event). **Wait** = acquired - asked (it includes getting the GIL back once SQLite granted "
    "the lock); **held** = released - acquired, which includes the Python work done inside the "
    "transaction and any time its thread waited for the GIL; *held off CPU* is the share of "
    "the held time the holding thread was not on a CPU (its `time.thread_time` against the "
    "wall clock: waiting for the GIL while other threads ran, or for the disk). "
    "*Lock busy* is the held total over the night's wall time; *idle while waiting* is the time "
    "at least one transaction waited while none held the lock as measured: the busy handler's "
    "polling (it sleeps 1, 2, 5, 10, ... ms between tries) and a granted waiter getting the GIL "
    "back. On PostgreSQL, which has no database-wide write "
    "lock, a write transaction (a connection with the store's `write` option) counts from its "
    "`begin` event to its commit: there is no wait to measure, and row-lock waits, if any, are "
    "inside *held*. The embedded Chroma's own SQLite file is not SQLAlchemy's and is not "
    "measured."
)


def prep_line(state: Mapping[str, Any]) -> str:
    ingest, vectors = state["ingest"], state["vectors"]
    return (
        f"{ingest['memories']:,} memories and {ingest['lines']:,} lines in "
        f"{ingest['seconds']} s, {vectors['memories']:,} pool vectors in {vectors['seconds']} s"
    )


def _ms(value: float) -> str:
    return f"{value:.1f}" if value < 100 else f"{value:.0f}"


def summary_rows(nights: Mapping[str, Mapping[str, Any]]) -> list[str]:
    rows = [
        "| night | wall s | calls | calls/s | peak in flight | write txns | waited > 1 ms | "
        "wait total s | wait p50 / p95 / max ms | held total s | held p50 / p95 ms | "
        "held off CPU | lock busy | idle while waiting s | CPU s | peak RSS MiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, n in nights.items():
        lock, calls, dream = n["lock"], n["calls"], n["dream"]
        wait, held = lock["wait"], lock["held"]
        sqlite = n["backend"] == "sqlite"
        rows.append(
            f"| {name} | {dream['wall_s']:.1f} | {calls['answered']} | {calls['per_second']} | "
            f"{calls['peak_in_flight']} | {lock['write_transactions']} | "
            + (
                f"{lock['waited_over_1ms']} | {wait['total_s']:.2f} | "
                f"{_ms(wait['p50_ms'])} / {_ms(wait['p95_ms'])} / {_ms(wait['max_ms'])} | "
                if sqlite
                else "n/a | n/a | n/a | "
            )
            + f"{held['total_s']:.2f} | {_ms(held['p50_ms'])} / {_ms(held['p95_ms'])} | "
            f"{lock['held_off_cpu_share']:.0%} | {lock['lock_busy_share']:.0%} | "
            + (f"{lock['idle_while_waiting_s']:.2f} | " if sqlite else "n/a | ")
            + f"{n['cpu_s']} | {dream['peak_rss_mib']:.0f} |"
        )
    return rows


def breakdown_rows(rows: list[Mapping[str, Any]], what: str) -> list[str]:
    out = [
        f"| {what} | txns | wait total s | wait p95 ms | held total s | held p50 / p95 ms |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        out.append(
            f"| {row['label']} | {row['count']} | {row['wait_total_s']:.2f} | "
            f"{_ms(row['wait_p95_ms'])} | {row['held_total_s']:.2f} | "
            f"{_ms(row['held_p50_ms'])} / {_ms(row['held_p95_ms'])} |"
        )
    return out


def store_rows(nights: Mapping[str, Mapping[str, Any]]) -> list[str]:
    rows = [
        "| night | memories | relations | same count | same contents | same relations | "
        "records of the night | tokens in / out | exit |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, n in nights.items():
        same, store = n["same_as"], n["store"]
        total = same["namespaces"]
        records = ", ".join(f"{k} {v}" for k, v in sorted(store["records"].items()))
        rows.append(
            f"| {name} | {store['memories']:,} | {store['relations']:,} | "
            f"{same['same_memory_count']}/{total} | {same['same_contents']}/{total} | "
            f"{same['same_relations']}/{total} | {records} | "
            f"{store['tokens']['in']:,} / {store['tokens']['out']:,} | "
            f"{n['dream']['exit_code']} |"
        )
    return rows


def _long_waits(long: Mapping[str, Any]) -> str:
    if not long["count"]:
        return "No wait passed 100 ms. "
    return (
        f"{long['count']} waits passed 100 ms; while each went on, "
        f"{long['mean_overtaken_by']} other transactions took the lock first on average (the "
        f"busy handler keeps no queue), and it lay free {long['lock_free_share']:.0%} of "
        "their waiting. "
    )


def reading(nights: Mapping[str, Mapping[str, Any]], namespaces: int) -> list[str]:
    """What the figures say, computed from them (no judgement written in advance).

    The lock's cost in wall time is about wait / concurrency at most: each namespace runs its
    jobs one after another, so a wait lengthens its own chain, and C chains share the night;
    while one run waits for the lock the others go on using the CPU, so it is an upper estimate.
    The writer's ceiling is the namespaces a second its lock time allows: namespaces / held."""
    sqlite = [n for n in nights.values() if n["backend"] == "sqlite"]
    lines = []
    first = sqlite[0] if sqlite else None
    for n in sqlite:
        lock, wall, slots = n["lock"], n["dream"]["wall_s"], min(n["concurrency"], namespaces)
        waits, held = lock["wait"]["total_s"], lock["held"]["total_s"]
        faster = (
            f" ({first['dream']['wall_s'] / wall:.1f}x faster than {first['name']})"
            if first is not None and n is not first
            else ""
        )
        lines.append(
            f"- **{n['name']}**: {wall:.0f} s wall{faster}, {n['calls']['peak_in_flight']} "
            f"calls in flight at peak, CPU {n['cpu_s']} s ({n['cpu_s'] / wall:.0%} of one "
            f"core; machine busy {n['machine_busy_share']:.0%}). The write lock was held "
            f"{lock['lock_busy_share']:.0%} of the night ({held:.1f} s over "
            f"{lock['write_transactions']} transactions, {lock['held_off_cpu_share']:.0%} of "
            f"it with the holder off the CPU); {lock['waited_over_1ms']} of them "
            f"queued for it over 1 ms, {waits:.1f} s of waiting in all, "
            f"{lock['idle_while_waiting_s']:.2f} s of it with the lock free (the busy "
            f"handler's polling, the GIL). {_long_waits(lock['long_waits'])}Cost in wall "
            f"time at most about {waits / slots:.1f} s "
            f"({waits / slots / wall:.1%} of the night: the wait spread over {slots} "
            f"namespace(s) at once); the writer's ceiling at these hold times "
            f"{namespaces / held:.0f} namespaces/s ({namespaces / wall:.2f} reached)."
            if held
            else f"- **{n['name']}**: {wall:.0f} s wall; no write transaction was measured."
        )
    for n in (n for n in nights.values() if n["backend"] != "sqlite"):
        twin = next((s for s in sqlite if s["concurrency"] == n["concurrency"]), None)
        if twin is None:
            lines.append(
                f"- **{n['name']}**: {n['dream']['wall_s']:.0f} s wall, CPU {n['cpu_s']} s; "
                f"its write transactions held {n['lock']['held']['total_s']:.1f} s in all "
                "(no SQLite night at the same concurrency to compare with)."
            )
        else:
            lines.append(
                f"- **{n['name']}**: {n['dream']['wall_s']:.0f} s wall against "
                f"{twin['dream']['wall_s']:.0f} s on SQLite at the same concurrency; "
                f"CPU {n['cpu_s']} s against {twin['cpu_s']} s (the PostgreSQL server's own "
                f"CPU is not in it, machine busy {n['machine_busy_share']:.0%}); its write "
                f"transactions held {n['lock']['held']['total_s']:.1f} s in all "
                f"(p50 {_ms(n['lock']['held']['p50_ms'])} ms against "
                f"{_ms(twin['lock']['held']['p50_ms'])} ms on SQLite), "
                f"{n['lock']['overlapping_holds']} of them overlapping another."
            )
    return lines


def render(results: Mapping[str, Any]) -> str:
    run, nights, sizes, store = (
        results["run"],
        results["nights"],
        results["sizes"],
        results["store"],
    )
    machine = run["machine"]
    first = next(iter(nights.values()))
    lines = [
        "# SQLite's single writer during a night (issue 27)",
        "",
        "`python bench/sqlite_night.py` (see `--help`): one night of `secretary dream` over "
        f"{sizes['namespaces']} namespaces ({sizes['memories']} maintained memories and "
        f"{sizes['lines_lo']} new conversation log lines each) on the project's default store "
        "(SQLite and the embedded Chroma in one data directory), at several `[jobs] "
        "concurrency`, against a scripted model answering after "
        f"{first['latency_s']:g} s; the question is what SQLite's one writer costs when the "
        "namespaces' short write transactions queue for it.",
        "",
        f"- Run: {run['date_utc']}, commit {run['git_commit']}"
        + (" (store/ or secretary/ modified in the worktree)" if run["worktree_dirty"] else "")
        + f", `{run['command']}`.",
        f"- Machine: {machine['platform']}, {machine['cpu_count']} cores, "
        f"{machine['memory_gib']} GiB, Python {machine['python']}; load average before "
        f"{machine['load_average_before']}; versions {run['versions']}.",
        f"- Store: prepared once ({prep_line(store)}), copied per night (a file copy of the "
        "data directory); the PostgreSQL night builds the same store in a database of its own, "
        "with an embedded Chroma, and drops it after.",
        "- Night: `secretary --config NIGHT.toml dream` run in-process through the CLI "
        "(`secretary.cli.cli`) in a worker process that does nothing else; the config sets only "
        "the data directory (and on PostgreSQL `[database] url`), the model and `[jobs] "
        "concurrency`. Wall and CPU seconds are the worker's, around that call (opening the "
        "store, the jobs, the final index sync); peak RSS its ru_maxrss. Calls and peak in "
        "flight are counted by the scripted model (bench/fleet_bench/model.py) in the parent "
        "process.",
        "",
        MEASURED,
        "",
        "## Nights",
        "",
        *summary_rows(nights),
        "",
        "## Reading",
        "",
        *reading(nights, sizes["namespaces"]),
        "",
        f"## The store after each night (compared with {first['name']})",
        "",
        "Per namespace: the number of memories, a digest of every memory's (type, status, "
        "content), and the relations by type.",
        "",
        *store_rows(nights),
        "",
    ]
    for name, n in nights.items():
        lock = n["lock"]
        lines += [
            f"## {name}: where the lock time went",
            "",
            f"Machine busy {n['machine_busy_share']:.0%} over the night; calls by job "
            f"{n['calls']['by_job']}; rolled back {lock['rolled_back']}, failed to get the lock "
            f"{lock['failed_to_lock']}, holds overlapping {lock['overlapping_holds']} "
            f"({lock['overlap']['total_ms']} ms in all, at most {lock['overlap']['max_ms']} "
            "ms; on SQLite that is a committing thread getting the GIL back late), "
            f"INSERT/UPDATE/DELETE outside a write transaction "
            f"{lock['dml_outside_write_transactions'] or 'none'}; wait p99 "
            f"{_ms(lock['wait']['p99_ms'])} ms, held p99 {_ms(lock['held']['p99_ms'])} / max "
            f"{_ms(lock['held']['max_ms'])} ms.",
            "",
            *breakdown_rows(lock["by_tables"], "tables written (first three)"),
            "",
            *breakdown_rows(lock["by_thread"], "thread"),
            "",
        ]
    return "\n".join(lines)
