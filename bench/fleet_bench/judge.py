"""Pure verdicts over a night's measures: its problems (things that must never happen) and the
issue's targets (numbers to meet), across configurations."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

WALL_TARGET_SECONDS = 600.0  # 1,000 namespaces x 20 lines, 1 s model, one daemon at 16
MEMORY_TARGET_MIB = 600.0
SCALING_TARGETS = {2: 1.8, 3: 2.5}  # daemons -> throughput against one daemon
TAKEOVER_GRACE_SECONDS = 60.0  # a killed daemon's units finished within the lease + this
BINDING_SHARE = 0.9  # a night pressed on its requests-per-minute limit: its busiest 60 s this full


def units_run_twice(result: Mapping[str, Any]) -> int:
    """Namespaces whose unit ran twice: claimed again though the daemon holding it lived, or
    a line of it sent to the extractor twice outside the killed daemon's units, or a line of it
    extracted into two memories."""
    units = result.get("units", {})
    killed = set(result.get("kill", {}).get("namespaces", ()))
    retaken = {ns for ns in units.get("claimed_more_than_once", ()) if ns not in killed}
    sent = set(result.get("lines_sent_twice", {}).get("namespaces_elsewhere", ()))
    made = set(result.get("extraction", {}).get("namespaces_extracted_twice", ()))
    return len(retaken | sent | made)


def units_lost(result: Mapping[str, Any]) -> int:
    """Units not done, plus namespaces whose lines the extractor did not all pass."""
    units = result.get("units", {})
    extraction = result.get("extraction", {})
    return len(units.get("not_done", ())) + int(extraction.get("namespaces_with_lines_left", 0))


def throughput(result: Mapping[str, Any]) -> float:
    """Namespaces dreamed per second."""
    wall = float(result.get("wall_seconds") or 0)
    return result.get("units", {}).get("by_state", {}).get("done", 0) / wall if wall else 0.0


def takeover_ok(result: Mapping[str, Any]) -> bool | None:
    kill = result.get("kill")
    if not kill:
        return None
    lease = float(result.get("settings", {}).get("schedule", {}).get("lease_seconds", 60.0))
    after = kill.get("finished_after_kill_seconds_max")
    held, finished = kill.get("units_held", 0), kill.get("units_finished_by_another", 0)
    return finished == held and (after is None or after <= lease + TAKEOVER_GRACE_SECONDS)


def problems(result: Mapping[str, Any]) -> list[str]:
    """What must never happen, said plainly; [] if none did."""
    found = []
    if result.get("error"):
        found.append(f"failed: {result['error'][:300]}")
    if result.get("timed_out"):
        found.append(f"timed out after {result.get('wall_seconds')} s")
    if result.get("request_status") not in ("done", None) and not result.get("timed_out"):
        found.append(f"request {result.get('request_status')}: {result.get('request_error')}")
    if "units" not in result:
        found.append("no firing was found for the dream request")
    if lost := units_lost(result):
        found.append(f"{lost} unit(s) lost")
    if twice := units_run_twice(result):
        found.append(f"{twice} unit(s) run twice")
    if result.get("calls", {}).get("rpm_exceeded"):
        calls = result["calls"]
        found.append(
            f"{calls['busiest_60s_all_requests']} requests in 60 s over the limit of "
            f"{calls['rpm_limit']}"
        )
    for daemon, code in result.get("exit_codes", {}).items():
        if code:
            found.append(f"{daemon} exited {code} on SIGTERM")
    if takeover_ok(result) is False:
        found.append("the killed daemon's units were not all finished in time")
    if failed := failed_runs(result):
        found.append(f"job runs failed against a model that answers every call: {failed}")
    return found


def failed_runs(result: Mapping[str, Any]) -> dict[str, int]:
    """Job runs that failed, by job. The scripted model answers every call validly, so a run
    can fail only by what the night does to it (429s, timeouts, a lost database)."""
    outcomes = result.get("units", {}).get("outcomes", {})
    return {key.split(":")[0]: count for key, count in outcomes.items() if key.endswith(":failed")}


def targets(nights: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The issue's targets, each with what was measured and whether it was met (None: the
    configuration it needs was not run)."""
    rows = []
    one = nights.get("n1000-d1-l1")
    wall = one.get("wall_seconds") if one else None
    rows.append(
        _row(
            "1,000 namespaces x 20 lines, 1 s model, 1 daemon at 16: wall time",
            f"<= {WALL_TARGET_SECONDS:.0f} s",
            wall,
            None if wall is None else wall <= WALL_TARGET_SECONDS,
            "s",
        )
    )
    memory = max(one.get("daemon_memory_mib", {}).values(), default=None) if one else None
    rows.append(
        _row(
            "peak RSS of one daemon at 16, 1,000 namespaces",
            f"<= {MEMORY_TARGET_MIB:.0f} MiB",
            memory,
            None if memory is None else memory <= MEMORY_TARGET_MIB,
            "MiB",
        )
    )
    # The size first; 100 namespaces also run on two cores, with a 1 s and a 5 s model.
    for size, latency in ((1000, 1), (1000, 5), (100, 1), (100, 5), (300, 5)):
        base = nights.get(f"n{size}-d1-l{latency}")
        for daemons, want in SCALING_TARGETS.items():
            other = nights.get(f"n{size}-d{daemons}-l{latency}")
            if (size, latency) != (1000, 1) and other is None:
                continue
            ratio = (
                throughput(other) / throughput(base)
                if base and other and throughput(base)
                else None
            )
            what = (
                f"{daemons} daemons on PostgreSQL, {size:,} namespaces, model {latency} s: "
                "throughput against one"
            )
            if base and other and _commit(base) != _commit(other):
                what += f" (**measured at commits {_commit(base)} and {_commit(other)}**)"
            rows.append(
                _row(
                    what,
                    f">= {want}x",
                    None if ratio is None else round(ratio, 2),
                    None if ratio is None else ratio >= want,
                    "x",
                )
            )
    measured = [r for r in nights.values() if r.get("units")]
    twice = sum(units_run_twice(r) for r in measured)
    lost = sum(units_lost(r) for r in measured)
    rows.append(_row("units run twice, every configuration", "0", twice, twice == 0, ""))
    rows.append(_row("units lost, every configuration", "0", lost, lost == 0, ""))
    for name in ("n1000-d3-l1-kill", "n100-d3-l1-kill"):
        kill = nights.get(name)
        if kill is None and name != "n1000-d3-l1-kill":
            continue
        after = kill.get("kill", {}).get("finished_after_kill_seconds_max") if kill else None
        rows.append(
            _row(
                f"a SIGKILLed daemon's units finished by another ({name})",
                "within lease + 60 s",
                after,
                takeover_ok(kill) if kill else None,
                "s",
            )
        )
    exceeded = [name for name, r in nights.items() if r.get("calls", {}).get("rpm_exceeded")]
    limited = [r for r in measured if r.get("calls", {}).get("rpm_limit")]
    rows.append(
        _row(
            "requests per minute never over the configured limit (any 60 s window)",
            "never",
            ", ".join(exceeded) or "never",
            None if not limited else not exceeded,
            "",
        )
    )
    # A limit the daemons never came near shows nothing: name the nights that pressed on it.
    binding = {
        name: f"{calls['busiest_60s_all_requests']} / {calls['rpm_limit']}"
        for name, r in nights.items()
        if (calls := r.get("calls", {})).get("rpm_limit")
        and calls.get("busiest_60s_all_requests", 0) >= BINDING_SHARE * calls["rpm_limit"]
    }
    rows.append(
        _row(
            f"... of them, nights whose busiest 60 s reached {BINDING_SHARE:.0%} of the limit",
            "at least one",
            ", ".join(f"{name} ({share})" for name, share in binding.items()) or "none",
            None if not limited else bool(binding) and not exceeded,
            "",
        )
    )
    return rows


def _commit(result: Mapping[str, Any]) -> str:
    return str(result.get("run", {}).get("git_commit", "?"))


def _row(what: str, target: str, measured: Any, met: bool | None, unit: str) -> dict[str, Any]:
    return {"target": what, "wanted": target, "measured": measured, "unit": unit, "met": met}
