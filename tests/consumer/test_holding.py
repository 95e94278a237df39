"""Partitions held paused until their start is known (kbear.consumer._holding), by
its two users in the rebalance callbacks: the take-overs (kbear.consumer._guard)
and the translated starts read in the background (kbear.consumer._startlater), driven
without a cluster through the rebalance callbacks and a fake clock, then once on a
librdkafka mock cluster. (The move guard's pause after a refused commit:
tests/consumer/test_move_guard.py.)

Take-overs: partitions a member takes over from another member during a move start
at the group's committed offsets as they are a moment after the assignment.

What a user relies on (issue #25 item 4, group moves on brokers that refuse the
commit made in ``on_revoke``: librdkafka's mock with the classic protocol):
the member that held a partition commits its position in the new generation; the
member taking the partition over must start there, not at the older offset the
group had when the assignment began (else it reads again what the other read:
2.1 % of the messages on average over 5 runs, up to 5.6 %, for a group of 2 following two
moves). Nothing is skipped: where nothing newer is committed, reading starts where
librdkafka starts it; a partition this member kept reads on at once; outside moves
nothing waits.

Translated starts: what a user relies on (issue #27, "done when": ``poll()`` keeps its timeout during a
failover): the call serving the new cluster's assignment does not wait for the
mirror's topics to be read; meanwhile nothing of the moved topic is read (its
partitions are paused: no message from the committed offsets or
``auto.offset.reset``); then each partition starts at its translated start, which is
committed (the group's position on the new cluster). A revocation before the
translation answered leaves nothing paused and the translation is made again at the
next assignment; a failed translation starts from the committed offsets.
(The same on librdkafka's mock clusters, with a slow mirror:
tests/consumer/test_translated_start.py.)
"""

from __future__ import annotations

import time
from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import OFFSET_INVALID, Consumer, KafkaError, KafkaException, Producer, TopicPartition

from kbear._route import Route
from kbear._switch_types import StartPlan
from kbear.consumer._cluster import ClusterClient
from kbear.consumer._guard import RECHECK_AFTER_S, MoveGuard, committed_look_up
from kbear.consumer._rebalance import Rebalancer, commit_async
from kbear.consumer._startlater import PARKED_AT, LaterStarts
from kbear.testing import EmbeddedCluster

GIVE_UP_S = 6.0
TOPIC = "orders"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class FakeConsumer:
    """A member client's calls, recorded; ``seek`` refuses with ``_STATE`` while
    ``not_started`` (librdkafka has not started the partition's fetcher yet)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.not_started = 0  # seeks refused before they are accepted

    def assign(self, parts: list[TopicPartition]) -> None:
        self.calls.append(("assign", [(tp.partition, tp.offset) for tp in parts]))

    def pause(self, parts: list[TopicPartition]) -> None:
        self.calls.append(("pause", sorted(tp.partition for tp in parts)))

    def resume(self, parts: list[TopicPartition]) -> None:
        self.calls.append(("resume", sorted(tp.partition for tp in parts)))

    def seek(self, tp: TopicPartition) -> None:
        if self.not_started:
            self.not_started -= 1
            raise KafkaException(KafkaError(KafkaError._STATE))
        self.calls.append(("seek", (tp.partition, tp.offset)))

    def position(self, parts: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, OFFSET_INVALID) for tp in parts]

    def commit(self, offsets: list[TopicPartition] | None = None, asynchronous: bool = True) -> None:
        self.calls.append(("commit", sorted((tp.partition, tp.offset) for tp in offsets or [])))


class Background:
    """The consumer's background thread, run by hand: the committed offsets asked."""

    def __init__(self, committed: dict[int, int]) -> None:
        self.committed = committed
        self.asked: list[list[int]] = []
        self.futures: list[Future[Any]] = []

    def submit(self, _cluster_id: str | None, call: Any, *args: Any) -> Future[Any]:
        future: Future[Any] = Future()
        self.futures.append(future)
        self.asked.append(sorted(tp.partition for tp in args[2]))
        return future

    def answer(self) -> None:
        for future in self.futures:
            if not future.done():
                offsets = {(TOPIC, p): o for p, o in self.committed.items()}
                future.set_result({k: v for k, v in offsets.items() if k[1] in self.asked[-1]})

    def watcher(self, _entry: ClusterClient) -> object:
        return object()


