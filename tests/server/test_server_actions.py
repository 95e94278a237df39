"""``POST /actions/move``, ``/failover``, ``/failback`` and the audit log (``GET /audit``):
an operator token plans and applies a move (the ``kbear move`` command's own text, run
over the served directory on embedded clusters), a read token gets 403, a console
session acts only with its CSRF token, and every action lands in the audit log, refused
ones too, next to the configuration changes the service saw (their diff)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _serve import TestClient

from conftest import rule

pytest.importorskip("uvicorn")

from kbear.server import ConfigHolder, create_app
from kbear.server.audit import AuditLog
from kbear.server.auth import csrf_token
from kbear.testing import EmbeddedCluster

pytestmark = pytest.mark.filterwarnings("ignore:.*httpx2")

READ, OPERATOR = "read-token", "operator-token"
Served = tuple[TestClient, ConfigHolder, Path, str]


@pytest.fixture
def served(
    two_clusters: tuple[EmbeddedCluster, EmbeddedCluster],
    make_config: Callable[..., Path],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> Iterator[Served]:
    a, b = two_clusters
    topic = unique("orders")
    a.create_topic(topic, 2)
    b.create_topic(topic, 2)
    conf = make_config([rule("all", "use cluster A", isGlobal=True)])
    holder = ConfigHolder(conf, watch_interval_s=3600)
    audit = AuditLog(tmp_path / "audit.db")
    app = create_app(holder, watch=False, tokens=(READ,), operator_tokens=(OPERATOR,), audit=audit)
    with TestClient(app) as client:
        yield client, holder, conf, topic


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def audit(client: TestClient, token: str = READ, **params: Any) -> list[dict[str, Any]]:
    answer = client.get("/audit", headers=bearer(token), params=params)
    assert answer.status_code == 200
    entries: list[dict[str, Any]] = answer.json()["entries"]
    return entries


def wait_applied(client: TestClient, entry: int, within_s: float = 90.0) -> dict[str, Any]:
    client.app.state.actions.running.join(within_s)  # type: ignore[attr-defined]
    [found] = [e for e in audit(client) if e["id"] == entry]
    return found


def test_an_operator_plans_and_applies_a_move_and_it_is_in_the_audit(served: Served) -> None:
    client, holder, conf, topic = served
    planned = client.post("/actions/move", json={"topic": topic, "to": "B"}, headers=bearer(OPERATOR))
    assert planned.status_code == 200, planned.text
    plan = planned.json()
    assert plan["ready"] is True and plan["outcome"] == "planned: ready"
    assert f"producers: A/{topic} (rule all) -> B/{topic} (rule move-{topic})" in plan["plan"]
    assert "ready: yes" in plan["plan"]
    assert "move-" not in (conf / "route-rules.yaml").read_text()  # a plan writes nothing
    body = {"topic": topic, "to": "B", "apply": True}
    applying = client.post("/actions/move", json=body, headers=bearer(OPERATOR))
    assert applying.status_code == 202 and applying.json()["outcome"] == "applying"
    entry = wait_applied(client, applying.json()["id"])
    assert entry["outcome"] == "applied", entry["plan"]
    assert entry["who"].startswith("token:") and entry["action"] == "move" and entry["target"] == topic
    assert f"rule 'move-{topic}'" in entry["plan"]
    assert f"move-{topic}" in (conf / "route-rules.yaml").read_text()
    assert [holder.check(), holder.check()] == [False, True]  # the service applies the change
    change = audit(client)[0]
    assert (change["kind"], change["outcome"]) == ("config", "applied")
    assert "use cluster B" in change["plan"] and change["plan"].startswith("--- route-rules.yaml")
    assert change["digest"] == holder.served.config.digest
    # newest first: the change, the apply, the plan
    assert [e["kind"] for e in audit(client)[:3]] == ["config", "action", "action"]


def test_a_read_token_may_look_not_act(served: Served) -> None:
    client, _, conf, topic = served
    refused = client.post(
        "/actions/move", json={"topic": topic, "to": "B", "apply": True}, headers=bearer(READ)
    )
    assert refused.status_code == 403
    assert "operator token" in refused.json()["error"]
    assert client.post("/actions/failover", json={"cluster": "A"}).status_code == 401  # no token at all
    [entry] = audit(client)
    assert entry["outcome"].startswith("refused: a read token may look")
    assert entry["who"].startswith("token:")
    assert "move-" not in (conf / "route-rules.yaml").read_text()


def test_a_console_session_acts_only_with_its_csrf_token(served: Served) -> None:
    client, _, _, _ = served
    signed_in = client.post("/login", data={"token": OPERATOR}, follow_redirects=False)
    assert signed_in.status_code == 303
    session = client.cookies["kbear_session"]
    without = client.post("/actions/failover", data={"cluster": "A"})
    assert without.status_code == 403 and "CSRF" in without.text
    page = client.get("/").text
    assert f'name="csrf" value="{csrf_token(session)}"' in page
    planned = client.post("/actions/failover", data={"cluster": "A", "csrf": csrf_token(session)})
    assert planned.status_code == 200  # a plan: A has no standby, the command says so
    assert "has no standby" in planned.text
    outcomes = [e["outcome"] for e in audit(client)]
    assert outcomes[1].startswith("refused: a console session acts only with its CSRF token")
    assert outcomes[0] == "failed (exit 2)"


def test_a_read_session_gets_403(served: Served) -> None:
    client, _, _, _ = served
    client.post("/login", data={"token": READ}, follow_redirects=False)
    session = client.cookies["kbear_session"]
    refused = client.post("/actions/failback", data={"cluster": "A", "csrf": csrf_token(session)})
    assert refused.status_code == 403 and "read token" in refused.text
    assert "Sign in with an operator token" in client.get("/").text


def test_no_operator_token_no_action(tmp_path: Path, make_config: Callable[..., Path]) -> None:
    holder = ConfigHolder(make_config([rule("all", "use cluster A", isGlobal=True)]))
    with TestClient(create_app(holder, watch=False)) as client:
        refused = client.post("/actions/move", json={"topic": "t", "to": "B"})
        assert refused.status_code == 403 and "no operator token is configured" in refused.json()["error"]


def test_the_audit_is_paged_newest_first(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "a.db")
    for i in range(7):
        log.add("action", "move", target=f"t{i}", at=time.time() + i)
    first = log.page(3)
    assert [e.target for e in first] == ["t6", "t5", "t4"]
    assert [e.target for e in log.page(3, first[-1].id)] == ["t3", "t2", "t1"]
    other = AuditLog(tmp_path / "a.db")  # another worker's process reads the same log
    assert len(other.page(50)) == 7
    assert (
        log.add("config", "change", dedupe="x") is not None
        and other.add("config", "change", dedupe="x") is None
    )
