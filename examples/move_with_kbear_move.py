"""Move a topic between clusters with ``kbear move`` while an application runs.

Starts two embedded clusters, ``east`` and ``west``, and an application (a
RoutedProducer sending ~500 keyed messages/s to ``orders`` and a RoutedConsumer of
group ``billing``, both watching the configuration every ``--reload-ms``), then runs
the ``kbear`` command in a process of its own:

1. ``kbear move --config DIR --topic orders --group billing --to west``: the plan
   says ``orders`` does not exist on west (exit 1). The embedded cluster has no
   CreateTopics, so this script creates it (on a real cluster ``--create`` does);
2. the plan again: ready (exit 0);
3. ``kbear move ... --apply``: writes the rule, waits until east is quiet and the
   group's lag there is 0, and reports the time it took.

Then it counts: every delivered message consumed (exit 1 if any is missing).

    .venv/bin/python examples/move_with_kbear_move.py [--reload-ms 1000]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from kbear import RoutedConsumer, RoutedProducer
from kbear.testing import EmbeddedCluster, Traffic


def kbear(*args: str) -> int:
    """Run the kbear command line in a process of its own, its output shown."""
    command = [sys.executable, "-m", "kbear.cli", *args]
    print("\n$ kbear " + " ".join(args), flush=True)
    return subprocess.run(command, check=False).returncode


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--reload-ms", type=int, default=1000, help="the application's kbear.reload.interval.ms"
    )
    args = parser.parse_args()

    east, west = EmbeddedCluster(), EmbeddedCluster()
    east.create_topic("orders", 4)
    config = Path(tempfile.mkdtemp(prefix="kbear-move-example-"))
    clusters = [
        {"id": n, "meta": {"bootstrap.servers": c.bootstrap_servers}}
        for n, c in (("east", east), ("west", west))
    ]
    (config / "clusters.yaml").write_text(yaml.safe_dump({"clusters": clusters}, sort_keys=False))
    rules = [{"id": "default", "meta": {"rule.isGlobal": True}, "rule": "use cluster east"}]
    (config / "route-rules.yaml").write_text(yaml.safe_dump({"route-rules": rules}, sort_keys=False))

    common = {"kbear.config": str(config), "kbear.reload.interval.ms": args.reload_ms}
    producer = RoutedProducer(common)
    consumer = RoutedConsumer(
        {**common, "group.id": "billing", "group.protocol": "consumer", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe(["orders"])
    # the application: keyed messages produced and consumed in two threads
    traffic = Traffic(producer, consumer, "orders", keys=50, produce_for=400).start()
    try:
        time.sleep(2)
        move = ["move", "--config", str(config), "--topic", "orders", "--group", "billing", "--to", "west"]
        move += ["--request-timeout", "2"]  # the embedded cluster has no DescribeConfigs: do not wait long
        print(f"plan exit code: {kbear(*move)}")
        west.create_topic("orders", 4)
        print("\n(created orders on west with 4 partitions: what --create does on a real cluster)")
        print(f"plan exit code: {kbear(*move)}")
        code = kbear(*move, "--apply", "--stable", "3")
        print(f"apply exit code: {code}")
        time.sleep(1)
    finally:
        traffic.stop(timeout=120)
        consumer.close()
        producer.close(10)
        east.close()
        west.close()
    lost = traffic.lost
    print(
        f"\ndelivered {len(traffic.delivered)}, consumed {len(traffic.consumed)}, lost {len(lost)}, "
        f"duplicates {traffic.duplicates}"
    )
    print(f"route-rules.yaml now:\n{(config / 'route-rules.yaml').read_text()}")
    return 0 if code == 0 and not lost else 1


if __name__ == "__main__":
    raise SystemExit(main())