def member(
    committed: dict[int, int], *, moving: bool = True, **native: Any
) -> tuple[Rebalancer, ClusterClient, FakeConsumer, MoveGuard, Background, Clock]:
    consumer = FakeConsumer()
    entry = ClusterClient("B", {}, consumer)
    clock = Clock()
    background = Background(committed)
    registry = {"B": entry}
    guard = MoveGuard(registry, enabled=True, linger_s=20.0, pause_s=GIVE_UP_S, clock=clock)  # type: ignore[arg-type]
    rebalancer = Rebalancer(owner=None, native=native)
    if not rebalancer.incremental:
        guard.takeover = committed_look_up(background.submit, background.watcher)
        rebalancer.taken_hook = guard.taken
        rebalancer.revoking_hook = guard.revoked
    if moving:
        guard.route_changed()
    return rebalancer, entry, consumer, guard, background, clock


def given(partitions: list[int]) -> list[TopicPartition]:
    """An assignment as librdkafka hands it to on_assign (no start offset chosen)."""
    return [TopicPartition(TOPIC, p, OFFSET_INVALID) for p in partitions]


def after(clock: Clock, guard: MoveGuard, seconds: float) -> None:
    clock.now += seconds
    guard.tick()


def test_partitions_taken_over_during_a_move_start_at_the_offsets_committed_meanwhile() -> None:
    rebalancer, entry, consumer, guard, background, clock = member({0: 75, 1: 40})
    rebalancer.callbacks_for(entry)["on_assign"](consumer, given([0, 1]))
    # assigned in the callback itself, then paused: nothing is fetched from the old offsets
    assert consumer.calls == [("assign", [(0, OFFSET_INVALID), (1, OFFSET_INVALID)]), ("pause", [0, 1])]
    after(clock, guard, RECHECK_AFTER_S / 2)
    assert background.asked == []  # the former owner may not have committed yet
    after(clock, guard, RECHECK_AFTER_S / 2)
    assert background.asked == [[0, 1]]
    background.answer()
    after(clock, guard, 0.01)
    # each resumed and sought at once (a partition sought while paused is fetched a
    # second late), then all resumed
    assert consumer.calls[2:] == [
        ("resume", [0]),
        ("seek", (0, 75)),
        ("resume", [1]),
        ("seek", (1, 40)),
        ("resume", [0, 1]),
    ]
    assert not guard.holds.pending


def test_a_seek_before_librdkafka_started_the_partition_is_tried_again() -> None:
    rebalancer, entry, consumer, guard, background, clock = member({0: 75})
    consumer.not_started = 2
    rebalancer.callbacks_for(entry)["on_assign"](consumer, given([0]))
    after(clock, guard, RECHECK_AFTER_S)
    background.answer()
    after(clock, guard, 0.01)
    after(clock, guard, 0.01)
    # paused again after each refused seek: nothing read from elsewhere meanwhile
    assert consumer.calls[-2:] == [("resume", [0]), ("pause", [0])]
    after(clock, guard, 0.01)
    assert consumer.calls[-3:] == [("resume", [0]), ("seek", (0, 75)), ("resume", [0])]


def test_without_a_committed_offset_reading_starts_where_librdkafka_starts_it() -> None:
    rebalancer, entry, consumer, guard, background, clock = member({})
    rebalancer.callbacks_for(entry)["on_assign"](consumer, given([0]))
    after(clock, guard, RECHECK_AFTER_S)
    background.answer()
    after(clock, guard, 0.01)
    assert [c for c in consumer.calls if c[0] in ("seek", "resume")] == [("resume", [0])]


def test_partitions_this_member_held_before_are_read_at_once() -> None:
    rebalancer, entry, consumer, _, _, _ = member({0: 75, 1: 40, 2: 9})
    callbacks = rebalancer.callbacks_for(entry)
    callbacks["on_assign"](consumer, given([0, 1]))
    callbacks["on_revoke"](consumer, given([0, 1]))
    consumer.calls.clear()
    callbacks["on_assign"](consumer, given([1, 2]))
    assert ("pause", [2]) in consumer.calls and ("pause", [1, 2]) not in consumer.calls


