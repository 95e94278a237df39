"""MirrorMaker 2 in dedicated mode between two Apache Kafka clusters, and the
records it writes, decoded.

:class:`MirrorMaker2` runs ``org.apache.kafka.connect.mirror.MirrorMaker`` (the
``connect-mirror`` jars of ``jvm/mirror/pom.xml``, resolved by Maven) with an
``mm2.properties`` that mirrors ``source`` to ``target`` (one direction): topics
become ``<source alias>.<topic>`` on the target, the consumer groups' committed
offsets come back as checkpoints in ``<source alias>.checkpoints.internal`` on the
target, and the offset syncs (upstream offset -> downstream offset) go to
``mm2-offset-syncs.<source alias>.internal`` on the target here
(``offset-syncs.topic.location=target``).

:func:`decode_offset_sync` and :func:`decode_checkpoint` read those records as
MirrorMaker 2 writes them (``OffsetSync`` and ``Checkpoint`` of connect-mirror,
Kafka's protocol types: ``STRING`` = int16 length + UTF-8, ``INT16/32/64``
big-endian; a checkpoint's value starts with an int16 version, 0).
"""

from __future__ import annotations

import contextlib
import signal
import struct
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from integration.backends import _LIVE, BackendUnavailable, Cluster
from integration.jvm import JvmUnavailable, classpath, java

#: mm2.properties settings before the caller's ``properties``: one broker per cluster
#: (replication factors 1), checkpoints every second, no group offset sync to the
#: target (the tests read the checkpoints themselves), topics and groups looked up
#: every second, an offset sync for every record (``offset.lag.max=0``).
BASE_MM2_PROPERTIES: dict[str, str] = {
    "replication.factor": "1",
    "checkpoints.topic.replication.factor": "1",
    "heartbeats.topic.replication.factor": "1",
    "offset-syncs.topic.replication.factor": "1",
    "offset.storage.replication.factor": "1",
    "status.storage.replication.factor": "1",
    "config.storage.replication.factor": "1",
    "offset-syncs.topic.location": "target",
    "emit.checkpoints.interval.seconds": "1",
    "emit.heartbeats.interval.seconds": "1",
    "sync.group.offsets.enabled": "false",
    "sync.topic.configs.enabled": "false",
    "sync.topic.acls.enabled": "false",
    "refresh.topics.interval.seconds": "1",
    "refresh.groups.interval.seconds": "1",
    "offset.lag.max": "0",
}


@dataclass(frozen=True)
class OffsetSync:
    """One record of ``mm2-offset-syncs.<target>.internal``: ``topic``/``partition``
    on the source cluster, its ``upstream_offset`` there and the ``downstream_offset``
    of the same record in the mirrored topic."""

    topic: str
    partition: int
    upstream_offset: int
    downstream_offset: int


@dataclass(frozen=True)
class Checkpoint:
    """One record of ``<source>.checkpoints.internal``: consumer ``group``'s committed
    ``upstream_offset`` on the source for ``topic``/``partition`` (the mirrored topic's
    name on the target) and its translation ``downstream_offset`` on the target."""

    group: str
    topic: str
    partition: int
    upstream_offset: int
    downstream_offset: int
    metadata: str


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def _take(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.at)
        self.at += struct.calcsize(fmt)
        return int(value)

    def int16(self) -> int:
        return self._take(">h")

    def int32(self) -> int:
        return self._take(">i")

    def int64(self) -> int:
        return self._take(">q")

    def string(self) -> str:
        size = self.int16()
        if size < 0:
            raise ValueError("null STRING where MirrorMaker 2 writes a string")
        text = self.data[self.at : self.at + size].decode()
        self.at += size
        return text

    def done(self) -> None:
        if self.at != len(self.data):
            raise ValueError(f"{len(self.data) - self.at} bytes left over after the record")


def decode_offset_sync(key: bytes, value: bytes) -> OffsetSync:
    """An offset-sync record (key: topic STRING, partition INT32; value: upstream and
    downstream offsets INT64). Raises ``ValueError`` or ``struct.error`` on other bytes."""
    k, v = _Reader(key), _Reader(value)
    topic, partition = k.string(), k.int32()
    upstream, downstream = v.int64(), v.int64()
    k.done()
    v.done()
    return OffsetSync(topic, partition, upstream, downstream)


