"""One RoutedConsumer shared by several threads while a topic moves A -> B -> A
(issue #11, item 6: thread safety at least as confluent-kafka's).

The consumer reads three topics on two clusters (``moving``: on A, on B as the
remapped ``<moving>.on-b``, and back; ``on-a`` stays on A; ``on-b`` on B) in
drain mode, while a producer thread keeps writing to each topic on the cluster
its route names. One thread polls; others call ``commit()`` (sync and async,
with and without a message), ``pause()``/``resume()`` of assigned partitions,
``assignment()``, ``position()`` and ``routes()`` in a loop; a watcher reads
the group's committed offsets on both clusters. After the two moves the topic
moves once more (A -> B, A kept busy so that the drain is still under way) and
another thread calls ``close()``. Parameters: ``close_style`` (below) and
``callbacks``: the rebalance callbacks only check the partitions' names
("recording"), or also call the consumer as applications do ("calling":
``assignment()``, and a sync ``commit()`` in ``on_revoke``).

Invariants checked, as a user relies on them:

- no exception escapes any call but the documented ones: ``KafkaException``
  from a commit with ``_NO_OFFSET`` or one of the codes confluent-kafka itself
  raises when a commit races a rebalance (``COMMIT_RACE``), and
  ``RuntimeError("Consumer closed")`` once ``close()`` has started;
- no thread hangs: every wait and join is bounded, and a consumer call taking
  over ``STUCK_S`` fails the test at once with every thread's stack;
- nothing is lost across the moves: every message delivered before the third
  move is read at least once; per key, the messages of a cluster are read for
  the first time in the order they were written there (a message read again
  is allowed);
- kbear's state stays consistent: ``routes()`` names A or B for ``moving`` and
  A / B for the others at any time, and the final cluster after each move (one
  ``on_route_change`` per move); ``assignment()`` never lists a partition twice
  nor a physical name, and ends as the 7 partitions of the final routes;
  messages and callbacks carry logical names; no offset is ever committed
  beyond a partition's end (a commit sent to the wrong cluster);
- ``close()`` from another thread during a move returns without raising (the
  rebalance callbacks it runs included); afterwards every confluent-kafka call
  raises ``RuntimeError``, a second ``close()`` returns, every thread ends, and
  kbear's background threads are gone.

What plain confluent-kafka does in the same cases (2.16.1, librdkafka 2.16.0,
measured on the embedded cluster), so that no more is demanded of kbear:

- every call on a ``Consumer`` made from another thread (assignment, position,
  pause, resume, commit, memberid, list_topics) waits for a ``poll()`` in
  progress on the same client; when one thread calls ``poll(timeout)`` back to
  back, the other threads' calls may wait for many seconds or never get in.
  The polling thread here therefore pauses 1 ms after an empty poll, as an
  application doing some work between polls;
- ``close()`` from another thread while a ``poll()`` is in progress waits for
  it, then closes; later calls raise ``RuntimeError("Consumer closed")``; a
  second ``close()`` returns None. But while the polling thread goes on polling,
  ``close()`` never returns (it waits until the loop stops; no RuntimeError
  reaches the poller). So "stop-then-close" (the poller is told to stop, and
  ``close()`` runs while its last ``poll()`` is in progress) is what
  confluent-kafka supports; "close-under-poll" (the poller polls until it gets
  RuntimeError) checks what kbear's ``close()`` docstring promises beyond it;
- commits, pauses, resumes, assignment() and position() from other threads while
  the subscription changes raise nothing but ``_NO_OFFSET`` and, now and then,
  ``STALE_MEMBER_EPOCH`` from a sync commit; pause/resume/position of a
  partition not assigned raise nothing; rebalance callbacks calling
  ``assignment()`` and a sync ``commit()`` while other threads call the consumer
  do not deadlock;
- ``on_revoke`` runs in the thread calling ``close()``; the consumer's calls
  work there (assignment, a sync commit); an exception raised in a callback
  propagates out of ``close()`` (or ``poll()``).
"""

from __future__ import annotations

