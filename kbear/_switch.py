"""The switch engine: how a reader moves a topic from one cluster to another.

It does no I/O and keeps no client. A driver (the blocking
:class:`~kbear.RoutedConsumer`, the Spark source, an asyncio consumer) feeds it
observations and carries out the actions it answers:

observations
    :meth:`SwitchEngine.route_changed` (a reload gave a topic another route),
    :meth:`SwitchEngine.message` (a message of a topic was read on a cluster:
    activity, and its timestamp for ``kbear.switch.start=timestamp``),
    :meth:`SwitchEngine.progress` (the answer to a :class:`Probe`), and the
    clock (``now``, monotonic seconds) passed to every call.
actions
    :class:`Probe` (measure the topic on its old cluster: commit what this
    reader consumed there, then read the end offsets and the group's committed
    offsets, and answer with :class:`Progress`), :class:`Switch` (stop reading
    the topic on the old cluster, read it on the new one from
    :class:`StartPlan`), and :meth:`SwitchEngine.wake_at` (when to call
    :meth:`SwitchEngine.step` again at the latest).
outcomes
    what happened, for the driver to tell (:meth:`SwitchEngine.outcomes`):
    :class:`~kbear._events.DrainStarted`, :class:`~kbear._events.DrainFinished`
    (complete or timed out, with its duration and the messages read), of the
    engine's ``kind``, :class:`ProbeFailed`, :class:`NoTimestamps`. The engine
    neither logs nor emits events: its driver does (:mod:`kbear._switch_report`).

Modes (``kbear.switch.mode``, one class each): ``immediate`` switches at once;
``drain`` keeps reading the old cluster until it has stayed idle
``kbear.switch.drain.idle.ms`` and every partition of the topic there is
committed by the group at its end offset (so no member reads the topic on the
new cluster before the old cluster's messages were all returned to some member:
per-key order across the group), and, when the old cluster received messages
of the topic during the drain, the new cluster has received some since the
drain began (a producer flushes the old cluster before its first message to the
new one: its last messages, retried or slow to land, are in the old cluster's
end offsets by then) or the old cluster stayed idle ``LANDED_IDLE_FACTOR`` times
longer (a reader that does not read every partition of the topic there also
needs the old cluster's end offsets unchanged between two probes: its own
idleness covers only its partitions); or until ``kbear.switch.drain.timeout.ms``,
or, for the moves the driver allows (``SwitchEngine.ends_when_dead``: the consumer's
from a cluster to its mirror), until the old cluster is observed dead
(:meth:`SwitchEngine.cluster_down`: nothing more can be read there). A
topic moved again during a drain goes to the newer route after the drain in
progress and a drain of the intermediate route (messages may have been produced
there meanwhile).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import KW_ONLY, dataclass, field

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END

from kbear._events import DrainFinished, DrainStarted
from kbear._modes import SwitchMode, SwitchStart
from kbear._route import Route
from kbear._switch_types import (
    Action,
    NoTimestamps,
    Outcome,
    Probe,
    ProbeFailed,
    Progress,
    StartPlan,
    Switch,
)

#: How long after a probe answered "not yet" the next one is sent (seconds).
PROBE_INTERVAL_S = 0.5
#: How soon after a move (or after the old cluster went idle) the first probe is sent (seconds).
FIRST_PROBE_S = 0.1
#: A drain that saw traffic on the old cluster ends once the new cluster has received
#: messages of the topic since the drain's first probe (the producers have flushed the
#: old cluster: every message they sent there has landed), or, failing that, once the
#: old cluster stayed idle this many times ``kbear.switch.drain.idle.ms``.
LANDED_IDLE_FACTOR = 5


def caught_up(progress: Progress, reset_to_end: bool) -> bool:
    """Whether the group has committed every partition of ``progress.marks`` at its
    high watermark (a partition with no committed offset counts from where
    ``auto.offset.reset`` starts: ``reset_to_end``, the end). This reader's own
    positions do not count until committed: the next member to read the topic
    starts from the committed offsets. A partition ending in a transaction marker
    is at its end once the position past the marker is committed (the probe
    commits positions when ``enable.auto.commit`` is on)."""
    if progress.error is not None:
        return False
    for partition, (low, high) in progress.marks.items():
        start = progress.committed.get(partition, -1)
        if start < 0:
            start = high if reset_to_end else low
        if start < high:
            return False
    return True


@dataclass
class _Drain:
    old: Route
    new: Route | None
    started: float
    last_activity: float
    then: list[Route | None] = field(default_factory=list)
    probe_seq: int | None = None  # the probe awaiting its answer
    probe_sent: float = 0.0
    next_probe: float = 0.0
    done: bool = False
    messages: int = 0  # read from the old cluster during the drain
    old_ends: int | None = None  # sum of the old cluster's high watermarks at the last answer
    old_moved: float = 0.0  # when an answer last saw them change (else the drain's start)
    traffic: bool = False  # they changed during the drain
    new_base: int | None = None  # Progress.new_ends of the first answer that had it
    new_grew: bool = False  # a later answer's new_ends was above new_base
    committed: Mapping[int, int] = field(default_factory=dict)  # the group's, at the last answer


def _observe_ends(drain: _Drain, answer: Progress, now: float) -> bool:
    """Note in ``drain`` what ``answer`` tells of the old and new clusters' end offsets;
    returns whether the old cluster's were the same at the previous answer."""
    ends = sum(high for _, high in answer.marks.values())
    same = drain.old_ends == ends
    if drain.old_ends is not None and not same:
        drain.traffic = True
        drain.old_moved = now
    drain.old_ends = ends
    if answer.new_ends is not None:
        if drain.new_base is None:
            drain.new_base = answer.new_ends
        elif answer.new_ends > drain.new_base:
            drain.new_grew = True
    return same


