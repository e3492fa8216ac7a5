"""One night of one configuration: the store copied, the servers and daemons started, one dream
request for every namespace with work, followed to its end (a daemon SIGKILLed halfway if asked),
then measured.

The clock of every measure is this host's ``time.time()``; the daemons run here too, so the
times they write (a unit's ``finished_at``, the request's) compare with it directly.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from benchkit import say
from sqlalchemy import create_engine

from fleet_bench import calls, checks, config, prepare, procs
from fleet_bench.content import Sizes, expected_memories, items, namespace
from fleet_bench.model import ModelServer
from secretary.config import load_settings

MODEL_PORT = 18501
CHROMA_PORT = 18520
API_PORT = 18530  # daemon k listens on API_PORT + k
POLL_SECONDS = 1.0


@dataclass(frozen=True, kw_only=True)
class Night:
    """A configuration: the store's size, the daemons, the model's latency and limits."""

    name: str
    sizes: Sizes
    daemons: int = 1
    concurrency: int = 16
    latency: float = 1.0
    rpm: int = 0  # [llm] max_requests_per_minute of every daemon (0: none)
    provider_rpm: int = 0  # the scripted server's own limit (429 + Retry-After); 0: none
    kill_at: float = 0.0  # SIGKILL one daemon once this share of the units is done (0: never)
    timeout: float = 3600.0  # give up (and say so) after this many seconds

    @property
    def describe(self) -> str:
        parts = [
            f"{self.sizes.namespaces} namespaces",
            f"{self.daemons} daemon(s) x concurrency {self.concurrency}",
            f"latency {self.latency:g} s",
        ]
        if self.rpm:
            parts.append(f"limit {self.rpm}/min")
        if self.provider_rpm:
            parts.append(f"provider limit {self.provider_rpm}/min")
        if self.kill_at:
            parts.append(f"one SIGKILLed at {self.kill_at:.0%} done")
        return ", ".join(parts)


def run_night(
    night: Night, template: prepare.Template, work: Path, *, keep: bool
) -> dict[str, Any]:
    """Run ``night`` on a copy of ``template``; return what was measured."""
    run_dir = work / "runs" / night.name
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    say(f"{night.name}: {night.describe}")
    copied = prepare.copy(template, night.name, run_dir)
    say(f"{night.name}: store copied in {copied.seconds} s")
    result: dict[str, Any] = {"night": _night_json(night), "copy_seconds": copied.seconds}
    engine = create_engine(f"{prepare.PG}/{copied.database}", pool_pre_ping=True)
    chroma = procs.chroma_server(copied.chroma, CHROMA_PORT, run_dir / "chroma.log")
    daemons: list[procs.Proc] = []
    try:
        with ModelServer(port=MODEL_PORT, latency=night.latency, rpm=night.provider_rpm) as model:
            daemons, result["settings"] = start_daemons(night, copied, chroma.url, model, run_dir)
            result |= drive(night, daemons, model, engine, chroma)
            result["daemon_memory_mib"] = _memory(daemons)
            result["chroma_memory_mib"] = round(max(chroma.hwm_kib, chroma.peak_rss_kib) / 1024, 1)
            result["exit_codes"] = {d.name: d.stop() for d in daemons if d.killed_at is None}
            result["daemon_logs"] = {d.name: d.log_levels() for d in daemons}
            model.write_log(run_dir / "calls.jsonl")
            result["calls"] = calls.summary(
                model.calls,
                wall=result["wall_seconds"],
                rpm=night.rpm,
                counted_peak=model.peak_in_flight,
            )
            result |= verify(night, engine, model, result)
    except (procs.ProcessFailed, httpx.HTTPError) as exc:
        say(f"{night.name}: failed: {exc}")
        result["error"] = str(exc)[:2000]
    finally:
        for proc in daemons:
            if proc.alive():
                proc.stop(timeout=30)
        chroma.stop()
        engine.dispose()
        if not keep:
            prepare.drop(copied.database)
            shutil.rmtree(copied.chroma, ignore_errors=True)
    (run_dir / "result.json").write_text(json.dumps(result, indent=2, default=str))
    return result


def _night_json(night: Night) -> dict[str, Any]:
    return {**asdict(night), "describe": night.describe}


def start_daemons(
    night: Night, copied: prepare.Copy, chroma_url: str, model: ModelServer, run_dir: Path
) -> tuple[list[procs.Proc], dict[str, Any]]:
    """Write each daemon's config and start it; wait until every API answers /healthz."""
    daemons: list[procs.Proc] = []
    applied: dict[str, Any] = {}
    for number in range(night.daemons):
        text, applied = config.daemon_config(
            data_dir=run_dir / f"daemon{number}",
            database_url=f"{prepare.PG}/{copied.database}",
            chroma_url=chroma_url,
            port=API_PORT + number,
            api_base=model.api_base,
            jobs={"concurrency": night.concurrency},
            llm={"max_requests_per_minute": night.rpm},
        )
        path = run_dir / f"daemon{number}.toml"
        path.write_text(text)
        daemons.append(
            procs.daemon(
                f"daemon{number}", path, API_PORT + number, run_dir / f"daemon{number}.log"
            )
        )
    begun = time.monotonic()
    ready = {}
    for proc in daemons:
        procs.wait_ready(proc, f"{proc.url}/healthz")
        ready[proc.name] = round(time.monotonic() - begun, 1)
    say(f"{night.name}: daemons ready after {ready} s")
    settings = load_settings(run_dir / "daemon0.toml", {})
    effective = {
        "ready_after_seconds": ready,
        "applied": applied,
        "jobs": settings.jobs.model_dump(),
        "llm": {k: v for k, v in settings.llm.model_dump().items() if k not in ("api_key",)},
        "schedule": {
            k: v for k, v in settings.schedule.model_dump().items() if not isinstance(v, str) or v
        },
    }
    return daemons, effective


