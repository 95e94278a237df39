"""Building a RoutedConsumer's parts and handing each its collaborators.

:func:`assemble` builds the parts of one consumer (the shared state, the
registry, the rebalance state, the move guard, the switch driver, the placement,
the manual-assignment moves, the partition calls, the subscription, the poll loop
(with its fast paths) and, with ``kbear.ack.mode=individual``, the
acknowledgement layer), each given exactly what it needs: the shared objects, the
lock, callables. No part is given the consumer; the consumer is only what the
application's rebalance callbacks receive (``owner``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, TopicPartition

from kbear._cluster_id import check_cluster_id
from kbear._health import reachable_from_error
from kbear._identity import Client
from kbear._route import Route
from kbear._switch import SwitchEngine
from kbear.consumer._assigned import AssignedMoves
from kbear.consumer._cluster import ClusterRegistry
from kbear.consumer._failover import ConsumerFailover
from kbear.consumer._gate import CallGate
from kbear.consumer._guard import MoveGuard, committed_look_up, committed_offsets
from kbear.consumer._individual import AckLayer, open_acks
from kbear.consumer._mover import SwitchDriver
from kbear.consumer._partitions import PartitionCalls
from kbear.consumer._placing import Placement
from kbear.consumer._polling import PollLoop, Store
from kbear.consumer._rebalance import Rebalancer, commit_async
from kbear.consumer._startlater import LaterStarts
from kbear.consumer._subscribing import SubscriptionCalls
from kbear.consumer._subscription import ReadState
from kbear.consumer._translated import TRANSLATION_TIMEOUT_S, MirrorStarts
from kbear.router import Router
from kbear.settings import KBearSettings

#: A translated start read in the background is given up (the committed offsets
#: stand) this many times :data:`TRANSLATION_TIMEOUT_S` after the assignment: its
#: reads (the mirror's two topics, the group's committed offsets) each end by then.
GIVE_UP_FACTOR = 4


@dataclass(frozen=True)
class Parts:
    """The parts of one RoutedConsumer (see :func:`assemble`)."""

    lock: threading.RLock
    state: ReadState
    registry: ClusterRegistry
    rebalancer: Rebalancer
    guard: MoveGuard
    driver: SwitchDriver
    placement: Placement
    assigned: AssignedMoves
    partitions: PartitionCalls
    subscriber: SubscriptionCalls
    loop: PollLoop
    acks: AckLayer | None
    failover: ConsumerFailover


def assemble(
    owner: object,
    s: KBearSettings,
    native: dict[str, Any],
    *,
    router: Router,
    client: Client,
    group: str,
    refresh_s: float,
    notify: Callable[[Route, Route | None], None],
    check_open: Callable[[], None],
    store: Store,
    individual: bool,
) -> Parts:
    """The parts of a consumer, wired.

    Args:
        owner: what the application's rebalance callbacks receive (the RoutedConsumer).
        s, native: its kbear settings and confluent-kafka configuration.
        router, client, group: what routes are looked up with.
        refresh_s: seconds between two lookups of a pattern subscription's matches.
        notify: ``notify(old, new)`` tells the route-change listeners.
        check_open: raises ``RuntimeError`` when the consumer is closed.
        store: where the consumer keeps its fast paths (:meth:`PollLoop.refresh`).
        individual: ``kbear.ack.mode=individual``: the acknowledgement layer is
            built, and ``poll``/``consume`` are its delivering part's for good.
    """
    lock = threading.RLock()
    state = ReadState()
    registry = ClusterRegistry(native)
    rebalancer = Rebalancer(owner, native)
    try:  # (librdkafka itself reports a value that is not an integer)
        session_s = int(native.get("session.timeout.ms", 45_000)) / 1000.0
    except (TypeError, ValueError):
        session_s = 45.0
    guard = MoveGuard(
        registry,
        enabled=rebalancer.commit_on_revoke,
        linger_s=s.drain_timeout_ms / 1000.0 + session_s,
        pause_s=session_s,
        clock=time.monotonic,
    )
    if rebalancer.commit_on_revoke:

        def commit_answered(cluster_id: str, err: Any, partitions: list[TopicPartition]) -> None:
            rebalancer.commit_answered(cluster_id, err, partitions)
            guard.commit_answered(cluster_id, err, partitions)

        registry.commit_hook = commit_answered
        rebalancer.assigned_hook = guard.assigned

    def repin() -> None:
        loop.refresh()  # built below, before any client

    def unbind() -> None:
        loop.unbind()  # built below, before any client

    driver = SwitchDriver(
        _engine(s, native),
        registry,
        lambda *switch: subscriber.switch_topic(*switch),  # built below, before any switch
        commit_positions=rebalancer.commit_on_revoke,
        clock=time.monotonic,
    )
    failover = ConsumerFailover(
        s.failover_enable,
        s.failover_after_ms,
        router,
        state,
        driver.engine,
        unbind=unbind,
    )

    def cluster_error(cluster_id: str, err: KafkaError) -> None:
        driver.cluster_error(cluster_id, err)
        if reachable_from_error(err.code()) is False:
            failover.observe(cluster_id, False)

    registry.error_hook = cluster_error
    if s.failover_enable:
        registry.stats_hook = failover.observe
    driver.engine.ends_when_dead = failover.lost
    driver.engine.mirror_start = failover.mirror_start
    if rebalancer.commit_on_revoke and not rebalancer.incremental:
        guard.takeover = committed_look_up(driver.submit, registry.watcher)
        rebalancer.taken_hook = guard.taken
        rebalancer.revoking_hook = guard.revoked
    registry.built_hook = lambda cluster_id, built: check_cluster_id(
        "consumer", cluster_id, built, router.config
    )
    # (used by kbear.switch.start=translated, and by a failover to a mirrored standby)
    rebalancer.translate = translate = MirrorStarts(router, group, native, registry.watcher)
    # a subscribed topic's translated start is read in the background (poll() keeps its timeout)
    later = LaterStarts(
        driver.submit,
        translate,
        commit_async,
        give_up_s=GIVE_UP_FACTOR * TRANSLATION_TIMEOUT_S,
        clock=time.monotonic,
        committed=lambda entry, parts: committed_offsets(registry.watcher, entry, parts),
    )
    rebalancer.later = driver.later = later

    later.deferred_hook = unbind
    gate = CallGate(unbind)

    placement = Placement(
        state.sub,
        registry,
        rebalancer,
        driver,
        router=router,
        group=group,
        client=client,
        repin=repin,
        standby=failover.route,
    )
    assigned = AssignedMoves(state.sub, registry, rebalancer, driver, placement)
    partitions = PartitionCalls(
        state.sub,
        registry,
        rebalancer,
        driver,
        placement,
        assigned,
        gate,
        lock=lock,
        check_open=check_open,
        repin=repin,
    )
    subscriber = SubscriptionCalls(
        state,
        registry,
        rebalancer,
        driver,
        guard,
        placement,
        assigned,
        router=router,
        group=group,
        client=client,
        refresh_s=refresh_s,
        lock=lock,
        check_open=check_open,
        repin=repin,
        notify=notify,
    )
    subscriber.failover_tick = failover.tick
    subscriber.failover_release = failover.release
    loop = PollLoop(
        state,
        registry,
        driver,
        guard,
        gate,
        between_calls=subscriber.between_calls,
        check_open=check_open,
        store=store,
    )
    acks: AckLayer | None = None
    if individual:
        sub = state.sub
        acks, delivery = open_acks(
            s,
            group,
            native,
            router=router,
            client=client,
            registry=registry,
            routes=lambda: sub.routes,
            consume=loop.consume,
        )
        partitions.acks = acks
        subscriber.retry_topics = acks.with_retry_topics
        loop.tap = delivery.tap
        rebalancer.commit_points = driver.commit_points = acks.commit_points
        rebalancer.revoked_hook = acks.revoked
        loop.fix(delivery.poll, delivery.consume)
    return Parts(
        lock=lock,
        state=state,
        registry=registry,
        rebalancer=rebalancer,
        guard=guard,
        driver=driver,
        placement=placement,
        assigned=assigned,
        partitions=partitions,
        subscriber=subscriber,
        loop=loop,
        acks=acks,
        failover=failover,
    )


def _engine(s: KBearSettings, native: Mapping[str, Any]) -> SwitchEngine:
    """The switch engine of a consumer with settings ``s`` (``kbear.switch.*``)."""
    # Where a partition without a committed offset starts (librdkafka default: the end).
    reset = str(native.get("auto.offset.reset", "latest")).lower()
    return SwitchEngine(
        s.switch_mode,
        s.switch_start,
        idle_s=s.drain_idle_ms / 1000.0,
        timeout_s=s.drain_timeout_ms / 1000.0,
        timestamp_margin_ms=s.timestamp_margin_ms,
        reset_to_end=reset in ("latest", "largest", "end"),
    )
