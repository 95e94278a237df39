"""Test helpers: an in-process Kafka cluster for tests and the demo.

:class:`EmbeddedCluster` runs librdkafka's mock cluster (librdkafka
``src/rdkafka_mock.h``) inside the current process. Its brokers listen on real
TCP ports on 127.0.0.1, so any Kafka client in this or another process can use
:attr:`EmbeddedCluster.bootstrap_servers`; several clusters can run in one
process, each independent of the others.

Tests can also put their own clients under the routed clients:
:func:`mount_clients` (a client factory, as httpx mounts a transport).
:class:`LoopWatch` measures how long an asyncio event loop was held (by a
blocking call in a coroutine, for example) while a test or benchmark runs.
:class:`Traffic` keeps keyed messages flowing through a producer and a consumer
while something changes (a move, a failover) and counts what was lost or read
twice.

Example::

    from confluent_kafka import Consumer, Producer
    from kbear.testing import EmbeddedCluster

    with EmbeddedCluster() as cluster:
        cluster.create_topic("orders", num_partitions=3)
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
        producer.produce("orders", key=b"k", value=b"v")
        producer.flush(5)

What the mock cluster does not do: most of the AdminClient (``list_topics``,
``cluster_id``, ``list_offsets`` and group offsets of named partitions work;
create/delete/describe time out or answer ``_UNSUPPORTED_FEATURE``: see
docs/compatibility/limits.md), Java clients, persistence,
``read_committed`` filtering of aborted messages. It keeps only about the last
5 MB of each partition. Topics a producer asks for without creating them are
auto-created with 4 partitions.
"""

from __future__ import annotations

import ctypes
import re
import weakref
from collections.abc import Sequence

from kbear import _mock
from kbear._clients import ClientFactory, ClientKind, confluent_client, mount
from kbear._load import LoopWatch, Traffic

__all__ = [
    "ClientFactory",
    "ClientKind",
    "EmbeddedCluster",
    "LoopWatch",
    "Traffic",
    "confluent_client",
    "mount_clients",
]

#: ``with mount_clients(factory):`` the routed clients (RoutedProducer,
#: RoutedConsumer, RoutedAdminClient) created inside the block build each cluster's
#: confluent-kafka client with ``factory(kind, cluster_id, config)`` (a
#: :class:`ClientFactory`; :func:`confluent_client` builds confluent-kafka's own), as
#: httpx mounts a transport: a test injects fakes or wraps the real clients there.
#: Process-wide; the innermost mount wins; a routed client keeps the factory it was
#: created with.
mount_clients = mount

_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")
#: ``auto_offset_reset`` of :meth:`EmbeddedCluster.set_share_group` -> the mock's value
_RESETS = {"latest": 0, "earliest": 1}


