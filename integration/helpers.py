"""Backend-neutral helpers of the integration tests: kbear configuration files,
reading a topic back with a plain confluent-kafka client, bounded poll loops.

Nothing here trusts a broker's high watermark (some brokers' are wrong: Tansu 0.6's
was the last batch's base offset + 1): topics are read from the beginning until the
expected number of messages arrived.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from tenacity import Retrying, retry_if_result, stop_after_delay, wait_fixed

from integration.backends import RDKAFKA_LOG, topic_partitions
from kbear.reload import replace_file

T = TypeVar("T")

# --------------------------------------------------------------------------- configuration


def global_rule(cluster: str, rule_id: str = "default", priority: int = 0) -> dict[str, Any]:
    """``use cluster <cluster>`` for every lookup."""
    return {
        "id": rule_id,
        "priority": priority,
        "meta": {"rule.isGlobal": True},
        "rule": f"use cluster {cluster}",
    }


def topic_rule(
    topic: str, cluster: str, *, physical: str | None = None, rule_id: str | None = None, priority: int = 0
) -> dict[str, Any]:
    """``use cluster <cluster>[, topic <physical>]`` for lookups of ``topic``."""
    statement = f"use cluster {cluster}" + (f", topic {physical}" if physical else "")
    return {
        "id": rule_id or f"topic-{topic}",
        "priority": priority,
        "meta": {"topic.id": topic},
        "rule": statement,
    }


def write_yaml_atomically(path: Path, data: Any) -> None:
    """Temporary file in the same directory, then ``os.replace`` (as docs/concepts/configuration.md asks)."""
    replace_file(path, yaml.safe_dump(data, sort_keys=False))


class ConfigDir:
    """A kbear configuration directory on disk for a set of clusters (id -> bootstrap)."""

    def __init__(self, path: Path, clusters: Mapping[str, str], rules: Sequence[Mapping[str, Any]]):
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        self.write_clusters(clusters)
        self.write_rules(rules)

    def write_clusters(self, clusters: Mapping[str, str]) -> None:
        entries = [{"id": cid, "meta": {"bootstrap.servers": bs}} for cid, bs in clusters.items()]
        write_yaml_atomically(self.path / "clusters.yaml", {"clusters": entries})

    def write_rules(self, rules: Sequence[Mapping[str, Any]]) -> None:
        write_yaml_atomically(self.path / "route-rules.yaml", {"route-rules": [dict(r) for r in rules]})

    def __str__(self) -> str:
        return str(self.path)


# --------------------------------------------------------------------------- reading back


def read_topic(
    bootstrap: str, topic: str, expected: int, timeout_s: float = 20.0, grace_s: float = 0.5
) -> list[Any]:
    """Every message of ``topic`` on the cluster at ``bootstrap``: a plain Consumer
    assigned to all partitions from the beginning (no group join) reads until
    ``expected`` messages arrived (or ``timeout_s``), then ``grace_s`` more to catch
    any extra one."""
    partitions = topic_partitions(bootstrap, topic)
    out: list[Any] = []
    if not partitions:
        return out
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "kbear-it-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        },
        logger=RDKAFKA_LOG,
    )
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        deadline = time.monotonic() + timeout_s
        while len(out) < expected and time.monotonic() < deadline:
            out.extend(m for m in c.consume(1000, 0.1) if m.error() is None)
        grace = time.monotonic() + grace_s
        while time.monotonic() < grace:
            out.extend(m for m in c.consume(1000, 0.1) if m.error() is None)
    finally:
        c.close()
    return out


def values(messages: Iterable[Any]) -> list[bytes]:
    return [m.value() for m in messages]


def poll_until(
    consumer: Any, wanted: int, timeout_s: float, errors: list[Any] | None = None, batch: int = 500
) -> list[Any]:
    """``consume()`` until ``wanted`` good messages or ``timeout_s``; error events go to ``errors``."""
    out: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < wanted and time.monotonic() < deadline:
        for m in consumer.consume(batch, 0.1):
            if m.error() is None:
                out.append(m)
            elif errors is not None:
                errors.append(m.error())
    return out


def wait_for_assignment(consumers: Sequence[Any], partitions: int, timeout_s: float) -> list[list[Any]]:
    """Poll every consumer in turn until each has partitions and together they hold
    ``partitions`` partitions, none twice. Returns the messages each received meanwhile."""
    got: list[list[Any]] = [[] for _ in consumers]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for i, consumer in enumerate(consumers):
            msg = consumer.poll(0.05)
            if msg is not None and msg.error() is None:
                got[i].append(msg)
        mine = [c.assignment() for c in consumers]
        owned = [(tp.topic, tp.partition) for parts in mine for tp in parts]
        if all(mine) and len(owned) == partitions and len(set(owned)) == partitions:
            return got
    owned = [[(tp.topic, tp.partition) for tp in c.assignment()] for c in consumers]
    raise AssertionError(f"assignment not complete after {timeout_s} s: {owned}")


def duplicates(items: Iterable[Any]) -> dict[Any, int]:
    """Items seen more than once, with their counts."""
    return {k: n for k, n in Counter(items).items() if n > 1}


def settled(read: Callable[[], T], until: Callable[[T], bool], timeout_s: float = 15.0) -> T:
    """``read()`` every 100 ms (tenacity) until ``until`` holds for its value or
    ``timeout_s`` seconds passed; returns the last value, which the test then asserts.

    Apache Kafka applies topic, partition and config changes through its controller:
    the broker that answers the next request may still show the old state for a
    moment after the change was acknowledged (eventually consistent metadata).
    """
    retrying = Retrying(
        stop=stop_after_delay(timeout_s),
        wait=wait_fixed(0.1),
        retry=retry_if_result(lambda value: not until(value)),
        # out of time: the last value, for the test's assertion to show
        retry_error_callback=lambda state: state.outcome.result() if state.outcome else None,
    )
    value: T = retrying(read)
    return value
