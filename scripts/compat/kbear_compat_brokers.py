"""pytest plugin of the compatibility harness's serde run (``-p kbear_compat_brokers``).

confluent-kafka-python's tests of its serializing clients with a Schema Registry
(``tests/integration/schema_registry/_sync/test_*_serializers.py``,
``tests/integration/serialization/test_serializers.py``) need a broker and a
registry. Their fixture (``tests/integration/conftest.py``) uses an existing
cluster when ``BROKERS`` is set and a registry at ``SR_URL``: this plugin starts
one in-process librdkafka mock cluster (``kbear.testing.EmbeddedCluster``) for
the pytest run and names it there, with ``SR_URL=mock://kbear-compat``. The
fixture builds its registry client with ``SchemaRegistryClient(conf)``, which
does not know ``mock://`` URLs: that name is replaced in the fixture's module
by ``SchemaRegistryClient.new_client`` kept per configuration
(``kbear.schema_registry.registry_client``), so the tests and the clients see
one in-memory registry, as they would see one server. librdkafka's mock cluster
does not serve CreateTopics: the fixture's ``create_topic`` creates the topic
in the mock cluster directly (``EmbeddedCluster.create_topic``, the fixture's
name and partition count). The same plugin runs on both sides (baseline and
routed), so both see the same cluster and registry.
"""

from __future__ import annotations

import os
import sys
import uuid
from typing import Any

import pytest

from kbear.schema_registry import registry_client
from kbear.testing import EmbeddedCluster

SR_URL = "mock://kbear-compat"
_cluster: list[EmbeddedCluster] = []


def pytest_configure(config: pytest.Config) -> None:
    cluster = EmbeddedCluster()
    _cluster.append(cluster)
    os.environ["BROKERS"] = cluster.bootstrap_servers
    os.environ["SR_URL"] = SR_URL


def pytest_unconfigure(config: pytest.Config) -> None:
    while _cluster:
        _cluster.pop().close()


def _shared_registry(conf: dict[str, Any]) -> Any:
    return registry_client(conf)


def _create_topic(fixture: Any, prefix: str, conf: dict[str, Any] | None = None, **kwargs: Any) -> str:
    """The fixture's ``create_topic``, in the mock cluster: ``prefix-<uuid1>``, its
    ``num_partitions`` (default 1, as the fixture's topic configuration)."""
    name = f"{prefix}-{uuid.uuid1()}"
    partitions = int((conf or {}).get("num_partitions", 1))
    _cluster[0].create_topic(name, partitions)
    return name


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    fixture = sys.modules.get("tests.integration.cluster_fixture")
    if fixture is not None:
        fixture.SchemaRegistryClient = _shared_registry
        fixture.KafkaClusterFixture.create_topic = _create_topic


def pytest_report_header(config: pytest.Config) -> str:
    return f"kbear-compat: BROKERS={os.environ.get('BROKERS')} (mock cluster), SR_URL={SR_URL}"
