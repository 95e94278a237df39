"""A Spark standalone cluster on 127.0.0.1: pyspark's own ``sbin/spark-daemon.sh``
starting ``org.apache.spark.deploy.master.Master`` and two
``org.apache.spark.deploy.worker.Worker`` (what ``start-master.sh`` and
``start-worker.sh`` do; pyspark ships ``spark-daemon.sh`` only).

Each daemon is a JVM of its own (``-Xmx`` from ``SPARK_DAEMON_MEMORY``), its logs and
PID files in the cluster's directory; :meth:`StandaloneCluster.close` stops them by
``spark-daemon.sh stop``, then by PID. Applications connect to :attr:`master_url`;
their executors run this interpreter (``spark.pyspark.python``).
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

from integration.backends import BackendUnavailable

__all__ = ["StandaloneCluster"]

_MASTER = "org.apache.spark.deploy.master.Master"
_WORKER = "org.apache.spark.deploy.worker.Worker"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class StandaloneCluster:
    """A master and ``workers`` workers (``cores`` cores and ``memory`` each) on 127.0.0.1.

    Raises:
        BackendUnavailable: pyspark's ``sbin`` is missing, or the master did not
            listen within ``timeout_s``.
    """

    def __init__(
        self, directory: Path, workers: int = 2, cores: int = 1, memory: str = "1g", timeout_s: float = 90.0
    ) -> None:
        import pyspark

        self.home = Path(pyspark.__file__).resolve().parent
        self.daemon = self.home / "sbin" / "spark-daemon.sh"
        if not self.daemon.is_file():
            raise BackendUnavailable(f"no {self.daemon}: pyspark without its sbin scripts")
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.port = _free_port()
        self.master_url = f"spark://127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            "SPARK_HOME": str(self.home),
            "SPARK_LOG_DIR": str(directory / "logs"),
            "SPARK_PID_DIR": str(directory / "pids"),
            "SPARK_IDENT_STRING": f"kbear-it-{self.port}",
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_MASTER_HOST": "127.0.0.1",
            "SPARK_WORKER_DIR": str(directory / "work"),
            "SPARK_DAEMON_MEMORY": "256m",
        }
        self.env.pop("SPARK_NO_DAEMONIZE", None)
        self._started: list[tuple[str, int]] = []
        self._run("start", _MASTER, 1, "--host", "127.0.0.1", "--port", str(self.port), "--webui-port", "0")
        self._wait_port(timeout_s)
        for n in range(1, workers + 1):
            self._run(
                "start",
                _WORKER,
                n,
                "--host",
                "127.0.0.1",
                "--webui-port",
                "0",
                "--cores",
                str(cores),
                "--memory",
                memory,
                self.master_url,
            )

    def _run(self, action: str, cls: str, instance: int, *args: str) -> None:
        done = subprocess.run(
            ["bash", str(self.daemon), action, cls, str(instance), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if action == "start":
            if done.returncode != 0:
                self.close()
                raise BackendUnavailable(
                    f"spark-daemon.sh start {cls}: {done.stdout[-500:]}{done.stderr[-500:]}"
                )
            self._started.append((cls, instance))

    def _wait_port(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with socket.socket() as s:
                s.settimeout(1.0)
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.5)
        logs = "".join(p.read_text(errors="replace")[-1500:] for p in (self.directory / "logs").glob("*.out"))
        self.close()
        raise BackendUnavailable(
            f"the Spark master did not listen on {self.port} within {timeout_s} s: {logs}"
        )

    def workers_registered(self) -> int:
        """How many workers the master's log says registered."""
        logs = self.directory / "logs"
        text = (
            "".join(p.read_text(errors="replace") for p in logs.glob("*Master*.out")) if logs.is_dir() else ""
        )
        return text.count("Registering worker")

    def close(self) -> None:
        """Stop every daemon (``spark-daemon.sh stop``, which kills by PID file); idempotent."""
        for cls, instance in reversed(self._started):
            subprocess.run(
                ["bash", str(self.daemon), "stop", cls, str(instance)],
                env=self.env,
                capture_output=True,
                timeout=60,
                check=False,
            )
        self._started.clear()
