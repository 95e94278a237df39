"""The client-balanced consumer's pure parts: keys, the modulo assignment, the
reconciliation plan, the ownership records and their analysis (no cluster)."""

from __future__ import annotations

import pytest

from kbear import ClientBalancedConsumer
from kbear.balanced._assignment import PartitionKey, assign_modulo, check_node, full_set, plan
from kbear.balanced._ownership import Report, analyse, live_reports, table_lines

LAYOUT = {"orders": ("A", 5), "payments": ("B", 3), "audit": ("A", 1)}


def test_keys_parse_and_print() -> None:
    key = PartitionKey.parse("A:orders.eu:12")
    assert (key.cluster, key.topic, key.partition) == ("A", "orders.eu", 12)
    assert str(key) == "A:orders.eu:12"
    for bad in ("A:orders", "A:orders:x", ":orders:1", "A::1", "A:b:c:1", "A:orders:-1"):
        with pytest.raises(ValueError, match="partition key"):
            PartitionKey.parse(bad)


@pytest.mark.parametrize("count", [1, 2, 3, 4, 9, 20])
def test_nodes_share_every_partition_once(count: int) -> None:
    keys = full_set(LAYOUT)
    shares = [assign_modulo(keys, count, i) for i in range(count)]
    flat = [k for share in shares for k in share]
    assert sorted(flat) == keys and len(set(flat)) == len(keys) == 9
    assert max(map(len, shares)) - min(map(len, shares)) <= 1  # balanced


def test_a_moved_topic_keeps_its_owners() -> None:
    moved = {**LAYOUT, "orders": ("C", 5)}
    for i in range(3):
        before = {(k.topic, k.partition) for k in assign_modulo(full_set(LAYOUT), 3, i)}
        after = {(k.topic, k.partition) for k in assign_modulo(full_set(moved), 3, i)}
        assert before == after


def test_application_assigns_with_minus_one() -> None:
    assert assign_modulo(full_set(LAYOUT), -1, 0) == []


def test_plan_releases_what_left_and_registers_what_arrived() -> None:
    a, b, c = (PartitionKey("t", p, "A") for p in range(3))
    todo = plan([b, c], [a, b])
    assert (todo.release, todo.register) == ([a], [c])
    assert plan([a], [a]).empty


@pytest.mark.parametrize(
    ("count", "node", "error", "text"),
    [
        (3, 3, ValueError, "node_id 3 is not below source_count 3"),
        (3, -1, ValueError, "node_id must be >= 0"),
        (0, 0, ValueError, "source_count must be >= 1"),
        (-2, 0, ValueError, "source_count must be >= 1"),
        (3, "1", TypeError, "node_id must be an int"),
        (True, 0, TypeError, "source_count must be an int"),
    ],
)
def test_bad_node_parameters_are_refused(count: object, node: object, error: type, text: str) -> None:
    with pytest.raises(error, match=text):
        check_node(count, node)
    with pytest.raises(error, match=text):  # before any client or router is built
        ClientBalancedConsumer({"group.id": "g"}, source_count=count, node_id=node)  # type: ignore[arg-type]


def test_bad_reconcile_interval_is_refused(dead_cluster) -> None:
    with pytest.raises(ValueError, match=r"kbear\.balanced\.reconcile\.interval\.ms"):
        ClientBalancedConsumer(
            {"group.id": "g", "kbear.balanced.reconcile.interval.ms": "soon"},
            source_count=1,
            node_id=0,
            router=dead_cluster,
        )


def report(
    node: int, count: int, owned: list[str], instance: str | None = None, ts: int = 10_000, **kw
) -> Report:
    return Report(
        group=kw.pop("group", "g"),
        instance=instance or f"h:{node}",
        node_id=node,
        source_count=count,
        ts_ms=ts,
        interval_ms=1_000,
        layout=kw.pop("layout", LAYOUT),
        owned=tuple(PartitionKey.parse(k) for k in owned),
        **kw,
    )


def shares(count: int) -> list[list[str]]:
    return [[str(k) for k in assign_modulo(full_set(LAYOUT), count, i)] for i in range(count)]


def test_records_round_trip_and_foreign_records_are_ignored() -> None:
    r = report(1, 3, shares(3)[1])
    assert Report.decode(r.encode()) == r
    assert r.record_key == b"g/h:1"
    for foreign in (b"", b"hello", b'{"v": 99}', b'{"v": 1}', b"[1]"):
        assert Report.decode(foreign) is None


def test_newest_record_per_instance_wins_and_old_ones_are_stale() -> None:
    old = report(0, 3, [], ts=1_000)
    new = report(0, 3, shares(3)[0], ts=9_000)
    gone = report(1, 3, shares(3)[1], ts=5_000)  # > 3 intervals before now
    left = report(2, 3, shares(3)[2], ts=9_500, state="left")
    other = report(0, 3, [], group="other", ts=9_000)
    live, stale = live_reports([new, old, gone, left, other], "g", now_ms=10_000)
    assert live == [new] and stale == [gone, left]


def test_a_sound_fleet_has_no_problem() -> None:
    analysis = analyse([report(i, 3, s) for i, s in enumerate(shares(3))])
    assert analysis.problems == []
    assert all(len(owners) == 1 for owners in analysis.owners.values()) and len(analysis.owners) == 9
    lines = table_lines(analysis)
    assert lines[0].split() == ["PARTITION", "NODE", "INSTANCE"] and len(lines) == 10


def test_duplicates_orphans_and_disagreements_are_flagged() -> None:
    three = shares(3)
    analysis = analyse(
        [report(0, 3, three[0]), report(1, 3, three[1], "x"), report(1, 3, three[1], "y"), report(3, 4, [])]
    )
    text = "\n".join(analysis.problems)
    assert "duplicate node_id 1: instances x, y" in text
    assert all(f"overlap: {k} owned by node 1 (x), node 1 (y)" in text for k in three[1])
    assert all(f"orphan: {k} owned by no live node" in text for k in three[2])
    assert "source_count: nodes disagree: 3, 4" in text
    assert "missing nodes" not in text  # only when every node agrees on the count
    flags = [line.split()[-1] for line in table_lines(analysis)[1:]]
    assert flags.count("OVERLAP") == len(three[1]) and flags.count("ORPHAN") == len(three[2])


def test_a_missing_node_and_layouts_that_differ_are_flagged() -> None:
    moved = {**LAYOUT, "audit": ("B", 1)}
    analysis = analyse([report(0, 3, shares(3)[0]), report(1, 3, [], layout=moved)])
    text = "\n".join(analysis.problems)
    assert "missing nodes: 2 of source_count 3" in text
    assert "layout: nodes disagree on topic 'audit': A (1 partitions), B (1 partitions)" in text
