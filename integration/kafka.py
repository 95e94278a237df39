"""Apache Kafka KRaft clusters as local JVM processes, for the tests, the benchmarks and by hand.

A :class:`KafkaCluster` is one cluster: node 1 is a combined broker/controller
(the only voter of a static quorum), nodes 2..N are brokers. The jars come from
``jvm/kafka/pom.xml`` through Maven (:func:`integration.jvm.classpath`); the
version is the POM's, or ``KBEAR_KAFKA_VERSION``. Each node has its own
directory (``server.properties``, ``log4j2.xml``, ``data/``, ``server.log``),
formatted once by ``kafka.tools.StorageTool format`` (what ``kafka-storage.sh
format`` runs; static voters, so without ``--standalone``) and then started as
``kafka.Kafka``; a restart reuses the same directory and so the same data.

Listeners are on 127.0.0.1 at free ports: ``PLAINTEXT`` (clients and
inter-broker), ``CONTROLLER``, and any :class:`Listener` asked for (SASL, SSL:
their ``listener.name.*`` settings come in ``properties``). Processes are
stopped by PID (SIGTERM, then SIGKILL) and an ``atexit`` hook stops what is
left. From the command line, ``python -m integration.kafka up`` starts two
clusters and prints their bootstrap servers (``docs/apache-kafka.md``).
"""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

from confluent_kafka import Consumer, TopicPartition

from integration.backends import (
    _LIVE,
    RDKAFKA_LOG,
    Backend,
    BackendUnavailable,
    Cluster,
    GroupProtocol,
    _workdir,
    admin_client,
    admin_create_topics,
    free_port,
    retrying,
    wait_until_answers,
)
from integration.jvm import JvmUnavailable, classpath, java

#: what ``KBEAR_KAFKA_VERSION`` overrides (``jvm/kafka/pom.xml``'s ``kafka.version``)
VERSION_ENV = "KBEAR_KAFKA_VERSION"
#: JVM heap of one node: 384 MiB runs the integration suite and the benchmarks
DEFAULT_HEAP = "384m"
#: Serial GC: fewest GC threads on a 2-core machine; tiered compilation stays on
DEFAULT_JVM_OPTS = ("-XX:+UseSerialGC", "-Xss512k", "-Djava.awt.headless=true")

#: Settings of every node before the caller's ``properties``: one broker's worth of
#: internal topics (replication 1, few partitions: each partition is files to create),
#: no delay before a classic group's first rebalance, short KIP-848 / share-group
#: heartbeats and session timeouts (broker-side for those protocols; the classic
#: protocol's are the client's). Share groups need no setting on 4.4: ``format``
#: enables the ``share.version`` feature.
BASE_PROPERTIES: dict[str, str] = {
    "num.partitions": "4",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "10",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "10",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "share.coordinator.state.topic.num.partitions": "10",
    "group.initial.rebalance.delay.ms": "0",
    # a restarted node waits for its previous registration's session to end before it is
    # "caught up": 8 s of a restart at the 9 s default, 1-2.5 s at these (measured here)
    "broker.heartbeat.interval.ms": "500",
    "broker.session.timeout.ms": "6000",
    "group.consumer.heartbeat.interval.ms": "1000",
    "group.consumer.min.heartbeat.interval.ms": "500",
    "group.consumer.session.timeout.ms": "10000",
    "group.consumer.min.session.timeout.ms": "6000",
    "group.share.heartbeat.interval.ms": "1000",
    "group.share.min.heartbeat.interval.ms": "500",
    "group.share.session.timeout.ms": "10000",
    "group.share.min.session.timeout.ms": "6000",
}


@dataclass(frozen=True)
class Listener:
    """An extra listener of every broker, on 127.0.0.1 at a free port.

    ``name``: the listener name (``SASL_PLAINTEXT``, ``SSL``, ``EXTERNAL``...);
    ``protocol``: its security protocol (``PLAINTEXT``, ``SSL``, ``SASL_PLAINTEXT``,
    ``SASL_SSL``), by default the name. Its settings (``sasl.enabled.mechanisms``,
    ``listener.name.<name>.plain.sasl.jaas.config``, ``ssl.keystore.location``...)
    go in the cluster's ``properties``.
    """

    name: str
    protocol: str = ""

    @property
    def security_protocol(self) -> str:
        return self.protocol or self.name


def kafka_version() -> str:
    """``KBEAR_KAFKA_VERSION``, else the version pinned in ``jvm/kafka/pom.xml``."""
    env = os.environ.get(VERSION_ENV, "").strip()
    if env:
        return env
    from integration.jvm import JVM_DIR

    text = (JVM_DIR / "kafka" / "pom.xml").read_text()
    return text.split("<kafka.version>", 1)[1].split("<", 1)[0].strip()


