"""``POST /actions/move``, ``/actions/failover``, ``/actions/failback``: act from the API
or the console, with an operator token.

Each action runs the ``kbear`` command an operator would run on the server's host,
over the served directory, in a child process (``python -m kbear.cli``, the
server's environment; the plan bounded by :data:`PLAN_TIMEOUT_S`):

- ``move`` (``topic``, ``to``, ``groups``): ``kbear move --config DIR --topic T --to C
  [--group G]...``; with ``apply``: ``--apply`` (writes the rule, waits until the
  old cluster is left: up to ``kbear move``'s 300 s);
- ``failover`` / ``failback`` (``cluster``): ``kbear failover|failback --config DIR
  --cluster C [--apply]``.

Without ``apply`` the answer is the plan: the command's text, and whether it is
ready (exit 0). With ``apply`` the command runs in the background and the answer
is 202 with the audit entry's id; its outcome (``applied``, ``not ready``,
``failed``) lands in the audit log when the command ends. One action is applied
at a time (409 while one runs).

Who may act: a request with an operator token (``--operator-token-file`` or
``KBEAR_SERVE_OPERATOR_TOKEN``) in ``Authorization: Bearer``, or a console session
signed in with one and carrying the session's CSRF token (form field ``csrf`` or
header ``X-KBear-CSRF``, :func:`kbear.server.auth.csrf_token`). A read token (or
its session) gets 403, as a session without the CSRF token and every request when
no operator token is configured. Every action is written to the audit log,
refused ones too.

Bodies: JSON (answers JSON) or a form (``application/x-www-form-urlencoded``, the
console's; answers the console's pages).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import logging
import subprocess
import sys
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request, cookie_parser
from starlette.responses import JSONResponse, Response

from kbear.server.audit import AuditLog
from kbear.server.auth import SESSION_COOKIE, csrf_token, session_valid
from kbear.server.holder import ConfigHolder

__all__ = ["ACTIONS", "PLAN_TIMEOUT_S", "Actions", "Asked", "fingerprint", "read_body"]

log = logging.getLogger("kbear.server")

#: The actions served, by path name.
ACTIONS = ("move", "failover", "failback")
#: Longest a plan may take, seconds; an apply is bounded by the command itself (+ 60 s).
PLAN_TIMEOUT_S = 120.0
_APPLY_TIMEOUT_S = 300.0 + 60.0
_BODY_MAX = 64 * 1024


def fingerprint(token: str) -> str:
    """What names a token in the audit log: the first 8 hex digits of its SHA-256."""
    return hashlib.sha256(token.encode()).hexdigest()[:8]


@dataclass(frozen=True)
class Asked:
    """An action asked for: its name, target, arguments of the command, and whether to apply."""

    action: str
    target: str
    argv: list[str]
    apply: bool


class _Refused(Exception):
    def __init__(self, status: int, message: str, who: str = "") -> None:
        super().__init__(message)
        self.status, self.message, self.who = status, message, who


def _field(fields: dict[str, Any], name: str) -> str:
    value = fields.get(name, "")
    if not isinstance(value, str):
        raise _Refused(400, f"'{name}' must be a string")
    return value.strip()


def _asked(action: str, fields: dict[str, Any], directory: str) -> Asked:
    """The command for ``action`` from the request's fields.

    Raises:
        _Refused: 400, a field missing or of the wrong type.
    """
    apply = fields.get("apply", False)
    apply = apply if isinstance(apply, bool) else str(apply).lower() in ("1", "true", "yes", "on")
    if action == "move":
        topic, to = _field(fields, "topic"), _field(fields, "to")
        if not topic or not to:
            raise _Refused(400, "a move needs 'topic' and 'to'")
        groups = fields.get("groups", [])
        if isinstance(groups, str):
            groups = groups.replace(",", " ").split()
        if not isinstance(groups, list) or not all(isinstance(g, str) and g for g in groups):
            raise _Refused(400, "'groups' must be a list of consumer group names")
        argv = ["move", "--config", directory, "--topic", topic, "--to", to]
        for group in groups:
            argv += ["--group", group]
        return Asked("move", topic, argv, apply)
    cluster = _field(fields, "cluster")
    if not cluster:
        raise _Refused(400, f"a {action} needs 'cluster'")
    return Asked(action, cluster, [action, "--config", directory, "--cluster", cluster], apply)


async def read_body(
    request: Request, limit: int, refuse: Callable[[int, str], Exception] = HTTPException
) -> bytes:
    """The request's body, read as it arrives: ``refuse(413, why)`` raised as soon as it is
    (or its Content-Length says it is) over ``limit`` bytes."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise refuse(413, f"request body over {limit} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise refuse(413, f"request body over {limit} bytes")
    return bytes(body)


