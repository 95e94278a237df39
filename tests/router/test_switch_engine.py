"""The switch engine (kbear._switch) driven through tables of event sequences, without any cluster.

Each case is a list of (time in s, event) rows; an event is one of

- ``("move", new)``: a reload routes topic ``t`` to cluster ``new`` (None: no route);
- ``("msg", cluster)``: a message of ``t`` was read on ``cluster``;
- ``("answer", progress)``: the last probe is answered with ``progress``
  (a dict of Progress fields without ``seq``);
- ``("step", expected)``: :meth:`SwitchEngine.step` returns ``expected``, a list
  of ``"probe A"`` / ``"switch A->B"`` / ``"switch A->B timeout"`` strings.
"""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END

from kbear._events import DrainFinished, DrainStarted
from kbear._switch import SwitchEngine, caught_up
from kbear._switch_types import (
    NoTimestamps,
    Probe,
    ProbeFailed,
    Progress,
    StartPlan,
    Switch,
)
from kbear.router import Route

T = "t"


def route(cluster: str | None) -> Route | None:
    return None if cluster is None else Route(cluster, T, T, f"{cluster}:9092", "r", {})


def describe(action: Probe | Switch) -> str:
    if isinstance(action, Probe):
        return f"probe {action.route.cluster_id}"
    new = "none" if action.new is None else action.new.cluster_id
    return f"switch {action.old.cluster_id}->{new}" + (" timeout" if action.timed_out else "")


def run(engine: SwitchEngine, rows: list[tuple[float, tuple[Any, ...]]], start: str = "A") -> list[str]:
    """Play ``rows``; return every action's description in order (``step`` rows are also checked)."""
    current = route(start)
    last_probe: Probe | None = None
    seen: list[str] = []
    for now, event in rows:
        kind = event[0]
        if kind == "move":
            assert current is not None
            actions = engine.route_changed(T, current, route(event[1]), now)
        elif kind == "msg":
            engine.message(T, event[1], 0, 1_000, now)
            actions = []
        elif kind == "answer":
            assert last_probe is not None, "answer without a probe"
            engine.progress(T, Progress(seq=last_probe.seq, **event[1]), now)
            actions = []
        else:
            actions = engine.step(now)
            assert [describe(a) for a in actions] == event[1], f"at t={now}"
        for action in actions:
            seen.append(describe(action))
            if isinstance(action, Probe):
                last_probe = action
            else:
                current = action.new
    return seen


DONE = {"marks": {0: (0, 10), 1: (5, 5)}, "positions": {0: 10}, "committed": {0: 10, 1: -1}}
BEHIND = {"marks": {0: (0, 10), 1: (0, 8)}, "positions": {0: 10}, "committed": {0: 10, 1: 3}}

