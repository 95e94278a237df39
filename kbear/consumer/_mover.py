"""The blocking driver of the switch engine (:mod:`kbear._switch`) for a RoutedConsumer.

Responsible for: turning a reload into the engine's route changes, running the
engine's probes (this member's commit, asynchronous, in the polling thread; the
watermarks and the group's committed offsets in a background thread, with a
client of the cluster's own, so ``poll(timeout)`` never waits on a slow or
absent old cluster), handing the engine's switches to the consumer, and
the "stale commit" period after a switch (a message of the old cluster committed
after the switch is already committed there: a no-op until the new cluster has
delivered a message of that topic).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from kbear._route import Route
from kbear._switch import SwitchEngine
from kbear._switch_report import tell
from kbear._switch_types import Probe, Progress, StartPlan, Switch
from kbear.consumer._acks import CommitPoints
from kbear.consumer._cluster import ClusterClient, ClusterRegistry

if TYPE_CHECKING:
    from kbear.consumer._startlater import LaterStarts

log = logging.getLogger("kbear.consumer")

T = TypeVar("T")

#: Timeout of each broker call of a probe (seconds); a probe runs in the background.
PROBE_CALL_TIMEOUT_S = 5.0


#: ``switch(topic, old, new, start, clean)`` carries out a switch of the engine:
#: logical ``topic`` leaves ``old``'s cluster (``clean``: after a complete drain)
#: for ``new``'s (None: no route any more), read there from ``start``.
SwitchCall = Callable[[str, Route, Route | None, StartPlan, bool], None]


def commit_reached(
    entry: ClusterClient,
    physical: str,
    commit_positions: bool,
    points: CommitPoints | None = None,
) -> dict[int, int]:
    """This member's positions on ``physical`` (partition -> next offset, -1: none),
    committed asynchronously (or, when ``commit_positions`` is off, its stored
    offsets); ``points`` lowers the positions committed (the acknowledged prefix of
    ``kbear.ack.mode=individual``). Local calls only: run in the polling thread, on
    the member's client.

    Raises:
        KafkaException: the commit was refused (not ``_NO_OFFSET``).
    """
    consumer = entry.consumer
    mine = [tp for tp in consumer.assignment() if tp.topic == physical]
    positions = consumer.position(mine) if mine else []
    reached = [tp for tp in positions if tp.offset >= 0]
    if points is not None and reached:
        reached = points(entry, reached)
    try:
        if not commit_positions:
            consumer.commit(asynchronous=True)
        elif reached:
            consumer.commit(offsets=reached, asynchronous=True)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError._NO_OFFSET:
            raise
    return {tp.partition: tp.offset for tp in positions}


def _watermarks(watcher: Any, physical: str) -> dict[int, tuple[int, int]]:
    """Partition -> (low, high) watermark offsets of ``physical``, asked with
    ``watcher`` (blocking, each call bounded by ``PROBE_CALL_TIMEOUT_S``)."""
    md = watcher.list_topics(physical, PROBE_CALL_TIMEOUT_S).topics.get(physical)
    partitions = sorted(md.partitions) if md is not None and md.error is None else []
    marks = {
        p: watcher.get_watermark_offsets(TopicPartition(physical, p), timeout=PROBE_CALL_TIMEOUT_S)
        for p in partitions
    }
    return {p: (int(m[0]), int(m[1])) for p, m in marks.items() if m is not None}


def measure(
    watcher: Any,
    physical: str,
    seq: int,
    positions: dict[int, int],
    new: tuple[Callable[[], Any], str] | None = None,
) -> Progress:
    """Probe ``seq``: the watermarks of ``physical`` and the group's committed offsets,
    asked with the cluster's background client ``watcher``; first, with ``new``
    (a function giving the new cluster's background client, built here so that the
    polling thread never waits for it; the topic's physical name there), the
    sum of the topic's end offsets on the new cluster (None when it does not
    answer: :attr:`Progress.new_ends`). Blocking, each call bounded by
    ``PROBE_CALL_TIMEOUT_S``; run in the background thread."""
    new_ends = None
    if new is not None:
        try:
            new_ends = sum(high for _, high in _watermarks(new[0](), new[1]).values())
        except (KafkaException, RuntimeError):
            new_ends = None
    try:
        marks = _watermarks(watcher, physical)
        parts = [TopicPartition(physical, p) for p in sorted(marks)]
        committed = watcher.committed(parts, timeout=PROBE_CALL_TIMEOUT_S) if parts else []
    except (KafkaException, RuntimeError) as exc:
        return Progress(seq, error=str(exc))
    return Progress(
        seq,
        marks=marks,
        positions=positions,
        committed={tp.partition: tp.offset for tp in committed},
        new_ends=new_ends,
    )


@dataclass(eq=False)
class SwitchDriver:
    """Drives ``engine`` for one RoutedConsumer (see the module docstring).

    Args:
        engine: the switch engine (settings of the consumer).
        registry: the consumer's per-cluster clients.
        switch: carries out a switch (the consumer's subscription part).
        commit_positions: ``enable.auto.commit`` is on: probes commit positions.
        clock: monotonic seconds.
    """

    engine: SwitchEngine
    registry: ClusterRegistry
    switch: SwitchCall
    _: KW_ONLY
    commit_positions: bool
    clock: Callable[[], float]

    #: logical topics switched and not yet read on their new cluster
    stale_commits: set[str] = field(default_factory=set)
    #: ``kbear.ack.mode=individual``: the acknowledged prefix the probes commit
    commit_points: CommitPoints | None = None
    #: the translated starts applied from the background (``pending``, ``tick()``):
    #: ticked between calls while some wait (:mod:`kbear.consumer._startlater`)
    later: LaterStarts | None = None

    def __post_init__(self) -> None:
        self._executor: ThreadPoolExecutor | None = None
        self._probes: dict[str, Future[Progress]] = {}  # topic -> the answer awaited
        # every background call sent, with the cluster whose client it uses (None: several)
        self._running: list[tuple[Future[Any], str | None]] = []
        self._wake = 0.0

    @property
    def busy(self) -> bool:
        """Whether a drain or a stale-commit period is in progress (the poll loop
        must then look at every message)."""
        return (
            self.engine.draining
            or bool(self.stale_commits)
            or (self.later is not None and self.later.pending)
        )

    def route_changed(self, topic: str, old: Route, new: Route | None) -> None:
        """A reload gave ``topic`` another route: start its move."""
        for action in self.engine.route_changed(topic, old, new, self.clock()):
            self._act(action)
        self._tell()
        self._wake = 0.0

    def cluster_error(self, cluster_id: str, err: KafkaError) -> None:
        """An error of a member client of ``cluster_id`` (its ``error_cb``):
        ``_ALL_BROKERS_DOWN`` marks the cluster dead for the engine (a drain there
        ends at once); it counts as alive again on its next message or probe answer."""
        if err.code() == KafkaError._ALL_BROKERS_DOWN:
            self.engine.cluster_down(cluster_id, True)
            self._wake = 0.0

    def message(self, entry: ClusterClient, msg: Any, route: Route | None) -> None:
        """A message (logical topic name already set) read from ``entry``'s cluster;
        ``route``: the topic's route in use."""
        topic = msg.topic()
        if self.engine.down and msg.error() is None:
            self.engine.cluster_down(entry.cluster_id, False)
        if self.engine.draining:
            ts = msg.timestamp()[1] if self.engine.tracks_timestamps else 0
            self.engine.message(topic, entry.cluster_id, msg.partition(), ts, self.clock())
        elif self.engine.tracks_timestamps:
            self.engine.message(topic, entry.cluster_id, msg.partition(), msg.timestamp()[1], 0.0)
        # only a message from the new cluster ends the stale period (not a leftover of
        # the old cluster's client, still polled while it leaves)
        if (
            topic in self.stale_commits
            and msg.error() is None
            and route is not None
            and route.cluster_id == entry.cluster_id
        ):
            self.stale_commits.discard(topic)

    def tick(self) -> None:
        """Collect probe answers and carry out what the engine decides now; never blocks."""
        now = self.clock()
        if self.later is not None and self.later.pending:
            self.later.tick()
        for topic, future in list(self._probes.items()):
            if future.done():
                del self._probes[topic]
                if not future.cancelled():
                    answer = future.result()
                    if answer.error is None and (old := self.engine.drain_of(topic)) is not None:
                        self.engine.cluster_down(old.cluster_id, False)
                    self.engine.progress(topic, answer, now)
                self._wake = 0.0
        self._running = [(f, cid) for f, cid in self._running if not f.done()]
        if now < self._wake:
            return
        for action in self.engine.step(now):
            self._act(action)
        self._tell()
        wake = self.engine.wake_at()
        self._wake = now + 0.05 if wake is None or self._probes else max(wake, now + 0.01)

    def _act(self, action: Probe | Switch) -> None:
        if isinstance(action, Switch):
            self._switch(action)
            return
        entry = self.registry.get(action.route.cluster_id)
        if entry is None:
            self.engine.progress(action.topic, Progress(action.seq), self.clock())
            return
        try:
            positions = commit_reached(entry, action.route.topic, self.commit_positions, self.commit_points)
        except KafkaException as exc:
            self.engine.progress(action.topic, Progress(action.seq, error=str(exc)), self.clock())
            return
        watcher = self.registry.watcher(action.route)
        new = None
        if action.new is not None:
            target = action.new
            new = (lambda: self.registry.watcher(target), target.topic)
        future = self.submit(
            None if new is not None else entry.cluster_id,
            measure,
            watcher,
            action.route.topic,
            action.seq,
            positions,
            new,
        )
        self._probes[action.topic] = future

    def _tell(self) -> None:
        # The engine reports, the driver tells: logs on kbear.consumer, events of kind "consumer".
        tell(self.engine.outcomes(), log)

    def submit(self, cluster_id: str | None, call: Callable[..., T], *args: Any) -> Future[T]:
        """Run ``call(*args)`` in the background thread; it uses the client of
        ``cluster_id`` (None: of several clusters), which :meth:`quiesce` waits for."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kbear-consumer")
        future = self._executor.submit(call, *args)
        self._running.append((future, cluster_id))
        return future

    def _switch(self, action: Switch) -> None:
        probe = self._probes.pop(action.topic, None)
        if probe is not None:
            probe.cancel()  # not waited for: the old cluster's client stays open meanwhile
        clean = not action.timed_out
        self.switch(action.topic, action.old, action.new, action.start, clean)
        if action.new is not None:
            self.stale_commits.add(action.topic)
        else:
            self.stale_commits.discard(action.topic)

    def quiesce(self, cluster_id: str | None = None) -> None:
        """Wait for the probes running on ``cluster_id`` (None: on any cluster) to
        end, before their client is closed (each broker call of a probe is bounded
        by ``PROBE_CALL_TIMEOUT_S``)."""
        for future, cid in self._running:
            if cluster_id is None or cid is None or cid == cluster_id:
                future.cancel()
                if not future.cancelled():
                    future.exception()  # waits; its answer (or failure) is of no more use

    def forget(self) -> None:
        """The subscription changed: drop every move in progress."""
        self.engine.forget()
        self.stale_commits.clear()
        for future in self._probes.values():
            future.cancel()
        self._probes.clear()

    def close(self) -> None:
        """Wait for running probes, then stop the background thread."""
        if self.later is not None:
            self.later.close()
        self.quiesce()
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
