"""Secrets and ``kbear serve``: ``${NAME}`` is passed through unresolved (the server's
environment never reaches an answer), and no planted secret reaches an output
channel other than an authenticated answer naming that cluster: not a 401 answer,
not a probe, /health (a refused change included), /metrics, the logs, nor the
output of the ``kbear serve`` process."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _serve import TestClient, kbear_serve

pytest.importorskip("uvicorn")

import httpx

from kbear.reload import replace_file
from kbear.server import ConfigHolder, create_app

pytestmark = pytest.mark.filterwarnings("ignore:.*httpx2")

ENV_NAME = "KBEAR_TEST_SERVE_SECRET"
ENV_SECRET = "env-PLANTED-4"
LITERAL_SECRETS = ("pw-PLANTED-1", "jaas-PLANTED-2", "pem-PLANTED-3")
TOKEN = "tok-PLANTED-6"
NEVER = (ENV_SECRET, TOKEN)  # in no output at all, authenticated answers included
EVERY = (*LITERAL_SECRETS, *NEVER)

CLUSTERS = f"""\
clusters:
  - id: prod
    meta:
      bootstrap.servers: prod:9092
      security.protocol: SASL_SSL
      sasl.username: app
      sasl.password: pw-PLANTED-1
      sasl.jaas.config: org.apache...PlainLoginModule required password="jaas-PLANTED-2";
      ssl.key.pem: "-----BEGIN PRIVATE KEY-----pem-PLANTED-3"
      sasl.oauthbearer.client.secret: ${{{ENV_NAME}}}
      client.tag: $${{NOT_A_REFERENCE}}
  - id: plain
    meta:
      bootstrap.servers: plain:9092
"""
RULES = """\
route-rules:
  - id: r-prod
    meta: {rule.isGlobal: true}
    rule: use cluster prod when client.env=prod
  - id: r-plain
    meta: {rule.isGlobal: true}
    rule: use cluster plain
