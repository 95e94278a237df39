"""The routed consumer under a ClientBalancedConsumer: a manual assignment that
follows route changes through the switch engine.

:class:`AssignedConsumer` is a :class:`~kbear.RoutedConsumer` whose topics are
routed and listed in its subscription state (kind ``ASSIGNED``, so a reload hands
each moved topic to the same switch engine and driver as a subscription: drain
or immediate, probes in the background) but which never subscribes: partitions
are added and removed with ``incremental_assign`` / ``incremental_unassign``. It
overrides one step of the move, :meth:`_switch_topic`: the topic's assigned
partitions leave the old cluster's client (what was read committed first) and
the same partition numbers are assigned on the new cluster from the engine's
start plan. ``switched_hook`` tells the owner which partitions moved.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from confluent_kafka import OFFSET_END, OFFSET_STORED, KafkaException, TopicPartition

from kbear import _events
from kbear._switch import StartPlan
from kbear.consumer import RoutedConsumer
from kbear.consumer._rebalance import TIMESTAMP_LOOKUP_TIMEOUT_S, commit_async
from kbear.consumer._subscription import SubscriptionKind
from kbear.router import Route

log = logging.getLogger("kbear.balanced")

#: ``hook(topic, old, new, partitions)``: the partitions (numbers) of logical
#: ``topic`` moved from ``old``'s cluster to ``new``'s (None: the topic lost its route).
SwitchedHook = Callable[[str, Route, Route | None, list[int]], None]


class AssignedConsumer(RoutedConsumer):
    """A RoutedConsumer reading assigned partitions of routed topics (see the module docstring)."""

    switched_hook: SwitchedHook | None = None

    def _switch_topic(self, topic: str, old: Route, new: Route | None, start: StartPlan, clean: bool) -> None:
        """Carry out a switch of the engine for an assigned topic: its partitions on
        ``old``'s cluster are released there (after a ``clean`` drain they are
        committed at their end already; otherwise what was read is committed without
        waiting: the old cluster may be down) and assigned on ``new``'s from ``start``."""
        if self._sub.kind is not SubscriptionKind.ASSIGNED:
            super()._switch_topic(topic, old, new, start, clean)
            return
        moved: list[int] = []
        old_entry = self._registry.get(old.cluster_id)
        if old_entry is not None:
            mine = [tp for tp in old_entry.consumer.assignment() if tp.topic == old.topic]
            moved = sorted(tp.partition for tp in mine)
            if mine:
                if not clean:
                    positions = [tp for tp in old_entry.consumer.position(mine) if tp.offset >= 0]
                    if self._rebalancer.commit_on_revoke:
                        if positions:
                            commit_async(old_entry, positions, "as the topic moves")
                    else:
                        commit_async(old_entry, None, "as the topic moves")
                old_entry.consumer.incremental_unassign(mine)
            if not old_entry.topics and not old_entry.consumer.assignment():
                self._registry.deactivate(old_entry)
        if new is None:
            self._sub.routes.pop(topic, None)
        else:
            self._sub.routes[topic] = new
            if moved:
                self.incremental_assign(self._start_partitions(topic, new, moved, start))
        self._guard.switched(self._driver.engine.draining)
        self._refresh_pin()
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
        self._notify_route_change(old, new)

    def _start_partitions(
        self, topic: str, new: Route, moved: list[int], start: StartPlan
    ) -> list[TopicPartition]:
        """``topic``'s partitions ``moved`` (logical name) with their start offsets on
        ``new``'s cluster: the group's committed offsets there (else
        ``auto.offset.reset``), the beginning, the end, or by timestamp."""
        if start.offset is None:
            return [TopicPartition(topic, p, OFFSET_STORED) for p in moved]
        if not start.by_time:
            return [TopicPartition(topic, p, start.offset) for p in moved]
        entry = self._client_for(new)
        found: dict[int, int] = {}
        try:
            asked = [TopicPartition(new.topic, p, start.offset) for p in moved]
            for tp in entry.consumer.offsets_for_times(asked, timeout=TIMESTAMP_LOOKUP_TIMEOUT_S):
                found[tp.partition] = tp.offset
        except KafkaException as exc:  # a lookup that fails starts at the end, as a subscription's
            log.warning("kbear: offsets by time of %r on %r failed: %s", topic, new.cluster_id, exc)
        return [TopicPartition(topic, p, found[p] if found.get(p, -1) >= 0 else OFFSET_END) for p in moved]
