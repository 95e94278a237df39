"""RoutedConsumer.poll()/consume() on the path kbear takes per message: a remapped
topic (``use cluster A, topic phys``), so every message read is renamed and the
call goes through the consumer's poll loop, not a bound fast path.

    .venv/bin/python bench/slow_path.py              # the kbear installed (or on PYTHONPATH)

One in-process mock cluster, 4 partitions filled with 25,000 messages each; per
round a new group assigns them from the beginning, waits for the local queues to
fill, then times 20,000 messages read with ``poll(0)`` (or ``consume(100, 0)``)
in the calling thread's CPU time. Prints the median ns per message over 5
rounds and the range. Set PYTHONPATH to another kbear tree to compare two trees
in one sitting (docs/contributing/composition.md).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from _common import fill, write_config
from confluent_kafka import OFFSET_BEGINNING, TopicPartition

import kbear
from kbear import RoutedConsumer
from kbear.testing import EmbeddedCluster

PARTITIONS, PER_PARTITION, MESSAGES, ROUNDS = 4, 25_000, 20_000, 5


def main() -> None:
    cluster = EmbeddedCluster()
    fill(cluster, "phys", PARTITIONS, PER_PARTITION)
    rule = {"id": "remap", "meta": {"topic.id": "logical"}, "rule": "use cluster A, topic phys"}
    directory = write_config(Path(tempfile.mkdtemp()), {"A": cluster.bootstrap_servers}, [rule])
    out: dict[str, str] = {}
    for mode in ("poll", "consume"):
        per_message: list[float] = []
        for r in range(ROUNDS):
            consumer = RoutedConsumer(
                {
                    "group.id": f"slow-{mode}-{r}",
                    "enable.auto.commit": False,
                    "log_level": 3,
                    "queued.min.messages": 200_000,
                    "kbear.config": str(directory),
                    "kbear.reload.interval.ms": 0,
                }
            )
            consumer.assign([TopicPartition("logical", p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
            got = 0
            deadline = time.monotonic() + 60
            while got == 0 and time.monotonic() < deadline:
                got += (consumer.poll(1.0) is not None) if mode == "poll" else len(consumer.consume(100, 1.0))
            time.sleep(2.0)  # the fetchers fill the local queues: the timed part measures the client
            assert "poll" not in consumer.__dict__, "a remapped topic must not be on a bound fast path"
            t0, n = time.thread_time(), 0
            while n < MESSAGES:
                n += (consumer.poll(0) is not None) if mode == "poll" else len(consumer.consume(100, 0))
            per_message.append((time.thread_time() - t0) / n * 1e9)
            consumer.close()
        low, high = min(per_message), max(per_message)
        out[mode] = f"{statistics.median(per_message):.0f} ns/message (range {low:.0f}-{high:.0f})"
    print(Path(kbear.__file__).parent.parent, out)


if __name__ == "__main__":
    main()