def decode_checkpoint(key: bytes, value: bytes) -> Checkpoint:
    """A checkpoint record (key: group, topic STRING, partition INT32; value: version
    INT16 = 0, upstream and downstream offsets INT64, metadata STRING). Raises
    ``ValueError`` on another version or bytes left over, ``struct.error`` on short ones."""
    k, v = _Reader(key), _Reader(value)
    group, topic, partition = k.string(), k.string(), k.int32()
    version = v.int16()
    if version != 0:
        raise ValueError(f"checkpoint value version {version}: only 0 is known")
    upstream, downstream, metadata = v.int64(), v.int64(), v.string()
    k.done()
    v.done()
    return Checkpoint(group, topic, partition, upstream, downstream, metadata)


def mirror_classpath(version: str | None = None) -> str:
    """The jars of ``jvm/mirror/pom.xml`` (``version`` overrides its ``kafka.version``).
    Raises :class:`BackendUnavailable` without Java or Maven."""
    try:
        java()
        jars = classpath("mirror", {"kafka.version": version} if version else None)
    except JvmUnavailable as exc:
        raise BackendUnavailable(f"mirror: {exc}") from exc
    return ":".join(str(j) for j in jars)


class MirrorMaker2:
    """A dedicated MirrorMaker 2 process mirroring ``source`` to ``target``.

    ``topics``/``groups``: regular expressions of the topics mirrored and the groups
    checkpointed; ``aliases``: the cluster aliases (``source.topic`` becomes
    ``<aliases[0]>.<topic>`` on the target); ``properties``: ``mm2.properties``
    settings over :data:`BASE_MM2_PROPERTIES`. Logs (log4j2, WARN) go to
    ``directory/mm2.log``. :meth:`close` stops it by PID (SIGTERM, SIGKILL after 15 s).
    """

    def __init__(
        self,
        source: Cluster,
        target: Cluster,
        directory: Path,
        *,
        topics: str = ".*",
        groups: str = ".*",
        aliases: tuple[str, str] = ("east", "west"),
        properties: Mapping[str, str] | None = None,
        heap: str = "384m",
    ) -> None:
        self.aliases = aliases
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        east, west = aliases
        props = {
            "clusters": f"{east}, {west}",
            f"{east}.bootstrap.servers": source.bootstrap_servers,
            f"{west}.bootstrap.servers": target.bootstrap_servers,
            f"{east}->{west}.enabled": "true",
            f"{east}->{west}.topics": topics,
            f"{east}->{west}.groups": groups,
            f"{west}->{east}.enabled": "false",
            **BASE_MM2_PROPERTIES,
            **(properties or {}),
        }
        self.config = directory / "mm2.properties"
        self.config.write_text("".join(f"{k} = {v}\n" for k, v in props.items()))
        self.log_path = directory / "mm2.log"
        log4j2 = directory / "log4j2.xml"
        log4j2.write_text(
            '<Configuration status="error"><Appenders><File name="file" fileName="'
            + str(self.log_path)
            + '"><PatternLayout pattern="%d{HH:mm:ss.SSS} %-5p [%c{1}] %m%n"/></File></Appenders>'
            '<Loggers><Root level="warn"><AppenderRef ref="file"/></Root></Loggers></Configuration>\n'
        )
        command = [
            java(),
            f"-Xmx{heap}",
            "-XX:+UseSerialGC",
            f"-Dlog4j2.configurationFile={log4j2}",
            "-cp",
            mirror_classpath(),
            "org.apache.kafka.connect.mirror.MirrorMaker",
            str(self.config),  # before --clusters, which takes one or more names
            "--clusters",
            west,
        ]
        with open(directory / "stdout.log", "ab") as out:
            self.proc: subprocess.Popen[bytes] | None = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        _LIVE.add(self)  # stopped by the atexit hook of the brokers too

    def remote_topic(self, topic: str) -> str:
        """The mirrored topic's name on the target (DefaultReplicationPolicy)."""
        return f"{self.aliases[0]}.{topic}"

    @property
    def checkpoints_topic(self) -> str:
        return f"{self.aliases[0]}.checkpoints.internal"

    @property
    def offset_syncs_topic(self) -> str:
        """On the target (``offset-syncs.topic.location=target``) it is named after the
        source: ``mm2-offset-syncs.<source alias>.internal`` (seen with 4.3.1)."""
        return f"mm2-offset-syncs.{self.aliases[0]}.internal"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        with contextlib.suppress(KeyError):
            _LIVE.remove(self)
