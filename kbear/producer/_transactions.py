"""The transactional API of RoutedProducer (a base class): a transaction spans one cluster.

It runs on the cluster of the first topic produced in it; a topic of another
cluster inside it raises ``KafkaException`` (``_CONFLICT``) naming both clusters.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaError, KafkaException

from kbear._clients import ClusterTarget, renamed
from kbear.producer._cluster import ClusterProducer
from kbear.router import Route


class TransactionCalls:
    """``init_transactions`` ... ``abort_transaction`` over the routed clusters."""

    _native: dict[str, Any]
    _lock: threading.RLock
    _clusters: dict[str, ClusterProducer]
    _routes: dict[str, Route]
    _pending: bool
    _txn_initialized: set[str]
    _txn_init_called: bool
    _txn_init_timeout: float | None
    _txn_open: bool
    _txn_cluster: str | None

    if TYPE_CHECKING:

        def _cluster(self, route: Route | ClusterTarget) -> ClusterProducer: ...

        def _apply_changes(self) -> None: ...

        def _pin(self) -> None: ...

        def route(self, topic: str) -> Route: ...

    # ------------------------------------------------------------------ transactions

    def _join_transaction(self, route: Route) -> None:
        """Begin the open transaction on ``route``'s cluster, or check it runs there."""
        if self._txn_cluster is None:
            entry = self._cluster(route)
            if route.cluster_id not in self._txn_initialized:
                entry.producer.init_transactions(*self._timeout_args(self._txn_init_timeout))
                self._txn_initialized.add(route.cluster_id)
            entry.producer.begin_transaction()
            self._txn_cluster = route.cluster_id
        elif self._txn_cluster != route.cluster_id:
            raise KafkaException(
                KafkaError(
                    KafkaError._CONFLICT,
                    f"topic '{route.requested_topic}' routes to cluster '{route.cluster_id}' but the "
                    f"open transaction runs on cluster '{self._txn_cluster}': a transaction spans "
                    "one cluster",
                )
            )

    def _require_transactional_id(self) -> None:
        """As confluent-kafka: every transactional call without ``transactional.id``
        raises ``_NOT_CONFIGURED``."""
        if "transactional.id" not in self._native:
            raise KafkaException(
                KafkaError(
                    KafkaError._NOT_CONFIGURED,
                    "The Transactional API requires transactional.id to be configured",
                )
            )

    @staticmethod
    def _timeout_args(timeout: float | None) -> tuple[float, ...]:
        return () if timeout is None else (timeout,)

    def init_transactions(self, timeout: float | None = None) -> None:
        """Initialize transactions (``transactional.id`` required), as confluent-kafka.

        Runs on the clients of the clusters already in use (``topics=`` at
        construction); a cluster first used inside a transaction is initialized
        then, with the same ``timeout`` (seconds).

        Raises:
            KafkaException: ``_NOT_CONFIGURED`` without ``transactional.id``, or
                the errors of confluent-kafka's ``init_transactions``.
        """
        self._require_transactional_id()
        with self._lock:
            for cluster_id, entry in list(self._clusters.items()):
                if cluster_id not in self._txn_initialized:
                    entry.producer.init_transactions(*self._timeout_args(timeout))
                    self._txn_initialized.add(cluster_id)
            self._txn_init_called = True
            self._txn_init_timeout = timeout

    def begin_transaction(self) -> None:
        """Begin a transaction. It runs on the cluster of the first topic produced in it;
        producing to a topic of another cluster in it raises ``KafkaException``
        (``_CONFLICT``) naming both clusters.

        Raises:
            KafkaException: ``_STATE`` before ``init_transactions`` or while a
                transaction is open.
        """
        self._require_transactional_id()
        if not self._txn_init_called:
            raise KafkaException(KafkaError(KafkaError._STATE, "init_transactions() must be called first"))
        if self._txn_open:
            raise KafkaException(KafkaError(KafkaError._STATE, "a transaction is already open"))
        if self._pending:
            self._apply_changes()
        self._txn_open = True
        self._txn_cluster = None
        self._pin()

    def send_offsets_to_transaction(
        self, positions: list[Any], group_metadata: Any, timeout: float | None = None
    ) -> None:
        """Add consumer offsets to the open transaction, as confluent-kafka.

        Args:
            positions: TopicPartitions (logical names) with the next offsets to consume.
            group_metadata: ``RoutedConsumer.consumer_group_metadata()`` of a consumer
                reading from the transaction's cluster.
            timeout: seconds (None: infinite).

        Raises:
            KafkaException: ``_STATE`` without an open transaction, or when nothing
                was produced in it yet and this producer uses several clusters;
                ``_CONFLICT`` when a topic of ``positions`` routes to another cluster.
        """
        self._require_transactional_id()
        if not self._txn_open:
            raise KafkaException(KafkaError(KafkaError._STATE, "no transaction is open"))
        if self._txn_cluster is None:
            if len(self._clusters) != 1:
                raise KafkaException(
                    KafkaError(
                        KafkaError._STATE,
                        "produce to the transaction first: its cluster is the cluster of the first "
                        "topic produced in it",
                    )
                )
            self._join_transaction(next(iter(self._routes.values())))
        physical = []
        for tp in positions:
            route = self.route(tp.topic)
            if route.cluster_id != self._txn_cluster:
                self._join_transaction(route)  # raises _CONFLICT naming both clusters
            physical.append(tp if route.topic == tp.topic else renamed(tp, route.topic))
        producer = self._clusters[str(self._txn_cluster)].producer
        producer.send_offsets_to_transaction(physical, group_metadata, *self._timeout_args(timeout))

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Commit the open transaction on its cluster (flushing first, as confluent-kafka).

        Raises:
            KafkaException: ``_STATE`` without an open transaction; the errors of
                confluent-kafka's ``commit_transaction`` (the transaction stays open
                so it can be retried or aborted, as there).
        """
        self._end_transaction("commit_transaction", timeout)

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Abort the open transaction on its cluster (purging its messages, as confluent-kafka)."""
        self._end_transaction("abort_transaction", timeout)

    def _end_transaction(self, method: str, timeout: float | None) -> None:
        self._require_transactional_id()
        if not self._txn_open:
            raise KafkaException(KafkaError(KafkaError._STATE, "no transaction is open"))
        if self._txn_cluster is not None:
            producer = self._clusters[self._txn_cluster].producer
            getattr(producer, method)(*self._timeout_args(timeout))
        self._txn_open = False
        self._txn_cluster = None
        self._pin()
