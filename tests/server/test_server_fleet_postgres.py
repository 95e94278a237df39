"""``kbear serve --fleet-store postgresql://...`` on a real PostgreSQL server (Debian's,
started in a temporary directory by ``_postgres.py``; skipped, saying why, without it):
two replicas over one configuration share one fleet and one move progress; the schema
is created and versioned by kbear; a store that goes down leaves lookups answered (not
recorded), with a metric and one log line, and recording resumes when it is back."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _postgres import postgres_server
from _serve import TestClient

pytest.importorskip("uvicorn")

from kbear.reload import replace_file
from kbear.server import ConfigHolder, create_app
from kbear.server.audit import AuditLog
from kbear.server.fleet import FleetRecorder

pytestmark = pytest.mark.filterwarnings("ignore:.*httpx2")

CLUSTERS = """\
clusters:
  - id: blue
    meta: {bootstrap.servers: "blue:9092"}
  - id: green
    meta: {bootstrap.servers: "green:9092"}
"""
_databases = itertools.count()


def rules(on: str) -> str:
    return f"route-rules:\n  - id: r\n    meta: {{rule.isGlobal: true}}\n    rule: use cluster {on}\n"


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with postgres_server() as running:
        yield running.url


@pytest.fixture
def database(server: str) -> str:
    """A fresh database of the server: its URL."""
    import psycopg

    name = f"fleet_{next(_databases)}"
    with psycopg.connect(server, autocommit=True) as db:
        db.execute(f"CREATE DATABASE {name}")
    return server.rsplit("/", 1)[0] + "/" + name


def replica(conf: Path, url: str) -> tuple[TestClient, ConfigHolder]:
    holder = ConfigHolder(conf, watch_interval_s=3600)
    app = create_app(holder, watch=False, fleet=FleetRecorder(url), audit=AuditLog(url))
    return TestClient(app), holder


@pytest.fixture
def two_replicas(tmp_path: Path, database: str) -> Iterator[list[tuple[TestClient, ConfigHolder]]]:
    (tmp_path / "clusters.yaml").write_text(CLUSTERS)
    (tmp_path / "route-rules.yaml").write_text(rules("blue"))
    replicas = [replica(tmp_path, database), replica(tmp_path, database)]
    for client, _ in replicas:
        client.__enter__()
    yield replicas
    for client, _ in replicas:
        client.__exit__(None, None, None)


def produce(client: TestClient, client_id: str, topic: str = "orders") -> dict[str, Any]:
    body = {"client": {"id": client_id, "meta": {"kbear.client": "python/test"}}, "topicIds": [topic]}
    answer = client.post("/route/producer", json=body)
    assert answer.status_code == 200
    return answer.json()  # type: ignore[no-any-return]


def clients_seen(client: TestClient) -> set[str]:
    return {c["id"] for c in client.get("/fleet").json()["clients"]}


def wait_until(check: Any, within_s: float = 5.0) -> float:
    start = time.monotonic()
    while not check():
        assert time.monotonic() - start < within_s, "not within the bound"
        time.sleep(0.05)
    return time.monotonic() - start


def test_two_replicas_share_the_fleet_and_the_moves(
    two_replicas: list[tuple[TestClient, ConfigHolder]],
) -> None:
    (a, holder_a), (b, holder_b) = two_replicas
    produce(a, "app-1")
    produce(b, "app-2")
    produce(b, "app-3")
    took = wait_until(lambda: clients_seen(a) == clients_seen(b) == {"app-1", "app-2", "app-3"}, 2.0)
    assert took < 2.0
    replace_file(holder_a.directory / "route-rules.yaml", rules("green"))
    for holder in (holder_a, holder_b):
        assert [holder.check(), holder.check()] == [False, True]
    produce(a, "app-1")  # moved, through replica a; app-2 and app-3 not asked since
    wait_until(lambda: b.get("/fleet/moves").json()["moves"][0]["onNewRoute"] == 1)
    [move] = b.get("/fleet/moves").json()["moves"]  # replica b counts the client replica a answered
    assert (move["clients"], move["onNewRoute"], move["notAskedSince"], move["remaining"]) == (3, 1, 2, 2)
    assert {s["id"] for s in move["stragglers"]} == {"app-2", "app-3"}
    produce(b, "app-2")
    produce(a, "app-3")
    wait_until(lambda: a.get("/fleet/moves").json()["moves"][0]["remaining"] == 0)
    # one audit log: the change both replicas applied, written once, read on either
    for client in (a, b):
        [change] = client.get("/audit").json()["entries"]
        assert (change["kind"], change["outcome"]) == ("config", "applied")
        assert "use cluster green" in change["plan"]


def test_the_schema_is_made_and_versioned_by_kbear(database: str, tmp_path: Path) -> None:
    import psycopg

    FleetRecorder(database)
    with psycopg.connect(database, autocommit=True) as db:
        assert db.execute("SELECT version FROM kbear_schema WHERE name = 'fleet'").fetchone() == (3,)
        db.execute("UPDATE kbear_schema SET version = 2")
        db.execute(
            "INSERT INTO fleet (key, client_id, meta, host, kind, topic, grp, address, cluster, "
            "route_topic, digest, first_seen, seen, lookup_hash, client_hash) "
            "VALUES ('k', 'old', '{}', 'h', 'producer', 't', '', 'h:1', 'c', 't', 'd', 1, 1, 1, 1)"
        )
    fleet = FleetRecorder(database)  # an older schema: its entries dropped, the tables made anew
    assert fleet.entries() == []
    with psycopg.connect(database, autocommit=True) as db:
        assert db.execute("SELECT version FROM kbear_schema WHERE name = 'fleet'").fetchone() == (3,)


def test_a_store_that_goes_down_degrades_to_answering(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "clusters.yaml").write_text(CLUSTERS)
    (tmp_path / "route-rules.yaml").write_text(rules("blue"))
    caplog.set_level(logging.WARNING, logger="kbear.server")
    with postgres_server() as running:
        client, _ = replica(tmp_path, running.url)
        with client:
            produce(client, "before")
            wait_until(lambda: clients_seen(client) == {"before"})
            running.stop()
            for i in range(20):  # every lookup answered while the store is down
                assert produce(client, f"during-{i}")["topicIdRoutes"]["orders"]["clusterId"] == "blue"
            wait_until(lambda: "kbear_serve_fleet_store_up 0.0" in client.get("/metrics").text, 15.0)
            down = [r.getMessage() for r in caplog.records if "unusable" in r.getMessage()]
            assert len(down) == 1  # one line per outage
            assert "routes are answered without being recorded" in down[0]
            answers = {page: client.get(page) for page in ("/fleet", "/audit")}
            running.start()
            wait_until(lambda: "kbear_serve_fleet_store_up 1.0" in client.get("/metrics").text, 15.0)
            wait_until(lambda: "during-19" in clients_seen(client), 5.0)  # the waiting notes written
    for page, answer in answers.items():  # while down: unavailable and said so (503), not a crash (500)
        assert answer.status_code == 503, (page, answer.status_code, answer.text)
        assert answer.json()["status"]["error"]["code"] == "service_exception"
        assert "the fleet store cannot be read" in answer.json()["status"]["error"]["message"]
