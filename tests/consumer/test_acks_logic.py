"""The pure parts of message-level acknowledgement (no cluster): the contiguous
prefix, the backoff tables with a fake clock, the ack timer, chunk joining and the
producer's chunk split, letter headers."""

from __future__ import annotations

import random

import pytest
from confluent_kafka import Message
from hypothesis import given, settings
from hypothesis import strategies as st

from kbear.consumer._acks import AckTracker
from kbear.consumer._chunks import ChunkAssembler, chunk_of
from kbear.consumer._letters import letter_headers, letter_topic
from kbear.consumer._redelivery import AckTimer, Backoff, Schedule, next_delivery
from kbear.producer._chunking import prepare

KEY = ("A", "t", 0)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_prefix_with_gaps_and_out_of_order_acks() -> None:
    tracker = AckTracker()
    assert tracker.point(KEY) is None
    for offset in (3, 4, 7, 8):  # gaps: compaction or transaction markers
        assert tracker.read(KEY, offset)
    assert not tracker.read(KEY, 4)  # already read and unacknowledged
    assert tracker.ack(KEY, [7]) == 3
    assert tracker.ack(KEY, [3]) == 4
    assert tracker.ack(KEY, [4]) == 8  # 7 acknowledged already: up to 8
    assert tracker.ack(KEY, [8]) == 9
    assert tracker.ack_upto(KEY, 100) == (9, [])


@given(st.lists(st.integers(0, 40), min_size=1, max_size=40, unique=True), st.randoms())
@settings(max_examples=200, deadline=None)
def test_prefix_never_passes_an_unacked_offset(offsets: list[int], rnd: random.Random) -> None:
    tracker = AckTracker()
    ordered = sorted(offsets)
    for o in ordered:
        tracker.read(KEY, o)
    acked: set[int] = set()
    for o in rnd.sample(ordered, len(ordered)):
        point = tracker.ack(KEY, [o])
        acked.add(o)
        assert point is not None
        unacked = [x for x in ordered if x not in acked]
        assert point == (min(unacked) if unacked else ordered[-1] + 1)


def test_nack_backoff_table_with_a_fake_clock() -> None:
    """min 1 s, max 60 s, multiplier 2: 1, 2, 4, 8, 16, 32, 60, 60 s (issue #15)."""
    clock = FakeClock()
    backoff = Backoff(1.0, 60.0, 2.0)
    schedule: Schedule[str] = Schedule()
    delays = []
    for redeliveries in range(8):
        failed_at = clock.now
        due = next_delivery(redeliveries, failed_at, backoff, 0)
        assert due is not None
        schedule.add(due, "m")
        while not schedule.pop_due(clock.now):  # the message comes back at its time, not before
            clock.now += 0.5
        delays.append(clock.now - failed_at)
    assert delays == [1, 2, 4, 8, 16, 32, 60, 60]


def test_ack_timeout_table_with_a_fake_clock() -> None:
    """ack timeout 10 s plus the backoff: 10+1, 10+2, 10+4 ... 10+60 s."""
    clock = FakeClock()
    backoff = Backoff(1.0, 60.0, 2.0)
    timer: AckTimer[str] = AckTimer(10.0, 0.25)
    schedule: Schedule[str] = Schedule()
    gaps = []
    for redeliveries in range(8):
        delivered = clock.now
        timer.start("m", delivered)
        while True:
            expired = timer.expired(clock.now)
            if expired:
                ((_, deadline),) = expired
                due = next_delivery(redeliveries, deadline, backoff, 0)
                assert due is not None
                schedule.add(due, "m")
            if schedule.pop_due(clock.now):
                break
            clock.now += 0.25
        gaps.append(clock.now - delivered)
    assert gaps == [11, 12, 14, 18, 26, 42, 70, 70]


def test_stopped_timer_and_discarded_schedule_report_nothing() -> None:
    timer: AckTimer[str] = AckTimer(1.0, 0.1)
    timer.start("a", 0.0)
    timer.start("b", 0.0)
    timer.stop("a")
    assert [item for item, _ in timer.expired(5.0)] == ["b"]
    schedule: Schedule[str] = Schedule()
    schedule.add(1.0, "x")
    schedule.discard("x")
    assert schedule.pop_due(5.0) == [] and schedule.next_due() is None


