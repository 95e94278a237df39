"""The ``kbear`` source's questions to its clusters (driver side): watermarks and
start positions, through one metadata consumer per cluster; a cluster that does not
answer is reported to the source's failover (:mod:`kbear.spark._failover`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from kbear.config import MirrorKind
from kbear.spark._copies import remember
from kbear.spark._failover import PROBE_TIMEOUT_S, SourceFailover
from kbear.spark._read import READER_CONF

__all__ = ["EARLIEST", "LATEST", "ClusterQuestions", "start_positions"]

#: Spark's JSON ``startingOffsets`` values for the earliest and the latest offset.
EARLIEST, LATEST = -2, -1


class ClusterQuestions:
    """The driver's questions to the clusters of one reader.

    Args:
        properties: cluster id -> the librdkafka properties that reach it.
        failover: the reader's :class:`~kbear.spark._failover.SourceFailover` now.

    Attributes:
        silent: the clusters that did not answer since :meth:`begin`.
    """

    def __init__(self, properties: Callable[[str], dict[str, str]], failover: Callable[[], SourceFailover]):
        self._properties = properties
        self._failover = failover
        self._meta: dict[str, tuple[dict[str, str], Consumer]] = {}
        self.silent: set[str] = set()

    def begin(self) -> None:
        """A new micro-batch: every cluster is asked again."""
        self.silent = set()

    def close(self) -> None:
        """Close the metadata consumers."""
        for _props, consumer in self._meta.values():
            consumer.close()
        self._meta.clear()

    def consumer(self, cluster: str) -> Consumer:
        """The metadata consumer of ``cluster`` (a new one when its properties changed)."""
        props = self._properties(cluster)
        current = self._meta.get(cluster)
        if current is not None and current[0] == props:
            return current[1]
        if current is not None:
            current[1].close()
        consumer = Consumer({**props, **READER_CONF})
        self._meta[cluster] = (props, consumer)
        return consumer

    def remember(self, offsets: dict[str, Any], read: set[tuple[str, str]]) -> None:
        """:func:`~kbear.spark._copies.remember` for ``read`` (cluster, physical topic)
        on clusters mirrored by MirrorMaker 2 that answered since :meth:`begin`."""
        fo = self._failover()
        wanted = {(c, t) for c, t in read if c not in self.silent and fo.mirror(c, MirrorKind.MM2)}
        remember(offsets, wanted, self.consumer, PROBE_TIMEOUT_S)

    def marks(self, cluster: str, topic: str) -> dict[int, tuple[int, int]]:
        """Partition -> (low, high) watermarks; empty when the topic does not exist.

        Raises:
            KafkaException: the cluster did not answer.
        """
        consumer = self.consumer(cluster)
        timeout = self._failover().timeout(cluster)
        md = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
        if md is None or md.error is not None:
            return {}
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout, cached=False)
            for p in sorted(md.partitions)
        }

    def answer(self, cluster: str, topic: str) -> dict[int, tuple[int, int]] | None:
        """:meth:`marks`, or None when ``cluster`` does not answer (then not asked
        again in this call; reported to the lost-cluster policy)."""
        if cluster in self.silent:
            return None
        try:
            marks = self.marks(cluster, topic)
        except KafkaException as exc:
            self.silent.add(cluster)
            self._failover().unanswered(cluster, [topic], exc)
            return None
        self._failover().answered(cluster)
        return marks


def start_positions(marks: dict[int, tuple[int, int]], how: str | dict[str, int]) -> dict[str, int]:
    """Partition (str) -> start offset, given the partitions' (low, high) watermarks
    ``marks``: ``how`` is ``earliest``, ``latest`` or partition (str) -> offset (-2
    earliest, -1 latest; absent: earliest)."""
    out = {}
    for p, (low, high) in marks.items():
        wanted: int
        if isinstance(how, dict):
            wanted = int(how.get(str(p), EARLIEST))
        else:
            wanted = EARLIEST if how == "earliest" else LATEST
        out[str(p)] = low if wanted == EARLIEST else high if wanted == LATEST else max(wanted, low)
    return out
