"""Partitions a member takes over from another member while a move reshuffles its
group start at the group's latest committed offsets (issue #25 item 4).

On brokers that refuse the commit a member makes as its partitions leave it while
the group rebalances (librdkafka's mock cluster with the classic protocol),
that member commits its positions of the partitions that went to other members in
the new generation's ``on_assign`` (:mod:`kbear.consumer._rebalance`). Their new
owner fetches the group's committed offsets at the same moment, as its own
assignment starts: it wins that race about half the time and reads again what the
other member had read (a new group's whole backlog, when the first member on a
move's new cluster read it alone before the others joined).

:class:`~kbear.consumer._guard.MoveGuard`, while a move is in progress, with an
eager protocol and ``enable.auto.commit`` on, holds the partitions this member did
not hold in the generation before and that start at the group's committed offset
(:class:`kbear.consumer._holding.Holds`): paused in ``on_assign``,
``RECHECK_AFTER_S`` later the group's committed offsets of those partitions are read
again in the background (:func:`committed_offsets`, with the cluster's background
client), then each is sought there and resumed; where no offset is committed, or the
look-up failed, it is resumed where librdkafka started it. At most
``session.timeout.ms`` after the assignment every partition is resumed.

Nothing is lost: a committed offset is the position of a member that handed every
message before it to its application. Outside moves nothing is paused.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from confluent_kafka import TopicPartition

from kbear.consumer._cluster import ClusterClient
from kbear.consumer._holding import Key, LookUp, Submit

#: Seconds between a take-over and the second look at the group's committed
#: offsets: the time the partitions' former owner has to serve its own
#: ``on_assign`` of the same generation and commit there (one call of its poll loop).
RECHECK_AFTER_S = 0.5

#: Timeout of the background look-up of the committed offsets, seconds.
LOOKUP_TIMEOUT_S = 5.0

#: ``look_up(entry, parts)``: the look-up of ``parts``' committed offsets, to submit
TakeOverLookUp = Callable[[ClusterClient, list[TopicPartition]], LookUp]


def committed_offsets(
    watcher: Callable[[ClusterClient], Any], entry: ClusterClient, parts: list[TopicPartition]
) -> dict[Key, int]:
    """The group's committed offsets of ``parts`` (physical names) on ``entry``'s
    cluster, asked with its background client ``watcher(entry)`` (built here, in the
    background thread, if it is not yet; blocking, at most ``LOOKUP_TIMEOUT_S``).

    Raises:
        KafkaException: the look-up failed.
    """
    answer = watcher(entry).committed(parts, timeout=LOOKUP_TIMEOUT_S)
    return {(tp.topic, tp.partition): tp.offset for tp in answer if tp.error is None}


def committed_look_up(submit: Submit, watcher: Callable[[ClusterClient], Any]) -> TakeOverLookUp:
    """The look-up of taken-over partitions' committed offsets, for
    :meth:`kbear.consumer._guard.MoveGuard.taken`: ``submit`` runs it in the consumer's
    background thread (:meth:`kbear.consumer._mover.SwitchDriver.submit`), ``watcher``
    gives a cluster's background client (:meth:`ClusterRegistry.watcher`)."""

    def look_up(entry: ClusterClient, parts: list[TopicPartition]) -> LookUp:
        return lambda: submit(entry.cluster_id, committed_offsets, watcher, entry, list(parts))

    return look_up