import contextlib
import random
import sys
import threading
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from conftest import FAST_GROUP, rewrite_rules, rule
from kbear import RoutedConsumer, Router
from kbear.testing import EmbeddedCluster

Clusters = tuple[EmbeddedCluster, EmbeddedCluster]

POLL_S = 0.2  # the polling thread's poll(timeout)
KEYS = 12
PHASE_S = 1.0  # production between two moves
MOVE_S = 15.0  # longest wait for a move (drain) to end
READ_S = 15.0  # longest wait for every delivered message to be read
CLOSE_S = 10.0  # longest close() from another thread
JOIN_S = 10.0
STUCK_S = 5.0  # a consumer call that takes longer is hung (deadlock)
#: KafkaException codes a commit may raise: nothing to commit, or a commit racing a
#: rebalance (confluent-kafka raises these itself; classic-protocol codes included)
COMMIT_RACE = frozenset(
    {
        KafkaError._NO_OFFSET,
        KafkaError.STALE_MEMBER_EPOCH,
        KafkaError.FENCED_MEMBER_EPOCH,
        KafkaError.UNKNOWN_MEMBER_ID,
        KafkaError.ILLEGAL_GENERATION,
        KafkaError.REBALANCE_IN_PROGRESS,
    }
)


class Names:
    def __init__(self, unique: Callable[[str], str]) -> None:
        self.moving = unique("thr-moving")
        self.moving_b = self.moving + ".on-b"  # its name on B (remapped)
        self.on_a = unique("thr-on-a")
        self.on_b = unique("thr-on-b")
        self.logical = {self.moving, self.on_a, self.on_b}


def rules(moving_on: str, t: Names) -> list[dict[str, Any]]:
    statement = "use cluster A" if moving_on == "A" else f"use cluster B, topic {t.moving_b}"
    return [
        rule("move", statement, topic=t.moving),
        rule("on-b", "use cluster B", topic=t.on_b),
        rule("global", "use cluster A", isGlobal=True),
    ]


def expected_assignment(t: Names) -> list[tuple[str, int]]:
    return sorted(
        [(t.moving, p) for p in range(3)] + [(t.on_a, p) for p in range(2)] + [(t.on_b, p) for p in range(2)]
    )