CASES: dict[str, list[tuple[float, tuple[Any, ...]]]] = {
    "drain ends once idle and the group is at the end": [
        (0.0, ("move", "B")),
        (0.5, ("msg", "A")),
        (1.0, ("step", [])),  # not idle for 1 s yet
        (1.6, ("step", ["probe A"])),
        (1.7, ("step", [])),  # the probe is out
        (1.8, ("answer", DONE)),
        (1.8, ("step", ["switch A->B"])),
    ],
    "a member leaving mid-drain: its partition is behind, then read and committed by us": [
        (0.0, ("move", "B")),
        (1.1, ("step", ["probe A"])),
        (1.2, ("answer", BEHIND)),
        (1.3, ("step", [])),  # the next probe waits for the probe interval
        (1.7, ("step", ["probe A"])),
        (1.8, ("answer", {**BEHIND, "positions": {0: 10, 1: 8}})),  # read, not yet committed
        (1.9, ("step", [])),
        (2.3, ("step", ["probe A"])),
        (2.4, ("answer", {**BEHIND, "positions": {0: 10, 1: 8}, "committed": {0: 10, 1: 8}})),
        (2.4, ("step", ["switch A->B"])),
    ],
    "messages read while the probe was out: the answer is not trusted": [
        (0.0, ("move", "B")),
        (1.1, ("step", ["probe A"])),
        (1.2, ("msg", "A")),
        (1.3, ("answer", DONE)),
        (1.9, ("step", [])),  # idle again only at 2.2
        (2.3, ("step", ["probe A"])),
        (2.4, ("answer", DONE)),
        (2.4, ("step", ["switch A->B"])),
    ],
    "a message of the new cluster is no activity on the old one": [
        (0.0, ("move", "B")),
        (0.9, ("msg", "B")),
        (1.1, ("step", ["probe A"])),
    ],
    "a failed commit is retried, not taken for drained": [
        (0.0, ("move", "B")),
        (1.1, ("step", ["probe A"])),
        (
            1.2,
            (
                "answer",
                {**DONE, "error": "commit failed: Broker: Specified group generation id is not valid"},
            ),
        ),
        (1.3, ("step", [])),
        (1.8, ("step", ["probe A"])),
        (1.9, ("answer", DONE)),
        (1.9, ("step", ["switch A->B"])),
    ],
    "a partition ending in a transaction marker: only the position past it, committed, ends it": [
        (0.0, ("move", "B")),
        (1.1, ("step", ["probe A"])),
        (1.2, ("answer", {"marks": {0: (0, 11)}, "positions": {0: 11}, "committed": {0: 10}})),
        (1.3, ("step", [])),
        (1.7, ("step", ["probe A"])),
        (1.8, ("answer", {"marks": {0: (0, 11)}, "positions": {0: 11}, "committed": {0: 11}})),
        (1.8, ("step", ["switch A->B"])),
    ],
    "an empty partition with nothing committed is drained": [
        (0.0, ("move", "B")),
        (1.1, ("step", ["probe A"])),
        (1.2, ("answer", {"marks": {0: (7, 7)}, "positions": {}, "committed": {0: -1}})),
        (1.2, ("step", ["switch A->B"])),
    ],
    "a cluster that is down: probes fail until the drain times out": [
        (0.0, ("move", "B")),
        (1.1, ("step", ["probe A"])),
        (3.0, ("answer", {"error": "KafkaError{code=_TIMED_OUT}"})),
        (3.6, ("step", ["probe A"])),
        (10.0, ("step", ["switch A->B timeout"])),
        (10.1, ("step", [])),
    ],
    "moved twice within one drain: drained on A, then on B, then to C": [
        (0.0, ("move", "B")),
        (0.5, ("move", "C")),
        (1.1, ("step", ["probe A"])),
        (1.2, ("answer", DONE)),
        (1.2, ("step", ["switch A->B"])),
        (1.3, ("step", [])),  # B must be idle too: messages may have been produced there
        (2.3, ("step", ["probe B"])),
        (2.4, ("answer", DONE)),
        (2.4, ("step", ["switch B->C"])),
    ],
    "moved back during the drain: drained on B before returning to A": [
        (0.0, ("move", "B")),
        (0.5, ("move", "A")),
        (1.1, ("step", ["probe A"])),
        (1.2, ("answer", DONE)),
        (1.2, ("step", ["switch A->B"])),
        (2.3, ("step", ["probe B"])),
        (2.4, ("answer", DONE)),
        (2.4, ("step", ["switch B->A"])),
    ],
    "the same route given twice during a drain adds no move": [
        (0.0, ("move", "B")),
        (0.5, ("move", "B")),
        (1.1, ("step", ["probe A"])),
        (1.2, ("answer", DONE)),
        (1.2, ("step", ["switch A->B"])),
        (5.0, ("step", [])),
    ],
    "the route disappears: drained, then no route": [
        (0.0, ("move", None)),
        (1.1, ("step", ["probe A"])),
        (1.2, ("answer", DONE)),
        (1.2, ("step", ["switch A->none"])),
    ],
}


@pytest.mark.parametrize("name", list(CASES))
def test_drain_tables(name: str) -> None:
    engine = SwitchEngine("drain", idle_s=1.0, timeout_s=10.0, reset_to_end=True)
    run(engine, CASES[name])


def test_immediate_mode_switches_at_the_move() -> None:
    engine = SwitchEngine("immediate", idle_s=1.0, timeout_s=10.0)
    assert run(engine, [(0.0, ("move", "B")), (0.1, ("step", [])), (0.2, ("move", "A"))]) == [
        "switch A->B",
        "switch B->A",
    ]
    assert not engine.draining


