"""The factory the compatibility harness puts in place of confluent-kafka's clients.

``Producer``, ``Consumer``, ``SerializingProducer``, ``DeserializingConsumer``,
``AdminClient``, ``ShareConsumer`` and ``DeserializingShareConsumer`` here are
subclasses of kbear's ``RoutedProducer`` / ``RoutedConsumer`` /
``RoutedSerializingProducer`` / ``RoutedDeserializingConsumer`` /
``RoutedAdminClient`` / ``RoutedShareConsumer`` / ``RoutedDeserializingShareConsumer``
that take a confluent-kafka
configuration as a plain client does: they turn its ``bootstrap.servers`` (or
``metadata.broker.list``; or none) into a one-cluster kbear configuration
(``clusters.yaml`` with that cluster, one global rule ``use cluster compat``)
and build the routed client over it. Being classes, ``isinstance`` checks and
application subclasses (``class MyConsumer(Consumer)``) work on them as on
confluent-kafka's.

Anything that is not a configuration mapping (``Producer(None)``, a string...)
is passed on unchanged, so that kbear's own argument checking answers it.
"""

from __future__ import annotations

import atexit
import dataclasses
import itertools
import shutil
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from kbear import (
    RoutedAdminClient,
    RoutedConsumer,
    RoutedDeserializingConsumer,
    RoutedDeserializingShareConsumer,
    RoutedProducer,
    RoutedSerializingProducer,
    RoutedShareConsumer,
    Router,
    load_config,
)

_SERVER_KEYS = ("bootstrap.servers", "metadata.broker.list")
_CLUSTER = "compat"
#: What clusters.yaml holds when the test's configuration names no broker: kbear
#: requires ``bootstrap.servers`` there, so the configuration is loaded with this
#: placeholder and the loaded cluster's value is then blanked (librdkafka's
#: "no bootstrap.servers", as in the test's own client).
_NO_SERVERS = "no-bootstrap-servers.invalid:9092"

_lock = threading.Lock()
_routers: dict[str, Router] = {}
_dirs = itertools.count()
_root = Path(tempfile.mkdtemp(prefix="kbear-compat-"))
atexit.register(shutil.rmtree, _root, True)


def router_for(servers: str) -> Router:
    """A router over a one-cluster configuration directory whose cluster has
    ``bootstrap.servers`` = ``servers`` ("" for none); one per distinct value."""
    with _lock:
        router = _routers.get(servers)
        if router is None:
            directory = _root / f"conf{next(_dirs)}"  # not len(): a failed attempt keeps its name
            directory.mkdir()
            meta = {"bootstrap.servers": servers or _NO_SERVERS}
            rule = {"id": "everything", "meta": {"rule.isGlobal": True}, "rule": f"use cluster {_CLUSTER}"}
            (directory / "clusters.yaml").write_text(
                yaml.safe_dump({"clusters": [{"id": _CLUSTER, "meta": meta}]})
            )
            (directory / "route-rules.yaml").write_text(yaml.safe_dump({"route-rules": [rule]}))
            config = load_config(directory)
            if not servers:
                cluster = config.clusters[_CLUSTER]
                blank = cluster.model_copy(update={"meta": {**cluster.meta, "bootstrap.servers": ""}})
                config = dataclasses.replace(config, clusters={_CLUSTER: blank})
            # No directory: the clients start no watcher on this (never changing) router.
            router = _routers[servers] = Router(dataclasses.replace(config, directory=None))
        return router


def _servers(value: Any) -> str:
    """The servers of a configuration value: None (confluent-kafka's "not set") is none."""
    return "" if value is None else str(value)


def _split(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any], Router]:
    """The arguments without the bootstrap servers, and the router of those servers."""
    servers = ""
    if args and isinstance(args[0], Mapping):
        conf = dict(args[0])
        for key in _SERVER_KEYS:
            if key in conf:
                servers = _servers(conf.pop(key))
        args = (conf, *args[1:])
    for key in _SERVER_KEYS:
        if key in kwargs:
            servers = _servers(kwargs.pop(key))
    return args, kwargs, router_for(servers)


class _OneCluster:
    """The harness's construction, put before a routed client class: the test's
    ``bootstrap.servers`` become a one-cluster configuration (its router)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if not args and not kwargs:  # no configuration at all: kbear answers as it would
            super().__init__()
            return
        args, kwargs, router = _split(args, kwargs)
        super().__init__(*args, router=router, **kwargs)  # type: ignore[call-arg]


class Producer(_OneCluster, RoutedProducer):
    """confluent_kafka.Producer as the harness gives it: a RoutedProducer on a
    one-cluster configuration made from the test's ``bootstrap.servers``."""


class Consumer(_OneCluster, RoutedConsumer):
    """confluent_kafka.Consumer as the harness gives it: a RoutedConsumer on a
    one-cluster configuration made from the test's ``bootstrap.servers``."""


class SerializingProducer(_OneCluster, RoutedSerializingProducer):
    """confluent_kafka.SerializingProducer as the harness gives it: a
    RoutedSerializingProducer on a one-cluster configuration."""


class DeserializingConsumer(_OneCluster, RoutedDeserializingConsumer):
    """confluent_kafka.DeserializingConsumer as the harness gives it: a
    RoutedDeserializingConsumer on a one-cluster configuration."""


class AdminClient(_OneCluster, RoutedAdminClient):
    """confluent_kafka.admin.AdminClient as the harness gives it: a RoutedAdminClient
    on a one-cluster configuration made from the test's ``bootstrap.servers``."""


class ShareConsumer(_OneCluster, RoutedShareConsumer):
    """confluent_kafka.ShareConsumer as the harness gives it: a RoutedShareConsumer
    on a one-cluster configuration made from the test's ``bootstrap.servers``."""


class DeserializingShareConsumer(ShareConsumer, RoutedDeserializingShareConsumer):
    """confluent_kafka.DeserializingShareConsumer as the harness gives it: a
    RoutedDeserializingShareConsumer on a one-cluster configuration, and a subclass of
    the harness's ShareConsumer (as confluent-kafka's is of its ShareConsumer)."""