class Errors:
    """Unexpected exceptions and broken invariants, from any thread (with tracebacks)."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self.lock = threading.Lock()

    def add(self, where: str, what: str) -> None:
        with self.lock:
            if len(self.items) < 200:
                self.items.append(f"[{where}] {what}")

    def exc(self, where: str) -> None:
        self.add(where, traceback.format_exc())


class InCall:
    """When each thread entered the consumer call it is in (a hung call is reported
    after STUCK_S, with every thread's stack, instead of waiting for the bounds)."""

    def __init__(self) -> None:
        self.since: dict[threading.Thread, float] = {}
        self.seen: set[threading.Thread] = set()

    def __call__(self, call: Callable[[], Any]) -> Any:
        me = threading.current_thread()
        self.seen.add(me)
        self.since[me] = time.monotonic()
        try:
            return call()
        finally:
            self.since.pop(me, None)

    def stuck(self) -> list[threading.Thread]:
        now = time.monotonic()
        return [th for th, since in list(self.since.items()) if now - since > STUCK_S]


class Feed(threading.Thread):
    """Writes keyed messages to the three topics, each on the cluster ``route[topic]``
    names, until stopped; values ``topic|cluster|key|seq`` (seq per topic and key)."""

    def __init__(self, clusters: Clusters, t: Names) -> None:
        super().__init__(name="feed", daemon=True)
        a, b = clusters
        self.t = t
        self.producers = {
            name: Producer({"bootstrap.servers": c.bootstrap_servers, "linger.ms": 5})
            for name, c in (("A", a), ("B", b))
        }
        self.moving_on = "A"  # where ``moving`` is written (the test flips it)
        self.delivered: list[str] = []
        self.failed: list[str] = []
        self.hold = threading.Event()  # set: write nothing for now
        self.stop = threading.Event()
        self.errors = Errors()

    def report(self, err: Any, msg: Any) -> None:
        (self.delivered if err is None else self.failed).append(msg.value().decode())

    def run(self) -> None:
        seq: dict[tuple[str, str], int] = defaultdict(int)
        topics = (self.t.moving, self.t.on_a, self.t.on_b)
        n = 0
        try:
            while not self.stop.is_set():
                if self.hold.is_set():
                    time.sleep(0.01)
                    continue
                topic = topics[n % 3]
                key = f"k{(n // 3) % KEYS}"
                if topic == self.t.moving:
                    cluster = self.moving_on
                    physical = topic if cluster == "A" else self.t.moving_b
                else:
                    cluster = "A" if topic == self.t.on_a else "B"
                    physical = topic
                value = f"{topic}|{cluster}|{key}|{seq[(topic, key)]}"
                seq[(topic, key)] += 1
                self.producers[cluster].produce(
                    physical, value.encode(), key.encode(), on_delivery=self.report
                )
                n += 1
                if n % 6 == 0:
                    for p in self.producers.values():
                        p.poll(0)
                    time.sleep(0.01)
        except BaseException:
            self.errors.exc("feed")
        finally:
            # Serve the delivery reports still due: librdkafka holds the callback of a
            # message in flight (self.report, which holds the producers) where the cycle
            # collector cannot see it; left so, the two producers live to the end of the
            # run and log connection failures once the clusters are gone (the pairs of
            # producers seen after pytest's summary in CI)
            for p in self.producers.values():
                p.flush(5)
                p.purge()
                p.flush(0)

    def flush(self) -> None:
        for p in self.producers.values():
            assert p.flush(10) == 0


class CommitWatch(threading.Thread):
    """Reads the group's committed offsets on both clusters (with plain clients, not
    group members) every 50 ms and records any beyond the partition's end: an offset
    committed on the wrong cluster (a message of A committed on B, or the reverse)."""

    def __init__(self, clusters: Clusters, t: Names, group: str) -> None:
        super().__init__(name="commit-watch", daemon=True)
        self.where = {
            "A": (clusters[0], [(t.moving, 3), (t.on_a, 2)]),
            "B": (clusters[1], [(t.moving_b, 3), (t.on_b, 2)]),
        }
        self.group = group
        self.stop = threading.Event()
        self.beyond: list[str] = []
        self.rounds = 0
        self.errors = Errors()

    def run(self) -> None:
        clients = {
            name: Consumer(
                {
                    "bootstrap.servers": cluster.bootstrap_servers,
                    "group.id": self.group,
                    "enable.auto.commit": False,
                }
            )
            for name, (cluster, _) in self.where.items()
        }
        try:
            while not self.stop.wait(0.05):
                for name, (_, topics) in self.where.items():
                    client = clients[name]
                    parts = [TopicPartition(topic, p) for topic, n in topics for p in range(n)]
                    committed = client.committed(parts, timeout=5)
                    for tp in committed:  # read before the end: the end only grows
                        if tp.offset < 0:
                            continue
                        _low, high = client.get_watermark_offsets(tp, timeout=5, cached=False)
                        if tp.offset > high:
                            self.beyond.append(
                                f"{name}: {tp.topic} [{tp.partition}] committed {tp.offset} > end {high}"
                            )
                self.rounds += 1
        except BaseException:
            self.errors.exc("commit-watch")
        finally:
            for client in clients.values():
                client.close()


class Poller(threading.Thread):
    """poll(POLL_S) in a loop until ``running`` is cleared (or RuntimeError once closed)."""

    def __init__(
        self, consumer: RoutedConsumer, t: Names, closing: threading.Event, errors: Errors, in_call: InCall
    ) -> None:
        super().__init__(name="poller", daemon=True)
        self.consumer = consumer
        self.in_call = in_call
        self.t = t
        self.closing = closing
        self.errors = errors
        self.running = threading.Event()
        self.running.set()
        self.got: list[str] = []  # values, in the order read
        self.error_events: Counter[str] = Counter()
        self.last: Any = None  # the last message read (other threads commit it)
        self.saw_closed = False

    def run(self) -> None:
        try:
            while self.running.is_set():
                msg = self.in_call(lambda: self.consumer.poll(POLL_S))
                if msg is None:
                    # a pause between empty polls: in a loop of back-to-back poll(timeout)
                    # calls, confluent-kafka's other calls on the client (serialized with
                    # poll) may wait for seconds or never get in
                    time.sleep(0.001)
                    continue
                if msg.error() is not None:
                    self.error_events[msg.error().name()] += 1
                    continue
                if msg.topic() not in self.t.logical:
                    self.errors.add("poller", f"message with a physical topic name {msg.topic()!r}")
                self.got.append(msg.value().decode())
                self.last = msg
        except RuntimeError as exc:
            if self.closing.is_set() and "closed" in str(exc):
                self.saw_closed = True
            else:
                self.errors.exc("poller")
        except BaseException:
            self.errors.exc("poller")


class Caller(threading.Thread):
    """Calls ``call(consumer)`` in a loop until stopped or closed; a KafkaException is
    expected only from commits (codes in COMMIT_RACE), RuntimeError only once
    ``closing`` is set."""

    def __init__(
        self,
        name: str,
        consumer: RoutedConsumer,
        call: Callable[[RoutedConsumer], Any],
        closing: threading.Event,
        errors: Errors,
        in_call: InCall,
        *,
        commits: bool = False,
    ) -> None:
        super().__init__(name=name, daemon=True)
        self.consumer = consumer
        self.in_call = in_call
        self.call = call
        self.closing = closing
        self.errors = errors
        self.commits = commits
        self.stop = threading.Event()
        self.calls = 0
        self.codes: Counter[str] = Counter()
        self.saw_closed = False

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.in_call(lambda: self.call(self.consumer))
                self.calls += 1
            except KafkaException as exc:
                self.codes[exc.args[0].name()] += 1
                if not (self.commits and exc.args[0].code() in COMMIT_RACE):
                    self.errors.exc(self.name)
            except RuntimeError as exc:
                if self.closing.is_set() and "closed" in str(exc):
                    self.saw_closed = True
                else:
                    self.errors.exc(self.name)
                return
            except BaseException:
                self.errors.exc(self.name)
                return
            time.sleep(0.002)


def stacks(threads: list[threading.Thread]) -> str:
    frames = sys._current_frames()
    out = []
    for t in threads:
        if t.is_alive() and t.ident in frames:
            out.append(f"--- {t.name}\n" + "".join(traceback.format_stack(frames[t.ident])))
    return "\n".join(out)


def wait_for(condition: Callable[[], bool], seconds: float, in_call: InCall | None = None) -> bool:
    """Wait for ``condition``; fails at once (with the stacks) when a consumer call hangs."""
    deadline = time.monotonic() + seconds
    while not condition():
        if in_call is not None and (stuck := in_call.stuck()):
            names = [th.name for th in stuck]
            dump = stacks(list(in_call.seen))
            pytest.fail(f"consumer calls hung for over {STUCK_S} s in {names} (deadlock?):\n{dump}")
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def kbear_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("kbear-consumer")}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("callbacks", ["recording", "calling"], ids=lambda v: f"callbacks-{v}")
@pytest.mark.parametrize("close_style", ["stop-then-close", "close-under-poll"])
def test_threads_share_a_consumer_through_moves_and_a_close(
    two_clusters: Clusters,
    make_config: Callable[..., Path],
    unique: Callable[[str], str],
    close_style: str,
    callbacks: str,
) -> None:
    a, b = two_clusters
    before = kbear_threads()  # of other tests (left by a hung one)
    t = Names(unique)
    for cluster, name in ((a, t.moving), (b, t.moving_b)):
        cluster.create_topic(name, 3)
    a.create_topic(t.on_a, 2)
    b.create_topic(t.on_b, 2)
    conf_dir = make_config(rules("A", t))
    router = Router.from_path(conf_dir)
    errors = Errors()
    closing = threading.Event()
    in_call = InCall()
    group = unique("thr-group")
    consumer = RoutedConsumer(
        {
            "group.id": group,
            **FAST_GROUP,
            "kbear.reload.interval.ms": 0,
            "kbear.switch.mode": "drain",
            "kbear.switch.drain.idle.ms": 200,
            "kbear.switch.drain.timeout.ms": 30_000,
        },
        router=router,
    )
    switches: list[tuple[str, str | None]] = []
    consumer.on_route_change(
        lambda old, new: switches.append((old.cluster_id, None if new is None else new.cluster_id))
    )

    def callback(kind: str) -> Callable[[Any, list[TopicPartition]], None]:
        # as an application's callback: checks the names; "calling": looks at the
        # assignment and, on revoke, commits (a commit race is handled; anything else
        # propagates, as it would in an application)
        def cb(c: Any, parts: list[TopicPartition]) -> None:
            if any(tp.topic not in t.logical for tp in parts):
                errors.add(kind, f"physical names in {parts}")
            if callbacks == "recording":
                return
            c.assignment()
            if kind == "on_revoke":
                try:
                    c.commit(asynchronous=False)
                except KafkaException as exc:
                    if exc.args[0].code() not in COMMIT_RACE:
                        raise

        return cb

    consumer.subscribe(
        [t.moving, t.on_a, t.on_b], on_assign=callback("on_assign"), on_revoke=callback("on_revoke")
    )
    feed = Feed(two_clusters, t)
    poller = Poller(consumer, t, closing, errors, in_call)

    def commit_async(c: RoutedConsumer) -> None:
        c.commit(asynchronous=True)
        if poller.last is not None:
            c.commit(message=poller.last, asynchronous=True)

    def commit_sync(c: RoutedConsumer) -> None:
        c.commit(asynchronous=False)
        if poller.last is not None:
            c.commit(message=poller.last, asynchronous=False)

    def pause_resume(c: RoutedConsumer) -> None:
        assigned = c.assignment()
        parts = random.sample(assigned, min(2, len(assigned)))
        if parts:
            c.pause(parts)
            try:
                time.sleep(0.005)
            finally:
                c.resume(parts)

    def inspect(c: RoutedConsumer) -> None:
        parts = c.assignment()
        keys = [(tp.topic, tp.partition) for tp in parts]
        if len(keys) != len(set(keys)):
            errors.add("inspect", f"assignment() with duplicates: {sorted(keys)} (routes {routes_of(c)})")
        if not {tp.topic for tp in parts} <= t.logical:
            errors.add("inspect", f"assignment() with physical names: {sorted(keys)}")
        for tp in c.position(parts):
            if tp.topic not in t.logical:
                errors.add("inspect", f"position() answered physical name {tp.topic!r}")
        r = routes_of(c)
        if set(r) != t.logical or r[t.on_a] != "A" or r[t.on_b] != "B" or r[t.moving] not in ("A", "B"):
            errors.add("inspect", f"routes() inconsistent: {r}")

    callers = [
        Caller("commit-async", consumer, commit_async, closing, errors, in_call, commits=True),
        Caller("commit-sync", consumer, commit_sync, closing, errors, in_call, commits=True),
        Caller("pause-resume", consumer, pause_resume, closing, errors, in_call),
        Caller("inspect", consumer, inspect, closing, errors, in_call),
    ]
    watch = CommitWatch(two_clusters, t, group)
    threads: list[threading.Thread] = [feed, poller, *callers, watch]
    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads as often as possible
    closer: threading.Thread | None = None
    try:
        for th in threads:
            th.start()
        wait_for(lambda: False, PHASE_S, in_call)
        for target in ("B", "A"):
            feed.moving_on = target  # the writers follow the route at once...
            rewrite_rules(conf_dir, rules(target, t))
            assert router.reload() is True  # ...and so does the consumer, after its drain
            moved = wait_for(lambda: routes_of(consumer)[t.moving] == target, MOVE_S, in_call)  # noqa: B023
            assert moved, f"the move to {target} did not end in {MOVE_S} s: {errors.items}\n{stacks(threads)}"
            wait_for(lambda: False, PHASE_S, in_call)

        # everything delivered so far is read
        feed.hold.set()
        time.sleep(0.05)
        feed.flush()
        delivered = list(feed.delivered)
        read_all = wait_for(lambda: set(delivered) <= set(poller.got), READ_S, in_call)
        got = list(poller.got)
        missing = sorted(set(delivered) - set(got))
        assert read_all, f"{len(missing)} of {len(delivered)} messages never read, e.g. {missing[:10]}"
        assert feed.failed == []
        assert switches == [("A", "B"), ("B", "A")]
        assert routes_of(consumer) == {t.moving: "A", t.on_a: "A", t.on_b: "B"}
        settled = wait_for(lambda: assigned(consumer, in_call) == expected_assignment(t), MOVE_S, in_call)
        assert settled, f"assignment() is {assigned(consumer, in_call)}"
        check_order(got)
        assert errors.items == [], "during the moves:\n" + "\n".join(errors.items)
        assert watch.beyond == [], (
            f"offsets committed beyond the end (on the wrong cluster): {watch.beyond[:10]}"
        )

        # one more move, A kept busy (its drain goes on), and close() from another thread
        feed.hold.clear()
        rewrite_rules(conf_dir, rules("B", t))  # feed.moving_on stays "A": A stays busy
        assert router.reload() is True
        wait_for(lambda: False, 3 * POLL_S, in_call)  # the poller applied the reload: the drain is under way
        assert routes_of(consumer)[t.moving] == "A", "the third move ended before close()"

        close_errors: list[str] = []

        def close() -> None:
            closing.set()
            if close_style == "stop-then-close":
                poller.running.clear()  # its poll() in progress ends as close() runs
            try:
                consumer.close()
            except BaseException:
                close_errors.append(traceback.format_exc())

        closer = threading.Thread(target=close, name="closer", daemon=True)
        started = time.monotonic()
        closer.start()
        closer.join(CLOSE_S)
        assert not closer.is_alive(), f"close() from another thread hung:\n{stacks([closer, *threads])}"
        took = time.monotonic() - started
        assert close_errors == [], "close() raised:\n" + "\n".join(close_errors)

        poller.join(JOIN_S)
        for caller in callers:
            caller.join(JOIN_S)
        feed.stop.set()
        feed.join(JOIN_S)
        watch.stop.set()
        watch.join(JOIN_S)
        alive = [th for th in threads if th.is_alive()]
        assert not alive, f"threads hang after close():\n{stacks(alive)}"
        assert errors.items == [], "\n".join(errors.items)
        assert feed.errors.items == [], "\n".join(feed.errors.items)
        assert watch.errors.items == [], "\n".join(watch.errors.items)
        assert watch.rounds > 0
        assert watch.beyond == [], (
            f"offsets committed beyond the end (on the wrong cluster): {watch.beyond[:10]}"
        )
        if close_style == "close-under-poll":
            assert poller.saw_closed, "the poller never got RuntimeError('Consumer closed')"
        assert all(c.calls > 0 for c in callers), {c.name: c.calls for c in callers}
        assert all(c.saw_closed for c in callers), {c.name: c.saw_closed for c in callers}
        assert wait_for(lambda: not kbear_threads() - before, 5.0), (
            f"left running: {kbear_threads() - before}"
        )
        check_closed(consumer, t)
        check_order(poller.got)
        calls = {c.name: c.calls for c in callers}
        print(
            f"\n[{close_style}, callbacks {callbacks}] {len(delivered)} messages delivered before the "
            f"third move, all read; {len(poller.got)} reads in all "
            f"(read twice or more, per topic: {duplicates(poller.got)}); close() {took:.2f} s; "
            f"calls {calls}, commit codes "
            f"{sum((c.codes for c in callers), Counter())}, error events {dict(poller.error_events)}"
        )
    finally:
        sys.setswitchinterval(old_interval)
        feed.stop.set()
        watch.stop.set()
        poller.running.clear()
        for caller in callers:
            caller.stop.set()
        if closer is None:
            closing.set()
            with_timeout(consumer.close, 3.0)
        for th in threads:
            th.join(1.0)
        router.close()