def test_an_unchanged_route_starts_no_drain() -> None:
    engine = SwitchEngine("drain", idle_s=1.0)
    assert engine.route_changed(T, route("A"), route("A"), 0.0) == []  # type: ignore[arg-type]
    assert not engine.draining and engine.wake_at() is None


def test_a_stale_answer_is_ignored() -> None:
    engine = SwitchEngine("drain", idle_s=0.0, timeout_s=None)
    engine.route_changed(T, route("A"), route("B"), 0.0)  # type: ignore[arg-type]
    (probe,) = engine.step(1.0)
    assert isinstance(probe, Probe)
    engine.progress(T, Progress(seq=probe.seq + 7, **DONE), 1.1)
    assert engine.step(1.2) == []  # still waiting for its own answer
    engine.progress(T, Progress(seq=probe.seq, **DONE), 1.3)
    assert [describe(a) for a in engine.step(1.3)] == ["switch A->B"]


def test_no_timeout_never_gives_up() -> None:
    engine = SwitchEngine("drain", idle_s=0.0, timeout_s=None)
    engine.route_changed(T, route("A"), route("B"), 0.0)  # type: ignore[arg-type]
    for i in range(1, 50):
        for action in engine.step(i * 10.0):
            assert isinstance(action, Probe)
            engine.progress(T, Progress(seq=action.seq, error="down"), i * 10.0)
    assert engine.draining


def test_wake_at_names_the_next_decision() -> None:
    engine = SwitchEngine("drain", idle_s=2.0, timeout_s=30.0)
    engine.route_changed(T, route("A"), route("B"), 100.0)  # type: ignore[arg-type]
    assert engine.wake_at() == 102.0  # idle first
    engine.message(T, "A", 0, 0, 101.0)
    assert engine.wake_at() == 103.0
    (probe,) = engine.step(103.0)
    assert engine.wake_at() == 130.0  # only the timeout while the probe is out
    engine.progress(T, Progress(seq=probe.seq, **DONE), 103.5)
    assert engine.wake_at() == 0.0  # a switch is due now


@pytest.mark.parametrize(
    ("start", "plan"),
    [
        ("committed", StartPlan()),
        ("earliest", StartPlan(OFFSET_BEGINNING)),
        ("latest", StartPlan(OFFSET_END)),
    ],
)
def test_start_plans(start: str, plan: StartPlan) -> None:
    engine = SwitchEngine("immediate", start)
    (switch,) = engine.route_changed(T, route("A"), route("B"), 0.0)  # type: ignore[arg-type]
    assert isinstance(switch, Switch) and switch.start == plan


def test_timestamp_start_is_the_earliest_last_read_timestamp_less_the_margin() -> None:
    engine = SwitchEngine("immediate", "timestamp", timestamp_margin_ms=500)
    assert engine.tracks_timestamps
    engine.message(T, "A", 0, 10_000, 0.0)
    engine.message(T, "A", 1, 8_000, 0.0)
    engine.message(T, "A", 0, 12_000, 0.0)  # partition 0 now at 12 s
    engine.message(T, "B", 0, 1_000, 0.0)  # another cluster: not counted
    (switch,) = engine.route_changed(T, route("A"), route("B"), 0.0)  # type: ignore[arg-type]
    assert isinstance(switch, Switch) and switch.start == StartPlan(7_500, by_time=True)
    # nothing read on B yet: moving back starts from the committed offsets
    (back,) = engine.route_changed(T, route("B"), route("A"), 0.0)  # type: ignore[arg-type]
    assert isinstance(back, Switch) and back.start == StartPlan(500, by_time=True)


@pytest.mark.parametrize(
    ("reset_to_end", "expected"),
    [(True, True), (False, False)],
)
def test_caught_up_without_position_or_commit_follows_auto_offset_reset(
    reset_to_end: bool, expected: bool
) -> None:
    progress = Progress(seq=1, marks={0: (0, 5)}, positions={}, committed={0: -1})
    assert caught_up(progress, reset_to_end) is expected


def test_forget_drops_drains() -> None:
    engine = SwitchEngine("drain")
    engine.route_changed(T, route("A"), route("B"), 0.0)  # type: ignore[arg-type]
    assert engine.drains() == {T: (route("A"), route("B"))}
    engine.forget([T])
    assert not engine.draining and engine.step(100.0) == []


