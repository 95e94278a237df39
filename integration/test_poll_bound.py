"""A group follows a live move while a broker of the old cluster dies: every
``poll(0.1)`` returns within 1 s and nothing is lost (issue #39 item 6).

The old cluster ``A3`` has 3 brokers (topics replicated on 3, min ISR 2 on
Apache Kafka); the topic moves from it to ``B`` while a producer thread sends
keyed messages and two members poll in threads of their own. 1.5 s after the
rule write, the broker coordinating the group on ``A3`` dies (SIGKILL on Apache
Kafka, a broker down on the mock). The mock moves no partition leadership (what
the broker leads is unreadable while it is down): it comes back ``DOWN_S``
later; Apache Kafka elects other leaders and another coordinator after
``broker.session.timeout.ms``, the broker stays dead. Another thread calls
``assignment()`` and ``position()`` of both members every 50 ms. The longest
calls are reported in the run's summary; ``bench/poll_bound.py`` measures them
over many runs.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pytest

from integration.conftest import Harness
from integration.helpers import global_rule, topic_rule
from integration.polling import Asker, Poller

BOUND_S = 1.0
PARTITIONS = 4
KEYS = 12
RATE = 500  # messages per second
PRODUCE_S = 12.0
MOVE_AT_S = 3.0
KILL_AFTER_S = 1.5
DOWN_S = 6.0
MAX_SECONDS = 120.0
DRAIN_TIMEOUT_MS = 60_000


@pytest.mark.timeout(600)  # a 3-broker cluster starts first
@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_poll_keeps_its_bound_when_a_broker_of_the_old_cluster_dies_mid_move(
    it: Harness, protocol: str
) -> None:
    group_protocol = it.backend.protocols.get(protocol)
    if group_protocol is None:
        pytest.skip(f"{it.backend.name}: group.protocol={protocol} is not run on this backend")
    old = it.brokers_cluster("A3", 3)
    victim, group = next(
        ((b, g) for b in (2, 3) if (g := old.group_coordinated_by(it.name("bound"), b)) is not None),
        (2, it.name("bound")),
    )
    topic = it.create_topic(it.name("moving"), PARTITIONS, "A3", "B")
    config = it.config([topic_rule(topic, "A3", rule_id="move"), global_rule("A")])
    # the drains outlast the fault (leaders and the coordinator elected again on Apache
    # Kafka, the broker back on the mock): nothing is left behind on A3
    drain = {"kbear.switch.drain.timeout.ms": DRAIN_TIMEOUT_MS}
    settings = {"kbear.switch.drain.idle.ms": 500, **drain, **group_protocol.conf}
    consumers = [it.consumer(config, group, reload_ms=100, **settings) for _ in range(2)]
    producer = it.producer(config, reload_ms=100, **{"linger.ms": 5, **drain})
    for consumer in consumers:
        consumer.subscribe([topic])
    sink: list[tuple[bytes, int]] = []
    pollers = [Poller(c, sink) for c in consumers]
    asker = Asker(consumers, topic, PARTITIONS)
    delivered: list[int] = []
    failed: list[Any] = []

    def report(err: Any, msg: Any) -> None:
        (delivered.append(int(msg.value())) if err is None else failed.append(err))

    for thread in (*pollers, asker):
        thread.start()
    t0 = time.monotonic()
    deadline = t0 + MAX_SECONDS
    sent = 0
    written_at: float | None = None
    killed_at: float | None = None
    comes_back = it.backend.name == "mock"
    try:
        while time.monotonic() - t0 < PRODUCE_S:
            now = time.monotonic() - t0
            while sent < int(now * RATE):
                producer.produce(topic, str(sent).encode(), f"k{sent % KEYS}".encode(), on_delivery=report)
                sent += 1
            producer.poll(0.01)
            if written_at is None and now >= MOVE_AT_S:
                config.write_rules([topic_rule(topic, "B", rule_id="move"), global_rule("A")])
                written_at = time.monotonic()
            if written_at is not None and killed_at is None and time.monotonic() - written_at >= KILL_AFTER_S:
                old.kill_broker(victim)
                killed_at = time.monotonic()
            if comes_back and killed_at is not None and time.monotonic() - killed_at >= DOWN_S:
                old.start_broker(victim)
                comes_back = False
        assert producer.flush(60) == 0

        def done() -> bool:
            moved = all(c.routes()[topic].cluster_id == "B" for c in consumers)
            return moved and set(delivered) <= {v for _, v in sink}

        while time.monotonic() < deadline and not done():
            time.sleep(0.25)
    finally:
        for thread in (*pollers, asker):
            thread.stop.set()
        for thread in (*pollers, asker):
            thread.join(15)
    assert not [t for t in (*pollers, asker) if t.is_alive()], "a call did not return within 15 s"
    assert [p.error for p in pollers if p.error] == [] and asker.error is None
    read = [v for _, v in sink]
    lost = sorted(set(delivered) - set(read))
    twice = sum(n - 1 for n in Counter(read).values())
    breaks = 0
    last: dict[bytes, int] = {}
    for key, value in dict.fromkeys(sink):
        breaks += value < last.get(key, -1)
        last[key] = value
    longest = max(p.longest for p in pollers)
    it.note(
        f"poll bound, {protocol} protocol, broker {victim} of A3 (the group's coordinator) killed "
        f"{KILL_AFTER_S} s after the rule write: longest poll(0.1) {longest * 1000:.0f} ms, longest "
        f"assignment()+position() from another thread {asker.longest * 1000:.0f} ms; sent {sent}, "
        f"delivered {len(delivered)}, lost {len(lost)}, read twice {twice}, order breaks {breaks}, "
        f"routes {[c.routes()[topic].cluster_id for c in consumers]}"
    )
    assert longest <= BOUND_S
    assert asker.longest <= BOUND_S
    assert len(delivered) > 0
    if it.backend.name == "kafka" and (failed or lost or breaks):
        # Seen on 2026-11-28 (load 20-30): the producer's switch stalled produce() and
        # failed messages (_PURGE_INFLIGHT), and messages of A3 were left unread after
        # the drain; poll() kept its bound. Not diagnosed yet (issue #39 item 6).
        pytest.xfail(
            f"Apache Kafka, coordinator killed: {len(failed)} failed, {len(lost)} lost, {breaks} order breaks"
        )
    assert failed == [] and len(delivered) == sent
    assert lost == [], f"lost {len(lost)}: {lost[:10]}"
    assert breaks == 0  # read twice: reported (the group's commits on A3 fail while its coordinator is down)
