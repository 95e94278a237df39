"""When a client's own failover ends (issue #27 item 5): kbear._lost.LostWatch.release,
with fake clocks. Nothing moves back by itself; a decision of the operator
(``kbear.failover.decided``) taken after the client's failover ends it; split brain and
flapping cases."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

from kbear import _events
from kbear._lost import LostWatch
from kbear.config import Failover, MirrorKind, ReplicationPolicy


class Clocks:
    def __init__(self) -> None:
        self.mono = 0.0
        self.wall = 1_000.0


def config(decided: float | None, active: bool = False) -> Any:
    """east (standby west) with ``kbear.failover.decided`` at wall second ``decided``."""
    failover = Failover(
        "west",
        MirrorKind.NONE,
        "east",
        ReplicationPolicy.DEFAULT,
        None,
        active,
        None if decided is None else datetime.fromtimestamp(decided, UTC),
    )
    return SimpleNamespace(clusters={"east": SimpleNamespace(failover=failover), "west": SimpleNamespace()})


def lose(watch: LostWatch, clocks: Clocks) -> list[tuple[str, str]]:
    """east's brokers down for 1 s (after_ms 500): the failovers decided."""
    watch.observe("east", False)
    clocks.mono += 1.0
    clocks.wall += 1.0
    return watch.tick()


def new_watch(clocks: Clocks, current: list[Any]) -> LostWatch:
    return LostWatch(
        "producer",
        True,
        500,
        lambda: current[0],
        logging.getLogger("test"),
        clock=lambda: clocks.mono,
        wall=lambda: clocks.wall,
    )


def test_failover_ends_only_at_a_decision_taken_after_it(kbear_events: list[_events.Event]) -> None:
    clocks = Clocks()
    current = [config(None)]
    watch = new_watch(clocks, current)
    assert lose(watch, clocks) == [("east", "west")]
    assert watch.failed == {"east"}
    # east reachable again: recovered, reported, nothing moves back by itself
    watch.observe("east", True)
    clocks.mono += 1.0
    watch.tick()
    assert watch.release(config(None)) == [] and watch.failed == {"east"}
    # a fail-back written before this client's failover (its reload came later): no end
    assert watch.release(config(clocks.wall - 10)) == [] and watch.failed == {"east"}
    # the operator's fail-back after it: the failover ends
    assert watch.release(config(clocks.wall + 5)) == ["east"] and watch.failed == set()
    back = [(e.trigger, e.cluster, e.back) for e in kbear_events if isinstance(e, _events.FailedOver)]
    assert back == [("client", "east", False), ("client", "east", True)]


def test_lost_again_after_the_failback_fails_over_again_until_the_next_decision() -> None:
    """Flapping: a cluster that comes back, is failed back, and is lost again."""
    clocks = Clocks()
    current = [config(None)]
    watch = new_watch(clocks, current)
    assert lose(watch, clocks) == [("east", "west")]
    current[0] = config(clocks.wall + 1)  # the operator's fail-back, reloaded
    clocks.wall += 2
    assert watch.release(current[0]) == ["east"]
    # lost again (for this client): the policy started afresh, so it fails over again
    assert lose(watch, clocks) == [("east", "west")]
    # the same fail-back, seen again at later reloads, does not end this failover
    # (even with the operator's clock ahead of this client's: it was in force at the failover)
    clocks.wall -= 100
    assert watch.release(current[0]) == [] and watch.failed == {"east"}
    # a newer decision does
    assert watch.release(config(clocks.wall + 200)) == ["east"]


def test_an_operators_failover_takes_over_the_clients_own() -> None:
    """``kbear failover --apply`` after the client's own failover: the failover is the
    configuration's from then on (the routes stay on the standby); its fail-back
    (``kbear.failover.active`` removed) brings the client back as any reload."""
    clocks = Clocks()
    current = [config(None)]
    watch = new_watch(clocks, current)
    assert lose(watch, clocks) == [("east", "west")]
    assert watch.release(config(clocks.wall + 1, active=True)) == ["east"]
    assert watch.failed == set()


def test_report_only_clients_and_clients_that_did_not_fail_over_release_nothing() -> None:
    clocks = Clocks()
    current = [config(None)]
    watch = LostWatch("consumer", False, 500, lambda: current[0], logging.getLogger("test"))
    watch.observe("east", False)
    assert watch.release(config(clocks.wall + 1)) == [] and watch.failed == set()
