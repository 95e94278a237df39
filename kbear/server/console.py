"""The console of ``kbear serve``: one server-rendered HTML page at ``/``.

What it shows, top to bottom: the refused-change banner (``GET /health``), each
move's progress bar and stragglers (``GET /fleet/moves``), the fleet table with
its filters (``GET /fleet``), an explain form (client id and meta, topic, group:
the chain with each rule's verdict, from :meth:`kbear.router.Router.explain_producer`
/ ``explain_consumer``), the topics with their producer routes, the clusters
(``GET /clusters``: addresses with placeholders resolved, secrets masked,
reachability, failover state), the rules.

No build step and no external asset: Jinja2 templates and one stylesheet and
one script shipped in ``kbear/server/console_files``; every value is escaped
by Jinja2's autoescape. It works with JavaScript off (forms are plain GETs);
with it on, ``console.js`` fetches the page again every 2 s and swaps the
sections marked ``data-refresh``. Answers carry a Content-Security-Policy
allowing only this server's own script and stylesheet, ``no-store`` and
``frame-ancestors 'none'``.

Authentication is the API's (:mod:`kbear.server.auth`): the bearer token, or
the session cookie set by the login form at ``/login``. The form refuses a peer
(its IP address) that made :data:`LOGIN_FAILURES_ALLOWED` failed attempts
within the moving window, with 429 and ``Retry-After``, until the window has
room again (the ``limits`` library; counted in a SQLite file shared by the
workers of one ``kbear serve --workers N``,
:class:`kbear.server._limits_sqlite.SQLiteStorage`, so a peer gets that many
attempts in all, not per worker; in this process's memory when no file is given).
"""

from __future__ import annotations

import hmac
import math
import time
from collections.abc import Collection, Mapping
from importlib import resources
from typing import Any
from urllib.parse import parse_qs

import jinja2
from limits import parse
from limits.storage import MemoryStorage, Storage
from limits.strategies import MovingWindowRateLimiter
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from kbear._identity import Client
from kbear._route import Explanation, NoRouteError, Route
from kbear.config import RouteRule, RuleKind
from kbear.server.actions import Actions, Asked
from kbear.server.audit import DEFAULT_PAGE, AuditLog, ConfigAudit
from kbear.server.auth import SESSION_COOKIE, SESSION_TTL_S, csrf_token, session_cookie
from kbear.server.clusters import ClusterBoard
from kbear.server.fleet import FleetRecorder
from kbear.server.fleet_api import filters, fleet_json, moves_answer
from kbear.server.holder import ConfigHolder, Served, iso

__all__ = ["LOGIN_FAILURES_ALLOWED", "PAGE_PATHS", "STATIC_PREFIX", "Console", "parse_meta"]

#: Failed sign-ins one peer address may make in a moving window (``limits``
#: notation); the next attempt, even with a good token, is answered 429.
LOGIN_FAILURES_ALLOWED = "5/minute"

#: Pages sent to the login form when asked for without a token.
PAGE_PATHS = ("/", "/history")
#: Where the stylesheet and the script are served (no token needed: they hold no data).
STATIC_PREFIX = "/console/static/"
#: Topics listed with their routes, and clients in the fleet table, at most.
_TOPICS_SHOWN, _CLIENTS_SHOWN = 200, 200
_LOGIN_BODY_MAX = 8192
_STATIC = {"console.css": "text/css; charset=utf-8", "console.js": "text/javascript; charset=utf-8"}
_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; style-src-attr 'unsafe-inline'; "
        "connect-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


def parse_meta(text: str) -> dict[str, str]:
    """Client meta typed in the explain form: ``KEY=VALUE`` per line or separated by
    commas; blank entries skipped.

    Raises:
        ValueError: an entry without ``=`` or with an empty key (named).
    """
    meta: dict[str, str] = {}
    for raw in text.replace(",", "\n").splitlines():
        item = raw.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"client meta: expected KEY=VALUE, got {item!r}")
        meta[key.strip()] = value.strip()
    return meta


def _kind(kind: RuleKind) -> str:
    return kind.name.lower().replace("_", "-")


