"""Fixtures of kbear's integration tests: two independent Kafka clusters (``A``, ``B``)
on the backend ``KBEAR_IT_BACKEND`` picks, and a harness that writes kbear
configuration directories for them and makes routed clients with the settings
the backend needs. Backends and their limits: ``integration/BACKENDS.md``.
"""

from __future__ import annotations

import contextlib
import itertools
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from integration.backends import (
    RDKAFKA_LOG,
    BackendUnavailable,
    Cluster,
    Started,
    candidates,
    consumer_settings,
    requested,
    start,
)
from integration.helpers import ConfigDir
from kbear import RoutedConsumer, RoutedProducer

_STARTED = pytest.StashKey[Started]()
_SKIPPED = pytest.StashKey[str]()
#: measurements the tests report (counts, duplicates), printed at the end of the run
NOTES: list[str] = []


def pytest_report_header(config: pytest.Config) -> list[str]:
    choice = requested()
    return [
        f"kbear integration: KBEAR_IT_BACKEND={choice} (tries: {', '.join(candidates(choice))}); "
        "the backend that ran is printed at the end of the run"
    ]


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    started = config.stash.get(_STARTED, None)
    skipped = config.stash.get(_SKIPPED, None)
    if started is None and skipped is None:
        return
    terminalreporter.section("kbear integration backend")
    if started is not None:
        terminalreporter.write_line(f"backend that ran: {started.backend.name} ({started.backend.detail})")
        for name, cluster in started.clusters.items():
            terminalreporter.write_line(f"  cluster {name}: {cluster.bootstrap_servers}")
        for note in started.notes:
            terminalreporter.write_line(f"  {note}")
        for note in NOTES:
            terminalreporter.write_line(f"  {note}")
    else:
        terminalreporter.write_line(f"no backend ran, integration tests skipped: {skipped}")


@pytest.fixture(scope="session")
def started(pytestconfig: pytest.Config) -> Iterator[Started]:
    """The backend and its clusters ``A`` and ``B`` for the whole session."""
    try:
        running = start(requested(), ("A", "B"))
    except BackendUnavailable as exc:
        pytestconfig.stash[_SKIPPED] = str(exc)
        pytest.skip(f"no integration backend could start: {exc}")
    pytestconfig.stash[_STARTED] = running
    try:
        yield running
    finally:
        running.close()


_counter = itertools.count()


class Harness:
    """What a test needs: clusters, configuration directories, routed clients.

    Clients are closed at teardown before the clusters this harness started
    (a consumer whose cluster is gone blocks in ``close()`` for ``session.timeout.ms``).
    """

    def __init__(self, running: Started, tmp_path: Path, test_name: str) -> None:
        self.backend = running.backend
        self.clusters: dict[str, Cluster] = dict(running.clusters)
        self._tmp = tmp_path
        self._base = re.sub(r"[^A-Za-z0-9]+", "-", test_name)[:40].strip("-")
        self._clients: list[Any] = []
        self._spares: list[Cluster] = []
        self._dirs = itertools.count()

    # names, topics, clusters -------------------------------------------------

    def name(self, prefix: str) -> str:
        """A topic / group name no other test of the session uses."""
        return f"{prefix}.{self._base}.{next(_counter)}"

    def bootstrap(self, cluster: str) -> str:
        return self.clusters[cluster].bootstrap_servers

    def create_topic(self, topic: str, partitions: int, *on: str) -> str:
        """Create ``topic`` explicitly on each named cluster (default A and B)."""
        for cluster in on or ("A", "B"):
            self.clusters[cluster].create_topic(topic, partitions)
        return topic

    def spare_cluster(self, name: str) -> Cluster:
        """One more cluster of the backend, only for this test (stopped at teardown)."""
        cluster = self.backend.start_cluster(self.name(name).replace(".", "-"))
        self._spares.append(cluster)
        self.clusters[name] = cluster
        return cluster

    def brokers_cluster(self, name: str, brokers: int) -> Cluster:
        """A cluster of ``brokers`` brokers (topics replicated on 3), only for this test
        (stopped at teardown); skips the test on a backend without such clusters."""
        if self.backend.start_brokers is None:
            pytest.skip(f"{self.backend.name}: no cluster of several brokers")
        cluster = self.backend.start_brokers(self.name(name).replace(".", "-"), brokers)
        self._spares.append(cluster)
        self.clusters[name] = cluster
        return cluster

    # configuration -----------------------------------------------------------

    def config(
        self, rules: Sequence[Mapping[str, Any]], clusters: Mapping[str, str] | None = None
    ) -> ConfigDir:
        """A fresh configuration directory: every cluster of the harness (or ``clusters``,
        id -> bootstrap.servers) and ``rules``."""
        if clusters is None:
            clusters = {cid: c.bootstrap_servers for cid, c in self.clusters.items()}
        return ConfigDir(self._tmp / f"kbear-config-{next(self._dirs)}", clusters, rules)

    # clients -----------------------------------------------------------------

    def producer(self, config: ConfigDir, reload_ms: int = 0, **conf: Any) -> RoutedProducer:
        settings = {
            "logger": RDKAFKA_LOG,
            **self.backend.producer_conf,
            "kbear.config": str(config),
            "kbear.reload.interval.ms": reload_ms,
            **conf,
        }
        return self.register(RoutedProducer(settings))

    def consumer(self, config: ConfigDir, group: str, reload_ms: int = 0, **conf: Any) -> RoutedConsumer:
        settings = consumer_settings(
            {"auto.offset.reset": "earliest", "logger": RDKAFKA_LOG},
            self.backend.consumer_conf,
            {"group.id": group, "kbear.config": str(config), "kbear.reload.interval.ms": reload_ms},
            conf,
        )
        return self.register(RoutedConsumer(settings))

    def note(self, text: str) -> None:
        """A measurement for the end-of-run summary (e.g. duplicate counts)."""
        NOTES.append(f"[{self.backend.name}] {self._base}: {text}")

    def register(self, client: Any) -> Any:
        self._clients.append(client)
        return client

    def close(self) -> None:
        for client in reversed(self._clients):
            with contextlib.suppress(Exception):
                # bounded: a producer with messages for a cluster that is down would
                # otherwise wait message.timeout.ms (5 min by default)
                client.close(10) if isinstance(client, RoutedProducer) else client.close()
        for cluster in self._spares:
            with contextlib.suppress(Exception):
                cluster.close()


@pytest.fixture
def it(started: Started, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Harness]:
    harness = Harness(started, tmp_path, request.node.name)
    try:
        yield harness
    finally:
        harness.close()
