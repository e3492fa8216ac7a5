"""The scripted model: an OpenAI-compatible chat server on 127.0.0.1 with a set latency, a
requests-per-minute limit, an in-flight counter and a log of every call.

Each job's reply is ``maintenance_bench.scripted``'s (a valid answer to the job's schema built
from the ids and texts of the request: one memory per log line of six words or more, a relation
per linker group, a merge verdict per exact repeat, a trait per ten memories, a summary per
cluster). A thread per request (``ThreadingHTTPServer``), so calls overlap as they would at a
provider; each answered call sleeps ``latency`` seconds before its reply is sent.

The limit is a sliding window, as providers apply it: a call arriving when ``rpm`` calls were
answered in the last 60 s gets 429 with ``Retry-After`` (whole seconds until the oldest of them
leaves the window) and is not counted. Every arrival is logged, 429s included, with the calls
in flight when it arrived; tokens are counted as bench/maintenance.py's server counts them
(``litellm.token_counter(model=COUNT_MODEL)`` over the messages; the reply text; the schema
apart) and reported in the reply's usage, so the daemons' budgets and records see them.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

from maintenance_bench.llm import COUNT_MODEL
from maintenance_bench.scripted import REPLIES, SCHEMA_JOBS, block

from secretary.llm.provider import import_litellm

WINDOW_SECONDS = 60.0


@dataclass(frozen=True, kw_only=True)
class Call:
    """One request as the server saw it; ``at`` and ``end`` are time.time() seconds."""

    at: float
    end: float
    status: int
    job: str
    in_flight: int  # answered calls in flight when this one arrived, itself included
    prompt_tokens: int = 0
    completion_tokens: int = 0
    schema_tokens: int = 0
    repair: bool = False
    log_ids: tuple[int, ...] = ()  # the extractor's lines sent in this call
    error: str = ""  # why a request was refused (400): the parse error and the body's start


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # the default 5 would refuse a burst of daemons' connections


class ModelServer:
    """Serve ``latency``-second answers on 127.0.0.1:``port``; ``rpm`` 0 = no limit."""

    def __init__(self, *, port: int, latency: float, rpm: int) -> None:
        self.port = port
        self.latency = latency
        self.rpm = rpm
        self.calls: list[Call] = []
        self.in_flight = 0
        self.peak_in_flight = 0
        self._answered: deque[float] = deque()  # arrival times in the window, answered ones
        self._lock = threading.Lock()
        self._litellm = import_litellm()
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # -- admission --------------------------------------------------------------------------------

    def admit(self, now: float) -> tuple[float | None, int]:
        """Count a call arriving at ``now``: return (None, calls in flight with it) if it may
        go on, else (the seconds its caller should wait, the 429's Retry-After; 0)."""
        with self._lock:
            while self._answered and self._answered[0] <= now - WINDOW_SECONDS:
                self._answered.popleft()
            if self.rpm and len(self._answered) >= self.rpm:
                return self._answered[0] + WINDOW_SECONDS - now, 0
            self._answered.append(now)
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
            return None, self.in_flight

    def record(self, call: Call, *, answered: bool) -> None:
        with self._lock:
            self.calls.append(call)
            if answered:
                self.in_flight -= 1

    def snapshot(self) -> tuple[int, int]:
        """(calls in flight now, calls logged so far)."""
        with self._lock:
            return self.in_flight, len(self.calls)

    # -- answering --------------------------------------------------------------------------------

    def answer(self, body: dict[str, Any]) -> tuple[dict[str, Any], Call]:
        """The reply to a chat request and its call record (times filled in by the handler)."""
        schema = body["response_format"]["json_schema"]
        messages = body["messages"]
        user = next(m["content"] for m in messages if m["role"] == "user")
        content = json.dumps(REPLIES[schema["name"]](user), ensure_ascii=False)
        job = SCHEMA_JOBS[schema["name"]]
        counter = self._litellm.token_counter
        prompt = int(counter(model=COUNT_MODEL, messages=messages))
        completion = int(counter(model=COUNT_MODEL, text=content))
        log_ids = (
            tuple(int(line["id"]) for line in block(user, "log")) if job == "extractor" else ()
        )
        call = Call(
            at=0.0,
            end=0.0,
            status=200,
            job=job,
            in_flight=0,
            prompt_tokens=prompt,
            completion_tokens=completion,
            schema_tokens=int(counter(model=COUNT_MODEL, text=json.dumps(schema))),
            repair=len(messages) > 2,
            log_ids=log_ids,
        )
        reply = {
            "id": "chatcmpl-fleet",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": "scripted",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            },
        }
        return reply, call

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> ModelServer:
        self._httpd = _Server(("127.0.0.1", self.port), _handler(self))
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.1},
            name="fleet-model",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = self._thread = None

    def __enter__(self) -> ModelServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def write_log(self, path: Path) -> None:
        """Every call as a JSON line (arrival order)."""
        with self._lock:
            calls = sorted(self.calls, key=lambda call: call.at)
        with path.open("w") as out:
            for call in calls:
                out.write(json.dumps(asdict(call)) + "\n")


def _handler(server: ModelServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            arrived = time.time()
            if not self.path.rstrip("/").endswith("chat/completions"):
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            wait, in_flight = server.admit(arrived)
            if wait is not None:
                seconds = max(1, math.ceil(wait))
                error = {"message": "rate limit reached", "type": "rate_limit_exceeded"}
                self._send(429, {"error": error}, {"Retry-After": str(seconds)})
                call = Call(at=arrived, end=time.time(), status=429, job="", in_flight=0)
                server.record(call, answered=False)
                return
            try:
                reply, call = server.answer(json.loads(raw))
                status = 200
            except (ValueError, KeyError, StopIteration, TypeError) as exc:
                reply = {"error": {"message": f"bad request: {exc!r}", "type": "invalid"}}
                said = f"{exc!r}; {dict(self.headers)}; body[:200]={raw[:200]!r}"
                call = Call(at=0.0, end=0.0, status=400, job="", in_flight=0, error=said)
                status = 400
            remaining = server.latency - (time.time() - arrived)
            if remaining > 0:
                time.sleep(remaining)
            self._send(status, reply)
            timed = replace(call, at=arrived, end=time.time(), status=status, in_flight=in_flight)
            server.record(timed, answered=True)

        def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
            payload = json.dumps(body).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the caller gave up (its timeout fired during the latency)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler
