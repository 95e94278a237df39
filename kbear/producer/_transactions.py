"""The transactional API of RoutedProducer (a base class): a transaction spans one cluster.

When the configuration proves that every route of the producer goes to one
cluster (:func:`~kbear.producer._cluster.single_cluster`), every transactional
call goes straight to that cluster's client, built at construction: librdkafka
keeps the transaction's state and answers each call with its own error codes
(``_STATE``, ``_CONFLICT`` after a timed-out ``init_transactions``...).

Otherwise the transaction runs on the cluster of the first topic produced in
it; a topic of another cluster inside it raises ``KafkaException``
(``_CONFLICT``) naming both clusters. kbear then keeps the state until a
cluster is chosen, and its ``_STATE`` errors start with librdkafka's message
("Operation not valid in state ...").
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from kbear._clients import ClientRegistry, renamed
from kbear._route import Route
from kbear.producer._cluster import ClusterProducer
from kbear.producer._state import ProducerState


@dataclass(eq=False)
class Transactions:
    """``init_transactions`` ... ``abort_transaction`` of a RoutedProducer over its clusters.

    Args:
        state: the producer's flags (``txn_open`` is kept here).
        clients: the client registry.
        routes: the route table's routes (read only: logical topic -> route).
        lock: the producer's lock.
        native: the producer's confluent-kafka configuration (``transactional.id``).
        home: the client of the one cluster every route goes to when the
            configuration proves there is one (pending reloads applied first), else None.
        route: ``route(topic)``: the topic's route (routing it if new).
        rebind: binds produce()'s fast path again (a transaction opened or ended).
    """

    _state: ProducerState
    _clients: ClientRegistry[ClusterProducer]
    _routes: Mapping[str, Route]
    _lock: threading.RLock
    _native: Mapping[str, Any]
    _home: Callable[[], ClusterProducer | None]
    route: Callable[[str], Route]
    _rebind: Callable[[], None]
    _txn_initialized: set[str] = field(default_factory=set, init=False)  # clusters that ran init_transactions
    #: clusters whose init_transactions raised (timed out: librdkafka goes on with it)
    _txn_init_unfinished: set[str] = field(default_factory=set, init=False)
    _txn_init_called: bool = field(default=False, init=False)
    _txn_init_timeout: float | None = field(default=None, init=False)
    _txn_cluster: str | None = field(default=None, init=False)  # the cluster the open transaction runs on

    def forget(self, cluster_id: str) -> None:
        """A new client of ``cluster_id`` was built: it has not run init_transactions() yet."""
        self._txn_initialized.discard(cluster_id)

    # ------------------------------------------------------------------ transactions

    def _state_error(self, detail: str) -> KafkaException:
        """A ``_STATE`` error worded as librdkafka's, with kbear's ``detail`` after it."""
        state = "InTransaction" if self._state.txn_open else "Ready" if self._txn_init_called else "Init"
        return KafkaException(
            KafkaError(KafkaError._STATE, f"Operation not valid in state {state}: {detail}")
        )

    def join(self, route: Route) -> None:
        """Begin the open transaction on ``route``'s cluster, or check it runs there."""
        if self._txn_cluster is None:
            entry = self._clients.client(route)
            if route.cluster_id not in self._txn_initialized:
                self._init(route.cluster_id, entry, self._txn_init_timeout)
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

        Runs on the clients of the clusters already in use (the one cluster of a
        one-cluster configuration, ``topics=`` at construction); a cluster first
        used inside a transaction is initialized then, with the same ``timeout``
        (seconds).

        Raises:
            KafkaException: ``_NOT_CONFIGURED`` without ``transactional.id``, or
                the errors of confluent-kafka's ``init_transactions`` (e.g.
                ``_TIMED_OUT``, retriable: call it again).
        """
        with self._lock:
            home = self._home()
            if home is None:
                self._require_transactional_id()
            for cluster_id, entry in self._clients.items():
                if cluster_id not in self._txn_initialized:
                    self._init(cluster_id, entry, timeout)
            self._txn_init_called = True
            self._txn_init_timeout = timeout

    def _init(self, cluster_id: str, entry: ClusterProducer, timeout: float | None) -> None:
        self._txn_init_unfinished.add(cluster_id)
        entry.producer.init_transactions(*self._timeout_args(timeout))
        self._txn_init_unfinished.discard(cluster_id)
        self._txn_initialized.add(cluster_id)

    def init_unfinished(self) -> set[str]:
        """The clusters whose client's ``init_transactions`` raised (a timeout: librdkafka
        goes on with it in the background) and has not been seen to finish since. No
        transaction can be open on them (``begin_transaction`` needs a finished init)."""
        return set(self._txn_init_unfinished)

    def begin_transaction(self) -> None:
        """Begin a transaction: on the one cluster of a one-cluster configuration,
        else on the cluster of the first topic produced in it (producing to a topic
        of another cluster in it raises ``KafkaException`` ``_CONFLICT`` naming both
        clusters).

        Raises:
            KafkaException: librdkafka's errors on a one-cluster configuration
                (``_STATE`` before ``init_transactions``, ``_CONFLICT`` while an
                ``init_transactions`` that timed out is unfinished...); else
                ``_STATE`` before ``init_transactions`` or while a transaction is open.
        """
        with self._lock:
            home = self._home()
            if home is not None and self._txn_cluster in (None, home.cluster_id):
                home.producer.begin_transaction()  # librdkafka answers for its state
                self._txn_initialized.add(home.cluster_id)
                self._txn_init_unfinished.discard(home.cluster_id)  # (its init finished)
                self._state.txn_open = True
                self._txn_cluster = home.cluster_id
                self._rebind()
                return
            self._require_transactional_id()
            if not self._txn_init_called:
                raise self._state_error("init_transactions() must be called first")
            if self._state.txn_open:
                raise self._state_error("a transaction is already open")
            self._state.txn_open = True
            self._txn_cluster = None
            self._rebind()

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
            KafkaException: on a one-cluster configuration, librdkafka's errors;
                else ``_STATE`` without an open transaction, or when nothing was
                produced in it yet and this producer uses several clusters;
                ``_CONFLICT`` when a topic of ``positions`` routes to another cluster.
            TypeError: ``positions`` is not a list of TopicPartition (as confluent-kafka).
        """
        with self._lock:
            home = self._home()
        if home is not None and self._txn_cluster in (None, home.cluster_id):
            # Every route goes to this cluster without a remap: the names are physical.
            home.producer.send_offsets_to_transaction(positions, group_metadata, *self._timeout_args(timeout))
            return
        self._require_transactional_id()
        if not self._state.txn_open:
            raise self._state_error("no transaction is open")
        if self._txn_cluster is None:
            if len(self._clients) != 1:
                raise self._state_error(
                    "produce to the transaction first: its cluster is the cluster of the first "
                    "topic produced in it"
                )
            self.join(next(iter(self._routes.values())))
        if not isinstance(positions, list):
            raise TypeError("requires list of TopicPartition")
        physical = []
        for tp in positions:
            route = self.route(tp.topic)
            if route.cluster_id != self._txn_cluster:
                self.join(route)  # raises _CONFLICT naming both clusters
            physical.append(tp if route.topic == tp.topic else renamed(tp, route.topic))
        producer = self._entry(str(self._txn_cluster)).producer
        producer.send_offsets_to_transaction(physical, group_metadata, *self._timeout_args(timeout))

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Commit the open transaction on its cluster (flushing first, as confluent-kafka).

        Raises:
            KafkaException: the errors of confluent-kafka's ``commit_transaction``
                (the transaction stays open so it can be retried or aborted, as
                there); ``_STATE`` without an open transaction.
        """
        self._end_transaction("commit_transaction", timeout)

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Abort the open transaction on its cluster (purging its messages, as confluent-kafka)."""
        self._end_transaction("abort_transaction", timeout)

    def _end_transaction(self, method: str, timeout: float | None) -> None:
        if not self._state.txn_open:
            with self._lock:
                home = self._home()
            if home is not None:
                # No transaction kbear knows of: librdkafka says why (its state, its code).
                getattr(home.producer, method)(*self._timeout_args(timeout))
                return
            self._require_transactional_id()
            raise self._state_error("no transaction is open")
        if self._txn_cluster is not None:
            producer = self._entry(self._txn_cluster).producer
            getattr(producer, method)(*self._timeout_args(timeout))
        self._state.txn_open = False
        self._txn_cluster = None
        self._rebind()

    def _entry(self, cluster_id: str) -> ClusterProducer:
        entry = self._clients.get(cluster_id)
        if entry is None:  # the transaction's cluster always has its client
            raise KeyError(cluster_id)
        return entry
