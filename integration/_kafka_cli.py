"""``python -m integration.kafka up|down|status|resolve``: local Apache Kafka clusters for
the examples and the demo, without Docker (``docs/guides/apache-kafka.md``).

``up`` starts clusters (default ``A`` and ``B``, one combined broker/controller
each) that outlive the command, records them in ``<dir>/clusters.json`` and prints
``NAME=bootstrap.servers`` lines; ``down`` stops them by PID (SIGTERM, then SIGKILL)
and deletes their data; ``status`` prints what runs. ``<dir>`` is ``--dir``, else
``KBEAR_KAFKA_DIR``, else ``~/.cache/kbear/kafka``. ``resolve`` has Maven resolve the
jars the integration suite runs on Apache Kafka with (the broker's, MirrorMaker 2's
and, with pyspark installed, Spark's connector's) and says which version; exit 1 with
the reason when it cannot (no Java, no Maven, Maven Central not reached): what
``scripts/test.sh`` runs before the tests.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path

from integration.backends import _LIVE, BackendUnavailable


def _state_dir(arg: str | None) -> Path:
    return Path(arg or os.environ.get("KBEAR_KAFKA_DIR") or Path.home() / ".cache" / "kbear" / "kafka")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie child counts as gone
    with contextlib.suppress(OSError):
        return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    return True


def _read_state(directory: Path) -> dict[str, dict[str, object]]:
    path = directory / "clusters.json"
    if not path.is_file():
        return {}
    data: dict[str, dict[str, object]] = json.loads(path.read_text())
    return data


def _pids(entry: dict[str, object]) -> list[int]:
    pids = entry.get("pids", [])
    return [int(p) for p in pids] if isinstance(pids, list) else []


def up(directory: Path, names: list[str], version: str | None) -> int:
    from integration.kafka import KafkaCluster

    state = _read_state(directory)
    if state and all(any(_alive(p) for p in _pids(e)) for e in state.values()):
        print(f"# already up (state in {directory / 'clusters.json'})", file=sys.stderr)
        for name, entry in state.items():
            print(f"{name}={entry['bootstrap_servers']}")
        return 0
    if state:
        down(directory)
    directory.mkdir(parents=True, exist_ok=True)
    started: dict[str, dict[str, object]] = {}
    for name in names:
        try:
            cluster = KafkaCluster(name, directory, version=version)
        except BackendUnavailable as exc:
            print(f"error: {exc}", file=sys.stderr)
            (directory / "clusters.json").write_text(json.dumps(started, indent=2))
            down(directory)
            return 1
        _LIVE.discard(cluster)  # it outlives this command: `down` stops it
        started[name] = {
            "bootstrap_servers": cluster.bootstrap_servers,
            "pids": cluster.pids,
            "directory": str(cluster.directory),
            "version": cluster.version,
            "startup_s": round(cluster.startup_s or 0.0, 1),
        }
        (directory / "clusters.json").write_text(json.dumps(started, indent=2))
        print(
            f"# {name}: Apache Kafka {cluster.version} up in {cluster.startup_s:.1f} s, pid {cluster.pids}, "
            f"logs in {cluster.directory}",
            file=sys.stderr,
        )
    for name, entry in started.items():
        print(f"{name}={entry['bootstrap_servers']}")
    return 0


def down(directory: Path) -> int:
    state = _read_state(directory)
    pids = [p for entry in state.values() for p in _pids(entry) if _alive(p)]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.2)
    for pid in pids:
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    for entry in state.values():
        shutil.rmtree(str(entry.get("directory", "")), ignore_errors=True)
    with contextlib.suppress(FileNotFoundError):
        (directory / "clusters.json").unlink()
    print(f"# stopped {len(state)} cluster(s) ({len(pids)} process(es))", file=sys.stderr)
    return 0


def status(directory: Path) -> int:
    state = _read_state(directory)
    if not state:
        print("# no clusters up", file=sys.stderr)
        return 1
    for name, entry in state.items():
        alive = [p for p in _pids(entry) if _alive(p)]
        print(f"{name}={entry['bootstrap_servers']}  # {'up' if alive else 'DOWN'}, pids {alive}")
    return 0


def resolve(version: str | None) -> int:
    """Resolve the jars of the ``kafka`` backend, MirrorMaker 2 and Spark's connector."""
    from integration.jvm import JvmUnavailable, classpath
    from integration.kafka import kafka_classpath, kafka_version

    version = version or kafka_version()
    started = time.monotonic()
    try:
        kafka_classpath(version)
        classpath("mirror")
        try:
            import pyspark  # noqa: F401  (the spark extra)
        except ImportError:
            spark = "pyspark not installed: Spark's connector not resolved"
        else:
            from integration.spark import connector_jars

            connector_jars()
            spark = "Spark's connector"
    except (BackendUnavailable, JvmUnavailable) as exc:
        print(f"Apache Kafka {version} cannot run here: {exc}".replace("\n", " | "))
        return 1
    print(
        f"Apache Kafka {version}: jars resolved in {time.monotonic() - started:.1f} s "
        f"(broker, MirrorMaker 2, {spark})"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m integration.kafka",
        description="Local Apache Kafka (KRaft) clusters as JVM processes: jars from Maven Central "
        "(jvm/kafka/pom.xml), Java 17 and Maven needed.",
    )
    parser.add_argument("command", choices=("up", "down", "status", "resolve"))
    parser.add_argument(
        "--dir", help="state and data directory (default $KBEAR_KAFKA_DIR or ~/.cache/kbear/kafka)"
    )
    parser.add_argument("--clusters", default="A,B", help="comma-separated cluster names (up; default A,B)")
    parser.add_argument(
        "--version", help="Apache Kafka version (default $KBEAR_KAFKA_VERSION, else the POM's)"
    )
    args = parser.parse_args(argv)
    directory = _state_dir(args.dir)
    if args.command == "up":
        names = [n.strip() for n in args.clusters.split(",") if n.strip()]
        return up(directory, names, args.version)
    if args.command == "down":
        return down(directory)
    if args.command == "resolve":
        return resolve(args.version)
    return status(directory)