def test_a_finished_drain_reports_the_messages_read_on_the_old_cluster() -> None:
    """``DrainFinished.messages`` (the ``kbear_drain_messages`` metric): messages of the
    old cluster read during the drain; the new cluster's are not counted."""
    engine = SwitchEngine("drain", "committed", idle_s=1.0, timeout_s=30.0)
    run(
        engine,
        [
            (0.0, ("move", "B")),
            (0.1, ("msg", "A")),
            (0.2, ("msg", "A")),
            (0.3, ("msg", "B")),
            (0.4, ("msg", "A")),
            (1.5, ("step", ["probe A"])),
            (1.6, ("answer", DONE)),
            (1.6, ("step", ["switch A->B"])),
        ],
    )
    ended = [o for o in engine.outcomes() if isinstance(o, DrainFinished)]
    assert [(o.cluster, o.messages, o.timed_out) for o in ended] == [("A", 3, False)]


def test_the_engine_reports_what_happened_and_neither_logs_nor_emits(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Drains begun and ended (with their durations on the engine's clock, timed out or
    not), failed probes: returned by ``outcomes()`` once each, oldest first; no log
    record and no process-wide event (the drivers tell, under their own labels)."""
    from kbear import _events

    seen: list[_events.Event] = []
    _events.subscribe(seen.append)
    try:
        with caplog.at_level("DEBUG"):
            engine = SwitchEngine("drain", "timestamp", idle_s=1.0, timeout_s=10.0)
            run(
                engine,
                [
                    (100.0, ("move", "B")),
                    (100.5, ("move", "C")),  # moved again during the drain
                    (101.5, ("step", ["probe A"])),
                    (101.6, ("answer", {"error": "broker down"})),
                    (102.5, ("step", ["probe A"])),
                    (102.6, ("answer", DONE)),
                    (102.6, ("step", ["switch A->B"])),  # then B is drained before C
                    (112.6, ("step", ["switch B->C timeout"])),
                ],
            )
    finally:
        _events.unsubscribe(seen.append)
    assert seen == [] and caplog.records == []
    outcomes = engine.outcomes()
    assert outcomes == [
        DrainStarted("consumer", T, "A", 100.0),
        ProbeFailed(T, route("A"), "broker down"),  # type: ignore[arg-type]
        DrainFinished("consumer", T, "A", pytest.approx(2.6), False, 0),
        NoTimestamps(T, route("A")),  # type: ignore[arg-type]
        DrainStarted("consumer", T, "B", 102.6, next_move=True),
        DrainFinished("consumer", T, "B", pytest.approx(10.0), True, 0),
        NoTimestamps(T, route("B")),  # type: ignore[arg-type]
    ]
    assert engine.outcomes() == []


def test_a_resumed_drain_keeps_its_start_and_is_not_reported_as_begun() -> None:
    """``resume`` (the Spark source rebuilding its engine from a checkpoint): the drain
    goes on from its recorded start; its end reports the whole duration."""
    engine = SwitchEngine("drain", idle_s=0.0, timeout_s=None, first_probe_s=0.0)
    engine.resume(T, route("A"), [route("B")], started=40.0, now=100.0)  # type: ignore[arg-type]
    engine.resume("u", route("A"), [route("A")], started=40.0, now=100.0)  # type: ignore[arg-type]
    assert engine.drains() == {T: (route("A"), route("B"))}
    assert engine.drain_started(T) == 40.0 and engine.drain_started("u") is None
    assert engine.outcomes() == []
    (probe,) = engine.step(100.0)
    engine.progress(T, Progress(probe.seq, **DONE), 100.0)  # type: ignore[union-attr,arg-type]
    assert [describe(a) for a in engine.step(100.0)] == ["switch A->B"]
    (ended,) = engine.outcomes()
    assert ended == DrainFinished("consumer", T, "A", 60.0, False, 0)


def _landing_rows(new_ends_later: int, last_answer_at: float) -> list[tuple[float, tuple[Any, ...]]]:
    """A drain that reads messages on A after the move (a producer still writes
    there), then A idle and the group caught up at every probe."""
    done = {**DONE, "new_ends": 0}
    return [
        (0.0, ("move", "B")),
        (0.3, ("msg", "A")),
        (0.9, ("step", ["probe A"])),
        (0.95, ("answer", done)),
        (1.5, ("step", ["probe A"])),
        (last_answer_at, ("answer", {**DONE, "new_ends": new_ends_later})),
    ]


def test_a_drain_with_traffic_waits_for_the_new_cluster_to_receive_messages() -> None:
    """The old cluster is idle and committed at its end, but its producers' last
    messages may be in flight (a producer flushes the old cluster before writing to
    the new one): the drain ends once the new cluster's end offsets grew."""
    engine = SwitchEngine(idle_s=0.5)
    seen = run(engine, [*_landing_rows(0, 1.55), (2.1, ("step", ["probe A"]))])
    assert seen[-1] == "probe A"  # new cluster unchanged: not yet
    engine = SwitchEngine(idle_s=0.5)
    seen = run(engine, [*_landing_rows(7, 1.55), (1.6, ("step", ["switch A->B"]))])
    assert seen[-1] == "switch A->B"


def test_a_drain_with_traffic_ends_after_five_idle_periods_without_new_messages() -> None:
    """Producers that stopped at the move never write to the new cluster: the drain
    ends once the old cluster stayed idle LANDED_IDLE_FACTOR x idle."""
    engine = SwitchEngine(idle_s=0.5)
    rows = [*_landing_rows(0, 1.55)]
    for t in (2.1, 2.7):  # idle since 0.3: 5 x 0.5 s reached at 2.8, not yet
        rows += [(t, ("step", ["probe A"])), (t + 0.05, ("answer", {**DONE, "new_ends": 0}))]
    rows += [
        (3.3, ("step", ["probe A"])),
        (3.35, ("answer", {**DONE, "new_ends": 0})),
        (3.4, ("step", ["switch A->B"])),
    ]
    assert run(engine, rows)[-1] == "switch A->B"


def test_a_drain_without_traffic_or_new_cluster_figures_ends_as_before() -> None:
    """No message read on A during the drain and A's end offsets unchanged: nothing
    was in flight; a driver that does not measure the new cluster (new_ends None,
    the Spark source) gets the idle check alone."""
    all_mine = {**DONE, "positions": {0: 10, 1: 5}, "new_ends": 0}  # this member reads both partitions
    for answer in (all_mine, DONE):
        engine = SwitchEngine(idle_s=0.5)
        rows = [(0.0, ("move", "B")), (0.6, ("step", ["probe A"])), (0.65, ("answer", answer))]
        assert run(engine, [*rows, (0.7, ("step", ["switch A->B"]))])[-1] == "switch A->B"
    engine = SwitchEngine(idle_s=0.5)  # traffic, but no figures of the new cluster
    rows = [(0.0, ("move", "B")), (0.3, ("msg", "A")), (0.9, ("step", ["probe A"])), (0.95, ("answer", DONE))]
    assert run(engine, [*rows, (1.0, ("step", ["switch A->B"]))])[-1] == "switch A->B"


def test_a_member_without_every_partition_waits_for_steady_end_offsets() -> None:
    """A member reading few or none of the old cluster's partitions is idle at once,
    and the group's committed offsets (read after the watermarks) can be at the end
    while a producer still writes there: its drain ends only once the old cluster's
    end offsets stayed the same between two probes (then, with traffic seen, once
    the new cluster received messages)."""
    none_mine = {"marks": {0: (0, 10)}, "positions": {}, "committed": {0: 10}, "new_ends": 0}
    grown = {"marks": {0: (0, 14)}, "positions": {}, "committed": {0: 14}, "new_ends": 0}
    engine = SwitchEngine(idle_s=0.5)
    rows = [
        (0.0, ("move", "B")),
        (0.6, ("step", ["probe A"])),
        (0.65, ("answer", none_mine)),  # first probe: nothing to compare with
        (1.2, ("step", ["probe A"])),
        (1.25, ("answer", grown)),  # a producer still writes to A
        (1.8, ("step", ["probe A"])),
        (1.85, ("answer", grown)),  # steady, but traffic: the new cluster has not grown
        (2.4, ("step", ["probe A"])),
        (2.45, ("answer", {**grown, "new_ends": 3})),  # the producer moved
        (2.5, ("step", ["switch A->B"])),
    ]
    assert run(engine, rows)[-1] == "switch A->B"
