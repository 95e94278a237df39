"""A group's offsets translated through a MirrorMaker 2 mirror (kbear.mirror, #27 item 4):
never past the true position (nothing skipped), re-reading at most the mirror's sync
lag per partition.

The pure property draws a mirror (records copied with random gaps, syncs at random)
and checks :func:`translate_group` against where each record truly landed; the
mock-cluster property runs the test replicator (tests/_mirror_replicator.py) between
two librdkafka mock clusters and reads the records it wrote with :func:`read_mirror`.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
from _mirror_replicator import Replicator
from confluent_kafka import Consumer, Producer, TopicPartition
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kbear.config import Failover, MirrorKind, ReplicationPolicy
from kbear.mirror import (
    Checkpoint,
    CheckpointIndex,
    OffsetSync,
    OffsetSyncIndex,
    StartSource,
    read_mirror,
    translate_group,
)
from kbear.testing import EmbeddedCluster


@st.composite
def mirrors(draw: st.DrawFn) -> tuple[list[tuple[int, int]], list[int], int, int]:
    """(copied (upstream, downstream) pairs, indexes of the pairs synced, source end, target start)."""
    end = draw(st.integers(1, 60))
    copied = sorted(draw(st.sets(st.integers(0, end - 1), min_size=1)))
    start = draw(st.integers(0, 5))  # the target topic may not start at offset 0
    pairs = [(up, start + i) for i, up in enumerate(copied)]
    synced = sorted(draw(st.sets(st.integers(0, len(pairs) - 1), min_size=1)))
    return pairs, synced, end, start


def truth(pairs: list[tuple[int, int]], upstream: int, start: int) -> int:
    return next((down for up, down in pairs if up >= upstream), pairs[-1][1] + 1 if pairs else start)


@settings(max_examples=400, deadline=None)
@given(mirrors(), st.data())
def test_translation_skips_nothing_and_rereads_at_most_the_sync_lag(
    mirror: tuple[list[tuple[int, int]], list[int], int, int], data: st.DataObject
) -> None:
    pairs, synced, end, start = mirror
    syncs = OffsetSyncIndex().extend(OffsetSync("t", 0, *pairs[i]) for i in synced)
    committed = data.draw(st.integers(0, end), label="committed")
    # a checkpoint of an earlier commit, translated by MirrorMaker 2's rule, or none
    checkpoints = CheckpointIndex()
    earlier = data.draw(st.one_of(st.none(), st.integers(0, committed)), label="checkpointed")
    if earlier is not None:
        down = syncs.translate("t", 0, earlier)
        if down is not None:
            checkpoints.add(Checkpoint("g", "east.t", 0, earlier, down[0]))
    source_up = data.draw(st.booleans(), label="source answers")
    got = translate_group(
        "g",
        "t",
        "east.t",
        [0],
        upstream={0: committed} if source_up else None,
        checkpoints=checkpoints,
        syncs=syncs,
    )[0]
    true = truth(pairs, committed, start)
    if got.offset is None:
        assert got.source is StartSource.NONE
        # no translation only when nothing at or before the offset was synced or checkpointed
        assert not source_up or pairs[synced[0]][0] > committed
        return
    assert got.offset <= true  # skips nothing
    if source_up:
        ups = [pairs[i][0] for i in synced]
        gap = committed - max(u for u in ups if u <= committed)
        assert true - got.offset <= got.reread_bound  # type: ignore[operator]
        assert got.reread_bound is not None and got.reread_bound <= gap  # at most the sync lag there
    else:
        assert got.source is StartSource.CHECKPOINT and got.upstream_offset == earlier


@settings(max_examples=400, deadline=None)
@given(mirrors(), st.data())
def test_a_checkpoint_made_through_an_older_sync_is_translated_through_the_newest(
    mirror: tuple[list[tuple[int, int]], list[int], int, int], data: st.DataObject
) -> None:
    # MirrorMaker 2's checkpoint task had read only the first syncs when it made the
    # checkpoint; kbear reads them all: with the source down, the checkpoint's own
    # upstream offset goes through the newest sync at or before it
    pairs, synced, end, start = mirror
    checkpointed = data.draw(st.integers(0, end), label="checkpointed")
    seen = data.draw(st.integers(1, len(synced)), label="syncs the checkpoint task had read")
    older = OffsetSyncIndex().extend(OffsetSync("t", 0, *pairs[i]) for i in synced[:seen])
    made = older.translate("t", 0, checkpointed)
    if made is None:
        return
    syncs = OffsetSyncIndex().extend(OffsetSync("t", 0, *pairs[i]) for i in synced)
    checkpoints = CheckpointIndex().extend([Checkpoint("g", "east.t", 0, checkpointed, made[0])])
    got = translate_group("g", "t", "east.t", [0], checkpoints=checkpoints, syncs=syncs)[0]
    true = truth(pairs, checkpointed, start)
    newest = max(pairs[i][0] for i in synced if pairs[i][0] <= checkpointed)
    assert got.offset is not None and made[0] <= got.offset <= true  # never past the truth
    assert (got.upstream_offset, got.anchor_upstream) == (checkpointed, newest)
    assert got.reread_bound == checkpointed - newest  # the newest sync's lag, not the older one's
    assert true - got.offset <= got.reread_bound


def test_a_checkpoint_made_through_an_older_sync() -> None:
    syncs = OffsetSyncIndex().extend([OffsetSync("t", 0, 0, 0), OffsetSync("t", 0, 100, 97)])
    # made through the sync (0, 0): 1; the sync (100, 97) gives 98 for upstream offset 130
    checkpoints = CheckpointIndex().extend([Checkpoint("g", "east.t", 0, 130, 1)])
    got = translate_group("g", "t", "east.t", [0], checkpoints=checkpoints, syncs=syncs)[0]
    assert (got.offset, got.source, got.anchor_upstream, got.reread_bound) == (
        98,
        StartSource.OFFSET_SYNC,
        100,
        30,
    )
    # a checkpoint that went further (its sync no longer among those read) keeps its offset
    checkpoints = CheckpointIndex().extend([Checkpoint("g", "east.t", 0, 130, 120)])
    got = translate_group("g", "t", "east.t", [0], checkpoints=checkpoints, syncs=syncs)[0]
    assert (got.offset, got.source, got.anchor_upstream) == (120, StartSource.CHECKPOINT, None)


def test_a_checkpoint_ahead_of_the_groups_offset_is_not_used() -> None:
    # the group went back on the source after the checkpoint (a reset): the checkpoint
    # would skip what it reads again
    syncs = OffsetSyncIndex().extend([OffsetSync("t", 0, 0, 0), OffsetSync("t", 0, 10, 10)])
    checkpoints = CheckpointIndex().extend([Checkpoint("g", "east.t", 0, 10, 10)])
    got = translate_group("g", "t", "east.t", [0], upstream={0: 4}, checkpoints=checkpoints, syncs=syncs)[0]
    assert (got.offset, got.source) == (1, StartSource.OFFSET_SYNC)


def test_a_sync_behind_the_last_one_starts_the_partition_over() -> None:
    # the source topic was re-created: offsets start again from 0
    syncs = OffsetSyncIndex().extend(
        [OffsetSync("t", 0, 0, 0), OffsetSync("t", 0, 50, 50), OffsetSync("t", 0, 0, 51)]
    )
    got = translate_group(
        "g", "t", "east.t", [0], upstream={0: 60}, checkpoints=CheckpointIndex(), syncs=syncs
    )
    assert got[0].offset == 52


# --------------------------------------------------------------------------- on mock clusters


@pytest.fixture(scope="module")
def east_west() -> Iterator[tuple[EmbeddedCluster, EmbeddedCluster]]:
    with EmbeddedCluster() as east, EmbeddedCluster() as west:
        yield east, west


_examples = iter(range(10**6))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.integers(5, 40),
    st.floats(0.0, 0.5),
    st.integers(1, 6),
    st.integers(0, 2**32),
    st.booleans(),
)
def test_translation_of_what_the_test_replicator_wrote(
    east_west: tuple[EmbeddedCluster, EmbeddedCluster],
    messages: int,
    skip: float,
    sync_every: int,
    seed: int,
    source_up: bool,
) -> None:
    east, west = east_west
    rng = random.Random(seed)
    n = next(_examples)
    topic, group = f"orders.{n}", f"billing.{n}"
    east.create_topic(topic, 2)
    producer = Producer({"bootstrap.servers": east.bootstrap_servers, "linger.ms": 0})
    for i in range(messages):
        producer.produce(topic, f"v{i}".encode(), key=f"k{i}".encode(), partition=i % 2)
    assert producer.flush(10) == 0
    # each example its own alias, so its own checkpoints and offset-syncs topics
    failover = Failover("west", MirrorKind.MM2, f"east{n}", ReplicationPolicy.DEFAULT, None)
    replicator = Replicator(east, west, topic, 2, alias=f"east{n}", skip=skip, sync_every=sync_every, rng=rng)
    committer = Consumer({"bootstrap.servers": east.bootstrap_servers, "group.id": group})
    try:
        replicator.create_topics()
        ends = {p: len(range(p, messages, 2)) for p in range(2)}
        # the mirror copies a part, the group commits, is checkpointed, copies on, commits further
        replicator.copy({p: rng.randint(0, e) for p, e in ends.items()})
        first = {p: rng.randint(0, e) for p, e in ends.items()}
        committer.commit(offsets=[TopicPartition(topic, p, o) for p, o in first.items()], asynchronous=False)
        replicator.checkpoint(group)
        replicator.copy()
        final = {p: rng.randint(first[p], e) for p, e in ends.items()}
        committer.commit(offsets=[TopicPartition(topic, p, o) for p, o in final.items()], asynchronous=False)
        view = read_mirror(
            failover,
            {"bootstrap.servers": west.bootstrap_servers},
            {"bootstrap.servers": east.bootstrap_servers} if source_up else None,
            timeout_s=10,
        )
        assert view.complete
        starts = view.translate(group, failover, topic, range(2), final if source_up else None)
        for p, start in starts.items():
            true = replicator.true_position(p, final[p])
            if start.offset is None:
                continue  # nothing synced at or before the offset: the caller's fallback
            assert start.offset <= true, (p, start, true)  # nothing skipped
            if source_up:
                assert true - start.offset <= replicator.max_sync_gap(p), (p, start, true)
            else:
                # the checkpoint's offset alone, through the newest sync at or before it
                # (the mirror copied on after the checkpoint: a newer sync than the one the
                # checkpoint used may be there); re-reads what the group read since the
                # checkpoint, and that sync's lag
                assert start.upstream_offset == first[p]
                newest = max(up for up, _down in replicator.copied[p].syncs if up <= first[p])
                assert start.anchor_upstream == newest, (p, start, newest)
                assert start.anchor_upstream >= replicator.checkpoint_anchors[(group, p)]
                assert true - start.offset <= final[p] - start.anchor_upstream
    finally:
        committer.close()
        replicator.close()
