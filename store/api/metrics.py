"""The app's Prometheus metrics, and the middleware that counts and times every request."""

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class Metrics:
    """The app's Prometheus metrics, in a registry of its own so that many apps can coexist."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "secretary_http_requests",
            "HTTP requests by method, route and status.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "secretary_http_request_duration_seconds",
            "HTTP request latency by method and route.",
            ["method", "route"],
            registry=self.registry,
        )
        self.searches = Counter("secretary_searches", "Searches served.", registry=self.registry)
        self.memories_ingested = Counter(
            "secretary_memories_ingested",
            "Memories created through the API.",
            registry=self.registry,
        )
        self.logs_ingested = Counter(
            "secretary_logs_ingested", "Log lines created through the API.", registry=self.registry
        )
        self.outbox = Gauge(
            "secretary_index_outbox_size",
            "Changes waiting for the vector index.",
            registry=self.registry,
        )
        self.reinforcement_pending = Gauge(
            "secretary_reinforcement_pending",
            "Memories waiting for their recall to be written.",
            registry=self.registry,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)


class MetricsMiddleware:
    """Counts and times every HTTP request by its route template (not its path: bounded labels)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500  # stays so if the app raises before responding

        async def send_counting(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        started = time.perf_counter()
        try:
            await self.app(scope, receive, send_counting)
        finally:
            route = str(getattr(scope.get("route"), "path", "unmatched"))
            method = str(scope.get("method", ""))
            self.metrics.requests.labels(method, route, str(status)).inc()
            self.metrics.latency.labels(method, route).observe(time.perf_counter() - started)
