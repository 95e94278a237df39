"""Watching a move finish (private to ``kbear move --apply``): the old cluster's
end offsets of the topic stop moving (producers switched) and every group's lag
there is 0 (consumers drained and committed), and both stay so.

The loop is bounded by a timeout; ``clock`` and ``sleep`` are injectable.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from kbear.admin._facade import RoutedAdminClient
from kbear.admin._move_state import TopicState, lag, watermarks

#: reads a group's committed offsets: (cluster, group, topic, partitions, timeout_s)
#: -> partition -> offset (None: none), as ``CommittedOffsets.read`` (``_move_state``)
ReadCommitted = Callable[[str, str, str, int, float], dict[int, int | None]]


@dataclass(frozen=True)
class Watched:
    """A group to watch on its old cluster: the group, that cluster, the topic's name there."""

    group: str
    cluster: str
    topic: str


@dataclass
class WatchResult:
    """How the watch ended.

    Attributes:
        switched: True when the old cluster stayed quiet for the stable time.
        switch_s: seconds from the rule write to the start of the quiet period
            (the last message produced there, or the last lag seen); None if not switched.
        waited_s: seconds the watch ran.
        lags: group -> its last lag on the old cluster.
        produced_after_write: messages the old cluster received after the rule write.
    """

    switched: bool
    switch_s: float | None
    waited_s: float
    lags: dict[str, int] = field(default_factory=dict)
    produced_after_write: int = 0


def watch_switch(
    admin: RoutedAdminClient,
    source: TopicState,
    groups: list[Watched],
    *,
    written_at: float,
    stable_s: float,
    timeout_s: float,
    interval_s: float = 0.5,
    request_timeout_s: float = 10.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    read_committed: ReadCommitted,
    on_tick: Callable[[float, int, dict[str, int]], None] | None = None,
) -> WatchResult:
    """Poll the old cluster until it is quiet for ``stable_s`` seconds or ``timeout_s`` passes.

    Args:
        admin: the admin client (clusters addressed by id).
        source: the topic on its old cluster (partitions, high watermarks at the write).
        groups: the groups to wait for, each on its old cluster.
        written_at: ``clock()`` when the rule was written.
        stable_s, timeout_s, interval_s: seconds.
        request_timeout_s: per admin request.
        on_tick: called with (seconds since the write, old-cluster messages since
            the write, group -> lag) after each observation.
        read_committed: reads a group's committed offsets (:meth:`CommittedOffsets.read`).

    A failed observation (cluster not answering) is not quiet: the watch goes on
    until the timeout.
    """
    partitions = source.partitions or 0
    start_high = dict(source.high)
    last_high: dict[int, int] | None = None
    quiet_since: float | None = None
    # the previous observation's time, and whether every lag was 0 then
    previous: tuple[float, bool] | None = None
    result = WatchResult(False, None, 0.0)
    while True:
        now = clock()
        quiet = False
        drained = False
        try:
            low, high = watermarks(admin, source.cluster, source.topic, partitions, request_timeout_s)
            states = {(source.cluster, source.topic): replace(source, low=low, high=high)}
            result.lags = {}
            for watched in groups:  # a group may read the topic on another cluster (a rule of its own)
                where = (watched.cluster, watched.topic)
                if where not in states:
                    marks = watermarks(admin, watched.cluster, watched.topic, partitions, request_timeout_s)
                    states[where] = TopicState(watched.cluster, watched.topic, partitions, *marks)
                committed = read_committed(
                    watched.cluster, watched.group, watched.topic, partitions, request_timeout_s
                )
                result.lags[watched.group] = lag(committed, states[where])
            result.produced_after_write = sum(high[p] - start_high.get(p, 0) for p in high)
            drained = not any(result.lags.values())
            quiet = high == last_high and drained
            last_high = high
        except Exception:
            last_high = None
        if on_tick is not None:
            on_tick(now - written_at, result.produced_after_write, dict(result.lags))
        if not quiet:
            quiet_since = None
        elif quiet_since is None:
            # nothing produced since the previous observation: quiet since then if
            # every lag was 0 then too
            quiet_since = previous[0] if previous is not None and previous[1] else now
        previous = (now, drained)
        if quiet_since is not None and now - quiet_since >= stable_s:
            result.switched = True
            result.switch_s = max(0.0, quiet_since - written_at)
            result.waited_s = now - written_at
            return result
        if now - written_at >= timeout_s:
            result.waited_s = now - written_at
            return result
        sleep(interval_s)
