"""``kbear move --apply`` over a meta-service (issue #30): besides the old cluster
going quiet, it waits until every client that asked ``kbear serve`` for the
topic got the new route (``GET /fleet/moves``), and names the stragglers (id,
address) when they do not come."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import rule
from kbear.cli import main
from kbear.router import Client, Router
from kbear.testing import EmbeddedCluster

pytest.importorskip("uvicorn", reason="kbear serve needs the server extra")
from kbear.server.embedded import EmbeddedMetaService

Clusters = tuple[EmbeddedCluster, EmbeddedCluster]
TOKEN = "move-fleet-token"


@pytest.fixture
def topic(two_clusters: Clusters, unique: Callable[[str], str]) -> str:
    name = unique("moving")
    for cluster in two_clusters:
        cluster.create_topic(name, 2)
    return name


@pytest.fixture
def service(
    make_config: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> Iterator[EmbeddedMetaService]:
    monkeypatch.setenv("KBEAR_META_TOKEN", TOKEN)
    conf = make_config([rule("all", "use cluster A", isGlobal=True)])
    with EmbeddedMetaService(conf, watch_interval_s=0.1, token=TOKEN) as served:
        yield served


@pytest.fixture
def clients(service: EmbeddedMetaService) -> Iterator[Callable[[int, str, bool], list[Router]]]:
    opened: list[Router] = []

    def start(count: int, topic: str, refresh: bool = True) -> list[Router]:
        for _ in range(count):
            client = Client(f"app-{len(opened)}", {"env": "PROD"})
            router = Router.from_source(service.url, client=client, cache_file=None)
            assert router.route_producer(topic, client).cluster_id == "A"
            if refresh:
                router.watch(0.3)
            opened.append(router)
        return opened[-count:]

    yield start
    for router in opened:
        router.close()


def move(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["move", "--request-timeout", "2", *args])
    return code, out.getvalue()


def test_apply_waits_until_every_client_got_the_new_route(
    service: EmbeddedMetaService, clients: Callable[[int, str, bool], list[Router]], topic: str
) -> None:
    routers = clients(4, topic, True)
    code, out = move(
        "--config",
        service.url,
        "--topic",
        topic,
        "--to",
        "B",
        "--apply",
        "--stable",
        "0.5",
        "--timeout",
        "30",
        "--json",
    )
    report: dict[str, Any] = json.loads(out)
    assert code == 0, report
    fleet = report["fleet"]
    assert fleet["done"] and fleet["done_s"] is not None
    assert (fleet["clients"], fleet["on_new_route"], fleet["on_old_route"], fleet["not_asked_since"]) == (
        4,
        4,
        0,
        0,
    )
    assert fleet["serving_new_rules"] == fleet["services"] == 1
    for i, router in enumerate(routers):  # what the service recorded is what the clients hold
        assert router.route_producer(topic, Client(f"app-{i}", {"env": "PROD"})).cluster_id == "B"


def test_stragglers_are_named_when_the_wait_times_out(
    service: EmbeddedMetaService, clients: Callable[[int, str, bool], list[Router]], topic: str
) -> None:
    clients(2, topic, True)
    clients(1, topic, False)  # asked once, never again
    directory = str(service.holder.directory)
    code, out = move(
        "--config",
        directory,
        "--meta-service",
        service.url,
        "--topic",
        topic,
        "--to",
        "B",
        "--apply",
        "--stable",
        "0.5",
        "--timeout",
        "4",
    )
    assert code == 1, out
    [line] = [line for line in out.splitlines() if line.startswith("not every client moved")]
    assert "2/3 client(s) on the new route, 0 still on the old, 1 not asked since" in line
    assert "stragglers: app-2 (127.0.0.1:" in line
    assert "app-0" not in line and "app-1" not in line


def test_a_service_whose_directory_is_not_here_is_refused(
    service: EmbeddedMetaService, topic: str, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.rmtree(service.holder.directory)  # the service's directory is not on this machine
    assert main(["move", "--config", service.url, "--topic", topic, "--to", "B"]) == 2
    assert "does not hold with the same content" in capsys.readouterr().err
