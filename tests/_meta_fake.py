"""A fake meta-service for the client's tests: answers the protocol of
``meta-service.md`` from a kbear Router over a directory (test code, not a server)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

from kbear import Client, NoRouteError, Router

Answer = tuple[int, Any]


class FakeService:
    """Answers ``/route/producer`` and ``/route/consumer`` by evaluating ``router``'s chain.

    Attributes:
        requests: (path, decoded body) of every request, in order.
        override: when set, called with (path, body) instead, returning (status, JSON or bytes).
    """

    def __init__(self, router: Router) -> None:
        self.router = router
        self.requests: list[tuple[str, Any]] = []
        self.override: Callable[[str, Any], Answer] | None = None
        self.lock = threading.Lock()

    def answer(self, path: str, body: Any) -> Answer:
        with self.lock:
            self.requests.append((path, body))
        if self.override is not None:
            return self.override(path, body)
        client = Client(body["client"]["id"] or None, body["client"]["meta"])
        config = self.router.config
        clusters: dict[str, Any] = {}
        topics: dict[str, Any] = {}
        missing = 0

        def describe(cluster_id: str, topic: str) -> None:
            clusters[cluster_id] = {"id": cluster_id, "meta": dict(config.clusters[cluster_id].meta)}
            topics[topic] = {"id": topic, "meta": dict(config.topic_meta(topic))}

        if path == "/route/producer":
            if not body.get("topicIds"):
                return 200, {"status": {"ack": "fail", "error": {"code": "bad", "message": "empty"}}}
            routes = {}
            for topic in body["topicIds"]:
                try:
                    route = self.router.route_producer(topic, client)
                except NoRouteError:
                    missing += 1
                    continue
                routes[topic] = {"clusterId": route.cluster_id, "topicId": route.topic}
                describe(route.cluster_id, route.topic)
            out: dict[str, Any] = {"topicIdRoutes": routes}
        elif path == "/route/consumer":
            entries = []
            groups = []
            for gid in body["consumerGroupIds"]:
                try:
                    route = self.router.route_consumer(gid["topicId"], gid["groupName"], client)
                except NoRouteError:
                    missing += 1
                    continue
                entries.append(
                    {"consumerGroupId": gid, "route": {"clusterId": route.cluster_id, "topicId": route.topic}}
                )
                describe(route.cluster_id, route.topic)
                known = config.consumer_groups.get((gid["groupName"], gid["topicId"]))
                if known is not None:
                    groups.append({"id": gid, "meta": dict(known.meta)})
            out = {"consumerGroupIdRoutes": entries, "consumerGroups": groups}
        else:
            return 404, {"status": {"ack": "fail"}}
        out["status"] = {"ack": "partial_fail" if missing else "success"}
        out["clusters"] = clusters
        out["topics"] = topics
        return 200, out

    def handler(self, request: httpx.Request) -> httpx.Response:
        """An ``httpx.MockTransport`` handler."""
        status, data = self.answer(request.url.path, json.loads(request.content or b"null"))
        if isinstance(data, bytes) or hasattr(data, "__next__"):  # raw bytes, or streamed chunks
            return httpx.Response(status, content=data)
        return httpx.Response(status, json=data)

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handler)


class HttpServer:
    """``service`` on a real HTTP server at 127.0.0.1 (a daemon thread); ``url``; ``close()``."""

    def __init__(self, service: FakeService) -> None:
        outer = service

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.do_POST()

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                status, data = outer.answer(self.path, json.loads(self.rfile.read(length) or b"null"))
                payload = data if isinstance(data, bytes) else json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
