"""One night: a copy of the store, the scripted model on a free port of 18700-18799, the worker
process running `secretary dream`, then what the model saw and what the store holds."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from benchkit import say
from fleet_bench import procs
from fleet_bench.config import SCRIPTED_MODEL, toml
from fleet_bench.model import ModelServer

from sqlite_night_bench import checks, stats

PORTS = range(18700, 18800)
SCRIPT = Path(__file__).resolve().parents[1] / "sqlite_night.py"
NIGHT_TIMEOUT = 1800.0


@dataclass(frozen=True, kw_only=True)
class Night:
    name: str  # sqlite-c4, postgres-c16
    backend: str  # sqlite, postgresql
    concurrency: int


def free_port() -> int:
    for port in PORTS:
        if procs.port_free(port):
            return port
    raise RuntimeError("no free port in 18700-18799")


def config_text(data_dir: Path, database_url: str, api_base: str, concurrency: int) -> str:
    """The operator's config: the data directory (and, on PostgreSQL, [database] url), the
    model, [jobs] concurrency; everything else at its default, no [index] chroma_url."""
    sections: dict[str, dict[str, Any]] = {}
    if database_url:
        sections["database"] = {"url": database_url}
    sections["llm"] = {"model": SCRIPTED_MODEL, "api_base": api_base, "api_key": "bench"}
    sections["jobs"] = {"concurrency": concurrency}
    return toml({"data_dir": str(data_dir)}, sections)


def run_night(
    night: Night,
    *,
    data_dir: Path,
    database_url: str,
    run_dir: Path,
    latency: float,
) -> dict[str, Any]:
    """Run ``night`` on the store in ``data_dir`` (and ``database_url``, "" for SQLite)."""
    port = free_port()
    model = ModelServer(port=port, latency=latency, rpm=0)
    config = run_dir / "config.toml"
    config.write_text(config_text(data_dir, database_url, model.api_base, night.concurrency))
    spec = {
        "config": str(config),
        "out": str(run_dir / "worker.json"),
        "stdout": str(run_dir / "dream.out"),
    }
    (run_dir / "spec.json").write_text(json.dumps(spec))
    busy_before, total_before = procs.machine_cpu()
    say(f"{night.name}: dreaming (model on port {port}, {latency:g} s)")
    with model, (run_dir / "worker.log").open("w") as log:
        started = time.monotonic()
        worker = subprocess.run(
            [sys.executable, str(SCRIPT), "--worker", str(run_dir / "spec.json")],
            env=procs.clean_environ(),
            stdout=log,
            stderr=subprocess.STDOUT,
            timeout=NIGHT_TIMEOUT,
            check=False,
        )
        elapsed = time.monotonic() - started
        calls = list(model.calls)
        peak = model.peak_in_flight
    busy_after, total_after = procs.machine_cpu()
    model_log = run_dir / "model-calls.jsonl"
    model.write_log(model_log)
    if worker.returncode != 0:
        tail = (run_dir / "worker.log").read_text()[-2000:]
        raise RuntimeError(f"{night.name}: the worker exited {worker.returncode}:\n{tail}")
    done = json.loads((run_dir / "worker.json").read_text())
    metered = done.pop("meter")
    (run_dir / "transactions.json").write_text(json.dumps(metered))
    answered = [call for call in calls if call.status == 200]
    wall = done["wall_s"]
    facts = checks.store_facts(
        database_url or f"sqlite:///{data_dir / 'secretary.db'}",
        datetime.fromisoformat(done["started_at"]),
    )
    result = {
        "name": night.name,
        "backend": night.backend,
        "concurrency": night.concurrency,
        "latency_s": latency,
        "dream": done,
        "process_seconds": round(elapsed, 1),
        "cpu_s": round(done["cpu_user_s"] + done["cpu_system_s"], 1),
        "machine_busy_share": round(
            (busy_after - busy_before) / max(total_after - total_before, 1e-9), 2
        ),
        "calls": {
            "answered": len(answered),
            "per_second": round(len(answered) / wall, 2) if wall else 0.0,
            "by_job": dict(sorted(Counter(call.job for call in answered).items())),
            "not_answered": len(calls) - len(answered),
            "peak_in_flight": peak,
            "tokens_in": sum(call.prompt_tokens for call in answered),
            "tokens_out": sum(call.completion_tokens for call in answered),
        },
        "lock": stats.summarise(metered, wall),
        "store": facts,
    }
    say(
        f"{night.name}: {wall:.1f} s, {len(answered)} calls, peak {peak} in flight, "
        f"write-lock wait {result['lock']['wait']['total_s']} s over "
        f"{result['lock']['write_transactions']} transactions, CPU {result['cpu_s']} s, "
        f"exit {done['exit_code']}"
    )
    return result