"""
# Refused edits: a YAML error on a secret line; a duplicate of the secret cluster.
BAD_EDITS = (
    CLUSTERS + "      sasl.oauthbearer.extra.secret: !tag pw-PLANTED-1\n",
    CLUSTERS + CLUSTERS.removeprefix("clusters:\n"),
)
AUTH = {"authorization": f"Bearer {TOKEN}"}
KBEAR_PROD = {"env": "prod", "kbear.client": "python/test"}
REQUESTS = [
    # kbear's clients (Client.meta kbear.client) resolve ${NAME} themselves: never the server
    ("POST", "/route/producer", {"client": {"meta": KBEAR_PROD}, "topicIds": ["orders"]}),
    (
        "POST",
        "/route/consumer",
        {"client": {"meta": KBEAR_PROD}, "consumerGroupIds": [{"groupName": "g", "topicId": "orders"}]},
    ),
    ("POST", "/meta/clusters", {"clusterIds": ["prod"]}),
    ("POST", "/route/rules", {}),
    ("POST", "/meta/topics", {}),
    ("POST", "/meta/consumer-groups", {}),
    ("GET", "/meta/clusters/all", None),
    ("GET", "/route/rules/all", None),
    ("GET", "/meta/topics/all", None),
    ("GET", "/meta/consumer-groups/all", None),
    ("GET", "/health", None),
    ("GET", "/metrics", None),
    ("GET", "/healthz", None),
    ("GET", "/readyz", None),
]


def assert_clean(text: str, secrets: tuple[str, ...] = EVERY) -> None:
    for secret in secrets:
        assert secret not in text


@pytest.fixture
def conf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(ENV_NAME, ENV_SECRET)  # set on the server: it must not be used
    (tmp_path / "clusters.yaml").write_text(CLUSTERS)
    (tmp_path / "route-rules.yaml").write_text(RULES)
    return tmp_path


@pytest.fixture
def client(conf: Path) -> Iterator[tuple[TestClient, ConfigHolder]]:
    holder = ConfigHolder(conf, watch_interval_s=3600)
    with TestClient(create_app(holder, watch=False, tokens=[TOKEN])) as test_client:
        yield test_client, holder


def test_placeholders_are_passed_through_as_written(client: tuple[TestClient, ConfigHolder]) -> None:
    test_client, _ = client
    answer = test_client.post("/meta/clusters", json={"clusterIds": ["prod"]}, headers=AUTH)
    meta = answer.json()["clusters"][0]["meta"]
    assert meta["sasl.oauthbearer.client.secret"] == "${KBEAR_TEST_SERVE_SECRET}"
    assert meta["client.tag"] == "$${NOT_A_REFERENCE}"  # the escape too: the client reads it
    assert meta["sasl.password"] == "pw-PLANTED-1"  # written literally: it travels (to authenticated clients)
    assert_clean(answer.text, NEVER)


def test_the_server_needs_no_value_for_a_placeholder(conf: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_NAME)
    holder = ConfigHolder(conf)
    secret = holder.served.config.clusters["prod"].meta["sasl.oauthbearer.client.secret"]
    assert secret == "${KBEAR_TEST_SERVE_SECRET}"


def test_every_channel_without_the_token_and_the_probes(client: tuple[TestClient, ConfigHolder]) -> None:
    test_client, _ = client
    for headers in ({}, {"authorization": "Bearer pw-PLANTED-1"}, {"authorization": "Bearer tok-PLANTED"}):
        for method, path, body in REQUESTS:
            response = test_client.request(method, path, json=body, headers=headers)
            probe = path in ("/healthz", "/readyz")  # open; /readyz is 503 here (not watching)
            assert (response.status_code == 401) is not probe, path
            assert_clean(response.text)
            assert_clean(str(response.headers))


def test_health_and_metrics_with_refused_changes_and_the_logs(
    conf: Path, client: tuple[TestClient, ConfigHolder], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    test_client, holder = client
    seen: list[str] = []
    for bad in BAD_EDITS:
        replace_file(conf / "clusters.yaml", bad)
        assert [holder.check(), holder.check()] == [False, False]
        health = test_client.get("/health", headers=AUTH)
        assert health.json()["status"] == "refused_change"
        seen += [health.text, test_client.get("/metrics", headers=AUTH).text]
    # a good edit, applied and logged
    replace_file(conf / "clusters.yaml", CLUSTERS.replace("prod:9092", "prod2:9092"))
    assert [holder.check(), holder.check()] == [False, True]
    # requests that fail: a body carrying a secret but of the wrong shape, and not JSON
    for content in (
        b'{"client": {"meta": {"pw": 1, "x": "pw-PLANTED-1"}}, "topicIds": "pw-PLANTED-1"}',
        b"{pw-PLANTED-1",
    ):
        bad = test_client.post(
            "/route/producer", content=content, headers={**AUTH, "content-type": "application/json"}
        )
        assert bad.status_code == 400
        seen.append(bad.text)
    for method, path, body in REQUESTS:
        response = test_client.request(method, path, json=body, headers=AUTH)
        if path not in ("/route/producer", "/route/consumer", "/meta/clusters", "/meta/clusters/all"):
            seen.append(response.text)  # the cluster answers carry the literal secrets by design
        assert_clean(response.text, NEVER)
    for text in seen:
        assert_clean(text)
    assert sum("refused" in r.getMessage() for r in caplog.records) == 2
    assert any("applied" in r.getMessage() for r in caplog.records)
    assert_clean(caplog.text)


def test_the_output_of_the_kbear_serve_process(conf: Path) -> None:
    env = {ENV_NAME: ENV_SECRET, "KBEAR_SERVE_TOKEN": TOKEN}
    options = ("--watch-interval", "0.1", "--log-level", "debug", "--access-log")
    with kbear_serve(conf, *options, env=env) as served:
        base = served.base
        for headers in ({}, AUTH):
            for method, path, body in REQUESTS:
                httpx.request(method, f"{base}{path}", json=body, headers=headers, timeout=5)
        for bad in BAD_EDITS:
            replace_file(conf / "clusters.yaml", bad)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                if httpx.get(f"{base}/health", headers=AUTH, timeout=5).json()["status"] == "refused_change":
                    break
                time.sleep(0.1)
            replace_file(conf / "clusters.yaml", CLUSTERS)
            time.sleep(0.5)
    out, err = served.out, served.err
    assert "refused" in err and "GET /health" in err  # the channels did carry something
    assert_clean(out)
    assert_clean(err)
