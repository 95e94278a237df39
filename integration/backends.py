"""Broker backends for the integration tests: independent Kafka clusters on 127.0.0.1.

Each backend starts clusters (one broker each) and says which client settings
its brokers need, so the tests stay backend-neutral. Known limits of each are in
``integration/BACKENDS.md``. Selection (``KBEAR_IT_BACKEND``):

- ``docker``: Apache Kafka (KRaft) containers through testcontainers; image
  ``KBEAR_KAFKA_IMAGE`` (default ``apache/kafka:3.9.1``);
- ``kafka``: Apache Kafka (KRaft) as local JVM processes (:mod:`integration.kafka`),
  jars resolved by Maven; version ``KBEAR_KAFKA_VERSION`` (default: ``jvm/kafka/pom.xml``'s);
- ``mock``: librdkafka mock clusters (:class:`kbear.testing.EmbeddedCluster`);
- ``auto`` (default): docker when a Docker engine answers, else kafka when Java
  and Maven are there and the jars resolve, else mock.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import socket
import tempfile
import time
import zlib
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from tenacity import (
    Retrying,
    retry_if_exception,
    stop_after_delay,
    wait_exponential,
)

log = logging.getLogger("kbear.integration")

#: librdkafka's own log lines of the fixture's admin clients (connection refused
#: while a broker starts, ...) go here instead of stderr.
RDKAFKA_LOG = logging.getLogger("kbear.integration.librdkafka")

BACKENDS = ("docker", "kafka", "mock")
DEFAULT_KAFKA_IMAGE = "apache/kafka:3.9.1"


class BackendUnavailable(Exception):
    """The backend cannot run here; the message says why (used as the skip reason)."""


# --------------------------------------------------------------------------- small tools


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _retriable(exc: BaseException) -> bool:
    """Whether an admin/metadata error is worth another try (broker starting, leader moving)."""
    if isinstance(exc, (OSError, TimeoutError)):
        return True
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        err: KafkaError = exc.args[0]
        return bool(err.retriable()) or err.code() in (
            KafkaError._TRANSPORT,
            KafkaError._ALL_BROKERS_DOWN,
            KafkaError._TIMED_OUT,
            KafkaError.REQUEST_TIMED_OUT,
            KafkaError.LEADER_NOT_AVAILABLE,
            KafkaError.NOT_CONTROLLER,
            KafkaError.COORDINATOR_NOT_AVAILABLE,
            KafkaError.NOT_COORDINATOR,
            KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
            KafkaError.UNKNOWN_TOPIC_OR_PART,
        )
    return isinstance(exc, _NotYet)


class _NotYet(Exception):
    """A condition the fixture waits for does not hold yet (retried)."""


def retrying(timeout_s: float, what: str) -> Retrying:
    """tenacity policy of the fixture's look-ups: exponential back-off from 50 ms to
    1 s, retriable errors only, give up after ``timeout_s`` with the last error."""
    return Retrying(
        stop=stop_after_delay(timeout_s),
        wait=wait_exponential(multiplier=0.05, min=0.05, max=1.0),
        retry=retry_if_exception(_retriable),
        reraise=True,
        before_sleep=lambda state: log.debug(
            "%s: attempt %d failed: %s",
            what,
            state.attempt_number,
            state.outcome and state.outcome.exception(),
        ),
    )


def admin_client(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 5000}, logger=RDKAFKA_LOG)


def wait_until_answers(bootstrap: str, timeout_s: float = 30.0) -> None:
    """Retry (tenacity) until the broker at ``bootstrap`` accepts TCP and answers a
    metadata request. Raises the last error after ``timeout_s``."""
    host, _, port = bootstrap.split(",")[0].rpartition(":")

    def probe() -> None:
        with socket.create_connection((host, int(port)), timeout=1.0):
            pass
        admin_client(bootstrap).list_topics(timeout=2.0)

    retrying(timeout_s, f"waiting for {bootstrap}")(probe)


def topic_partitions(bootstrap: str, topic: str, timeout_s: float = 5.0) -> int:
    """Partitions of ``topic`` in the broker's metadata (0 when unknown). Asks for all
    topics: a metadata request naming the topic makes these brokers auto-create it."""
    md = admin_client(bootstrap).list_topics(timeout=timeout_s).topics.get(topic)
    if md is None or md.error is not None:
        return 0
    return len(md.partitions)


def admin_create_topics(
    bootstrap: str, topics: Mapping[str, int], timeout_s: float = 30.0, replication: int = 1
) -> None:
    """Create ``topics`` (name -> partitions, each on ``replication`` brokers) with the
    AdminClient, retrying (tenacity) transient errors; an existing topic counts as
    created. Then wait until the metadata shows every topic with its partitions."""
    admin = admin_client(bootstrap)

    def create() -> None:
        futures = admin.create_topics(
            [NewTopic(name, num_partitions=n, replication_factor=replication) for name, n in topics.items()],
            operation_timeout=10,
            request_timeout=15,
        )
        for future in futures.values():
            try:
                future.result(timeout=20)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise

    retrying(timeout_s, f"creating {sorted(topics)} on {bootstrap}")(create)
    wait_for_topics(bootstrap, topics, timeout_s)


def wait_for_topics(bootstrap: str, topics: Mapping[str, int], timeout_s: float = 30.0) -> None:
    def visible() -> None:
        missing = {t: n for t, n in topics.items() if topic_partitions(bootstrap, t) != n}
        if missing:
            raise _NotYet(f"not yet in metadata with their partitions: {missing}")

    retrying(timeout_s, f"metadata of {sorted(topics)} on {bootstrap}")(visible)


# --------------------------------------------------------------------------- clusters


class Cluster:
    """One running single-broker Kafka cluster of a backend."""

    name: str
    bootstrap_servers: str

    def create_topic(self, name: str, partitions: int) -> None:
        admin_create_topics(self.bootstrap_servers, {name: partitions})

    def stop(self) -> None:
        """Take the broker down (clients get connection errors); :meth:`start` brings it back."""
        raise NotImplementedError

    def start(self) -> None:
        raise NotImplementedError

    def kill(self) -> None:
        """Take the broker down as a crash would (SIGKILL where it is a process);
        by default the same as :meth:`stop`."""
        self.stop()

    def kill_broker(self, broker_id: int) -> None:
        """Take one broker of a cluster of several down as a crash would
        (:attr:`Backend.start_brokers`'s clusters); :meth:`start_broker` brings it back."""
        raise BackendUnavailable(f"{type(self).__name__}: one cluster, one broker")

    def start_broker(self, broker_id: int) -> None:
        raise BackendUnavailable(f"{type(self).__name__}: one cluster, one broker")

    def group_coordinated_by(self, prefix: str, broker_id: int) -> str | None:
        """A consumer group name starting with ``prefix`` whose coordinator is broker
        ``broker_id``, or None when no group is (a cluster of several brokers)."""
        raise BackendUnavailable(f"{type(self).__name__}: one cluster, one broker")

    def close(self) -> None:
        """Stop for good and free everything (idempotent)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} {self.bootstrap_servers}>"


#: clusters and other processes (MirrorMaker 2) the atexit hook closes
_LIVE: set[Any] = set()


@atexit.register
def _stop_leftovers() -> None:  # a crashed session must not leave brokers behind
    for cluster in list(_LIVE):
        with contextlib.suppress(Exception):
            cluster.close()


class MockCluster(Cluster):
    """A librdkafka mock cluster inside this process (:class:`kbear.testing.EmbeddedCluster`)."""

    def __init__(self, name: str, brokers: int = 1) -> None:
        from kbear.testing import EmbeddedCluster

        self.name = name
        self._cluster = EmbeddedCluster(num_brokers=brokers)
        self.bootstrap_servers = self._cluster.bootstrap_servers

    def create_topic(self, name: str, partitions: int) -> None:
        try:  # every partition on min(3, brokers) brokers
            self._cluster.create_topic(name, partitions, min(3, self._cluster.num_brokers))
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
        wait_for_topics(self.bootstrap_servers, {name: partitions})

    def stop(self) -> None:
        self._cluster.set_broker_down(-1)

    def start(self) -> None:
        self._cluster.set_broker_up(-1)

    def kill_broker(self, broker_id: int) -> None:
        self._cluster.set_broker_down(broker_id)

    def start_broker(self, broker_id: int) -> None:
        self._cluster.set_broker_up(broker_id)

    def group_coordinated_by(self, prefix: str, broker_id: int) -> str | None:
        # the mock coordinates a group on broker crc32(group) % brokers + 1
        # (librdkafka rd_kafka_mock_cluster_get_coord); it answers no DescribeGroups
        brokers = self._cluster.num_brokers
        for n in range(1000):
            if zlib.crc32(f"{prefix}-{n}".encode()) % brokers == broker_id - 1:
                return f"{prefix}-{n}"
        return None

    def close(self) -> None:
        self._cluster.close()


class DockerCluster(Cluster):
    """A single-node KRaft Apache Kafka container (testcontainers), its listener
    published on 127.0.0.1 at a free port chosen before start (so it can be advertised)."""

    def __init__(self, name: str, image: str) -> None:
        from testcontainers.core.container import DockerContainer
        from testcontainers.core.waiting_utils import wait_for_logs

        self.name = name
        self.port = free_port()
        self.bootstrap_servers = f"127.0.0.1:{self.port}"
        env = {
            "KAFKA_NODE_ID": "1",
            "KAFKA_PROCESS_ROLES": "broker,controller",
            "KAFKA_LISTENERS": f"PLAINTEXT://:{self.port},CONTROLLER://:9093",
            "KAFKA_ADVERTISED_LISTENERS": f"PLAINTEXT://127.0.0.1:{self.port}",
            "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
            "KAFKA_CONTROLLER_QUORUM_VOTERS": "1@localhost:9093",
            "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
            "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
            "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
            "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
            "KAFKA_NUM_PARTITIONS": "4",
        }
        container = DockerContainer(image)
        for key, value in env.items():
            container.with_env(key, value)
        container.with_bind_ports(self.port, ("127.0.0.1", self.port))
        self._container = container
        container.start()
        _LIVE.add(self)
        try:
            wait_for_logs(container, r"Kafka Server started", timeout=120)
            wait_until_answers(self.bootstrap_servers, timeout_s=60.0)
        except Exception as exc:
            self.close()
            raise BackendUnavailable(f"docker: {image} did not start: {exc!r}") from exc

    def stop(self) -> None:
        self._container.get_wrapped_container().stop(timeout=10)

    def start(self) -> None:
        self._container.get_wrapped_container().start()
        wait_until_answers(self.bootstrap_servers, timeout_s=60.0)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._container.stop()
        _LIVE.discard(self)


# --------------------------------------------------------------------------- backends


@dataclass(frozen=True)
class GroupProtocol:
    """A consumer group protocol (``group.protocol``) the group tests run on a backend.

    ``conf``: consumer settings added over ``Backend.consumer_conf`` for it.
    ``commits_in_revoke``: a member's commit made in its ``on_revoke`` callback is
    accepted, as Apache Kafka accepts commits of the current generation while the
    group prepares a rebalance; the mock's classic protocol refuses them with
    ``REBALANCE_IN_PROGRESS`` (seen with plain confluent-kafka too:
    ``test_a_commit_in_on_revoke_is_accepted_where_the_backend_says_so``).
    """

    conf: dict[str, Any] = field(default_factory=dict)
    commits_in_revoke: bool = True


#: consumer settings of the classic protocol only: librdkafka refuses them with
#: ``group.protocol=consumer`` (KIP-848 holds them on the broker)
CLASSIC_ONLY = ("session.timeout.ms", "heartbeat.interval.ms", "partition.assignment.strategy")


def consumer_settings(*layers: Mapping[str, Any]) -> dict[str, Any]:
    """``layers`` merged, later over earlier, without :data:`CLASSIC_ONLY` settings
    when the result has ``group.protocol=consumer``."""
    merged: dict[str, Any] = {}
    for layer in layers:
        merged.update(layer)
    if str(merged.get("group.protocol", "classic")).lower() == "consumer":
        for key in CLASSIC_ONLY:
            merged.pop(key, None)
    return merged


@dataclass
class Backend:
    """How to start clusters of one kind, and what their clients need.

    ``consumer_conf`` goes into every consumer's configuration (group protocol,
    session timeouts); ``producer_conf`` into every producer's. ``protocols``:
    the group protocols the group tests run here (``classic``, ``cooperative-sticky``
    (classic with that assignor), ``consumer``),
    each with the settings it adds.
    """

    name: str
    start_cluster: Callable[[str], Cluster]
    consumer_conf: dict[str, Any]
    producer_conf: dict[str, Any] = field(default_factory=dict)
    detail: str = ""
    workdir: Path | None = None
    protocols: dict[str, GroupProtocol] = field(default_factory=lambda: {"classic": GroupProtocol()})
    #: ``start_brokers(name, n)``: a cluster of ``n`` brokers whose topics are
    #: replicated on 3 (:meth:`Cluster.kill_broker`), where the backend has them
    start_brokers: Callable[[str, int], Cluster] | None = None

    def close(self) -> None:
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)


def _workdir(name: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=f"kbear-it-{name}-"))


def docker_engine() -> str:
    """The Docker engine's version when one answers within 3 s; else BackendUnavailable."""
    try:
        import docker
    except ImportError as exc:
        raise BackendUnavailable(
            "docker: the docker / testcontainers packages are missing (kbear[integration])"
        ) from exc
    try:
        client = docker.from_env(timeout=3)
        client.ping()
        return str(client.version().get("Version", "?"))
    except Exception as exc:
        raise BackendUnavailable(f"docker: no Docker engine answers ({type(exc).__name__}: {exc})") from exc