def routes_of(consumer: RoutedConsumer) -> dict[str, str]:
    return {topic: route.cluster_id for topic, route in consumer.routes().items()}


def keys_of(parts: list[TopicPartition]) -> list[tuple[str, int]]:
    return [(tp.topic, tp.partition) for tp in parts]


def assigned(consumer: RoutedConsumer, in_call: InCall) -> list[tuple[str, int]]:
    """``consumer.assignment()`` (sorted keys) asked from a helper thread, so that a hung
    call fails the test (with the stacks) instead of hanging the main thread."""
    out: list[list[tuple[str, int]]] = []
    th = threading.Thread(
        target=lambda: out.append(sorted(keys_of(in_call(consumer.assignment)))),
        name="main-assignment",
        daemon=True,
    )
    th.start()
    wait_for(lambda: not th.is_alive(), STUCK_S + 1, in_call)
    assert out, "assignment() from the main thread failed or hung"
    return out[0]


def duplicates(got: list[str]) -> dict[str, int]:
    """Topic -> how many of its messages were read more than once (allowed: at least once)."""
    counts = Counter(got)
    return dict(Counter(value.split("|")[0].split(".")[0] for value, n in counts.items() if n > 1))


def check_order(got: list[str]) -> None:
    """Per topic, cluster and key, the first reads of the messages follow their order
    of writing there (a message read again after a rebalance is allowed)."""
    seen: set[str] = set()
    last: dict[tuple[str, str, str], int] = {}
    bad = []
    for value in got:
        if value in seen:
            continue
        seen.add(value)
        topic, cluster, key, seq = value.split("|")
        where = (topic, cluster, key)
        if int(seq) < last.get(where, -1):
            bad.append(f"{value} read for the first time after seq {last[where]}")
        last[where] = max(int(seq), last.get(where, -1))
    assert bad == [], bad[:10]


