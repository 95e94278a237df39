"""A configuration source that asks a meta-service for routes (the ``meta`` extra: httpx).

With ``kbear.config=https://meta.example:8080`` (or ``Router.from_source(url)``),
a client does not read rules: it tells the service who it is (the ``Client``
message: :meth:`kbear.Client.from_environment` or the ``kbear.client.*`` keys)
and which topics and consumer groups it needs, and the service answers with
routes and the clusters' connection data (``docs/reference/meta-service-protocol.md``).

Requests (JSON, ``POST``), one per endpoint per refresh, batched over every
lookup this source has seen so far:

- ``/route/producer``: ``{"client": {"id", "meta"}, "topicIds": [topic, ...]}``;
- ``/route/consumer``: ``{"client": {"id", "meta"}, "consumerGroupIds":
  [{"groupName", "topicId"}, ...]}``.

A lookup the source has not seen yet triggers a refresh at once (the first
``produce`` to a topic, a ``subscribe``); the watcher (``kbear.reload.interval.ms``)
refreshes every interval, and a changed answer is applied as a change of files
is: the router notifies its listeners and the clients switch (drain, no loss).

Faults never take the application down:

- every request has a deadline (``timeout_s`` for connecting and for each
  read, and for the whole answer: a server sending its body byte by byte is
  cut off within about twice ``timeout_s``) and a body size bound
  (``max_body_bytes``, decoded bytes); transport errors, timeouts and HTTP 5xx are retried
  (``attempts``, exponential backoff from ``backoff_s``, tenacity);
- an answer that cannot be used (HTTP 4xx, not JSON, wrong types,
  ``ack: fail``, a route naming a cluster the answer does not describe, a
  cluster property librdkafka refuses, an unset ``${NAME}``) is refused with
  the reason logged, and the last good routes stay in force;
- the last good answer is kept in a local cache file (``cache_file``); a client
  starting while the service is unreachable starts from it, logged at ERROR
  level. Secrets: ``${NAME}`` in a cluster's meta is resolved here, from this
  process's environment, after the answer arrives; the cache file holds the
  answer as received (placeholders, not values) and is written mode 0600.

Partial answers (``ack: partial_fail``) are used: the lookups without a route
raise :class:`~kbear.NoRouteError`, and are asked again at the next refresh.

A lookup the service has not answered is told apart from one no rule routes:

- the service cannot be reached: :class:`~kbear.MetaServiceUnavailable` (a
  ``NoRouteError``) naming the URL, since when, and the last answer's age; the
  metrics show it too (``kbear_meta_service_up``,
  ``kbear_meta_service_unreachable_seconds``, ``kbear_meta_last_answer_age_seconds``);
- its answer for the lookup was refused as invalid (an unset ``${NAME}``, a
  property librdkafka refuses): the :class:`~kbear.ConfigError` a directory
  holding the same configuration gives.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

import httpx
from tenacity import retry, retry_if_exception_type, stop_after_attempt, wait_exponential

from kbear import _events
from kbear import _meta_protocol as protocol
from kbear._identity import Client
from kbear._meta_http import (
    ServiceUnreachableError,
    Unavailable,
    fetch_everything_over,
    http_client,
    load_everything,
    problem,
    request,
    unreachable,
)
from kbear._route import MetaServiceUnavailable, NoRouteError
from kbear._source import ConfigSource
from kbear.config import ConfigError, KBearConfig, documents_digest, load_documents, replace_file

__all__ = ["MetaServiceSource", "ServiceUnreachableError", "default_cache_file", "load_everything"]

log = logging.getLogger("kbear.meta")

_DEFAULT = object()
_CACHE_VERSION = 1


def default_cache_file(url: str, client: Client) -> Path:
    """Where the last good answer for (``url``, ``client``) is kept by default:
    ``$XDG_CACHE_HOME/kbear`` (``~/.cache/kbear``), one file per service and client."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kbear"
    key = json.dumps([url, client.id, sorted(client.meta.items())])
    return base / f"meta-{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"


