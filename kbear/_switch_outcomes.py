"""What the switch engine (:mod:`kbear._switch`) answers happened, for its driver to
tell under its own labels (:mod:`kbear._switch_report`): a drain begun or ended,
a failed probe, a timestamp start without timestamps. Plain values: times are the
engine's clock (monotonic seconds), routes are :class:`~kbear.Route`.
"""

from __future__ import annotations

from dataclasses import dataclass

from kbear._route import Route

__all__ = ["DrainBegun", "DrainEnded", "NoTimestamps", "Outcome", "ProbeFailed"]


@dataclass(frozen=True)
class DrainBegun:
    """Outcome: a drain of ``topic`` on ``old``'s cluster began at ``started`` (the
    engine's clock, seconds); ``next_move``: the topic moved again during a drain
    and this drains the route it had meanwhile."""

    topic: str
    old: Route
    started: float
    next_move: bool = False


@dataclass(frozen=True)
class DrainEnded:
    """Outcome: the drain of ``topic`` on ``old``'s cluster ended after ``duration_s``
    seconds (the engine's clock); ``timed_out``: by ``kbear.switch.drain.timeout.ms``
    or a dead cluster, not complete; ``dead``: ended at once because every broker of
    the old cluster was unreachable (:meth:`kbear._switch.SwitchEngine.cluster_down`);
    ``messages``: read from the old cluster during the drain."""

    topic: str
    old: Route
    duration_s: float
    timed_out: bool
    messages: int
    dead: bool = False


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


Outcome = DrainBegun | DrainEnded | ProbeFailed | NoTimestamps