def explanation_view(explanation: Explanation, topic: str, group: str | None) -> dict[str, Any]:
    """An explanation as the page shows it: the chain with each rule's verdict."""
    route = explanation.route
    chain = []
    for i, verdict in enumerate(explanation.verdicts):
        rule = verdict.rule
        if i >= explanation.evaluated:
            text, css = "not evaluated", "skipped"
        elif verdict.matched and route is not None and route.rule_id == rule.id:
            text, css = "match (winner)", "winner"
        elif verdict.matched:
            text, css = "match", ""
        else:
            text, css = "no match" + (": " + "; ".join(verdict.failed) if verdict.failed else ""), ""
        chain.append({"rule": rule, "kind": _kind(rule.kind), "verdict": text, "css": css})
    lookup = "producer" if group is None else "consumer"
    return {"lookup": lookup, "topic": topic, "group": group, "chain": chain, "winner": route}


def _topics(served: Served) -> tuple[list[tuple[str, Route | None]], int]:
    """The topics shown, each with its producer route for a client without id or meta (None: no route)."""
    config = served.config
    names = list(dict.fromkeys([*config.topics, *(r.topic_id for r in config.rules if r.topic_id)]))
    rows: list[tuple[str, Route | None]] = []
    for name in names[:_TOPICS_SHOWN]:
        try:
            rows.append((name, served.router.route_producer(name, Client())))
        except NoRouteError:
            rows.append((name, None))
    return rows, max(0, len(names) - _TOPICS_SHOWN)


def _scope(rule: RouteRule) -> str:
    """What a rule applies to, as the page shows it."""
    if rule.kind is RuleKind.CONSUMER_GROUP:
        return f"{rule.group_name}@{rule.topic_id}"
    return rule.topic_id or "every topic"


