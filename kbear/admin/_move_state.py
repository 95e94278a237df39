"""What ``kbear move`` reads from the clusters (private): a topic's partitions,
configuration and watermarks on one cluster, and a group's committed offsets
there, all through a :class:`~kbear.admin.RoutedAdminClient` addressing the cluster
by id (``cluster=``, names as they are there).

Metadata is read with a listing of every topic: a metadata request naming an
unknown topic makes some brokers create it (Apache Kafka with
``auto.create.topics.enable``, its default; the mock cluster).
Committed offsets are read with a ``Consumer`` (:class:`CommittedOffsets`), not
``AdminClient.list_consumer_group_offsets`` (librdkafka 2.16 crashes there on a
cluster whose group coordinator is not ready yet).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import ConfigResource, ConfigSource, OffsetSpec, ResourceType
from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_exponential

from kbear._clients import current_factory
from kbear.admin._facade import RoutedAdminClient
from kbear.router import Router


@dataclass
class TopicState:
    """A topic on one cluster.

    Attributes:
        cluster: the cluster id.
        topic: the topic's name there (physical).
        partitions: its partition count; None when the topic does not exist there.
        low, high: partition -> low / high watermark (empty when missing).
        overrides: the topic-level configuration set on it (name -> value,
            ``DYNAMIC_TOPIC_CONFIG`` entries); None when not read.
        effective: every configuration value in force (name -> value); None when not read.
        config_error: why the configuration could not be read (e.g. the librdkafka
            mock cluster has no DescribeConfigs), or None.
    """

    cluster: str
    topic: str
    partitions: int | None = None
    low: dict[int, int] = field(default_factory=dict)
    high: dict[int, int] = field(default_factory=dict)
    overrides: dict[str, str] | None = None
    effective: dict[str, str | None] | None = None
    config_error: str | None = None

    @property
    def messages(self) -> int:
        """Messages held (sum of high - low)."""
        return sum(self.high[p] - self.low.get(p, 0) for p in self.high)

    def as_json(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "topic": self.topic,
            "exists": self.partitions is not None,
            "partitions": self.partitions,
            "messages": self.messages,
            "end_offsets": {str(p): o for p, o in sorted(self.high.items())},
            "config_overrides": self.overrides,
            "config_error": self.config_error,
        }


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, KafkaException) and exc.args:
        err = exc.args[0]
        return f"{err.name()}: {err.str()}" if hasattr(err, "name") else str(err)
    return f"{type(exc).__name__}: {exc}"


def watermarks(
    admin: RoutedAdminClient, cluster: str, topic: str, partitions: int, timeout_s: float
) -> tuple[dict[int, int], dict[int, int]]:
    """(low, high) watermarks of ``topic`` (``partitions`` partitions) on ``cluster``.

    Raises:
        KafkaException: the cluster did not answer.
    """
    out: list[dict[int, int]] = []
    for spec in (OffsetSpec.earliest(), OffsetSpec.latest()):  # type: ignore[no-untyped-call]
        request = {TopicPartition(topic, p): spec for p in range(partitions)}
        futures = admin.list_offsets(request, cluster=cluster, request_timeout=timeout_s)
        out.append({tp.partition: f.result(timeout_s + 5).offset for tp, f in futures.items()})
    return out[0], out[1]


T = TypeVar("T")

#: errors worth another try within the timeout: a connection being set up or lost
#: (a new client's first requests can meet ``_TRANSPORT``), and the errors Kafka's
#: protocol marks retriable that a cluster answers for a moment after a change: a topic
#: created a moment before has no leader yet (``NOT_LEADER_OR_FOLLOWER``,
#: ``LEADER_NOT_AVAILABLE``, ``UNKNOWN_TOPIC_OR_PART`` on a broker whose metadata is
#: behind), a group coordinator that is starting (``COORDINATOR_LOAD_IN_PROGRESS``) or moved
_RETRIABLE = frozenset(
    {
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.OFFSET_NOT_AVAILABLE,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    }
)


def _retriable(exc: BaseException) -> bool:
    if not isinstance(exc, KafkaException) or not exc.args or not isinstance(exc.args[0], KafkaError):
        return False
    error: KafkaError = exc.args[0]
    return error.code() in _RETRIABLE or bool(error.retriable())


def retried(timeout_s: float, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``call(*args, **kwargs)``, tried again (tenacity, exponential back-off from
    0.1 s to 1 s) while it fails with a retriable error (``_RETRIABLE``, or a
    ``KafkaError`` whose ``retriable()`` is true), for at most ``timeout_s`` seconds;
    then the last error is raised. Other errors are raised at once.

    Raises:
        KafkaException: what ``call`` raised last.
    """
    retrying = Retrying(
        stop=stop_after_delay(timeout_s),
        wait=wait_exponential(multiplier=0.1, max=1.0),
        retry=retry_if_exception(_retriable),
        reraise=True,
    )
    return retrying(call, *args, **kwargs)