def test_a_revocation_before_the_second_look_resumes_and_seeks_nothing() -> None:
    rebalancer, entry, consumer, guard, background, clock = member({0: 75})
    callbacks = rebalancer.callbacks_for(entry)
    callbacks["on_assign"](consumer, given([0]))
    after(clock, guard, RECHECK_AFTER_S)
    callbacks["on_revoke"](consumer, given([0]))
    assert ("resume", [0]) in consumer.calls
    assert background.futures[0].cancelled()
    background.answer()
    after(clock, guard, 0.01)
    assert not any(c[0] == "seek" for c in consumer.calls)


def test_a_look_up_that_never_answers_ends_with_the_session_timeout() -> None:
    rebalancer, entry, consumer, guard, _, clock = member({0: 75})
    rebalancer.callbacks_for(entry)["on_assign"](consumer, given([0]))
    after(clock, guard, RECHECK_AFTER_S)
    after(clock, guard, GIVE_UP_S)
    assert consumer.calls[-1] == ("resume", [0])
    assert not any(c[0] == "seek" for c in consumer.calls)


def test_a_failed_look_up_resumes_where_librdkafka_started() -> None:
    rebalancer, entry, consumer, guard, background, clock = member({0: 75})
    rebalancer.callbacks_for(entry)["on_assign"](consumer, given([0]))
    after(clock, guard, RECHECK_AFTER_S)
    background.futures[0].set_exception(KafkaException(KafkaError(KafkaError._TIMED_OUT)))
    after(clock, guard, 0.01)
    assert consumer.calls[-1] == ("resume", [0])
    assert not any(c[0] == "seek" for c in consumer.calls)


def test_the_guard_stays_on_while_a_take_over_waits() -> None:
    rebalancer, entry, consumer, guard, background, clock = member({0: 75})
    guard.switched(draining=False)
    clock.now += 19.9  # just before the guard's linger ends
    rebalancer.callbacks_for(entry)["on_assign"](consumer, given([0]))
    after(clock, guard, 0.2)
    assert guard.active  # past the linger, but a partition is still paused
    after(clock, guard, RECHECK_AFTER_S)
    background.answer()
    after(clock, guard, 0.01)
    assert consumer.calls[-1] == ("resume", [0])
    after(clock, guard, 0.01)
    assert not guard.active


def test_outside_a_move_nothing_waits() -> None:
    rebalancer, entry, consumer, _, _, _ = member({0: 75}, moving=False)
    rebalancer.callbacks_for(entry)["on_assign"](consumer, given([0]))
    assert not any(c[0] == "pause" for c in consumer.calls)


@pytest.mark.parametrize(
    "native",
    [{"group.protocol": "consumer"}, {"partition.assignment.strategy": "cooperative-sticky"}],
)
def test_incremental_protocols_take_over_as_librdkafka_does(native: dict[str, str]) -> None:
    rebalancer, entry, consumer, _, _, _ = member({0: 75}, **native)
    rebalancer.callbacks_for(entry)["on_assign"](consumer, given([0]))
    assert consumer.calls == []


def test_an_application_that_assigns_in_its_on_assign_decides_where_to_start() -> None:
    rebalancer, entry, consumer, _, _, _ = member({0: 75})

    def on_assign(_consumer: Any, parts: list[TopicPartition]) -> None:
        consumer.assign([TopicPartition(tp.topic, tp.partition, 5) for tp in parts])
        rebalancer.assigned_in_callback = True  # as Placement.assigned does

    rebalancer.callbacks = {"on_assign": on_assign}
    rebalancer.callbacks_for(entry)["on_assign"](consumer, given([0]))
    assert consumer.calls == [("assign", [(0, 5)])]