def run_kbear(argv: list[str], timeout_s: float) -> tuple[int, str]:
    """Run ``kbear ARGV`` in a child process; (exit code, its output: stdout then stderr)."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", "kbear.cli", *argv],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        partial = "".join(
            part.decode(errors="replace") if isinstance(part, bytes) else (part or "")
            for part in (exc.stdout, exc.stderr)
        )
        return -1, f"{partial}\nkbear {argv[0]}: no answer within {timeout_s:.0f} s"
    return done.returncode, done.stdout + done.stderr


def _outcome(code: int, applied: bool) -> str:
    if code == 0:
        return "applied" if applied else "planned: ready"
    if code == 1:
        return "not ready"
    return f"failed (exit {code})"


class Actions:
    """The action endpoints.

    Args:
        holder: the served configuration (its directory is acted on).
        audit: where every action is written.
        tokens: the read tokens; operator_tokens: the tokens that may act.
        run: runs a ``kbear`` command (:func:`run_kbear`; tests give another).
    """

    def __init__(
        self,
        holder: ConfigHolder,
        audit: AuditLog,
        tokens: Collection[str],
        operator_tokens: Collection[str],
        run: Callable[[list[str], float], tuple[int, str]] = run_kbear,
    ) -> None:
        self.holder = holder
        self.audit = audit
        self._read = tuple(tokens)
        self._operators = tuple(operator_tokens)
        self._run = run
        self._applying = threading.Lock()
        #: the thread of the apply running (tests join it)
        self.running: threading.Thread | None = None

    # ------------------------------------------------------------------ who asks

    @staticmethod
    def _matches(given: str, tokens: Collection[str]) -> str | None:
        # every one compared: the time does not tell which was close
        found = [token for token in tokens if hmac.compare_digest(given.encode(), token.encode())]
        return found[0] if found else None

    @staticmethod
    def _signed_in(session: str, tokens: Collection[str]) -> str | None:
        """The token of ``tokens`` the console session ``session`` was signed in with."""
        return next((t for t in tokens if session and session_valid(session, [t.encode()])), None)

    def who(self, request: Request, fields: dict[str, Any]) -> str:
        """The operator asking (``token:<fingerprint>`` or ``session:<fingerprint>``).

        Raises:
            _Refused: 403, not an operator (the reason says why).
        """
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and given.strip():
            token = given.strip()
            operator = self._matches(token, self._operators)
            if operator is None:
                reason = "a read token may look, not act: actions need an operator token"
                raise _Refused(403, reason, f"token:{fingerprint(token)}")
            return f"token:{fingerprint(operator)}"
        session = cookie_parser(request.headers.get("cookie", "")).get(SESSION_COOKIE, "")
        operator = self._signed_in(session, self._operators)
        if operator is not None:
            given_csrf = str(fields.get("csrf") or request.headers.get("x-kbear-csrf", ""))
            if not hmac.compare_digest(given_csrf.encode(), csrf_token(session).encode()):
                reason = "a console session acts only with its CSRF token"
                raise _Refused(403, reason, f"session:{fingerprint(operator)}")
            return f"session:{fingerprint(operator)}"
        read = self._signed_in(session, self._read)
        if read is not None:
            reason = "this session signed in with a read token: sign in with an operator token to act"
            raise _Refused(403, reason, f"session:{fingerprint(read)}")
        if not self._operators:
            raise _Refused(
                403, "no operator token is configured (--operator-token-file or KBEAR_SERVE_OPERATOR_TOKEN)"
            )
        raise _Refused(403, "actions need an operator token")

    def session_is_operator(self, session: str | None) -> bool:
        """Whether a console session was signed in with an operator token."""
        return self._signed_in(session or "", self._operators) is not None

    # ------------------------------------------------------------------ the endpoint

    async def _fields(self, request: Request) -> tuple[dict[str, Any], bool]:
        """The request's fields and whether it came from a form (the console)."""
        body = await read_body(request, _BODY_MAX, _Refused)
        media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if media == "application/x-www-form-urlencoded":
            parsed = parse_qs(body.decode("utf-8", "replace"))
            return {k: v[0] if k != "groups" else ",".join(v) for k, v in parsed.items()}, True
        try:
            fields = json.loads(body or b"{}")
        except ValueError:
            raise _Refused(400, "the body is not JSON") from None
        if not isinstance(fields, dict):
            raise _Refused(400, "the body must be a JSON object")
        return fields, False

    def endpoint(
        self, action: str, render: Callable[[int, dict[str, Any], Asked | None, dict[str, Any]], Response]
    ) -> Callable[[Request], Any]:
        """The handler of ``POST /actions/<action>``; ``render(status, answer, asked, fields)``
        makes the console's page of a form request's answer."""

        async def handle(request: Request) -> Response:
            form, asked = False, None
            fields: dict[str, Any] = {}
            try:
                fields, form = await self._fields(request)
                who = self.who(request, fields)
                asked = _asked(action, fields, str(self.holder.directory))
            except _Refused as exc:
                self.audit.add("action", action, who=exc.who, outcome=f"refused: {exc.message}")
                answer, status = {"error": exc.message}, exc.status
            else:
                answer, status = await run_in_threadpool(self._act, asked, who)
            return render(status, answer, asked, fields) if form else JSONResponse(answer, status)

        return handle

    def _act(self, asked: Asked, who: str) -> tuple[dict[str, Any], int]:
        digest = self.holder.served.config.digest
        add = functools.partial(
            self.audit.add, "action", asked.action, who=who, target=asked.target, digest=digest
        )
        if not asked.apply:
            code, text = self._run(asked.argv, PLAN_TIMEOUT_S)
            outcome = _outcome(code, False)
            entry = add(plan=text, outcome=outcome)
            answer = {"plan": text, "ready": code == 0, "outcome": outcome}
            return {"id": entry, "action": asked.action, "target": asked.target, **answer}, 200
        if not self._applying.acquire(blocking=False):
            message = "another action is being applied: see the audit log"
            add(outcome=f"refused: {message}")
            return {"error": message}, 409
        entry = add(outcome="applying")
        assert entry is not None

        def apply() -> None:
            try:
                code, text = self._run([*asked.argv, "--apply"], _APPLY_TIMEOUT_S)
                self.audit.finish(entry, _outcome(code, True), text)
                log.warning(
                    "kbear serve: %s of %s by %s: %s", asked.action, asked.target, who, _outcome(code, True)
                )
            except Exception as exc:  # the outcome says it; the server goes on
                self.audit.finish(entry, f"failed: {exc}")
                log.exception("kbear serve: applying %s of %s failed", asked.action, asked.target)
            finally:
                self._applying.release()

        self.running = threading.Thread(target=apply, name="kbear-serve-action", daemon=True)
        self.running.start()
        return {"id": entry, "action": asked.action, "target": asked.target, "outcome": "applying"}, 202
