"""The commits and pauses a RoutedConsumer makes while a move reshuffles its group
(kbear.consumer._guard.MoveGuard), driven without a cluster: a fake clock and
clients that record the calls made on them.

What a user relies on (issue #11, group moves without duplicate storms): during a
move what this member read is committed at its next call, so the next owner of a
partition starts close to where this member stopped; a commit refused because the
group rebalances stops the member reading what it could not commit, until its next
assignment; outside moves, and when the application commits itself, kbear commits
nothing on its behalf.
"""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from kbear.consumer._cluster import ClusterClient
from kbear.consumer._guard import COMMIT_EVERY_S, MoveGuard

LINGER_S = 20.0
PAUSE_S = 6.0


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class RecordingConsumer:
    """The confluent-kafka Consumer calls the guard makes, recorded."""

    def __init__(self, assigned: list[TopicPartition]) -> None:
        self.assigned = assigned
        self.calls: list[tuple[str, Any]] = []
        self.nothing_stored = False

    def assignment(self) -> list[TopicPartition]:
        return list(self.assigned)

    def commit(self, asynchronous: bool = True) -> None:
        if self.nothing_stored:
            raise KafkaException(KafkaError(KafkaError._NO_OFFSET))
        self.calls.append(("commit", asynchronous))

    def pause(self, parts: list[TopicPartition]) -> None:
        self.calls.append(("pause", sorted((tp.topic, tp.partition) for tp in parts)))

    def resume(self, parts: list[TopicPartition]) -> None:
        self.calls.append(("resume", sorted((tp.topic, tp.partition) for tp in parts)))


class Registry:
    def __init__(self, *entries: ClusterClient) -> None:
        self.entries = {e.cluster_id: e for e in entries}

    def get(self, cluster_id: str) -> ClusterClient | None:
        return self.entries.get(cluster_id)


def entry(cluster_id: str, partitions: int = 2) -> ClusterClient:
    parts = [TopicPartition("orders", p) for p in range(partitions)]
    return ClusterClient(cluster_id, {}, RecordingConsumer(parts))


def guard(*entries: ClusterClient, enabled: bool = True) -> tuple[MoveGuard, Clock]:
    clock = Clock()
    g = MoveGuard(
        Registry(*entries),  # type: ignore[arg-type]
        enabled=enabled,
        linger_s=LINGER_S,
        pause_s=PAUSE_S,
        clock=clock,
    )
    return g, clock


def calls(e: ClusterClient) -> list[tuple[str, Any]]:
    consumer: RecordingConsumer = e.consumer
    return consumer.calls


def refused(code: int) -> tuple[KafkaError, list[TopicPartition]]:
    return KafkaError(code), [TopicPartition("orders", 0, 10)]


def test_nothing_is_committed_outside_a_move() -> None:
    a = entry("A")
    g, _ = guard(a)
    assert not g.active
    g.read(a)
    assert not g.tick()
    assert calls(a) == []


def test_nothing_is_committed_for_an_application_that_commits_itself() -> None:
    a = entry("A")
    g, _ = guard(a, enabled=False)
    g.route_changed()
    g.switched(draining=False)
    assert not g.active
    g.commit_answered(a.cluster_id, *refused(KafkaError.REBALANCE_IN_PROGRESS))
    assert calls(a) == []


def test_what_was_read_is_committed_at_the_next_call_during_a_move() -> None:
    a, b = entry("A"), entry("B")
    g, clock = guard(a, b)
    g.route_changed()
    assert g.active
    g.read(a)
    g.tick()
    assert calls(a) == [("commit", True)]  # asynchronous: the poll never waits on it
    assert calls(b) == []  # nothing read there
    clock.now += 1
    g.tick()
    assert calls(a) == [("commit", True)]  # nothing read since


def test_commits_of_one_client_are_spaced_by_the_minimum_interval() -> None:
    a = entry("A")
    g, clock = guard(a)
    g.route_changed()
    g.read(a)
    g.tick()
    g.read(a)
    clock.now += COMMIT_EVERY_S / 2
    g.tick()
    assert len(calls(a)) == 1
    clock.now += COMMIT_EVERY_S
    g.tick()
    assert len(calls(a)) == 2  # the read is still owed a commit


def test_nothing_new_to_commit_is_not_an_error() -> None:
    a = entry("A")
    a.consumer.nothing_stored = True
    g, _ = guard(a)
    g.route_changed()
    g.read(a)
    assert g.tick()


