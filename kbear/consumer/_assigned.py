"""A manual assignment that follows route changes.

``assign()`` / ``incremental_assign()`` outside a subscription (kind
``ASSIGNED``) record the route of each topic assigned, as a subscription does:
a reload then hands each moved topic to the same switch engine and driver
(drain or immediate, the same starts, probes in the background). One step of
the move differs from a subscription's, :meth:`AssignedMoves.switch`:
the topic's assigned partitions leave the old cluster's client (what was read
committed first, as a subscription's revocation does) and the same partition
numbers are assigned on the new cluster from the engine's start plan (the
group's committed offsets there, else ``auto.offset.reset``; the beginning;
the end; or by timestamp, per ``kbear.switch.start``).

A topic is followed until ``unassign()`` or an ``assign()`` without it; after
``incremental_unassign()`` of all its partitions it is still followed (with
nothing to move), as the topics of a client-balanced consumer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from confluent_kafka import OFFSET_STORED, TopicPartition

from kbear import _events
from kbear._route import Route
from kbear._switch_types import StartPlan
from kbear.consumer._cluster import ClusterRegistry
from kbear.consumer._mover import SwitchDriver
from kbear.consumer._placing import Placement
from kbear.consumer._rebalance import Rebalancer, commit_async, planned
from kbear.consumer._subscription import Subscription, SubscriptionKind

log = logging.getLogger("kbear.consumer")

#: ``hook(topic, old, new, partitions)``: the partitions (numbers) of logical
#: ``topic`` moved from ``old``'s cluster to ``new``'s (None: the topic lost its route).
SwitchedHook = Callable[[str, Route, Route | None, list[int]], None]


@dataclass(eq=False)
class AssignedMoves:
    """Route following of a RoutedConsumer's manual assignment (see the module docstring).

    Args:
        sub: the consumer's subscription (kind ``ASSIGNED`` while it follows).
        registry, rebalancer, driver: the consumer's per-cluster clients,
            rebalance state and switch driver.
        placement: where its partitions are read.

    Attributes:
        switched_hook: called after an assigned topic's partitions moved (a
            :class:`~kbear.ClientBalancedConsumer`'s keys follow them), or None.
    """

    sub: Subscription
    registry: ClusterRegistry
    rebalancer: Rebalancer
    driver: SwitchDriver
    placement: Placement

    switched_hook: SwitchedHook | None = None

    def follow(self, topics: Iterable[str], *, replace: bool) -> None:
        """Record the route in use of each of ``topics`` (logical) just assigned
        outside a rebalance callback and a subscription; ``replace`` (``assign()``):
        the topics not among them are no longer followed."""
        if self.rebalancer.current is not None or self.sub.kind not in (
            SubscriptionKind.NONE,
            SubscriptionKind.ASSIGNED,
        ):
            return
        self.sub.kind = SubscriptionKind.ASSIGNED
        wanted = dict.fromkeys(topics)
        if replace:
            dropped = [t for t in self.sub.routes if t not in wanted]
            if dropped:
                self.driver.engine.forget(dropped)
                for topic in dropped:
                    del self.sub.routes[topic]
        for topic in wanted:
            if topic not in self.sub.routes:
                self.sub.routes[topic] = self.placement.route(topic)

    def stop_following(self) -> None:
        """``unassign()`` outside a callback: no topic is followed any more."""
        if self.rebalancer.current is None and self.sub.kind is SubscriptionKind.ASSIGNED:
            self.sub.reset()
            self.driver.forget()

    def switch(self, topic: str, old: Route, new: Route | None, start: StartPlan, clean: bool) -> None:
        """Carry out a switch of the engine for an assigned topic: its partitions on
        ``old``'s cluster are released there (after a ``clean`` drain they are
        committed at their end already; otherwise what was read is committed without
        waiting, the old cluster may be down: with ``kbear.ack.mode=individual`` the
        acknowledged prefix only, as a subscription's revocation) and assigned on
        ``new``'s from ``start``."""
        moved: list[int] = []
        old_entry = self.registry.get(old.cluster_id)
        if old_entry is not None:
            mine = [tp for tp in old_entry.consumer.assignment() if tp.topic == old.topic]
            moved = sorted(tp.partition for tp in mine)
            if mine:
                if not clean:
                    reached = [tp for tp in old_entry.consumer.position(mine) if tp.offset >= 0]
                    positions = self.rebalancer.lowered(old_entry, reached)
                    if self.rebalancer.commit_on_revoke:
                        if positions:
                            commit_async(old_entry, positions, "as the topic moves")
                    else:
                        commit_async(old_entry, None, "as the topic moves")
                old_entry.consumer.incremental_unassign(mine)
            if not old_entry.topics and not old_entry.consumer.assignment():
                self.registry.deactivate(old_entry)
        if new is None:
            self.sub.routes.pop(topic, None)
        else:
            self.sub.routes[topic] = new
            if moved:
                entry = self.placement.client_for(new)
                physical = [TopicPartition(new.topic, p, OFFSET_STORED) for p in moved]
                starts = planned(entry, physical, start, self.rebalancer.translate)
                self.placement.assign(
                    [TopicPartition(topic, tp.partition, tp.offset) for tp in starts], incremental=True
                )
        log.info(
            "kbear: assigned topic %r (partitions %s) switched from %r to %r",
            topic,
            moved,
            old,
            new,
            extra=_events.fields("route_change", topic, old, new, reason="reload"),
        )
        if self.switched_hook is not None:
            self.switched_hook(topic, old, new, moved)
