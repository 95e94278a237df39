"""The per-cluster clients of a RoutedConsumer and the topic names on each.

:class:`ClusterClient` is one cluster's confluent-kafka ``Consumer`` with the
topics read there and the logical <-> physical names of remapped topics
(``use cluster c, topic t2``). :class:`ClusterRegistry` keeps one client per
cluster, which of them are read (``active``), and which were just unsubscribed
and are still polled until their revocation was served (``leaving``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from kbear import _events
from kbear._clients import Target, cluster_config, confluent_client, current_factory, renamed
from kbear._lost import STATS_INTERVAL_MS, watching_stats
from kbear._route import Route

#: application callbacks a background client must not fire (it commits and reads nothing)
_NOT_FOR_WATCHERS = frozenset({"on_commit", "stats_cb"})


class ClusterClient:
    """One cluster's confluent-kafka Consumer and what this RoutedConsumer reads there.

    Attributes:
        topics: physical topics subscribed, in subscription order.
        logical: physical -> logical name of remapped topics subscribed here.
        former: physical -> logical name of remapped topics no longer subscribed
            here: their revocation (on_revoke, assignment()) and leftover
            messages keep the logical name.
    """

    __slots__ = ("cluster_id", "consumer", "former", "logical", "properties", "topics")

    def __init__(self, cluster_id: str, properties: Mapping[str, str], consumer: Any) -> None:
        self.cluster_id = cluster_id
        self.properties = dict(properties)
        self.consumer = consumer
        self.topics: list[str] = []
        self.logical: dict[str, str] = {}
        self.former: dict[str, str] = {}

    @property
    def renames(self) -> bool:
        """Whether names read here may need translating (a remapped topic, now or before)."""
        return bool(self.logical or self.former)

    def attach(self, topic: str, route: Route) -> None:
        """Read logical ``topic`` here, as ``route.topic``."""
        if route.topic not in self.topics:
            self.topics.append(route.topic)
        self.former.pop(route.topic, None)
        if route.remapped:
            self.logical[route.topic] = topic

    def detach(self, topic: str, route: Route) -> None:
        """Stop reading logical ``topic`` (``route.topic`` here); a remapped name is
        remembered in ``former`` for its revocation and leftover messages."""
        if route.topic in self.topics:
            self.topics.remove(route.topic)
        name = self.logical.pop(route.topic, None)
        if name is not None:
            self.former[route.topic] = name

    def forget_topics(self) -> None:
        """Drop every subscribed topic, remembering the remapped names in ``former``."""
        self.topics = []
        self.former.update(self.logical)
        self.logical.clear()

    def take_names(self, old: ClusterClient) -> None:
        """Read the same topics under the same names as ``old`` (a rebuilt client)."""
        self.topics = list(old.topics)
        self.logical = dict(old.logical)
        self.former = dict(old.former)

    def logical_name(self, physical: str) -> str:
        """The application's name for ``physical`` read on this cluster."""
        name = self.logical.get(physical)
        if name is None and self.former:
            name = self.former.get(physical)
        return physical if name is None else name

    def to_logical(self, parts: list[TopicPartition]) -> list[TopicPartition]:
        """``parts`` with remapped physical topic names replaced by logical ones.

        TopicPartition is immutable: remapped entries are new objects (their
        ``error`` is not carried over; confluent-kafka offers no way to set it).
        """
        names = {**self.former, **self.logical} if self.former else self.logical
        if not names:
            return parts
        return [tp if (name := names.get(tp.topic)) is None else renamed(tp, name) for tp in parts]

    def to_physical(self, parts: list[TopicPartition]) -> list[TopicPartition]:
        """``parts`` (logical names) as this cluster's TopicPartitions, for a
        rebalance callback's calls: a revoked topic may have moved away already."""
        # (a name remapped here now wins over a former one)
        physical = {logical: phys for phys, logical in [*self.former.items(), *self.logical.items()]}
        if not physical:
            return parts
        return [tp if (name := physical.get(tp.topic)) is None else renamed(tp, name) for tp in parts]


