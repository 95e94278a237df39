"""A move waits for live clients only: a client's refresh interval is learned from its
own lookups (the fleet keeps its previous request's time); one that asked once more
than 75 s ago, or is silent for over twice its interval + 5 s, is "not seen since":
listed apart, not counted in ``remaining``, not waited for by ``kbear move --apply
--meta-service`` (its fleet watch reads ``/fleet/moves`` as here)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _serve import TestClient

pytest.importorskip("uvicorn")

from kbear.admin._move_fleet import read_fleet
from kbear.reload import replace_file
from kbear.server import ConfigHolder, create_app
from kbear.server._move_counts import GRACE_S, MISSED_REFRESHES, ONE_OFF_S
from kbear.server.fleet import FleetRecorder

pytestmark = pytest.mark.filterwarnings("ignore:.*httpx2")

CLUSTERS = """\
clusters:
  - id: blue
    meta: {bootstrap.servers: "blue:9092"}
  - id: green
    meta: {bootstrap.servers: "green:9092"}
"""


def rules(on: str) -> str:
    return f"route-rules:\n  - id: r\n    meta: {{topic.id: orders}}\n    rule: use cluster {on}\n"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[TestClient, FleetRecorder, ConfigHolder]]:
    (tmp_path / "clusters.yaml").write_text(CLUSTERS)
    (tmp_path / "route-rules.yaml").write_text(rules("blue"))
    holder = ConfigHolder(tmp_path, watch_interval_s=3600)
    fleet = FleetRecorder(tmp_path / "fleet.db", flush_interval_s=3600, seen_resolution_s=0)
    with TestClient(create_app(holder, watch=False, fleet=fleet)) as client:
        yield client, fleet, holder


def ask(fleet: FleetRecorder, client_id: str, digest: str, cluster: str, at: float) -> None:
    """One request of ``client_id`` at ``at``, written (as the writer does every 0.1 s)."""
    fleet.record(
        client_id,
        {},
        f"10.0.0.1:{len(client_id)}",
        "producer",
        digest,
        [("orders", "", cluster, "orders")],
        at=at,
    )
    fleet.flush()


def change(holder: ConfigHolder, on: str) -> None:
    replace_file(holder.directory / "route-rules.yaml", rules(on))
    assert [holder.check(), holder.check()] == [False, True]


def the_move(client: TestClient) -> dict[str, Any]:
    [move] = client.get("/fleet/moves").json()["moves"]
    return move  # type: ignore[no-any-return]


def test_the_bounds_are_the_documented_ones() -> None:
    assert (ONE_OFF_S, MISSED_REFRESHES, GRACE_S) == (75.0, 2.0, 5.0)


def test_a_one_off_lookup_does_not_hold_the_move(
    served: tuple[TestClient, FleetRecorder, ConfigHolder],
) -> None:
    client, fleet, holder = served
    old, now = holder.served.config.digest, time.time()
    ask(fleet, "curl", old, "blue", now - ONE_OFF_S - 10)  # asked once, 85 s ago
    ask(fleet, "recent-once", old, "blue", now - 20)  # asked once, 20 s ago: may still refresh
    for at in (now - 30, now - 20, now - 10):  # a client refreshing every 10 s
        ask(fleet, "live", old, "blue", at)
    fleet.flush()
    change(holder, "green")
    move = the_move(client)
    assert (move["clients"], move["notAskedSince"], move["notSeenSince"], move["remaining"]) == (3, 2, 1, 2)
    states = {s["id"]: s["state"] for s in move["stragglers"]}
    assert states == {"curl": "notSeenSince", "recent-once": "notAskedSince", "live": "notAskedSince"}
    new = holder.served.config.digest
    ask(fleet, "live", new, "green", time.time())
    ask(fleet, "recent-once", new, "green", time.time())
    fleet.flush()
    move = the_move(client)
    assert (move["onNewRoute"], move["remaining"], move["notSeenSince"], move["progress"]) == (2, 0, 1, 1.0)
    # what kbear move --apply --meta-service reads: done, the one-off listed apart
    state = read_fleet([client], "orders", new)
    assert state.done and state.not_seen == 1
    assert [cid for cid, _, _ in state.not_seen_listed] == ["curl"]
    assert "1 not seen since (not waited for)" in state.line()


def test_a_client_overdue_for_its_learned_interval_is_not_waited_for(
    served: tuple[TestClient, FleetRecorder, ConfigHolder],
) -> None:
    client, fleet, holder = served
    old, now = holder.served.config.digest, time.time()
    ask(fleet, "stopped", old, "blue", now - 50)  # refreshed every 10 s, silent for 40 s > 2 x 10 + 5
    ask(fleet, "stopped", old, "blue", now - 40)
    ask(fleet, "java", old, "blue", now - 110)  # KBear's Java client: every 60 s, last 50 s ago
    ask(fleet, "java", old, "blue", now - 50)
    fleet.flush()
    change(holder, "green")
    move = the_move(client)
    assert {s["id"]: s["state"] for s in move["stragglers"]} == {
        "stopped": "notSeenSince",
        "java": "notAskedSince",  # waited for: due within its interval
    }
    assert not read_fleet([client], "orders", holder.served.config.digest).done
    ask(fleet, "java", holder.served.config.digest, "green", time.time())
    fleet.flush()
    assert read_fleet([client], "orders", holder.served.config.digest).done


def test_the_interval_is_learned_from_the_writes(
    served: tuple[TestClient, FleetRecorder, ConfigHolder],
) -> None:
    client, fleet, holder = served
    old = holder.served.config.digest
    now = time.time()
    ask(fleet, "app", old, "blue", now - 100)
    fleet.flush()
    ask(fleet, "app", old, "blue", now - 90)  # a refresh: the previous request's time kept
    fleet.flush()
    change(holder, "green")
    # silent 90 s: over 2 x 10 + 5 after its learned 10 s interval, though under the TTL
    assert {s["id"]: s["state"] for s in the_move(client)["stragglers"]} == {"app": "notSeenSince"}
