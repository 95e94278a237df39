"""A member whose commit the group refused as its partitions left it goes on from its
own positions when the next assignment gives them back (kbear.consumer._rebalance),
driven without a cluster through the rebalance callbacks kbear hands to a cluster's
client.

What a user relies on (issue #11): on brokers that refuse the commit made in
``on_revoke`` while the group rebalances (librdkafka's mock), a member that
keeps its partitions across the rebalance does not read again what it read before
it (the group's committed offset is older); nothing is skipped either: it starts
exactly after the last message it read.
"""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, OFFSET_INVALID, KafkaError, TopicPartition

from kbear._switch_types import StartPlan
from kbear.consumer._cluster import ClusterClient
from kbear.consumer._rebalance import Rebalancer


class Member:
    """A cluster client's calls inside rebalance callbacks: positions reached, and a
    group that accepts or refuses commits. Every commit kbear makes here is sent
    without waiting; :meth:`answer` delivers the answers as librdkafka's
    ``on_commit`` does (before the next assignment's callback)."""

    def __init__(self, positions: dict[tuple[str, int], int], refuse: int | None) -> None:
        self.positions = positions
        self.refuse = refuse
        self.assigned: list[list[tuple[str, int, int]]] = []
        self.committed: list[list[tuple[str, int, int]]] = []  # accepted
        self.sent: list[list[tuple[str, int, int]]] = []  # sent, not answered yet

    def position(self, parts: list[TopicPartition]) -> list[TopicPartition]:
        pos = self.positions
        return [TopicPartition(tp.topic, tp.partition, pos[tp.topic, tp.partition]) for tp in parts]

    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> list[TopicPartition]:
        assert asynchronous, "kbear's own commits never wait"
        self.sent.append([(tp.topic, tp.partition, tp.offset) for tp in offsets])
        return offsets

    def answer(self, rebalancer: Rebalancer) -> None:
        """The group answers every commit sent: refused (``refuse``) or accepted."""
        for sent in self.sent:
            err = None if self.refuse is None else KafkaError(self.refuse)
            if err is None:
                self.committed.append(sent)
            rebalancer.commit_answered("A", err, [TopicPartition(t, p, o) for t, p, o in sent])
        self.sent = []

    def assign(self, parts: list[TopicPartition]) -> None:
        self.assigned.append([(tp.topic, tp.partition, tp.offset) for tp in parts])

    incremental_assign = assign


def given(partitions: list[int], topic: str = "orders") -> list[TopicPartition]:
    """An assignment as librdkafka hands it to on_assign (no start offset chosen)."""
    return [TopicPartition(topic, p, OFFSET_INVALID) for p in partitions]


def member(refuse: int | None, **native: Any) -> tuple[Rebalancer, ClusterClient, Member]:
    consumer = Member({("orders", 0): 120, ("orders", 1): 75, ("orders", 2): 40}, refuse)
    entry = ClusterClient("A", {}, consumer)
    return Rebalancer(owner=None, native=native), entry, consumer


def rebalance(rebalancer: Rebalancer, entry: ClusterClient, revoked: list[int], assigned: list[int]) -> None:
    callbacks = rebalancer.callbacks_for(entry)
    callbacks["on_revoke"](entry.consumer, given(revoked))
    entry.consumer.answer(rebalancer)
    callbacks["on_assign"](entry.consumer, given(assigned))


@pytest.mark.parametrize("refusal", [KafkaError.REBALANCE_IN_PROGRESS, KafkaError.ILLEGAL_GENERATION])
def test_partitions_given_back_resume_at_this_members_positions(refusal: int) -> None:
    rebalancer, entry, consumer = member(refusal)
    rebalance(rebalancer, entry, revoked=[0, 1, 2], assigned=[0, 2])
    assert consumer.assigned == [[("orders", 0, 120), ("orders", 2, 40)]]


def test_partitions_not_given_back_are_left_to_their_new_owner() -> None:
    rebalancer, entry, consumer = member(KafkaError.REBALANCE_IN_PROGRESS)
    rebalance(rebalancer, entry, revoked=[0, 1], assigned=[2])
    # librdkafka assigns partition 2 itself (from the committed offset): nothing to change
    assert consumer.assigned == []


