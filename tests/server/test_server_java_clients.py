"""``kbear serve`` and clients that are not kbear's (KBear's Java client, ``curl``): they
send no ``Client.meta`` ``kbear.client``, cannot resolve ``${NAME}`` nor apply a remap.
They get placeholders resolved from the server's environment (an unset one: the item
refused naming the variable, never a partial address) and no remap (the item refused
naming the rule); kbear's clients keep getting the meta as written and the remap."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _serve import TestClient

pytest.importorskip("uvicorn")

from kbear.server import ConfigHolder, create_app

pytestmark = pytest.mark.filterwarnings("ignore:.*httpx2")

CLUSTERS = """\
clusters:
  - id: east
    meta:
      bootstrap.servers: ${KBEAR_T_EAST}
      sasl.password: ${KBEAR_T_EAST_PW}
      kbear.failover.to: west
  - id: west
    meta:
      bootstrap.servers: ${KBEAR_T_WEST}
  - id: north
    meta:
      bootstrap.servers: ${KBEAR_T_NORTH}:9092,n2:9092
"""
RULES = """\
route-rules:
  - id: r-orders
    meta: {topic.id: orders}
    rule: use cluster west, topic orders.v2
  - id: r-north
    meta: {topic.id: payments}
    rule: use cluster north
  - id: r-all
    meta: {rule.isGlobal: true}
    rule: use cluster east
"""
JAVA = {"id": "", "meta": {"appId": "100023", "env": "PRO"}}
KBEAR = {"id": "", "meta": {"appId": "100023", "env": "PRO", "kbear.client": "python/0.1.0"}}


@pytest.fixture
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.setenv("KBEAR_T_EAST", "east-1:9092,east-2:9092")
    monkeypatch.setenv("KBEAR_T_EAST_PW", "s3cret")
    monkeypatch.setenv("KBEAR_T_WEST", "west-1:9092")
    monkeypatch.delenv("KBEAR_T_NORTH", raising=False)
    (tmp_path / "clusters.yaml").write_text(CLUSTERS)
    (tmp_path / "route-rules.yaml").write_text(RULES)
    with TestClient(create_app(ConfigHolder(tmp_path), watch=False)) as test_client:
        yield test_client


def post(client: TestClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post(path, json=body)
    assert response.status_code == 200
    answer: dict[str, Any] = response.json()
    return answer


def test_a_java_client_gets_the_placeholders_resolved(client: TestClient) -> None:
    answer = post(client, "/route/producer", {"client": JAVA, "topicIds": ["audit"]})
    assert answer["status"] == {"ack": "success"}
    assert answer["topicIdRoutes"] == {"audit": {"clusterId": "east", "topicId": "audit", "ruleId": "r-all"}}
    # only the route's cluster: failing over to a standby is kbear's, the Java client ignores it
    assert answer["clusters"] == {
        "east": {
            "id": "east",
            "meta": {
                "bootstrap.servers": "east-1:9092,east-2:9092",
                "sasl.password": "s3cret",
                "kbear.failover.to": "west",
            },
        }
    }


def test_a_kbear_client_gets_the_meta_as_written_and_the_standby(client: TestClient) -> None:
    answer = post(client, "/route/producer", {"client": KBEAR, "topicIds": ["audit"]})
    assert answer["status"] == {"ack": "success"}
    assert answer["clusters"]["east"]["meta"]["bootstrap.servers"] == "${KBEAR_T_EAST}"
    assert answer["clusters"]["east"]["meta"]["sasl.password"] == "${KBEAR_T_EAST_PW}"
    assert answer["clusters"]["west"]["meta"] == {"bootstrap.servers": "${KBEAR_T_WEST}"}


def test_an_unset_variable_refuses_the_item_naming_it_never_a_partial_address(client: TestClient) -> None:
    answer = post(client, "/route/producer", {"client": JAVA, "topicIds": ["payments", "audit"]})
    assert answer["status"]["ack"] == "partial_fail"
    error = answer["status"]["error"]
    assert error["code"] == "unresolved_placeholder"
    assert "topic 'payments'" in error["message"] and "cluster 'north'" in error["message"]
    assert "environment variable KBEAR_T_NORTH is not set on the server" in error["message"]
    assert list(answer["topicIdRoutes"]) == ["audit"]
    assert "north" not in answer["clusters"] and ":9092,n2" not in str(answer)


def test_a_remap_is_not_answered_to_a_java_client(client: TestClient) -> None:
    answer = post(client, "/route/producer", {"client": JAVA, "topicIds": ["orders", "audit"]})
    assert answer["status"]["ack"] == "partial_fail"
    error = answer["status"]["error"]
    assert error["code"] == "remap_not_applicable"
    assert "rule 'r-orders'" in error["message"] and "'orders.v2'" in error["message"]
    # the Java client finds no route for orders and fails loudly, instead of writing west/orders
    assert list(answer["topicIdRoutes"]) == ["audit"]
    assert "west" not in answer["clusters"] and "orders.v2" not in answer["topics"]


def test_a_consumer_remap_is_not_answered_to_a_java_client(client: TestClient) -> None:
    groups = [{"groupName": "g", "topicId": "orders"}, {"groupName": "g", "topicId": "audit"}]
    answer = post(client, "/route/consumer", {"client": JAVA, "consumerGroupIds": groups})
    assert answer["status"]["ack"] == "partial_fail"
    assert answer["status"]["error"]["code"] == "remap_not_applicable"
    assert [r["consumerGroupId"]["topicId"] for r in answer["consumerGroupIdRoutes"]] == ["audit"]
    assert [g["id"]["topicId"] for g in answer["consumerGroups"]] == ["audit"]


def test_a_kbear_client_gets_the_remap_keyed_by_the_requested_topic(client: TestClient) -> None:
    answer = post(client, "/route/producer", {"client": KBEAR, "topicIds": ["orders"]})
    assert answer["status"] == {"ack": "success"}
    assert answer["topicIdRoutes"] == {
        "orders": {"clusterId": "west", "topicId": "orders.v2", "ruleId": "r-orders"}
    }


def test_refusals_and_missing_routes_are_named_together(tmp_path: Path, client: TestClient) -> None:
    body = {"client": JAVA, "topicIds": ["orders", ""]}
    answer = post(client, "/route/producer", body)
    message = answer["status"]["error"]["message"]
    assert answer["status"]["error"]["code"] == "remap_not_applicable"
    assert "r-orders" in message and "without a route" in message
