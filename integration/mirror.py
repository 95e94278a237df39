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

Those records are decoded by kbear's own codec (:mod:`kbear.mirror`: ``OffsetSync``
and ``Checkpoint`` of connect-mirror, byte for byte), re-exported here for the tests.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path

from integration.backends import _LIVE, BackendUnavailable, Cluster
from integration.jvm import JvmUnavailable, classpath, java
from kbear.mirror import Checkpoint, OffsetSync, decode_checkpoint, decode_offset_sync

__all__ = [
    "BASE_MM2_PROPERTIES",
    "Checkpoint",
    "MirrorMaker2",
    "OffsetSync",
    "decode_checkpoint",
    "decode_offset_sync",
    "mirror_classpath",
]

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