def test_partitions_that_went_to_other_members_are_committed_in_the_new_generation() -> None:
    """The group refused the commit of this member's positions as they left it; in
    the new generation (on_assign) it commits them, so that the new owner of a
    partition that went to another member starts there, not at the older committed
    offset (that owner reads the group's offsets again a moment after its
    assignment: tests/consumer/test_holding.py)."""
    rebalancer, entry, consumer = member(KafkaError.REBALANCE_IN_PROGRESS)
    rebalance(rebalancer, entry, revoked=[0, 1, 2], assigned=[0])
    assert len(consumer.sent) == 1
    assert {("orders", 1, 75), ("orders", 2, 40)} <= set(consumer.sent[0])
    assert consumer.assigned == [[("orders", 0, 120)]]
    rebalancer, entry, consumer = member(None)  # accepted on revoke: nothing more to send
    rebalance(rebalancer, entry, revoked=[0, 1, 2], assigned=[0])
    assert consumer.sent == []


def test_partitions_given_back_are_committed_at_this_members_positions_too() -> None:
    """A partition given back is read on from this member's position, not from the
    group's older committed offset; that position is committed in the new
    generation: when nothing newer arrives there before the next rebalance (no
    message to commit), the partition's next owner, this member included, must not
    read again what this member read before the refused commit (seen on the mock's
    classic protocol: 123 messages of a group of 3 read twice by the same member)."""
    rebalancer, entry, consumer = member(KafkaError.REBALANCE_IN_PROGRESS)
    rebalance(rebalancer, entry, revoked=[0, 1], assigned=[0, 1])
    assert consumer.assigned == [[("orders", 0, 120), ("orders", 1, 75)]]
    assert consumer.sent == [[("orders", 0, 120), ("orders", 1, 75)]]


def test_the_positions_serve_the_next_assignment_only() -> None:
    rebalancer, entry, consumer = member(KafkaError.REBALANCE_IN_PROGRESS)
    rebalance(rebalancer, entry, revoked=[0, 1], assigned=[1])
    callbacks = rebalancer.callbacks_for(entry)
    callbacks["on_assign"](consumer, given([0]))  # a later generation: others may have read 0
    assert consumer.assigned == [[("orders", 1, 75)]]


def test_an_accepted_commit_leaves_the_assignment_to_the_group() -> None:
    rebalancer, entry, consumer = member(None)
    rebalance(rebalancer, entry, revoked=[0, 1], assigned=[0, 1])
    assert consumer.committed == [[("orders", 0, 120), ("orders", 1, 75)]]
    assert consumer.assigned == []  # the committed offsets are the positions already


def test_incremental_protocols_keep_what_stays_and_resume_nothing() -> None:
    rebalancer, entry, consumer = member(KafkaError.REBALANCE_IN_PROGRESS, **{"group.protocol": "consumer"})
    rebalance(rebalancer, entry, revoked=[1], assigned=[1])
    assert consumer.assigned == []


def test_a_start_chosen_for_a_moved_topic_wins() -> None:
    rebalancer, entry, consumer = member(KafkaError.REBALANCE_IN_PROGRESS)
    callbacks = rebalancer.callbacks_for(entry)
    callbacks["on_revoke"](consumer, given([0, 1]))
    consumer.answer(rebalancer)
    rebalancer.start_at[("A", "orders")] = StartPlan(offset=OFFSET_BEGINNING)
    callbacks["on_assign"](consumer, given([0, 1]))
    assert consumer.assigned == [[("orders", 0, OFFSET_BEGINNING), ("orders", 1, OFFSET_BEGINNING)]]


def test_without_auto_commit_the_application_decides() -> None:
    rebalancer, entry, _ = member(KafkaError.REBALANCE_IN_PROGRESS, **{"enable.auto.commit": False})
    assert "on_revoke" not in rebalancer.callbacks_for(entry)


def test_a_member_that_read_nothing_since_it_resumed_commits_where_it_resumed() -> None:
    """librdkafka knows no position of a partition before its first message: a
    member that resumed at its own positions and read nothing more before the next
    revocation (the producers stopped) still commits them then, or the partition's
    next owner reads again from the older committed offset what this member read
    before the refused commit (seen on the mock's classic protocol: 537 messages of
    a group of 2 read twice by the same member, when the new generation's commit of
    those positions was refused too, the group rebalancing again at once)."""
    rebalancer, entry, consumer = member(KafkaError.REBALANCE_IN_PROGRESS)
    rebalance(rebalancer, entry, revoked=[0, 1], assigned=[0, 1])
    consumer.positions = {("orders", 0): OFFSET_INVALID, ("orders", 1): 80}  # read on 1 only
    consumer.refuse = None
    consumer.sent.clear()  # the new generation's commit of the positions (answered or not)
    rebalancer.callbacks_for(entry)["on_revoke"](consumer, given([0, 1]))
    consumer.answer(rebalancer)
    assert consumer.committed == [[("orders", 0, 120), ("orders", 1, 80)]]


