"""RoutedConsumer: the confluent-kafka Consumer API and the poll loop over the routed clusters."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message

from kbear._base import RoutedClientBase, rename_metadata
from kbear._clients import Deadline, cluster_target, open_router, split_config
from kbear._switch import StartPlan, SwitchEngine, same_route
from kbear.consumer._cluster import ClusterClient, ClusterRegistry, Target
from kbear.consumer._mover import SwitchDriver
from kbear.consumer._partitions import PartitionCalls
from kbear.consumer._rebalance import Rebalancer, commit_sync
from kbear.consumer._subscription import (
    PATTERN_METADATA_TIMEOUT_S,
    RebalanceCallback,
    Subscription,
    SubscriptionKind,
    match_patterns,
    parse_topics,
    pattern_clusters,
    route_topics,
)
from kbear.router import Client, NoRouteError, Route, Router

log = logging.getLogger("kbear.consumer")

# How long one blocking poll of one cluster's client may take while several are
# polled in turn (seconds): the worst added latency of a multi-cluster poll.
_POLL_SLICE_S = 0.01


class RoutedConsumer(PartitionCalls, RoutedClientBase):
    """A ``confluent_kafka.Consumer`` reading each topic from the cluster its route names.

    Args:
        config: a confluent-kafka (librdkafka) consumer configuration with
            ``group.id`` and without ``bootstrap.servers`` (the route supplies
            it), plus optional kbear keys (see :mod:`kbear.settings` and the
            README's table), removed before the configuration reaches confluent-kafka:
            ``kbear.config``, ``kbear.client.id``, ``kbear.client.meta.<key>``,
            ``kbear.reload.interval.ms``, ``kbear.switch.mode`` (``drain`` or
            ``immediate``), ``kbear.switch.drain.idle.ms``,
            ``kbear.switch.drain.timeout.ms``, ``kbear.switch.start``
            (``committed``, ``earliest``, ``latest``, ``timestamp``),
            ``kbear.switch.timestamp.margin.ms``.
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
    the next call, by the switch engine (:mod:`kbear._switch`). In ``drain``
    mode the topic keeps being read on the old cluster until the old cluster
    stayed idle ``kbear.switch.drain.idle.ms`` and the group has committed every
    partition there at its end offset (checked in a background thread, so
    ``poll(timeout)`` keeps its timeout); then the topic is dropped there and
    subscribed on the new cluster. ``immediate`` switches at once: messages
    produced to the old cluster and not yet read are left behind. With
    ``enable.auto.commit`` on, positions are committed synchronously before
    partitions leave this member (rebalance), so the next owner starts there.

    Thread safety: calls from several threads are serialized by a lock, except
    that ``poll``/``consume`` release it while they wait on librdkafka; ``close()``
    from another thread ends a waiting ``poll`` within its current slice.
    """

    _fast_paths = ("poll", "consume")

    def __init__(
        self,
        config: Mapping[str, Any] | None = None,
        *,
        router: Router | None = None,
        client: Client | None = None,
        **kwargs: Any,
    ) -> None:
        RoutedClientBase.__init__(self)
        native, self._settings = split_config(config, kwargs, client, "RoutedConsumer")
        group = native.get("group.id")
        if not group:
            raise ValueError(
                "RoutedConsumer: 'group.id' is required: consumer routes are looked up per "
                "consumer group (CRRL consumerGroup.groupName)"
            )
        self._group = str(group)
        self._native = native
        self._log = log
        # Checked before the router (and its watcher thread) exists: nothing to clean up.
        try:
            refresh_ms = int(native.get("topic.metadata.refresh.interval.ms", 300_000))
        except (TypeError, ValueError):
            raise ValueError(
                "RoutedConsumer: topic.metadata.refresh.interval.ms must be an integer number of ms, "
                f"got {native['topic.metadata.refresh.interval.ms']!r}"
            ) from None
        self._refresh_s = refresh_ms / 1000.0
        s = self._settings
        # Where a partition without a committed offset starts (librdkafka default: the end).
        reset = str(native.get("auto.offset.reset", "latest")).lower()
        engine = SwitchEngine(
            s.switch_mode,
            s.switch_start,
            idle_s=s.drain_idle_ms / 1000.0,
            timeout_s=s.drain_timeout_ms / 1000.0,
            timestamp_margin_ms=s.timestamp_margin_ms,
            reset_to_end=reset in ("latest", "largest", "end"),
        )
        self._router, self._owns_router = open_router(router, s, "RoutedConsumer")
        self._client = s.client
        self._registry = ClusterRegistry(native)
        self._sub = Subscription()
        self._rebalancer = Rebalancer(self, native)
        self._driver = SwitchDriver(
            engine,
            self._registry,
            self,
            commit_positions=self._rebalancer.commit_on_revoke,
            clock=time.monotonic,
        )
        self._pattern_topics: dict[str, set[str]] = {}  # cluster id -> topics it listed last
        self._lock = threading.RLock()
        self._rr = 0
        self._closed = False
        self._router.subscribe(self._on_config_change)

    # ------------------------------------------------------------------ routing

    def routes(self) -> dict[str, Route]:
        """Logical topic -> route in use for the current subscription."""
        return dict(self._sub.routes)

    def _route(self, topic: str) -> Route:
        route = self._sub.routes.get(topic)
        if route is None:
            route = self._router.route_consumer(topic, self._group, self._client)
        return route

    def _client_for(self, target: Target) -> ClusterClient:
        entry, replaced = self._registry.client(target)
        if replaced is not None:
            self._hand_over(replaced, entry)
        return entry

    def _native_clients(self) -> Iterable[Any]:
        return [entry.consumer for entry in self._registry]

    def _hand_over(self, old: ClusterClient, new: ClusterClient) -> None:
        """The cluster's client properties changed (a rotated credential, a tuned
        setting): the same topics of the same cluster, read on by a new client from
        where the old one left off (what it consumed is committed, then it closes).
        A subscription is made again; a manual assignment is carried over at the
        old client's positions (pauses are not)."""
        new.take_names(old)
        manual: list[Any] = []
        if not old.topics and old in self._registry.active:
            assigned = old.consumer.assignment()
            manual = old.consumer.position(assigned) if assigned else []
        self._close_client(old)
        log.info("kbear: client of cluster %r rebuilt: its properties changed", new.cluster_id)
        if new.topics:
            self._resubscribe([new])
        elif manual:
            new.consumer.assign(manual)
            self._note_assign([new])

    def _close_client(self, entry: ClusterClient) -> None:
        self._driver.quiesce(entry.cluster_id)
        commit_sync(entry, None, "as its client closes")
        entry.consumer.close()
        self._registry.deactivate(entry)

    def _refresh_pin(self) -> None:
        """Bind poll() and consume() (instance attributes over the class methods) to the
        cheapest correct code for the current state: with one cluster and nothing for
        kbear to do per message (no remap, drain, pattern, pending reload...), that
        cluster's client's own bound methods; with several such clusters, closures that
        take turns over them; otherwise the class methods."""
        active = self._registry.active
        if (
            not active
            or self._closed
            or self._pending
            or self._driver.busy
            or self._registry.leaving
            or self._sub.kind is SubscriptionKind.PATTERN
            or self._driver.engine.tracks_timestamps
            or any(entry.renames for entry in active)
        ):
            self._unpin()
            return
        d = self.__dict__
        if len(active) == 1:
            d["poll"] = active[0].consumer.poll
            d["consume"] = active[0].consumer.consume
        else:
            d["poll"], d["consume"] = self._turn_taking([entry.consumer for entry in active])
        if self._pending:  # a reload landed meanwhile (watcher thread)
            self._unpin()

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
        with self._lock:
            self._check_open()
            names, patterns = parse_topics(topics)
            self._rebalancer.callbacks = {
                name: cb
                for name, cb in (("on_assign", on_assign), ("on_revoke", on_revoke), ("on_lost", on_lost))
                if cb is not None
            }
            self._pending = False
            self._driver.forget()
            self._rebalancer.start_at.clear()
            self._sub = Subscription(
                SubscriptionKind.PATTERN if patterns else SubscriptionKind.TOPICS, names, patterns
            )
            self._set_subscription(names + self._match_patterns(), strict=True)

    def _set_subscription(self, topics: list[str], *, strict: bool) -> None:
        routes = route_topics(self._router, topics, self._group, self._client, strict=strict)
        self._sub.routes = routes
        for entry in self._registry:
            entry.forget_topics()
        for topic, route in routes.items():
            self._client_for(route).attach(topic, route)
        self._resubscribe(self._registry)

    def _match_patterns(self) -> list[str]:
        """Topics matching the regular-expression subscriptions (see subscribe()).

        A cluster that does not answer its metadata request (within
        ``PATTERN_METADATA_TIMEOUT_S``) is logged and counted with the topics it
        listed last time (none before its first answer): one cluster down does not
        stop the others' topics from being read."""
        if not self._sub.patterns:
            return []
        self._sub.next_refresh = time.monotonic() + self._refresh_s
        config = self._router.config
        listings: dict[str, set[str]] = {}
        for cluster_id in pattern_clusters(self._router):
            entry = self._client_for(cluster_target(cluster_id, config.clusters[cluster_id]))
            try:
                md = entry.consumer.list_topics(None, PATTERN_METADATA_TIMEOUT_S)
            except KafkaException as exc:
                log.warning(
                    "kbear: cluster %r did not list its topics for the pattern subscription (%s); "
                    "using what it listed last",
                    cluster_id,
                    exc,
                )
                listings[cluster_id] = self._pattern_topics.get(cluster_id, set())
            else:
                listings[cluster_id] = {t for t in md.topics if not t.startswith("__")}
                self._pattern_topics[cluster_id] = listings[cluster_id]
        return match_patterns(self._sub, self._router, self._group, self._client, listings)

    def _refresh_patterns(self) -> None:
        topics = self._sub.names + self._match_patterns()
        if set(topics) != set(self._sub.routes):
            log.info("kbear: pattern subscription now matches %s", topics)
            self._driver.forget()
            self._set_subscription(topics, strict=False)

    def _resubscribe(self, entries: Iterable[ClusterClient]) -> None:
        for entry in list(entries):
            if entry.topics:
                entry.consumer.subscribe(list(entry.topics), **self._rebalancer.callbacks_for(entry))
                self._registry.activate(entry)
            elif entry in self._registry.active:
                entry.consumer.unsubscribe()
                self._registry.leave(entry)
        self._refresh_pin()

    def unsubscribe(self) -> None:
        """Drop the subscription on every cluster (as ``Consumer.unsubscribe``)."""
        with self._lock:
            self._check_open()
            for entry in list(self._registry.active):
                entry.consumer.unsubscribe()
                entry.forget_topics()
                self._registry.leave(entry)
            self._sub = Subscription()
            self._driver.forget()
            self._refresh_pin()

    # ------------------------------------------------------------------ route changes

    def _apply_changes(self) -> None:
        self._pending = False
        # A cluster whose client properties changed (a rotated credential, a tuned
        # setting): its client is rebuilt once, keeping its topics or its manual
        # assignment (see _hand_over); the same log needs no drain.
        clusters = self._router.config.clusters
        for entry in self._registry:
            cluster = clusters.get(entry.cluster_id)
            if cluster is not None and dict(cluster.meta) != entry.properties:
                self._client_for(cluster_target(entry.cluster_id, cluster))
        for topic, old in list(self._sub.routes.items()):
            try:
                new: Route | None = self._router.route_consumer(topic, self._group, self._client)
            except NoRouteError as exc:
                log.error("kbear: topic %r lost its route after reload: %s", topic, exc)
                new = None
            draining = self._driver.engine.drain_of(topic) is not None
            if not draining and same_route(old, new):
                continue
            if (
                not draining
                and new is not None
                and (new.cluster_id, new.topic) == (old.cluster_id, old.topic)
            ):
                # Same topic on the same cluster, other client properties: its
                # client was rebuilt above, nothing to drain.
                self._sub.routes[topic] = new
                self._notify_route_change(old, new)
                continue
            self._driver.route_changed(topic, old, new)
        if self._sub.kind is SubscriptionKind.PATTERN:
            self._sub.next_refresh = 0.0
        self._refresh_pin()

    def _switch_topic(self, topic: str, old: Route, new: Route | None, start: StartPlan, clean: bool) -> None:
        """Carry out a switch of the engine: ``topic`` leaves ``old``'s cluster (after a
        ``clean`` drain its end offsets are committed: the revocation commits nothing
        more) and is read on ``new``'s cluster from ``start``."""
        old_entry = self._registry.get(old.cluster_id)
        if old_entry is not None:
            old_entry.detach(topic, old)
            if clean:
                self._rebalancer.committed_to_end.add((old.cluster_id, old.topic))
            elif not self._rebalancer.commit_on_revoke:
                try:  # the application commits; what it stored is committed as the topic leaves
                    old_entry.consumer.commit(asynchronous=True)
                except KafkaException as exc:
                    if exc.args[0].code() != KafkaError._NO_OFFSET:
                        log.warning(
                            "kbear: commit on cluster %r at route switch failed: %s", old.cluster_id, exc
                        )
            self._resubscribe([old_entry])
        if new is None:
            self._sub.routes.pop(topic, None)
        else:
            self._sub.routes[topic] = new
            self._rebalancer.start_at[(new.cluster_id, new.topic)] = start
            entry = self._client_for(new)
            entry.attach(topic, new)
            self._resubscribe([entry])
        self._refresh_pin()
        log.info("kbear: topic %r switched from %r to %r", topic, old, new)
        self._notify_route_change(old, new)

    # ------------------------------------------------------------------ messages

    def _before_call(self) -> None:
        with self._lock:
            self._check_open()
            if self._pending:
                self._apply_changes()
            if self._driver.busy:
                self._driver.tick()
                self._refresh_pin()
            elif self._sub.kind is SubscriptionKind.PATTERN and time.monotonic() >= self._sub.next_refresh:
                self._refresh_patterns()

    def _out(self, entry: ClusterClient, msg: Any) -> Any:
        if entry.renames:
            physical = msg.topic()
            name = entry.logical_name(physical)
            if name != physical:
                msg.set_topic(name)
        driver = self._driver
        if driver.busy or driver.engine.tracks_timestamps:
            driver.message(entry, msg, self._sub.routes.get(msg.topic()))
        return msg

    def _needs_care(self) -> bool:
        return self._pending or self._driver.busy or self._sub.kind is SubscriptionKind.PATTERN

    def poll(self, timeout: float | None = None) -> Message | None:
        """Consume one message, serving callbacks, from the clusters in turn.

        Args:
            timeout: maximum time to block in seconds (None or -1: infinite);
                a topic move in progress does not lengthen it.

        Returns:
            A ``Message`` (check ``msg.error()`` as with confluent-kafka) or None on timeout.

        Raises:
            RuntimeError: the consumer is closed.
            KafkaException: errors of confluent-kafka.
        """
        if self._needs_care():
            self._before_call()
        if self._registry.leaving:
            leftover = self._serve_leaving()
            if leftover is not None:
                return leftover
        active = self._registry.active
        if len(active) == 1 and not self._driver.busy and not self._registry.leaving:
            entry = active[0]
            msg: Message | None = entry.consumer.poll(-1 if timeout is None else timeout)
            if msg is not None and (entry.renames or self._driver.engine.tracks_timestamps):
                self._out(entry, msg)
            return msg
        if not active:
            self._check_open()
            return self._idle(timeout)
        n = len(active)
        start = self._rr = (self._rr + 1) % n
        # First pass without waiting: the common case under load.
        for i in range(n):
            entry = active[(start + i) % n]
            msg = entry.consumer.poll(0)
            if msg is not None:
                return self._out(entry, msg)  # type: ignore[no-any-return]
        if timeout == 0:
            return None
        deadline = Deadline(timeout)
        while True:
            left = deadline.remaining()
            if left is not None and left <= 0:
                return None
            step = _POLL_SLICE_S if left is None else min(_POLL_SLICE_S, left / n)
            for i in range(n):
                entry = active[(start + i) % n]
                msg = entry.consumer.poll(step)
                if msg is not None:
                    return self._out(entry, msg)  # type: ignore[no-any-return]
            if self._needs_care() or self._registry.leaving:
                self._before_call()
                if self._registry.leaving:
                    leftover = self._serve_leaving()
                    if leftover is not None:
                        return leftover
                active = self._registry.active
                n = len(active)
                if not n:
                    return None

    def consume(self, num_messages: int = 1, timeout: float | None = -1) -> list[Message]:
        """Consume up to ``num_messages`` messages, from the clusters in turn.

        Args:
            num_messages: maximum number of messages to return (1 to 1000000).
            timeout: maximum time to block in seconds (None or -1: infinite);
                a topic move in progress does not lengthen it.

        Returns:
            A list of ``Message`` (possibly empty on timeout).

        Raises:
            ValueError: ``num_messages`` out of range (as confluent-kafka).
            RuntimeError: the consumer is closed.
        """
        if self._needs_care():
            self._before_call()
        if self._registry.leaving and 1 <= num_messages <= 1_000_000:
            leftover = self._serve_leaving()
            if leftover is not None:
                return [leftover]
        active = self._registry.active
        tmo = -1 if timeout is None else timeout
        if len(active) == 1 and not self._driver.busy and not self._registry.leaving:
            entry = active[0]
            msgs: list[Message] = entry.consumer.consume(num_messages, tmo)
            if entry.renames or self._driver.engine.tracks_timestamps:
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
            if self._needs_care() or self._registry.leaving:
                self._before_call()
                if self._registry.leaving:
                    leftover = self._serve_leaving()
                    if leftover is not None:
                        return [leftover]
                active = self._registry.active
                n = len(active)
                if not n:
                    return out

    def _serve_leaving(self) -> Message | None:
        """Poll (timeout 0) the clients of clusters just unsubscribed, so their
        revocation is served; forget those whose assignment is empty. Returns a
        message still queued on one of them, if any (confluent-kafka would return it too)."""
        for entry in list(self._registry.leaving):
            msg = entry.consumer.poll(0)
            if msg is not None:
                return self._out(entry, msg)  # type: ignore[no-any-return]
            if not entry.consumer.assignment():
                self._registry.deactivate(entry)
                self._refresh_pin()
        return None

    def _idle(self, timeout: float | None) -> Message | None:
        """Nothing subscribed: wait as confluent-kafka would, but at most 1 s (an infinite
        timeout included, so a ``while True: poll()`` loop does not spin), serving the
        clusters still leaving meanwhile."""
        deadline = Deadline(1.0 if timeout is None or timeout < 0 else min(timeout, 1.0))
        while self._registry.leaving and not deadline.expired():
            msg = self._serve_leaving()
            if msg is not None:
                return msg
            time.sleep(min(_POLL_SLICE_S, deadline.remaining() or 0.0))
        left = deadline.remaining()
        if left:
            time.sleep(left)
        return None

    # ------------------------------------------------------------------ cluster-wide calls

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        """Metadata of ``topic``'s cluster, or of the first subscribed (or assigned)
        cluster when None (of any cluster in use when none is).

        Raises:
            ValueError: ``topic`` is None and no cluster is in use yet.
            NoRouteError: ``topic`` has no route.
            KafkaException: the cluster did not answer within ``timeout`` seconds.
        """
        self._check_open()
        if topic is None:
            # a subscribed (or assigned) cluster first, not a client kept only to
            # list topics for a pattern subscription
            entries = [*self._registry.active, *self._registry]
            if not entries:
                raise ValueError("list_topics: no cluster in use yet; subscribe or name a topic")
            return entries[0].consumer.list_topics(None, timeout)
        route = self._route(topic)
        md = self._client_for(route).consumer.list_topics(route.topic, timeout)
        return rename_metadata(md, route, topic)

    def memberid(self) -> str | None:
        """The group member id on the (first) cluster this consumer is subscribed to,
        or None before it joined. See :meth:`memberids` for every cluster."""
        self._check_open()
        for entry in self._registry.active:
            member: str | None = entry.consumer.memberid()
            return member
        return None

    def memberids(self) -> dict[str, str | None]:
        """Cluster id -> group member id on that cluster (kbear addition)."""
        self._check_open()
        return {e.cluster_id: e.consumer.memberid() for e in self._registry.active}

    def consumer_group_metadata(self) -> Any:
        """The group metadata for ``RoutedProducer.send_offsets_to_transaction``.

        Raises:
            KafkaException: ``_STATE`` when this consumer reads from more than one
                cluster (group metadata exists per cluster) or from none yet.
        """
        self._check_open()
        clusters = self._registry.active or list(self._registry)
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

    def close(self) -> None:
        """Close every cluster's client (committing, as confluent-kafka, when
        ``enable.auto.commit`` is on), then stop watching the configuration.

        Raises:
            KafkaException: a cluster's client failed to close (the others are closed).
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._refresh_pin()
            self._router.unsubscribe(self._on_config_change)
            self._driver.close()
            errors = []
            for entry in self._registry:
                try:
                    entry.consumer.close()
                except KafkaException as exc:
                    errors.append(exc)
            self._registry.active.clear()
            self._registry.leaving.clear()
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
