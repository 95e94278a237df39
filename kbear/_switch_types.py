"""What the switch engine (:mod:`kbear._switch`) and its drivers exchange: plain values.

Actions the engine answers (:class:`Probe`, :class:`Switch`, with the
:class:`StartPlan` of a moved topic), the observation a driver feeds back
(:class:`Progress`, the answer to a probe), and the outcomes the engine reports
for its driver to tell (:class:`~kbear._events.DrainStarted`,
:class:`~kbear._events.DrainFinished`: the events themselves, of the engine's
``kind``; :class:`ProbeFailed`, :class:`NoTimestamps`; :mod:`kbear._switch_report`).
Times are on the engine's clock (monotonic seconds).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kbear._events import DrainFinished, DrainStarted
from kbear._route import Route


@dataclass(frozen=True)
class StartPlan:
    """Where a moved topic starts on its new cluster.

    ``offset`` is None for the group's committed offsets (else ``auto.offset.reset``),
    ``OFFSET_BEGINNING`` / ``OFFSET_END``, or, with ``by_time``, a timestamp in
    ms since the epoch to be turned into offsets (``offsets_for_times``). With
    ``translated``, per-partition offsets are found at assignment from ``source``
    and ``upstream`` (the consumer's :mod:`kbear.consumer._translated`).
    """

    offset: int | None = None
    by_time: bool = False
    #: ``translated``: from the old route ``source`` and the group's committed offsets
    #: there at the switch, ``upstream`` (partition -> offset; empty: it did not answer)
    translated: bool = False
    source: Route | None = None
    upstream: Mapping[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Probe:
    """Action: measure ``topic`` (logical name) on the cluster of ``route`` and
    answer :meth:`SwitchEngine.progress` with a :class:`Progress` carrying ``seq``;
    ``new``: the route the topic goes to after the drain (None: none), whose end
    offsets the answer carries first (:attr:`Progress.new_ends`)."""

    topic: str
    route: Route
    seq: int
    new: Route | None = None


@dataclass(frozen=True)
class Switch:
    """Action: stop reading ``topic`` on ``old``'s cluster (commit what was read
    there first) and read it on ``new``'s from ``start`` (``new`` None: the topic
    has no route any more: stop reading it). ``timed_out``: the drain ended by
    ``kbear.switch.drain.timeout.ms``, not because it was complete."""

    topic: str
    old: Route
    new: Route | None
    start: StartPlan
    timed_out: bool = False


@dataclass(frozen=True)
class Progress:
    """Observation: the answer to :class:`Probe` ``seq``.

    Args:
        marks: partition -> (low, high) watermark offsets on the old cluster.
        positions: partition -> this reader's next offset (-1: none yet), for the
            partitions it has (for the log; only committed offsets decide).
        committed: partition -> the group's committed offset (-1: none), for
            every partition of ``marks``, read after this reader's own commit.
        error: why the probe could not be completed (its own commit failed, the
            cluster did not answer): the topic is not drained, a later probe retries.
        new_ends: the sum of the topic's high watermarks on the cluster of
            :attr:`Probe.new`, read before ``marks`` (None: not measured, or that
            cluster did not answer). Once it grows during a drain, the producers
            have moved: what they sent to the old cluster is in ``marks``.
    """

    seq: int
    marks: Mapping[int, tuple[int, int]] = field(default_factory=dict)
    positions: Mapping[int, int] = field(default_factory=dict)
    committed: Mapping[int, int] = field(default_factory=dict)
    error: str | None = None
    new_ends: int | None = None


Action = Probe | Switch


# --------------------------------------------------------------------------- outcomes


@dataclass(frozen=True)
class ProbeFailed:
    """Outcome: a probe of the drain of ``topic`` on ``old``'s cluster could not be
    completed (``error``); a later probe retries."""

    topic: str
    old: Route
    error: str


@dataclass(frozen=True)
class NoTimestamps:
    """Outcome: ``kbear.switch.start=timestamp``, but nothing of ``topic`` was read on
    ``old``'s cluster: the topic starts from the committed offsets on the new one."""

    topic: str
    old: Route


Outcome = DrainStarted | DrainFinished | ProbeFailed | NoTimestamps
