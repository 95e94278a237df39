"""``kbear assignments``: read the ownership reports of a group back and print its
partition -> node table, flagging overlaps, orphans and misconfigured nodes.

The reports (:mod:`kbear.balanced._ownership`) are read from the registry topic of
every cluster of the configuration, from its low to its high watermark, with a
plain confluent-kafka Consumer by assignment (no group join, nothing committed);
a cluster that does not answer within the timeout is named on stderr and skipped.
"""

from __future__ import annotations

import time
from typing import TextIO

from confluent_kafka import Consumer, KafkaException, TopicPartition

from kbear._clients import cluster_config
from kbear.balanced._ownership import Report, analyse, live_reports, table_lines
from kbear.balanced._registry import DEFAULT_REGISTRY_TOPIC
from kbear.config import ClusterConfig, KBearConfig

#: Exit code when something is flagged (or no node reports).
EXIT_FLAGGED = 1


def read_reports(cluster: ClusterConfig, topic: str, timeout: float) -> list[Report]:
    """Every ownership record in ``topic`` on ``cluster`` (blocking, about ``timeout`` s at most).

    Raises:
        KafkaException: the cluster did not answer.
    """
    conf = cluster_config(
        {"group.id": "kbear-assignments", "enable.auto.commit": False, "enable.partition.eof": False},
        cluster.meta,
    )
    consumer = Consumer(conf)
    try:
        md = consumer.list_topics(topic, timeout).topics.get(topic)
        if md is None or md.error is not None:
            return []
        marks: dict[int, tuple[int, int]] = {}
        for p in md.partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)
            if high > low:
                marks[p] = (low, high)
        if not marks:
            return []
        consumer.assign([TopicPartition(topic, p, low) for p, (low, _) in marks.items()])
        want = sum(high - low for low, high in marks.values())
        out: list[Report] = []
        seen = 0
        deadline = time.monotonic() + timeout
        while seen < want and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.2):
                if msg.error() is not None:
                    continue
                seen += 1
                report = Report.decode(msg.value())
                if report is not None:
                    out.append(report)
        return out
    finally:
        consumer.close()


def run_assignments(
    config: KBearConfig,
    group: str,
    out: TextIO,
    err: TextIO,
    *,
    topic: str = DEFAULT_REGISTRY_TOPIC,
    timeout: float = 10.0,
    now_ms: int | None = None,
) -> int:
    """Print ``group``'s table on ``out`` (problems and skipped clusters on ``err``);
    returns 0 when nothing is flagged, :data:`EXIT_FLAGGED` otherwise."""
    reports: list[Report] = []
    for cluster_id, cluster in sorted(config.clusters.items()):
        try:
            reports.extend(read_reports(cluster, topic, timeout))
        except (KafkaException, RuntimeError) as exc:
            print(f"kbear: cluster {cluster_id!r}: registry topic {topic!r} not read: {exc}", file=err)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    live, stale = live_reports(reports, group, now)
    print(f"group {group!r}: {len(live)} live node(s), {len(stale)} gone or stale", file=out)
    for report in live:
        print(
            f"  node {report.node_id} of {report.source_count}: {report.instance}, "
            f"{len(report.owned)} partition(s), reported {max(0, now - report.ts_ms) / 1000:.1f} s ago",
            file=out,
        )
    if not live:
        print(f"kbear: no live ownership report of group {group!r} in {topic!r}", file=err)
        return EXIT_FLAGGED
    analysis = analyse(live)
    for line in table_lines(analysis):
        print(line, file=out)
    if not analysis.problems:
        return 0
    print(f"{len(analysis.problems)} problem(s):", file=out)
    for line in analysis.problems:
        print(f"  {line}", file=out)
    return EXIT_FLAGGED
