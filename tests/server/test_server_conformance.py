"""``kbear serve`` against the meta-service protocol (docs/reference/meta-service-protocol.md):
the spec's example request, every endpoint field by field, the remap keyed by the
requested topic, partial_fail / fail, the GET .../all paths, auth, reload, and one
run of the real command on a local port."""

from __future__ import annotations

import os
import shutil
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _serve import REPOSITORY, TestClient, free_port, kbear_serve

pytest.importorskip("uvicorn")

import httpx

from kbear.reload import replace_file
from kbear.server import ConfigHolder, create_app

pytestmark = pytest.mark.filterwarnings("ignore:.*httpx2")

CLUSTERS = """\
clusters:
  - id: uat
    meta:
      bootstrap.servers: 10.2.27.123:9092
  - id: fws
    meta:
      bootstrap.servers: 10.2.7.1:9092,10.2.7.2:9092
      zookeeper.connect: 10.2.7.1:2181
  - id: prod
    meta:
      bootstrap.servers: 10.3.0.1:9092
"""
TOPICS = """\
topics:
  - id: fx.kafka.demo.hello.run
    meta:
      bu: framework
  - id: orders.v2
    meta:
      bu: hotel
"""
GROUPS = """\
consumer-groups:
  - id: {groupName: fx.hellobom.string.consumer, topicId: fx.kafka.demo.hello.run}
    meta:
      bu: basebiz
"""
RULES = """\
route-rules:
  - id: r100001
    meta: {rule.isGlobal: true}
    rule: use cluster fws when client.env=FWS
  - id: r100005
    priority: 0
    meta:
      consumerGroup.groupName: fx.hellobom.string.consumer
      consumerGroup.topicId: fx.kafka.demo.hello.run
    rule: use cluster fws
  - id: r100006
    priority: 1
    meta: {rule.isGlobal: true}
    rule: use cluster uat when client.env=UAT
  - id: r-orders
    priority: 2
    meta: {topic.id: orders}
    rule: use cluster prod, topic orders.v2
"""

UAT = {"id": "100000001", "meta": {"env": "UAT", "idc": "sha"}}
# a kbear client: it says so (Client.meta kbear.client), and is answered remaps (orders)
PROD = {"id": "100000002", "meta": {"env": "PROD", "kbear.client": "python/test"}}
KBEAR_UAT = {"id": "100000001", "meta": {"env": "UAT", "idc": "sha", "kbear.client": "python/test"}}
EXAMPLE_GROUP = {"groupName": "fx.hellobom.string.consumer", "topicId": "fx.kafka.demo.hello.run"}
CLUSTER_UAT = {"id": "uat", "meta": {"bootstrap.servers": "10.2.27.123:9092"}}
CLUSTER_FWS = {
    "id": "fws",
    "meta": {"bootstrap.servers": "10.2.7.1:9092,10.2.7.2:9092", "zookeeper.connect": "10.2.7.1:2181"},
}
CLUSTER_PROD = {"id": "prod", "meta": {"bootstrap.servers": "10.3.0.1:9092"}}
SUCCESS = {"ack": "success"}


@pytest.fixture
def conf(tmp_path: Path) -> Path:
    for name, text in (
        ("clusters.yaml", CLUSTERS),
        ("topics.yaml", TOPICS),
        ("consumer-groups.yaml", GROUPS),
        ("route-rules.yaml", RULES),
    ):
        (tmp_path / name).write_text(text)
    return tmp_path


@pytest.fixture
def holder(conf: Path) -> ConfigHolder:
    return ConfigHolder(conf, watch_interval_s=3600)


@pytest.fixture
def client(holder: ConfigHolder) -> Iterator[TestClient]:
    with TestClient(create_app(holder, watch=False)) as test_client:
        yield test_client


def post(client: TestClient, path: str, body: Any) -> dict[str, Any]:
    response = client.post(path, json=body)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    answer: dict[str, Any] = response.json()
    return answer


