"""The kbear streaming source's planning and reading, driven directly (no SparkSession):
offsets keyed by cluster/topic/partition, startingOffsets, maxOffsetsPerTrigger, and
a route change that drains the old cluster before the new one is read."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from conftest import Rule, keyed, plain_producer, rewrite_rules, rule
from kbear.spark import SparkOptionsError
from kbear.spark._reader import KBearStreamReader
from kbear.spark._source import KBearDataSource
from kbear.spark._source_settings import SourceSettings as _Settings
from kbear.testing import EmbeddedCluster


def produce(cluster: EmbeddedCluster, topic: str, pairs: Sequence[tuple[bytes, bytes]], **kw: Any) -> None:
    p = plain_producer(cluster)
    for k, v in pairs:
        p.produce(topic, key=k, value=v, **kw)
    assert p.flush(10) == 0


def reader(options: dict[str, str]) -> KBearStreamReader:
    return KBearStreamReader(_Settings(options))


def read_batch(r: KBearStreamReader, start: dict[str, Any], end: dict[str, Any]) -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = []
    for part in r.partitions(start, end):
        rows.extend(r.read(part))
    return rows


@pytest.fixture
def topics(
    two_clusters: tuple[EmbeddedCluster, EmbeddedCluster], unique: Callable[[str], str]
) -> tuple[str, str]:
    a, b = two_clusters
    t1, t2 = unique("orders"), unique("audit")
    for c in (a, b):
        c.create_topic(t1, 3)
        c.create_topic(t2, 2)
    return t1, t2


def test_direct_mode_reads_every_partition_once(
    two_clusters: tuple[EmbeddedCluster, EmbeddedCluster], topics: tuple[str, str]
) -> None:
    a, _ = two_clusters
    t1, _ = topics
    produce(a, t1, keyed(30), headers=[("h", b"1")])
    r = reader(
        {
            "kafka.bootstrap.servers": a.bootstrap_servers,
            "subscribe": t1,
            "startingOffsets": "earliest",
            "includeHeaders": "true",
            "kbear.cluster": "A",
        }
    )
    try:
        start = r.initialOffset()
        assert set(start["positions"]["A"][t1]) == {"0", "1", "2"}
        end = r.latestOffset(start, ReadAllAvailable())
        rows = read_batch(r, start, end)
        assert sorted(row[0] for row in rows) == sorted(k for k, _ in keyed(30))
        _key, _value, topic, partition, offset, ts, ts_type, headers, cluster = rows[0]
        assert (topic, cluster, ts_type, headers) == (t1, "A", 0, [("h", b"1")])
        assert ts is not None and isinstance(offset, int) and isinstance(partition, int)
        again = r.latestOffset(end, ReadAllAvailable())
        assert again == end and r.partitions(end, again) == []
        json.dumps(end)  # offsets are JSON
    finally:
        r.stop()


def test_starting_offsets_latest_json_and_limit(
    two_clusters: tuple[EmbeddedCluster, EmbeddedCluster], topics: tuple[str, str]
) -> None:
    a, _ = two_clusters
    t1, _ = topics
    produce(a, t1, keyed(20))
    base = {"kafka.bootstrap.servers": a.bootstrap_servers, "subscribe": t1, "kbear.cluster": "A"}
    latest = reader(base)
    specific = reader({**base, "startingOffsets": json.dumps({t1: {"0": -1, "1": -1, "2": -1}})})
    limited = reader({**base, "startingOffsets": "earliest", "maxOffsetsPerTrigger": "7"})
    try:
        for r in (latest, specific):
            start = r.initialOffset()
            assert read_batch(r, start, r.latestOffset(start, ReadAllAvailable())) == []
        assert limited.getDefaultReadLimit() == ReadMaxRows(7)
        start = limited.initialOffset()
        seen: list[bytes] = []
        for _ in range(10):
            end = limited.latestOffset(start, ReadMaxRows(7))
            batch = read_batch(limited, start, end)
            assert len(batch) <= 7
            seen.extend(row[0] for row in batch)
            start = end
        assert sorted(seen) == sorted(k for k, _ in keyed(20))
    finally:
        for r in (latest, specific, limited):
            r.stop()


def test_bad_options_are_refused() -> None:
    with pytest.raises(SparkOptionsError, match="startingOffsets"):
        _Settings({"kafka.bootstrap.servers": "b:1", "subscribe": "t", "kafka.auto.offset.reset": "x"})
    with pytest.raises(SparkOptionsError, match="exactly one"):
        _Settings({"subscribe": "t"})
    with pytest.raises(SparkOptionsError, match="subscribe"):
        _Settings({"kafka.bootstrap.servers": "b:1"})
    with pytest.raises(SparkOptionsError, match="unknown kbear"):
        _Settings({"kafka.bootstrap.servers": "b:1", "subscribe": "t", "kbear.nope": "1"})
    assert "headers" in KBearDataSource({"includeHeaders": "true"}).schema()
    assert KBearDataSource({}).schema().endswith("cluster string")


def test_route_change_drains_old_cluster_before_reading_new(
    two_clusters: tuple[EmbeddedCluster, EmbeddedCluster],
    topics: tuple[str, str],
    make_config: Callable[[Sequence[Rule]], Path],
) -> None:
    a, b = two_clusters
    t1, t2 = topics
    before = [rule("t1", "use cluster A", topic=t1), rule("t2", "use cluster B", topic=t2)]
    conf = make_config(before)
    produce(a, t1, keyed(40, "a"))
    produce(b, t2, keyed(10, "t2-"))
    produce(b, t1, keyed(5, "old-b"))  # already on B before the move: read after A's backlog
    r = reader({"kbear.config": str(conf), "subscribe": f"{t1},{t2}", "startingOffsets": "earliest"})
    try:
        start = r.initialOffset()
        assert start["routes"] == {t1: {"cluster": "A", "topic": t1}, t2: {"cluster": "B", "topic": t2}}
        end = r.latestOffset(start, ReadAllAvailable())
        first = read_batch(r, start, end)
        assert len(first) == 50
        assert {(row[2], row[-1]) for row in first} == {(t1, "A"), (t2, "B")}
        start = end

        produce(a, t1, keyed(25, "a", start=40))  # backlog on A, not yet read
        rewrite_rules(conf, [rule("t1", f"use cluster B, topic {t1}", topic=t1), before[1]])
        produce(b, t1, keyed(15, "b"))  # written to B after the move
        # limit the drain batch: the new cluster waits until A is done
        end = r.latestOffset(start, ReadMaxRows(10))
        assert end["routes"][t1] == {"cluster": "B", "topic": t1}
        assert t1 in end["draining"]
        drained = read_batch(r, start, end)
        assert {row[-1] for row in drained} == {"A"} and len(drained) == 10
        rows = list(drained)
        start = end
        for _ in range(10):
            end = r.latestOffset(start, ReadMaxRows(10))
            batch = read_batch(r, start, end)
            rows.extend(batch)
            start = end
            if not batch:
                break
        clusters = [row[-1] for row in rows if row[2] == t1]
        assert clusters == ["A"] * 25 + ["B"] * 20, "A's backlog first, then B"
        keys = sorted(row[0] for row in rows if row[2] == t1)
        assert keys == sorted(
            [k for k, _ in keyed(25, "a", start=40)]
            + [k for k, _ in keyed(5, "old-b")]
            + [k for k, _ in keyed(15, "b")]
        )
        assert start["draining"] == {}

        # moving back to A resumes A's recorded offsets: nothing read twice
        produce(a, t1, keyed(3, "back"))
        rewrite_rules(conf, before)
        end = r.latestOffset(start, ReadAllAvailable())  # starts the drain of B (nothing left)
        rows = read_batch(r, start, end)
        start = end
        end = r.latestOffset(start, ReadAllAvailable())
        rows += read_batch(r, start, end)
        assert sorted(row[0] for row in rows) == sorted(k for k, _ in keyed(3, "back"))
    finally:
        r.stop()


def test_a_drain_over_several_batches_and_a_restart_is_reported_once(
    two_clusters: tuple[EmbeddedCluster, EmbeddedCluster],
    topics: tuple[str, str],
    make_config: Callable[[Sequence[Rule]], Path],
) -> None:
    """One DrainStarted and one DrainFinished (kind "spark") per drain, however many
    micro-batches it spans and across a restart from the checkpointed offsets; the
    duration is the drain's, from the batch that saw the move to the one that ended it."""
    from kbear import _events

    a, _ = two_clusters
    t1, _ = topics
    conf = make_config([rule("t1", "use cluster A", topic=t1)])
    seen: list[_events.Event] = []
    _events.subscribe(seen.append)
    options = {"kbear.config": str(conf), "subscribe": t1, "startingOffsets": "earliest"}
    r = reader(options)
    try:
        start = r.initialOffset()
        start = r.latestOffset(start, ReadAllAvailable())  # nothing yet
        produce(a, t1, keyed(30, "a"))  # the backlog the drain reads
        rewrite_rules(conf, [rule("t1", f"use cluster B, topic {t1}", topic=t1)])
        moved = time.time()
        end = r.latestOffset(start, ReadMaxRows(10))  # the move is seen: the drain begins
        assert t1 in end["draining"]
        start = json.loads(json.dumps(end))  # as Spark checkpoints it
        time.sleep(0.3)
        end = r.latestOffset(start, ReadMaxRows(10))
        assert t1 in end["draining"]
        start = json.loads(json.dumps(end))
        r.stop()
        r = reader(options)  # a restarted query goes on from its checkpoint
        time.sleep(0.3)
        for _ in range(5):
            end = r.latestOffset(start, ReadMaxRows(10))
            start = json.loads(json.dumps(end))
            if not end["draining"]:
                break
        ended = time.time()
        assert not end["draining"]
    finally:
        r.stop()
        _events.unsubscribe(seen.append)
    drains = [
        e for e in seen if isinstance(e, _events.DrainStarted | _events.DrainFinished) and e.topic == t1
    ]
    assert [(type(e).__name__, e.kind, e.cluster) for e in drains] == [
        ("DrainStarted", "spark", "A"),
        ("DrainFinished", "spark", "A"),
    ]
    finished = drains[1]
    assert isinstance(finished, _events.DrainFinished) and not finished.timed_out
    assert 0.6 <= finished.duration_s <= ended - moved


