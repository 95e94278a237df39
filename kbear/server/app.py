"""The ``kbear serve`` web application (Starlette): endpoints, probes, metrics.

Endpoints (``docs/reference/meta-service-protocol.md``; request and response shapes in
:mod:`kbear.server.protocol`, answers in :mod:`kbear.server.service`):

=======================================  ==========================================
``POST /route/producer``                 ``{client, topicIds}`` -> routes by requested topic
``POST /route/consumer``                 ``{client, consumerGroupIds}`` -> routes by group
``POST /route/rules``                    ``{routeRuleIds}`` (empty: all)
``POST /meta/clusters``                  ``{clusterIds}`` (empty: all)
``POST /meta/topics``                    ``{topicIds}`` (empty: all)
``POST /meta/consumer-groups``           ``{consumerGroupIds}`` (empty: all)
``GET /route/rules/all``, ``GET /meta/clusters/all``, ``GET /meta/topics/all``,
``GET /meta/consumer-groups/all``        everything the server holds
``GET /healthz``                         liveness: ``{"status": "ok"}`` (no token needed)
``GET /readyz``                          readiness: 200 while a configuration is served
                                         and its directory watched, else 503 (no token needed)
``GET /health``                          the configuration in force and any refused change
``GET /metrics``                         Prometheus text (:mod:`kbear.server.metrics`)
``GET /fleet``, ``GET /fleet/moves``     the recorded fleet and a move's progress
                                         (:mod:`kbear.server.fleet_api`)
``GET /clusters``                        each cluster's address, reachability and
                                         failover state (:mod:`kbear.server.clusters`)
``POST /actions/move``, ``/failover``,   plan or apply an action with an operator token
``/failback``                            (:mod:`kbear.server.actions`)
``GET /audit``, ``GET /history``         the audit log, JSON and the console's page
                                         (:mod:`kbear.server.audit`)
``GET /``, ``/login``, ``POST /login``,  the console (:mod:`kbear.server.console`);
``POST /logout``, ``/console/static/*``  the login form and its assets need no token
=======================================  ==========================================

HTTP status codes: 200 for every protocol answer, ``fail`` included (an
empty request, as the reference server answers it); 400 with a ``fail`` /
``bad_request`` status for a body that is not JSON or not of the message's
shape; 413 for a body over ``max_body_bytes``; 415 for a Content-Type other
than JSON (protobuf is not served); 401 without the token (:mod:`kbear.server.auth`);
500 with ``fail`` / ``service_exception`` on a server error (logged, not echoed).
Every protocol answer carries ``X-KBear-Config-Digest``, the SHA-256 of the
files it was answered from, so replicas can be compared.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from collections.abc import AsyncIterator, Callable, Collection
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from kbear._meta_protocol import problems
from kbear.server import protocol as proto
from kbear.server import service
from kbear.server._limits_sqlite import SQLiteStorage
from kbear.server.actions import ACTIONS, Actions, read_body
from kbear.server.audit import DEFAULT_PAGE, MAX_PAGE, STORE_ERRORS, AuditLog, ConfigAudit
from kbear.server.auth import BearerAuth
from kbear.server.clusters import ClusterBoard
from kbear.server.console import PAGE_PATHS, STATIC_PREFIX, Console
from kbear.server.fleet import FleetRecorder
from kbear.server.fleet_api import FleetEndpoints
from kbear.server.holder import ConfigHolder, Served, iso
from kbear.server.metrics import CONTENT_TYPE, MetricsMiddleware, ServerMetrics

__all__ = ["DEFAULT_MAX_BODY_BYTES", "OPEN_PATHS", "create_app"]

log = logging.getLogger("kbear.server")

#: Largest request body read (bytes): 10,000 topic ids of 100 characters fit.
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024

#: The probes, answered without a token: they carry no configuration data.
OPEN_PATHS = ("/healthz", "/readyz")

_Req = TypeVar("_Req", bound=BaseModel)


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own 4xx (an unknown path: 404, a method not served there: 405)
    with the protocol's ``fail`` body, as every other refusal (found by fuzzing)."""
    assert isinstance(exc, HTTPException)
    return service.fail(exc.status_code, proto.ErrorCode.BAD_REQUEST, str(exc.detail), exc.headers)


async def _store_down(request: Request, exc: Exception) -> Response:
    """A page of the fleet or the audit log while its store cannot be read (a
    PostgreSQL server down, a SQLite file removed): 503 with the protocol's ``fail``
    body naming the store's error, as ``/readyz`` answers 503 while not ready; route
    lookups go on meanwhile (they are answered without being recorded; the outage's
    one log line and ``kbear_serve_fleet_store_up`` come from the fleet's writer)."""
    message = f"the fleet store cannot be read: {type(exc).__name__}: {' '.join(str(exc).split())}"
    return service.fail(503, proto.ErrorCode.SERVICE_EXCEPTION, message)