# --------------------------------------------------------------------------- the spec's example


def test_the_spec_example_request_gets_the_spec_example_response(client: TestClient) -> None:
    answer = post(client, "/route/consumer", {"client": UAT, "consumerGroupIds": [EXAMPLE_GROUP]})
    assert answer == {
        "status": SUCCESS,
        "consumerGroupIdRoutes": [
            {
                "consumerGroupId": EXAMPLE_GROUP,
                # ruleId: kbear's field (the rule that won); the reference's answer has none
                "route": {"clusterId": "uat", "topicId": "fx.kafka.demo.hello.run", "ruleId": "r100006"},
            }
        ],
        "clusters": {"uat": CLUSTER_UAT},
        "topics": {"fx.kafka.demo.hello.run": {"id": "fx.kafka.demo.hello.run", "meta": {"bu": "framework"}}},
        "consumerGroups": [{"id": EXAMPLE_GROUP, "meta": {"bu": "basebiz"}}],
    }


def test_consumer_chain_follows_priority_and_kind(client: TestClient) -> None:
    # r100006 (priority 1) is before r100005 (consumer group, priority 0): a UAT
    # client goes to uat (above), every other client consuming the group to fws.
    answer = post(client, "/route/consumer", {"client": PROD, "consumerGroupIds": [EXAMPLE_GROUP]})
    assert answer["status"] == SUCCESS
    assert answer["consumerGroupIdRoutes"][0]["route"] == {
        "clusterId": "fws",
        "topicId": "fx.kafka.demo.hello.run",
        "ruleId": "r100005",
    }
    assert answer["clusters"] == {"fws": CLUSTER_FWS}  # zookeeper.connect kept as meta


# --------------------------------------------------------------------------- /route/producer


def test_producer_remap_is_keyed_by_the_requested_topic(client: TestClient) -> None:
    answer = post(client, "/route/producer", {"client": PROD, "topicIds": ["orders"]})
    assert answer == {
        "status": SUCCESS,
        "topicIdRoutes": {"orders": {"clusterId": "prod", "topicId": "orders.v2", "ruleId": "r-orders"}},
        "clusters": {"prod": CLUSTER_PROD},
        "topics": {"orders.v2": {"id": "orders.v2", "meta": {"bu": "hotel"}}},
    }


def test_producer_batch_of_several_topics(client: TestClient) -> None:
    body = {"client": KBEAR_UAT, "topicIds": ["orders", "fx.kafka.demo.hello.run", "unknown.topic", "orders"]}
    answer = post(client, "/route/producer", body)
    assert answer["status"] == SUCCESS
    assert answer["topicIdRoutes"] == {
        "orders": {"clusterId": "prod", "topicId": "orders.v2", "ruleId": "r-orders"},
        "fx.kafka.demo.hello.run": {
            "clusterId": "uat",
            "topicId": "fx.kafka.demo.hello.run",
            "ruleId": "r100006",
        },
        "unknown.topic": {"clusterId": "uat", "topicId": "unknown.topic", "ruleId": "r100006"},
    }
    assert answer["clusters"] == {"prod": CLUSTER_PROD, "uat": CLUSTER_UAT}
    assert answer["topics"] == {
        "orders.v2": {"id": "orders.v2", "meta": {"bu": "hotel"}},
        "fx.kafka.demo.hello.run": {"id": "fx.kafka.demo.hello.run", "meta": {"bu": "framework"}},
        "unknown.topic": {"id": "unknown.topic", "meta": {}},
    }