def test_dead_letter_after_max_redeliver_count() -> None:
    backoff = Backoff(1.0, 60.0, 2.0)
    assert [next_delivery(n, 0.0, backoff, 3) for n in range(4)] == [1.0, 2.0, 4.0, None]
    assert next_delivery(1000, 0.0, backoff, 0) == 60.0  # 0: never dead-lettered


def test_producer_split_and_consumer_join() -> None:
    value = bytes(range(256)) * 40  # 10240 bytes
    reports: list[object] = []
    calls = prepare(
        (value, None),
        {"on_delivery": lambda err, msg: reports.append(err), "headers": {"h": b"1"}},
        chunking=True,
        max_bytes=4000,
        now_s=100.0,
    )
    assert len(calls) == 4
    assert len({c["key"] for c in calls}) == 1  # one key: one partition
    clock = FakeClock()
    joiner: ChunkAssembler[int] = ChunkAssembler(60.0, 10, clock)
    joined = None
    for i, call in reversed(list(enumerate(calls))):  # any order
        msg = Message(
            topic="t", partition=0, offset=i, key=call["key"], value=call["value"], headers=call["headers"]
        )
        chunk = chunk_of(call["headers"])
        assert chunk is not None
        joined, items, dropped = joiner.add(msg, i, chunk)
        assert dropped == []
    assert joined is not None and joined.value() == value and joined.key() is None
    assert joined.headers() == [("h", b"1")]
    assert sorted(items) == [0, 1, 2, 3]
    for call in calls:
        call["on_delivery"](None, None)
    assert reports == [None]  # one report for the four chunks


def test_delay_header_and_small_values() -> None:
    (call,) = prepare((b"v",), {"deliver_after": 2.5}, chunking=True, max_bytes=10_000, now_s=100.0)
    assert call["headers"] == [("kbear-deliver-at", b"102500")]
    with pytest.raises(ValueError, match="not both"):
        prepare((b"v",), {"deliver_after": 1, "deliver_at": 5}, chunking=False, max_bytes=1, now_s=0)
    with pytest.raises(TypeError, match="multiple values"):
        prepare((b"v",), {"value": b"w"}, chunking=False, max_bytes=1, now_s=0)


def test_incomplete_chunks_expire_and_are_bounded() -> None:
    clock = FakeClock()
    joiner: ChunkAssembler[str] = ChunkAssembler(5.0, 2, clock)
    part = Message(topic="t", value=b"x")
    assert joiner.add(part, "a0", ("a", 0, 2))[0] is None
    assert joiner.add(part, "b0", ("b", 0, 2))[0] is None
    _, _, dropped = joiner.add(part, "c0", ("c", 0, 2))
    assert dropped == [["a0"]]  # the oldest, beyond max_pending
    clock.now = 6.0
    assert sorted(joiner.expired()) == [["b0"], ["c0"]]


def test_letter_names_and_headers() -> None:
    assert letter_topic("{topic}-{group}-RETRY", "orders", "billing") == "orders-billing-RETRY"
    headers = letter_headers(
        [("a", b"1"), ("RECONSUMETIMES", b"1"), ("ORIGIN_MESSAGE_ID", b"A/orders/0/5")],
        real_topic="orders",
        origin="A/orders-billing-RETRY/0/9",
        reconsume_times=2,
        delay_ms=500,
        deliver_at_ms=1500,
        properties={"why": "busy"},
    )
    assert headers == [
        ("a", b"1"),
        ("why", b"busy"),
        ("REAL_TOPIC", b"orders"),
        ("ORIGIN_MESSAGE_ID", b"A/orders/0/5"),  # the first origin is kept
        ("RECONSUMETIMES", b"2"),
        ("DELAY_TIME", b"500"),
        ("kbear-deliver-at", b"1500"),
    ]