class ClusterRegistry:
    """One :class:`ClusterClient` per cluster, built on first use.

    Args:
        native: the application's confluent-kafka configuration (no kbear keys);
            each cluster's properties are merged over it (the cluster's win).

    Clients are built by the client factory mounted when the registry is made
    (:func:`kbear._clients.mount`), else as ``confluent_kafka.Consumer``.
    """

    def __init__(self, native: dict[str, Any]) -> None:
        self.native = native
        #: called as ``hook(cluster_id, err, partitions)`` from each member client's
        #: ``on_commit`` (before the application's), when set
        self.commit_hook: Callable[[str, Any, list[TopicPartition]], None] | None = None
        #: called as ``hook(cluster_id, err)`` from each member client's ``error_cb``
        #: (before the application's, or kbear's logging of it), when set
        self.error_hook: Callable[[str, KafkaError], None] | None = None
        #: called as ``hook(cluster_id, client)`` with each member client just built
        #: (the ``kbear.cluster.id`` check); what it raises refuses the client
        self.built_hook: Callable[[str, Any], None] | None = None
        #: called as ``hook(cluster_id, reachable)`` with what each member client's
        #: statistics say of its brokers (``statistics.interval.ms`` as
        #: :func:`kbear._events.configure` combines it), when set
        self.stats_hook: Callable[[str, bool], None] | None = None
        self._mounted = current_factory()
        self.clients: dict[str, ClusterClient] = {}
        # Both lists are replaced, never changed in place: a poll loop in another
        # thread keeps iterating the list it read.
        #: clients read (subscribed or assigned): polled
        self.active: list[ClusterClient] = []
        #: clients just unsubscribed: polled (timeout 0) until their revocation was
        #: served, so on_revoke runs and assignment() empties, as with confluent-kafka
        self.leaving: list[ClusterClient] = []
        # cluster id -> (properties, client) for background broker calls; replaced ones
        # are kept until close (a background call may still use them)
        self._watchers: dict[str, tuple[dict[str, str], Any]] = {}
        self._old_watchers: list[Any] = []
        self._watcher_lock = threading.Lock()  # the polling thread and the background one

    def _build(self, cluster_id: str, conf: dict[str, Any]) -> Any:
        if self._mounted is confluent_client:  # kbear's metrics may count what it hands out
            return _events.build("consumer", cluster_id, conf, Consumer)
        return self._mounted("consumer", cluster_id, conf)

    def __iter__(self) -> Iterator[ClusterClient]:
        return iter(list(self.clients.values()))

    def get(self, cluster_id: str) -> ClusterClient | None:
        """The client of ``cluster_id``, if one was built."""
        return self.clients.get(cluster_id)

    def client(self, target: Target) -> tuple[ClusterClient, ClusterClient | None]:
        """The client for ``target``'s cluster, built if needed, and the client it
        replaced when the cluster's properties changed (the caller hands its topics
        over and closes it), else None."""
        current = self.clients.get(target.cluster_id)
        if current is not None and current.properties == dict(target.properties):
            return current, None
        conf = cluster_config(self.native, target.properties)
        watching = STATS_INTERVAL_MS if self.stats_hook is not None else None
        _events.configure("consumer", target.cluster_id, conf, watching)
        # (an oauth_cb's client without an error_cb is left as built: see kbear._cluster_errors)
        if self.error_hook is not None and not ("oauth_cb" in conf and conf.get("error_cb") is None):
            conf["error_cb"] = _chained(self.error_hook, target.cluster_id, conf.get("error_cb"))
        if self.stats_hook is not None:
            conf["stats_cb"] = watching_stats(target.cluster_id, conf.get("stats_cb"), self.stats_hook)
        if self.commit_hook is not None:
            conf["on_commit"] = _chained(self.commit_hook, target.cluster_id, conf.get("on_commit"))
        built = self._build(target.cluster_id, conf)
        if self.built_hook is not None:
            self.built_hook(target.cluster_id, built)  # what it raises refuses the client
        entry = ClusterClient(target.cluster_id, target.properties, built)
        self.clients[target.cluster_id] = entry
        return entry, current

    def activate(self, entry: ClusterClient) -> None:
        """``entry`` is read (subscribed or assigned)."""
        self._place(entry, active=True, leaving=False)

    def leave(self, entry: ClusterClient) -> None:
        """``entry`` was unsubscribed: polled until its revocation was served."""
        self._place(entry, active=False, leaving=True)

    def deactivate(self, entry: ClusterClient) -> None:
        """``entry`` is neither read nor leaving (unassigned, or closed)."""
        self._place(entry, active=False, leaving=False)

    def _place(self, entry: ClusterClient, *, active: bool, leaving: bool) -> None:
        """``entry`` in ``active`` and ``leaving`` or not, each list replaced when it changes."""
        if (entry in self.active) != active:
            self.active = [*self.active, entry] if active else [e for e in self.active if e is not entry]
        if (entry in self.leaving) != leaving:
            self.leaving = [*self.leaving, entry] if leaving else [e for e in self.leaving if e is not entry]

    def watcher(self, target: Target) -> Any:
        """A client of ``target``'s cluster for broker calls made in the background
        (metadata, watermarks, the group's committed offsets): never the member's own
        client, since confluent-kafka serializes the calls on one client, so a slow
        call there would hold up ``poll()``. It has the group's ``group.id`` but never
        subscribes (it is no group member) and commits nothing. Thread-safe: the
        polling thread and the background thread ask for them."""
        props = dict(target.properties)
        with self._watcher_lock:
            current = self._watchers.get(target.cluster_id)
            if current is not None and current[0] == props:
                return current[1]
            if current is not None:
                self._old_watchers.append(current[1])
            conf = {k: v for k, v in cluster_config(self.native, props).items() if k not in _NOT_FOR_WATCHERS}
            conf.update({"enable.auto.commit": False, "enable.auto.offset.store": False})
            client = self._build(target.cluster_id, conf)
            self._watchers[target.cluster_id] = (props, client)
            return client

    def clear(self) -> list[tuple[str | None, Any]]:
        """Forget every client (closing): returns the confluent-kafka clients to close
        with their cluster ids (None: a background client replaced since), group
        members first, then the background ones."""
        clients: list[tuple[str | None, Any]] = [(c, e.consumer) for c, e in self.clients.items()]
        clients += [(c, client) for c, (_, client) in self._watchers.items()]
        clients += [(None, client) for client in self._old_watchers]
        self.clients = {}
        self._watchers = {}
        self._old_watchers = []
        self.active = []
        self.leaving = []
        return clients


def _chained(
    hook: Callable[..., None], cluster_id: str, then: Callable[..., None] | None
) -> Callable[..., None]:
    """A callback of a member client of ``cluster_id`` (``on_commit``, ``error_cb``):
    kbear's ``hook(cluster_id, *args)``, then the callback it wraps (the
    application's, or kbear's logging of an error), unchanged."""

    def callback(*args: Any) -> None:
        hook(cluster_id, *args)
        if then is not None:
            then(*args)

    return callback
