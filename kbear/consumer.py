"""RoutedConsumer: a drop-in ``confluent_kafka.Consumer`` whose topics are routed by CRRL."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from kbear._clients import (
    Deadline,
    cluster_config,
    cluster_route,
    notify_route_change,
    open_router,
    renamed,
    split_config,
)
from kbear.config import KBearConfig, RuleKind
from kbear.router import Client, NoRouteError, Route, Router

__all__ = ["RoutedConsumer"]

log = logging.getLogger("kbear.consumer")

RebalanceCallback = Callable[[Any, list[TopicPartition]], None]
RouteChangeCallback = Callable[[Route, Route | None], None]

# How long one blocking poll of one cluster's client may take while several are
# polled in turn (seconds): the worst added latency of a multi-cluster poll.
_POLL_SLICE_S = 0.01
# How long a pattern subscription waits for one cluster's topic list (seconds).
_PATTERN_METADATA_TIMEOUT_S = 5.0
# How often a draining topic's progress is checked (seconds).
_DRAIN_CHECK_S = 0.1
# While a member waits for the rest of its group to finish a drain, the group's
# committed offsets (a synchronous commit and a committed() round trip inside
# poll()) are checked at most this often.
_GROUP_CHECK_S = 0.5


def _next_offset(message: Any) -> TopicPartition:
    """The TopicPartition after ``message`` (its offset + 1), keeping its leader epoch."""
    # TopicPartition takes neither metadata=None nor leader_epoch=None.
    epoch = message.leader_epoch()
    extra: dict[str, Any] = {} if epoch is None else {"leader_epoch": epoch}
    return TopicPartition(
        str(message.topic()), int(message.partition() or 0), int(message.offset() or 0) + 1, **extra
    )


def _same_route(a: Route | None, b: Route | None) -> bool:
    """Whether two routes lead to the same topic on the same cluster, same client settings."""
    if a is None or b is None:
        return a is b
    return a.cluster_id == b.cluster_id and a.topic == b.topic and dict(a.properties) == dict(b.properties)


class _ClusterConsumer:
    """The confluent-kafka Consumer of one cluster and what it is subscribed to."""

    __slots__ = ("cluster_id", "consumer", "former", "logical", "physical", "properties", "topics")

    def __init__(self, cluster_id: str, properties: Mapping[str, str], consumer: Consumer) -> None:
        self.cluster_id = cluster_id
        self.properties = dict(properties)
        self.consumer = consumer
        self.topics: list[str] = []  # physical topics subscribed, in subscription order
        self.logical: dict[str, str] = {}  # physical -> logical, remapped topics only
        self.physical: dict[str, str] = {}  # logical -> physical, remapped topics only
        # physical -> logical of remapped topics no longer subscribed here: their
        # revocation (on_revoke, assignment()) and leftover messages keep the logical name
        self.former: dict[str, str] = {}

    def forget_topics(self) -> None:
        """Drop every subscribed topic, remembering the remapped names in ``former``."""
        self.topics = []
        self.former.update(self.logical)
        self.logical.clear()
        self.physical.clear()


@dataclass
class _Drain:
    """A topic moving from ``old`` to ``new``, still read on the old cluster."""

    old: Route
    new: Route | None
    started: float
    last_activity: float
    # partition -> (low, high) watermarks seen on old
    marks: dict[int, tuple[int, int]] = field(default_factory=dict)
    # every partition of the topic on old (the group's progress is checked on all)
    partitions: list[int] | None = None
    # routes the topic took while this drain ran: each is read (drained) in turn
    then: list[Route | None] = field(default_factory=list)
    # when the group's committed offsets may be checked next (monotonic seconds)
    next_group_check: float = 0.0


class RoutedConsumer:
    """A ``confluent_kafka.Consumer`` reading each topic from the cluster its route names.

    Args:
        config: a confluent-kafka (librdkafka) consumer configuration with
            ``group.id`` and without ``bootstrap.servers`` (the route supplies
            it), plus optional kbear keys, removed before the configuration
            reaches confluent-kafka:

            - ``kbear.config``: configuration directory (used when ``router`` is None);
            - ``kbear.client.id``, ``kbear.client.meta.<key>``: the :class:`~kbear.Client`;
            - ``kbear.reload.interval.ms``: watch interval in ms (default 10000, 0 disables);
            - ``kbear.switch.mode``: ``drain`` (default) or ``immediate``, see below;
            - ``kbear.switch.drain.idle.ms``: drain ends once the old cluster has
              been idle this long at its end offsets (default 2000 ms);
            - ``kbear.switch.drain.timeout.ms``: drain ends after this long in any
              case (default 30000 ms).
            - ``kbear.switch.start``: where a moved topic starts on the new cluster:
              ``committed`` (default; else ``auto.offset.reset``), ``earliest``,
              ``latest`` or ``timestamp``;
            - ``kbear.switch.timestamp.margin.ms``: with ``timestamp``, start this
              long before the earliest last-consumed timestamp (default 0 ms).
        router: a :class:`~kbear.Router` to share; the consumer does not close it.
        client: who consumes (``client.*`` factors); or use ``kbear.client.*`` keys.
        **kwargs: more configuration, as confluent-kafka accepts (e.g. ``logger=``).

    Raises:
        ValueError: ``bootstrap.servers`` is set, ``group.id`` is missing, a
            kbear key is unknown or bad, or neither ``router`` nor
            ``kbear.config`` is given.
        ConfigError: the configuration directory is invalid.

    Routes are consumer lookups (group, topic, client) made at :meth:`subscribe`.
    There is one confluent-kafka Consumer per cluster, all in the same
    ``group.id``, with the cluster's properties merged over ``config``. Messages
    are confluent-kafka ``Message`` objects; for a remapped topic
    (``use cluster c, topic t2``) ``msg.topic()`` is the name the application
    subscribed to, and so are the topics of every ``TopicPartition`` taken or
    returned. Rebalance callbacks receive this RoutedConsumer.

    A route change (configuration reload) is applied in the caller's thread at
    the next call. In ``drain`` mode the topic keeps being read on the old
    cluster until this consumer has reached the end offsets observed after the
    change and the old cluster stayed idle ``kbear.switch.drain.idle.ms``; then
    the consumed offsets are committed there, the topic is dropped there and
    subscribed on the new cluster. ``immediate`` commits and switches at once:
    messages produced to the old cluster and not yet read are left behind.
    """

    def __init__(
        self,
        config: Mapping[str, Any] | None = None,
        *,
        router: Router | None = None,
        client: Client | None = None,
        **kwargs: Any,
    ) -> None:
        native, self._settings = split_config(config, kwargs, client, "RoutedConsumer")
        group = native.get("group.id")
        if not group:
            raise ValueError(
                "RoutedConsumer: 'group.id' is required: consumer routes are looked up per "
                "consumer group (CRRL consumerGroup.groupName)"
            )
        self._group = str(group)
        # Where a partition without a committed offset starts (librdkafka default: the end).
        reset = str(native.get("auto.offset.reset", "latest")).lower()
        self._reset_to_end = reset in ("latest", "largest", "end")
        self._native = native
        # Checked before the router (and its watcher thread) exists: nothing to clean up.
        try:
            refresh_ms = int(native.get("topic.metadata.refresh.interval.ms", 300_000))
        except (TypeError, ValueError):
            raise ValueError(
                "RoutedConsumer: topic.metadata.refresh.interval.ms must be an integer number of ms, "
                f"got {native['topic.metadata.refresh.interval.ms']!r}"
            ) from None
        self._router, self._owns_router = open_router(router, self._settings, "RoutedConsumer")
        self._client = self._settings.client
        self._clusters: dict[str, _ClusterConsumer] = {}
        self._active: list[_ClusterConsumer] = []  # clusters with a subscription, polled
        # Clusters just unsubscribed: still polled (timeout 0) until their revocation has
        # been served, so on_revoke runs and assignment() empties, as with confluent-kafka.
        self._leaving: list[_ClusterConsumer] = []
        self._routes: dict[str, Route] = {}  # logical topic -> route in use
        self._subscription: list[str] = []
        self._callbacks: dict[str, RebalanceCallback] = {}
        self._draining: dict[str, _Drain] = {}
        self._next_drain_check = 0.0
        self._stale_commits: set[str] = set()
        self._route_listeners: list[RouteChangeCallback] = []
        # regular-expression subscriptions: patterns, names given as names, next refresh
        self._patterns: list[re.Pattern[str]] = []
        self._names: list[str] = []
        self._pattern_topics: dict[str, set[str]] = {}  # cluster id -> topics it listed last
        self._refresh_s = refresh_ms / 1000.0
        self._next_refresh = 0.0
        # the cluster whose rebalance callback is running, and whether it assigned
        self._rebalancing: _ClusterConsumer | None = None
        self._assigned_in_callback = False
        self._incremental = str(
            native.get("group.protocol", "classic")
        ) == "consumer" or "cooperative" in str(native.get("partition.assignment.strategy", ""))
        # kbear.switch.start: (cluster id, physical topic) -> start offset rule for the
        # first assignment after a move; last consumed timestamps for "timestamp"
        self._start_at: dict[tuple[str, str], int] = {}
        self._track_timestamps = self._settings.switch_start == "timestamp"
        self._last_timestamps: dict[tuple[str, str, int], int] = {}
        self._rr = 0
        self._pending = False
        self._closed = False
        self._router.subscribe(self._on_config_change)

    # ------------------------------------------------------------------ routing

    @property
    def router(self) -> Router:
        """The router in use."""
        return self._router

    @property
    def client(self) -> Client:
        """The client the routes are looked up for."""
        return self._client

    def routes(self) -> dict[str, Route]:
        """Logical topic -> route in use for the current subscription."""
        return dict(self._routes)

    def on_route_change(self, callback: RouteChangeCallback) -> None:
        """Call ``callback(old_route, new_route)`` in the caller's thread when a
        subscribed topic has switched clusters (``new_route`` None: no route any more).
        A hook that raises is logged on ``kbear.consumer`` and the switch stands."""
        self._route_listeners.append(callback)

    def _cluster(self, route: Route) -> _ClusterConsumer:
        current = self._clusters.get(route.cluster_id)
        if current is not None and current.properties == dict(route.properties):
            return current
        conf = cluster_config(self._native, route.properties)
        entry = _ClusterConsumer(route.cluster_id, route.properties, Consumer(conf))
        self._clusters[route.cluster_id] = entry
        if current is not None:
            self._replace_client(current, entry)
        return entry

    def _replace_client(self, old: _ClusterConsumer, new: _ClusterConsumer) -> None:
        """The cluster's client properties changed (a rotated credential, a tuned
        setting): the same topics of the same cluster, read on by a new client from
        where the old one left off (what it consumed is committed, then it closes).
        A subscription is made again; a manual assignment is carried over at the
        old client's positions (pauses are not)."""
        new.topics = list(old.topics)
        new.logical = dict(old.logical)
        new.physical = dict(old.physical)
        new.former = dict(old.former)
        was_active = old in self._active
        manual: list[TopicPartition] = []
        if not old.topics and was_active:
            assigned = old.consumer.assignment()
            manual = old.consumer.position(assigned) if assigned else []
        self._close_cluster(old)
        log.info("kbear: client of cluster %r rebuilt: its properties changed", new.cluster_id)
        if new.topics:
            self._resubscribe([new])
        elif manual:
            new.consumer.assign(manual)
            self._note_assign([new])

    def _close_cluster(self, entry: _ClusterConsumer) -> None:
        self._commit_consumed(entry)
        entry.consumer.close()
        if entry in self._active:
            self._active.remove(entry)
        if entry in self._leaving:
            self._leaving.remove(entry)

    def _route(self, topic: str) -> Route:
        route = self._routes.get(topic)
        if route is None:
            route = self._router.route_consumer(topic, self._group, self._client)
        return route

    def _on_config_change(self, old: KBearConfig, new: KBearConfig) -> None:
        # Runs in the reloading thread: only flag (and unpin, so the next call takes
        # the slow path); the caller's thread applies.
        self._pending = True
        self.__dict__.pop("poll", None)
        self.__dict__.pop("consume", None)

    def _refresh_pin(self) -> None:
        """Bind poll() and consume() (instance attributes over the class methods) to the
        cheapest correct code for the current state: with one cluster and nothing for
        kbear to do per message (no remap, drain, pattern, pending reload...), that
        cluster's client's own bound methods; with several such clusters, closures that
        take turns over them; otherwise the class methods."""
        d = self.__dict__
        active = self._active
        if (
            not active
            or self._closed
            or self._pending
            or self._draining
            or self._leaving
            or self._patterns
            or self._stale_commits
            or self._track_timestamps
            or any(entry.logical or entry.former for entry in active)
        ):
            d.pop("poll", None)
            d.pop("consume", None)
            return
        if len(active) == 1:
            d["poll"] = active[0].consumer.poll
            d["consume"] = active[0].consumer.consume
        else:
            d["poll"], d["consume"] = self._turn_taking([entry.consumer for entry in active])
        if self._pending:  # a reload landed meanwhile (watcher thread)
            d.pop("poll", None)
            d.pop("consume", None)

    def _turn_taking(self, consumers: list[Any]) -> tuple[Callable[..., Any], Callable[..., Any]]:
        """poll() and consume() over several clusters' clients with nothing to translate:
        each call first asks the next client in turn without waiting, and only when it
        has nothing falls back to the class method (every client, then the wait)."""
        polls = [c.poll for c in consumers]
        consumes = [c.consume for c in consumers]
        n = len(consumers)
        turn = [0]
        slow_poll, slow_consume = RoutedConsumer.poll, RoutedConsumer.consume

        def poll(timeout: float | None = None) -> Any:
            i = turn[0] = (turn[0] + 1) % n
            msg = polls[i](0)
            if msg is not None:
                return msg
            return slow_poll(self, timeout)

        def consume(num_messages: int = 1, timeout: float | None = -1) -> list[Any]:
            i = turn[0] = (turn[0] + 1) % n
            if 1 <= num_messages <= 1_000_000:
                msgs: list[Any] = consumes[i](num_messages, 0)
                if msgs:
                    return msgs
            return slow_consume(self, num_messages, timeout)

        poll.__doc__ = RoutedConsumer.poll.__doc__
        consume.__doc__ = RoutedConsumer.consume.__doc__
        return poll, consume

    # ------------------------------------------------------------------ subscription

    def subscribe(
        self,
        topics: Sequence[str],
        on_assign: RebalanceCallback | None = None,
        on_revoke: RebalanceCallback | None = None,
        on_lost: RebalanceCallback | None = None,
    ) -> None:
        """Subscribe to ``topics``, each on the cluster of its consumer route.

        Args:
            topics: topic names (logical), or regular expressions starting with
                ``^`` (as librdkafka), matched against the topics of every cluster
                of the configuration and the topic ids of topics.yaml and the
                rules; each match is routed (unroutable matches and matches whose
                routed topic does not exist are left out). Matches are refreshed
                every ``topic.metadata.refresh.interval.ms`` (default 300000 ms)
                and after each reload.
            on_assign, on_revoke, on_lost: ``callback(consumer, partitions)``, as
                confluent-kafka; ``consumer`` is this RoutedConsumer and the
                partitions carry logical topic names.

        Raises:
            NoRouteError: some topics have no route (all of them are named).
            KafkaException: an invalid regular expression (``_INVALID_ARG``), or
                confluent-kafka refused the subscription.
        """
        self._check_open()
        topics = list(topics)
        patterns = []
        for t in topics:
            if t.startswith("^"):
                try:
                    patterns.append(re.compile(t))
                except re.error as exc:
                    raise KafkaException(
                        KafkaError(KafkaError._INVALID_ARG, f"invalid topic pattern {t!r}: {exc}")
                    ) from None
        self._patterns = patterns
        self._names = [t for t in topics if not t.startswith("^")]
        self._callbacks = {
            name: cb
            for name, cb in (
                ("on_assign", on_assign),
                ("on_revoke", on_revoke),
                ("on_lost", on_lost),
            )
            if cb is not None
        }
        self._pending = False
        self._draining.clear()
        self._stale_commits.clear()
        self._start_at.clear()
        self._set_subscription(self._names + self._match_patterns(), strict=True)

    def _set_subscription(self, topics: list[str], *, strict: bool) -> None:
        """Route ``topics`` and subscribe each cluster's client to its share.

        With ``strict``, every unroutable topic is named in one NoRouteError and
        nothing changes; otherwise unroutable topics are left out (pattern matches).
        """
        routes: dict[str, Route] = {}
        failures: list[str] = []
        for topic in topics:
            try:
                routes[topic] = self._router.route_consumer(topic, self._group, self._client)
            except NoRouteError:
                failures.append(topic)
        if failures and strict:
            names = ", ".join(f"'{t}'" for t in failures)
            err = NoRouteError(self._client, failures[0], self._group)
            if len(failures) > 1:
                err.args = (
                    f"no route for topics {names}, consumer group '{self._group}', client {self._client!r}",
                )
            raise err
        self._subscription = [t for t in topics if t in routes]
        self._routes = routes
        for entry in self._clusters.values():
            entry.forget_topics()
        for topic, route in routes.items():
            self._attach(topic, route)
        self._resubscribe(self._clusters.values())

    def _match_patterns(self) -> list[str]:
        """Topics matching the regular-expression subscriptions, on the clusters the
        configuration can route to, whose route leads to a topic that exists there.

        A cluster that does not answer its metadata request (within
        ``_PATTERN_METADATA_TIMEOUT_S``) is logged and counted with the topics it
        listed last time (none before its first answer): one cluster down does not
        stop the others' topics from being read."""
        if not self._patterns:
            return []
        self._next_refresh = time.monotonic() + self._refresh_s
        config = self._router.config
        logical_names = set(config.topics)
        for rule in config.rules:
            if rule.topic_id is not None and (rule.kind is RuleKind.TOPIC or rule.group_name == self._group):
                logical_names.add(rule.topic_id)
        existing: dict[str, set[str]] = {}
        for cluster_id in sorted({rule.statement.cluster for rule in config.rules}):
            probe = cluster_route(cluster_id, config.clusters[cluster_id])
            try:
                md = self._cluster(probe).consumer.list_topics(None, _PATTERN_METADATA_TIMEOUT_S)
            except KafkaException as exc:
                log.warning(
                    "kbear: cluster %r did not list its topics for the pattern subscription (%s); "
                    "using what it listed last",
                    cluster_id,
                    exc,
                )
                existing[cluster_id] = self._pattern_topics.get(cluster_id, set())
            else:
                existing[cluster_id] = {t for t in md.topics if not t.startswith("__")}
                self._pattern_topics[cluster_id] = existing[cluster_id]
            logical_names.update(existing[cluster_id])
        matched = []
        for name in sorted(logical_names):
            if name in self._names or not any(p.search(name) for p in self._patterns):
                continue
            try:
                route = self._router.route_consumer(name, self._group, self._client)
            except NoRouteError:
                continue
            if route.topic in existing.get(route.cluster_id, ()):
                matched.append(name)
        return matched

    def _refresh_patterns(self) -> None:
        topics = self._names + self._match_patterns()
        if set(topics) != set(self._subscription):
            log.info("kbear: pattern subscription now matches %s", topics)
            self._set_subscription(topics, strict=False)

    def _attach(self, topic: str, route: Route) -> _ClusterConsumer:
        entry = self._cluster(route)
        if route.topic not in entry.topics:
            entry.topics.append(route.topic)
        entry.former.pop(route.topic, None)
        if route.remapped:
            entry.logical[route.topic] = topic
            entry.physical[topic] = route.topic
        return entry

    def _detach(self, topic: str, route: Route) -> _ClusterConsumer | None:
        entry = self._clusters.get(route.cluster_id)
        if entry is None:
            return None
        if route.topic in entry.topics:
            entry.topics.remove(route.topic)
        name = entry.logical.pop(route.topic, None)
        if name is not None:
            entry.former[route.topic] = name
        entry.physical.pop(topic, None)
        return entry

    def _resubscribe(self, entries: Iterable[_ClusterConsumer]) -> None:
        for entry in list(entries):
            if entry.topics:
                entry.consumer.subscribe(list(entry.topics), **self._wrapped_callbacks(entry))
                if entry not in self._active:
                    self._active.append(entry)
                if entry in self._leaving:
                    self._leaving.remove(entry)
            elif entry in self._active:
                entry.consumer.unsubscribe()
                self._active.remove(entry)
                self._leaving.append(entry)
        self._refresh_pin()

    def _wrapped_callbacks(self, entry: _ClusterConsumer) -> dict[str, Callable[..., None]]:
        out: dict[str, Callable[..., None]] = {}
        for name in ("on_assign", "on_revoke", "on_lost"):
            user_cb = self._callbacks.get(name)
            if name == "on_assign" and (user_cb is not None or self._settings.switch_start != "committed"):
                out[name] = self._wrap_assign(entry, user_cb)
            elif user_cb is not None:
                out[name] = self._wrap_rebalance(entry, user_cb)
        return out

    def _wrap_rebalance(
        self, entry: _ClusterConsumer, user_cb: RebalanceCallback
    ) -> Callable[[Any, list[TopicPartition]], None]:
        def callback(_consumer: Any, partitions: list[TopicPartition]) -> None:
            outer, self._rebalancing = self._rebalancing, entry
            try:
                user_cb(self, self._to_logical(entry, partitions))
            finally:
                self._rebalancing = outer

        return callback

    def _wrap_assign(
        self, entry: _ClusterConsumer, user_cb: RebalanceCallback | None
    ) -> Callable[[Any, list[TopicPartition]], None]:
        def callback(_consumer: Any, partitions: list[TopicPartition]) -> None:
            outer, self._rebalancing = self._rebalancing, entry
            self._assigned_in_callback = False
            try:
                started = self._start_offsets(entry, partitions)
                if user_cb is not None:
                    user_cb(self, self._to_logical(entry, started))
                if started is not partitions and not self._assigned_in_callback:
                    if self._incremental:
                        entry.consumer.incremental_assign(started)
                    else:
                        entry.consumer.assign(started)
            finally:
                self._rebalancing = outer

        return callback

    def _start_offsets(
        self, entry: _ClusterConsumer, partitions: list[TopicPartition]
    ) -> list[TopicPartition]:
        """``partitions`` with the start offsets of ``kbear.switch.start`` applied to the
        partitions of topics just moved to this cluster (their first assignment only)."""
        if not self._start_at:
            return partitions
        rules: dict[str, int] = {}
        for topic in {tp.topic for tp in partitions}:
            rule = self._start_at.pop((entry.cluster_id, topic), None)
            if rule is not None:
                rules[topic] = rule
        if not rules:
            return partitions
        out = [
            tp if tp.topic not in rules else TopicPartition(tp.topic, tp.partition, rules[tp.topic])
            for tp in partitions
        ]
        by_time = [tp for tp in out if tp.topic in rules and tp.offset >= 0]
        if by_time:
            found = {
                (tp.topic, tp.partition): tp.offset
                for tp in entry.consumer.offsets_for_times(by_time, timeout=10.0)
            }
            out = [
                tp
                if (tp.topic, tp.partition) not in found
                else TopicPartition(
                    tp.topic,
                    tp.partition,
                    o if (o := found[(tp.topic, tp.partition)]) >= 0 else OFFSET_END,
                )
                for tp in out
            ]
        log.info(
            "kbear: kbear.switch.start=%s on cluster %r: %s",
            self._settings.switch_start,
            entry.cluster_id,
            out,
        )
        return out

    def unsubscribe(self) -> None:
        """Drop the subscription on every cluster (as ``Consumer.unsubscribe``)."""
        self._check_open()
        for entry in self._active:
            entry.consumer.unsubscribe()
            entry.forget_topics()
            if entry not in self._leaving:
                self._leaving.append(entry)
        self._active = []
        self._subscription = []
        self._routes = {}
        self._draining.clear()
        self._stale_commits.clear()
        self._refresh_pin()

    # ------------------------------------------------------------------ route changes

    def _apply_changes(self) -> None:
        self._pending = False
        now = time.monotonic()
        # A cluster whose client properties changed (a rotated credential, a tuned
        # setting): its client is rebuilt once, keeping its topics or its manual
        # assignment (see _replace_client); the same log needs no drain.
        clusters = self._router.config.clusters
        for entry in list(self._clusters.values()):
            cluster = clusters.get(entry.cluster_id)
            if cluster is not None and dict(cluster.meta) != entry.properties:
                self._cluster(cluster_route(entry.cluster_id, cluster))
        for topic in list(self._subscription):  # _switch may remove topics
            old = self._routes.get(topic)
            if old is None:
                continue
            try:
                new: Route | None = self._router.route_consumer(topic, self._group, self._client)
            except NoRouteError as exc:
                log.error("kbear: topic %r lost its route after reload: %s", topic, exc)
                new = None
            drain = self._draining.get(topic)
            if drain is None and _same_route(old, new):
                continue
            if (
                drain is None
                and new is not None
                and (new.cluster_id, new.topic) == (old.cluster_id, old.topic)
            ):
                # Same topic on the same cluster, other client properties: its
                # client was rebuilt above, nothing to drain.
                self._routes[topic] = new
                notify_route_change(self._route_listeners, old, new, log)
                continue
            if drain is not None:
                # Moved again before the drain ended: messages may have been produced
                # to drain.new meanwhile, so the topic still goes there first, and is
                # drained there before it follows the newer route.
                last = drain.then[-1] if drain.then else drain.new
                if not _same_route(last, new):
                    drain.then.append(new)
            elif self._settings.switch_mode == "immediate":
                self._switch(topic, old, new)
            else:
                log.info("kbear: draining topic %r on cluster %r before the move", topic, old.cluster_id)
                self._draining[topic] = _Drain(old, new, now, now)
        self._next_drain_check = 0.0
        self._refresh_pin()

    def _check_drains(self) -> None:
        now = time.monotonic()
        if now < self._next_drain_check:
            return
        self._next_drain_check = now + _DRAIN_CHECK_S
        for topic, drain in list(self._draining.items()):
            if self._drained(drain, now):
                del self._draining[topic]
                self._switch(topic, drain.old, drain.new)
                if drain.then and drain.new is not None:
                    log.info(
                        "kbear: draining topic %r on cluster %r before the next move",
                        topic,
                        drain.new.cluster_id,
                    )
                    self._draining[topic] = _Drain(drain.new, drain.then[0], now, now, then=drain.then[1:])

    def _drained(self, drain: _Drain, now: float) -> bool:
        if now - drain.started >= self._settings.drain_timeout_ms / 1000.0:
            log.warning(
                "kbear: kbear.switch.drain.timeout.ms reached for topic %r on cluster %r; "
                "switching with what was read",
                drain.old.requested_topic,
                drain.old.cluster_id,
            )
            return True
        idle = now - drain.last_activity >= self._settings.drain_idle_ms / 1000.0
        if not idle:
            return False
        entry = self._clusters.get(drain.old.cluster_id)
        if entry is None:
            return True
        parts = [tp for tp in entry.consumer.assignment() if tp.topic == drain.old.topic]
        if not parts:
            return self._group_drained(entry, drain)
        for tp in parts:
            if tp.partition not in drain.marks:
                drain.marks[tp.partition] = entry.consumer.get_watermark_offsets(tp, timeout=5.0)
        positions = entry.consumer.position(parts)
        # A partition this consumer has not returned a message from has no position
        # (OFFSET_INVALID): it is drained when there is nothing to read from where the
        # consumer starts (its committed offset, else the auto.offset.reset end).
        unread = [TopicPartition(tp.topic, tp.partition) for tp in positions if tp.offset < 0]
        committed = (
            {tp.partition: tp.offset for tp in entry.consumer.committed(unread, timeout=5.0)}
            if unread
            else {}
        )
        for pos in positions:
            low, high = drain.marks[pos.partition]
            if pos.offset >= 0:
                start = pos.offset
            elif committed.get(pos.partition, -1) >= 0:
                start = committed[pos.partition]
            elif self._reset_to_end:
                start = high
            else:
                start = low
            if start < high:
                return False
        return self._group_drained(entry, drain)

    def _group_drained(self, entry: _ClusterConsumer, drain: _Drain) -> bool:
        """Whether the group has consumed the topic on the old cluster to its end
        offsets: this member commits what it consumed, then every partition of the
        topic (other members' too) must be committed at its end. So no member reads
        the topic on the new cluster before the old cluster's messages were all
        returned to some member (per-key order across the group)."""
        now = time.monotonic()
        if now < drain.next_group_check:
            return False
        drain.next_group_check = now + _GROUP_CHECK_S
        topic = drain.old.topic
        if drain.partitions is None:
            md = entry.consumer.list_topics(topic, 5.0).topics.get(topic)
            drain.partitions = sorted(md.partitions) if md is not None and md.error is None else []
        parts = [TopicPartition(topic, p) for p in drain.partitions]
        for tp in parts:
            if tp.partition not in drain.marks:
                drain.marks[tp.partition] = entry.consumer.get_watermark_offsets(tp, timeout=5.0)
        self._commit_consumed(entry)
        for tp in entry.consumer.committed(parts, timeout=5.0):
            low, high = drain.marks[tp.partition]
            start = tp.offset if tp.offset >= 0 else (high if self._reset_to_end else low)
            if start < high:
                return False
        return True

    def _switch(self, topic: str, old: Route, new: Route | None) -> None:
        old_entry = self._detach(topic, old)
        if old_entry is not None:
            self._commit_consumed(old_entry)
            self._resubscribe([old_entry])
        if new is None:
            self._subscription.remove(topic)
            del self._routes[topic]
        else:
            self._routes[topic] = new
            self._plan_start(topic, old, new)
            self._resubscribe([self._attach(topic, new)])
            self._stale_commits.add(topic)
        self._refresh_pin()
        log.info("kbear: topic %r switched from %r to %r", topic, old, new)
        notify_route_change(self._route_listeners, old, new, log)

    def _plan_start(self, topic: str, old: Route, new: Route) -> None:
        """Where the moved topic starts on the new cluster (``kbear.switch.start``)."""
        start = self._settings.switch_start
        key = (new.cluster_id, new.topic)
        if start == "earliest":
            self._start_at[key] = OFFSET_BEGINNING
        elif start == "latest":
            self._start_at[key] = OFFSET_END
        elif start == "timestamp":
            seen = [
                ts
                for (cluster_id, name, _), ts in self._last_timestamps.items()
                if cluster_id == old.cluster_id and name == topic
            ]
            self._last_timestamps = {
                k: v
                for k, v in self._last_timestamps.items()
                if not (k[0] == old.cluster_id and k[1] == topic)
            }
            if seen:
                self._start_at[key] = max(0, min(seen) - self._settings.timestamp_margin_ms)
            else:
                log.info(
                    "kbear: nothing consumed of %r on %r: starting from committed offsets",
                    topic,
                    old.cluster_id,
                )

    def _commit_consumed(self, entry: _ClusterConsumer) -> None:
        """Commit the stored offsets (what was consumed) of one cluster's client."""
        try:
            entry.consumer.commit(asynchronous=False)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError._NO_OFFSET:
                log.error("kbear: commit on cluster %r failed at route switch: %s", entry.cluster_id, exc)

    # ------------------------------------------------------------------ messages

    def _before_call(self) -> None:
        if self._pending:
            self._apply_changes()
            self._next_refresh = 0.0
        if self._draining:
            self._check_drains()
        elif self._patterns and time.monotonic() >= self._next_refresh:
            self._refresh_patterns()

    def _out(self, entry: _ClusterConsumer, msg: Any) -> Any:
        if entry.logical or entry.former:
            physical = msg.topic()
            name = entry.logical.get(physical)
            if name is None and entry.former:
                name = entry.former.get(physical)
            if name is not None:
                msg.set_topic(name)
        if self._track_timestamps and msg.error() is None:
            self._last_timestamps[(entry.cluster_id, msg.topic(), msg.partition())] = msg.timestamp()[1]
        if self._draining or self._stale_commits:
            topic = msg.topic()
            drain = self._draining.get(topic)
            if drain is not None and drain.old.cluster_id == entry.cluster_id:
                drain.last_activity = time.monotonic()
            elif topic in self._stale_commits and msg.error() is None:
                route = self._routes.get(topic)
                # only a message from the new cluster ends the stale period (not a
                # leftover of the old cluster's client, still polled while it leaves)
                if route is not None and route.cluster_id == entry.cluster_id:
                    self._stale_commits.discard(topic)
                    self._refresh_pin()
        return msg

    def poll(self, timeout: float | None = None) -> Message | None:
        """Consume one message, serving callbacks, from the clusters in turn.

        Args:
            timeout: maximum time to block in seconds (None or -1: infinite).

        Returns:
            A ``Message`` (check ``msg.error()`` as with confluent-kafka) or None on timeout.

        Raises:
            RuntimeError: the consumer is closed.
            KafkaException: errors of confluent-kafka.
        """
        if self._pending or self._draining or self._patterns:
            self._before_call()
        if self._leaving:
            leftover = self._serve_leaving()
            if leftover is not None:
                return leftover
        active = self._active
        if len(active) == 1 and not self._draining and not self._leaving:
            entry = active[0]
            msg = entry.consumer.poll(-1 if timeout is None else timeout)
            if msg is not None and (
                entry.logical or entry.former or self._stale_commits or self._track_timestamps
            ):
                self._out(entry, msg)
            return msg
        if not active:
            self._check_open()
            return self._idle(timeout)
        n = len(active)
        start = self._rr = (self._rr + 1) % n
        # First pass without waiting, and without a deadline's cost: the common case
        # under load. _out only where there is something to translate or track.
        for i in range(n):
            entry = active[(start + i) % n]
            msg = entry.consumer.poll(0)
            if msg is not None:
                if (
                    entry.logical
                    or entry.former
                    or self._draining
                    or self._stale_commits
                    or self._track_timestamps
                ):
                    self._out(entry, msg)
                return msg
        if timeout == 0:
            return None
        deadline = Deadline(timeout)
        step = 0.0
        while True:
            for i in range(n):
                entry = active[(start + i) % n]
                msg = entry.consumer.poll(step)
                if msg is not None:
                    self._out(entry, msg)
                    return msg
            left = deadline.remaining()
            if left is not None and left <= 0:
                return None
            step = _POLL_SLICE_S if left is None else min(_POLL_SLICE_S, left / n)
            if self._pending or self._draining or self._patterns:
                self._before_call()
                active = self._active
                n = len(active)
                if not n:
                    return None

    def consume(self, num_messages: int = 1, timeout: float | None = -1) -> list[Message]:
        """Consume up to ``num_messages`` messages, from the clusters in turn.

        Args:
            num_messages: maximum number of messages to return (1 to 1000000).
            timeout: maximum time to block in seconds (None or -1: infinite).

        Returns:
            A list of ``Message`` (possibly empty on timeout).

        Raises:
            ValueError: ``num_messages`` out of range (as confluent-kafka).
            RuntimeError: the consumer is closed.
        """
        if self._pending or self._draining or self._patterns:
            self._before_call()
        if self._leaving and 1 <= num_messages <= 1_000_000:
            leftover = self._serve_leaving()
            if leftover is not None:
                return [leftover]
        active = self._active
        tmo = -1 if timeout is None else timeout
        if len(active) == 1 and not self._draining and not self._leaving:
            entry = active[0]
            msgs: list[Message] = entry.consumer.consume(num_messages, tmo)
            if entry.logical or entry.former or self._stale_commits or self._track_timestamps:
                return [self._out(entry, m) for m in msgs]
            return msgs
        if not 1 <= num_messages <= 1_000_000:
            raise ValueError("num_messages must be between 1 and 1000000 (1M)")
        if not active:
            self._check_open()
            leftover = self._idle(timeout)
            return [] if leftover is None else [leftover]
        n = len(active)
        start = self._rr = (self._rr + 1) % n
        deadline = Deadline(tmo)
        step = 0.0
        out: list[Message] = []
        while True:
            for i in range(n):
                entry = active[(start + i) % n]
                got = entry.consumer.consume(num_messages - len(out), step)
                out.extend(self._out(entry, m) for m in got)
                if len(out) >= num_messages:
                    return out
            left = deadline.remaining()
            if out or (left is not None and left <= 0):
                return out
            step = _POLL_SLICE_S if left is None else min(_POLL_SLICE_S, left / n)
            if self._pending or self._draining or self._patterns:
                self._before_call()
                active = self._active
                n = len(active)
                if not n:
                    return out

    def _serve_leaving(self) -> Message | None:
        """Poll (timeout 0) the clients of clusters just unsubscribed, so their
        revocation is served; forget those whose assignment is empty. Returns a
        message still queued on one of them, if any (confluent-kafka would return it too)."""
        for entry in list(self._leaving):
            msg = entry.consumer.poll(0)
            if msg is not None:
                return self._out(entry, msg)  # type: ignore[no-any-return]
            if not entry.consumer.assignment():
                self._leaving.remove(entry)
                self._refresh_pin()
        return None

    def _idle(self, timeout: float | None) -> Message | None:
        """Nothing subscribed: wait as confluent-kafka would, but at most 1 s (an infinite
        timeout included, so a ``while True: poll()`` loop does not spin), serving the
        clusters still leaving meanwhile."""
        deadline = Deadline(1.0 if timeout is None or timeout < 0 else min(timeout, 1.0))
        while self._leaving and not deadline.expired():
            msg = self._serve_leaving()
            if msg is not None:
                return msg
            time.sleep(min(_POLL_SLICE_S, deadline.remaining() or 0.0))
        left = deadline.remaining()
        if left:
            time.sleep(left)
        return None

    # ------------------------------------------------------------------ offsets

    @staticmethod
    def _to_logical(entry: _ClusterConsumer, parts: list[TopicPartition]) -> list[TopicPartition]:
        """``parts`` with remapped physical topic names replaced by logical ones.

        TopicPartition is immutable: remapped entries are new objects (their
        ``error`` is not carried over; confluent-kafka offers no way to set it).
        """
        logical = {**entry.former, **entry.logical} if entry.former else entry.logical
        if not logical:
            return parts
        return [tp if (name := logical.get(tp.topic)) is None else renamed(tp, name) for tp in parts]

    def _split(
        self, partitions: Iterable[TopicPartition]
    ) -> list[tuple[_ClusterConsumer, list[int], list[TopicPartition]]]:
        """Group partitions (logical names) by cluster, as physical TopicPartitions,
        with their indexes in the input."""
        if self._rebalancing is not None:
            return [self._split_rebalancing(self._rebalancing, partitions)]
        groups: dict[str, tuple[_ClusterConsumer, list[int], list[TopicPartition]]] = {}
        for index, tp in enumerate(partitions):
            route = self._route(tp.topic)
            entry = self._cluster(route)
            if route.remapped:
                entry.logical.setdefault(route.topic, tp.topic)
                tp = renamed(tp, route.topic)
            group = groups.setdefault(route.cluster_id, (entry, [], []))
            group[1].append(index)
            group[2].append(tp)
        return list(groups.values())

    @staticmethod
    def _split_rebalancing(
        entry: _ClusterConsumer, partitions: Iterable[TopicPartition]
    ) -> tuple[_ClusterConsumer, list[int], list[TopicPartition]]:
        """Inside a rebalance callback every partition is the rebalanced cluster's:
        after a move, the old cluster's revocation names a topic whose route now
        leads elsewhere, and its positions, commits and unassignment belong to
        the old cluster."""
        physical = dict(entry.physical)
        if entry.former:
            for phys, logical in entry.former.items():
                physical.setdefault(logical, phys)
        indexes: list[int] = []
        parts: list[TopicPartition] = []
        for index, tp in enumerate(partitions):
            name = physical.get(tp.topic)
            indexes.append(index)
            parts.append(tp if name is None else renamed(tp, name))
        return entry, indexes, parts

    def _per_cluster(
        self, partitions: list[TopicPartition], call: Callable[[Any, list[TopicPartition]], Any]
    ) -> list[TopicPartition]:
        result: list[TopicPartition | None] = [None] * len(partitions)
        for entry, indexes, parts in self._split(partitions):
            answered = call(entry.consumer, parts)
            if not answered:  # an asynchronous commit answers nothing
                continue
            for index, tp in zip(indexes, self._to_logical(entry, list(answered)), strict=True):
                result[index] = tp
        return [tp for tp in result if tp is not None]

    def commit(
        self,
        message: Message | None = None,
        offsets: list[TopicPartition] | None = None,
        asynchronous: bool = True,
    ) -> list[TopicPartition] | None:
        """Commit offsets, each on its topic's cluster (as ``Consumer.commit``).

        Args:
            message: commit this message's offset + 1.
            offsets: commit these TopicPartitions (logical topic names).
            asynchronous: return at once (True) or wait for the commits.

        Returns:
            None when asynchronous, else the committed TopicPartitions (logical names).

        Raises:
            KafkaException: the commit failed, e.g. ``_NO_OFFSET`` when nothing
                was consumed on any cluster.

        A message received from a topic's old cluster before a route switch is
        already committed there by the switch; committing it afterwards is a
        no-op until the new cluster has delivered a message of that topic.
        """
        self._check_open()
        if message is not None and offsets is not None:
            raise ValueError("commit: pass message or offsets, not both")
        if message is not None:
            topic = str(message.topic())
            if topic in self._stale_commits:
                return None if asynchronous else []
            offsets = [_next_offset(message)]
        if offsets is not None:
            committed = self._per_cluster(
                offsets, lambda c, parts: c.commit(offsets=parts, asynchronous=asynchronous) or []
            )
            return None if asynchronous else committed
        return self._commit_all(asynchronous)

    def _commit_all(self, asynchronous: bool) -> list[TopicPartition] | None:
        out: list[TopicPartition] = []
        no_offset: KafkaException | None = None
        committed_any = False
        for entry in self._active:
            consumer: Any = entry.consumer
            try:
                answered = consumer.commit(asynchronous=asynchronous)
            except KafkaException as exc:
                if exc.args[0].code() == KafkaError._NO_OFFSET:
                    no_offset = no_offset or exc
                    continue
                raise
            committed_any = True
            if answered:
                out.extend(self._to_logical(entry, answered))
        if not committed_any and no_offset is not None:
            raise no_offset
        return None if asynchronous else out

    def committed(self, partitions: list[TopicPartition], timeout: float = -1) -> list[TopicPartition]:
        """Committed offsets of ``partitions`` (logical names), each asked of its cluster.

        Args:
            partitions: the partitions to look up.
            timeout: maximum time in seconds per cluster (-1: infinite).

        Raises:
            NoRouteError: a topic has no route.
            KafkaException: a cluster did not answer.
        """
        self._check_open()
        return self._per_cluster(partitions, lambda c, parts: c.committed(parts, timeout=timeout))

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """Current positions (next offset to fetch) of ``partitions`` (logical names)."""
        self._check_open()
        return self._per_cluster(partitions, lambda c, parts: c.position(parts))

    def assignment(self) -> list[TopicPartition]:
        """The partitions assigned on every cluster, with logical topic names."""
        self._check_open()
        out: list[TopicPartition] = []
        for entry in self._clusters.values():
            out.extend(self._to_logical(entry, entry.consumer.assignment()))
        return out

    def get_watermark_offsets(
        self, partition: TopicPartition, timeout: float | None = None, cached: bool = False
    ) -> tuple[int, int] | None:
        """Low and high watermark of ``partition`` on its topic's cluster (as confluent-kafka)."""
        self._check_open()
        ((entry, _, parts),) = self._split([partition])
        kwargs: dict[str, Any] = {"cached": cached}
        if timeout is not None:
            kwargs["timeout"] = timeout
        result: tuple[int, int] | None = entry.consumer.get_watermark_offsets(parts[0], **kwargs)
        return result

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        """Metadata of ``topic``'s cluster, or of the first subscribed (or assigned)
        cluster when None (of any cluster in use when none is).

        Raises:
            NoRouteError: ``topic`` has no route.
            KafkaException: the cluster did not answer within ``timeout`` seconds.
        """
        self._check_open()
        if topic is None:
            # a subscribed (or assigned) cluster first, not a client kept only to
            # list topics for a pattern subscription
            entries = [*self._active, *self._clusters.values()]
            if not entries:
                raise ValueError("list_topics: no cluster in use yet; subscribe or name a topic")
            return entries[0].consumer.list_topics(None, timeout)
        route = self._route(topic)
        md = self._cluster(route).consumer.list_topics(route.topic, timeout)
        if route.remapped and route.topic in md.topics:
            tmd = md.topics.pop(route.topic)
            tmd.topic = topic
            md.topics[topic] = tmd
        return md

    # ------------------------------------------------------------------ assignment, offsets

    def _note_assign(self, entries: Iterable[_ClusterConsumer]) -> None:
        for entry in entries:
            if entry is self._rebalancing:
                self._assigned_in_callback = True
            if entry not in self._active:
                self._active.append(entry)
            if entry in self._leaving:
                self._leaving.remove(entry)
        self._refresh_pin()

    def assign(self, partitions: list[TopicPartition]) -> None:
        """Set the assignment (as ``Consumer.assign``), each partition on its topic's cluster.

        Inside a rebalance callback it assigns on the cluster being rebalanced
        only; outside, it replaces the assignment of every cluster (clusters with
        no partition in ``partitions`` and no subscription are unassigned).

        Args:
            partitions: TopicPartitions with logical topic names; ``offset`` as
                confluent-kafka (``OFFSET_BEGINNING``, ``OFFSET_END``,
                ``OFFSET_STORED``, or an offset).

        Raises:
            NoRouteError: a topic has no route.
            KafkaException: confluent-kafka refused the assignment.
        """
        self._check_open()
        split = self._split(partitions)
        for entry, _, parts in split:
            entry.consumer.assign(parts)
        self._note_assign(entry for entry, _, _ in split)
        if self._rebalancing is None:
            named = {entry.cluster_id for entry, _, _ in split}
            for entry in list(self._clusters.values()):
                if entry.cluster_id not in named and not entry.topics:
                    entry.consumer.unassign()
                    if entry in self._active:
                        self._active.remove(entry)
            self._refresh_pin()

    def unassign(self) -> None:
        """Remove the assignment (inside a rebalance callback: of the cluster being
        rebalanced; outside: of every cluster)."""
        self._check_open()
        if self._rebalancing is not None:
            self._rebalancing.consumer.unassign()
            self._assigned_in_callback = True
            return
        for entry in list(self._clusters.values()):
            entry.consumer.unassign()
            if entry in self._active and not entry.topics:
                self._active.remove(entry)
        self._refresh_pin()

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        """Add ``partitions`` (logical names) to the assignment of their clusters."""
        self._check_open()
        split = self._split(partitions)
        for entry, _, parts in split:
            entry.consumer.incremental_assign(parts)
        self._note_assign(entry for entry, _, _ in split)

    def incremental_unassign(self, partitions: list[TopicPartition]) -> None:
        """Remove ``partitions`` (logical names) from the assignment of their clusters."""
        self._check_open()
        for entry, _, parts in self._split(partitions):
            entry.consumer.incremental_unassign(parts)
            if entry is self._rebalancing:
                self._assigned_in_callback = True

    def store_offsets(
        self, message: Message | None = None, offsets: list[TopicPartition] | None = None
    ) -> None:
        """Store offsets for the next (auto-)commit, as ``Consumer.store_offsets``
        (``message``: its offset + 1; ``offsets``: logical topic names)."""
        self._check_open()
        if (message is None) == (offsets is None):
            raise ValueError("store_offsets: pass message or offsets")
        if message is not None:
            topic = str(message.topic())
            if topic in self._stale_commits:
                return
            offsets = [_next_offset(message)]
        assert offsets is not None
        for entry, _, parts in self._split(offsets):
            entry.consumer.store_offsets(offsets=parts)

    def seek(self, partition: TopicPartition) -> None:
        """Set the fetch position of an assigned partition (logical name), as ``Consumer.seek``."""
        self._check_open()
        ((entry, _, parts),) = self._split([partition])
        entry.consumer.seek(parts[0])

    def pause(self, partitions: list[TopicPartition]) -> None:
        """Pause fetching ``partitions`` (logical names) on their clusters."""
        self._check_open()
        for entry, _, parts in self._split(partitions):
            entry.consumer.pause(parts)

    def resume(self, partitions: list[TopicPartition]) -> None:
        """Resume fetching ``partitions`` (logical names) on their clusters."""
        self._check_open()
        for entry, _, parts in self._split(partitions):
            entry.consumer.resume(parts)

    def offsets_for_times(
        self, partitions: list[TopicPartition], timeout: float = -1
    ) -> list[TopicPartition]:
        """For each partition (``offset`` holding a timestamp in ms since the epoch), the
        earliest offset whose timestamp is at or after it, asked of its topic's cluster.

        Args:
            partitions: TopicPartitions with logical names.
            timeout: maximum time in seconds per cluster (-1: infinite).
        """
        self._check_open()
        return self._per_cluster(partitions, lambda c, parts: c.offsets_for_times(parts, timeout=timeout))

    def memberid(self) -> str | None:
        """The group member id on the (first) cluster this consumer is subscribed to,
        or None before it joined. See :meth:`memberids` for every cluster."""
        self._check_open()
        for entry in self._active:
            member: str | None = entry.consumer.memberid()
            return member
        return None

    def memberids(self) -> dict[str, str | None]:
        """Cluster id -> group member id on that cluster (kbear addition)."""
        self._check_open()
        return {e.cluster_id: e.consumer.memberid() for e in self._active}

    def consumer_group_metadata(self) -> Any:
        """The group metadata for ``RoutedProducer.send_offsets_to_transaction``.

        Raises:
            KafkaException: ``_STATE`` when this consumer reads from more than one
                cluster (group metadata exists per cluster) or from none yet.
        """
        self._check_open()
        clusters = self._active or list(self._clusters.values())
        if len(clusters) != 1:
            names = ", ".join(e.cluster_id for e in clusters) or "none"
            raise KafkaException(
                KafkaError(
                    KafkaError._STATE,
                    f"consumer_group_metadata: this RoutedConsumer reads from clusters {names}; "
                    "group metadata exists for one cluster only",
                )
            )
        return clusters[0].consumer.consumer_group_metadata()

    def set_sasl_credentials(self, username: str, password: str) -> None:
        """Set SASL/PLAIN or SCRAM credentials on every cluster's client and on clients
        created later (as ``Consumer.set_sasl_credentials``)."""
        self._native["sasl.username"] = username
        self._native["sasl.password"] = password
        for entry in self._clusters.values():
            entry.consumer.set_sasl_credentials(username, password)

    def close(self) -> None:
        """Close every cluster's client (committing, as confluent-kafka, when
        ``enable.auto.commit`` is on), then stop watching the configuration."""
        if self._closed:
            return
        self._closed = True
        self._refresh_pin()
        self._router.unsubscribe(self._on_config_change)
        errors = []
        for entry in self._clusters.values():
            try:
                entry.consumer.close()
            except KafkaException as exc:
                errors.append(exc)
        self._active = []
        self._leaving = []
        if self._owns_router:
            self._router.close()
        if errors:
            raise errors[0]

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("Consumer closed")

    def __enter__(self) -> RoutedConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
