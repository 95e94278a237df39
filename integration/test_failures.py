"""Clusters that are down: at start-up, and going down mid-run. Errors must reach
the application through confluent-kafka's usual channels (``error_cb``, delivery
reports with an error); nothing may be reported delivered that was not."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pytest
from confluent_kafka import KafkaError

from integration.backends import BackendUnavailable, free_port
from integration.conftest import Harness
from integration.helpers import global_rule, poll_until, read_topic, topic_rule, values

#: errors librdkafka reports for a cluster that does not answer
DOWN = {KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._RESOLVE}
FAST_FAIL = {"message.timeout.ms": 3000, "reconnect.backoff.max.ms": 500}


class Reports:
    """Delivery reports and error_cb errors of one client."""

    def __init__(self) -> None:
        self.ok: list[tuple[str, bytes]] = []
        self.failed: list[tuple[str, bytes, int]] = []
        self.errors: list[KafkaError] = []

    def delivery(self, err: Any, msg: Any) -> None:
        if err is None:
            self.ok.append((msg.topic(), msg.value()))
        else:
            self.failed.append((msg.topic(), msg.value(), err.code()))

    def error(self, err: KafkaError) -> None:
        self.errors.append(err)


def wait_for(condition: Any, client: Any, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        client.poll(0.1)


def test_cluster_down_at_start_up(it: Harness) -> None:
    live = it.create_topic(it.name("live"), 2, "A")
    dead = it.name("dead")
    down = f"127.0.0.1:{free_port()}"  # nothing listens there
    clusters = {"A": it.bootstrap("A"), "down": down}
    conf = it.config([topic_rule(dead, "down"), global_rule("A")], clusters=clusters)

    p = Reports()
    producer = it.producer(conf, on_delivery=p.delivery, error_cb=p.error, **FAST_FAIL)
    sent_live = [f"live-{i}".encode() for i in range(50)]
    sent_dead = [f"dead-{i}".encode() for i in range(50)]
    for v in sent_live:
        producer.produce(live, v)
    for v in sent_dead:
        producer.produce(dead, v)
    assert producer.flush(20) == 0  # every message answered, within message.timeout.ms
    assert Counter(p.ok) == Counter((live, v) for v in sent_live)  # nothing of `dead` delivered
    assert sorted((t, v) for t, v, _ in p.failed) == sorted((dead, v) for v in sent_dead)
    assert {code for _, _, code in p.failed} == {KafkaError._MSG_TIMED_OUT}
    assert {e.code() for e in p.errors} & DOWN, p.errors
    assert sorted(values(read_topic(it.bootstrap("A"), live, 50))) == sorted(sent_live)

    c = Reports()
    consumer = it.consumer(conf, it.name("readers"), error_cb=c.error)
    consumer.subscribe([live, dead])
    got = poll_until(consumer, 50, timeout_s=30)
    assert sorted(values(got)) == sorted(sent_live)  # the live cluster is read all the same
    wait_for(lambda: {e.code() for e in c.errors} & DOWN, consumer, 10)
    assert {e.code() for e in c.errors} & DOWN, c.errors


def test_cluster_goes_down_mid_run(it: Harness) -> None:
    try:
        spare = it.spare_cluster("C")
    except BackendUnavailable as exc:
        pytest.skip(str(exc))
    topic = it.name("fragile")
    spare.create_topic(topic, 2)
    conf = it.config([topic_rule(topic, "C"), global_rule("A")])
    p = Reports()
    producer = it.producer(conf, on_delivery=p.delivery, error_cb=p.error, **FAST_FAIL)
    c = Reports()
    consumer = it.consumer(conf, it.name("readers"), error_cb=c.error)
    consumer.subscribe([topic])

    up = [f"up-{i}".encode() for i in range(200)]
    for v in up:
        producer.produce(topic, v)
    assert producer.flush(20) == 0
    assert sorted(v for _, v in p.ok) == sorted(up) and p.failed == []
    assert sorted(values(poll_until(consumer, 200, timeout_s=30))) == sorted(up)
    assert consumer.commit(asynchronous=False)  # else the restarted cluster redelivers them

    try:
        spare.kill()  # a crash: SIGKILL where the broker is a process (stop() elsewhere)
    except BackendUnavailable as exc:
        pytest.skip(str(exc))
    down = [f"down-{i}".encode() for i in range(200)]
    for v in down:
        producer.produce(topic, v)
    assert producer.flush(20) == 0
    # every message sent while the cluster is down is reported failed, none delivered
    assert sorted(v for _, v in p.ok) == sorted(up)
    assert sorted(v for _, v, _ in p.failed) == sorted(down)
    assert {code for _, _, code in p.failed} == {KafkaError._MSG_TIMED_OUT}
    assert {e.code() for e in p.errors} & DOWN, p.errors
    wait_for(lambda: {e.code() for e in c.errors} & DOWN, consumer, 10)
    assert {e.code() for e in c.errors} & DOWN, c.errors

    spare.start()
    # the cluster holds exactly what was reported delivered
    assert sorted(values(read_topic(spare.bootstrap_servers, topic, 200, timeout_s=30))) == sorted(up)
    # and the same clients carry on once it is back
    again = [f"again-{i}".encode() for i in range(50)]
    for v in again:
        producer.produce(topic, v)
    assert producer.flush(30) == 0
    assert sorted(v for _, v in p.ok) == sorted(up + again)
    assert sorted(values(poll_until(consumer, 50, timeout_s=40))) == sorted(again)