def kafka_classpath(version: str | None = None) -> str:
    """The broker's classpath (``os.pathsep``-joined) at ``version`` (default
    :func:`kafka_version`). Raises :class:`BackendUnavailable` without Java/Maven."""
    version = version or kafka_version()
    try:
        java()
        jars = classpath("kafka", {"kafka.version": version})
    except JvmUnavailable as exc:
        raise BackendUnavailable(f"kafka: {exc}") from exc
    return os.pathsep.join(str(j) for j in jars)


def random_cluster_id() -> str:
    """A cluster id as ``kafka-storage.sh random-uuid`` prints it (URL-safe base64
    of 16 random bytes, unpadded, not starting with ``-``)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def _log4j2_xml(log_file: Path, level: str) -> str:
    return (
        '<Configuration status="error">\n'
        '  <Appenders><File name="file" fileName="' + escape(str(log_file)) + '">'
        '<PatternLayout pattern="%d{HH:mm:ss.SSS} %-5p [%c{1}] %m%n"/></File></Appenders>\n'
        f'  <Loggers><Root level="{level}"><AppenderRef ref="file"/></Root>\n'
        '    <Logger name="kafka.server.KafkaRaftServer" level="info"/>\n'
        '    <Logger name="kafka.server.BrokerServer" level="info"/></Loggers>\n'
        "</Configuration>\n"
    )


def _log4j1_properties(log_file: Path, level: str) -> str:  # Kafka 3.x logs through reload4j
    return (
        f"log4j.rootLogger={level.upper()}, file\n"
        "log4j.appender.file=org.apache.log4j.FileAppender\n"
        f"log4j.appender.file.File={log_file}\n"
        "log4j.appender.file.layout=org.apache.log4j.PatternLayout\n"
        "log4j.appender.file.layout.ConversionPattern=%d{HH:mm:ss.SSS} %-5p [%c{1}] %m%n\n"
    )


class KafkaNode:
    """One JVM process of a :class:`KafkaCluster` (its directory, ports, PID)."""

    def __init__(self, node_id: int, directory: Path, controller: bool, listeners: Sequence[Listener]):
        self.node_id = node_id
        self.directory = directory
        self.controller = controller
        self.port = free_port()
        self.controller_port = free_port() if controller else 0
        self.ports = {listener.name: free_port() for listener in listeners}
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def log_path(self) -> Path:
        return self.directory / "server.log"

    def bootstrap(self, listener: str = "PLAINTEXT") -> str:
        return f"127.0.0.1:{self.port if listener == 'PLAINTEXT' else self.ports[listener]}"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class KafkaCluster(Cluster):
    """One Apache Kafka cluster in KRaft mode: ``brokers`` JVM processes, node 1 the
    combined broker/controller.

    ``workdir``: parent directory; the cluster's is ``workdir/<name>``.
    ``listeners``: extra listeners (:class:`Listener`) beside ``PLAINTEXT``.
    ``properties``: server settings over :data:`BASE_PROPERTIES` for every node.
    ``format_args``: extra ``StorageTool format`` arguments (e.g. ``--add-scram
    SCRAM-SHA-512=[name=alice,password=secret]`` to create SCRAM users at format).
    ``version``: Kafka version (default :func:`kafka_version`); ``heap``: ``-Xmx``.
    ``start``: start at once (waits until every broker answers; raises
    :class:`BackendUnavailable` with the log's tail when one does not in ``timeout_s``).
    """

    def __init__(
        self,
        name: str,
        workdir: Path,
        *,
        brokers: int = 1,
        listeners: Sequence[Listener] = (),
        properties: Mapping[str, str] | None = None,
        format_args: Sequence[str] = (),
        version: str | None = None,
        heap: str = DEFAULT_HEAP,
        jvm_opts: Sequence[str] = DEFAULT_JVM_OPTS,
        log_level: str = "warn",
        timeout_s: float = 180.0,
        start: bool = True,
    ) -> None:
        if brokers < 1:
            raise ValueError(f"brokers must be at least 1, got {brokers}")
        self.name = name
        self.version = version or kafka_version()
        self.classpath = kafka_classpath(self.version)
        self.directory = workdir / name
        self.listeners = tuple(listeners)
        self.properties = dict(properties or {})
        self.format_args = tuple(format_args)
        self.heap = heap
        self.jvm_opts = tuple(jvm_opts)
        self.log_level = log_level
        self.timeout_s = timeout_s
        self.cluster_id = random_cluster_id()
        self.nodes = [
            KafkaNode(i, self.directory / f"node-{i}", controller=i == 1, listeners=self.listeners)
            for i in range(1, brokers + 1)
        ]
        self.bootstrap_servers = ",".join(n.bootstrap() for n in self.nodes)
        self.startup_s: float | None = None
        self._formatted = False
        if start:
            self.start()

    # ------------------------------------------------------------------ configuration

    def bootstrap(self, listener: str = "PLAINTEXT") -> str:
        """``bootstrap.servers`` of ``listener`` (every broker's address on it)."""
        return ",".join(n.bootstrap(listener) for n in self.nodes)

    @property
    def pids(self) -> list[int]:
        return [n.proc.pid for n in self.nodes if n.proc is not None and n.alive()]

    def server_properties(self, node: KafkaNode) -> dict[str, str]:
        """The ``server.properties`` of ``node`` (before the caller's ``properties``)."""
        voter = self.nodes[0]
        listeners = {"PLAINTEXT": f"PLAINTEXT://127.0.0.1:{node.port}"}
        listeners.update({name: f"{name}://127.0.0.1:{port}" for name, port in node.ports.items()})
        advertised = ",".join(listeners.values())
        if node.controller:
            listeners["CONTROLLER"] = f"CONTROLLER://127.0.0.1:{node.controller_port}"
        protocols = {"PLAINTEXT": "PLAINTEXT", "CONTROLLER": "PLAINTEXT"}
        protocols.update({lst.name: lst.security_protocol for lst in self.listeners})
        props = {
            "process.roles": "broker,controller" if node.controller else "broker",
            "node.id": str(node.node_id),
            "controller.quorum.voters": f"{voter.node_id}@127.0.0.1:{voter.controller_port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listeners": ",".join(listeners.values()),
            "advertised.listeners": advertised,
            "listener.security.protocol.map": ",".join(f"{k}:{v}" for k, v in protocols.items()),
            "log.dirs": str(node.directory / "data"),
            **BASE_PROPERTIES,
        }
        props.update(self.properties)
        return props

    def _write(self, node: KafkaNode) -> Path:
        node.directory.mkdir(parents=True, exist_ok=True)
        path = node.directory / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in self.server_properties(node).items()))
        (node.directory / "log4j2.xml").write_text(_log4j2_xml(node.log_path, self.log_level))
        (node.directory / "log4j.properties").write_text(_log4j1_properties(node.log_path, self.log_level))
        return path

    def java_command(
        self, main_class: str, *args: str, log_dir: Path | None = None, heap: str = "256m"
    ) -> list[str]:
        """``java`` running ``main_class`` on the broker's classpath with ``args``,
        logging (log4j2 / reload4j) to ``log_dir/server.log`` (default node 1's directory)."""
        directory = log_dir or self.nodes[0].directory
        directory.mkdir(parents=True, exist_ok=True)
        log2 = directory / "log4j2.xml"
        log1 = directory / "log4j.properties"
        if not log2.is_file():
            log2.write_text(_log4j2_xml(directory / "server.log", self.log_level))
            log1.write_text(_log4j1_properties(directory / "server.log", self.log_level))
        return [
            java(),
            f"-Xmx{heap}",
            *self.jvm_opts,
            f"-Dlog4j2.configurationFile={log2}",
            f"-Dlog4j.configuration=file:{log1}",
            f"-Dkafka.logs.dir={directory}",
            "-cp",
            self.classpath,
            main_class,
            *args,
        ]

    def run_main(
        self, main_class: str, *args: str, timeout_s: float = 120.0
    ) -> subprocess.CompletedProcess[str]:
        """Run ``main_class`` (e.g. ``org.apache.kafka.tools.FeatureCommand``) on the
        broker's classpath to completion; its output in the result. Raises
        ``subprocess.TimeoutExpired`` after ``timeout_s`` (the process is killed)."""
        return subprocess.run(
            self.java_command(main_class, *args),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            stdin=subprocess.DEVNULL,
        )

    def _format(self) -> None:
        for node in self.nodes:
            if (node.directory / "data" / "meta.properties").is_file():
                continue
            config = self._write(node)
            args = [
                "format",
                "-t",
                self.cluster_id,
                "-c",
                str(config),
                "--ignore-formatted",
                *self.format_args,
            ]
            done = self.run_main("kafka.tools.StorageTool", *args, timeout_s=self.timeout_s)
            if done.returncode != 0:
                raise BackendUnavailable(
                    f"kafka: formatting {node.directory} failed (exit {done.returncode}): "
                    f"{(done.stdout + done.stderr)[-800:]!r}"
                )
        self._formatted = True

    # ------------------------------------------------------------------ life cycle

    def start(self) -> None:
        """Start every node that is not running (formatting first if never formatted)
        and wait until each answers a metadata request with all brokers."""
        t0 = time.monotonic()
        if not self._formatted:
            self._format()
        for node in self.nodes:
            if node.alive():
                continue
            config = self._write(node)
            with open(node.directory / "stdout.log", "ab") as out:
                node.proc = subprocess.Popen(
                    self.java_command("kafka.Kafka", str(config), log_dir=node.directory, heap=self.heap),
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    cwd=node.directory,
                    start_new_session=True,  # a ^C of the test run reaches it through atexit, not SIGINT
                )
            # who started it: reap_orphans() kills it if this process dies without atexit
            (node.directory / "pids").write_text(f"{os.getpid()} {node.proc.pid}\n")
        _LIVE.add(self)
        try:
            self._wait_ready(self.timeout_s)
        except Exception as exc:
            codes = [n.proc.poll() if n.proc else None for n in self.nodes]
            tail = (
                self.nodes[0].log_path.read_text(errors="replace")[-1200:]
                if self.nodes[0].log_path.is_file()
                else ""
            )
            self.stop()
            raise BackendUnavailable(
                f"kafka {self.version} cluster {self.name} on {self.bootstrap_servers} did not answer "
                f"({exc!r}; exit codes {codes}); log tail: {tail!r}"
            ) from exc
        self.startup_s = time.monotonic() - t0

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for node in self.nodes:
            wait_until_answers(node.bootstrap(), timeout_s=max(1.0, deadline - time.monotonic()))

        def all_brokers() -> None:
            for node in self.nodes:
                if not node.alive():
                    raise BackendUnavailable(
                        f"node {node.node_id} exited with {node.proc and node.proc.poll()}"
                    )
            brokers = admin_client(self.bootstrap_servers).list_topics(timeout=2.0).brokers
            if len(brokers) < len(self.nodes):
                raise TimeoutError(f"{len(brokers)} of {len(self.nodes)} brokers registered")

        retrying(max(1.0, deadline - time.monotonic()), f"brokers of {self.name}")(all_brokers)

        def group_coordinator() -> None:
            # The first group request creates __consumer_offsets and loads its partitions
            # (seconds on a busy machine): done here, not in a test's first request. With
            # a Consumer: librdkafka 2.16's AdminClient.list_consumer_group_offsets
            # crashes the process (SIGSEGV in rd_kafka_cgrp_op, an admin client has no
            # cgrp) when the coordinator answers that it is still loading.
            consumer = Consumer(
                {"bootstrap.servers": self.bootstrap_servers, "group.id": "kbear-warm-up"},
                logger=RDKAFKA_LOG,
            )
            try:
                consumer.committed([TopicPartition("kbear-warm-up", 0)], timeout=10)
            finally:
                consumer.close()

        retrying(max(1.0, deadline - time.monotonic()), f"group coordinator, {self.name}")(group_coordinator)

    def create_topic(self, name: str, partitions: int) -> None:
        """Create ``name`` with every partition on min(3, brokers) brokers."""
        admin_create_topics(self.bootstrap_servers, {name: partitions}, replication=min(3, len(self.nodes)))

    def kill_broker(self, broker_id: int) -> None:
        """SIGKILL node ``broker_id`` (a crash); :meth:`start_broker` starts it again on
        its data. Node 1 is the controller: killing it stops the cluster's metadata."""
        node = self.nodes[broker_id - 1]
        if node.proc is not None and node.alive():
            node.proc.kill()
            node.proc.wait(timeout=10)
        node.proc = None

    def start_broker(self, broker_id: int) -> None:
        self.start()

    def group_coordinated_by(self, prefix: str, broker_id: int) -> str | None:
        # a group's coordinator leads partition abs(hashCode(group)) % partitions of
        # __consumer_offsets (Kafka's GroupCoordinator.partitionFor, Java's String.hashCode)
        md = admin_client(self.bootstrap_servers).list_topics("__consumer_offsets", timeout=10)
        topic = md.topics.get("__consumer_offsets")
        if topic is None or not topic.partitions:
            return None
        leaders = {p: info.leader for p, info in topic.partitions.items()}
        for n in range(1000):
            name = f"{prefix}-{n}"
            h = 0
            for ch in name:  # ASCII: one UTF-16 unit each
                h = (31 * h + ord(ch)) & 0xFFFFFFFF
            if leaders.get((h & 0x7FFFFFFF) % len(leaders)) == broker_id:
                return name
        return None

    def _signal(self, sig: int, grace_s: float) -> None:
        procs = [n.proc for n in self.nodes if n.proc is not None]
        for proc in procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(sig)
        for proc in procs:
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        for node in self.nodes:
            node.proc = None
        _LIVE.discard(self)

    def stop(self) -> None:
        """Shut every node down (SIGTERM: Kafka's controlled shutdown; SIGKILL after 15 s).
        :meth:`start` brings the cluster back on the same data."""
        self._signal(signal.SIGTERM, 15.0)

    def kill(self) -> None:
        """Kill every node at once (SIGKILL), as a crash would; :meth:`start` recovers
        the logs from the same data directory."""
        self._signal(signal.SIGKILL, 10.0)

    def close(self) -> None:
        self.stop()

    def rss_bytes(self) -> list[int]:
        """Resident memory of each running node (``/proc/<pid>/status`` VmRSS), bytes."""
        sizes = []
        for pid in self.pids:
            with contextlib.suppress(OSError):
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        sizes.append(int(line.split()[1]) * 1024)
        return sizes


