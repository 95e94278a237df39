"""One cluster's confluent-kafka Producer in the client registry, and delivery reports
under the logical names of remapped topics (private).

:class:`ClusterProducer` is a cluster's client (an entry of
:class:`~kbear._clients.ClientRegistry`) with the logical names of the remapped
topics it sends; :func:`~kbear._clients.single_cluster` proves from the
configuration alone that every producer lookup of a client yields one cluster
without a remap (the fast path).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kbear._clients import ClientFactory, ClientRegistry, ClusterEntry, Deadline, single_cluster
from kbear._health import reachable_from_error
from kbear._identity import Client
from kbear._lost import STATS_INTERVAL_MS, watching_stats
from kbear._route import Route
from kbear._standby import standby_cluster
from kbear.config import KBearConfig
from kbear.producer._pending import Rescue, delivery_callback, plain_call, recording_send

__all__ = [
    "ClusterProducer",
    "close_producers",
    "home_cluster",
    "logical_callback",
    "logical_callbacks",
    "produce_batch",
    "producer_registry",
    "single_cluster",
]

DeliveryCallback = Callable[[Any, Any], None]


def logical_callback(cb: DeliveryCallback, logical: str) -> DeliveryCallback:
    """``cb`` called with the message's topic set to ``logical`` first."""

    def deliver(err: Any, msg: Any) -> None:
        msg.set_topic(logical)
        cb(err, msg)

    return deliver


