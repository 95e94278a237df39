"""A test replicator: copies a topic of one cluster to another as MirrorMaker 2 would,
with random gaps, and writes MirrorMaker 2's offset syncs and checkpoints in its
exact wire format (through kbear.mirror's encoders, whose bytes are checked against
records MirrorMaker 2 wrote in tests/test_mirror_codec.py).

It is fast (in-process, librdkafka mock clusters) and keeps the truth the tests
compare with: where each source record landed on the target. Its translation for
checkpoints is written here on its own (MirrorMaker 2's rule since Kafka 3.5), not
kbear's, so the tests do not check kbear against itself.
"""

from __future__ import annotations

import itertools
import random
import time
from dataclasses import dataclass, field

from confluent_kafka import Consumer, Producer, TopicPartition

from kbear.mirror import Checkpoint, OffsetSync, encode_checkpoint, encode_offset_sync
from kbear.testing import EmbeddedCluster


@dataclass
class _Copied:
    """Per source partition: the (upstream, downstream) offsets of every record copied."""

    pairs: list[tuple[int, int]] = field(default_factory=list)
    next_upstream: int = 0  # the next source offset to look at
    syncs: list[tuple[int, int]] = field(default_factory=list)


class Replicator:
    """Copies ``topic`` of ``east`` to ``<alias>.<topic>`` on ``west``.

    Args:
        skip: chance that a source record is not copied (a gap: filtered, or an
            aborted transaction's record, as MirrorMaker 2 leaves out).
        sync_every: at most how many copied records apart two offset syncs are
            (MirrorMaker 2's ``offset.lag.max``); within that, syncs come at random.
        rng: the random source (seeded by the test).
    """

    def __init__(
        self,
        east: EmbeddedCluster,
        west: EmbeddedCluster,
        topic: str,
        partitions: int,
        *,
        alias: str = "east",
        remote: str | None = None,
        skip: float = 0.2,
        sync_every: int = 4,
        rng: random.Random,
    ) -> None:
        self.east, self.west, self.topic, self.alias = east, west, topic, alias
        self.partitions = partitions
        self.skip, self.sync_every, self.rng = skip, sync_every, rng
        self.remote = remote or f"{alias}.{topic}"  # identity policy: remote=topic
        self.checkpoints_topic = f"{alias}.checkpoints.internal"
        self.syncs_topic = f"mm2-offset-syncs.{alias}.internal"
        self.copied = {p: _Copied() for p in range(partitions)}
        #: (group, partition) -> upstream offset of the sync its last checkpoint used
        self.checkpoint_anchors: dict[tuple[str, int], int] = {}
        self._producer = Producer({"bootstrap.servers": west.bootstrap_servers, "linger.ms": 0})
        self._source = Consumer(
            {
                "bootstrap.servers": east.bootstrap_servers,
                "group.id": "kbear-test-replicator",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 20,
            }
        )

    def create_topics(self) -> None:
        """The mirrored topic and MirrorMaker 2's internal topics on ``west``."""
        self.west.create_topic(self.remote, self.partitions)
        self.west.create_topic(self.checkpoints_topic, 1)
        self.west.create_topic(self.syncs_topic, 1)

    def copy(self, upto: dict[int, int] | None = None, timeout_s: float = 10.0) -> None:
        """Copy what ``east`` holds (per partition up to source offset ``upto[p]``,
        exclusive; default: its end), skipping records at random; write offset syncs."""
        ends = {}
        for p, state in self.copied.items():
            _low, high = self._source.get_watermark_offsets(TopicPartition(self.topic, p), timeout=5)
            end = min(high, upto.get(p, high)) if upto else high
            if end > state.next_upstream:
                ends[p] = end
        if not ends:
            return
        self._source.assign([TopicPartition(self.topic, p, self.copied[p].next_upstream) for p in ends])
        deadline = time.monotonic() + timeout_s
        while any(self.copied[p].next_upstream < e for p, e in ends.items()) and time.monotonic() < deadline:
            for msg in self._source.consume(100, 0.05):
                p = msg.partition()
                if msg.error() is not None or p not in ends or msg.offset() >= ends[p]:
                    continue
                self.copied[p].next_upstream = msg.offset() + 1
                if self.rng.random() >= self.skip:
                    self._copy_one(p, msg)
        self._source.unassign()
        late = {p: e for p, e in ends.items() if self.copied[p].next_upstream < e}
        assert not late, f"replicator: partitions not read to their ends {late} in {timeout_s} s"
        assert self._producer.flush(10) == 0

    def _copy_one(self, partition: int, msg: object) -> None:
        landed: list[int] = []
        self._producer.produce(
            self.remote,
            msg.value(),  # type: ignore[attr-defined]
            key=msg.key(),  # type: ignore[attr-defined]
            partition=partition,
            headers=msg.headers(),  # type: ignore[attr-defined]
            timestamp=msg.timestamp()[1],  # type: ignore[attr-defined]  # kept, as MirrorMaker 2 does
            on_delivery=lambda err, m: landed.append(-1 if err else m.offset()),
        )
        assert self._producer.flush(10) == 0 and landed and landed[0] >= 0
        state = self.copied[partition]
        upstream = msg.offset()  # type: ignore[attr-defined]
        state.pairs.append((upstream, landed[0]))
        since = len(state.pairs) - 1 - (self._index_of_last_sync(state))
        if not state.syncs or since >= self.sync_every or self.rng.random() < 1 / self.sync_every:
            state.syncs.append((upstream, landed[0]))
            key, value = encode_offset_sync(OffsetSync(self.topic, partition, upstream, landed[0]))
            self._producer.produce(self.syncs_topic, value, key=key, partition=0)

    @staticmethod
    def _index_of_last_sync(state: _Copied) -> int:
        if not state.syncs:
            return -1
        return state.pairs.index(state.syncs[-1])

    def translate(self, partition: int, upstream: int) -> tuple[int, int] | None:
        """MirrorMaker 2's translation (since Kafka 3.5) through the syncs written so
        far: (downstream offset, upstream offset of the sync used)."""
        before = [s for s in self.copied[partition].syncs if s[0] <= upstream]
        if not before:
            return None
        up, down = before[-1]
        return (down if up == upstream else down + 1), up

    def checkpoint(self, group: str, timeout_s: float = 5.0) -> dict[int, Checkpoint]:
        """Checkpoint ``group``'s committed offsets on ``east`` (as MirrorMaker 2's
        checkpoint task: only offsets it can translate); returns what was written."""
        reader = Consumer({"bootstrap.servers": self.east.bootstrap_servers, "group.id": group})
        try:
            parts = [TopicPartition(self.topic, p) for p in range(self.partitions)]
            committed = reader.committed(parts, timeout=timeout_s)
        finally:
            reader.close()
        written = {}
        for tp in committed:
            if tp.offset < 0:
                continue
            translated = self.translate(tp.partition, tp.offset)
            if translated is None:
                continue
            cp = Checkpoint(group, self.remote, tp.partition, tp.offset, translated[0], "")
            self.checkpoint_anchors[(group, tp.partition)] = translated[1]
            key, value = encode_checkpoint(cp)
            self._producer.produce(self.checkpoints_topic, value, key=key, partition=0)
            written[tp.partition] = cp
        assert self._producer.flush(10) == 0
        return written

    def true_position(self, partition: int, upstream: int) -> int:
        """Where a reader at source offset ``upstream`` truly goes on on the target: the
        first copied record from ``upstream`` on, else the target's end (what the mirror
        copies next lands there)."""
        pairs = self.copied[partition].pairs
        for up, down in pairs:
            if up >= upstream:
                return down
        return pairs[-1][1] + 1 if pairs else 0

    def max_sync_gap(self, partition: int) -> int:
        """The mirror's sync lag on ``partition``: the largest distance in source offsets
        from a sync to the next one (or to what was read last), the most a translation
        re-reads."""
        state = self.copied[partition]
        ups = [s[0] for s in state.syncs] + [state.next_upstream]
        return max((b - a for a, b in itertools.pairwise(ups)), default=0)

    def close(self) -> None:
        self._source.close()
        self._producer.flush(5)
        del self._producer  # its threads end with it (before the test's clusters close)
