"""A moved topic's translated start is read in the background (kbear.consumer._startlater),
driven without a cluster through the rebalance callbacks and a fake clock.

What a user relies on (issue #27, "done when": ``poll()`` keeps its timeout during a
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

from concurrent.futures import Future
from typing import Any

from confluent_kafka import OFFSET_INVALID, KafkaError, KafkaException, TopicPartition
from test_takeover import Clock
from test_takeover import FakeConsumer as TakeOverConsumer

from kbear._route import Route
from kbear._switch import StartPlan
from kbear.consumer._cluster import ClusterClient
from kbear.consumer._rebalance import Rebalancer, commit_async
from kbear.consumer._startlater import LaterStarts

TOPIC = "east.orders"
GIVE_UP_S = 40.0


class FakeConsumer(TakeOverConsumer):
    """A member client's calls, recorded (the offsets committed too)."""

    def commit(self, offsets: list[TopicPartition] | None = None, asynchronous: bool = True) -> None:
        self.calls.append(("commit", sorted((tp.partition, tp.offset) for tp in offsets or [])))


class Background:
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


def member(
    starts: dict[int, int],
) -> tuple[Rebalancer, ClusterClient, FakeConsumer, LaterStarts, Background, Clock]:
    consumer = FakeConsumer()
    entry = ClusterClient("west", {}, consumer)
    clock = Clock()
    background = Background()
    rebalancer = Rebalancer(owner=None, native={"enable.auto.commit": False})
    rebalancer.translate = translate(starts)
    later = LaterStarts(
        background.submit, rebalancer.translate, commit_async, give_up_s=GIVE_UP_S, clock=clock
    )
    rebalancer.later = later
    moved(rebalancer)
    return rebalancer, entry, consumer, later, background, clock


def moved(rebalancer: Rebalancer) -> None:
    """The topic was just switched to west with a translated start."""
    source = Route("east", "orders", "orders", "localhost:9092", "global", {})
    rebalancer.start_at[("west", TOPIC)] = StartPlan(translated=True, source=source, upstream={0: 10, 1: 20})


def given(partitions: list[int]) -> list[TopicPartition]:
    """An assignment as librdkafka hands it to on_assign (no start offset chosen)."""
    return [TopicPartition(TOPIC, p, OFFSET_INVALID) for p in partitions]


def test_the_assignment_returns_at_once_and_the_partitions_start_at_their_translation() -> None:
    rebalancer, entry, consumer, later, background, _clock = member({0: 7, 1: 12})
    rebalancer.callbacks_for(entry)["on_assign"](consumer, given([0, 1, 2]))
    # assigned where librdkafka would start them, and paused: nothing read meanwhile
    assert consumer.calls == [
        ("assign", [(0, OFFSET_INVALID), (1, OFFSET_INVALID), (2, OFFSET_INVALID)]),
        ("pause", [0, 1, 2]),
    ]
    later.tick()
    assert consumer.calls[2:] == []  # the mirror is still being read
    background.answer()
    later.tick()
    # partition 2 has no translation: it starts from the committed offset (resumed only)
    assert consumer.calls[2:] == [
        ("resume", [0]),
        ("seek", (0, 7)),
        ("resume", [1]),
        ("seek", (1, 12)),
        ("resume", [0, 1, 2]),
        ("commit", [(0, 7), (1, 12)]),
    ]
    assert not later.pending


def test_a_partition_not_started_yet_is_sought_at_a_later_call_and_waits_meanwhile() -> None:
    rebalancer, entry, consumer, later, background, _clock = member({0: 7})
    rebalancer.callbacks_for(entry)["on_assign"](consumer, given([0]))
    background.answer()
    consumer.not_started = 1
    later.tick()
    assert consumer.calls[2:] == [("resume", [0]), ("pause", [0])]  # paused again: not read from elsewhere
    later.tick()
    assert consumer.calls[4:] == [("resume", [0]), ("seek", (0, 7)), ("resume", [0]), ("commit", [(0, 7)])]


def test_a_revocation_before_the_translation_answered_resumes_and_translates_again_next_time() -> None:
    rebalancer, entry, consumer, later, background, _clock = member({0: 7, 1: 12})
    callbacks = rebalancer.callbacks_for(entry)
    callbacks["on_assign"](consumer, given([0, 1]))
    callbacks["on_revoke"](consumer, given([0, 1]))
    # resumed while still assigned (one assigned again must not stay paused), never sought
    assert consumer.calls[2:] == [("resume", [0, 1])]
    assert not later.pending
    assert background.futures[0].cancelled()
    # the next assignment of the topic on west translates again
    callbacks["on_assign"](consumer, given([1]))
    assert consumer.calls[3:] == [("assign", [(1, OFFSET_INVALID)]), ("pause", [1])]
    background.answer()
    later.tick()
    assert consumer.calls[5:] == [("resume", [1]), ("seek", (1, 12)), ("resume", [1]), ("commit", [(1, 12)])]


def test_a_failed_translation_starts_from_the_committed_offsets_and_commits_nothing() -> None:
    rebalancer, entry, consumer, later, background, _clock = member({0: 7})
    rebalancer.callbacks_for(entry)["on_assign"](consumer, given([0]))
    background.fail()
    later.tick()
    assert consumer.calls[2:] == [("resume", [0])]
    assert not later.pending


def test_a_translation_that_does_not_answer_is_given_up() -> None:
    rebalancer, entry, consumer, later, _background, clock = member({0: 7})
    rebalancer.callbacks_for(entry)["on_assign"](consumer, given([0]))
    clock.now += GIVE_UP_S - 1
    later.tick()
    assert later.pending
    clock.now += 1
    later.tick()
    assert consumer.calls[2:] == [("resume", [0])]
    assert not later.pending
