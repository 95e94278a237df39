"""The kbear demo: two embedded clusters, CRRL routes, a live route change, nothing lost.

``kbear demo`` (or :func:`run_demo`):

1. starts two in-process Kafka clusters (librdkafka mock clusters, see
   :mod:`kbear.testing`), ``east`` and ``west``;
2. writes the example configuration of ``examples/demo-config`` to a directory,
   the clusters' addresses read from ``${KBEAR_DEMO_EAST}``/``${KBEAR_DEMO_WEST}``;
3. for two client environments, ``prod`` and ``uat``, a RoutedProducer sends
   keyed messages to ``orders``, ``payments`` and ``audit`` while a
   RoutedConsumer (one consumer group per environment) reads them back;
4. mid-run, rewrites ``route-rules.yaml`` (atomically) to move uat's ``audit``
   from east to west; the running clients follow through their configuration
   watchers, without a restart;
5. prints, per environment, topic and cluster, the messages produced, delivered
   and consumed, and fails (exit 1) if any count differs or any message was
   consumed twice or never.

With ``--metrics-port N`` (``metrics_port``) it serves kbear's metrics on
127.0.0.1:N while it runs (the ``metrics`` extra) and also fails if a scrape
does not agree with its final table.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TextIO

from kbear.config import ROUTE_RULES_FILE
from kbear.consumer import RoutedConsumer
from kbear.producer import RoutedProducer
from kbear.reload import replace_file
from kbear.testing import EmbeddedCluster

__all__ = ["run_demo"]

_TEMPLATE = Path(__file__).with_name("_demo_config")
_ENVS = ("prod", "uat")
_TOPICS = ("orders", "payments", "audit")
_PHYSICAL_TOPICS = ("orders", "payments", "audit", "audit.v2")
_PARTITIONS = 4
_MOVED_RULE = "uat-audit-on-east"
_RELOAD_MS = 250
_TIME_LIMIT_S = 50.0

# (env, logical topic, cluster) -> count
_Key = tuple[str, str, str]


@dataclass
class _Tally:
    produced: Counter[_Key] = field(default_factory=Counter)
    delivered: Counter[_Key] = field(default_factory=Counter)
    failed: Counter[_Key] = field(default_factory=Counter)
    consumed: Counter[_Key] = field(default_factory=Counter)
    sent_ids: set[str] = field(default_factory=set)
    seen_ids: Counter[str] = field(default_factory=Counter)


def _remove_rule(directory: Path, rule_id: str) -> None:
    """Rewrite route-rules.yaml without ``rule_id``, atomically (temp file + rename)."""
    import yaml

    path = directory / ROUTE_RULES_FILE
    doc = yaml.safe_load(path.read_text())
    doc["route-rules"] = [r for r in doc["route-rules"] if r["id"] != rule_id]
    replace_file(path, yaml.safe_dump(doc, sort_keys=False))


def _on_delivery(tally: _Tally, key: _Key, err: Any, msg: Any) -> None:
    (tally.delivered if err is None else tally.failed)[key] += 1


def _produce_round(
    producers: dict[str, RoutedProducer], tally: _Tally, round_no: int, per_topic: int
) -> None:
    for env, producer in producers.items():
        for topic in _TOPICS:
            for i in range(per_topic):
                # The route of each message, looked up just before it is produced: the
                # watcher may switch the topic in the middle of a round (route() applies
                # a pending change, so produce() uses the cluster it names).
                key: _Key = (env, topic, producer.route(topic).cluster_id)
                msg_id = f"{env}/{topic}/{round_no}/{i}"
                report = partial(_on_delivery, tally, key)
                producer.produce(topic, value=msg_id.encode(), key=f"k{i % 16}", on_delivery=report)
                tally.produced[key] += 1
                tally.sent_ids.add(msg_id)
        producer.poll(0)


def _drain_consumers(consumers: dict[str, RoutedConsumer], tally: _Tally, budget_s: float) -> None:
    end = time.monotonic() + budget_s
    for env, consumer in consumers.items():
        while time.monotonic() < end:
            msgs = consumer.consume(num_messages=500, timeout=0.05)
            if not msgs:
                break
            routes = consumer.routes()
            for msg in msgs:
                if msg.error() is not None:
                    continue
                topic = str(msg.topic())
                tally.consumed[(env, topic, routes[topic].cluster_id)] += 1
                tally.seen_ids[bytes(msg.value() or b"").decode()] += 1


def _print_table(tally: _Tally, out: TextIO) -> bool:
    keys = sorted(set(tally.produced) | set(tally.consumed) | set(tally.delivered))
    header = f"{'env':<5} {'topic':<9} {'cluster':<8} {'produced':>9} {'delivered':>10} {'consumed':>9}  "
    print(header, file=out)
    print("-" * len(header), file=out)
    ok = True
    for key in keys:
        produced, delivered, consumed = tally.produced[key], tally.delivered[key], tally.consumed[key]
        good = produced == delivered == consumed and not tally.failed[key]
        ok &= good
        env, topic, cluster = key
        print(
            f"{env:<5} {topic:<9} {cluster:<8} {produced:>9} {delivered:>10} {consumed:>9}  "
            f"{'ok' if good else 'MISMATCH'}",
            file=out,
        )
    missing = tally.sent_ids - set(tally.seen_ids)
    duplicated = [m for m, n in tally.seen_ids.items() if n > 1]
    print(
        f"total: produced {sum(tally.produced.values())}, delivered {sum(tally.delivered.values())}, "
        f"consumed {sum(tally.consumed.values())}; never consumed {len(missing)}, "
        f"consumed twice {len(duplicated)}",
        file=out,
    )
    return ok and not missing and not duplicated


def run_demo(
    messages: int = 1000,
    config_dir: str | None = None,
    out: TextIO | None = None,
    metrics_port: int | None = None,
) -> int:
    """Run the demo and return its exit code (0: every count matches, 1: a mismatch).

    Args:
        messages: messages per environment and topic before the route change, and
            as many again after it (so ``4 * messages * 3`` in all).
        config_dir: where to write the example configuration (kept afterwards);
            a temporary directory, removed at the end, when None.
        out: where to print (stdout when None).
        metrics_port: serve kbear's metrics on this port of 127.0.0.1 while the demo
            runs (0: a free port), and compare them with the final table.

    Raises:
        ImportError: ``metrics_port`` is given without the ``metrics`` extra.
        OSError: the metrics port is taken.
    """
    out = out or sys.stdout
    started = time.monotonic()
    producers: dict[str, RoutedProducer] = {}
    consumers: dict[str, RoutedConsumer] = {}
    server = None
    with ExitStack() as cleanup:  # undone last to first
        directory = Path(config_dir or tempfile.mkdtemp(prefix="kbear-demo-"))
        if not config_dir:
            cleanup.callback(shutil.rmtree, directory, ignore_errors=True)
        east, west = cleanup.enter_context(EmbeddedCluster()), cleanup.enter_context(EmbeddedCluster())
        if metrics_port is not None:
            from kbear import _demo_metrics as metrics  # the metrics extra, imported only when asked for

            server = metrics.start(metrics_port, out)
            cleanup.callback(server.server_close)
            cleanup.callback(server.shutdown)
        for cluster in (east, west):
            for topic in _PHYSICAL_TOPICS:
                cluster.create_topic(topic, _PARTITIONS)
        os.environ["KBEAR_DEMO_EAST"] = east.bootstrap_servers
        os.environ["KBEAR_DEMO_WEST"] = west.bootstrap_servers
        # the four YAML files, as plain new files (not the package's permissions)
        shutil.copytree(_TEMPLATE, directory, copy_function=shutil.copyfile, dirs_exist_ok=True)
        print(f"kbear demo: clusters east={east.bootstrap_servers} west={west.bootstrap_servers}", file=out)
        print(f"configuration: {directory}", file=out)
        common = {"kbear.config": str(directory), "kbear.reload.interval.ms": _RELOAD_MS}
        for env in _ENVS:
            client = {"kbear.client.id": "demo-app", "kbear.client.meta.env": env, "client.id": f"demo-{env}"}
            producers[env] = RoutedProducer({**common, **client, "linger.ms": 5}, topics=_TOPICS)
            cleanup.callback(producers[env].close, 5)
            consumer = RoutedConsumer(
                {
                    **common,
                    **client,
                    "group.id": f"demo-{env}",
                    "group.protocol": "consumer",  # KIP-848: fast rebalances on the mock cluster
                    "auto.offset.reset": "earliest",
                    "kbear.switch.drain.idle.ms": 500,
                }
            )
            cleanup.callback(consumer.close)
            consumer.subscribe(list(_TOPICS))
            consumers[env] = consumer
            routes = ", ".join(
                f"{t} -> {r.cluster_id}/{r.topic}" for t in _TOPICS if (r := producers[env].route(t))
            )
            print(f"routes for env={env}: {routes}", file=out)

        tally = _Tally()
        per_round = max(1, messages // 10)
        rounds_before = -(-messages // per_round)
        for round_no in range(rounds_before):
            _produce_round(producers, tally, round_no, per_round)
            _drain_consumers(consumers, tally, 0.2)

        print(f"moving uat's audit from east to west: removing rule {_MOVED_RULE!r}", file=out)
        _remove_rule(directory, _MOVED_RULE)
        round_no = rounds_before
        after = 0
        while after < rounds_before and time.monotonic() - started < _TIME_LIMIT_S:
            _produce_round(producers, tally, round_no, per_round)
            if producers["uat"].route("audit").cluster_id == "west":
                after += 1
            round_no += 1
            _drain_consumers(consumers, tally, 0.2)
        for producer in producers.values():
            producer.flush(10)
        while time.monotonic() - started < _TIME_LIMIT_S:
            _drain_consumers(consumers, tally, 0.5)
            if len(tally.seen_ids) >= len(tally.sent_ids) and all(
                c.routes()["audit"].cluster_id == p.route("audit").cluster_id
                for c, p in zip(consumers.values(), producers.values(), strict=True)
            ):
                break
        print(
            f"after the change: uat audit -> {producers['uat'].route('audit').cluster_id} (producer), "
            f"{consumers['uat'].routes()['audit'].cluster_id} (consumer)",
            file=out,
        )
        print(file=out)
        ok = _print_table(tally, out)
        if server is not None:
            ok &= metrics.agree(
                tally.delivered, tally.consumed, [*producers.values(), *consumers.values()], out
            )
        print(
            f"\n{'OK: nothing lost, nothing duplicated' if ok else 'FAILED'} "
            f"({time.monotonic() - started:.1f} s)",
            file=out,
        )
        return 0 if ok else 1
