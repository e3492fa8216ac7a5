"""Processes a night runs: a Chroma server and `secretary run` daemons, started, watched for
memory, killed or stopped. Only processes started here are ever signalled, by their pid."""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx
from benchkit import ROOT

BIN = Path(sys.executable).parent  # the venv's bin: chroma and secretary
START_SECONDS = 120.0


class ProcessFailed(RuntimeError):
    """A process the benchmark started exited or never became ready."""


def clean_environ(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without SECRETARY_* (nothing of the shell's changes what is
    measured), with litellm kept offline, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SECRETARY_")}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    return env | dict(extra or {})


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float | None:
    """User plus system CPU time of ``pid`` so far; None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime


def machine_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, from /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    idle = values[3] + values[4]  # idle, iowait
    return (sum(values) - idle) / CLOCK_TICKS, sum(values) / CLOCK_TICKS


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak RSS) of ``pid`` in KiB; {} once it is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    found = {}
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            found[name] = int(value.split()[0])
    return found


@dataclass
class Proc:
    """A started process: its name, Popen, log file and what was seen of its memory."""

    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    log: IO[bytes]
    url: str = ""
    peak_rss_kib: int = 0  # the most VmRSS sampled
    hwm_kib: int = 0  # VmHWM, read last while it lived
    killed_at: float | None = None
    cpu: float = 0.0  # CPU seconds, read last while it lived
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def sample(self) -> None:
        seen = memory_kib(self.pid)
        self.cpu = cpu_seconds(self.pid) or self.cpu
        if seen:
            self.peak_rss_kib = max(self.peak_rss_kib, seen.get("VmRSS", 0))
            self.hwm_kib = max(self.hwm_kib, seen.get("VmHWM", 0))

    def kill(self) -> None:
        """SIGKILL, as a crash or the OOM killer would (its peak memory read just before)."""
        self.sample()
        self.killed_at = time.time()
        self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(timeout=30)
        self.log.close()

    def stop(self, timeout: float = 90.0) -> int | None:
        """SIGTERM and wait; SIGKILL after ``timeout``. Return the exit code."""
        if self.alive():
            self.sample()
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.popen.send_signal(signal.SIGKILL)
                self.popen.wait(timeout=30)
        if not self.log.closed:
            self.log.close()
        return self.popen.returncode

    def log_levels(self) -> dict[str, Any]:
        """How many ERROR and WARNING lines its log holds, and the first of each."""
        found: dict[str, Any] = {}
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return found
        for level in ("ERROR", "WARNING"):
            hits = [line for line in lines if f" {level} " in line]
            found[level] = len(hits)
            if hits:
                found[f"first_{level.lower()}"] = hits[0][:300]
        return found

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def port_free(port: int) -> bool:
    """Tell whether nothing listens on 127.0.0.1:``port`` (a server of an earlier run, or of
    another benchmark, would otherwise answer our readiness probe)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def start(name: str, command: Sequence[str], log_path: Path, env: Mapping[str, str]) -> Proc:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = log_path.open("wb")
    popen = subprocess.Popen(
        list(command), stdout=log, stderr=subprocess.STDOUT, env=dict(env), cwd=ROOT
    )
    return Proc(name=name, popen=popen, log_path=log_path, log=log)


def wait_ready(proc: Proc, url: str, timeout: float = START_SECONDS) -> None:
    """Wait until GET ``url`` answers 200; raise ProcessFailed if the process exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proc.alive():
            raise ProcessFailed(f"{proc.name} exited ({proc.popen.returncode}):\n{proc.tail()}")
        try:
            if httpx.get(url, timeout=2).status_code == 200 and proc.alive():
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    raise ProcessFailed(f"{proc.name} not ready at {url} after {timeout:.0f} s:\n{proc.tail()}")


def chroma_indexes() -> int:
    """How many collections' HNSW indexes the Chroma server keeps open: a fifth of the open-file
    limit it inherits, as chromadb's embedded client does. Each open index holds 4 files;
    `chroma run --path` keeps up to 65,536 open, so at a limit of 20,000 it stopped writing at
    4,994 collections ("Failed to apply logs to the hnsw segment writer"). An index evicted
    closes its files and is read again from disk when next used (docs/operations.md)."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return 65536 if soft == resource.RLIM_INFINITY else max(soft // 5, 1)


def chroma_config(path: Path, port: int) -> str:
    """`chroma run`'s YAML for ``path`` on 127.0.0.1:``port`` (a config file excludes --path,
    --host and --port), with the server's HNSW index pool bounded by chroma_indexes()."""
    return "\n".join(
        [
            f"persist_path: {json.dumps(str(path))}",
            'listen_address: "127.0.0.1"',
            f"port: {port}",
            "stdout_tracing: true",  # what `chroma run --path` logs
            "segment_manager:",
            "  hnsw_index_pool_cache_config:",
            "    memory:",
            f"      capacity: {chroma_indexes()}",
            "",
        ]
    )


def chroma_server(path: Path, port: int, log_path: Path) -> Proc:
    """Start `chroma run` on ``path`` (its config beside ``log_path``) and wait for its
    heartbeat. Raise ProcessFailed if the port is taken."""
    if not port_free(port):
        raise ProcessFailed(f"port {port} is in use: is another fleet run going?")
    config = log_path.with_suffix(".yaml")
    config.write_text(chroma_config(path, port))
    command = [str(BIN / "chroma"), "run", str(config)]
    proc = start("chroma", command, log_path, clean_environ())
    proc.url = f"http://127.0.0.1:{port}"
    wait_ready(proc, f"{proc.url}/api/v2/heartbeat")
    return proc


def daemon(name: str, config: Path, port: int, log_path: Path) -> Proc:
    """Start `secretary run` with ``config`` (its API on ``port``); do not wait for it. Raise
    ProcessFailed if the port is taken."""
    if not port_free(port):
        raise ProcessFailed(f"port {port} is in use: is another fleet run going?")
    command = [str(BIN / "secretary"), "--log-level", "INFO", "run"]
    proc = start(name, command, log_path, clean_environ({"SECRETARY_CONFIG": str(config)}))
    proc.url = f"http://127.0.0.1:{port}"
    return proc


class Sampler:
    """A thread that samples processes' memory and a probe (e.g. calls in flight) each tick."""

    def __init__(self, procs: Sequence[Proc], probe: Any = None, every: float = 0.5) -> None:
        self.procs = list(procs)
        self.probe = probe
        self.every = every
        self.series: list[tuple[float, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fleet-sampler", daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for proc in self.procs:
            if proc.alive():
                proc.sample()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            for proc in self.procs:
                if proc.alive() and proc.killed_at is None:
                    proc.sample()
            if self.probe is not None:
                self.series.append((time.time(), self.probe()))
