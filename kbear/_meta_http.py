"""Talking HTTP to a meta-service, and what it holds as a whole (private, the ``meta`` extra).

:func:`request` makes one request with a deadline and a size bound;
:func:`fetch_everything` reads everything a service holds (clusters, topics,
consumer groups, and the rules with their statements when it serves them:
``GET /route/rules/all``) for ``kbear validate``, ``lint`` and ``explain`` with a
URL. Re-exported by :mod:`kbear.meta`.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from kbear import _meta_protocol as protocol
from kbear.config import ROUTE_RULES_FILE, ConfigError, ConfigProblem, KBearConfig, load_documents

__all__ = [
    "Everything",
    "ServiceUnreachableError",
    "fetch_everything",
    "fetch_everything_over",
    "load_everything",
    "request",
]


class Unavailable(Exception):
    """The service could not be asked (transport error, timeout, HTTP 5xx): retried."""


class ServiceUnreachableError(ConfigError):
    """The :class:`ConfigError` of a meta-service that could not be asked (transport
    error, timeout, HTTP 5xx after every try), told apart from an answer refused:
    ``kbear validate``/``lint`` exit with the code of an unreachable service.

    Attributes:
        url: the service's URL.
    """

    def __init__(self, problems: list[ConfigProblem], url: str) -> None:
        super().__init__(problems, url)
        self.url = url


def problem(location: str, message: str) -> ConfigError:
    return ConfigError([ConfigProblem(location, None, message)], location)


def unreachable(location: str, exc: Unavailable) -> ServiceUnreachableError:
    return ServiceUnreachableError(
        [ConfigProblem(location, None, f"meta-service unreachable: {exc}")], location
    )


def http_client(
    base: str, timeout_s: float, token: str | None, transport: httpx.BaseTransport | None, verify: Any = True
) -> httpx.Client:
    """An HTTP client of the service at ``base``: ``timeout_s`` per request, no
    redirects followed, ``Authorization: Bearer`` ``token`` (``KBEAR_META_TOKEN``
    when None; no header when neither is set)."""
    token = token if token is not None else os.environ.get("KBEAR_META_TOKEN")
    return httpx.Client(
        base_url=base,
        transport=transport,
        timeout=httpx.Timeout(timeout_s),
        headers={"Authorization": f"Bearer {token}"} if token else {},
        verify=verify,
        follow_redirects=False,
    )


def request(http: httpx.Client, method: str, path: str, body: Any, timeout_s: float, max_body: int) -> Any:
    """One request; the decoded JSON answer.

    Raises:
        Unavailable: transport error, timeout (the whole answer must arrive
            within ``timeout_s``), HTTP 5xx.
        protocol.AnswerRefused: HTTP status other than 200 and 5xx, a body larger
            than ``max_body`` bytes, not JSON.
    """
    deadline = time.monotonic() + timeout_s
    try:
        with http.stream(method, path, json=body) as response:
            if response.status_code >= 500:
                raise Unavailable(f"{path}: HTTP {response.status_code}")
            if response.status_code != 200:
                raise protocol.AnswerRefused(f"{path}: HTTP {response.status_code}")
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > max_body:
                raise protocol.AnswerRefused(f"{path}: body of {declared} bytes, more than {max_body}")
            answer = bytearray()
            for chunk in response.iter_bytes():
                answer += chunk
                if len(answer) > max_body:
                    raise protocol.AnswerRefused(f"{path}: body larger than {max_body} bytes")
                if time.monotonic() > deadline:
                    raise Unavailable(f"{path}: answer not complete within {timeout_s} s")
    except httpx.TimeoutException as exc:
        raise Unavailable(f"{path}: timed out ({type(exc).__name__})") from None
    except httpx.DecodingError as exc:  # a body its Content-Encoding cannot decode
        raise protocol.AnswerRefused(f"{path}: {exc}") from None
    except httpx.HTTPError as exc:
        raise Unavailable(f"{path}: {type(exc).__name__}: {exc}") from None
    try:
        return json.loads(answer)
    except (ValueError, RecursionError) as exc:
        raise protocol.AnswerRefused(f"{path}: not JSON ({type(exc).__name__}: {exc})") from None


@dataclass(frozen=True)
class Everything:
    """What a meta-service holds, validated as files are.

    Attributes:
        config: clusters, topics, consumer groups, and the rules when served.
        rules_missing: why the rules are not in ``config`` (the service does not
            serve ``/route/rules/all``, or serves rules without their statements),
            None when they are.
    """

    config: KBearConfig
    rules_missing: str | None


def fetch_everything(
    url: str,
    *,
    timeout_s: float = 5.0,
    max_body_bytes: int = 64 * 1024 * 1024,
    token: str | None = None,
    transport: httpx.BaseTransport | None = None,
    environ: Mapping[str, str] | None = None,
) -> Everything:
    """What a meta-service holds: ``GET /meta/clusters/all``, ``/meta/topics/all``,
    ``/meta/consumer-groups/all`` and ``/route/rules/all`` (each rule's statement in
    its meta ``rule``, as ``kbear serve`` serves them), validated as files are
    (``${NAME}`` in cluster meta read from ``environ``, ``os.environ`` when None).

    A service that answers ``/route/rules/all`` with HTTP 4xx, or with a rule that
    carries no statement, gives the rest without rules (``rules_missing`` says why).

    Raises:
        ServiceUnreachableError: the service cannot be reached (a ConfigError).
        ConfigError: an answer refused, or the documents invalid (every problem).
    """
    base = url.rstrip("/")
    with http_client(base, timeout_s, token, transport) as http:
        return fetch_everything_over(http, base, timeout_s, max_body_bytes, environ)


def fetch_everything_over(
    http: httpx.Client, base: str, timeout_s: float, max_body_bytes: int, environ: Mapping[str, str] | None
) -> Everything:
    """:func:`fetch_everything` through an open client whose ``base_url`` is the
    service's URL ``base`` (a :class:`~kbear.meta.MetaServiceSource`'s own).

    Raises:
        ServiceUnreachableError, ConfigError: as :func:`fetch_everything`.
    """
    rules_missing: str | None = None
    try:
        answers = [
            request(http, "GET", f"/meta/{what}/all", None, timeout_s, max_body_bytes)
            for what in ("clusters", "topics", "consumer-groups")
        ]
        documents = protocol.everything_documents(*answers)
        try:
            served = request(http, "GET", protocol.RULES_ALL_PATH, None, timeout_s, max_body_bytes)
            documents[ROUTE_RULES_FILE] = {"route-rules": protocol.rules_document(served)}
        except protocol.AnswerRefused as exc:
            rules_missing = f"the service does not serve its rules with their statements ({exc})"
    except Unavailable as exc:
        raise unreachable(base, exc) from None
    except protocol.AnswerRefused as exc:
        raise problem(base, f"meta-service answer refused: {exc}") from None
    return Everything(load_documents(documents, origin=base, environ=environ), rules_missing)


def load_everything(url: str, **options: Any) -> KBearConfig:
    """The configuration of :func:`fetch_everything` (``options``: its keyword
    arguments), without rules when the service does not serve them.

    Raises:
        ConfigError: as :func:`fetch_everything`.
    """
    return fetch_everything(url, **options).config
