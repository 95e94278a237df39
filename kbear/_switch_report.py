"""Telling what the switch engine reports: logs and events, under the driver's labels.

Responsible for: turning the engine's outcomes (:meth:`kbear._switch.SwitchEngine.outcomes`)
into log records (with :mod:`kbear._events`' structured fields) on the driver's
logger, and emitting its drain events (:class:`~kbear._events.DrainStarted`,
:class:`~kbear._events.DrainFinished`, of the engine's ``kind``). The engine does
neither itself: the blocking consumer (``kind="consumer"``; the asyncio
consumer drives it), the share consumer and the Spark source (``kind="spark"``)
call :func:`tell`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from kbear import _events
from kbear._events import DrainFinished, DrainStarted
from kbear._switch_types import NoTimestamps, Outcome, ProbeFailed

__all__ = ["tell"]

#: how the end of a drain is logged, by its reason (``reason`` of the record's fields)
_ENDED = {
    "dead": (
        logging.WARNING,
        "kbear: every broker of cluster %(cluster)r is unreachable: the drain of topic %(topic)r ends "
        "at once, switching with what was read",
    ),
    "timeout": (
        logging.WARNING,
        "kbear: kbear.switch.drain.timeout.ms reached for topic %(topic)r on cluster %(cluster)r; "
        "switching with what was read",
    ),
    "complete": (logging.INFO, "kbear: drain of topic %(topic)r on cluster %(cluster)r complete"),
}


def tell(outcomes: Iterable[Outcome], log: logging.Logger) -> None:
    """Log each outcome on ``log`` and emit the drain events (of the engine's ``kind``:
    ``"consumer"``, ``"spark"``, the ``kind`` label of the drain metrics
    ``kbear_drains_started``, ``kbear_drain_duration_seconds``, ...).

    Args:
        outcomes: what the engine reported, oldest first.
        log: the driver's logger (``kbear.consumer``, ``kbear.spark``).
    """
    for outcome in outcomes:
        topic = outcome.topic
        cluster = (
            outcome.cluster if isinstance(outcome, DrainStarted | DrainFinished) else outcome.old.cluster_id
        )
        if isinstance(outcome, DrainStarted):
            log.info(
                "kbear: draining topic %r on cluster %r before the %s",
                topic,
                cluster,
                "next move" if outcome.next_move else "move",
                extra=_events.fields("drain_started", topic, cluster=cluster),
            )
            _events.emit(outcome)
        elif isinstance(outcome, DrainFinished):
            reason = "dead" if outcome.dead else "timeout" if outcome.timed_out else "complete"
            level, text = _ENDED[reason]
            extra = _events.fields("drain_finished", topic, cluster=cluster, reason=reason)
            log.log(level, text, {"topic": topic, "cluster": cluster}, extra=extra)
            _events.emit(outcome)
        elif isinstance(outcome, ProbeFailed):
            log.warning("kbear: drain of topic %r on cluster %r: %s; retrying", topic, cluster, outcome.error)
        elif isinstance(outcome, NoTimestamps):
            log.info("kbear: nothing consumed of %r on %r: starting from committed offsets", topic, cluster)
