"""A meta-service that cannot be reached is reported as such (issue #31), a
configuration problem over a meta-service is the ConfigError a directory gives
(issue #25 item 3), and ``kbear explain``/``validate``/``lint`` with a URL work
from the rules the service serves (issue #25 item 2)."""

from __future__ import annotations

import json
import shutil
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _meta_fake import FakeService, HttpServer
from prometheus_client import CollectorRegistry

from kbear import (
    Client,
    ConfigError,
    MetaServiceUnavailable,
    NoRouteError,
    RoutedConsumer,
    RoutedProducer,
    Router,
)
from kbear.cli import EXIT_CONFIG_ERROR, EXIT_META_UNAVAILABLE, EXIT_OK, main
from kbear.meta import MetaServiceSource

pytest.importorskip("uvicorn", reason="kbear serve needs the server extra")
from kbear.metrics import instrument
from kbear.server.embedded import EmbeddedMetaService

DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo-config"
ENV = {"KBEAR_DEMO_EAST": "east.example:9092", "KBEAR_DEMO_WEST": "west.example:9092"}


@pytest.fixture(autouse=True)
def _cache_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))


@pytest.fixture
def demo_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, EmbeddedMetaService]]:
    directory = tmp_path / "served"
    shutil.copytree(DEMO, directory)
    with EmbeddedMetaService(directory, watch_interval_s=0.1) as service:
        yield directory, service


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def source(url: str, cache: Path | None, **kwargs: object) -> MetaServiceSource:
    return MetaServiceSource(
        url,
        cache_file=cache,
        timeout_s=1.0,
        attempts=1,
        backoff_s=0.01,
        environ=ENV,
        **kwargs,  # type: ignore[arg-type]
    )


def test_a_lookup_while_the_service_is_down_is_meta_service_unavailable(
    served: tuple[Path, EmbeddedMetaService], tmp_path: Path
) -> None:
    _directory, service = served
    router = Router.from_source(source(service.url, tmp_path / "cache.json"))
    assert router.route_producer("orders").cluster_id == "east"
    before = time.time()
    service.close()
    with pytest.raises(MetaServiceUnavailable) as raised:
        router.route_producer("audit")
    err = raised.value
    assert isinstance(err, NoRouteError)  # existing except clauses still catch it
    assert err.url == service.url.rstrip("/")
    assert before - 1 <= err.since <= time.time()
    assert err.last_answer_age_s is not None and 0 <= err.last_answer_age_s < 60
    text = str(err)
    assert f"meta-service {err.url} unreachable since" in text
    assert "last answer" in text and "topic 'audit'" in text
    assert "no route rule matches" not in text
    # What was answered before stays in force.
    assert router.route_producer("orders").cluster_id == "east"
    # A router starting from the cache file while the service is down: the same.
    again = Router.from_source(source(service.url, tmp_path / "cache.json"))
    assert again.route_producer("orders").cluster_id == "east"
    with pytest.raises(MetaServiceUnavailable) as raised:
        again.route_producer("payments")
    assert raised.value.last_answer_age_s is not None
    router.close()
    again.close()


def test_a_routed_producer_raises_meta_service_unavailable(tmp_path: Path) -> None:
    url = closed_port_url()
    producer = RoutedProducer({"kbear.reload.interval.ms": 0}, router=Router.from_source(source(url, None)))
    try:
        with pytest.raises(MetaServiceUnavailable, match=r"unreachable since .* \(no answer received yet;"):
            producer.produce("audit", b"x")
    finally:
        producer.close()


def test_a_routed_consumer_subscribing_raises_meta_service_unavailable() -> None:
    url = closed_port_url()
    consumer = RoutedConsumer(
        {"group.id": "g", "kbear.reload.interval.ms": 0}, router=Router.from_source(source(url, None))
    )
    try:
        with pytest.raises(MetaServiceUnavailable, match=r"unreachable since .* topic 'audit'"):
            consumer.subscribe(["audit", "orders"])
    finally:
        consumer.close()


