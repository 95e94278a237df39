"""The lost-cluster policy (issue #27 item 2): kbear._health, with a fake clock."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from kbear._health import ClusterHealth, HealthBoard, reachable_from_error, reachable_from_stats


def test_lost_only_after_unreachable_for_after_ms() -> None:
    board = HealthBoard(after_ms=1000)
    board.observe("east", False, 0)
    assert board.health("east", 500) is ClusterHealth.SUSPECT
    board.observe("east", False, 999)  # a repeated signal does not restart the clock
    assert board.tick(999) == []
    assert board.lost() == frozenset()
    t = board.tick(1000)
    assert [(x.cluster, x.lost, x.for_ms) for x in t] == [("east", True, 1000)]
    assert board.lost() == {"east"}
    assert board.tick(5000) == []  # declared once


def test_a_break_restarts_the_clock() -> None:
    board = HealthBoard(after_ms=1000)
    board.observe("east", False, 0)
    board.observe("east", True, 900)  # reachable again before after_ms: never lost
    assert board.health("east", 950) is ClusterHealth.UP
    board.observe("east", False, 1000)
    board.observe("east", False, 2500)  # observed after after.ms: still declared by tick, once
    assert board.tick(1999) == []
    assert [t.lost for t in board.tick(2000)] == [True]


def test_unknown_observations_only_let_time_pass() -> None:
    board = HealthBoard(after_ms=100)
    board.observe("east", False, 0)
    board.observe("east", None, 150)
    assert [t.lost for t in board.tick(150)] == [True]
    board.observe("west", None, 150)
    assert board.tick(150) == []
    assert board.health("west", 150) is ClusterHealth.UP


def test_recovery_needs_reachable_for_recover_ms_without_a_break() -> None:
    board = HealthBoard(after_ms=100, recover_ms=1000)
    board.observe("east", False, 0)
    board.tick(100)
    board.observe("east", True, 200)
    assert board.tick(200) == []
    assert board.health("east", 300) is ClusterHealth.RECOVERING
    assert board.lost() == {"east"}  # still lost while recovering
    board.observe("east", False, 900)  # flaps: lost again, the recovery clock restarts
    assert board.health("east", 1300) is ClusterHealth.LOST
    board.observe("east", True, 1400)
    assert board.tick(2399) == []
    t = board.tick(2400)
    assert [(x.lost, x.for_ms) for x in t] == [(False, 1000)]
    assert board.health("east", 2400) is ClusterHealth.UP and board.lost() == frozenset()


def test_a_slow_cluster_that_stays_reachable_is_never_lost() -> None:
    board = HealthBoard(after_ms=100)
    for now in range(0, 10_000, 50):
        board.observe("east", True, now)
        assert board.tick(now) == []
    assert board.health("east", 10_000) is ClusterHealth.UP


def test_recover_defaults_to_after_and_durations_are_checked() -> None:
    assert HealthBoard(after_ms=250).recover_ms == 250
    with pytest.raises(ValueError, match="after_ms=-1"):
        HealthBoard(after_ms=-1)


def test_signals_from_librdkafka() -> None:
    assert reachable_from_error(KafkaError._ALL_BROKERS_DOWN) is False
    assert reachable_from_error(KafkaError._TRANSPORT) is None
    up = {"brokers": {"a:1/1": {"state": "UP"}, "b:2/2": {"state": "DOWN"}}}
    down = {"brokers": {"a:1/1": {"state": "CONNECT"}, "b:2/2": {"state": "DOWN"}}}
    idle = {"brokers": {"a:1/bootstrap": {"state": "INIT"}}}
    assert reachable_from_stats(up) is True
    assert reachable_from_stats(down) is False
    assert reachable_from_stats(idle) is None
    assert reachable_from_stats({}) is None
