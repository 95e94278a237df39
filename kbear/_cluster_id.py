"""Which cluster am I talking to: ``kbear.cluster.id`` checked against the brokers (#27 item 6).

A cluster's entry in ``clusters.yaml`` may declare the Kafka cluster id its brokers
report (``kbear.cluster.id``, meta only). When a routed client builds its
confluent-kafka client for that cluster, the first metadata answer
(``list_topics().cluster_id``) is compared with it: bootstrap servers that lead to
another cluster (a DNS or load-balancer mistake, what KIP-1242 addresses in Kafka
4.4) make the client refuse that cluster with :class:`WrongClusterError` before it
sends or reads anything there, a log record on ``kbear.client`` and a
:class:`~kbear._events.ClusterIdMismatch` event (metric
``kbear_cluster_id_mismatches_total``). A cluster that does not answer within
:data:`CHECK_TIMEOUT_S` is not refused (it cannot be told apart from a slow one):
a warning says it was not checked. Clusters without ``kbear.cluster.id`` are not
asked at all (no cost).
"""

from __future__ import annotations

import logging
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from kbear import _events
from kbear.config import KBearConfig

__all__ = ["CHECK_TIMEOUT_S", "WrongClusterError", "check_cluster_id"]

log = logging.getLogger("kbear.client")

#: Longest wait for the first metadata answer of a cluster with ``kbear.cluster.id`` (seconds).
CHECK_TIMEOUT_S = 10.0


class WrongClusterError(KafkaException):
    """The brokers of a cluster reported another cluster id than its
    ``kbear.cluster.id``: the routed client refuses to use it.

    ``args[0]`` is a fatal :class:`~confluent_kafka.KafkaError` (code
    ``_INCONSISTENT``) whose text names the ``clusters.yaml`` entry, both ids and
    the bootstrap servers. Attributes: ``cluster`` (the entry's id), ``expected``,
    ``reported`` (the id the brokers gave; None: they gave none).
    """

    def __init__(self, cluster: str, expected: str, reported: str | None, bootstrap: str) -> None:
        text = (
            f"cluster '{cluster}': its brokers ({bootstrap}) report cluster id {reported!r}, "
            f"clusters.yaml declares kbear.cluster.id {expected!r}: refusing to use them "
            "(wrong bootstrap servers, DNS or load balancer?)"
        )
        super().__init__(KafkaError(KafkaError._INCONSISTENT, text, fatal=True))
        self.cluster = cluster
        self.expected = expected
        self.reported = reported


def check_cluster_id(
    kind: str, cluster: str, client: Any, config: KBearConfig, timeout_s: float = CHECK_TIMEOUT_S
) -> None:
    """Compare the cluster id ``client``'s brokers report with ``cluster``'s
    ``kbear.cluster.id`` in ``config``.

    Args:
        kind: the routed client's kind (``"producer"``, ``"consumer"``), for the
            event and the log.
        cluster: the cluster's id in ``clusters.yaml``.
        client: the confluent-kafka client just built for it (``list_topics``).
        config: the configuration in force; a cluster without ``kbear.cluster.id``
            (or not in it) is not checked: nothing is asked.
        timeout_s: bound of the metadata request (seconds).

    Raises:
        WrongClusterError: the brokers answered with another cluster id.
    """
    entry = config.clusters.get(cluster)
    expected = None if entry is None else entry.failover.cluster_id
    if expected is None:
        return
    try:
        reported = client.list_topics(timeout=timeout_s).cluster_id
    except KafkaException as exc:
        log.warning(
            "kbear %s: cluster '%s': kbear.cluster.id not checked, no metadata answer within %.0f s: %s",
            kind,
            cluster,
            timeout_s,
            exc,
        )
        return
    if reported == expected:
        return
    assert entry is not None
    error = WrongClusterError(cluster, expected, reported, entry.meta.get("bootstrap.servers", ""))
    log.error(
        "kbear %s: %s",
        kind,
        error.args[0].str(),
        extra={"event": "cluster_id_mismatch", "cluster": cluster, "reason": str(reported)},
    )
    _events.emit(_events.ClusterIdMismatch(kind, cluster, expected, reported))
    raise error