def test_metrics_show_an_unreachable_service(
    served: tuple[Path, EmbeddedMetaService], tmp_path: Path
) -> None:
    _directory, service = served
    registry = CollectorRegistry()
    metrics = instrument(registry)
    try:
        router = Router.from_source(source(service.url, tmp_path / "cache.json"))
        router.route_producer("orders")
        location = service.url.rstrip("/")
        assert registry.get_sample_value("kbear_meta_service_up", {"location": location}) == 1
        service.close()
        with pytest.raises(MetaServiceUnavailable):
            router.route_producer("audit")
        assert registry.get_sample_value("kbear_meta_service_up", {"location": location}) == 0
        down = registry.get_sample_value("kbear_meta_service_unreachable_seconds", {"location": location})
        age = registry.get_sample_value("kbear_meta_last_answer_age_seconds", {"location": location})
        assert down is not None and 0 <= down < 60
        assert age is not None and age >= down
        router.close()
    finally:
        metrics.close()


@pytest.mark.parametrize("command", ["route", "explain"])
def test_cli_lookup_over_an_unreachable_service_exits_4(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = closed_port_url()
    code = main([command, "--config", url, "--topic", "orders"])
    err = capsys.readouterr().err
    assert code == EXIT_META_UNAVAILABLE == 4
    assert f"meta-service {url} unreachable since" in err
    assert "no route rule matches" not in err


@pytest.mark.parametrize("command", ["validate", "lint"])
def test_cli_check_of_an_unreachable_service_exits_4(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = closed_port_url()
    assert main([command, "--config", url]) == EXIT_META_UNAVAILABLE
    assert "meta-service unavailable" in capsys.readouterr().err


def test_missing_variable_is_the_same_error_over_a_service_as_with_a_directory(
    served: tuple[Path, EmbeddedMetaService],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    directory, service = served
    monkeypatch.delenv("KBEAR_DEMO_EAST", raising=False)
    monkeypatch.setenv("KBEAR_DEMO_WEST", "west.example:9092")
    lookup = ["--topic", "audit", "--client-meta", "env=uat"]
    for command in ("route", "explain"):
        assert main([command, "--config", str(directory), *lookup]) == EXIT_CONFIG_ERROR
        from_dir = capsys.readouterr().err
        assert main([command, "--config", service.url, *lookup]) == EXIT_CONFIG_ERROR
        from_url = capsys.readouterr().err
        for err in (from_dir, from_url):
            assert "environment variable KBEAR_DEMO_EAST is not set" in err
            assert "no route" not in err


def test_explain_over_kbear_serve_shows_the_real_chain(
    served: tuple[Path, EmbeddedMetaService], demo_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    directory, service = served
    lookup = ["--topic", "audit", "--client-meta", "env=uat", "--json"]
    assert main(["explain", "--config", str(directory), *lookup]) == EXIT_OK
    from_dir = json.loads(capsys.readouterr().out)
    assert main(["explain", "--config", service.url, *lookup]) == EXIT_OK
    from_url = json.loads(capsys.readouterr().out)
    assert from_url["winner"]["rule"] == "uat-audit-on-east"
    assert [r["rule"] for r in from_url["chain"]] == [r["rule"] for r in from_dir["chain"]]
    assert from_url == from_dir
    assert main(["explain", "--config", service.url, *lookup[:-1]]) == EXIT_OK
    text = capsys.readouterr().out
    assert "winner: uat-audit-on-east" in text and "producer:audit" not in text


def test_validate_and_lint_over_kbear_serve_check_the_rules(
    served: tuple[Path, EmbeddedMetaService], demo_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    directory, service = served
    assert main(["validate", "--config", service.url]) == EXIT_OK
    assert main(["validate", "--config", str(directory)]) == EXIT_OK
    out = capsys.readouterr().out.splitlines()
    assert out[0] == out[1] and "4 rules" in out[0]
    dir_code = main(["lint", "--config", str(directory), "--json"])
    from_dir = json.loads(capsys.readouterr().out)
    assert main(["lint", "--config", service.url, "--json"]) == dir_code
    from_url = json.loads(capsys.readouterr().out)
    assert from_url["rules_checked"] is True
    assert from_url["warnings"] == from_dir["warnings"]


class NoRules(FakeService):
    """A service that answers routes and ``/meta/*/all`` but not ``/route/rules/all``."""

    def answer(self, path: str, body: Any) -> tuple[int, Any]:
        config = self.router.config
        ok = {"ack": "success"}
        if path == "/meta/clusters/all":
            clusters = [{"id": c.id, "meta": dict(c.meta)} for c in config.clusters.values()]
            return 200, {"status": ok, "clusters": clusters}
        if path in ("/meta/topics/all", "/meta/consumer-groups/all"):
            return 200, {"status": ok}
        if path.startswith("/route/rules"):
            return 404, {"status": {"ack": "fail", "error": {"code": "NOT_FOUND", "message": path}}}
        return super().answer(path, body)


@pytest.fixture
def no_rules(tmp_path: Path, demo_env: None) -> Iterator[HttpServer]:
    """A service over examples/demo-config that serves no rules and names none."""
    directory = tmp_path / "conf"
    shutil.copytree(DEMO, directory)
    server = HttpServer(NoRules(Router.from_path(directory)))
    try:
        yield server
    finally:
        server.close()


def test_explain_over_a_service_without_rules_says_it_cannot(
    no_rules: HttpServer, demo_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    server = no_rules
    code = main(["explain", "--config", server.url, "--topic", "audit", "--client-meta", "env=uat"])
    out = capsys.readouterr().out
    assert code == EXIT_OK
    assert "chain: unknown: cannot explain the chain: the service does not serve its rules" in out
    assert "the service's route: cluster=east" in out
    assert "producer:audit" not in out and "winner" not in out
    code = main(["explain", "--config", server.url, "--topic", "nothing", "--client-meta", "env=x", "--json"])
    answer = json.loads(capsys.readouterr().out)
    assert answer["chain"] is None and "cannot explain" in answer["chain_unavailable"]
    assert code == EXIT_OK and answer["winner"]["cluster"] == "east"


def test_config_error_for_a_new_lookup_is_raised_not_no_route(
    served: tuple[Path, EmbeddedMetaService],
) -> None:
    _directory, service = served
    router = Router.from_source(
        MetaServiceSource(service.url, cache_file=None, environ={"KBEAR_DEMO_WEST": "w:9092"})
    )
    try:
        with pytest.raises(ConfigError, match="KBEAR_DEMO_EAST is not set") as raised:
            router.route_producer("orders")
        assert not isinstance(raised.value, NoRouteError)
    finally:
        router.close()


def test_route_over_kbear_serve_names_the_rule_that_won(
    served: tuple[Path, EmbeddedMetaService], demo_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    directory, service = served
    for lookup in (
        ["--topic", "audit", "--client-meta", "env=uat"],
        ["--topic", "audit", "--group", "demo-prod", "--client-meta", "env=prod"],
    ):
        assert main(["route", "--config", str(directory), *lookup]) == EXIT_OK
        from_dir = capsys.readouterr().out
        assert main(["route", "--config", service.url, *lookup]) == EXIT_OK
        from_url = capsys.readouterr().out
        assert from_url == from_dir
        assert "producer:" not in from_url and "consumer:" not in from_url
    assert "rule=uat-audit-on-east" in from_dir or "rule=audit-on-west" in from_dir
    assert (
        main(["route", "--config", service.url, "--topic", "audit", "--client-meta", "env=uat", "--json"])
        == 0
    )
    assert json.loads(capsys.readouterr().out)["rule"] == "uat-audit-on-east"


def test_router_explain_over_kbear_serve_is_the_services_chain(
    served: tuple[Path, EmbeddedMetaService], demo_env: None
) -> None:
    directory, service = served
    uat = Client(None, {"env": "uat"})
    local = Router.from_path(directory)
    remote = Router.from_source(service.url, client=uat, cache_file=None)
    try:
        for group in (None, "demo-uat"):
            mine = (
                local.explain_producer("audit", uat)
                if group is None
                else local.explain_consumer("audit", group, uat)
            )
            theirs = (
                remote.explain_producer("audit", uat)
                if group is None
                else remote.explain_consumer("audit", group, uat)
            )
            assert theirs.chain_unknown is None
            assert [(v.rule.id, v.matched, v.failed) for v in theirs.verdicts] == [
                (v.rule.id, v.matched, v.failed) for v in mine.verdicts
            ]
            assert len(theirs.verdicts) == 4 and theirs.evaluated == mine.evaluated
            assert theirs.route is not None and mine.route is not None
            assert theirs.route.rule_id == mine.route.rule_id == "uat-audit-on-east"
            assert remote.route("audit", group, uat).rule_id == "uat-audit-on-east"
    finally:
        remote.close()


def test_router_explain_over_a_service_without_rules_says_it_cannot(
    no_rules: HttpServer, demo_env: None
) -> None:
    """A service that names no rule (KBear's reference server): the route reports no
    rule id and explain says it cannot show the chain, never kbear's stand-in rules."""
    uat = Client(None, {"env": "uat"})
    router = Router.from_source(no_rules.url, client=uat, cache_file=None)
    try:
        route = router.route_producer("audit", uat)
        assert (route.cluster_id, route.rule_id) == ("east", "")
        explanation = router.explain_producer("audit", uat)
        assert explanation.verdicts == () and explanation.route == route
        assert explanation.chain_unknown is not None
        assert explanation.chain_unknown.startswith("cannot explain the chain: the service does not serve")
        nothing = router.explain_producer("nothing", uat)  # a global rule routes it: still no chain
        assert nothing.verdicts == () and nothing.chain_unknown is not None
    finally:
        router.close()


def test_route_over_a_service_naming_no_rule_says_so(
    no_rules: HttpServer, demo_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    lookup = ["--topic", "audit", "--client-meta", "env=uat"]
    assert main(["route", "--config", no_rules.url, *lookup]) == EXIT_OK
    out = capsys.readouterr().out
    assert "cluster=east" in out and "rule=unknown (the meta-service does not say which rule)" in out
    assert "producer:audit" not in out
    assert main(["route", "--config", no_rules.url, *lookup, "--json"]) == EXIT_OK
    assert json.loads(capsys.readouterr().out)["rule"] is None


def test_routed_clients_raise_the_config_error_of_a_missing_variable(
    served: tuple[Path, EmbeddedMetaService],
) -> None:
    """#25 item 3, the routed clients: an unset ``${NAME}`` in the answer for a new
    topic is the ConfigError a directory gives, not a missing route."""
    _directory, service = served
    uat = {"kbear.client.meta.env": "uat", "kbear.reload.interval.ms": 0}

    def router() -> Router:
        # west is set, east (the cluster of uat's audit) is not
        return Router.from_source(
            MetaServiceSource(
                service.url,
                Client(None, {"env": "uat"}),
                cache_file=None,
                environ={"KBEAR_DEMO_WEST": "w:9092"},
            )
        )

    routers = [router(), router()]
    producer = RoutedProducer(uat, router=routers[0])
    consumer = RoutedConsumer({"group.id": "g", **uat}, router=routers[1])
    try:
        with pytest.raises(ConfigError, match="KBEAR_DEMO_EAST is not set") as raised:
            producer.produce("audit", b"x")
        assert not isinstance(raised.value, NoRouteError)
        with pytest.raises(ConfigError, match="KBEAR_DEMO_EAST is not set") as raised:
            consumer.subscribe(["audit"])
        assert not isinstance(raised.value, NoRouteError)
    finally:
        producer.close()
        consumer.close()
        for r in routers:
            r.close()