def make_mock() -> Backend:
    return Backend(
        "mock",
        MockCluster,
        # a classic-protocol rebalance after a resubscribe waits ~session.timeout.ms on the mock
        consumer_conf={"group.protocol": "consumer"},
        detail="librdkafka mock clusters in this process (kbear.testing.EmbeddedCluster)",
        start_brokers=MockCluster,
        protocols={
            "consumer": GroupProtocol(),
            # each classic rebalance waits about session.timeout.ms on the mock: short enough
            # for the group tests, long enough for members polled in turn
            "classic": GroupProtocol(
                {"group.protocol": "classic", "session.timeout.ms": 6000, "heartbeat.interval.ms": 500},
                commits_in_revoke=False,
                # the mock refuses a member's commits while the group rebalances (Apache
                # Kafka accepts them); kbear commits the refused positions in the new
                # generation and the member taking a partition over reads the group's
                # offsets again 0.5 s after its assignment (kbear/consumer/_guard.py):
                # 0 duplicates in 10 runs of groups of 2 and 3, 2026-11-25 (0-5.6 %
                # before, 28.8 % before kbear's move commits): the tests' 1 % holds
            ),
        },
    )


def make_docker() -> Backend:
    version = docker_engine()
    image = os.environ.get("KBEAR_KAFKA_IMAGE") or DEFAULT_KAFKA_IMAGE
    return Backend(
        "docker",
        lambda name: DockerCluster(name, image),
        consumer_conf={"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000},
        detail=f"{image} on Docker engine {version}",
    )


def make_kafka() -> Backend:
    from integration.kafka import make_backend  # it builds on this module

    return make_backend()


FACTORIES: dict[str, Callable[[], Backend]] = {
    "docker": make_docker,
    "kafka": make_kafka,
    "mock": make_mock,
}


def requested() -> str:
    value = (os.environ.get("KBEAR_IT_BACKEND") or "auto").strip().lower()
    if value != "auto" and value not in BACKENDS:
        raise ValueError(f"KBEAR_IT_BACKEND must be auto or one of {', '.join(BACKENDS)}; got {value!r}")
    return value


def candidates(choice: str) -> tuple[str, ...]:
    return ("docker", "kafka", "mock") if choice == "auto" else (choice,)


@dataclass
class Started:
    """The backend that runs and the clusters it started for the session."""

    backend: Backend
    clusters: dict[str, Cluster]
    notes: list[str]

    def close(self) -> None:
        for cluster in reversed(list(self.clusters.values())):
            with contextlib.suppress(Exception):
                cluster.close()
        self.backend.close()


def start(choice: str, names: tuple[str, ...]) -> Started:
    """Start the first candidate backend of ``choice`` that works, with one cluster per
    name. Raises BackendUnavailable listing why each candidate could not run."""
    notes: list[str] = []
    for name in candidates(choice):
        t0 = time.monotonic()
        try:
            backend = FACTORIES[name]()
        except BackendUnavailable as exc:
            notes.append(str(exc))
            continue
        # started side by side: a JVM broker spends most of its start-up loading classes
        with ThreadPoolExecutor(max_workers=len(names)) as pool:
            futures = {n: pool.submit(backend.start_cluster, n) for n in names}
        clusters: dict[str, Cluster] = {}
        errors: list[BaseException] = []
        for cluster_name, future in futures.items():
            error = future.exception()
            if error is None:
                clusters[cluster_name] = future.result()
            else:
                errors.append(error)
        if errors:
            for cluster in clusters.values():
                with contextlib.suppress(Exception):
                    cluster.close()
            backend.close()
            notes.append(f"{name}: {errors[0]}")
            continue
        notes.append(f"{name}: {len(clusters)} clusters up in {time.monotonic() - t0:.1f} s (side by side)")
        return Started(backend, clusters, notes)
    raise BackendUnavailable("; ".join(notes))