def _queue(drain: _Drain, new: Route | None) -> None:
    """Send the topic of ``drain`` on to ``new`` after it, unless that is already its last route."""
    if not same_route(drain.then[-1] if drain.then else drain.new, new):
        drain.then.append(new)


def same_route(a: Route | None, b: Route | None) -> bool:
    """Whether two routes lead to the same topic on the same cluster with the same client settings."""
    if a is None or b is None:
        return a is b
    return a.cluster_id == b.cluster_id and a.topic == b.topic and dict(a.properties) == dict(b.properties)


@dataclass(eq=False)
class SwitchEngine:
    """The moves of one reader's topics, in either mode (see the module docstring).

    Args:
        mode: ``kbear.switch.mode``.
        start: ``kbear.switch.start``.
        idle_s: ``kbear.switch.drain.idle.ms`` / 1000: how long the old cluster must
            stay idle (no message of the topic read there) before a drain may end.
        timeout_s: ``kbear.switch.drain.timeout.ms`` / 1000; None: a drain never
            times out (the Spark source, which must not skip offsets).
        timestamp_margin_ms: ``kbear.switch.timestamp.margin.ms``.
        reset_to_end: the reader's ``auto.offset.reset`` starts at the end (latest).
        first_probe_s: how soon after a move the first probe may be sent (seconds;
            0 for a driver that probes synchronously, like the Spark source).
        ends_when_dead: which drains (old, new route) a dead old cluster ends at
            once; None: none.
        mirror_start: which moves (old, new route) start as the old cluster's
            mirror says (``translated``) whatever ``start`` says: a failover to a
            mirrored standby (the consumer's); None: none.
        kind: the ``kind`` of the drain events it reports (``"consumer"``,
            ``"share consumer"``, ``"spark"``: the label of the drain metrics).
    """

    mode: SwitchMode = SwitchMode.DRAIN
    start: SwitchStart = SwitchStart.COMMITTED
    _: KW_ONLY
    idle_s: float = 2.0
    timeout_s: float | None = 30.0
    timestamp_margin_ms: int = 0
    reset_to_end: bool = True
    first_probe_s: float = FIRST_PROBE_S
    ends_when_dead: Callable[[Route, Route | None], bool] | None = None
    mirror_start: Callable[[Route, Route | None], bool] | None = None
    kind: str = "consumer"
    _drains: dict[str, _Drain] = field(default_factory=dict, init=False)
    #: (cluster, topic) -> partition -> the timestamp (ms) last read there
    _timestamps: dict[tuple[str, str], dict[int, int]] = field(default_factory=dict, init=False)
    _seq: int = field(default=0, init=False)
    _outcomes: list[Outcome] = field(default_factory=list, init=False)
    _down: set[str] = field(default_factory=set, init=False)  # clusters with every broker unreachable

    def __post_init__(self) -> None:
        self.mode = SwitchMode(self.mode)  # also given as its text ("drain")
        self.start = SwitchStart(self.start)
        #: whether :meth:`message` needs timestamps (``kbear.switch.start=timestamp``)
        self.tracks_timestamps = self.start is SwitchStart.TIMESTAMP

    # ------------------------------------------------------------------ state

    @property
    def draining(self) -> bool:
        """Whether a drain is in progress."""
        return bool(self._drains)

    @property
    def down(self) -> frozenset[str]:
        """The clusters observed dead (:meth:`cluster_down`) and not seen alive since."""
        return frozenset(self._down)

    def drain_of(self, topic: str) -> Route | None:
        """The old route ``topic`` is being drained on, or None."""
        drain = self._drains.get(topic)
        return None if drain is None else drain.old

    def drains(self) -> dict[str, tuple[Route, Route | None]]:
        """Logical topic -> (old route, next route) of every drain in progress."""
        return {topic: (d.old, d.new) for topic, d in self._drains.items()}

    def drain_started(self, topic: str) -> float | None:
        """When the drain of ``topic`` in progress began (the engine's clock), or None."""
        drain = self._drains.get(topic)
        return None if drain is None else drain.started

    def outcomes(self) -> list[Outcome]:
        """What happened since the last call, oldest first (drains begun and ended,
        probes failed, ...): the driver tells it (logs, events) under its own labels."""
        done, self._outcomes = self._outcomes, []
        return done

    def chain(self, topic: str) -> list[Route | None]:
        """The routes ``topic`` goes to after its drain in progress, in order (empty: no drain)."""
        drain = self._drains.get(topic)
        return [] if drain is None else [drain.new, *drain.then]

    def forget(self, topics: Iterable[str] | None = None) -> None:
        """Drop the drains of ``topics`` (None: of all): the subscription changed."""
        if topics is None:
            self._drains.clear()
            self._timestamps.clear()
            return
        for topic in topics:
            self._drains.pop(topic, None)

    def wake_at(self) -> float | None:
        """The monotonic time by which :meth:`step` should run again, or None."""
        times = []
        for d in self._drains.values():
            if d.done:
                return 0.0
            if self.timeout_s is not None:
                times.append(d.started + self.timeout_s)
            if d.probe_seq is None:
                times.append(max(d.next_probe, d.last_activity + self.idle_s))
        return min(times, default=None)

    # ------------------------------------------------------------------ observations

    def route_changed(self, topic: str, old: Route, new: Route | None, now: float) -> list[Action]:
        """A reload gave ``topic`` (read on ``old``) the route ``new`` (None: none).

        Returns the actions due now: in ``immediate`` mode the :class:`Switch`;
        in ``drain`` mode none (the drain starts; :meth:`step` answers later).
        """
        drain = self._drains.get(topic)
        if drain is not None:
            _queue(drain, new)
            return []
        if same_route(old, new):
            return []
        if self.mode is SwitchMode.IMMEDIATE:
            return [Switch(topic, old, new, self._plan_start(topic, old, new, {}))]
        self._outcomes.append(DrainStarted(self.kind, topic, old.cluster_id, now))
        self._drains[topic] = _Drain(old, new, now, now, next_probe=now + self.first_probe_s)
        return []

    def resume(
        self, topic: str, old: Route, routes: Iterable[Route | None], started: float, now: float
    ) -> None:
        """Take up a drain begun earlier and recorded (the Spark source keeps its
        drains in its offsets and rebuilds its engine each micro-batch): ``topic``
        drains on ``old`` since ``started`` (the engine's clock), then goes to
        ``routes`` in order (the last: its route now), as :meth:`route_changed`
        would have left it. No :class:`~kbear._events.DrainStarted`: that was reported when the
        drain began.
        """
        for new in routes:
            drain = self._drains.get(topic)
            if drain is not None:
                _queue(drain, new)
            elif not same_route(old, new):
                self._drains[topic] = _Drain(old, new, started, now, next_probe=now + self.first_probe_s)

    def message(self, topic: str, cluster_id: str, partition: int, timestamp_ms: int, now: float) -> None:
        """A message of ``topic`` (logical) was read from ``cluster_id``.

        Only needed while :attr:`draining` (activity) or with
        :attr:`tracks_timestamps` (``timestamp_ms``, ms since the epoch)."""
        if self.tracks_timestamps:
            self._timestamps.setdefault((cluster_id, topic), {})[partition] = timestamp_ms
        drain = self._drains.get(topic)
        if drain is not None and drain.old.cluster_id == cluster_id:
            drain.last_activity = now
            drain.messages += 1

    def progress(self, topic: str, answer: Progress, now: float) -> None:
        """The answer to a :class:`Probe` of ``topic``. A stale answer (another probe
        was sent since, or the drain is gone) is ignored; one that saw messages read
        after it was sent is not trusted (the old cluster was not idle)."""
        drain = self._drains.get(topic)
        if drain is None or drain.probe_seq != answer.seq:
            return
        drain.probe_seq = None
        drain.next_probe = now + PROBE_INTERVAL_S
        if answer.error is not None:
            self._outcomes.append(ProbeFailed(topic, drain.old, answer.error))
            return
        steady = _observe_ends(drain, answer, now)
        drain.committed = dict(answer.committed)
        if drain.last_activity > drain.probe_sent:
            return
        if not steady and answer.new_ends is not None and not set(answer.marks) <= set(answer.positions):
            # This reader's idleness tells nothing of the partitions it does not read:
            # their end offsets must have stayed the same since the previous probe (a
            # member with few or no partitions there is idle at once, and the group's
            # offsets, read after the watermarks, can be at the end while producers
            # still write there).
            return
        if caught_up(answer, self.reset_to_end) and self._landed(drain, answer, now):
            drain.done = True

    def _landed(self, drain: _Drain, answer: Progress, now: float) -> bool:
        """Whether the messages producers sent to the old cluster have all reached it
        (as far as a reader can tell). A drain that read nothing on the old
        cluster and whose probes all saw the same end offsets there had nothing in
        flight. With traffic (a backlog read during the drain counts too: such a
        drain may wait the longer idle period when the producers moved before its
        first probe), the producers' last messages may still be on their way (a
        producer flushes the old cluster, retrying, before its first message to the
        new one): wait until the new cluster received messages
        of the topic since the first answer (so did the producers' flush end before
        this answer's watermarks were read), or until the old cluster stayed idle
        ``LANDED_IDLE_FACTOR`` times ``idle_s`` (producers that stopped at the move).
        A driver that does not measure the new cluster (``new_ends`` None) gets the
        idle check alone."""
        if answer.new_ends is None or not (drain.traffic or drain.messages) or drain.new_grew:
            return True
        return now - max(drain.last_activity, drain.old_moved) >= LANDED_IDLE_FACTOR * self.idle_s

    # ------------------------------------------------------------------ decisions

    def cluster_down(self, cluster_id: str, down: bool) -> None:
        """Observation: every broker of ``cluster_id`` is unreachable (``down``), or one
        answers again. A drain there that :attr:`ends_when_dead` accepts ends at the next
        :meth:`step`: nothing more can be read there."""
        (self._down.add if down else self._down.discard)(cluster_id)

    def step(self, now: float) -> list[Action]:
        """The actions due at ``now``: probes to send, switches to make."""
        actions: list[Action] = []
        for topic, drain in list(self._drains.items()):
            dead = (
                drain.old.cluster_id in self._down
                and not drain.done
                and self.ends_when_dead is not None
                and self.ends_when_dead(drain.old, drain.new)
            )
            timed_out = dead or (self.timeout_s is not None and now - drain.started >= self.timeout_s)
            if drain.done or timed_out:
                cut = timed_out and not drain.done
                took = max(0.0, now - drain.started)
                cluster = drain.old.cluster_id
                self._outcomes.append(
                    DrainFinished(self.kind, topic, cluster, took, cut, drain.messages, dead)
                )
                del self._drains[topic]
                start = self._plan_start(topic, drain.old, drain.new, drain.committed)
                actions.append(Switch(topic, drain.old, drain.new, start, cut))
                if drain.then and drain.new is not None:
                    self._outcomes.append(DrainStarted(self.kind, topic, drain.new.cluster_id, now, True))
                    self.resume(topic, drain.new, drain.then, now, now)
                continue
            if drain.probe_seq is not None or now < max(drain.next_probe, drain.last_activity + self.idle_s):
                continue  # a probe awaits its answer, or the next one is not due
            self._seq += 1
            drain.probe_seq = self._seq
            drain.probe_sent = now
            actions.append(Probe(topic, drain.old, self._seq, drain.new))
        return actions

    def _plan_start(
        self, topic: str, old: Route, new: Route | None, committed: Mapping[int, int]
    ) -> StartPlan:
        if self.start is SwitchStart.TRANSLATED or (
            self.mirror_start is not None and self.mirror_start(old, new)
        ):
            return StartPlan(translated=True, source=old, upstream=committed)
        if self.start is SwitchStart.EARLIEST:
            return StartPlan(OFFSET_BEGINNING)
        if self.start is SwitchStart.LATEST:
            return StartPlan(OFFSET_END)
        if self.start is SwitchStart.TIMESTAMP:
            seen = self._timestamps.pop((old.cluster_id, topic), {})
            if seen:
                return StartPlan(max(0, min(seen.values()) - self.timestamp_margin_ms), by_time=True)
            self._outcomes.append(NoTimestamps(topic, old))
        return StartPlan()
