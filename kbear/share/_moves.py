"""Live moves of a routed share consumer's topics (private).

The switch engine (:mod:`kbear._switch`) decides; this driver feeds it and
carries out its actions in the caller's thread, at the start of each call that
may read (:meth:`~kbear.RoutedShareConsumer.poll`):

- a reload gave a subscribed topic another route: :meth:`SwitchEngine.route_changed`;
- a record of a draining topic was acquired on its old cluster: activity
  (:meth:`SwitchEngine.message`), so the drain waits until the old cluster
  stays quiet ``kbear.switch.drain.idle.ms``: records still available there
  (released by a member, redelivered after a lock expired) are read first;
- a :class:`~kbear._switch_types.Probe`: the acknowledgements of the old cluster are
  committed (``commit_sync``: in ``implicit`` mode the last batch is accepted,
  in ``explicit`` mode every record was acknowledged before this poll); the
  drain ends once that commit succeeded. A share group has no offsets a member
  can compare with the end of the log (confluent-kafka has no admin call for
  share-group offsets): "caught up" is this member's view, that the old cluster
  gave it nothing for the idle time and holds none of its acknowledgements;
- a :class:`~kbear._switch_types.Switch`: the topic leaves the old cluster's
  subscription (its acknowledgements committed first) and joins the new
  cluster's, where the share group starts per its own ``share.auto.offset.reset``
  on that cluster (a share consumer cannot seek: ``kbear.switch.start`` does
  not apply).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from kbear._modes import SwitchStart
from kbear._route import NoRouteError, Route
from kbear._switch import SwitchEngine
from kbear._switch_report import tell
from kbear._switch_types import Action, Probe, Progress
from kbear._switch_types import Switch as SwitchAction
from kbear.settings import KBearSettings
from kbear.share._clusters import ShareCluster

log = logging.getLogger("kbear.share")

#: how long a probe's commit of the old cluster's acknowledgements may take (seconds)
PROBE_COMMIT_TIMEOUT_S = 10.0


def share_engine(settings: KBearSettings) -> SwitchEngine:
    """The switch engine of a routed share consumer (``kbear.switch.mode``, the
    drain's idle time and timeout; the start is the share group's own)."""
    return SwitchEngine(
        settings.switch_mode,
        SwitchStart.COMMITTED,
        idle_s=settings.drain_idle_ms / 1000.0,
        timeout_s=settings.drain_timeout_ms / 1000.0,
        kind="share consumer",
    )


@dataclass(eq=False)
class ShareMoves:
    """The moves of one routed share consumer's topics (see the module docstring).

    Args:
        engine: the switch engine.
        lookup: ``lookup(topic)``: the topic's route now (raises NoRouteError).
        reader: ``reader(topic)``: the share consumer reading ``topic`` now, or None.
        switch: ``switch(topic, new)``: read ``topic`` on ``new``'s cluster (None:
            nowhere) instead of where it is read now.
    """

    engine: SwitchEngine
    lookup: Callable[[str], Route]
    reader: Callable[[str], ShareCluster | None]
    switch: Callable[[str, Route | None], None]

    pending: bool = False  # set by the reloading thread

    def apply(self, routes: dict[str, Route]) -> None:
        """Apply a pending reload to ``routes`` (logical topic -> route read now),
        then carry out what the engine says is due now."""
        now = time.monotonic()
        actions: list[Action] = []
        if self.pending:
            self.pending = False
            for topic, old in list(routes.items()):
                try:
                    new: Route | None = self.lookup(topic)
                except NoRouteError:
                    new = None
                actions.extend(self.engine.route_changed(topic, old, new, now))
        actions.extend(self.engine.step(now))
        self._carry_out(actions)
        tell(self.engine.outcomes(), log)

    def acquired(self, topic: str, cluster_id: str, partition: int) -> None:
        """A record of ``topic`` was acquired on ``cluster_id`` (activity of a drain)."""
        self.engine.message(topic, cluster_id, partition, 0, time.monotonic())

    def wake_in(self) -> float | None:
        """Seconds until the engine wants to run again, or None."""
        at = self.engine.wake_at()
        return None if at is None else max(0.0, at - time.monotonic())

    def _carry_out(self, actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, Probe):
                self.engine.progress(action.topic, self._probe(action), time.monotonic())
            elif isinstance(action, SwitchAction):
                self.switch(action.topic, action.new)
        more = self.engine.step(time.monotonic())  # a probe answered "caught up": switch now
        if more:
            self._carry_out(more)

    def _probe(self, probe: Probe) -> Progress:
        entry = self.reader(probe.topic)
        if entry is None or entry.cluster_id != probe.route.cluster_id:
            return Progress(probe.seq)
        try:
            results = entry.commit(PROBE_COMMIT_TIMEOUT_S)
        except Exception as exc:  # the cluster did not answer: a later probe retries
            return Progress(probe.seq, error=f"committing acknowledgements failed: {exc}")
        failed = [f"{tp.topic}[{tp.partition}]: {err}" for tp, err in results.items() if err is not None]
        if failed:
            return Progress(probe.seq, error="acknowledgements not committed: " + "; ".join(failed))
        return Progress(probe.seq)