def test_producer_partial_fail_leaves_out_the_topics_without_a_route(client: TestClient) -> None:
    body = {"client": PROD, "topicIds": ["orders", "fx.kafka.demo.hello.run", "x"]}
    answer = post(client, "/route/producer", body)
    assert answer["status"]["ack"] == "partial_fail"
    assert answer["status"]["error"]["code"] == "no_route"
    assert "fx.kafka.demo.hello.run" in answer["status"]["error"]["message"]
    assert answer["topicIdRoutes"] == {
        "orders": {"clusterId": "prod", "topicId": "orders.v2", "ruleId": "r-orders"}
    }
    assert answer["clusters"] == {"prod": CLUSTER_PROD}
    assert list(answer["topics"]) == ["orders.v2"]


def test_no_route_at_all_is_partial_fail_with_nothing_answered(client: TestClient) -> None:
    answer = post(client, "/route/producer", {"client": PROD, "topicIds": ["a", "b"]})
    assert answer["status"]["ack"] == "partial_fail"
    assert answer["topicIdRoutes"] == {} and answer["clusters"] == {} and answer["topics"] == {}


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/route/producer", {"client": UAT, "topicIds": []}),
        ("/route/producer", {"client": UAT}),
        ("/route/producer", {"client": UAT, "topicIds": None}),
        ("/route/producer", {}),
        ("/route/consumer", {"client": UAT, "consumerGroupIds": []}),
        ("/route/consumer", {"client": UAT}),
    ],
)
def test_an_empty_route_request_is_fail(client: TestClient, path: str, body: Any) -> None:
    answer = post(client, path, body)
    assert answer["status"]["ack"] == "fail"
    assert answer["status"]["error"]["code"] == "bad_request"
    for key in ("topicIdRoutes", "consumerGroupIdRoutes", "clusters", "topics", "consumerGroups"):
        assert not answer.get(key)


def test_client_id_and_meta_are_route_factors(conf: Path) -> None:
    replace_file(
        conf / "route-rules.yaml",
        RULES + "  - id: r-app\n    priority: 9\n    meta: {topic.id: t}\n"
        "    rule: use cluster prod when client.id=app7\n",
    )
    with TestClient(create_app(ConfigHolder(conf), watch=False)) as client:
        by_id = post(client, "/route/producer", {"client": {"id": "app7"}, "topicIds": ["t"]})
        assert by_id["topicIdRoutes"]["t"]["clusterId"] == "prod"
        # a blank id is no client.id, and a meta key 'id' does not stand in for it
        blank = post(
            client, "/route/producer", {"client": {"id": "", "meta": {"id": "app7"}}, "topicIds": ["t"]}
        )
        assert blank["status"]["ack"] == "partial_fail"
        anonymous = post(client, "/route/producer", {"topicIds": ["t"]})
        assert anonymous["status"]["ack"] == "partial_fail"


# --------------------------------------------------------------------------- /route/consumer


def test_consumer_partial_fail_and_unknown_group(client: TestClient) -> None:
    unknown = {"groupName": "other.group", "topicId": "orders"}
    no_route = {"groupName": "other.group", "topicId": "nowhere"}
    blank = {"groupName": "", "topicId": "orders"}
    body = {"client": PROD, "consumerGroupIds": [unknown, no_route, blank]}
    answer = post(client, "/route/consumer", body)
    assert answer["status"]["ack"] == "partial_fail"
    assert answer["status"]["error"]["code"] == "no_route"
    assert answer["consumerGroupIdRoutes"] == [
        {
            "consumerGroupId": unknown,
            "route": {"clusterId": "prod", "topicId": "orders.v2", "ruleId": "r-orders"},
        }
    ]
    assert answer["consumerGroups"] == [{"id": unknown, "meta": {}}]
    assert answer["clusters"] == {"prod": CLUSTER_PROD}
    assert answer["topics"] == {"orders.v2": {"id": "orders.v2", "meta": {"bu": "hotel"}}}


# --------------------------------------------------------------------------- rules and meta