def test_the_guard_lingers_after_the_switch_then_turns_off() -> None:
    a = entry("A")
    g, clock = guard(a)
    g.route_changed()
    clock.now += 1000  # a drain may last: on until this member switched
    assert g.tick() and g.active
    g.switched(draining=False)
    clock.now += LINGER_S - 1
    assert g.tick() and g.active
    clock.now += 2
    assert not g.tick()
    assert not g.active
    g.read(a)
    g.tick()
    assert calls(a) == []


def test_the_guard_stays_on_while_another_topic_still_drains() -> None:
    a = entry("A")
    g, clock = guard(a)
    g.route_changed()
    g.switched(draining=True)
    clock.now += 10 * LINGER_S
    assert g.tick() and g.active


@pytest.mark.parametrize(
    "code",
    [KafkaError.REBALANCE_IN_PROGRESS, KafkaError.ILLEGAL_GENERATION, KafkaError.UNKNOWN_MEMBER_ID],
)
def test_a_commit_refused_in_a_rebalance_pauses_until_the_next_assignment(code: int) -> None:
    a, b = entry("A", 3), entry("B")
    g, _ = guard(a, b)
    g.route_changed()
    g.commit_answered(a.cluster_id, *refused(code))
    assert calls(a) == []  # the callback calls no client (it may run inside close())
    g.tick()
    assert calls(a) == [("pause", [("orders", 0), ("orders", 1), ("orders", 2)])]
    g.read(a)
    g.tick()
    assert ("commit", True) not in calls(a)  # nothing more is read there: nothing to commit
    g.commit_answered(a.cluster_id, *refused(code))
    g.tick()
    assert len(calls(a)) == 1  # paused once
    g.assigned(b)
    assert calls(b) == []
    g.assigned(a)
    assert calls(a)[-1] == ("resume", [("orders", 0), ("orders", 1), ("orders", 2)])


def test_a_refusal_named_on_a_partition_pauses_too() -> None:
    a = entry("A")
    g, _ = guard(a)
    g.route_changed()
    tp = TopicPartition("orders", 0, 10)
    # confluent-kafka reports per-partition errors on the TopicPartitions
    tp_error = type("TP", (), {"error": KafkaError(KafkaError.REBALANCE_IN_PROGRESS)})()
    g.commit_answered(a.cluster_id, None, [tp, tp_error])  # type: ignore[list-item]
    g.tick()
    assert calls(a)[0][0] == "pause"


def test_a_pause_ends_after_the_session_timeout_without_a_rebalance() -> None:
    a = entry("A")
    g, clock = guard(a)
    g.route_changed()
    g.switched(draining=False)
    g.commit_answered(a.cluster_id, *refused(KafkaError.REBALANCE_IN_PROGRESS))
    g.tick()
    clock.now += PAUSE_S - 0.5
    g.tick()
    assert calls(a)[-1][0] == "pause"
    clock.now += 1
    g.tick()
    assert calls(a)[-1] == ("resume", [("orders", 0), ("orders", 1)])
    clock.now += LINGER_S
    assert not g.tick()  # and the guard turns off only once nothing is paused


def test_other_commit_errors_do_not_pause() -> None:
    a = entry("A")
    g, _ = guard(a)
    g.route_changed()
    g.commit_answered(a.cluster_id, *refused(KafkaError.REQUEST_TIMED_OUT))
    g.commit_answered(a.cluster_id, None, [TopicPartition("orders", 0, 10)])
    g.tick()
    assert calls(a) == []


def test_refusals_outside_a_move_do_not_pause() -> None:
    a = entry("A")
    g, _ = guard(a)
    g.commit_answered(a.cluster_id, *refused(KafkaError.REBALANCE_IN_PROGRESS))
    g.route_changed()
    g.tick()
    assert calls(a) == []


def test_a_refusal_of_the_generation_that_ended_pauses_nothing() -> None:
    a = entry("A")
    g, _ = guard(a)
    g.route_changed()
    g.commit_answered(a.cluster_id, *refused(KafkaError.REBALANCE_IN_PROGRESS))
    g.assigned(a)  # the rebalance completed before the next call
    g.tick()
    assert calls(a) == []


def test_a_closing_consumer_gets_no_more_commits_nor_pauses() -> None:
    a = entry("A")
    g, _ = guard(a)
    g.route_changed()
    g.read(a)
    g.close()
    g.commit_answered(a.cluster_id, *refused(KafkaError.REBALANCE_IN_PROGRESS))
    assert not g.tick()
    assert calls(a) == []
