"""A scripted OpenAI-compatible HTTP server on 127.0.0.1 for tests (stdlib only).

Usage::

    with ScriptedOpenAIServer(embedding_dim=8) as server:
        server.enqueue("embeddings", ScriptedReply(status=500, body={"error": {"message": "boom"}}))
        client(api_base=server.api_base)  # http://127.0.0.1:PORT/v1
        assert server.requests[0].path == "/v1/embeddings"

Routes: ``embeddings`` answers ``POST /v1/embeddings`` and ``POST /embeddings``;
``chat/completions`` answers ``POST /v1/chat/completions`` and ``POST /chat/completions``.
Each route replies with its queued one-shot replies first (FIFO), then with its
default: by default, deterministic embeddings (one per input) and a chat
completion whose content is ``chat_content``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

import numpy as np

EMBEDDINGS = "embeddings"
CHAT_COMPLETIONS = "chat/completions"
ROUTES = (EMBEDDINGS, CHAT_COMPLETIONS)


@dataclass(frozen=True)
class ReceivedRequest:
    """One request as the server saw it."""

    method: str
    path: str
    route: str | None
    headers: Mapping[str, str]
    body: Any  # parsed JSON, or the raw text if it was not JSON


@dataclass(frozen=True)
class ScriptedReply:
    """What to answer: ``body`` is JSON-encoded unless it is str/bytes; ``delay`` is seconds."""

    status: int = 200
    body: Any = None
    delay: float = 0.0
    headers: Mapping[str, str] = field(default_factory=dict)


#: A reply, or a function computing one from the request it answers.
Reply = ScriptedReply | Callable[[ReceivedRequest], ScriptedReply]


def scripted_vector(text: str, dim: int) -> list[float]:
    """Deterministic, deliberately non-unit vector for ``text`` (values in [0.5, 1.5))."""
    seed = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little")
    rng = np.random.default_rng(seed)
    return [float(x) for x in rng.random(dim) + 0.5]


def embeddings_body(
    vectors: list[list[float]], *, base64_floats: bool = False, model: str = "scripted"
) -> dict[str, Any]:
    """An OpenAI /embeddings reply for these vectors."""
    data = [
        {
            "object": "embedding",
            "index": index,
            "embedding": _b64(vector) if base64_floats else vector,
        }
        for index, vector in enumerate(vectors)
    ]
    return {
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": 1, "total_tokens": 1},
    }


def chat_completion_body(
    content: str,
    *,
    model: str = "scripted",
    prompt_tokens: int = 1,
    completion_tokens: int = 1,
) -> dict[str, Any]:
    """An OpenAI /chat/completions reply with one assistant message and this usage."""
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def chat_reply(
    content: str, *, prompt_tokens: int = 1, completion_tokens: int = 1, delay: float = 0.0
) -> ScriptedReply:
    """A successful chat completion carrying ``content`` (e.g. a JSON document)."""
    body = chat_completion_body(
        content, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
    )
    return ScriptedReply(body=body, delay=delay)


def error_reply(status: int, message: str = "scripted failure") -> ScriptedReply:
    """An OpenAI-style error reply, e.g. 429 or 500."""
    return ScriptedReply(status=status, body={"error": {"message": message, "type": "scripted"}})


def _b64(vector: list[float]) -> str:
    return base64.b64encode(np.asarray(vector, dtype=np.float32).tobytes()).decode("ascii")


def _inputs_of(request: ReceivedRequest) -> list[str]:
    raw = request.body.get("input", []) if isinstance(request.body, dict) else []
    return [raw] if isinstance(raw, str) else [str(item) for item in raw]


def _route_of(path: str) -> str | None:
    bare = path.split("?", 1)[0].rstrip("/")
    for route in ROUTES:
        if bare in (f"/{route}", f"/v1/{route}"):
            return route
    return None


class ScriptedOpenAIServer:
    """Threaded OpenAI-compatible server on an ephemeral 127.0.0.1 port."""

    def __init__(self, *, embedding_dim: int = 8, chat_content: str = "ok") -> None:
        self.embedding_dim = embedding_dim
        self.chat_content = chat_content
        self.requests: list[ReceivedRequest] = []
        self._queued: dict[str, deque[Reply]] = {route: deque() for route in ROUTES}
        self._defaults: dict[str, Reply] = {
            EMBEDDINGS: self._default_embeddings,
            CHAT_COMPLETIONS: self._default_chat,
        }
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- scripting ----------------------------------------------------------

    def enqueue(self, route: str, *replies: Reply) -> None:
        """Answer the next requests on ``route`` with these replies, in order."""
        self._check_route(route)
        with self._lock:
            self._queued[route].extend(replies)

    def set_default(self, route: str, reply: Reply) -> None:
        """Answer ``route`` with ``reply`` whenever nothing is queued."""
        self._check_route(route)
        with self._lock:
            self._defaults[route] = reply

    def requests_on(self, route: str) -> list[ReceivedRequest]:
        """The requests received on ``route`` so far, oldest first."""
        self._check_route(route)
        with self._lock:
            return [request for request in self.requests if request.route == route]

    def _check_route(self, route: str) -> None:
        if route not in ROUTES:
            raise ValueError(f"unknown route {route!r}; allowed: {ROUTES}")

    def _default_embeddings(self, request: ReceivedRequest) -> ScriptedReply:
        vectors = [scripted_vector(text, self.embedding_dim) for text in _inputs_of(request)]
        # Honour the OpenAI SDK's default of asking for base64 floats.
        as_b64 = isinstance(request.body, dict) and request.body.get("encoding_format") == "base64"
        return ScriptedReply(body=embeddings_body(vectors, base64_floats=as_b64))

    def _default_chat(self, _request: ReceivedRequest) -> ScriptedReply:
        return ScriptedReply(body=chat_completion_body(self.chat_content))

    def _reply_for(self, request: ReceivedRequest) -> ScriptedReply:
        if request.route is None:
            return ScriptedReply(
                status=404, body={"error": {"message": f"no route {request.path}"}}
            )
        with self._lock:
            self.requests.append(request)
            queue = self._queued[request.route]
            reply = queue.popleft() if queue else self._defaults[request.route]
        return reply(request) if callable(reply) else reply

    # -- lifecycle ----------------------------------------------------------

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("server is not running")
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """Root URL, e.g. ``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def api_base(self) -> str:
        """OpenAI-style base URL, ``<url>/v1``."""
        return f"{self.url}/v1"

    def start(self) -> ScriptedOpenAIServer:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(self))
        self._httpd.daemon_threads = True
        # A short poll interval keeps stop() (which waits for one poll) fast.
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="scripted-openai",
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
        self._httpd = None
        self._thread = None

    def __enter__(self) -> ScriptedOpenAIServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _make_handler(server: ScriptedOpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self._answer()

        def do_GET(self) -> None:
            self._answer()

        def _answer(self) -> None:
            request = self._received()
            reply = server._reply_for(request)
            if reply.delay:
                time.sleep(reply.delay)
            self._send(reply)

        def _received(self) -> ReceivedRequest:
            length = int(self.headers.get("Content-Length") or 0)
            text = self.rfile.read(length).decode("utf-8") if length else ""
            try:
                body: Any = json.loads(text) if text else None
            except json.JSONDecodeError:
                body = text
            return ReceivedRequest(
                method=self.command,
                path=self.path,
                route=_route_of(self.path),
                headers=dict(self.headers.items()),
                body=body,
            )

        def _send(self, reply: ScriptedReply) -> None:
            if isinstance(reply.body, bytes):
                payload = reply.body
            elif isinstance(reply.body, str):
                payload = reply.body.encode("utf-8")
            else:
                payload = json.dumps(reply.body).encode("utf-8")
            try:
                self.send_response(reply.status)
                self.send_header(
                    "Content-Type", reply.headers.get("Content-Type", "application/json")
                )
                self.send_header("Content-Length", str(len(payload)))
                # One request per connection: a kept-alive connection would outlive stop()
                # and keep answering a client that pooled it.
                self.send_header("Connection", "close")
                self.close_connection = True
                for name, value in reply.headers.items():
                    if name.lower() not in ("content-type", "content-length", "connection"):
                        self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (e.g. its timeout fired during a scripted delay)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep test output clean

    return Handler