ALL_RULES = [
    {
        "id": "r100001",
        "priority": 0,
        "meta": {"rule.isGlobal": "true", "rule": "use cluster fws when client.env=FWS"},
    },
    {
        "id": "r100005",
        "priority": 0,
        "meta": {
            "consumerGroup.groupName": "fx.hellobom.string.consumer",
            "consumerGroup.topicId": "fx.kafka.demo.hello.run",
            "rule": "use cluster fws",
        },
    },
    {
        "id": "r100006",
        "priority": 1,
        "meta": {"rule.isGlobal": "true", "rule": "use cluster uat when client.env=UAT"},
    },
    {
        "id": "r-orders",
        "priority": 2,
        "meta": {"topic.id": "orders", "rule": "use cluster prod, topic orders.v2"},
    },
]
ALL = {
    "/route/rules": ("routeRuleIds", "routeRules", ALL_RULES),
    "/meta/clusters": ("clusterIds", "clusters", [CLUSTER_UAT, CLUSTER_FWS, CLUSTER_PROD]),
    "/meta/topics": (
        "topicIds",
        "topics",
        [
            {"id": "fx.kafka.demo.hello.run", "meta": {"bu": "framework"}},
            {"id": "orders.v2", "meta": {"bu": "hotel"}},
        ],
    ),
    "/meta/consumer-groups": (
        "consumerGroupIds",
        "consumerGroups",
        [{"id": EXAMPLE_GROUP, "meta": {"bu": "basebiz"}}],
    ),
}


@pytest.mark.parametrize("path", list(ALL))
def test_get_all_and_an_empty_post_answer_everything(client: TestClient, path: str) -> None:
    ids_key, key, everything = ALL[path]
    response = client.get(f"{path}/all")
    assert response.status_code == 200
    assert response.json() == {"status": SUCCESS, key: everything}
    assert post(client, path, {ids_key: []}) == {"status": SUCCESS, key: everything}
    assert post(client, path, {}) == {"status": SUCCESS, key: everything}


@pytest.mark.parametrize(
    ("path", "ids", "found", "missing"),
    [
        ("/route/rules", ["r-orders", "nope", "r100001"], [ALL_RULES[3], ALL_RULES[0]], "nope"),
        ("/meta/clusters", ["prod", "nope"], [CLUSTER_PROD], "nope"),
        ("/meta/topics", ["orders.v2", "orders"], [{"id": "orders.v2", "meta": {"bu": "hotel"}}], "orders"),
        (
            "/meta/consumer-groups",
            [EXAMPLE_GROUP, {"groupName": "g", "topicId": "t"}],
            [{"id": EXAMPLE_GROUP, "meta": {"bu": "basebiz"}}],
            "g@t",
        ),
    ],
)
def test_by_ids_in_request_order_partial_fail_when_some_are_unknown(
    client: TestClient, path: str, ids: list[Any], found: list[Any], missing: str
) -> None:
    ids_key, key, _ = ALL[path]
    answer = post(client, path, {ids_key: ids})
    assert answer[key] == found
    assert answer["status"]["ack"] == "partial_fail"
    assert answer["status"]["error"]["code"] == "not_found"
    assert missing in answer["status"]["error"]["message"]
    exact = post(client, path, {ids_key: ids[:1]})
    assert exact == {"status": SUCCESS, key: found[:1]}


# --------------------------------------------------------------------------- transport


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"{not json", "Invalid JSON"),
        (b'{"topicIds": "orders"}', "topicIds"),
        (b'{"topicIds": [1]}', "topicIds.0"),
        (b'{"client": {"meta": {"env": 1}}, "topicIds": ["t"]}', "client.meta.env"),
        (b"[]", "body"),
    ],
)
def test_a_malformed_body_is_400_fail_bad_request(client: TestClient, content: bytes, reason: str) -> None:
    response = client.post("/route/producer", content=content, headers={"content-type": "application/json"})
    assert response.status_code == 400
    status = response.json()["status"]
    assert status["ack"] == "fail" and status["error"]["code"] == "bad_request"
    assert reason in status["error"]["message"]


