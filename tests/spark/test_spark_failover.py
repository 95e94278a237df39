"""The kbear streaming source through a lost cluster, driven directly (no SparkSession),
on librdkafka's mock clusters with a test replicator writing MirrorMaker 2's offset
syncs: micro-batches go on without the lost cluster, then read its standby from the
source's positions translated through the mirror, after the operator's failover
(``kbear.failover.active``) or the source's own (``kbear.failover.enable``)."""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from pyspark.sql.streaming.datasource import ReadAllAvailable

from conftest import keyed, write_mirror_config
from kbear import _events
from kbear.spark._reader import KBearStreamReader
from kbear.spark._source_settings import SourceSettings
from kbear.testing import EmbeddedCluster
from tests._mirror_replicator import Replicator
from tests.consumer.test_translated_start import failed_over

PARTITIONS = 2
Clusters = tuple[EmbeddedCluster, EmbeddedCluster]


def produce(cluster: EmbeddedCluster, topic: str, pairs: list[tuple[bytes, bytes]]) -> list[bytes]:
    from conftest import plain_producer

    p = plain_producer(cluster)
    for k, v in pairs:
        p.produce(topic, key=k, value=v)
    assert p.flush(10) == 0
    return [v for _, v in pairs]


def batch(r: KBearStreamReader, start: dict[str, Any]) -> tuple[dict[str, Any], list[tuple[Any, ...]]]:
    end = r.latestOffset(start, ReadAllAvailable())
    rows: list[tuple[Any, ...]] = []
    for part in r.partitions(start, end):
        rows.extend(r.read(part))
    return end, rows


@pytest.fixture
def mirrored(
    native_clusters: Clusters, tmp_path: Path, unique: Callable[[str], str], request: pytest.FixtureRequest
) -> Iterator[tuple[str, Path, Replicator]]:
    """A topic of east mirrored to west (identity policy) by a replicator writing an
    offset sync every ``request.param`` records (default 5)."""
    east, west = native_clusters
    topic = unique("orders")
    east.create_topic(topic, PARTITIONS)
    directory = write_mirror_config(tmp_path / "conf", east, west, "mm2")
    replicator = Replicator(
        east,
        west,
        topic,
        PARTITIONS,
        remote=topic,
        skip=0.0,
        sync_every=getattr(request, "param", 5),
        rng=random.Random(38),
    )
    replicator.create_topics()
    try:
        yield topic, directory, replicator
    finally:
        replicator.close()
        east.set_broker_up(1)


def reader(directory: Path, topic: str, **more: str) -> KBearStreamReader:
    options = {"kbear.config": str(directory), "subscribe": topic, "startingOffsets": "earliest", **more}
    return KBearStreamReader(SourceSettings(options))