class MetaServiceSource(ConfigSource):
    """Routes from a meta-service (see the module docstring).

    Args:
        url: the service's base URL (``https://meta:8080``; the endpoint paths
            are appended).
        client: who asks (the ``Client`` message); :meth:`Client.from_environment`
            when None. The service evaluates the chain for this client: a lookup
            with another (non-anonymous) client is refused with ValueError.
        cache_file: where the last good answer is kept; the default is
            :func:`default_cache_file`; None keeps none.
        timeout_s: deadline of one request in seconds, connecting and reading
            the whole answer (default 5).
        attempts: tries per request (default 3); transport errors, timeouts and
            HTTP 5xx are retried.
        backoff_s: first wait between tries in seconds, doubled each time, at
            most 2 s (default 0.2).
        max_body_bytes: largest answer accepted (default 16 MiB).
        token: sent as ``Authorization: Bearer <token>``; ``KBEAR_META_TOKEN``
            from the environment when None.
        transport: an httpx transport (``httpx.MockTransport`` in tests).
        environ: where ``${NAME}`` in cluster meta is read; ``os.environ`` when None.
        verify: TLS verification, as httpx takes it (True, False, an SSL context).
    """

    on_demand: ClassVar[bool] = True

    def __init__(
        self,
        url: str,
        client: Client | None = None,
        *,
        cache_file: str | os.PathLike[str] | Any | None = _DEFAULT,
        timeout_s: float = 5.0,
        attempts: int = 3,
        backoff_s: float = 0.2,
        max_body_bytes: int = 16 * 1024 * 1024,
        token: str | None = None,
        transport: httpx.BaseTransport | None = None,
        environ: Mapping[str, str] | None = None,
        verify: Any = True,
    ) -> None:
        if timeout_s <= 0 or attempts < 1 or max_body_bytes < 1:
            raise ValueError("timeout_s must be > 0, attempts >= 1 and max_body_bytes >= 1")
        self.url = url.rstrip("/")
        self._where = _events.location(self.url)  # as events and metrics show it
        self.client = client if client is not None else Client.from_environment(environ)
        self._client_message = protocol.client_message(self.client.id, self.client.meta)
        self.cache_file = (
            default_cache_file(self.url, self.client)
            if cache_file is _DEFAULT
            else (Path(cache_file) if cache_file is not None else None)
        )
        self._timeout_s = timeout_s
        self._max_body = max_body_bytes
        self._environ = environ
        self._http = http_client(self.url, timeout_s, token, transport, verify)
        self._retrying = retry(
            retry=retry_if_exception_type(Unavailable),
            stop=stop_after_attempt(attempts),
            wait=wait_exponential(multiplier=backoff_s, max=2.0),
            reraise=True,
        )
        self._lock = threading.RLock()
        # What lookups asked for, in order: producer topics and (group, topic) pairs.
        self._topics: dict[str, None] = {}
        self._groups: dict[tuple[str, str], None] = {}
        # The last answer fetched by digest(); load() validates it.
        self._fetched: protocol.Answer | None = None
        # The lookups answered in each configuration built (by digest), newest last.
        self._answered: OrderedDict[str, frozenset[protocol.Interest]] = OrderedDict()
        # Since when (time.time()) the service cannot be reached, and why; None: reachable.
        self._down_since: float | None = None
        self._down_reason = ""
        # When (time.time()) the last good answer arrived (the cached one's savedAt).
        self._answer_at: float | None = None
        # The ConfigError of the answer to each new lookup refused as invalid.
        self._refused: dict[protocol.Interest, ConfigError] = {}
        # The lookups the cached answer was asked for: asked again at the first refresh.
        cached = self._read_cache() or {}
        self._topics.update((t, None) for t in cached.get("topicIds", []) if isinstance(t, str))
        for pair in cached.get("consumerGroupIds", []):
            if isinstance(pair, list) and len(pair) == 2 and all(isinstance(p, str) for p in pair):
                self._groups[(pair[0], pair[1])] = None

    # ------------------------------------------------------------------ ConfigSource

    @property
    def location(self) -> str:
        return self.url

    def digest(self) -> str:
        """Ask the service now (one request per endpoint with lookups) and return the
        digest of the answer's documents.

        Raises:
            ConfigError: the service is unreachable after every try, or its answer
                cannot be used (the reason is the problem's message).
        """
        with self._lock:
            self._fetched = self._fetch()
            return documents_digest(self._fetched.documents)

    def load(self) -> KBearConfig:
        """The configuration of the last answer (asking first if none is pending),
        validated as files are; on success it becomes the cached answer.

        At the first load, a service that cannot be asked or whose answer is
        refused is replaced by the cache file when there is one (logged at ERROR
        level).

        Raises:
            ConfigError: the answer is invalid, or the service is unreachable; at
                the first load only when no cached answer stands in.
        """
        with self._lock:
            try:
                answer = self._fetched or self._fetch()
                self._fetched = None
                config = load_documents(answer.documents, origin=self.url, environ=self._environ)
            except ConfigError as exc:
                self._fetched = None
                cached = self._cached_answer() if not self._answered else None
                if cached is None:
                    raise
                log.error(
                    "kbear: meta-service %s unusable, STARTING FROM THE CACHED ANSWER in %s saved at %s: %s",
                    self.url,
                    self.cache_file,
                    cached[1],
                    exc,
                )
                answer = cached[0]
                config = load_documents(answer.documents, origin=self.url, environ=self._environ)
                self._answer_at = _timestamp(cached[1])
            else:
                self._write_cache(answer)
                self._refused.clear()  # every lookup was asked again
                if self._topics or self._groups:  # the service was asked (nothing to ask at start)
                    self._answer_at = time.time()
            self._emit_state()
            for note in answer.notes:
                log.warning("kbear: meta-service %s: %s", self.url, note)
            self._answered[config.digest] = frozenset(answer.answered)
            while len(self._answered) > 8:
                self._answered.popitem(last=False)
            return config

    def prepare(self, topic: str, group: str | None, client: Client) -> None:
        """Register the lookup; a new one is asked for at once: this source tells
        its listeners (the router) that it changed, and they reload. A refused or
        unreachable answer is logged and remembered; the lookup then has no route
        (:meth:`answers`), and the router raises what :meth:`unanswered` says.

        Raises:
            ValueError: ``client`` is neither anonymous nor this source's client.
        """
        if client != self.client and (client.id is not None or client.meta):
            raise ValueError(
                f"this router asks the meta-service {self.url} for {self.client!r}; "
                f"a lookup for {client!r} needs a router of its own"
            )
        known: dict[Any, None] = self._topics if group is None else self._groups
        item = topic if group is None else (group, topic)
        if item in known:
            return
        key: protocol.Interest = (topic, group)
        with self._lock:
            known[item] = None
            try:
                self.notify_changed()
            except ConfigError as exc:
                log.error("kbear: meta-service %s: lookup %s not answered: %s", self.url, key, exc)
                if not isinstance(exc, ServiceUnreachableError):
                    self._refused[key] = exc
            except Exception:  # never into the application: the lookup has no route
                log.exception("kbear: asking meta-service %s for %s failed", self.url, key)

    def answers(self, topic: str, group: str | None, digest: str) -> bool:
        """Whether the configuration ``digest`` (one of the last 8 this source
        loaded) answered the lookup (``ack: partial_fail`` leaves some unanswered)."""
        return (topic, group) in self._answered.get(digest, ())

    def unanswered(self, topic: str, group: str | None, client: Client) -> Exception:
        """Why a lookup has no route: :class:`~kbear.MetaServiceUnavailable` while the
        service cannot be reached (URL, since when, the last answer's age); the
        :class:`~kbear.ConfigError` of the answer to it refused as invalid (an unset
        ``${NAME}``: what a directory gives); else :class:`~kbear.NoRouteError` (the
        service answered without a route)."""
        since = self._down_since
        if since is not None:
            age = None if self._answer_at is None else max(0.0, time.time() - self._answer_at)
            return MetaServiceUnavailable(client, topic, group, self._where, since, age, self._down_reason)
        refused = self._refused.get((topic, group))
        if refused is not None:
            return refused
        return NoRouteError(client, topic, group)

    def chain_config(self) -> tuple[KBearConfig | None, str | None]:
        """What the service holds, its rules included (``GET /meta/*/all`` and
        ``/route/rules/all``, each rule's statement in its meta ``rule``, as ``kbear
        serve`` serves them), to explain a lookup with the chain the service
        evaluates; ``(None, why)`` when it does not serve its rules' statements.
        Asked at each call (four requests, no retries, not cached).

        Raises:
            ServiceUnreachableError: the service cannot be reached (a ConfigError).
            ConfigError: an answer refused, or what it holds is invalid (an unset
                ``${NAME}`` in a cluster's meta included), every problem listed.
        """
        got = fetch_everything_over(self._http, self.url, self._timeout_s, self._max_body, self._environ)
        return (got.config, None) if got.rules_missing is None else (None, got.rules_missing)

    def _reached(self, reason: str | None) -> None:
        """Note the outcome of a refresh that asked the service: reached (``reason``
        None) or not (why); the metrics follow (``MetaServiceState``)."""
        if reason is None:
            self._down_since = None
        elif self._down_since is None:
            self._down_since = time.time()
        self._down_reason = reason or ""
        self._emit_state()

    def _emit_state(self) -> None:
        _events.emit(_events.MetaServiceState(self._where, self._down_since, self._answer_at))

    def close(self) -> None:
        """Close the HTTP connections."""
        self._http.close()

    # ------------------------------------------------------------------ HTTP

    def _fetch(self) -> protocol.Answer:
        producer = consumer = None
        topics, groups = list(self._topics), list(self._groups)
        try:
            if topics:
                body = protocol.producer_request(self._client_message, topics)
                data = self._retrying(self._post)(protocol.PRODUCER_PATH, body)
                producer = protocol.parse_answer(protocol.ProducerRouteResponse, data, protocol.PRODUCER_PATH)
            if groups:
                body = protocol.consumer_request(self._client_message, groups)
                data = self._retrying(self._post)(protocol.CONSUMER_PATH, body)
                consumer = protocol.parse_answer(protocol.ConsumerRouteResponse, data, protocol.CONSUMER_PATH)
            if topics or groups:
                self._reached(None)
            return protocol.answer_documents(producer, consumer, topics, groups)
        except Unavailable as exc:
            self._reached(str(exc))
            raise unreachable(self.url, exc) from None
        except protocol.AnswerRefused as exc:  # the service was asked (answered) to get here
            self._reached(None)
            raise problem(self.url, f"meta-service answer refused: {exc}") from None

    def _post(self, path: str, body: Any) -> Any:
        outcome = "unavailable"
        start = time.monotonic()
        try:
            data = request(self._http, "POST", path, body, self._timeout_s, self._max_body)
            outcome = "ok"
            return data
        except protocol.AnswerRefused:
            outcome = "refused"
            raise
        finally:
            _events.emit(_events.MetaRequest(self._where, path, outcome, time.monotonic() - start))

    # ------------------------------------------------------------------ cache

    def _read_cache(self) -> dict[str, Any] | None:
        if self.cache_file is None:
            return None
        try:
            data = json.loads(self.cache_file.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            log.error("kbear: meta-service cache %s unreadable, ignored: %s", self.cache_file, exc)
            return None
        if not isinstance(data, dict) or data.get("version") != _CACHE_VERSION or data.get("url") != self.url:
            log.error("kbear: meta-service cache %s is not for %s, ignored", self.cache_file, self.url)
            return None
        if data.get("client") != self._client_message:
            log.error("kbear: meta-service cache %s is for another client, ignored", self.cache_file)
            return None
        return data

    def _cached_answer(self) -> tuple[protocol.Answer, str] | None:
        data = self._read_cache()
        if data is None or not isinstance(data.get("documents"), dict):
            return None
        answered: set[protocol.Interest] = set()
        for item in data.get("answered", []):
            if isinstance(item, list) and len(item) == 2 and isinstance(item[0], str):
                answered.add((item[0], item[1] if isinstance(item[1], str) else None))
        return protocol.Answer(data["documents"], answered), str(data.get("savedAt", "?"))

    def _write_cache(self, answer: protocol.Answer) -> None:
        if self.cache_file is None:
            return
        data = {
            "version": _CACHE_VERSION,
            "url": self.url,
            "client": self._client_message,
            "savedAt": datetime.now(UTC).isoformat(timespec="seconds"),
            "topicIds": list(self._topics),
            "consumerGroupIds": [list(g) for g in self._groups],
            "answered": sorted(([t, g] for t, g in answer.answered), key=lambda i: (i[0], i[1] or "")),
            "documents": answer.documents,
        }
        try:
            self.cache_file.parent.mkdir(parents=True, exist_ok=True)
            replace_file(self.cache_file, json.dumps(data))  # mode 0600: the answer may hold secrets
        except OSError as exc:
            log.warning("kbear: meta-service cache %s not written: %s", self.cache_file, exc)


def _timestamp(saved_at: str) -> float | None:
    """``savedAt`` of a cache file (ISO 8601) as ``time.time()`` seconds; None if unreadable."""
    try:
        return datetime.fromisoformat(saved_at).timestamp()
    except ValueError:
        return None