def check_closed(consumer: RoutedConsumer, t: Names) -> None:
    """After close(): every confluent-kafka call raises RuntimeError; close() again returns."""
    tp = TopicPartition(t.on_a, 0)
    calls: dict[str, Callable[[], Any]] = {
        "poll": lambda: consumer.poll(0),
        "consume": lambda: consumer.consume(1, 0),
        "commit": lambda: consumer.commit(),
        "commit(sync)": lambda: consumer.commit(asynchronous=False),
        "commit(offsets)": lambda: consumer.commit(offsets=[TopicPartition(t.on_a, 0, 1)]),
        "committed": lambda: consumer.committed([tp], timeout=1),
        "assignment": consumer.assignment,
        "position": lambda: consumer.position([tp]),
        "pause": lambda: consumer.pause([tp]),
        "resume": lambda: consumer.resume([tp]),
        "seek": lambda: consumer.seek(TopicPartition(t.on_a, 0, 0)),
        "store_offsets": lambda: consumer.store_offsets(offsets=[TopicPartition(t.on_a, 0, 1)]),
        "get_watermark_offsets": lambda: consumer.get_watermark_offsets(tp, timeout=1),
        "subscribe": lambda: consumer.subscribe([t.on_a]),
        "unsubscribe": consumer.unsubscribe,
        "assign": lambda: consumer.assign([tp]),
        "unassign": consumer.unassign,
        "list_topics": lambda: consumer.list_topics(t.on_a, timeout=1),
        "memberid": consumer.memberid,
    }
    wrong = {}
    for name, call in calls.items():
        try:
            result = call()
        except RuntimeError as exc:
            if "closed" not in str(exc):
                wrong[name] = repr(exc)
        except BaseException as exc:
            wrong[name] = repr(exc)
        else:
            wrong[name] = f"returned {result!r}"
    assert wrong == {}, f"calls after close() that did not raise RuntimeError('Consumer closed'): {wrong}"
    consumer.close()  # as confluent-kafka: a second close() returns


def with_timeout(call: Callable[[], Any], seconds: float) -> None:
    th = threading.Thread(target=lambda: _quietly(call), daemon=True)
    th.start()
    th.join(seconds)


def _quietly(call: Callable[[], Any]) -> None:
    with contextlib.suppress(BaseException):
        call()