def test_a_move_whose_old_cluster_has_nothing_left_reads_the_new_one_from_its_start(
    two_clusters: tuple[EmbeddedCluster, EmbeddedCluster],
    topics: tuple[str, str],
    make_config: Callable[[Sequence[Rule]], Path],
) -> None:
    # the drain of A ends in the batch that sees the move: B's start positions, fixed in
    # that batch, are where B is read from (not its end in that batch, which would skip them)
    a, b = two_clusters
    t1, _t2 = topics
    conf = make_config([rule("t1", "use cluster A", topic=t1), rule("g", "use cluster B", isGlobal=True)])
    produce(a, t1, keyed(30, "a"))
    r = reader({"kbear.config": str(conf), "subscribe": t1, "startingOffsets": "earliest"})
    try:
        start = r.initialOffset()
        end = r.latestOffset(start, ReadAllAvailable())
        rows = read_batch(r, start, end)
        start = end
        rewrite_rules(conf, [rule("t1", "use cluster B", topic=t1)])
        produce(b, t1, keyed(20, "b"))  # A has nothing left to drain
        for _ in range(3):
            end = r.latestOffset(start, ReadAllAvailable())
            rows += read_batch(r, start, end)
            start = end
        assert start["routes"][t1] == {"cluster": "B", "topic": t1} and start["draining"] == {}
        assert sorted(row[0] for row in rows) == sorted(k for k, _ in keyed(30, "a") + keyed(20, "b"))
    finally:
        r.stop()