def test_a_resumed_position_serves_the_next_revocation_only() -> None:
    rebalancer, entry, consumer = member(KafkaError.REBALANCE_IN_PROGRESS)
    rebalance(rebalancer, entry, revoked=[0, 1], assigned=[0, 1])
    consumer.refuse = None
    rebalance(rebalancer, entry, revoked=[0, 1], assigned=[0, 1])  # committed 120, 75 here
    consumer.positions = {("orders", 0): OFFSET_INVALID, ("orders", 1): OFFSET_INVALID}
    consumer.committed.clear()
    consumer.sent.clear()
    rebalancer.callbacks_for(entry)["on_revoke"](consumer, given([0, 1]))
    consumer.answer(rebalancer)
    assert consumer.committed == []  # the group's offsets stand: nothing read since


def test_the_commit_as_partitions_leave_never_waits() -> None:
    """The commit a member makes as its partitions leave is sent without waiting
    (a synchronous one held poll(0.1) for 16 s when a broker of the old cluster
    died mid-move): on_revoke returns before the group answered it."""
    rebalancer, entry, consumer = member(KafkaError.REBALANCE_IN_PROGRESS)
    rebalancer.callbacks_for(entry)["on_revoke"](consumer, given([0, 1]))
    assert consumer.sent == [[("orders", 0, 120), ("orders", 1, 75)]] and consumer.committed == []


def test_the_answer_of_another_commit_remembers_nothing() -> None:
    rebalancer, entry, consumer = member(KafkaError.REBALANCE_IN_PROGRESS)
    callbacks = rebalancer.callbacks_for(entry)
    callbacks["on_revoke"](consumer, given([0, 1]))
    # a refusal of a commit of other offsets (the move guard's, sent earlier)
    rebalancer.commit_answered("A", KafkaError(KafkaError.REBALANCE_IN_PROGRESS), given([0]))
    callbacks["on_assign"](consumer, given([0, 1]))
    assert consumer.assigned == []  # the revocation's commit was not answered (refused) yet


def test_a_refusal_answered_after_the_next_assignment_is_forgotten() -> None:
    """The answer to a revocation's commit that arrives once the next assignment was
    served belongs to the generation that ended: it must not set where a later
    assignment resumes."""
    rebalancer, entry, consumer = member(KafkaError.REBALANCE_IN_PROGRESS)
    callbacks = rebalancer.callbacks_for(entry)
    callbacks["on_revoke"](consumer, given([0, 1]))
    callbacks["on_assign"](consumer, given([0, 1]))  # before the answer
    consumer.answer(rebalancer)
    callbacks["on_assign"](consumer, given([0, 1]))  # a later generation
    assert consumer.assigned == []


@pytest.mark.parametrize("app_raises", [False, True])
def test_lost_partitions_reach_the_applications_on_lost_and_are_forgotten_as_revoked_ones(
    app_raises: bool,
) -> None:
    """``on_lost`` gets the consumer and the logical names, its partition calls address
    the lost cluster, and kbear forgets the partitions (the acknowledgement layer's
    revoked hook) even when the application's callback raises."""
    owner = object()
    rebalancer = Rebalancer(owner=owner, native={})
    entry = ClusterClient("A", {}, Member({}, None))
    entry.logical["orders.v2"] = "orders"
    seen: list[tuple[object, list[tuple[str, int]], object]] = []
    forgotten: list[tuple[str, list[tuple[str, int]]]] = []

    def on_lost(consumer: object, partitions: list[TopicPartition]) -> None:
        seen.append((consumer, [(tp.topic, tp.partition) for tp in partitions], rebalancer.current))
        if app_raises:
            raise RuntimeError("the application's on_lost failed")

    rebalancer.callbacks = {"on_lost": on_lost}
    rebalancer.revoked_hook = lambda e, parts: forgotten.append(
        (e.cluster_id, [(tp.topic, tp.partition) for tp in parts])
    )
    lost = rebalancer.callbacks_for(entry)["on_lost"]
    if app_raises:
        with pytest.raises(RuntimeError, match="on_lost failed"):
            lost(entry.consumer, [TopicPartition("orders.v2", 1)])
    else:
        lost(entry.consumer, [TopicPartition("orders.v2", 1)])
    assert seen == [(owner, [("orders", 1)], entry)]
    assert forgotten == [("A", [("orders.v2", 1)])]
    assert rebalancer.current is None