def test_on_librdkafka_a_taken_over_partition_starts_at_the_offset_committed_after_its_assignment() -> None:
    """A real client: the partition is assigned at the group's committed offset 10,
    the former owner commits 40 just after; reading starts at 40."""
    cluster = EmbeddedCluster()
    try:
        cluster.create_topic(TOPIC, 1)
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
        for i in range(60):
            producer.produce(TOPIC, str(i).encode())
        assert producer.flush(10) == 0
        conf = {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": "g",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
        former, taker, watcher = Consumer(conf), Consumer(conf), Consumer(conf)
        try:
            former.commit(offsets=[TopicPartition(TOPIC, 0, 10)], asynchronous=False)
            entry = ClusterClient("A", {}, taker)
            jobs: list[Future[Any]] = []

            def submit(_cid: str | None, call: Any, *args: Any) -> Future[Any]:
                future: Future[Any] = Future()
                future.set_result(call(*args))
                jobs.append(future)
                return future

            registry: Any = {"A": entry}
            guard = MoveGuard(registry, enabled=True, linger_s=20.0, pause_s=GIVE_UP_S, clock=time.monotonic)
            guard.takeover = committed_look_up(submit, lambda _e: watcher)
            guard.route_changed()
            parts = [TopicPartition(TOPIC, 0, OFFSET_INVALID)]
            taker.assign(parts)
            guard.taken(entry, parts)
            former.commit(offsets=[TopicPartition(TOPIC, 0, 40)], asynchronous=False)
            first = None
            deadline = time.monotonic() + 15
            while first is None and time.monotonic() < deadline:
                guard.tick()
                msg = taker.poll(0.05)
                if msg is not None and msg.error() is None:
                    first = int(msg.value())
            assert jobs, "the committed offsets were not read again"
            assert first == 40
        finally:
            for c in (former, taker, watcher):
                c.close()
    finally:
        cluster.close()


# --------------------------------------------------------------------------- translated starts

MOVED = "east.orders"
TRANSLATION_GIVE_UP_S = 40.0


class Translations:
    """The consumer's background thread, run by hand: each translation asked waits
    for :meth:`answer` or :meth:`fail`."""

    def __init__(self) -> None:
        self.futures: list[Future[Any]] = []
        self.calls: list[tuple[Any, ...]] = []

    def submit(self, _cluster_id: str | None, call: Any, *args: Any) -> Future[Any]:
        future: Future[Any] = Future()
        self.futures.append(future)
        self.calls.append((call, args))
        return future

    def answer(self) -> None:
        call, args = self.calls[-1]
        self.futures[-1].set_result(call(*args))

    def fail(self) -> None:
        self.futures[-1].set_exception(KafkaException(KafkaError(KafkaError._TIMED_OUT)))


def translate(starts: dict[int, int]) -> Any:
    def call(_entry: ClusterClient, parts: list[TopicPartition], _plan: StartPlan) -> list[TopicPartition]:
        return [
            TopicPartition(tp.topic, tp.partition, starts.get(tp.partition, OFFSET_INVALID)) for tp in parts
        ]

    return call


def translating_member(
    starts: dict[int, int], committed: dict[int, int] | None = None
) -> tuple[Rebalancer, ClusterClient, FakeConsumer, LaterStarts, Translations, Clock]:
    consumer = FakeConsumer()
    entry = ClusterClient("west", {}, consumer)
    clock = Clock()
    background = Translations()
    rebalancer = Rebalancer(owner=None, native={"enable.auto.commit": False})
    rebalancer.translate = translate(starts)
    later = LaterStarts(
        background.submit,
        rebalancer.translate,
        commit_async,
        give_up_s=TRANSLATION_GIVE_UP_S,
        clock=clock,
        committed=lambda _entry, parts: {
            (tp.topic, tp.partition): (committed or {}).get(tp.partition, OFFSET_INVALID) for tp in parts
        },
    )
    rebalancer.later = later
    moved(rebalancer)
    return rebalancer, entry, consumer, later, background, clock


def moved(rebalancer: Rebalancer) -> None:
    """The topic was just switched to west with a translated start."""
    source = Route("east", "orders", "orders", "localhost:9092", "global", {})
    rebalancer.start_at[("west", MOVED)] = StartPlan(translated=True, source=source, upstream={0: 10, 1: 20})


def given_moved(partitions: list[int]) -> list[TopicPartition]:
    """An assignment of the moved topic as librdkafka hands it to on_assign."""
    return [TopicPartition(MOVED, p, OFFSET_INVALID) for p in partitions]


def test_the_assignment_returns_at_once_and_the_partitions_start_at_their_translation() -> None:
    rebalancer, entry, consumer, later, background, _clock = translating_member({0: 7, 1: 12}, {2: 5})
    rebalancer.callbacks_for(entry)["on_assign"](consumer, given_moved([0, 1, 2, 3]))
    # assigned at an absolute offset (librdkafka starts no offset query, whose late
    # answer would undo the seek below), and paused: nothing read meanwhile
    assert consumer.calls == [
        ("assign", [(0, PARKED_AT), (1, PARKED_AT), (2, PARKED_AT), (3, PARKED_AT)]),
        ("pause", [0, 1, 2, 3]),
    ]
    later.tick()
    assert consumer.calls[2:] == []  # the mirror is still being read
    background.answer()
    later.tick()
    # partition 2 has no translation: it starts from the committed offset; partition 3
    # has none either: from auto.offset.reset (a logical seek)
    assert consumer.calls[2:] == [
        ("resume", [0]),
        ("seek", (0, 7)),
        ("resume", [1]),
        ("seek", (1, 12)),
        ("resume", [2]),
        ("seek", (2, 5)),
        ("resume", [3]),
        ("seek", (3, OFFSET_INVALID)),
        ("resume", [0, 1, 2, 3]),
        ("commit", [(0, 7), (1, 12), (2, 5)]),
    ]
    assert not later.pending


def test_a_partition_not_started_yet_is_sought_at_a_later_call_and_waits_meanwhile() -> None:
    rebalancer, entry, consumer, later, background, _clock = translating_member({0: 7})
    rebalancer.callbacks_for(entry)["on_assign"](consumer, given_moved([0]))
    background.answer()
    consumer.not_started = 1
    later.tick()
    assert consumer.calls[2:] == [("resume", [0]), ("pause", [0])]  # paused again: not read from elsewhere
    later.tick()
    assert consumer.calls[4:] == [("resume", [0]), ("seek", (0, 7)), ("resume", [0]), ("commit", [(0, 7)])]


def test_a_revocation_before_the_translation_answered_resumes_and_translates_again_next_time() -> None:
    rebalancer, entry, consumer, later, background, _clock = translating_member({0: 7, 1: 12})
    callbacks = rebalancer.callbacks_for(entry)
    callbacks["on_assign"](consumer, given_moved([0, 1]))
    callbacks["on_revoke"](consumer, given_moved([0, 1]))
    # resumed while still assigned (one assigned again must not stay paused), never sought
    assert consumer.calls[2:] == [("resume", [0, 1])]
    assert not later.pending
    assert background.futures[0].cancelled()
    # the next assignment of the topic on west translates again
    callbacks["on_assign"](consumer, given_moved([1]))
    assert consumer.calls[3:] == [("assign", [(1, PARKED_AT)]), ("pause", [1])]
    background.answer()
    later.tick()
    assert consumer.calls[5:] == [("resume", [1]), ("seek", (1, 12)), ("resume", [1]), ("commit", [(1, 12)])]


def test_a_failed_look_up_starts_from_auto_offset_reset_and_commits_nothing() -> None:
    rebalancer, entry, consumer, later, background, _clock = translating_member({0: 7})
    rebalancer.callbacks_for(entry)["on_assign"](consumer, given_moved([0]))
    background.fail()
    later.tick()
    assert consumer.calls[2:] == [("resume", [0]), ("seek", (0, OFFSET_INVALID))]
    assert not later.pending


def test_a_failed_translation_starts_from_the_committed_offsets() -> None:
    rebalancer, entry, consumer, later, background, _clock = translating_member({0: 7}, {0: 3})

    def failing(
        _entry: ClusterClient, _parts: list[TopicPartition], _plan: StartPlan
    ) -> list[TopicPartition]:
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT))

    later.translate = failing
    rebalancer.callbacks_for(entry)["on_assign"](consumer, given_moved([0]))
    background.answer()
    later.tick()
    assert consumer.calls[2:] == [("resume", [0]), ("seek", (0, 3)), ("resume", [0]), ("commit", [(0, 3)])]
    assert not later.pending


def test_a_translation_that_does_not_answer_is_given_up() -> None:
    rebalancer, entry, consumer, later, _background, clock = translating_member({0: 7})
    rebalancer.callbacks_for(entry)["on_assign"](consumer, given_moved([0]))
    clock.now += TRANSLATION_GIVE_UP_S - 1
    later.tick()
    assert later.pending
    clock.now += 1
    later.tick()
    assert consumer.calls[2:] == [("resume", [0]), ("seek", (0, OFFSET_INVALID))]
    assert not later.pending
