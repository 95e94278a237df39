"""kbear's slow-path events and the listeners that follow them (private).

Responsible for: the events kbear's slow paths report (a routed client opened,
a topic's route changed, a drain started or finished, a configuration reload
applied or refused, a request to a meta-service, messages re-sent after a
take-back, a cluster declared lost or recovered, a failover or fail-back), their
structured log fields,
and a process-wide registry of listeners (the metrics of :mod:`kbear.metrics`
subscribe here) and of client configurers (which may add
``statistics.interval.ms`` and a ``stats_cb`` to the configuration of each
cluster's confluent-kafka client as it is built).

Nothing here runs per message: events come from reloads, switches, client
construction and meta-service requests only. With no listener, :func:`emit` is
a check of an empty list.
A listener or configurer that raises is logged (``kbear.events``) and skipped;
the slow path it was called from goes on.

Structured log fields (``logging`` ``extra=``) are :data:`FIELDS`: ``event``,
``cluster``, ``topic``, ``rule``, ``reason`` (and ``old_cluster``), never a
cluster's properties (where credentials live).
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit, urlunsplit

from kbear._cluster_errors import name_cluster_errors

if TYPE_CHECKING:
    from kbear._route import Route

log = logging.getLogger("kbear.events")

#: the ``extra=`` keys of kbear's structured log records (all may be None)
FIELDS = ("event", "cluster", "old_cluster", "topic", "rule", "reason")


@dataclass(frozen=True)
class ClientSnapshot:
    """What a routed client shows its observers (:mod:`kbear.metrics`) at one moment.

    Attributes:
        kind: ``"producer"``, ``"consumer"``, or ``"client"`` (the admin client).
        client_id: the confluent-kafka ``client.id`` (see :func:`client_id`).
        group: a consumer's ``group.id``; ``""`` for other clients.
        routes: logical topic -> the route in use (a consumer's: its
            subscription's, topics still drained on their old cluster included).
        drains: drains in progress (a consumer's; 0 for other clients).
        config_location: where the configuration in force comes from (a directory
            or a URL without credentials, see :func:`location`).
        config_digest: that configuration's content digest.
    """

    kind: str
    client_id: str
    group: str
    routes: Mapping[str, Route]
    drains: int
    config_location: str
    config_digest: str


class Observed(Protocol):
    """A routed client as its observers see it: the ``client`` of :class:`ClientOpened`."""

    def snapshot(self) -> ClientSnapshot | None:
        """The client now, or None once it is closed (or its constructor failed).

        Raises:
            RuntimeError: a table changed while it was copied (taken from another
                thread than the client's); the caller may try again.
        """
        ...


@dataclass(frozen=True)
class ClientOpened:
    """A routed client (RoutedProducer, RoutedConsumer, RoutedAdminClient) was constructed: ``client``."""

    client: Observed


@dataclass(frozen=True)
class ClusterError:
    """librdkafka reported an error (``error``: ``KafkaError.name()``, such as
    ``_TRANSPORT``) to the ``error_cb`` of a ``kind`` client of cluster ``cluster``:
    every one, also those kbear's log does not write one by one
    (:mod:`kbear._outage_log`)."""

    kind: str
    cluster: str
    error: str


@dataclass(frozen=True)
class RouteChanged:
    """``topic`` of a routed client of ``kind`` (``"producer"``, ``"consumer"``) and
    confluent-kafka ``client.id`` ``client_id`` left ``old`` for ``new`` (None: no route)."""

    kind: str
    client_id: str
    topic: str
    old: Route
    new: Route | None


@dataclass(frozen=True)
class DrainStarted:
    """A drain of ``topic`` on cluster ``cluster`` began (``kind``: ``"producer"``, a
    flush before the topic moves; ``"consumer"``, a RoutedConsumer (or the asyncio
    consumer over it) reading the old cluster to its end; ``"share consumer"``;
    ``"spark"``, the Spark source reading the old cluster to its end over
    micro-batches) at ``started`` (seconds on the reporter's clock: monotonic, the
    Spark source's wall clock); ``next_move``: the topic moved again during a drain
    and this drains the route it had meanwhile. The switch engine
    (:mod:`kbear._switch`) reports it to its driver, which emits it."""

    kind: str
    topic: str
    cluster: str
    started: float = 0.0
    next_move: bool = False


@dataclass(frozen=True)
class DrainFinished:
    """The drain of :class:`DrainStarted` ended after ``duration_s`` seconds;
    ``timed_out``: by ``kbear.switch.drain.timeout.ms`` or a dead cluster, not
    complete; ``messages``: read from the old cluster during the drain (0 for a
    producer's flush and for the Spark source); ``dead``: ended at once because every broker of the old
    cluster was unreachable (:meth:`kbear._switch.SwitchEngine.cluster_down`)."""

    kind: str
    topic: str
    cluster: str
    duration_s: float
    timed_out: bool
    messages: int = 0
    dead: bool = False


@dataclass(frozen=True)
class MessagesResent:
    """A producer took back what ``cluster``'s client held (its drain timed out, or its
    brokers were all down) and sent it along the routes now: ``queued`` messages from
    the queue, ``in_flight`` ones whose fate was unknown (at-least-once: possibly
    duplicates), ``failed`` ones it could not re-send (reported failed)."""

    kind: str
    cluster: str
    queued: int
    in_flight: int
    failed: int


@dataclass(frozen=True)
class ClusterHealthChanged:
    """The lost-cluster policy (:mod:`kbear._health`) declared ``cluster`` lost
    (``lost=True``: no broker reachable for ``kbear.failover.after.ms``) or recovered
    (``lost=False``), as seen by ``observer`` (``"producer"``, ``"consumer"``,
    ``"serve"``), after ``for_s`` seconds unreachable (or reachable again)."""

    observer: str
    cluster: str
    lost: bool
    for_s: float


@dataclass(frozen=True)
class ClusterUnanswered:
    """A ``kind`` reader (``"spark"``: the kbear source, at a micro-batch) asked
    ``cluster`` for its topics' end offsets and got no answer: those topics get no
    new offsets in that batch."""

    kind: str
    cluster: str


@dataclass(frozen=True)
class ClusterIdMismatch:
    """A ``kind`` client refused cluster ``cluster``: its brokers reported the cluster
    id ``reported`` (None: none), ``clusters.yaml`` declares ``expected``
    (``kbear.cluster.id``, :mod:`kbear._cluster_id`)."""

    kind: str
    cluster: str
    expected: str
    reported: str | None


@dataclass(frozen=True)
class FailedOver:
    """The routes to ``cluster`` now go to its standby ``standby`` (``back=False``:
    a failover) or back to ``cluster`` (``back=True``: a fail-back); ``trigger``:
    ``"client"`` (``kbear.failover.enable``), ``"config"`` (``kbear failover`` /
    ``kbear failback`` wrote it) or ``"serve"`` (``kbear serve``'s watch)."""

    trigger: str
    cluster: str
    standby: str
    back: bool = False


@dataclass(frozen=True)
class MirroredStart:
    """A ``kind`` consumer's group started ``partitions`` partitions of ``topic``
    (logical name) on ``cluster``, moved there from ``source`` with a start taken from
    the mirror (``kbear.switch.start=translated``, or a failover to a mirrored
    standby), decided by ``decided_by``: ``checkpoint``, ``offset-sync`` (MirrorMaker
    2), ``identical`` (the same offsets) -- a **translated** start -- or ``committed``
    (no translation: the group's committed offsets on ``cluster``, else
    ``auto.offset.reset``) -- a **fallback**."""

    kind: str
    topic: str
    cluster: str
    source: str
    decided_by: str
    partitions: int

    @property
    def translated(self) -> bool:
        """Whether the start came from the mirror (else: the fallback)."""
        return self.decided_by != "committed"


@dataclass(frozen=True)
class ReloadApplied:
    """A configuration (content digest ``digest``) from ``location`` is in force."""

    location: str
    digest: str
    at: float = field(default_factory=time.time)


@dataclass(frozen=True)
class ReloadRefused:
    """A configuration change from ``location`` was refused (``reason``: ``"invalid"``
    or ``"unreadable"``); the previous configuration stays."""

    location: str
    reason: str


@dataclass(frozen=True)
class MetaRequest:
    """One HTTP request to a meta-service (``location``, without credentials) on
    ``path`` ended after ``duration_s`` seconds; ``outcome``: ``"ok"``,
    ``"unavailable"`` (transport error, timeout, HTTP 5xx: retried) or
    ``"refused"`` (another HTTP status, a body too large or not JSON)."""

    location: str
    path: str
    outcome: str
    duration_s: float


@dataclass(frozen=True)
class MetaServiceState:
    """A refresh asked the meta-service at ``location``: ``down_since`` is when it was
    first found unreachable (``time.time()``), None when this refresh reached it;
    ``answer_at`` when the last good answer arrived (None: none yet)."""

    location: str
    down_since: float | None
    answer_at: float | None


Event = (
    ClientOpened
    | ClusterError
    | RouteChanged
    | DrainStarted
    | DrainFinished
    | MessagesResent
    | ClusterHealthChanged
    | ClusterUnanswered
    | ClusterIdMismatch
    | FailedOver
    | MirroredStart
    | ReloadApplied
    | ReloadRefused
    | MetaRequest
    | MetaServiceState
)
Listener = Callable[[Event], None]
#: ``configurer(kind, cluster_id, conf)``: may change ``conf`` (a cluster client's
#: configuration, before the client is built)
Configurer = Callable[[str, str, MutableMapping[str, Any]], None]
#: ``builder(kind, cluster_id, conf, factory)``: builds the cluster client itself (the
#: metrics' counting consumer), or returns None to leave it to ``factory(conf)``
Builder = Callable[[str, str, dict[str, Any], Callable[..., Any]], Any]

_listeners: list[Listener] = []
_configurers: list[Configurer] = []
_builders: list[Builder] = []
_REGISTRIES: tuple[list[Any], ...] = (_listeners, _configurers, _builders)
#: every routed client constructed and still alive (for listeners subscribing late)
_clients: weakref.WeakSet[Observed] = weakref.WeakSet()


def subscribe(
    listener: Listener | None = None, configurer: Configurer | None = None, builder: Builder | None = None
) -> None:
    """Add ``listener`` (called with every event), ``configurer`` (called with every
    cluster client configuration as it is built) and/or ``builder`` (see :func:`build`)."""
    for item, registry in zip((listener, configurer, builder), _REGISTRIES, strict=True):
        if item is not None and item not in registry:
            registry.append(item)


def unsubscribe(
    listener: Listener | None = None, configurer: Configurer | None = None, builder: Builder | None = None
) -> None:
    """Remove what :func:`subscribe` added; unknown ones are ignored."""
    for item, registry in zip((listener, configurer, builder), _REGISTRIES, strict=True):
        if item in registry:
            registry.remove(item)


def build(kind: str, cluster_id: str, conf: dict[str, Any], factory: Callable[..., Any]) -> Any:
    """The confluent-kafka client of ``kind`` for ``cluster_id``: the first builder's
    that builds one (kbear's metrics build a consumer that counts what it hands
    out), else ``factory(conf)``. What building raises (confluent-kafka refusing
    ``conf``) reaches the caller, as ``factory(conf)``'s would."""
    for builder in list(_builders):
        client = builder(kind, cluster_id, conf, factory)
        if client is not None:
            return client
    return factory(conf)


def open_clients() -> list[Observed]:
    """The routed clients constructed so far and not yet collected."""
    return list(_clients)


def call_each(logger: logging.Logger, message: str, hooks: Iterable[Callable[..., Any]], *args: Any) -> None:
    """Call each of ``hooks`` (a copy of it: one may remove itself) with ``args``
    in the calling thread; one that raises is logged on ``logger`` (``message`` with
    the hook for its ``%r``, and the traceback) and the next is called."""
    for hook in list(hooks):
        try:
            hook(*args)
        except Exception:
            logger.exception(message, hook)


def emit(event: Event) -> None:
    """Hand ``event`` to every listener (in the calling thread)."""
    if isinstance(event, ClientOpened):
        _clients.add(event.client)
    call_each(log, "kbear: event listener %r failed", _listeners, event)


def configure(
    kind: str, cluster_id: str, conf: MutableMapping[str, Any], stats_interval_ms: int | None = None
) -> MutableMapping[str, Any]:
    """``conf``, the configuration of the confluent-kafka client of ``kind``
    (``"producer"``, ``"consumer"``) for cluster ``cluster_id``, as every configurer
    leaves it, its ``error_cb`` first made to name the cluster in authentication and
    TLS errors (:mod:`kbear._cluster_errors`; every error it sees emitted as a
    :class:`ClusterError` while a listener is subscribed); returned for chaining.

    Statistics (librdkafka's ``statistics.interval.ms``, off at 0, its default): the
    application's ``stats_cb`` is called as confluent-kafka calls it, only when the
    application set ``statistics.interval.ms`` > 0 (in its configuration or the
    cluster's properties), at that interval; else it is left out of ``conf`` before
    the configurers see it, so no statistics kbear turns on for itself reach it.
    When the application set ``statistics.interval.ms`` (0 included), its value
    stands, whatever kbear's parts need. Otherwise the client gets the shortest
    interval kbear's parts need: the configurers' (:mod:`kbear.metrics`) and
    ``stats_interval_ms`` (ms; the failover watch's, :data:`kbear._lost.STATS_INTERVAL_MS`)."""
    app_interval = conf.get("statistics.interval.ms")
    if not _interval_ms(app_interval, 1):
        conf.pop("stats_cb", None)  # never called by confluent-kafka

    def counted(err: Any) -> None:
        if _listeners:
            emit(ClusterError(kind, cluster_id, err.name()))

    name_cluster_errors(kind, cluster_id, conf, counted)
    call_each(log, "kbear: client configurer %r failed", _configurers, kind, cluster_id, conf)
    if stats_interval_ms and app_interval is None:
        others = _interval_ms(conf.get("statistics.interval.ms"), 0)
        conf["statistics.interval.ms"] = min(others, stats_interval_ms) if others > 0 else stats_interval_ms
    return conf


def _interval_ms(value: Any, unreadable: int) -> int:
    """``statistics.interval.ms`` as an integer (unset: 0); ``unreadable`` when it is
    not one (confluent-kafka refuses the configuration)."""
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return unreadable


def fields(
    event: str,
    topic: str | None = None,
    old: Route | None = None,
    new: Route | None = None,
    *,
    cluster: str | None = None,
    reason: str | None = None,
) -> dict[str, Any]:
    """The ``extra=`` of a structured log record (:data:`FIELDS`): ``cluster`` and
    ``rule`` from ``new`` (else ``cluster``), ``old_cluster`` from ``old``. Cluster
    properties (credentials) never enter a record."""
    return {
        "event": event,
        "cluster": new.cluster_id if new is not None else cluster,
        "old_cluster": None if old is None else old.cluster_id,
        "topic": topic,
        "rule": None if new is None else new.rule_id,
        "reason": reason,
    }


def location(where: object) -> str:
    """A configuration's directory or URL as events and metrics show it: a URL's
    user information, query and fragment (where tokens may hide) are dropped."""
    text = str(where)
    if "://" not in text:
        return text
    parts = urlsplit(text)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def client_id(conf: MutableMapping[str, Any] | dict[str, Any]) -> str:
    """The confluent-kafka ``client.id`` of a configuration (librdkafka's default ``rdkafka``)."""
    return str(conf.get("client.id", "rdkafka"))
