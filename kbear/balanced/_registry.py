"""Publishing a node's ownership reports (:mod:`kbear.balanced._ownership`).

:class:`Reporter` keeps one confluent-kafka Producer per cluster it reports to,
built from the cluster's properties (clusters.yaml) and the application's
security keys, and sends each report to the registry topic of every cluster the
node's topics route to, plus every cluster it reported to before (so the newest
record of the instance wins everywhere ``kbear assignments`` looks). Sending is
asynchronous; a failed delivery is logged on ``kbear.balanced``, never raised: a
report is advisory and must not stop the node from reading.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaException, Producer

from kbear._clients import cluster_config
from kbear.balanced._ownership import Report
from kbear.config import ClusterConfig

log = logging.getLogger("kbear.balanced")

#: Default name of the registry topic (``kbear.balanced.registry.topic``).
DEFAULT_REGISTRY_TOPIC = "kbear.balanced.registry"
#: How long close() waits for its last reports (seconds).
FLUSH_TIMEOUT_S = 5.0
#: Application keys a registry producer takes (connection security); the rest are a consumer's.
_SHARED_PREFIXES = ("security.", "sasl.", "ssl.", "socket.", "broker.address.", "client.id")


class Reporter:
    """Sends :class:`Report` records to ``topic`` (see the module docstring).

    Args:
        topic: the registry topic (a physical name, the same on every cluster).
        native: the application's confluent-kafka configuration (only its
            connection-security keys are used).
    """

    def __init__(self, topic: str, native: Mapping[str, Any]) -> None:
        self.topic = topic
        self._shared = {k: v for k, v in native.items() if k.startswith(_SHARED_PREFIXES)}
        self._producers: dict[str, tuple[dict[str, str], Any]] = {}
        self._failed: set[str] = set()

    def send(self, report: Report, clusters: Mapping[str, ClusterConfig]) -> None:
        """Send ``report`` to the registry topic of ``clusters`` and of every cluster
        reported to before (cluster id -> its configuration)."""
        value = report.encode()
        targets: dict[str, ClusterConfig | None] = dict.fromkeys(self._producers)
        targets.update(clusters)
        for cluster_id, cluster in targets.items():
            producer = self._producer(cluster_id, cluster)
            try:
                producer.produce(
                    self.topic, value=value, key=report.record_key, on_delivery=self._delivered(cluster_id)
                )
                producer.poll(0)
            except (BufferError, KafkaException) as exc:  # advisory: logged, never raised
                log.warning(
                    "kbear: ownership report to %r on cluster %r not sent: %s", self.topic, cluster_id, exc
                )

    def _producer(self, cluster_id: str, cluster: ClusterConfig | None) -> Any:
        current = self._producers.get(cluster_id)
        props = None if cluster is None else dict(cluster.meta)
        if current is not None and (props is None or current[0] == props):
            return current[1]
        assert props is not None
        conf = cluster_config(self._shared, props)
        conf.setdefault("message.timeout.ms", 10_000)
        producer = Producer(conf)
        if current is not None:
            current[1].flush(0)
        self._producers[cluster_id] = (props, producer)
        return producer

    def _delivered(self, cluster_id: str) -> Any:
        # Refers to the set of failed clusters, never to the Reporter: librdkafka holds
        # the callback of a report in flight, where Python's cycle collector cannot see
        # it (a reference back to the Reporter, which holds the producer, would keep
        # the producer alive for good when its cluster never answers).
        failed, topic = self._failed, self.topic

        def on_delivery(err: Any, _msg: Any) -> None:
            if err is None:
                failed.discard(cluster_id)
            elif cluster_id not in failed:  # once per outage, not per report
                failed.add(cluster_id)
                log.warning("kbear: ownership report to %r on cluster %r failed: %s", topic, cluster_id, err)

        return on_delivery

    def close(self, timeout: float = FLUSH_TIMEOUT_S) -> None:
        """Wait up to ``timeout`` seconds (in all) for the reports in flight."""
        for _, producer in self._producers.values():
            producer.flush(timeout)
        self._producers.clear()