def test_unknown_fields_are_ignored_as_the_reference_parser_does(client: TestClient) -> None:
    answer = post(client, "/route/producer", {"client": PROD, "topicIds": ["orders"], "extra": {"x": 1}})
    assert answer["status"] == SUCCESS


def test_protobuf_is_415_and_an_oversized_body_413(holder: ConfigHolder) -> None:
    with TestClient(create_app(holder, watch=False, max_body_bytes=1000)) as client:
        protobuf = client.post(
            "/route/producer", content=b"\x0a\x00", headers={"content-type": "application/protobuf"}
        )
        assert protobuf.status_code == 415
        assert protobuf.json()["status"]["ack"] == "fail"
        big = client.post("/route/producer", json={"topicIds": ["t" * 2000]})
        assert big.status_code == 413
        assert big.json()["status"]["error"]["code"] == "bad_request"


def test_wrong_method_and_unknown_path(client: TestClient) -> None:
    assert client.get("/route/producer").status_code == 405
    assert client.post("/nope", json={}).status_code == 404


# --------------------------------------------------------------------------- auth


def test_without_the_token_401_and_no_data(holder: ConfigHolder) -> None:
    with TestClient(create_app(holder, watch=False, tokens=["t0k-1", "t0k-2"])) as client:
        body = {"client": UAT, "consumerGroupIds": [EXAMPLE_GROUP]}
        for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": "Basic t0k-1"}):
            for method, path in [
                ("POST", "/route/consumer"),
                ("GET", "/meta/clusters/all"),
                ("GET", "/health"),
                ("GET", "/metrics"),
            ]:
                response = client.request(
                    method, path, json=body if method == "POST" else None, headers=headers
                )
                assert response.status_code == 401
                assert response.headers["www-authenticate"].startswith("Bearer")
                assert response.json() == {
                    "status": {
                        "ack": "fail",
                        "error": {
                            "code": "unauthorized",
                            "message": "missing or wrong bearer token (Authorization: Bearer ...)",
                        },
                    }
                }
        for token in ("t0k-1", "t0k-2"):
            ok = client.post("/route/consumer", json=body, headers={"authorization": f"Bearer {token}"})
            assert ok.status_code == 200 and ok.json()["clusters"] == {"uat": CLUSTER_UAT}
        assert client.get("/healthz").status_code == 200  # probes need no token
        assert client.get("/readyz").json() == {"ready": False}  # watch=False: not watching


# --------------------------------------------------------------------------- health, readiness, metrics


def test_health_readiness_and_metrics(conf: Path) -> None:
    holder = ConfigHolder(conf, watch_interval_s=3600)
    with TestClient(create_app(holder)) as client:
        assert client.get("/readyz").json() == {"ready": True}
        health = client.get("/health").json()
        assert health["status"] == "ok"
        assert health["refusedChange"] is None
        assert health["config"]["digest"] == holder.served.config.digest
        assert health["config"]["clusters"] == 3 and health["config"]["routeRules"] == 4
        client.post("/route/producer", json={"topicIds": []})
        client.post("/route/producer", json={"client": PROD, "topicIds": ["orders"]})
        client.post("/route/producer", content=b"{", headers={"content-type": "application/json"})
        client.get("/no/such/path")
        metrics = client.get("/metrics").text
    assert 'kbear_serve_requests_total{method="POST",path="/route/producer",status="200"} 2.0' in metrics
    assert 'kbear_serve_requests_total{method="POST",path="/route/producer",status="400"} 1.0' in metrics
    assert 'kbear_serve_requests_total{method="GET",path="other",status="404"} 1.0' in metrics
    assert 'kbear_serve_answers_total{ack="fail",path="/route/producer"} 2.0' in metrics
    assert 'kbear_serve_answers_total{ack="success",path="/route/producer"} 1.0' in metrics
    assert 'kbear_serve_request_duration_seconds_count{path="/route/producer"} 3.0' in metrics
    assert "kbear_serve_config_refused 0.0" in metrics
    assert not holder.watching  # the lifespan stopped the watcher


