"""The server's own metrics, in the Prometheus text format (prometheus_client).

Metrics (one registry per application, so that several apps in one process
do not share counters):

- ``kbear_serve_requests_total{path, method, status}``: requests answered, by
  endpoint (the route's path; ``other`` for any path the server does not
  serve), HTTP method and HTTP status code;
- ``kbear_serve_request_duration_seconds{path}``: time from the request's
  arrival to the end of its response (histogram);
- ``kbear_serve_answers_total{path, ack}``: protocol answers by ``status.ack``;
- ``kbear_serve_config_refused``: 1 while the directory holds a change that
  was refused (the last good configuration is served), else 0;
- ``kbear_serve_config_loaded_timestamp_seconds``: when the configuration in
  force was applied (Unix time).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["CONTENT_TYPE", "MetricsMiddleware", "ServerMetrics"]

#: The Content-Type of the ``/metrics`` answer.
CONTENT_TYPE = CONTENT_TYPE_LATEST

# Latency buckets in seconds: a route answer takes well under a millisecond to
# compute; the upper buckets catch a loaded machine or a huge request.
_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class ServerMetrics:
    """The counters of one application, and their exposition.

    Args:
        paths: the paths the application serves (label values); any other path
            is counted as ``other``, so that a scan of random URLs cannot grow
            the label set.
        refused: returns whether a configuration change is refused right now.
        loaded_at: returns when the configuration in force was applied (Unix time).
    """

    def __init__(
        self, paths: Iterable[str], refused: Callable[[], bool], loaded_at: Callable[[], float]
    ) -> None:
        self.paths = frozenset(paths)
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "kbear_serve_requests",
            "Requests answered, by path, method and HTTP status code.",
            ("path", "method", "status"),
            registry=self.registry,
        )
        self.duration = Histogram(
            "kbear_serve_request_duration_seconds",
            "Time from a request's arrival to the end of its response.",
            ("path",),
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.answers = Counter(
            "kbear_serve_answers",
            "Protocol answers by status.ack.",
            ("path", "ack"),
            registry=self.registry,
        )
        Gauge(
            "kbear_serve_config_refused",
            "1 while the directory holds a refused change (the last good configuration is served).",
            registry=self.registry,
        ).set_function(lambda: 1.0 if refused() else 0.0)
        Gauge(
            "kbear_serve_config_loaded_timestamp_seconds",
            "When the configuration in force was applied (Unix time).",
            registry=self.registry,
        ).set_function(loaded_at)
        self.store_up = Gauge(
            "kbear_serve_fleet_store_up",
            "1 while the fleet's store takes writes, 0 while it is down (routes answered, not recorded).",
            registry=self.registry,
        )
        self.store_up.set_function(lambda: 1.0)

    def label(self, path: str) -> str:
        """The ``path`` label of a request path."""
        return path if path in self.paths else "other"

    def exposition(self) -> bytes:
        """Every metric in the Prometheus text format."""
        return generate_latest(self.registry)


class MetricsMiddleware:
    """ASGI middleware: counts and times every HTTP request in ``metrics``.

    Args:
        app: the application behind it.
        metrics: where the counts go.
    """

    def __init__(self, app: ASGIApp, metrics: ServerMetrics) -> None:
        self._app = app
        self._metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500  # an exception before the response started

        async def send_and_note(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self._app(scope, receive, send_and_note)
        finally:
            path = self._metrics.label(scope["path"])
            self._metrics.requests.labels(path, scope["method"], str(status)).inc()
            self._metrics.duration.labels(path).observe(time.perf_counter() - start)