class Console:
    """The console's handlers over a holder, a fleet (None: not recorded) and the tokens.

    Args:
        holder: the configuration served.
        fleet: the recorded fleet, or None (``--fleet off``).
        tokens: the accepted bearer tokens (empty: the server needs none).
        login_failures: where failed sign-ins are counted (a ``limits`` storage with
            the moving window); None: in this process's memory.
        clusters: the clusters' probes.
        actions: the action endpoints (the console's forms post to them).
        audit: the audit log and what writes the configuration changes to it (the
            history page).
    """

    def __init__(
        self,
        holder: ConfigHolder,
        fleet: FleetRecorder | None,
        tokens: Collection[str],
        login_failures: Storage | None,
        clusters: ClusterBoard,
        actions: Actions,
        audit: tuple[AuditLog, ConfigAudit],
    ) -> None:
        self.holder = holder
        self.clusters = clusters
        self.actions = actions
        self.audit = audit
        self.fleet = fleet
        self._tokens = tuple(tokens)
        self._login_limit = parse(LOGIN_FAILURES_ALLOWED)
        self._login_failures = MovingWindowRateLimiter(login_failures or MemoryStorage())
        self._templates = jinja2.Environment(
            loader=jinja2.PackageLoader("kbear.server", "console_files"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        files = resources.files("kbear.server") / "console_files"
        self._static = {name: (files / name).read_bytes() for name in _STATIC}

    def _html(
        self, template: str, status: int = 200, headers: Mapping[str, str] | None = None, **context: Any
    ) -> HTMLResponse:
        """``template`` rendered (no refresh script, the sign-out button when tokens are needed, unless
        ``context`` says otherwise), with the console's headers."""
        context = {"refresh": False, "session": bool(self._tokens), **context}
        body = self._templates.get_template(template).render(**context)
        return HTMLResponse(body, status_code=status, headers={**_HEADERS, **(headers or {})})

    def page(self, request: Request) -> Response:  # reads the fleet: Starlette runs it in a thread
        context = self._context(request.query_params)
        session = request.cookies.get(SESSION_COOKIE)
        context["csrf"] = csrf_token(session) if session else ""
        context["operator"] = self.actions.session_is_operator(session)
        context["cluster_ids"] = list(self.holder.served.config.clusters)
        return self._html("console.html", title="console", refresh=True, **context)

    def history(self, request: Request) -> Response:
        """The audit log's page (``/history?before=ID``): newest first, 50 a page (read
        in a thread: Starlette runs a handler that is not async in one)."""
        log_, config_audit = self.audit
        before_text = request.query_params.get("before", "")
        config_audit.sync()
        entries = log_.page(DEFAULT_PAGE, int(before_text) if before_text.isdigit() else None)
        older = entries[-1].id if len(entries) == DEFAULT_PAGE else None
        return self._html(
            "history.html",
            title="history",
            entries=[e.as_json() for e in entries],
            older=older,
        )

    def action_page(
        self, status: int, answer: Mapping[str, Any], asked: Asked | None, fields: Mapping[str, Any]
    ) -> Response:
        """The console's page of an action's answer (``answer``: what the JSON answer holds):
        the plan and, when it is ready, the form that applies it (with the asked ``fields``);
        or where its outcome will be; or why it was refused."""
        return self._html("action.html", status, title="action", asked=asked, fields=fields, answer=answer)

    def _context(self, params: Mapping[str, str]) -> dict[str, Any]:
        served = self.holder.served
        config = served.config
        refused = self.holder.refused
        topics, topics_more = _topics(served)
        context: dict[str, Any] = {
            "digest": config.digest,
            "directory": str(self.holder.directory),
            "loaded_at": iso(served.loaded_at, "seconds"),
            "refused": None if refused is None else [str(p) for p in refused.problems] or [str(refused)],
            "clusters": self.clusters.clusters_json(config)["clusters"],
            "topics": topics,
            "topics_more": topics_more,
            "rules": [(rule, _kind(rule.kind), _scope(rule)) for rule in config.rules],
            "fleet_on": self.fleet is not None,
            "fleet_filters": filters(params, "fleet_"),
            "explain_params": {
                name: params[name]
                for name in ("client_id", "client_meta", "topic", "group")
                if params.get(name)
            },
            "explanation": None,
            "explain_error": None,
        }
        if self.fleet is not None:
            context["fleet"] = fleet_json(self.fleet, self.holder, context["fleet_filters"], _CLIENTS_SHOWN)
            context["moves"] = moves_answer(self.fleet, self.holder, None)
        topic = params.get("topic")
        if topic:
            group = params.get("group") or None
            try:
                client = Client(params.get("client_id") or None, parse_meta(params.get("client_meta", "")))
            except ValueError as exc:
                context["explain_error"] = str(exc)
                return context
            if group is None:
                explanation = served.router.explain_producer(topic, client)
            else:
                explanation = served.router.explain_consumer(topic, group, client)
            context["explanation"] = explanation_view(explanation, topic, group)
        return context

    def _login_page(
        self, status: int = 200, error: str | None = None, headers: Mapping[str, str] | None = None
    ) -> HTMLResponse:
        return self._html(
            "login.html", status, headers, title="sign in", required=bool(self._tokens), error=error
        )

    async def login_form(self, request: Request) -> Response:
        return self._login_page()

    def _refused_for(self, peer: str) -> int | None:
        """Seconds until ``peer`` may try again (None: it may now; reads the storage)."""
        if self._login_failures.test(self._login_limit, peer):
            return None
        reset = self._login_failures.get_window_stats(self._login_limit, peer).reset_time
        return max(1, math.ceil(reset - time.time()))

    async def login(self, request: Request) -> Response:
        if not self._tokens:
            return RedirectResponse("/", 303)
        peer = request.client.host if request.client is not None else ""
        refused_for = await run_in_threadpool(self._refused_for, peer)
        if refused_for is not None:
            error = f"Too many failed sign-ins from this address: try again in {refused_for} s."
            return self._login_page(429, error, {"Retry-After": str(refused_for)})
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > _LOGIN_BODY_MAX:
                break
        given = parse_qs(body[:_LOGIN_BODY_MAX].decode("utf-8", "replace")).get("token", [""])[0].strip()
        matched = [t for t in self._tokens if hmac.compare_digest(given.encode(), t.encode())]
        if not given or not matched:
            await run_in_threadpool(self._login_failures.hit, self._login_limit, peer)
            return self._login_page(401, "This token is not accepted.")
        response = RedirectResponse("/", 303)
        response.set_cookie(
            SESSION_COOKIE,
            session_cookie(matched[0]),
            max_age=SESSION_TTL_S,
            path="/",
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return response

    async def logout(self, request: Request) -> Response:
        response = RedirectResponse("/login", 303)
        response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict")
        return response

    async def static(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in self._static:
            return Response(b"not found", 404, media_type="text/plain")
        return Response(
            self._static[name], media_type=_STATIC[name], headers={"Cache-Control": "max-age=300"}
        )
