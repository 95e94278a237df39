"""Bearer-token authentication of ``kbear serve``.

When tokens are configured, every request but the probes (``/healthz``,
``/readyz``) must carry ``Authorization: Bearer <token>`` with one of them;
any other request is answered ``401`` with ``WWW-Authenticate: Bearer`` and a
``fail`` status naming no data. Tokens are compared in constant time
(``hmac.compare_digest``). A token file holds one token per line (blank lines
and lines starting with ``#`` are skipped), so that a token can be rotated
by adding the new one, moving the clients, then removing the old one
(the file is read at start: restart the server to apply a change).

The console (:mod:`kbear.server.console`) is used from a browser, which cannot
send the header on a navigation: its login form (``POST /login``) takes a
token and sets a session cookie (``kbear_session``: HttpOnly, SameSite=Strict,
Secure over HTTPS) valid for :data:`SESSION_TTL_S` seconds, accepted in place
of the header by every endpoint. The cookie holds its expiry and an HMAC-SHA256
of it keyed by the token, not the token: every worker process checks it
without shared state, and removing a token from the file ends its sessions at
the next restart. A request for a console page without a token is sent to the
login form (303) instead of getting the JSON 401.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import time
from collections.abc import Collection, Mapping
from pathlib import Path

from starlette.datastructures import Headers
from starlette.requests import cookie_parser
from starlette.responses import RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from kbear.server.protocol import ErrorCode
from kbear.server.service import fail

__all__ = [
    "OPERATOR_TOKEN_ENV",
    "SESSION_COOKIE",
    "SESSION_TTL_S",
    "TOKEN_ENV",
    "BearerAuth",
    "csrf_token",
    "read_tokens",
    "session_cookie",
    "session_valid",
]

#: The console's session cookie.
SESSION_COOKIE = "kbear_session"
#: How long a console session lasts, seconds (12 hours).
SESSION_TTL_S = 12 * 3600

#: Environment variable holding the token when no token file is given.
TOKEN_ENV = "KBEAR_SERVE_TOKEN"
#: Environment variable holding the operator token (``POST /actions/...``) when no
#: ``--operator-token-file`` is given.
OPERATOR_TOKEN_ENV = "KBEAR_SERVE_OPERATOR_TOKEN"


def read_tokens(
    token_file: str | os.PathLike[str] | None, environ: Mapping[str, str], variable: str = TOKEN_ENV
) -> tuple[str, ...]:
    """The accepted tokens: the lines of ``token_file``, else ``environ[variable]``
    (:data:`TOKEN_ENV`, or :data:`OPERATOR_TOKEN_ENV` for the operator tokens), else none.

    Raises:
        ValueError: the file holds no token, or the variable is set but blank.
        OSError: the file cannot be read.
    """
    if token_file is not None:
        lines = Path(token_file).read_text(encoding="utf-8").splitlines()
        tokens = tuple(t.strip() for t in lines if t.strip() and not t.strip().startswith("#"))
        if not tokens:
            raise ValueError(f"token file {token_file} holds no token")
        return tokens
    value = environ.get(variable)
    if value is None:
        return ()
    if not value.strip():
        raise ValueError(f"{variable} is set but blank")
    return (value.strip(),)


def _session_mac(token: bytes, expires: int) -> str:
    return hmac.new(token, f"kbear-console-session:{expires}".encode(), hashlib.sha256).hexdigest()


def session_cookie(token: str, now: float | None = None) -> str:
    """The session cookie's value for a login with ``token``: ``<expiry>.<hmac>``
    (expiry in Unix seconds, :data:`SESSION_TTL_S` from ``now``)."""
    expires = int(time.time() if now is None else now) + SESSION_TTL_S
    return f"{expires}.{_session_mac(token.encode('utf-8'), expires)}"


def session_valid(value: str, tokens: Collection[bytes], now: float | None = None) -> bool:
    """Whether a session cookie's value was made by :func:`session_cookie` with one
    of ``tokens`` (UTF-8 bytes) and has not expired."""
    expires_text, _, mac = value.partition(".")
    if not expires_text.isdigit() or int(expires_text) < (time.time() if now is None else now):
        return False
    expires = int(expires_text)
    matches = [hmac.compare_digest(mac.encode(), _session_mac(t, expires).encode()) for t in tokens]
    return any(matches)


def csrf_token(session: str) -> str:
    """The CSRF token of a console session (its cookie's value): what the console's
    forms carry and ``POST /actions/...`` checks for a request authenticated by the
    cookie. A page of another site can send the cookie but not read it, nor this."""
    return hmac.new(session.encode(), b"kbear-console-csrf", hashlib.sha256).hexdigest()


class BearerAuth:
    """ASGI middleware: refuses HTTP requests without an accepted bearer token.

    Args:
        app: the application behind it.
        tokens: the accepted tokens; none disables the check.
        open_paths: paths answered without a token (the probes, the login form);
            a path ending with ``/`` opens every path under it.
        page_paths: console pages: without a token they redirect to ``/login``.
    """

    def __init__(
        self,
        app: ASGIApp,
        tokens: Collection[str],
        open_paths: Collection[str],
        page_paths: Collection[str] = (),
    ) -> None:
        self._app = app
        self._tokens = tuple(t.encode("utf-8") for t in tokens)
        self._open = frozenset(p for p in open_paths if not p.endswith("/"))
        self._open_prefixes = tuple(p for p in open_paths if p.endswith("/"))
        self._pages = frozenset(page_paths)

    def _accepted(self, scope: Scope) -> bool:
        headers = Headers(scope=scope)
        for cookie in headers.getlist("cookie"):
            session = cookie_parser(cookie).get(SESSION_COOKIE)
            if session and session_valid(session, self._tokens):
                return True
        scheme, _, token = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer":
            return False
        given = token.encode("latin-1").strip()
        # Every token is compared, so the time taken does not tell which one was close.
        return any([hmac.compare_digest(given, accepted) for accepted in self._tokens])

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or not self._tokens
            or scope["path"] in self._open
            or scope["path"].startswith(self._open_prefixes)
            or self._accepted(scope)
        ):
            await self._app(scope, receive, send)
            return
        if scope["path"] in self._pages and scope["method"] in ("GET", "HEAD"):
            response: Response = RedirectResponse("/login", 303)
        else:
            why = "missing or wrong bearer token (Authorization: Bearer ...)"
            response = fail(401, ErrorCode.UNAUTHORIZED, why, {"WWW-Authenticate": 'Bearer realm="kbear"'})
        await response(scope, receive, send)