def _parse(model: type[_Req], body: bytes) -> _Req:
    try:
        return model.model_validate_json(body or b"{}")
    except ValidationError as exc:
        raise HTTPException(400, f"request is not a valid {model.__name__}: {problems(exc, 10)}") from None


def _check_content_type(request: Request) -> None:
    content_type = request.headers.get("content-type")
    if content_type is None:
        return
    media = content_type.split(";", 1)[0].strip().lower()
    if media != "application/json" and not media.endswith("+json"):
        raise HTTPException(415, f"Content-Type {media!r} is not served; use application/json")


_RECORDED = ("/route/producer", "/route/consumer")


@dataclasses.dataclass
class _Endpoints:
    """The request handlers over one :class:`ConfigHolder`."""

    holder: ConfigHolder
    metrics: ServerMetrics
    max_body_bytes: int
    fleet: FleetRecorder | None

    def protocol(
        self, model: type[_Req], answer: Callable[[Served, _Req], proto.StatusResponse]
    ) -> Callable[..., Any]:
        """The handler of a protocol path: a POST's body read as ``model``; a GET
        (``.../all``) answers the empty request (everything)."""

        async def endpoint(request: Request) -> Response:
            path: str = request.scope["path"]
            body = b""
            try:
                if request.method == "POST":
                    _check_content_type(request)
                    body = await read_body(request, self.max_body_bytes)
                parsed = _parse(model, body)
                served = self.holder.served  # one configuration for the whole answer
                response = answer(served, parsed)
            except Exception as exc:
                self.metrics.answers.labels(path, proto.Ack.FAIL.value).inc()
                if isinstance(exc, HTTPException):
                    raise  # answered by _http_error
                log.exception("kbear serve: answering %s failed", path)
                return service.fail(500, proto.ErrorCode.SERVICE_EXCEPTION, "service execution failed")
            self.metrics.answers.labels(path, response.status.ack.value).inc()
            digest = served.config.digest
            if self.fleet is not None and path in _RECORDED:
                client = parsed.client  # type: ignore[attr-defined]  # both route requests carry one
                self.fleet.record_answer(client, response, digest, peer=request.client, request=body)
            answered = response.model_dump_json(by_alias=True, exclude_none=True).encode()
            return Response(answered, 200, {"X-KBear-Config-Digest": digest}, "application/json")

        return endpoint

    async def healthz(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(self, request: Request) -> Response:
        ready = self.holder.watching
        return JSONResponse({"ready": ready}, status_code=200 if ready else 503)

    async def health(self, request: Request) -> Response:
        served = self.holder.served
        config = served.config
        refused = self.holder.refused
        body: dict[str, Any] = {
            "status": "ok" if refused is None else "refused_change",
            "config": {
                "directory": str(self.holder.directory),
                "digest": config.digest,
                "loadedAt": iso(served.loaded_at),
                "clusters": len(config.clusters),
                "topics": len(config.topics),
                "consumerGroups": len(config.consumer_groups),
                "routeRules": len(config.rules),
            },
            "refusedChange": None
            if refused is None
            else {"problems": [str(p) for p in refused.problems], "message": str(refused)},
            "watching": self.holder.watching,
            "watchIntervalSeconds": self.holder.watch_interval_s,
        }
        return JSONResponse(body)

    async def metrics_text(self, request: Request) -> Response:
        return Response(self.metrics.exposition(), media_type=CONTENT_TYPE)


def create_app(
    holder: ConfigHolder,
    *,
    tokens: Collection[str] = (),
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    watch: bool = True,
    fleet: FleetRecorder | None = None,
    login_failures_db: str | os.PathLike[str] | None = None,
    clusters: ClusterBoard | None = None,
    operator_tokens: Collection[str] = (),
    audit: AuditLog | None = None,
) -> Starlette:
    """The meta-service ASGI application over ``holder``.

    Args:
        holder: the configuration to answer from (see :class:`ConfigHolder`).
        tokens: accepted bearer tokens; empty serves without authentication.
        max_body_bytes: largest request body read; larger ones get 413.
        watch: start watching the directory when the application starts (its
            lifespan) and stop when it stops; False leaves the holder alone
            (tests drive ``holder.check()`` themselves).
        fleet: where answered route requests are recorded (``GET /fleet``,
            ``/fleet/moves``, the console's fleet and moves); None: not recorded
            (those endpoints answer 404). Its writer thread runs with the
            application's lifespan.
        login_failures_db: the SQLite file where the console's failed sign-ins are
            counted, shared by every process that opens it (``kbear serve --workers
            N``); None: in this process's memory.
        clusters: what probes the clusters (``GET /clusters``, the console's clusters);
            it probes with the application's lifespan. None: a board that does not
            probe (reachability unknown).
        operator_tokens: the tokens that may act (``POST /actions/...``); they may
            also do all a token of ``tokens`` does. None: no action is accepted.
        audit: the audit log (configuration changes, actions); None: in this
            process's memory.

    Returns:
        A Starlette application (run it with uvicorn, or test it with
        ``starlette.testclient.TestClient``). Its ``state.metrics`` is the
        :class:`ServerMetrics`.
    """
    protocol: list[tuple[str, type[Any], Callable[[Served, Any], proto.StatusResponse]]] = [
        ("/route/producer", proto.ProducerRouteRequest, service.producer_route),
        ("/route/consumer", proto.ConsumerRouteRequest, service.consumer_route),
        ("/route/rules", proto.RouteRulesRequest, service.route_rules),
        ("/meta/clusters", proto.ClustersRequest, service.clusters),
        ("/meta/topics", proto.TopicsRequest, service.topics),
        ("/meta/consumer-groups", proto.ConsumerGroupsRequest, service.consumer_groups),
    ]
    with_all = [entry for entry in protocol if entry[0] not in _RECORDED]
    metrics = ServerMetrics((), lambda: holder.refused is not None, lambda: holder.served.loaded_at)
    if fleet is not None:
        metrics.store_up.set_function(lambda: 1.0 if fleet.store_up else 0.0)
    endpoints = _Endpoints(holder, metrics, max_body_bytes, fleet)
    fleet_endpoints = FleetEndpoints(holder, fleet)
    probing = clusters is not None
    board = clusters if clusters is not None else ClusterBoard(lambda: holder.served.config)
    audit_log = audit if audit is not None else AuditLog()
    config_audit = ConfigAudit(holder, audit_log)
    actions = Actions(holder, audit_log, tokens, operator_tokens)
    every_token = (*tokens, *operator_tokens)
    console = Console(
        holder,
        fleet,
        every_token,
        None if login_failures_db is None else SQLiteStorage(path=login_failures_db),
        board,
        actions,
        (audit_log, config_audit),
    )

    async def clusters_answer(request: Request) -> Response:
        return JSONResponse(board.clusters_json(holder.served.config))

    def audit_answer(request: Request) -> Response:  # reads the log: Starlette runs it in a thread
        try:
            limit = int(request.query_params.get("limit", DEFAULT_PAGE))
            before = request.query_params.get("before")
            before_id = None if before is None else int(before)
        except ValueError:
            return service.fail(400, proto.ErrorCode.BAD_REQUEST, "limit and before are whole numbers")
        config_audit.sync()
        entries = audit_log.page(limit, before_id)
        more = len(entries) == max(1, min(limit, MAX_PAGE)) and entries[-1].id > 1
        older = entries[-1].id if entries and more else None
        return JSONResponse({"entries": [e.as_json() for e in entries], "before": older})

    routes = [Route(p, endpoints.protocol(model, answer), methods=["POST"]) for p, model, answer in protocol]
    routes += [Route(f"{p}/all", endpoints.protocol(model, answer)) for p, model, answer in with_all]
    routes += [  # GET unless said (Starlette's default for a function)
        Route("/healthz", endpoints.healthz),
        Route("/readyz", endpoints.readyz),
        Route("/health", endpoints.health),
        Route("/metrics", endpoints.metrics_text),
        Route("/fleet", fleet_endpoints.fleet),
        Route("/fleet/moves", fleet_endpoints.moves),
        Route("/clusters", clusters_answer),
        Route("/audit", audit_answer),
        Route("/history", console.history),
        *(
            Route(f"/actions/{a}", actions.endpoint(a, console.action_page), methods=["POST"])
            for a in ACTIONS
        ),
        Route("/", console.page),
        Route("/login", console.login_form),
        Route("/login", console.login, methods=["POST"]),
        Route("/logout", console.logout, methods=["POST"]),
        Route(STATIC_PREFIX + "{name}", console.static),
    ]

    metrics.paths = frozenset(route.path for route in routes)  # the label of a path served (static: other)

    running: list[ConfigHolder | FleetRecorder | ClusterBoard] = [holder] if watch else []
    running += ([] if fleet is None else [fleet]) + ([board] if probing else [])

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        with contextlib.ExitStack() as stop:  # stopped in the reverse order, the action's thread last

            @stop.callback
            def join_action() -> None:
                if actions.running is not None:
                    actions.running.join(1.0)

            for part in running:
                part.start()
                stop.callback(part.stop)
            yield

    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={HTTPException: _http_error, **dict.fromkeys(STORE_ERRORS, _store_down)},
    )
    app.state.metrics = metrics
    app.state.holder = holder
    app.state.actions = actions
    # add_middleware puts the last one outermost: every request is measured, 401s included.
    app.add_middleware(
        BearerAuth,
        # an open server (no read token) stays open to look; actions check their own token
        tokens=every_token if tokens else (),
        open_paths=(*OPEN_PATHS, "/login", "/logout", STATIC_PREFIX),
        page_paths=PAGE_PATHS,
    )
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    return app