def read_topic(admin: RoutedAdminClient, cluster: str, topic: str, timeout_s: float) -> TopicState:
    """The state of ``topic`` on ``cluster`` (configuration errors recorded, not raised).

    Raises:
        KafkaException: the cluster did not answer the metadata or offsets requests.
    """
    state = TopicState(cluster, topic)
    md = retried(timeout_s, admin.list_topics, timeout=timeout_s, cluster=cluster).topics.get(topic)
    if md is None or md.error is not None:
        return state
    state.partitions = len(md.partitions)
    state.low, state.high = retried(timeout_s, watermarks, admin, cluster, topic, state.partitions, timeout_s)
    resource = ConfigResource(ResourceType.TOPIC, topic)
    try:
        future = admin.describe_configs([resource], cluster=cluster, request_timeout=timeout_s)[resource]
        entries = future.result(timeout_s + 5)
    except Exception as exc:
        state.config_error = _error_text(exc)
        return state
    state.effective = {name: entry.value for name, entry in entries.items()}
    state.overrides = {
        name: str(entry.value)
        for name, entry in entries.items()
        # confluent-kafka gives the source as an int here (ConfigSource's value)
        if getattr(entry.source, "value", entry.source) == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
        and entry.value is not None
    }
    return state


def config_differences(source: TopicState, target: TopicState) -> list[tuple[str, str | None, str | None]]:
    """(name, source value, target value) for each configuration set on either
    topic (topic-level overrides) whose value in force differs; empty when either
    configuration could not be read."""
    if source.effective is None or target.effective is None:
        return []
    names = sorted(set(source.overrides or {}) | set(target.overrides or {}))
    return [
        (name, source.effective.get(name), target.effective.get(name))
        for name in names
        if source.effective.get(name) != target.effective.get(name)
    ]


class CommittedOffsets:
    """Reads consumer groups' committed offsets on the clusters of ``router``'s
    configuration: one ``Consumer`` per (cluster, group), built on first use, that
    never joins its group (``Consumer.committed``: an OffsetFetch through the group's
    coordinator, looked up again and retried by librdkafka while it is not ready).

    Not ``AdminClient.list_consumer_group_offsets``: librdkafka 2.16 ends the process
    (SIGSEGV) when that request is answered with an error asking for a coordinator
    refresh (``COORDINATOR_LOAD_IN_PROGRESS`` from a cluster that has just started or
    restarted, ``NOT_COORDINATOR``), as it refreshes the admin client's consumer group,
    which it has none of (integration/BACKENDS.md). :meth:`close` closes the
    consumers (``with contextlib.closing(CommittedOffsets(router))``).

    Args:
        router: the configuration whose clusters are read (in force at each read).
    """

    def __init__(self, router: Router) -> None:
        self._router = router
        self._consumers: dict[tuple[str, str, tuple[tuple[str, str], ...]], Any] = {}
        self._lock = threading.Lock()

    def _consumer(self, cluster: str, group: str) -> Any:
        properties = self._router.config.clusters[cluster].client_properties
        key = (cluster, group, tuple(sorted(properties.items())))
        with self._lock:
            consumer = self._consumers.get(key)
            if consumer is None:
                conf = {**properties, "group.id": group, "enable.auto.commit": False}
                consumer = self._consumers[key] = current_factory()("consumer", cluster, conf)
            return consumer

    def read(
        self, cluster: str, group: str, topic: str, partitions: int, timeout_s: float
    ) -> dict[int, int | None]:
        """Partition -> ``group``'s committed offset of ``topic`` (``partitions``
        partitions) on ``cluster`` (None: none committed).

        Raises:
            KafkaException: the cluster did not answer within ``timeout_s`` seconds
                (``_TIMED_OUT``), or answered a partition with an error.
        """
        if not partitions:
            return {}
        consumer = self._consumer(cluster, group)
        parts = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=timeout_s)
        for tp in parts:
            if tp.error is not None:
                raise KafkaException(tp.error)
        return {tp.partition: (tp.offset if tp.offset >= 0 else None) for tp in parts}

    def close(self) -> None:
        """Close every consumer (none joined a group: nothing is committed or revoked)."""
        with self._lock:
            consumers, self._consumers = list(self._consumers.values()), {}
        for consumer in consumers:
            consumer.close()


def lag(offsets: dict[int, int | None], state: TopicState) -> int:
    """Messages of ``state``'s topic the group has not committed (from the low
    watermark where it has no commit)."""
    total = 0
    for partition, high in state.high.items():
        start = offsets.get(partition)
        total += max(0, high - (state.low.get(partition, 0) if start is None else start))
    return total