#: where test runs leave nodes: the backend's clusters, and the clusters tests start in
#: pytest's temporary directories (``test_auth.py``'s, ``tmp_path_factory``)
ORPHAN_GLOBS = ("kbear-it-kafka-*/*/node-*/pids", "pytest-of-*/pytest-*/*/*/node-*/pids")


def reap_orphans(parent: Path) -> list[int]:
    """Kill the nodes under ``parent`` (:data:`ORPHAN_GLOBS`) whose starting process is
    gone (a test run that crashed or that pytest-timeout ended, so its ``atexit`` hook
    never ran); returns their PIDs. A PID counts only while its command line still
    names the node's directory."""
    killed = []
    for pids in (p for pattern in ORPHAN_GLOBS for p in parent.glob(pattern)):
        with contextlib.suppress(OSError, ValueError):
            owner, pid = (int(x) for x in pids.read_text().split())
            if Path(f"/proc/{owner}").exists():
                continue
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            if str(pids.parent) in cmdline:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            pids.unlink()
    return killed


def make_backend() -> Backend:
    """The ``kafka`` integration backend: one :class:`KafkaCluster` (a combined
    broker/controller) per cluster, at :func:`kafka_version`. Group protocols:
    ``classic`` (the clients' session timeouts short, as on docker), the same with
    ``cooperative-sticky`` assignment and, from 4.0, ``consumer`` (KIP-848, served
    by the broker). Raises :class:`BackendUnavailable`
    when Java or Maven is missing or the jars do not resolve."""
    version = kafka_version()
    kafka_classpath(version)  # resolve (or fail) before any cluster starts
    workdir = _workdir("kafka")
    reap_orphans(workdir.parent)
    protocols = {
        "classic": GroupProtocol({"group.protocol": "classic"}),
        # incremental rebalances of the classic protocol (KIP-429)
        "cooperative-sticky": GroupProtocol(
            {"group.protocol": "classic", "partition.assignment.strategy": "cooperative-sticky"}
        ),
    }
    if int(version.split(".", 1)[0]) >= 4:
        protocols["consumer"] = GroupProtocol({"group.protocol": "consumer"})

    def replicated(name: str, brokers: int) -> KafkaCluster:
        # internal topics and defaults replicated on 3 (min ISR 2): one broker may die
        replicas, isr = str(min(3, brokers)), str(min(2, brokers))
        properties = {
            "offsets.topic.replication.factor": replicas,
            "transaction.state.log.replication.factor": replicas,
            "transaction.state.log.min.isr": isr,
            "default.replication.factor": replicas,
            "min.insync.replicas": isr,
        }
        return KafkaCluster(name, workdir, version=version, brokers=brokers, properties=properties)

    return Backend(
        "kafka",
        lambda name: KafkaCluster(name, workdir, version=version),
        # classic protocol (librdkafka's default); group.protocol=consumer drops these
        # (the broker holds that protocol's timeouts: BASE_PROPERTIES)
        consumer_conf={"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000},
        detail=f"Apache Kafka {version} (KRaft, JVM processes, data under {workdir})",
        workdir=workdir,
        protocols=protocols,
        start_brokers=replicated,
    )


if __name__ == "__main__":  # pragma: no cover - the command line lives in _kafka_cli
    from integration._kafka_cli import main

    sys.exit(main())
