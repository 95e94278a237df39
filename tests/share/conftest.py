"""Fixtures of the share consumer's tests: clusters A and B whose share groups
start at the earliest record, routers over them, routed share consumers closed
at teardown."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from confluent_kafka import Producer

from kbear import RoutedShareConsumer, Router
from kbear.testing import EmbeddedCluster
from tests.conftest import Rule


@pytest.fixture
def share_clusters(two_clusters: tuple[EmbeddedCluster, EmbeddedCluster]) -> tuple[EmbeddedCluster, ...]:
    """Clusters A and B whose share groups start at the earliest record (the mock's
    default is the latest)."""
    for cluster in two_clusters:
        cluster.set_share_group(auto_offset_reset="earliest")
    return two_clusters


@pytest.fixture
def share_router(
    share_clusters: tuple[EmbeddedCluster, ...], make_router: Callable[[Sequence[Rule]], Router]
) -> Callable[[Sequence[Rule]], Router]:
    return make_router


@pytest.fixture
def consumers(closing: Callable[[Any], Any]) -> Iterator[Callable[..., RoutedShareConsumer]]:
    """``consumers(router, group, **config)`` -> a RoutedShareConsumer closed at teardown."""

    def make(router: Router, group: str, **config: Any) -> RoutedShareConsumer:
        conf = {"group.id": group, **{k.replace("_", "."): v for k, v in config.items()}}
        return closing(RoutedShareConsumer(conf, router=router))

    yield make


def produce(cluster: EmbeddedCluster, topic: str, keys: Sequence[str], partitions: int = 2) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    for i, key in enumerate(keys):
        producer.produce(topic, key=key.encode(), value=b"v", partition=i % partitions)
    assert producer.flush(10) == 0
