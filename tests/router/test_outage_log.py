"""A cluster's outage does not flood the log: per client and cluster, the first
failure is logged at once, then one summary per interval, one record when the
outage is over; kbear's events (and metrics) count every failure."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import FAST_GROUP, Rule, rule, write_config
from kbear import RoutedConsumer, RoutedProducer, _events
from kbear._outage_log import OutageLog
from kbear.testing import EmbeddedCluster

#: topic ``ta`` on the first cluster, ``tb`` on the second (names no other test gives
#: its clusters: records about other tests' clients are told apart)
FIRST, SECOND = "outage-up", "outage-down"
RULES: list[Rule] = [
    rule("a", f"use cluster {FIRST}", isGlobal=True),
    rule("b", f"use cluster {SECOND}", topic="tb"),
]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.unit
def test_the_first_failure_at_once_then_one_summary_per_interval_then_the_end(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    outage = OutageLog(logging.getLogger("kbear.test"), "kbear consumer: cluster 'east'", clock=clock)
    caplog.set_level(logging.INFO, logger="kbear.test")
    outage.failure(logging.ERROR, ": %s", "Connect to 127.0.0.1:1 failed")
    for _ in range(311):  # 312 failures in the first minute
        clock.now += 0.19
        outage.failure(logging.ERROR, ": %s", "Connect to 127.0.0.1:1 failed")
    assert [r.getMessage() for r in caplog.records] == [
        "kbear consumer: cluster 'east': Connect to 127.0.0.1:1 failed"
    ]
    clock.now = 1060.0
    outage.failure(logging.ERROR, ": %s", "brokers are down")
    assert caplog.records[-1].getMessage() == (
        "kbear consumer: cluster 'east': 312 connection failures in the last 60 s (last: brokers are down)"
    )
    assert caplog.records[-1].levelno == logging.ERROR
    assert outage.tick() and len(caplog.records) == 2  # nothing more to say yet
    clock.now = 1089.0
    assert outage.tick()  # 29 s without a failure: still open
    clock.now = 1090.0
    assert not outage.tick()
    assert caplog.records[-1].levelno == logging.INFO
    assert caplog.records[-1].getMessage() == (
        "kbear consumer: cluster 'east': no failure for 30 s, outage over: 313 failures in 60 s"
    )
    outage.failure(logging.WARNING, " (%s) refused the connection: %s", "SSL", "bad CA")
    refused = "kbear consumer: cluster 'east' (SSL) refused the connection: bad CA"
    assert caplog.records[-1].getMessage() == refused
    assert len(caplog.records) == 4


@pytest.fixture
def conf(tmp_path: Path, two_clusters: tuple[EmbeddedCluster, EmbeddedCluster]) -> dict[str, Any]:
    clusters = dict(zip((FIRST, SECOND), two_clusters, strict=True))
    return {
        "kbear.config": str(write_config(tmp_path / "conf", clusters, RULES)),
        "kbear.reload.interval.ms": 0,
    }


@pytest.mark.parametrize("kind", ["producer", "consumer"])
def test_ten_seconds_of_outage_give_at_most_five_records(
    kind: str,
    conf: dict[str, Any],
    two_clusters: tuple[EmbeddedCluster, EmbeddedCluster],
    closing: Callable[[Any], Any],
    kbear_events: list[Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    client: Any
    if kind == "producer":
        client = closing(RoutedProducer(conf))
        client.produce("ta", b"x")
        client.produce("tb", b"x")
        assert client.flush(10) == 0
    else:
        client = closing(RoutedConsumer({**conf, **FAST_GROUP, "group.id": "outage"}))
        client.subscribe(["ta", "tb"])
        for _ in range(20):
            client.poll(0.1)
    caplog.set_level(logging.INFO, logger="kbear")
    caplog.clear()
    two_clusters[1].close()  # the second cluster is gone
    end = time.monotonic() + 10.0
    while time.monotonic() < end:
        if kind == "producer":
            client.produce("ta", b"x")
            client.poll(0.1)
        else:
            client.poll(0.1)
    loud = [r for r in caplog.records if r.name.startswith("kbear") and r.levelno >= logging.WARNING]
    ours = [r for r in loud if FIRST in r.getMessage() or SECOND in r.getMessage()]
    assert ours, "the outage was not logged at all"
    assert len(ours) <= 5, [r.getMessage() for r in ours]
    assert all(f"cluster '{SECOND}'" in r.getMessage() for r in ours), [r.getMessage() for r in ours]
    counted = [e for e in kbear_events if isinstance(e, _events.ClusterError) and e.cluster == SECOND]
    assert len(counted) > len(ours)  # every failure counted, for kbear's metrics
