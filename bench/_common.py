"""Pieces the kbear benchmarks share: the message and producer settings, configuration
files and rules, the alternating-rounds ratio, topic filling and the machine's
description (bench/run.py, bench/aio.py and bench/acks.py use them)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import confluent_kafka
from confluent_kafka import Producer

from kbear.reload import replace_file
from kbear.testing import EmbeddedCluster

VALUE = b"x" * 100
PRODUCER_CONF = {"linger.ms": 5, "queue.buffering.max.messages": 2_000_000, "log_level": 3}


def write_config(directory: Path, clusters: dict[str, str], rules: list[dict[str, Any]]) -> Path:
    import yaml

    directory.mkdir(parents=True, exist_ok=True)
    (directory / "clusters.yaml").write_text(
        yaml.safe_dump(
            {"clusters": [{"id": c, "meta": {"bootstrap.servers": b}} for c, b in clusters.items()]}
        )
    )
    replace_file(directory / "route-rules.yaml", yaml.safe_dump({"route-rules": rules}, sort_keys=False))
    return directory


def global_rule(cluster: str) -> dict[str, Any]:
    return {"id": f"all-{cluster}", "meta": {"rule.isGlobal": True}, "rule": f"use cluster {cluster}"}


def topic_rule(topic: str, cluster: str) -> dict[str, Any]:
    return {"id": f"t-{topic}-{cluster}", "meta": {"topic.id": topic}, "rule": f"use cluster {cluster}"}


def median_ratio(
    raw: Callable[[], float],
    routed: Callable[[], float],
    rounds: int,
    per_round: list[float] | None = None,
) -> tuple[float, float, float]:
    """Alternate raw and routed rounds (each returns seconds); median times and ratio raw/routed.
    ``per_round``, when given, receives each round's ratio raw/routed."""
    raw_t, routed_t = [], []
    for i in range(rounds):
        order = (raw, routed) if i % 2 == 0 else (routed, raw)
        for fn in order:
            (raw_t if fn is raw else routed_t).append(fn())
    if per_round is not None:
        per_round.extend(r / k for r, k in zip(raw_t, routed_t, strict=True))
    r, k = statistics.median(raw_t), statistics.median(routed_t)
    return r, k, r / k


def fill(cluster: EmbeddedCluster, topic: str, partitions: int, per_partition: int) -> None:
    p = Producer({**PRODUCER_CONF, "bootstrap.servers": cluster.bootstrap_servers})
    for part in range(partitions):
        for _ in range(per_partition):
            p.produce(topic, VALUE, partition=part)
        p.poll(0)
    p.flush()


def emit(result: dict[str, Any], json_out: str | None) -> dict[str, Any]:
    """``result`` printed as one JSON object, and written to ``json_out`` when given."""
    text = json.dumps(result)
    print(text)
    if json_out:
        Path(json_out).write_text(text + "\n")
    return result


def _version_or_none(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine() -> dict[str, Any]:
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "confluent_kafka": importlib.metadata.version("confluent-kafka"),
        "librdkafka": confluent_kafka.libversion()[0],
        "rapidyaml": _version_or_none("rapidyaml"),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
