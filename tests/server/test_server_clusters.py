"""``GET /clusters`` and the console's clusters: each cluster's address as a client that
is not kbear's gets it (placeholders resolved from the server's environment, secrets
masked), reachable or not as the probe sees it (a cluster that goes down reads
unreachable within the probe's interval and its bound), and the failover state."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _serve import TestClient

pytest.importorskip("uvicorn")

from kbear.server import ConfigHolder, create_app
from kbear.server.clusters import ClusterBoard, mask_address

pytestmark = pytest.mark.filterwarnings("ignore:.*httpx2")

PROBE_INTERVAL_S = 0.2


@pytest.fixture
def broker() -> Iterator[socket.socket]:
    """A listening socket on 127.0.0.1: what the TCP probe sees of a broker that is up."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.listen(16)
    yield listener
    listener.close()


def write_config(directory: Path, port: int) -> None:
    (directory / "clusters.yaml").write_text(
        f"""\
clusters:
  - id: east
    meta:
      bootstrap.servers: ${{KBEAR_T_EAST}}
      sasl.username: app
      sasl.password: ${{KBEAR_T_PW}}
      sasl.jaas.config: org.apache...PlainLoginModule required password="pw-PLANTED";
      client.rack: ${{KBEAR_T_RACK}}
      kbear.failover.to: west
      kbear.mirror: mm2
  - id: west
    meta:
      bootstrap.servers: 127.0.0.1:{port}
      kbear.failover.to: north
      kbear.failover.active: "true"
      kbear.failover.decided: "2026-11-28T21:00:00+00:00"
  - id: north
    meta:
      bootstrap.servers: ${{KBEAR_T_NORTH}}
"""
    )
    (directory / "route-rules.yaml").write_text(
        "route-rules:\n  - id: all\n    meta: {rule.isGlobal: true}\n    rule: use cluster east\n"
    )


@pytest.fixture
def served(
    tmp_path: Path, broker: socket.socket, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[TestClient, socket.socket]]:
    east = broker.getsockname()[1]
    dead = socket.create_server(("127.0.0.1", 0))
    west = dead.getsockname()[1]
    dead.close()  # nothing listens on west's port: unreachable from the start
    monkeypatch.setenv("KBEAR_T_EAST", f"127.0.0.1:{east}")
    monkeypatch.setenv("KBEAR_T_PW", "s3cret-PLANTED")
    monkeypatch.setenv("KBEAR_T_RACK", "east-1")
    monkeypatch.delenv("KBEAR_T_NORTH", raising=False)
    write_config(tmp_path, west)
    holder = ConfigHolder(tmp_path)
    board = ClusterBoard(lambda: holder.served.config, PROBE_INTERVAL_S)
    with TestClient(create_app(holder, watch=False, clusters=board)) as client:
        yield client, broker


def clusters(client: TestClient) -> dict[str, dict[str, Any]]:
    answer = client.get("/clusters")
    assert answer.status_code == 200
    assert "PLANTED" not in answer.text  # no secret, resolved or written literally
    return {c["id"]: c for c in answer.json()["clusters"]}


def wait_for(client: TestClient, cluster: str, reachable: bool, within_s: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < within_s:
        if clusters(client)[cluster]["reachable"] is reachable:
            return time.monotonic() - start
        time.sleep(0.05)
    raise AssertionError(
        f"{cluster} not reachable={reachable} within {within_s} s: {clusters(client)[cluster]}"
    )


def test_addresses_resolved_secrets_masked_failover_state(served: tuple[TestClient, socket.socket]) -> None:
    client, broker = served
    wait_for(client, "east", True, 5.0)
    by_id = clusters(client)
    east = by_id["east"]
    assert east["bootstrapServers"] == f"127.0.0.1:{broker.getsockname()[1]}"
    assert east["properties"] == {
        "sasl.username": "app",
        "sasl.password": "***",
        "sasl.jaas.config": "***",
        "client.rack": "east-1",
    }
    assert east["standby"] == "west" and east["failedOver"] is False and east["mirror"] == "mm2"
    assert east["since"] is not None and east["error"] is None
    west = by_id["west"]
    assert west["failedOver"] is True and west["decidedAt"] == "2026-11-28T21:00:00+00:00"
    wait_for(client, "west", False, 5.0)
    assert "Connection refused" in clusters(client)["west"]["lastError"]
    north = by_id["north"]
    assert north["bootstrapServers"] == "${KBEAR_T_NORTH}"
    assert north["unresolved"] == "environment variable KBEAR_T_NORTH is not set on the server"


def test_a_cluster_that_goes_down_reads_unreachable_within_the_interval(
    served: tuple[TestClient, socket.socket],
) -> None:
    client, broker = served
    wait_for(client, "east", True, 5.0)
    broker.close()
    took = wait_for(client, "east", False, PROBE_INTERVAL_S + 3.0)
    east = clusters(client)["east"]
    assert east["error"] and east["lastError"] == east["error"]
    assert took < PROBE_INTERVAL_S + 3.0


def test_the_console_shows_the_clusters(served: tuple[TestClient, socket.socket]) -> None:
    client, broker = served
    wait_for(client, "west", False, 5.0)
    wait_for(client, "east", True, 5.0)
    page = client.get("/").text
    assert f"127.0.0.1:{broker.getsockname()[1]}" in page and "${KBEAR_T_EAST}" not in page
    assert "PLANTED" not in page
    assert "unreachable" in page and "failed over" in page
    assert "environment variable KBEAR_T_NORTH is not set on the server" in page


def test_the_failover_watch_probes_through_the_board(tmp_path: Path, broker: socket.socket) -> None:
    write_config(tmp_path, broker.getsockname()[1])
    holder = ConfigHolder(tmp_path)
    board = ClusterBoard(lambda: holder.served.config, 60.0, environ={"KBEAR_T_EAST": "127.0.0.1:1"})
    east = holder.served.config.clusters["east"]
    assert board.probe(east, 1.0) is not None  # resolved to 127.0.0.1:1: refused
    state = board.state("east")
    assert state is not None and not state.reachable and "127.0.0.1:1" in state.error


@pytest.mark.parametrize(
    ("written", "shown"),
    [
        ("b1:9092,b2:9092", "b1:9092,b2:9092"),
        ("SASL_SSL://user:pw@b1:9092", "SASL_SSL://***@b1:9092"),
        ("user:pw@b1:9092, b2:9092", "***@b1:9092,b2:9092"),
    ],
)
def test_an_address_never_shows_a_password(written: str, shown: str) -> None:
    assert mask_address(written) == shown