class EmbeddedCluster:
    """An in-process Kafka cluster (librdkafka mock cluster) for tests and the demo.

    The cluster is made with librdkafka's mock-cluster C API
    (``rd_kafka_mock_cluster_new()``), through :mod:`ctypes` in the ``librdkafka``
    shared library bundled in the confluent-kafka wheel: partition counts are
    exact, the consumer-group join delay is ``group_initial_rebalance_delay_ms``
    and brokers can be taken down and up.

    The cluster lives until :meth:`close` (also called by ``with``, when the
    object is garbage-collected and at interpreter exit). Close the clients
    that use it first: a consumer group member with offsets to commit blocks
    in ``Consumer.close()`` for ``session.timeout.ms`` (45 s by default) when
    its cluster is already gone. Other clients only log connection errors.

    Args:
        num_brokers: number of brokers (``int`` >= 1). Broker ids are
            ``1..num_brokers``.
        group_initial_rebalance_delay_ms: the brokers'
            ``group.initial.rebalance.delay.ms`` in milliseconds (``int`` >= 0):
            how long the group coordinator waits for more members before the
            first rebalance of a classic consumer group. The default 0 makes
            the first message of a subscribed consumer arrive in about 0.1 s
            instead of about 3.1 s (see :attr:`group_initial_rebalance_delay_ms`).

    Raises:
        ValueError: ``num_brokers`` < 1 or ``group_initial_rebalance_delay_ms`` < 0.
        RuntimeError: librdkafka could not create the client or the cluster, or
            its library does not export the mock-cluster C API (the message says
            why).
    """

    def __init__(self, num_brokers: int = 1, *, group_initial_rebalance_delay_ms: int = 0) -> None:
        if num_brokers < 1:
            raise ValueError(f"num_brokers must be >= 1, got {num_brokers}")
        if group_initial_rebalance_delay_ms < 0:
            raise ValueError(
                f"group_initial_rebalance_delay_ms must be >= 0, got {group_initial_rebalance_delay_ms}"
            )
        self._num_brokers = num_brokers
        self._h, self._bootstrap, self._delay_ms = _mock.open_cluster(
            num_brokers, group_initial_rebalance_delay_ms
        )
        self._finalizer = weakref.finalize(self, self._h.destroy)

    @property
    def num_brokers(self) -> int:
        """Number of brokers (``int``); their ids are ``1..num_brokers``."""
        return self._num_brokers

    @property
    def group_initial_rebalance_delay_ms(self) -> int:
        """The ``group.initial.rebalance.delay.ms`` in effect, in milliseconds (``int``).

        The value passed to the constructor, or 3000 (librdkafka's mock default)
        when it could not be applied (no
        ``rd_kafka_mock_group_initial_rebalance_delay_ms`` in the library).
        """
        return self._delay_ms

    @property
    def bootstrap_servers(self) -> str:
        """The brokers' addresses for ``bootstrap.servers`` (``str``).

        ``"127.0.0.1:port,127.0.0.1:port,..."``, one entry per broker, in
        broker-id order; the ports are free ports chosen by the OS. The string
        stays readable after :meth:`close`, but nothing listens there any more.
        """
        return self._bootstrap

    @property
    def closed(self) -> bool:
        """``True`` once :meth:`close` has run."""
        return not self._finalizer.alive

    def create_topic(self, name: str, num_partitions: int = 4, replication_factor: int = 1) -> None:
        """Create topic ``name`` with exactly ``num_partitions`` partitions.

        Uses ``rd_kafka_mock_topic_create()`` (librdkafka ``rdkafka_mock.h``);
        the mock brokers do not implement the CreateTopics admin request. The
        topic is visible to clients' metadata requests as soon as this returns.

        Args:
            name: topic name (``str``), 1-249 characters from ``[A-Za-z0-9._-]``.
            num_partitions: number of partitions (``int`` >= 1).
            replication_factor: replicas per partition (``int``, ``1..num_brokers``).

        Raises:
            ValueError: invalid name, ``num_partitions`` < 1, or
                ``replication_factor`` outside ``1..num_brokers``.
            confluent_kafka.KafkaException: the cluster refused; e.g. its
                ``args[0].code()`` is ``KafkaError.TOPIC_ALREADY_EXISTS`` when
                the topic exists (also when it was auto-created by a client).
            RuntimeError: the cluster is closed.
        """
        if not isinstance(name, str) or not _TOPIC_NAME.fullmatch(name) or name in {".", ".."}:
            raise ValueError(
                f"invalid topic name {name!r}: use 1-249 characters from [A-Za-z0-9._-], not '.' or '..'"
            )
        if num_partitions < 1:
            raise ValueError(f"num_partitions must be >= 1, got {num_partitions}")
        if not 1 <= replication_factor <= self._num_brokers:
            raise ValueError(
                f"replication_factor must be between 1 and the number of brokers ({self._num_brokers}), "
                f"got {replication_factor}"
            )
        self._h.call("rd_kafka_mock_topic_create", name.encode(), num_partitions, replication_factor)

    def set_broker_down(self, broker_id: int) -> None:
        """Disconnect broker ``broker_id`` and refuse new connections to it.

        Uses ``rd_kafka_mock_broker_set_down()`` (librdkafka ``rdkafka_mock.h``).
        This does NOT move partition leadership: requests for partitions led
        by that broker fail until :meth:`set_broker_up`.

        Args:
            broker_id: ``int``, ``1..num_brokers``, or ``-1`` for all brokers.

        Raises:
            ValueError: ``broker_id`` is not ``-1`` nor in ``1..num_brokers``.
            confluent_kafka.KafkaException: librdkafka returned an error.
            RuntimeError: the cluster is closed.
        """
        _mock.check_broker_id(broker_id, self._num_brokers)
        self._h.call("rd_kafka_mock_broker_set_down", broker_id)

    def set_broker_up(self, broker_id: int) -> None:
        """Make broker ``broker_id`` accept connections again.

        Uses ``rd_kafka_mock_broker_set_up()`` (librdkafka ``rdkafka_mock.h``).
        Clients reconnect on their own (after ``reconnect.backoff.ms``).

        Args:
            broker_id: ``int``, ``1..num_brokers``, or ``-1`` for all brokers.

        Raises:
            ValueError: ``broker_id`` is not ``-1`` nor in ``1..num_brokers``.
            confluent_kafka.KafkaException: librdkafka returned an error.
            RuntimeError: the cluster is closed.
        """
        _mock.check_broker_id(broker_id, self._num_brokers)
        self._h.call("rd_kafka_mock_broker_set_up", broker_id)

    def set_share_group(
        self,
        *,
        auto_offset_reset: str | None = None,
        record_lock_duration_ms: int | None = None,
        max_delivery_attempts: int | None = None,
        session_timeout_ms: int | None = None,
        heartbeat_interval_ms: int | None = None,
    ) -> None:
        """Set the share groups' (KIP-932) settings of this cluster: those of the
        groups already there and of those created later. The mock's defaults
        (librdkafka ``rdkafka_mock.c``): ``latest``, a 30,000 ms record lock, 5
        delivery attempts. An argument left None is left as it is.

        Uses ``rd_kafka_mock_sharegroup_set_*()`` (librdkafka ``rdkafka_mock.h``, 2.15+).

        Args:
            auto_offset_reset: ``"earliest"`` or ``"latest"``: where a share group
                starts on a partition it has no state for (the broker's
                ``share.auto.offset.reset`` group configuration).
            record_lock_duration_ms: how long a record stays acquired before it is
                released for redelivery (``group.share.record.lock.duration.ms``).
            max_delivery_attempts: deliveries of a record before it is archived
                (``group.share.delivery.count.limit``).
            session_timeout_ms: the share group's member session timeout.
            heartbeat_interval_ms: the members' heartbeat interval.

        Raises:
            ValueError: ``auto_offset_reset`` is neither ``"earliest"`` nor ``"latest"``.
            NotImplementedError: the C API (or a setter in it) is unavailable.
            RuntimeError: the cluster is closed.
        """
        if auto_offset_reset not in (None, *_RESETS):
            raise ValueError(f"auto_offset_reset must be 'earliest' or 'latest', got {auto_offset_reset!r}")
        given = {
            "auto_offset_reset": None if auto_offset_reset is None else _RESETS[auto_offset_reset],
            "record_lock_duration_ms": record_lock_duration_ms,
            "max_delivery_attempts": max_delivery_attempts,
            "session_timeout_ms": session_timeout_ms,
            "heartbeat_interval_ms": heartbeat_interval_ms,
        }
        for key, value in given.items():
            if value is not None:
                self._h.call(f"rd_kafka_mock_sharegroup_set_{_mock.SHARE_GROUP_SETTERS[key]}", int(value))

    def set_broker_rtt(self, broker_id: int, rtt_ms: int) -> None:
        """Delay every response of broker ``broker_id`` by ``rtt_ms`` milliseconds
        (0: no delay): a slow cluster, for tests of timeouts.

        Uses ``rd_kafka_mock_broker_set_rtt()`` (librdkafka ``rdkafka_mock.h``).

        Args:
            broker_id: ``int``, ``1..num_brokers``, or ``-1`` for all brokers.
            rtt_ms: ``int`` >= 0, milliseconds added to each round trip.

        Raises:
            ValueError: ``broker_id`` is not ``-1`` nor in ``1..num_brokers``, or
                ``rtt_ms`` < 0.
            confluent_kafka.KafkaException: librdkafka returned an error.
            RuntimeError: the cluster is closed.
        """
        _mock.check_broker_id(broker_id, self._num_brokers)
        if rtt_ms < 0:
            raise ValueError(f"rtt_ms must be >= 0, got {rtt_ms}")
        self._h.call("rd_kafka_mock_broker_set_rtt", broker_id, rtt_ms)

    def push_request_errors(self, api_key: int, errors: Sequence[int]) -> None:
        """Answer the cluster's next requests of kind ``api_key`` with ``errors``, one
        request each, in order (then as usual): e.g. produce requests refused with a
        retriable error, so that the producer's messages reach the log only after its
        retries (``retry.backoff.ms``), for tests of messages still in flight.

        Uses ``rd_kafka_mock_push_request_errors_array()`` (librdkafka ``rdkafka_mock.h``).

        Args:
            api_key: ``int``, the Kafka protocol API key (0: Produce, 1: Fetch, ...).
            errors: ``KafkaError`` codes (``int``), at least one.

        Raises:
            ValueError: ``api_key`` is not an API key, or ``errors`` is empty.
            NotImplementedError: the library does not export
                ``rd_kafka_mock_push_request_errors_array``.
            RuntimeError: the cluster is closed.
        """
        if not 0 <= api_key <= 0x7FFF:
            raise ValueError(f"api_key must be a Kafka API key (0..32767), got {api_key}")
        if not errors:
            raise ValueError("errors must name at least one error code")
        codes = (ctypes.c_int * len(errors))(*errors)
        self._h.call("rd_kafka_mock_push_request_errors_array", api_key, len(errors), codes)

    def push_request_rtts(self, broker_id: int, api_key: int, rtts_ms: Sequence[int]) -> None:
        """Answer broker ``broker_id``'s next requests of kind ``api_key`` late, one
        request each, in order, each after its ``rtts_ms`` milliseconds (then as usual):
        e.g. an offset look-up (ListOffsets) whose answer comes after the client moved on.

        Uses ``rd_kafka_mock_broker_push_request_error_rtts()`` (librdkafka
        ``rdkafka_mock.h``), with no error.

        Args:
            broker_id: ``int``, ``1..num_brokers``.
            api_key: ``int``, the Kafka protocol API key (0: Produce, 2: ListOffsets, ...).
            rtts_ms: ``int`` >= 0 per request, milliseconds; at least one.

        Raises:
            ValueError: ``broker_id`` is not in ``1..num_brokers``, ``api_key`` is not an
                API key, or ``rtts_ms`` is empty or holds a negative value.
            NotImplementedError: the library does not export
                ``rd_kafka_mock_broker_push_request_error_rtts``.
            confluent_kafka.KafkaException: librdkafka returned an error.
            RuntimeError: the cluster is closed.
        """
        if not 1 <= broker_id <= self._num_brokers:
            raise ValueError(f"broker_id must be 1..{self._num_brokers}, got {broker_id}")
        if not 0 <= api_key <= 0x7FFF:
            raise ValueError(f"api_key must be a Kafka API key (0..32767), got {api_key}")
        if not rtts_ms or min(rtts_ms) < 0:
            raise ValueError(f"rtts_ms must hold at least one value, each >= 0, got {list(rtts_ms)}")
        pairs = [ctypes.c_int(v) for rtt in rtts_ms for v in (0, rtt)]  # (no error, rtt)
        self._h.call("rd_kafka_mock_broker_push_request_error_rtts", broker_id, api_key, len(rtts_ms), *pairs)

    def close(self) -> None:
        """Stop the brokers and free the cluster. Idempotent and thread-safe.

        Destroys the mock cluster (``rd_kafka_mock_cluster_destroy()``) and then
        the ``rd_kafka_t`` that owns it (``rd_kafka_destroy()``), in the order
        ``rdkafka_mock.h`` requires. Calling it again does nothing; other
        methods raise ``RuntimeError`` afterwards.
        """
        self._finalizer()  # runs at most once

    def __enter__(self) -> EmbeddedCluster:
        """Return ``self``; the cluster is already running."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Call :meth:`close`."""
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else self.bootstrap_servers
        return f"<EmbeddedCluster brokers={self.num_brokers} {state}>"