# --------------------------------------------------------------------------- reload


def test_a_good_edit_is_served_a_bad_one_refused_and_shown_on_health(
    conf: Path, holder: ConfigHolder, client: TestClient
) -> None:
    ask = {"client": PROD, "topicIds": ["orders"]}
    first = client.post("/route/producer", json=ask)
    assert first.json()["topicIdRoutes"]["orders"]["clusterId"] == "prod"
    # good edit: orders moves to fws
    replace_file(
        conf / "route-rules.yaml", RULES.replace("use cluster prod, topic orders.v2", "use cluster fws")
    )
    assert [holder.check(), holder.check()] == [False, True]  # seen, then applied once it held still
    moved = client.post("/route/producer", json=ask)
    assert moved.json()["topicIdRoutes"]["orders"] == {
        "clusterId": "fws",
        "topicId": "orders",
        "ruleId": "r-orders",
    }
    assert moved.headers["x-kbear-config-digest"] != first.headers["x-kbear-config-digest"]
    served_digest = moved.headers["x-kbear-config-digest"]
    # bad edit: a rule naming an unknown cluster
    replace_file(
        conf / "route-rules.yaml", RULES.replace("use cluster prod, topic orders.v2", "use cluster nowhere")
    )
    assert [holder.check(), holder.check()] == [False, False]
    still = client.post("/route/producer", json=ask)
    assert still.json()["topicIdRoutes"]["orders"] == {
        "clusterId": "fws",
        "topicId": "orders",
        "ruleId": "r-orders",
    }
    assert still.headers["x-kbear-config-digest"] == served_digest
    health = client.get("/health").json()
    assert health["status"] == "refused_change"
    assert health["config"]["digest"] == served_digest
    [problem] = health["refusedChange"]["problems"]
    assert problem.startswith("route-rules.yaml: rule 'r-orders': uses cluster 'nowhere'")
    assert "kbear_serve_config_refused 1.0" in client.get("/metrics").text
    # fixed: served, and health is ok again
    replace_file(conf / "route-rules.yaml", RULES)
    assert [holder.check(), holder.check()] == [False, True]
    assert client.get("/health").json()["status"] == "ok"
    assert client.post("/route/producer", json=ask).json()["topicIdRoutes"]["orders"]["clusterId"] == "prod"


def test_the_watcher_serves_an_edit_by_itself(conf: Path) -> None:
    holder = ConfigHolder(conf, watch_interval_s=0.05)
    with TestClient(create_app(holder)) as client:
        replace_file(
            conf / "route-rules.yaml", RULES.replace("use cluster prod, topic orders.v2", "use cluster uat")
        )
        deadline = time.monotonic() + 10
        route = None
        while time.monotonic() < deadline:
            route = post(client, "/route/producer", {"client": PROD, "topicIds": ["orders"]})["topicIdRoutes"]
            if route["orders"]["clusterId"] == "uat":
                break
            time.sleep(0.05)
        assert route == {"orders": {"clusterId": "uat", "topicId": "orders", "ruleId": "r-orders"}}


def test_replicas_over_the_same_directory_answer_alike(conf: Path) -> None:
    requests = [
        ("/route/producer", {"client": UAT, "topicIds": ["orders", "a", "fx.kafka.demo.hello.run"]}),
        (
            "/route/consumer",
            {"client": PROD, "consumerGroupIds": [EXAMPLE_GROUP, {"groupName": "g", "topicId": "orders"}]},
        ),
        ("/meta/clusters", {}),
        ("/route/rules", {"routeRuleIds": ["r100006", "r100001"]}),
    ]
    answers = []
    for _ in range(2):
        with TestClient(create_app(ConfigHolder(conf), watch=False)) as client:
            responses = [client.post(path, json=body) for path, body in requests]
            answers.append([(r.content, r.headers["x-kbear-config-digest"]) for r in responses])
    assert answers[0] == answers[1]