@pytest.mark.parametrize("trigger", ["operator", "source"])
def test_a_lost_cluster_is_skipped_then_its_standby_read_from_translated_positions(
    native_clusters: Clusters,
    mirrored: tuple[str, Path, Replicator],
    kbear_events: list[Any],
    trigger: str,
) -> None:
    east, west = native_clusters
    topic, directory, replicator = mirrored
    more = {"kbear.failover.enable": "true", "kbear.failover.after.ms": "1500"} if trigger == "source" else {}
    r = reader(directory, topic, **more)
    try:
        sent = produce(east, topic, keyed(60, "east-"))
        start = r.initialOffset()
        start, rows = batch(r, start)
        assert len(rows) == 60 and {row[-1] for row in rows} == {"east"}
        sent += produce(east, topic, keyed(30, "late-", start=60))  # mirrored, not read on east
        replicator.copy()
        east.set_broker_down(1)

        # micro-batches go on without east: no new offsets, no exception, a metric's event
        began = time.monotonic()
        end, more_rows = batch(r, start)
        assert more_rows == [] and end["positions"] == start["positions"]
        assert end["routes"][topic]["cluster"] == "east"
        assert any(isinstance(e, _events.ClusterUnanswered) and e.cluster == "east" for e in kbear_events)
        start = end

        if trigger == "operator":
            failed_over(directory, True)
        sent += produce(west, topic, keyed(20, "west-", start=90))  # the producers failed over
        deadline = time.monotonic() + 30
        while start["routes"][topic]["cluster"] == "east":
            assert time.monotonic() < deadline, "not failed over in 30 s"
            start, batch_rows = batch(r, start)
            rows += batch_rows
        if trigger == "source":
            assert time.monotonic() - began >= 1.5  # kbear.failover.after.ms
            assert start["failed"] == {"east": {"at": pytest.approx(time.time(), abs=60), "decided": None}}
        translated = start["translated"][topic]
        assert translated["from"] == {"cluster": "east", "topic": topic}
        assert translated["to"] == {"cluster": "west", "topic": topic}
        # each partition starts right after the copy of the last record read on east (or
        # at a sync made at that very record)
        hows = {p["by"] for p in translated["partitions"].values()}
        assert "record" in hows and hows <= {"record", "offset-sync"}
        for _ in range(3):
            start, batch_rows = batch(r, start)
            rows += batch_rows
        counts = Counter(row[1] for row in rows)
        assert set(counts) == set(sent)  # nothing lost
        assert max(counts.values()) == 1  # nothing read twice

        if trigger == "operator":
            # east comes back; the operator fails back: west is drained, then east is read
            # from after what was read there as copies on west
            east.set_broker_up(1)
            back = produce(east, topic, keyed(10, "back-", start=110))
            failed_over(directory, False)
            deadline = time.monotonic() + 30
            while not set(back) <= {row[1] for row in rows}:
                assert time.monotonic() < deadline, "not read on east again in 30 s"
                start, batch_rows = batch(r, start)
                rows += batch_rows
            assert start["routes"][topic]["cluster"] == "east" and not start["draining"]
            counts = Counter(row[1] for row in rows)
            assert set(counts) == set(sent) | set(back)
            # east read from after the records whose copies were read on west (the 30
            # mirrored but unread on east when it died were read again before)
            assert max(counts.values()) == 1
            back_record = start["translated"][topic]
            assert back_record["back"] is True and back_record["to"] == {"cluster": "east", "topic": topic}
            assert {p["by"] for p in back_record["partitions"].values()} <= {"record", "offset-sync"}
    finally:
        r.stop()
    starts = [e for e in kbear_events if isinstance(e, _events.MirroredStart)]
    assert {(e.kind, e.cluster, e.source) for e in starts} == {("spark", "west", "east")}
    assert sum(e.partitions for e in starts if e.decided_by == "record") >= 1


@pytest.mark.parametrize("mirrored", [1], indirect=True)  # a sync at each range's end
def test_a_task_whose_cluster_dies_finishes_its_range_on_the_mirror(
    native_clusters: Clusters, mirrored: tuple[str, Path, Replicator]
) -> None:
    east, _west = native_clusters
    topic, directory, replicator = mirrored
    r = reader(directory, topic, **{"kbear.failover.after.ms": "500", "kafkaConsumer.pollTimeoutMs": "30000"})
    try:
        sent = produce(east, topic, keyed(40, "east-"))
        replicator.copy()
        start = r.initialOffset()
        end = r.latestOffset(start, ReadAllAvailable())
        parts = r.partitions(start, end)
        east.set_broker_down(1)  # planned, not read yet
        rows = [row for part in parts for row in r.read(part)]
    finally:
        r.stop()
    counts = Counter(row[1] for row in rows)
    assert set(counts) == set(sent)
    assert {row[-1] for row in rows} == {"west"}


def test_after_a_task_finished_its_range_on_the_mirror_the_next_batch_starts_after_it(
    native_clusters: Clusters, mirrored: tuple[str, Path, Replicator]
) -> None:
    """A task reading east when it dies finishes its range on west up to the copy of
    the range's last record; after the failover the next batch starts right after
    that copy, not at the offset sync before it: nothing read twice, nothing lost."""
    east, west = native_clusters
    topic, directory, replicator = mirrored
    r = reader(directory, topic, **{"kbear.failover.after.ms": "500", "kafkaConsumer.pollTimeoutMs": "30000"})
    try:
        sent = produce(east, topic, keyed(30, "east-"))
        start, rows = batch(r, r.initialOffset())  # read on east
        sent += produce(east, topic, keyed(30, "mid-", start=30))
        end = r.latestOffset(start, ReadAllAvailable())
        parts = r.partitions(start, end)
        sent += produce(east, topic, keyed(30, "late-", start=60))  # past the range: syncs past its end
        replicator.copy()
        east.set_broker_down(1)  # planned, not read yet
        finished = [row for part in parts for row in r.read(part)]
        assert {row[-1] for row in finished} == {"west"}
        rows += finished
        failed_over(directory, True)
        sent += produce(west, topic, keyed(10, "west-", start=90))
        start = end
        for _ in range(3):
            start, more = batch(r, start)
            rows += more
        assert start["routes"][topic]["cluster"] == "west"
    finally:
        r.stop()
    counts = Counter(row[1] for row in rows)
    assert set(counts) == set(sent)  # nothing lost
    assert max(counts.values()) == 1  # nothing read twice