def drive(
    night: Night,
    daemons: list[procs.Proc],
    model: ModelServer,
    engine: Any,
    chroma: procs.Proc,
) -> dict[str, Any]:
    """Ask for the night, follow it to its end, SIGKILL a daemon halfway if asked."""
    progress: list[dict[str, Any]] = []
    kill: dict[str, Any] = {}
    cpu_before = {proc.name: procs.cpu_seconds(proc.pid) or 0.0 for proc in [*daemons, chroma]}
    machine_before = procs.machine_cpu()
    with procs.Sampler([*daemons, chroma], probe=model.snapshot) as sampler:
        started = time.time()
        answer = httpx.post(f"{daemons[0].url}/v1/dream", timeout=30)
        answer.raise_for_status()
        request_id = int(answer.json()["id"])
        say(f"{night.name}: dream request {request_id} queued")
        firing = None
        deadline = time.monotonic() + night.timeout
        last_say = time.monotonic()
        status = "pending"
        while time.monotonic() < deadline:
            time.sleep(POLL_SECONDS)
            _check_alive(daemons)
            firing = firing or checks.firing_of(engine, request_id)
            row = checks.request_row(engine, request_id)
            status = row.status if row is not None else "missing"
            if firing is None:
                continue
            units = checks.unit_states(engine, firing.id)
            counts = _counts(units)
            progress.append({"t": round(time.time() - started, 1), **counts})
            if night.kill_at and not kill and counts["done"] >= night.kill_at * len(units):
                kill = _kill_one(daemons, units, row.picked_by if row is not None else None)
            if kill:
                _follow_takeover(kill, units)
            if time.monotonic() - last_say > 30:
                last_say = time.monotonic()
                in_flight, logged = model.snapshot()
                say(
                    f"{night.name}: {counts} after {time.time() - started:.0f} s; "
                    f"{logged} calls, {in_flight} in flight"
                )
            if status in ("done", "failed"):
                break
        detected = time.time()
        busy, total = (a - b for a, b in zip(procs.machine_cpu(), machine_before, strict=True))
    row = checks.request_row(engine, request_id)
    finished = row.finished_at.timestamp() if row is not None and row.finished_at else detected
    result = {
        "started_at": started,
        "request_id": request_id,
        "request_status": status,
        "request_error": row.error if row is not None else None,
        "timed_out": status not in ("done", "failed"),
        "wall_seconds": round(finished - started, 1),
        "cpu": {
            "machine_busy_share": round(busy / total, 3) if total else None,
            "load_average_end": [round(x, 2) for x in os.getloadavg()],
            "seconds": {
                proc.name: round(proc.cpu - cpu_before[proc.name], 1) for proc in [*daemons, chroma]
            },
        },
        "progress": progress[:: max(1, len(progress) // 200)],
        "in_flight_series": [
            (round(t - started, 1), flight) for t, (flight, _) in sampler.series[::4]
        ],
    }
    if firing is not None:
        result["units"] = checks.units_report(engine, firing.id)
        result["firing"] = {"opened_after": round(firing.opened_at.timestamp() - started, 1)}
    if kill:
        result["kill"] = _kill_json(kill)
    say(f"{night.name}: {status} in {result['wall_seconds']} s")
    return result


def _check_alive(daemons: list[procs.Proc]) -> None:
    for proc in daemons:
        if proc.killed_at is None and not proc.alive():
            raise procs.ProcessFailed(
                f"{proc.name} exited ({proc.popen.returncode}):\n{proc.tail()}"
            )


def _counts(units: list[Any]) -> dict[str, int]:
    now = datetime.now(UTC)
    done = sum(u.state == "done" for u in units)
    running = sum(
        u.state == "running" and u.lease_until is not None and u.lease_until > now for u in units
    )
    return {"done": done, "running": running, "left": len(units) - done - running}


def _kill_one(daemons: list[procs.Proc], units: list[Any], picker: str | None) -> dict[str, Any]:
    """SIGKILL the last daemon that does not hold the request (the opener waits for the end)."""
    picker_pid = (picker or "").split(":")[1] if picker and picker.count(":") >= 2 else ""
    victim = next(d for d in reversed(daemons) if str(d.pid) != picker_pid)
    held = [u for u in units if u.state == "running" and u.holder and f":{victim.pid}:" in u.holder]
    victim.kill()
    say(f"SIGKILL {victim.name} (pid {victim.pid}) holding {len(held)} unit(s)")
    return {
        "daemon": victim.name,
        "pid": victim.pid,
        "at": victim.killed_at,
        "done_before": sum(u.state == "done" for u in units),
        "held": {
            u.id: {"namespace": u.namespace, "finished": None, "claims": u.claims} for u in held
        },
    }


def _follow_takeover(kill: dict[str, Any], units: list[Any]) -> None:
    for unit in units:
        held = kill["held"].get(unit.id)
        if held is not None and held["finished"] is None and unit.state == "done":
            held["finished"] = unit.finished_at.timestamp()
            held["claims"] = unit.claims
            held["holder"] = (unit.holder or "").split(":")[1] if unit.holder else None


def _kill_json(kill: dict[str, Any]) -> dict[str, Any]:
    held = kill["held"].values()
    after = [h["finished"] - kill["at"] for h in held if h["finished"] is not None]
    return {
        "daemon": kill["daemon"],
        "units_done_before": kill["done_before"],
        "units_held": len(held),
        "units_finished_by_another": len(after),
        "finished_after_kill_seconds_max": round(max(after), 1) if after else None,
        "namespaces": sorted(h["namespace"] for h in held),
    }


def _memory(daemons: list[procs.Proc]) -> dict[str, float]:
    for proc in daemons:
        if proc.alive():
            proc.sample()
    return {d.name: round(max(d.hwm_kib, d.peak_rss_kib) / 1024, 1) for d in daemons}


def verify(night: Night, engine: Any, model: ModelServer, result: dict[str, Any]) -> dict[str, Any]:
    """Units lost or run twice, what the extractor left, tokens against the records."""
    expected = {
        namespace(n): expected_memories(items(night.sizes, n)[1])
        for n in range(night.sizes.namespaces)
    }
    twice = calls.lines_sent_twice(model.calls)
    owners = checks.line_owners(engine) if twice else {}
    killed = set(result.get("kill", {}).get("namespaces", ()))
    by_ns = calls.namespaces_of(twice, owners)
    since = datetime.fromtimestamp(result["started_at"], UTC)
    return {
        "extraction": checks.extraction_report(engine, expected),
        "lines_sent_twice": {
            "in_killed_units": sum(n for ns, n in by_ns.items() if ns in killed),
            "elsewhere": sum(n for ns, n in by_ns.items() if ns not in killed),
            "namespaces_elsewhere": sorted(ns for ns in by_ns if ns not in killed),
        },
        "records": checks.records_report(engine, since),
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
    }
