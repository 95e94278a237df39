"""What a route lookup answers: a :class:`Route`, :class:`NoRouteError` when no
rule routes the request (:class:`MetaServiceUnavailable` when the meta-service
answering it cannot be reached), and the :class:`Explanation` of a chain (each rule's
:class:`RuleVerdict`). Re-exported by :mod:`kbear.router` and :mod:`kbear`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from kbear._identity import Client
from kbear._secrets import redact
from kbear.config import RouteRule


@dataclass(frozen=True)
class Route:
    """Where a lookup sends the client.

    Attributes:
        cluster_id: the cluster id (from ``clusters.yaml``).
        topic: the physical topic on that cluster: the remapped name of
            ``use cluster c, topic t`` or, without a remap, the topic asked for.
        requested_topic: the topic the application asked for (logical name).
        bootstrap_servers: the cluster's ``bootstrap.servers``.
        rule_id: the id of the rule that yielded the route. Over a meta-service,
            the rule the service names (``kbear serve`` does); "" when the service
            does not say (KBear's reference server), never a made-up id.
        properties: the cluster's librdkafka client properties (including
            ``bootstrap.servers``); secrets are hidden from ``repr``.
    """

    cluster_id: str
    topic: str
    requested_topic: str
    bootstrap_servers: str
    rule_id: str
    properties: Mapping[str, str] = field(repr=False, compare=False)

    @property
    def remapped(self) -> bool:
        """Whether the physical topic differs from the one asked for."""
        return self.topic != self.requested_topic

    def __repr__(self) -> str:
        return (
            f"Route(cluster_id={self.cluster_id!r}, topic={self.topic!r}, "
            f"requested_topic={self.requested_topic!r}, "
            f"bootstrap_servers={self.bootstrap_servers!r}, rule_id={self.rule_id!r}, "
            f"properties={redact(self.properties)!r})"
        )

    def __getstate__(self) -> dict[str, object]:
        # pickle and copy: the read-only properties view is rebuilt on the other side.
        return {**self.__dict__, "properties": dict(self.properties)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            object.__setattr__(self, name, MappingProxyType(value) if name == "properties" else value)


class NoRouteError(LookupError):
    """No rule of the chain routes the request (CRRL spec, "Lookup").

    Attributes:
        client: the :class:`Client` asking.
        topic: the topic asked for.
        group: the consumer group, or None for a producer lookup.
    """

    def __init__(self, client: Client, topic: str, group: str | None) -> None:
        self.client = client
        self.topic = topic
        self.group = group
        #: the constructor's arguments: pickle and copy rebuild the error from them, not
        #: from the formatted message
        self._fields: tuple[Any, ...] = (client, topic, group)
        who = f"client id={client.id!r} meta={dict(client.meta)!r}"
        super().__init__(f"no route rule matches {self._lookup()} for {who}")

    def _lookup(self) -> str:
        return f"topic '{self.topic}'" + (
            f", consumer group '{self.group}'" if self.group is not None else ""
        )

    def __reduce__(self) -> tuple[type[NoRouteError], tuple[Any, ...]]:
        return type(self), self._fields


class MetaServiceUnavailable(NoRouteError):
    """A lookup has no route because the meta-service that answers it cannot be
    reached (transport error, timeout, HTTP 5xx after every try), not because no
    rule matches: a :class:`NoRouteError`, so that existing ``except`` clauses
    still catch it. Routes answered before stay in force; the lookup is asked
    again at the next refresh.

    Attributes:
        client, topic, group: as :class:`NoRouteError`.
        url: the meta-service's URL (without credentials).
        since: when the service was first found unreachable, wall-clock seconds
            since the epoch (``time.time()``).
        last_answer_age_s: seconds since the last good answer (the cached one
            for a client that started from its cache file), None if there was none.
        reason: the last failure (``/route/producer: ConnectError: ...``).
    """

    def __init__(
        self,
        client: Client,
        topic: str,
        group: str | None,
        url: str,
        since: float,
        last_answer_age_s: float | None,
        reason: str,
    ) -> None:
        super().__init__(client, topic, group)
        self._fields = (client, topic, group, url, since, last_answer_age_s, reason)
        self.url = url
        self.since = since
        self.last_answer_age_s = last_answer_age_s
        self.reason = reason
        started = datetime.fromtimestamp(since, UTC).isoformat(timespec="seconds")
        age = (
            "no answer received yet"
            if last_answer_age_s is None
            else f"last answer {last_answer_age_s:.0f} s old"
        )
        self.args = (
            f"meta-service {url} unreachable since {started} ({age}; {reason}): "
            f"no route known for {self._lookup()}",
        )


@dataclass(frozen=True)
class RuleVerdict:
    """One rule of an explained chain.

    Attributes:
        rule: the rule.
        matched: whether its statement matched (only the first match wins).
        failed: the conditions that did not hold, as ``key=value (actual: ...)``.
    """

    rule: RouteRule
    matched: bool
    failed: tuple[str, ...]


@dataclass(frozen=True)
class Explanation:
    """The chain of a lookup with each rule's verdict.

    Attributes:
        factors: the route factors the rules were evaluated against.
        verdicts: the chain in order; evaluation stops at the first match, so
            rules after the winner are listed with ``matched=False`` and no
            failed conditions only when they were not evaluated (see
            ``evaluated``).
        evaluated: how many verdicts were actually evaluated.
        route: the winning route, or None when nothing matches.
        chain_unknown: None when ``verdicts`` is the chain; else why the chain
            cannot be shown (a meta-service that does not serve its rules with
            their statements): ``verdicts`` is then empty and ``route`` the
            service's answer (None when it answered no route).
    """

    factors: Mapping[str, str]
    verdicts: tuple[RuleVerdict, ...]
    evaluated: int
    route: Route | None
    chain_unknown: str | None = None
