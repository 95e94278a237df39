"""A planted secret never reaches any output channel: repr, logs, exceptions, CLI output."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from kbear import Client, ConfigError, NoRouteError, Router, load_config
from kbear.cli import main
from kbear.reload import ConfigWatcher

SECRETS = ("pw-PLANTED-1", "jaas-PLANTED-2", "pem-PLANTED-3", "env-PLANTED-4", "tag-PLANTED-5")

CLUSTERS = """\
clusters:
  - id: prod
    meta:
      bootstrap.servers: prod:9092
      security.protocol: SASL_SSL
      sasl.username: app
      sasl.password: pw-PLANTED-1
      sasl.jaas.config: org.apache...PlainLoginModule required password="jaas-PLANTED-2";
      ssl.key.pem: "-----BEGIN PRIVATE KEY-----pem-PLANTED-3"
      sasl.oauthbearer.client.secret: ${KBEAR_TEST_OAUTH_SECRET}
"""
RULES = """\
route-rules:
  - id: r-prod
    meta: {rule.isGlobal: true}
    rule: use cluster prod when client.env=prod
"""


def assert_clean(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text


@pytest.fixture
def conf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KBEAR_TEST_OAUTH_SECRET", "env-PLANTED-4")
    (tmp_path / "clusters.yaml").write_text(CLUSTERS)
    (tmp_path / "route-rules.yaml").write_text(RULES)
    return tmp_path


def test_the_secrets_do_reach_the_client(conf: Path) -> None:
    props = load_config(conf).clusters["prod"].client_properties
    assert props["sasl.password"] == "pw-PLANTED-1"
    assert props["sasl.oauthbearer.client.secret"] == "env-PLANTED-4"


def test_reprs_of_config_router_route_and_explanation(conf: Path) -> None:
    config = load_config(conf)
    router = Router(config)
    client = Client("billing", {"env": "prod"})
    route = router.route_producer("orders", client)
    shown = [
        repr(config),
        str(config),
        repr(config.clusters["prod"]),
        str(config.clusters["prod"]),
        repr(router),
        repr(route),
        str(route),
        repr(router.explain_producer("orders", client)),
        repr(router.explain_consumer("orders", "g", client)),
    ]
    for text in shown:
        assert_clean(text)
    assert "sasl.password" in repr(route)  # the key is shown, its value hidden


def test_logs_at_debug_during_load_reload_watch_and_a_refused_change(
    conf: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    router = Router.from_path(conf)
    (conf / "route-rules.yaml").write_text(RULES.replace("client.env=prod", "client.env=uat"))
    assert router.reload() is True
    watcher = ConfigWatcher(router, conf, 60.0)
    # A refused change whose YAML error sits on a secret line.
    (conf / "clusters.yaml").write_text(CLUSTERS + "      sasl.oauthbearer.extra.secret: !tag-PLANTED-5\n")
    assert [watcher.check(), watcher.check()] == [False, False]
    # A refused change naming the secret cluster.
    (conf / "clusters.yaml").write_text(CLUSTERS + CLUSTERS.removeprefix("clusters:\n"))
    assert [watcher.check(), watcher.check()] == [False, False]
    (conf / "clusters.yaml").write_text(CLUSTERS.replace("prod:9092", "prod2:9092"))
    assert [watcher.check(), watcher.check()] == [False, True]
    assert sum("refused" in r.getMessage() for r in caplog.records) == 2
    assert_clean(caplog.text)
    for record in caplog.records:
        assert_clean(record.getMessage())


def test_exception_messages(conf: Path) -> None:
    router = Router.from_path(conf)
    with pytest.raises(NoRouteError) as no_route:
        router.route_producer("orders", Client("x", {"env": "uat"}))
    assert_clean(str(no_route.value))
    for broken in (
        CLUSTERS + CLUSTERS.removeprefix("clusters:\n"),  # duplicate cluster id
        CLUSTERS + "      sasl.oauthbearer.extra.secret: !tag-PLANTED-5\n",  # YAML error on a secret line
        CLUSTERS + "      sasl.password: pw-PLANTED-1\n",  # duplicate YAML key
        CLUSTERS.replace("bootstrap.servers: prod:9092", "bootstrap.servers: ''"),
    ):
        (conf / "clusters.yaml").write_text(broken)
        with pytest.raises(ConfigError) as info:
            load_config(conf)
        assert_clean(str(info.value))
        assert_clean(repr(info.value))
        with pytest.raises(ConfigError) as reload_info:
            router.reload()
        assert_clean(str(reload_info.value))


def test_every_cli_command(conf: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lookups = [("--topic", "orders"), ("--topic", "orders", "--group", "g")]
    clients = [("--client-meta", "env=prod"), ("--client-meta", "env=uat")]
    outputs = []
    for command in ("route", "explain"):
        for lookup in lookups:
            for client in clients:
                for extra in ((), ("--json",)):
                    main([command, "--config", str(conf), *lookup, *client, *extra])
                    outputs.append(capsys.readouterr())
    for command in ("validate", "lint"):
        main([command, "--config", str(conf)])
        outputs.append(capsys.readouterr())
    (conf / "clusters.yaml").write_text(CLUSTERS + "      sasl.oauthbearer.extra.secret: !tag-PLANTED-5\n")
    for command in ("validate", "lint", "route"):
        assert main([command, "--config", str(conf), *(("--topic", "t") if command == "route" else ())]) == 2
        outputs.append(capsys.readouterr())
    assert any("prod:9092" in out.out for out in outputs)  # the secret cluster was printed
    for out in outputs:
        assert_clean(out.out)
        assert_clean(out.err)
