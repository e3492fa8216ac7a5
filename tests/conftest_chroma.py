"""Pytest plugin: a real Chroma server (the ``chroma`` CLI) on 127.0.0.1 for the session.

Tests that need it take ``chroma_server_url`` and carry ``@pytest.mark.chroma_server``.
With SECRETARY_REQUIRE_CHROMA_SERVER=1 (CI) a server that will not start fails them;
otherwise they are skipped with the reason.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import httpx
import pytest

START_TIMEOUT = 60.0  # seconds to wait for the first heartbeat
STOP_TIMEOUT = 10.0
_START_ATTEMPTS = 3  # a freshly picked free port can be taken before the server binds it


class ChromaServerError(Exception):
    """The Chroma server could not be started."""


@dataclass
class ChromaServer:
    """A running ``chroma run`` process."""

    url: str
    process: subprocess.Popen[bytes]

    def stop(self) -> None:
        """Terminate the server (kill it if it lingers); safe to call twice."""
        if self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@pytest.fixture(scope="session")
def chroma_server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Start one Chroma server for the session and yield its URL."""
    with _server_or_skip(tmp_path_factory.mktemp("chroma-server")) as server:
        yield server.url


@pytest.fixture
def dedicated_chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChromaServer]:
    """A Chroma server of this test's own, which the test may stop."""
    with _server_or_skip(tmp_path_factory.mktemp("chroma-dedicated")) as server:
        yield server


@contextmanager
def _server_or_skip(workdir: Path) -> Iterator[ChromaServer]:
    try:
        server = start_chroma_server(workdir)
    except ChromaServerError as exc:
        _unavailable(str(exc))
    try:
        yield server
    finally:
        server.stop()


def start_chroma_server(workdir: Path, *, graphs_kept: int | None = None) -> ChromaServer:
    """Run ``chroma run`` with data and log under workdir; return once it answers. With
    ``graphs_kept``, from a config file that keeps at most that many collection graphs open
    (docs/operations.md, "How many namespaces a Chroma server holds")."""
    executable = chroma_executable()
    if executable is None:
        raise ChromaServerError("the chroma CLI was not found (PATH or next to the interpreter)")
    problems = []
    for attempt in range(_START_ATTEMPTS):
        port = _free_port()
        log_path = workdir / f"server-{attempt}.log"
        command = [executable, "run", "--host", "127.0.0.1", "--port", str(port)]
        command += ["--path", str(workdir / "data")]
        if graphs_kept is not None:
            config = workdir / f"config-{attempt}.yaml"
            config.write_text(
                f'persist_path: "{workdir / "data"}"\nlisten_address: "127.0.0.1"\n'
                f"port: {port}\nsegment_manager:\n  hnsw_index_pool_cache_config:\n"
                f"    memory:\n      capacity: {graphs_kept}\n"
            )
            command = [executable, "run", str(config)]
        with log_path.open("wb") as log:
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        server = ChromaServer(url=f"http://127.0.0.1:{port}", process=process)
        try:
            _wait_for_heartbeat(server, log_path)
        except ChromaServerError as exc:
            exited = process.poll() is not None  # e.g. lost the port race: try another
            server.stop()
            problems.append(str(exc))
            if exited:
                continue
            break
        return server
    raise ChromaServerError("; ".join(problems))


def chroma_executable() -> str | None:
    """Return the chroma CLI: on PATH, else in the interpreter's bin directory."""
    found = shutil.which("chroma")
    if found:
        return found
    beside = Path(sys.executable).parent / "chroma"
    return str(beside) if beside.is_file() else None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_for_heartbeat(server: ChromaServer, log_path: Path) -> None:
    """Return once the server answers; raise ChromaServerError if it exits or times out."""
    url, process = server.url, server.process
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ChromaServerError(
                f"chroma run exited with {process.returncode}: {_tail(log_path)}"
            )
        try:
            httpx.get(f"{url}/api/v2/heartbeat", timeout=1.0).raise_for_status()
        except httpx.HTTPError:
            time.sleep(0.1)  # polling a process that gives no readiness signal
            continue
        return
    raise ChromaServerError(f"no heartbeat from {url} in {START_TIMEOUT:.0f} s: {_tail(log_path)}")


def _tail(log_path: Path, lines: int = 10) -> str:
    text = log_path.read_text(encoding="utf-8", errors="replace")
    return " | ".join(text.strip().splitlines()[-lines:]) or "(no output)"


def _unavailable(reason: str) -> NoReturn:
    """Fail when CI requires the server, else skip."""
    message = f"Chroma server unavailable: {reason}"
    if os.environ.get("SECRETARY_REQUIRE_CHROMA_SERVER", "") == "1":
        pytest.fail(message)
    pytest.skip(message)
