"""bench/run.py's throughput benchmarks: produce and consume through the routed
clients next to plain confluent-kafka (produce1, produce2, dispatch, consume1,
consume2, turns)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import PRODUCER_CONF, VALUE, median_ratio
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from kbear import RoutedConsumer, RoutedProducer
from kbear.testing import EmbeddedCluster


def bench_produce(
    n: int,
    rounds: int,
    router_dir: Path,
    clusters: dict[str, EmbeddedCluster],
    topics: list[str],
    spread: dict[str, str],
) -> dict[str, Any]:
    """Produce n messages over ``topics``; raw = one plain Producer per cluster driven by hand."""
    raw_producers = {
        c: Producer({**PRODUCER_CONF, "bootstrap.servers": cl.bootstrap_servers})
        for c, cl in clusters.items()
    }
    by_topic = {t: raw_producers[spread[t]] for t in topics}
    routed = RoutedProducer(
        {**PRODUCER_CONF, "kbear.config": str(router_dir), "kbear.reload.interval.ms": 0}, topics=topics
    )
    seq = [topics[i % len(topics)] for i in range(n)]
    # Time of the produce() calls alone, without the flush: the per-call
    # overhead, which the delivery's variance (flush) would hide.
    calls: dict[str, list[float]] = {"raw": [], "routed": []}

    def run_raw() -> float:
        t0 = time.perf_counter()
        if len(raw_producers) == 1:
            produce = next(iter(raw_producers.values())).produce
            for t in seq:
                produce(t, VALUE)
        else:
            for t in seq:
                by_topic[t].produce(t, VALUE)
        calls["raw"].append(time.perf_counter() - t0)
        for p in raw_producers.values():
            p.flush()
        return time.perf_counter() - t0

    def run_routed() -> float:
        t0 = time.perf_counter()
        produce = routed.produce
        for t in seq:
            produce(t, VALUE)
        calls["routed"].append(time.perf_counter() - t0)
        routed.flush()
        return time.perf_counter() - t0

    raw_s, routed_s, ratio = median_ratio(run_raw, run_routed, rounds)
    routed.close()
    raw_calls, routed_calls = statistics.median(calls["raw"]), statistics.median(calls["routed"])
    return {
        "messages": n,
        "raw_s": raw_s,
        "routed_s": routed_s,
        "ratio": ratio,
        "overhead_ns_per_call": (routed_calls - raw_calls) / n * 1e9,
        "overhead_ns_per_call_with_flush": (routed_s - raw_s) / n * 1e9,
        "raw_ns_per_call": raw_calls / n * 1e9,
    }


class _Before(RoutedProducer):
    """The shape of produce() before #25 item 5, for the same-run comparison: the fast
    path an instance attribute over the class method, in a class with ``__getattr__``
    (what RoutedClientBase had); the same dispatcher behind it."""

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(name)

    def shadow(self) -> None:
        self.__dict__["produce"] = self._fast_produce


class _BeforeConsumer(RoutedConsumer):
    """The shape of poll()/consume() before #25 item 5, for the same-run comparison: the
    fast paths instance attributes over the class methods; the same turn taking behind."""

    _fast_slots = False


def bench_produce_dispatch(
    rounds: int,
    router_dir: Path,
    clusters: dict[str, EmbeddedCluster],
    topics: list[str],
    spread: dict[str, str],
    block: int = 50_000,
) -> dict[str, Any]:
    """produce() over ``topics`` on several clusters, each way in the same run, in
    ``rounds`` rounds of one block of ``block`` calls per way, the ways taking turns
    block by block (the order rotating each round), timed in the calling thread's CPU
    time (``time.thread_time``: time spent descheduled by other processes does not
    count; the wall-clock ratio is kept as ``ratio_wall_clock``); the clients are
    flushed after each round, untimed. The reference: hand-written, a dict of plain
    Producers, ``producers[topic].produce(topic, value)`` inline. The ways, with the
    compiled dispatcher (when built) and with the pure-Python one:

    - ``<kind>``: ``routed.produce(topic, value)`` as people write it, the method
      looked up at every call;
    - ``<kind>_hoisted``: ``produce = routed.produce`` before the loop, then
      ``produce(topic, value)``;
    - ``before`` (compiled): the lookup as it was before #25 item 5 (an instance
      attribute over the class method, in a class with ``__getattr__``), as written.

    On one cluster (``produce`` is the cluster's own method): raw (the plain
    Producer, ``producer.produce(topic, value)`` as written), ``routed`` and
    ``routed_hoisted``. The ratio
    hand-written/way (1.0 = as fast) is taken per round, the median reported."""
    from kbear import _compiled
    from kbear.producer import _dispatch

    producers = {
        c: Producer({**PRODUCER_CONF, "bootstrap.servers": cl.bootstrap_servers})
        for c, cl in clusters.items()
    }
    by_topic = {t: producers[spread[t]] for t in topics}
    conf = {**PRODUCER_CONF, "kbear.config": str(router_dir), "kbear.reload.interval.ms": 0}
    routed: dict[str, RoutedProducer] = {}
    compiled = _dispatch._Dispatcher
    if len(producers) == 1:  # produce() is the cluster's own method, whatever the dispatcher
        routed["routed"] = RoutedProducer(conf, topics=topics)
    else:
        if compiled is not None:
            routed["compiled"] = RoutedProducer(conf, topics=topics)
            if _compiled.EXTENSION is not None and hasattr(_compiled.EXTENSION, "FastMethod"):
                before = routed["before"] = _Before(conf, topics=topics)
                before.shadow()
        _dispatch._Dispatcher = None  # the pure-Python dispatcher, as with KBEAR_PURE_PYTHON=1
        try:
            routed["pure"] = RoutedProducer(conf, topics=topics)
        finally:
            _dispatch._Dispatcher = compiled
    seq = [topics[i % len(topics)] for i in range(block)]
    raw = next(iter(producers.values()))

    def hand() -> tuple[float, float]:
        c0, t0 = time.thread_time(), time.perf_counter()
        if len(producers) == 1:  # raw: the one Producer, as written
            for t in seq:
                raw.produce(t, VALUE)
        else:
            for t in seq:
                by_topic[t].produce(t, VALUE)
        return time.thread_time() - c0, time.perf_counter() - t0

    def as_written(p: RoutedProducer) -> Callable[[], tuple[float, float]]:
        def run() -> tuple[float, float]:
            c0, t0 = time.thread_time(), time.perf_counter()
            for t in seq:
                p.produce(t, VALUE)
            return time.thread_time() - c0, time.perf_counter() - t0

        return run

    def hoisted(p: RoutedProducer) -> Callable[[], tuple[float, float]]:
        def run() -> tuple[float, float]:
            produce = p.produce
            c0, t0 = time.thread_time(), time.perf_counter()
            for t in seq:
                produce(t, VALUE)
            return time.thread_time() - c0, time.perf_counter() - t0

        return run

    runs: dict[str, Callable[[], tuple[float, float]]] = {"hand": hand}
    for k, p in routed.items():
        runs[k] = as_written(p)
        if k != "before":
            runs[f"{k}_hoisted"] = hoisted(p)
    names = list(runs)
    per_round: dict[str, list[float]] = {k: [] for k in names}
    wall: dict[str, list[float]] = {k: [] for k in names}
    for r in range(rounds):
        for j in range(len(names)):
            name = names[(r + j) % len(names)]
            cpu, elapsed = runs[name]()
            per_round[name].append(cpu)
            wall[name].append(elapsed)
        for pr in producers.values():
            pr.flush()
        for rp in routed.values():
            rp.flush()
    kinds = {k: type(p.produce).__name__ for k, p in routed.items()}
    for rp in routed.values():
        rp.close()
    med = {k: statistics.median(v) for k, v in per_round.items()}
    out: dict[str, Any] = {
        "calls_per_block": block,
        "rounds": rounds,
        "hand_ns_per_call": med["hand"] / block * 1e9,
    }
    for k in names[1:]:
        ratios = [h / w for h, w in zip(per_round["hand"], per_round[k], strict=True)]
        out[k] = {
            "bound": kinds[k.removesuffix("_hoisted")],
            "ratio": statistics.median(ratios),
            "ratio_min_max": [min(ratios), max(ratios)],
            "ratio_wall_clock": statistics.median(
                [h / w for h, w in zip(wall["hand"], wall[k], strict=True)]
            ),
            "ns_per_call": med[k] / block * 1e9,
            "overhead_ns_per_call": statistics.median(
                [(w - h) / block * 1e9 for h, w in zip(per_round["hand"], per_round[k], strict=True)]
            ),
        }
    return out


def bench_consume(
    rounds: int,
    router_dir: Path,
    clusters: dict[str, EmbeddedCluster],
    topics: dict[str, str],
    partitions: int,
    total: int,
    mode: str,
) -> dict[str, Any]:
    """Read ``total`` messages from ``topics`` (topic -> cluster) assigned from the beginning."""

    def parts(topic: str) -> list[TopicPartition]:
        return [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)]

    conf = {
        "group.id": "bench",
        "enable.auto.commit": False,
        "log_level": 3,
        "fetch.message.max.bytes": 1_048_576,
        "queued.min.messages": 200_000,
    }

    def drain(next_batch: Callable[[], int]) -> float:
        # Wait for the first message, then let the fetchers fill the local queues
        # (queued.min.messages) so the timed part measures the client, not the fetch.
        got = 0
        deadline = time.perf_counter() + 60
        while got == 0 and time.perf_counter() < deadline:
            got += next_batch()
        time.sleep(2.5)
        t0 = time.perf_counter()
        while got < total and time.perf_counter() < deadline:
            got += next_batch()
        if got < total:
            raise RuntimeError(f"consumed {got} of {total}")
        return time.perf_counter() - t0

    def batch_fn(clients: list[Any]) -> Callable[[], int]:
        if mode == "consume":
            if len(clients) == 1:
                c = clients[0]
                return lambda: len(c.consume(1000, 1.0))
            state = {"i": 0}

            def multi() -> int:
                state["i"] += 1
                return len(clients[state["i"] % len(clients)].consume(1000, 0.1))

            return multi
        if len(clients) == 1:
            c = clients[0]
            return lambda: 0 if c.poll(1.0) is None else 1
        state2 = {"i": 0}

        def multi_poll() -> int:
            state2["i"] += 1
            return 0 if clients[state2["i"] % len(clients)].poll(0.1) is None else 1

        return multi_poll

    def run_raw() -> float:
        raws = []
        for cluster_id in sorted(set(topics.values())):
            c = Consumer({**conf, "bootstrap.servers": clusters[cluster_id].bootstrap_servers})
            c.assign([tp for t, cid in topics.items() if cid == cluster_id for tp in parts(t)])
            raws.append(c)
        try:
            return drain(batch_fn(raws))
        finally:
            for c in raws:
                c.close()

    def run_routed() -> float:
        c = RoutedConsumer({**conf, "kbear.config": str(router_dir), "kbear.reload.interval.ms": 0})
        c.assign([tp for t in topics for tp in parts(t)])
        try:
            if mode == "consume":
                return drain(lambda: len(c.consume(1000, 1.0)))
            return drain(lambda: 0 if c.poll(1.0) is None else 1)
        finally:
            c.close()

    per_round: list[float] = []
    raw_s, routed_s, ratio = median_ratio(run_raw, run_routed, rounds, per_round)
    return {
        "messages": total,
        "raw_s": raw_s,
        "routed_s": routed_s,
        "ratio": ratio,
        "ratio_per_round_median": statistics.median(per_round),
        "ratio_min_max": [min(per_round), max(per_round)],
        "overhead_ns_per_message": (routed_s - raw_s) / total * 1e9,
    }


def bench_turns(
    rounds: int,
    router_dir: Path,
    clusters: dict[str, EmbeddedCluster],
    topics: dict[str, str],
    partitions: int,
    blocks: int,
    block: int,
    mode: str,
) -> dict[str, Any]:
    """poll() (or consume(100)) over two clusters whose clients have their queues
    filled, in one run: hand-written (plain Consumers, one per cluster,
    ``consumers[i % n].poll(0)`` inline: the reference), RoutedConsumer with the
    compiled turn taking and with the pure-Python one, each called as people write
    it (``routed.poll(0)``, the method looked up per call) and hoisted
    (``poll = routed.poll`` before the loop: ``<kind>_hoisted``), and ``before``
    (compiled, as written): the lookup as it was before #25 item 5 (the fast paths
    instance attributes over the class methods). Each round makes ``blocks``
    blocks of ``block`` calls per way, the ways taking turns block by block, timed
    in the calling thread's CPU time (``time.thread_time``); the ratio
    hand-written/routed per message is taken per round, the median reported."""
    from kbear.consumer import _turns

    def parts(topic: str) -> list[TopicPartition]:
        return [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)]

    conf = {
        "group.id": f"bench-{mode}",
        "enable.auto.commit": False,
        "log_level": 3,
        "queued.min.messages": 200_000,
    }
    hand: list[Any] = []
    for cluster_id in sorted(set(topics.values())):
        c = Consumer({**conf, "bootstrap.servers": clusters[cluster_id].bootstrap_servers})
        c.assign([tp for t, cid in topics.items() if cid == cluster_id for tp in parts(t)])
        hand.append(c)
    routed: dict[str, RoutedConsumer] = {}
    compiled = _turns._TurnTaker
    rconf = {**conf, "kbear.config": str(router_dir), "kbear.reload.interval.ms": 0}
    if compiled is not None:
        routed["compiled"] = RoutedConsumer(rconf)
        routed["compiled"].assign([tp for t in topics for tp in parts(t)])
        from kbear import _compiled

        if _compiled.EXTENSION is not None and hasattr(_compiled.EXTENSION, "FastMethod"):
            routed["before"] = _BeforeConsumer(rconf)
            routed["before"].assign([tp for t in topics for tp in parts(t)])
    _turns._TurnTaker = None  # the pure-Python turn taking, as with KBEAR_PURE_PYTHON=1
    try:
        routed["pure"] = RoutedConsumer(rconf)
        routed["pure"].assign([tp for t in topics for tp in parts(t)])
    finally:
        _turns._TurnTaker = compiled
    # the first message of each cluster, then time for the fetchers to fill the queues
    for c in hand:
        deadline = time.monotonic() + 30
        while c.poll(0.1) is None and time.monotonic() < deadline:
            pass
    for r in routed.values():
        deadline = time.monotonic() + 30
        while r.poll(0.1) is None and time.monotonic() < deadline:
            pass
    time.sleep(3)
    n = len(hand)

    def run_hand() -> tuple[float, int]:
        got = 0
        c0 = time.thread_time()
        if mode == "poll":
            for i in range(block):
                if hand[i % n].poll(0) is not None:
                    got += 1
        else:
            for i in range(block):
                got += len(hand[i % n].consume(100, 0))
        return time.thread_time() - c0, got

    def via(r: RoutedConsumer) -> Callable[[], tuple[float, int]]:
        def run() -> tuple[float, int]:  # as people write it: the method looked up per call
            got = 0
            c0 = time.thread_time()
            if mode == "poll":
                for _ in range(block):
                    if r.poll(0) is not None:
                        got += 1
            else:
                for _ in range(block):
                    got += len(r.consume(100, 0))
            return time.thread_time() - c0, got

        return run

    def via_hoisted(r: RoutedConsumer) -> Callable[[], tuple[float, int]]:
        def run() -> tuple[float, int]:
            got = 0
            c0 = time.thread_time()
            if mode == "poll":
                poll = r.poll
                for _ in range(block):
                    if poll(0) is not None:
                        got += 1
            else:
                consume = r.consume
                for _ in range(block):
                    got += len(consume(100, 0))
            return time.thread_time() - c0, got

        return run

    runs: dict[str, Callable[[], tuple[float, int]]] = {"hand": run_hand}
    for k, r in routed.items():
        runs[k] = via(r)
        if k != "before":
            runs[f"{k}_hoisted"] = via_hoisted(r)
    names = list(runs)
    per_round: dict[str, list[float]] = {k: [] for k in names}  # seconds per message
    for _ in range(rounds):
        spent = dict.fromkeys(names, 0.0)
        got = dict.fromkeys(names, 0)
        for b in range(blocks):
            for j in range(len(names)):
                name = names[(b + j) % len(names)]
                cpu, k = runs[name]()
                spent[name] += cpu
                got[name] += k
        for name in names:
            if got[name] == 0:
                raise RuntimeError(f"{mode}: {name} read nothing in a round")
            per_round[name].append(spent[name] / got[name])
    kinds = {k: type(getattr(r, mode)).__name__ for k, r in routed.items()}
    for c in hand:
        c.close()
    for r in routed.values():
        r.close()
    out: dict[str, Any] = {
        "mode": mode,
        "rounds": rounds,
        "hand_ns_per_message": statistics.median(per_round["hand"]) * 1e9,
    }
    for k in names[1:]:
        ratios = [h / r for h, r in zip(per_round["hand"], per_round[k], strict=True)]
        out[k] = {
            "bound": kinds[k.removesuffix("_hoisted")],
            "ratio": statistics.median(ratios),
            "ratio_min_max": [min(ratios), max(ratios)],
            "ns_per_message": statistics.median(per_round[k]) * 1e9,
        }
    return out
