"""Measurements over HTTP: `secretary serve` in a subprocess, sequential keep-alive requests."""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

from benchkit import ROOT, say

from latency_bench.common import NAMESPACE, WARMUP, bounded, load_average, percentiles, timed
from latency_bench.prepare import Prepared


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _rss(pid: int) -> dict[str, float]:
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = round(int(rest.split()[0]) / 1024, 1)  # kB -> MiB
    return values


@contextmanager
def server(data_dir: Path, log_path: Path) -> Iterator[tuple[str, int]]:
    """Run `secretary serve` on a free local port; always stop it. Yield (base url, pid)."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SECRETARY_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    command = [
        sys.executable, "-c", "from secretary.cli import main; main()",
        "--data-dir", str(data_dir), "serve", "--host", "127.0.0.1", "--port", str(port),
    ]  # fmt: skip
    with log_path.open("w") as log:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            yield f"http://127.0.0.1:{port}", process.pid
        finally:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                say("the server did not stop within 30 s; killing it")
                process.kill()
                process.wait(timeout=10)


def _wait_ready(client: Any, timeout: float, *, warm: bool = False) -> None:
    """Wait until /healthz answers 200 (and, with ``warm``, reports the warm-up done)."""
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            response = client.get("/healthz")
            if response.status_code == 200 and (not warm or response.json().get("warm")):
                return
        except httpx.TransportError:
            pass  # not listening yet
        time.sleep(0.2)
    state = "warm" if warm else "ready"
    raise SystemExit(f"the API server did not become {state} within {timeout:.0f} s")


def measure_http(
    prep: Prepared, queries: Sequence[str], args: argparse.Namespace
) -> dict[str, Any]:
    """Sequential keep-alive requests to GET /v1/search on a served copy of the store."""
    import httpx

    out: dict[str, Any] = {"concurrency": 1, "load_average_before": load_average()}
    log_path = prep.dir / "serve.log"
    with (
        server(prep.data_dir, log_path) as (url, pid),
        httpx.Client(base_url=url, timeout=60.0) as client,
    ):
        started = time.monotonic()
        _wait_ready(client, timeout=120)
        out["listening_s"] = round(time.monotonic() - started, 1)
        rss: dict[str, Any] = {"after_start": _rss(pid)}
        _wait_ready(client, timeout=1800, warm=True)
        out["warm_s"] = round(time.monotonic() - started, 1)  # start-up warm-up finished

        def get(query: str) -> httpx.Response:
            params = {"q": query, "namespace": NAMESPACE, "k": "10", "reinforce": "false"}
            response = client.get("/v1/search", params=params)
            response.raise_for_status()
            return response

        warmup, measured = queries[:WARMUP], queries[WARMUP:]
        out["cold_first_request_ms"] = round(timed(lambda: get(warmup[0])) * 1000, 1)
        for query in warmup:
            get(query)
        rss["after_warmup"] = _rss(pid)
        samples = [timed(partial(get, query)) for query in bounded(measured, args.budget)]
        rss["after_searches"] = _rss(pid)
        out["search"] = percentiles(samples)
        out["rss_mib"] = rss
    out["load_average_after"] = load_average()
    return out
