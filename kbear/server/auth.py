"""Bearer-token authentication of ``kbear serve``.

When tokens are configured, every request but the probes (``/healthz``,
``/readyz``) must carry ``Authorization: Bearer <token>`` with one of them;
any other request is answered ``401`` with ``WWW-Authenticate: Bearer`` and a
``fail`` status naming no data. Tokens are compared in constant time
(``hmac.compare_digest``). A token file holds one token per line (blank lines
and lines starting with ``#`` are skipped), so that a token can be rotated
by adding the new one, moving the clients, then removing the old one
(the file is read at start: restart the server to apply a change).
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Collection, Mapping
from pathlib import Path

from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["TOKEN_ENV", "BearerAuth", "read_tokens"]

#: Environment variable holding the token when no token file is given.
TOKEN_ENV = "KBEAR_SERVE_TOKEN"

_UNAUTHORIZED = (
    b'{"status":{"ack":"fail","error":{"code":"unauthorized",'
    b'"message":"missing or wrong bearer token (Authorization: Bearer ...)"}}}'
)


def read_tokens(token_file: str | os.PathLike[str] | None, environ: Mapping[str, str]) -> tuple[str, ...]:
    """The accepted tokens: the lines of ``token_file``, else ``environ[TOKEN_ENV]``, else none.

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
    value = environ.get(TOKEN_ENV)
    if value is None:
        return ()
    if not value.strip():
        raise ValueError(f"{TOKEN_ENV} is set but blank")
    return (value.strip(),)


class BearerAuth:
    """ASGI middleware: refuses HTTP requests without an accepted bearer token.

    Args:
        app: the application behind it.
        tokens: the accepted tokens; none disables the check.
        open_paths: paths answered without a token (the probes).
    """

    def __init__(self, app: ASGIApp, tokens: Collection[str], open_paths: Collection[str]) -> None:
        self._app = app
        self._tokens = tuple(t.encode("utf-8") for t in tokens)
        self._open = frozenset(open_paths)

    def _accepted(self, scope: Scope) -> bool:
        for name, value in scope["headers"]:
            if name == b"authorization":
                scheme, _, token = value.partition(b" ")
                if scheme.lower() != b"bearer":
                    return False
                token = token.strip()
                # Every token is compared, so the time taken does not tell which one was close.
                matches = [hmac.compare_digest(token, accepted) for accepted in self._tokens]
                return any(matches)
        return False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or not self._tokens
            or scope["path"] in self._open
            or self._accepted(scope)
        ):
            await self._app(scope, receive, send)
            return
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"www-authenticate", b'Bearer realm="kbear"'),
                    (b"content-length", str(len(_UNAUTHORIZED)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": _UNAUTHORIZED})