# --------------------------------------------------------------------------- the command


def test_kbear_serve_runs_on_a_local_port_with_two_workers(conf: Path, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("# rotate by adding a line\ns3rve-t0ken\n")
    # each worker reads the token
    with kbear_serve(conf, "--token-file", str(token_file), "--workers", "2") as served:
        base = served.base
        body = {"client": UAT, "consumerGroupIds": [EXAMPLE_GROUP]}
        assert httpx.post(f"{base}/route/consumer", json=body, timeout=5).status_code == 401
        answer = httpx.post(
            f"{base}/route/consumer", json=body, headers={"Authorization": "Bearer s3rve-t0ken"}, timeout=5
        ).json()
        assert answer["consumerGroupIdRoutes"][0]["route"] == {
            "clusterId": "uat",
            "topicId": "fx.kafka.demo.hello.run",
            "ruleId": "r100006",
        }
    out, err = served.out, served.err
    # uvicorn stops gracefully, then ends by the signal it received, as the default handler would.
    assert served.proc.returncode in (0, -signal.SIGTERM), err
    assert "Application shutdown complete" in err  # (on a loaded machine, maybe one worker only yet)
    assert "kbear serve:" in err and "2 worker process(es), bearer token required" in err
    assert "s3rve-t0ken" not in out + err


def test_kbear_serve_counts_failed_sign_ins_across_its_workers(conf: Path, tmp_path: Path) -> None:
    """#30: a peer gets 5 failed sign-ins a minute from ``kbear serve --workers 2`` in
    all, not 5 per worker (each attempt a new connection, which either worker takes)."""
    token_file = tmp_path / "token"
    token_file.write_text("s3rve-t0ken\n")
    with kbear_serve(conf, "--token-file", str(token_file), "--workers", "2") as served:
        codes = [
            httpx.post(f"{served.base}/login", data={"token": f"guess-{i}"}, timeout=10).status_code
            for i in range(8)
        ]
    assert codes == [401] * 5 + [429] * 3


def test_kbear_serve_refuses_to_start_on_a_bad_directory(conf: Path) -> None:
    (conf / "route-rules.yaml").write_text(RULES.replace("use cluster uat", "use cluster nowhere"))
    env = {**os.environ, "PYTHONPATH": str(REPOSITORY)}
    done = subprocess.run(
        [sys.executable, "-m", "kbear.cli", "serve", "--config", str(conf), "--port", str(free_port())],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "route-rules.yaml: rule 'r100006': uses cluster 'nowhere'" in done.stderr


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command to make a certificate")
def test_kbear_serve_over_tls(conf: Path, tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    ec_key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    subject = ["-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"]
    subprocess.run(
        ["openssl", "req", "-x509", *ec_key, "-keyout", str(key), "-out", str(cert), "-days", "1", *subject],
        check=True,
        capture_output=True,
        timeout=60,
    )
    trusted = ssl.create_default_context(cafile=str(cert))
    tls = ("--ssl-certfile", str(cert), "--ssl-keyfile", str(key))
    with kbear_serve(conf, *tls, scheme="https", verify=trusted) as served:
        port = served.port
        body = {"client": PROD, "topicIds": ["orders"]}
        answer = httpx.post(f"https://127.0.0.1:{port}/route/producer", json=body, verify=trusted, timeout=5)
        assert answer.json()["topicIdRoutes"] == {
            "orders": {"clusterId": "prod", "topicId": "orders.v2", "ruleId": "r-orders"}
        }
        with pytest.raises(httpx.TransportError):  # plain HTTP is not served on a TLS port
            httpx.post(f"http://127.0.0.1:{port}/route/producer", json=body, timeout=5).raise_for_status()
    assert "on https://127.0.0.1" in served.err