def logical_callbacks(
    args: tuple[Any, ...], kwargs: dict[str, Any], position: int, logical: str
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The arguments of a ``produce`` / ``produce_batch`` call (after the topic) with
    its delivery callbacks (``on_delivery`` / ``callback`` keywords, or the positional
    argument at ``position``) reporting under the topic name ``logical``
    (:func:`logical_callback`); ``kwargs`` is changed in place."""
    for name in ("on_delivery", "callback"):
        if kwargs.get(name) is not None:
            kwargs[name] = logical_callback(kwargs[name], logical)
    if len(args) > position and args[position] is not None:
        args = (*args[:position], logical_callback(args[position], logical), *args[position + 1 :])
    return args, kwargs


class ClusterProducer(ClusterEntry):
    """The confluent-kafka Producer of one cluster, with the properties it was built from.

    Attributes:
        producer: the cluster's ``confluent_kafka.Producer`` (also ``client``).
        logical: physical -> logical name of the remapped topics sent here
            (delivery reports of the configuration's ``on_delivery``).
        rescue: where a take-back (:mod:`kbear.producer._takeback`) claims the
            client's purged messages; whether the cluster is suspect.
        send: what kbear's produce() calls: the client's ``produce`` for a plain
            call, else through a per-message record (:mod:`kbear.producer._pending`).
    """

    __slots__ = ("logical", "producer", "rescue", "send")

    def __init__(
        self,
        cluster_id: str,
        properties: Mapping[str, str],
        producer: Any,
        logical: dict[str, str],
        rescue: Rescue | None = None,
    ) -> None:
        super().__init__(cluster_id, properties, producer)
        self.producer = producer
        self.logical = logical
        self.rescue = Rescue() if rescue is None else rescue
        self.send = plain_call(
            producer.produce, recording_send(producer.produce, self.rescue), self.rescue.reports
        )
        self.rescue.call = self.send


def home_cluster(config: KBearConfig, client: Client, failed: set[str]) -> str | None:
    """The one cluster every producer route of ``client`` goes to unremapped when the
    configuration proves there is one (:func:`single_cluster`), or its standby while it
    is in ``failed`` (failed over); else None."""
    home = single_cluster(config, client)
    if home is None or not failed:
        return home
    return standby_cluster(config, home, failed) or home


def producer_registry(
    native: dict[str, Any],
    on_delivery: DeliveryCallback | None,
    on_build: Callable[[str, Any], None],
    factory: ClientFactory | None = None,
    on_reachable: Callable[[str, bool], None] | None = None,
    watch_brokers: bool = False,
) -> ClientRegistry[ClusterProducer]:
    """The client registry of one RoutedProducer.

    Args:
        native: the producer's confluent-kafka configuration (no kbear keys, no
            ``on_delivery``).
        on_delivery: the configuration's delivery callback, given to each client
            with remapped names translated; None: none.
        on_build: called with the cluster id and the confluent-kafka client after
            each client is built (a new client has, e.g., not run
            ``init_transactions`` yet); what it raises refuses the client.
        factory: builds the clients (default: the mounted one, else confluent-kafka's).
        on_reachable: ``on_reachable(cluster_id, False)`` when a client reports every
            broker of its cluster down (librdkafka's ``_ALL_BROKERS_DOWN``, seen by
            its ``error_cb``); the client then records every message (suspect).
        watch_brokers: also give ``on_reachable`` what librdkafka's statistics say of
            the brokers (``statistics.interval.ms`` as :func:`kbear._events.configure`
            combines it): a client that saw all brokers
            down and reconnected while idle is reachable again, not lost
            (``kbear.failover.enable``).
    """

    watching = watch_brokers and on_reachable is not None

    def prepare(cluster_id: str, conf: dict[str, Any]) -> tuple[dict[str, str], Rescue]:
        logical: dict[str, str] = {}
        rescue = Rescue()
        if on_delivery is not None:
            conf["on_delivery"] = delivery_callback(on_delivery, logical, rescue)
        app_error_cb = conf.get("error_cb")
        if callable(app_error_cb):  # (none: an oauth_cb's client is left as built, see _cluster_errors)
            conf["error_cb"] = _watching_errors(cluster_id, app_error_cb, rescue, on_reachable)
        if watching and on_reachable is not None:
            conf["stats_cb"] = watching_stats(cluster_id, conf.get("stats_cb"), on_reachable)
        return logical, rescue

    def entry(cluster_id: str, properties: Mapping[str, str], client: Any, prepared: Any) -> ClusterProducer:
        on_build(cluster_id, client)
        logical, rescue = prepared
        return ClusterProducer(cluster_id, properties, client, logical, rescue)

    return ClientRegistry(
        "producer", native, entry, prepare, factory, stats_interval_ms=STATS_INTERVAL_MS if watching else None
    )


def _watching_errors(
    cluster_id: str,
    error_cb: Callable[[Any], Any],
    rescue: Rescue,
    on_reachable: Callable[[str, bool], None] | None,
) -> Callable[[Any], Any]:
    """``error_cb`` after noting what an error says of the cluster's brokers."""

    def watch(err: Any) -> Any:
        if reachable_from_error(err.code()) is False:
            rescue.suspect(True)
            if on_reachable is not None:
                on_reachable(cluster_id, False)
        return error_cb(err)

    return watch


def produce_batch(
    producer: Any, route: Route, messages: list[dict[str, Any]], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> int:
    """``producer.produce_batch`` of ``messages`` to ``route``'s topic; for a remapped
    topic, delivery reports carry the logical name: the callbacks are wrapped on
    copies of the messages, then each copy's ``_error`` is copied back to the
    application's dict. Returns the number of messages queued."""
    if not route.remapped:
        return int(producer.produce_batch(route.topic, messages, *args, **kwargs))
    topic = route.requested_topic
    copies = [
        {**m, "callback": logical_callback(m["callback"], topic)} if m.get("callback") else dict(m)
        for m in messages
    ]
    args, kwargs = logical_callbacks(args, kwargs, 1, topic)
    queued = int(producer.produce_batch(route.topic, copies, *args, **kwargs))
    for original, copy in zip(messages, copies, strict=True):
        if "_error" in copy:
            original["_error"] = copy["_error"]
    return queued


#: The warning confluent-kafka's ``Producer.close()`` gives when the abort it tries first
#: (``rd_kafka_abort_transaction``, whatever the producer's state) meets an
#: ``init_transactions`` that timed out and that librdkafka still runs (``_CONFLICT``).
_ABORT_MET_INIT = r"Producer abort_transaction failed during close: Conflicting init_transactions"


def close_producers(producers: list[Any], timeout: float | None, init_unfinished: Sequence[Any] = ()) -> None:
    """Flush ``producers`` within ``timeout`` seconds together (None: infinite), purge
    what is left (its delivery callbacks report it failed), then close each.

    ``init_unfinished``: those of ``producers`` whose ``init_transactions`` timed out and
    was not seen to finish. No transaction can be open on them, so the abort their
    ``close()`` tries has nothing to abort: its ``_CONFLICT`` warning ("Producer
    abort_transaction failed during close: Conflicting init_transactions API call is
    already in progress") is not passed on; any other warning of theirs is.
    """
    deadline = Deadline(timeout)
    for producer in producers:
        producer.flush(deadline.as_arg())
    for producer in producers:
        if len(producer):
            producer.purge()
            producer.flush(0)
        if any(producer is p for p in init_unfinished):
            # (catch_warnings swaps the process's filters for the close's few milliseconds;
            # entered only in this state, never on a producer that ran its transactions)
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", _ABORT_MET_INIT, RuntimeWarning)
                producer.close()
        else:
            producer.close()
