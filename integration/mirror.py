"""MirrorMaker 2 in dedicated mode between two Apache Kafka clusters, and the
records it writes, decoded.

:class:`MirrorMaker2` runs ``org.apache.kafka.connect.mirror.MirrorMaker`` (the
``connect-mirror`` jars of ``jvm/mirror/pom.xml``, resolved by Maven) with the
``mm2.properties`` users copy (``examples/mirrormaker2/mm2.properties``, only the
addresses, aliases, topics and groups changed): it mirrors ``source`` to ``target``
(one direction): topics become ``<source alias>.<topic>`` on the target (the
topic itself under the identity policy), the consumer groups' committed offsets
come back as checkpoints in ``<source alias>.checkpoints.internal`` on the target,
and the offset syncs (upstream offset -> downstream offset) go to
``mm2-offset-syncs.<source alias>.internal`` on the target
(``offset-syncs.topic.location=target``).

Those records are decoded by kbear's own codec (:mod:`kbear.mirror`: ``OffsetSync``
and ``Checkpoint`` of connect-mirror, byte for byte), re-exported here for the tests.
"""

from __future__ import annotations

import contextlib
import ctypes
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from integration.backends import _LIVE, BackendUnavailable, Cluster
from integration.jvm import JvmUnavailable, classpath, java
from kbear.mirror import Checkpoint, OffsetSync, decode_checkpoint, decode_offset_sync

__all__ = [
    "EXAMPLE",
    "IDENTITY",
    "Checkpoint",
    "MirrorMaker2",
    "OffsetSync",
    "decode_checkpoint",
    "decode_offset_sync",
    "mirror_classpath",
    "mm2_properties",
]

#: The MirrorMaker 2 configuration users copy (docs/guides/mirrormaker2.md), run as
#: written: :func:`mm2_properties` changes only what its header names as the user's.
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "mirrormaker2" / "mm2.properties"
IDENTITY = "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"


def mm2_properties(
    source: str,
    target: str,
    *,
    aliases: tuple[str, str] = ("east", "west"),
    topics: str = ".*",
    groups: str = ".*",
    identity: bool = False,
) -> str:
    """The text of :data:`EXAMPLE` for clusters at ``source`` / ``target`` (bootstrap
    servers) named ``aliases``, mirroring ``topics`` and checkpointing ``groups``
    (regular expressions); ``identity``: the example's IdentityReplicationPolicy line
    instead of its DefaultReplicationPolicy. Every other line stays as written.

    Raises:
        ValueError: the example lacks one of the lines replaced (it changed: so must this).
    """
    east, west = aliases
    lines = {  # the example's key: (the key here, its value here)
        "clusters": ("clusters", f"{east}, {west}"),
        "east.bootstrap.servers": (f"{east}.bootstrap.servers", source),
        "west.bootstrap.servers": (f"{west}.bootstrap.servers", target),
        "east->west.enabled": (f"{east}->{west}.enabled", "true"),
        "east->west.topics": (f"{east}->{west}.topics", topics),
        "east->west.groups": (f"{east}->{west}.groups", groups),
        "west->east.enabled": (f"{west}->{east}.enabled", "false"),
    }
    if identity:
        lines["replication.policy.class"] = ("replication.policy.class", IDENTITY)
    out, seen = [], set()
    for line in EXAMPLE.read_text().splitlines():
        key = line.partition("=")[0].strip()
        if line.lstrip().startswith("#") or key not in lines:
            out.append(line)
        else:
            seen.add(key)
            out.append("{} = {}".format(*lines[key]))
    missing = set(lines) - seen
    if missing:
        raise ValueError(f"{EXAMPLE}: no line for {sorted(missing)}")
    return "\n".join(out) + "\n"


def _dies_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get SIGKILL when the process that started
    it ends, however it ends (Linux's ``PR_SET_PDEATHSIG``, kept across ``exec``): a
    test run ended by SIGTERM or SIGKILL, or by pytest-timeout's ``os._exit``, runs
    no ``finally`` and no ``atexit`` hook. None off Linux. The signal follows the
    *thread* that started the child: start it from a thread that outlives it."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before the fork
    pr_set_pdeathsig, sigkill = 1, int(signal.SIGKILL)

    def preexec() -> None:
        prctl(pr_set_pdeathsig, sigkill)

    return preexec


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

    Its ``mm2.properties`` is :data:`EXAMPLE`, the file users copy
    (:func:`mm2_properties`): ``topics``/``groups``: regular expressions of the topics
    mirrored and the groups checkpointed; ``aliases``: the cluster aliases;
    ``identity``: IdentityReplicationPolicy (``source.topic`` stays ``topic`` on the
    target) instead of the default (``<aliases[0]>.<topic>``); ``properties``: settings
    the file already has (or the identity policy), anything else is refused: the
    file is what users copy. ``bench_overrides``:
    settings appended after the example's (a later key wins), for benchmarks only: the
    integration tests run the example as written. Logs (log4j2, WARN) go to
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
        identity: bool = False,
        properties: Mapping[str, str] | None = None,
        bench_overrides: Mapping[str, str] | None = None,
        heap: str = "384m",
    ) -> None:
        for key, value in (properties or {}).items():  # what the file already says, or identity
            if key == "replication.policy.class" and value == IDENTITY:
                identity = True
            elif f"\n{key} = {value}\n" not in EXAMPLE.read_text():
                raise ValueError(
                    f"MirrorMaker2: {key} = {value}: the integration tests run {EXAMPLE} as written; "
                    "change the file (and docs/guides/mirrormaker2.md) instead"
                )
        self.aliases = aliases
        self.identity = identity
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        text = mm2_properties(
            source.bootstrap_servers,
            target.bootstrap_servers,
            aliases=aliases,
            topics=topics,
            groups=groups,
            identity=identity,
        )
        text += "".join(f"{k} = {v}\n" for k, v in (bench_overrides or {}).items())
        self.config = directory / "mm2.properties"
        self.config.write_text(text)
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
            aliases[1],
        ]
        self.proc: subprocess.Popen[bytes] | None = None
        _LIVE.add(self)  # stopped by the atexit hook of the brokers too (before it starts)
        with open(directory / "stdout.log", "ab") as out:
            self.proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # no ^C of the run's terminal: close() or atexit stops it
                preexec_fn=_dies_with_parent(),  # a run killed without atexit: the kernel does
            )

    def remote_topic(self, topic: str) -> str:
        """The mirrored topic's name on the target."""
        return topic if self.identity else f"{self.aliases[0]}.{topic}"

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
        """Stop the process (SIGTERM; SIGKILL after 15 s, or at once when the wait is
        interrupted: a second ^C); idempotent."""
        proc = self.proc
        try:
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=15)
        finally:
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
            self.proc = None
            _LIVE.discard(self)
