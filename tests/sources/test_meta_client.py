"""Clients routed by a meta-service (issue #12, items 4 and 5, client side).

The service is a fake answering the protocol of meta-service.md from KBear's own
test files (tests/data/kbear), reached through httpx.MockTransport, or through a
real HTTP server on 127.0.0.1 where sockets matter (slow answers, the CLI, a
RoutedProducer).
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import os
import socket
import stat
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from _kbear_files import HELLO, kbear_copy
from _meta_fake import FakeService, HttpServer

from conftest import message_count
from kbear import Client, ConfigError, KBearConfig, NoRouteError, RoutedProducer, Router
from kbear.cli import main
from kbear.meta import MetaServiceSource, load_everything
from kbear.reload import ConfigWatcher
from kbear.testing import EmbeddedCluster

URL = "http://meta.test:8080"
GROUP = "fx.hellobom.string.consumer"
APP = Client("100000001", {"env": "FWS"})
APP2 = Client("app-2", {"env": "FWS"})  # not named by r100003: sees r100005's remap


@pytest.fixture
def service(tmp_path: Path) -> FakeService:
    return FakeService(Router.from_path(kbear_copy(tmp_path)))


#: what kbear's clients add to their Client.meta (the service tells them from other clients by it)
KBEAR_MARK = {"kbear.client": f"python/{importlib.metadata.version('kbear')}"}


def source(service: FakeService, tmp_path: Path, client: Client = APP, **options: Any) -> MetaServiceSource:
    options.setdefault("cache_file", tmp_path / "cache.json")
    options.setdefault("backoff_s", 0.001)
    return MetaServiceSource(URL, client, transport=service.transport(), **options)


def answer(ack: str = "success", **fields: Any) -> dict[str, Any]:
    return {"status": {"ack": ack}, **fields}


def test_producer_lookup_asks_the_service_for_its_client(service: FakeService, tmp_path: Path) -> None:
    router = Router.from_source(source(service, tmp_path))
    assert service.requests == []  # nothing to ask before the first lookup
    route = router.route_producer(HELLO, APP)
    assert (route.cluster_id, route.topic) == ("prod", HELLO)  # r100003: client.id=100000001
    assert route.properties == {
        "bootstrap.servers": "10.28.133.27:9092,10.28.135.127:9092,10.28.135.128:9092"
    }
    assert router.config.clusters["prod"].meta["zookeeper.connect"].startswith("10.8.113.113")
    assert service.requests == [
        (
            "/route/producer",
            {"client": {"id": "100000001", "meta": {"env": "FWS", **KBEAR_MARK}}, "topicIds": [HELLO]},
        )
    ]
    router.route_producer(HELLO)  # the anonymous client is the router's client
    assert len(service.requests) == 1


def test_refresh_is_one_request_per_endpoint(service: FakeService, tmp_path: Path) -> None:
    router = Router.from_source(source(service, tmp_path, client=APP2))
    for topic in (HELLO, "fx.hellobom.string", "other.topic"):
        router.route_producer(topic)
    remapped = router.route_consumer(HELLO, GROUP)
    assert (remapped.cluster_id, remapped.topic, remapped.requested_topic) == (
        "fws",
        "fx.hellobom.string",
        HELLO,
    )
    service.requests.clear()
    assert not router.reload()  # same answers: nothing applied
    assert service.requests == [
        (
            "/route/producer",
            {
                "client": {"id": "app-2", "meta": {"env": "FWS", **KBEAR_MARK}},
                "topicIds": [HELLO, "fx.hellobom.string", "other.topic"],
            },
        ),
        (
            "/route/consumer",
            {
                "client": {"id": "app-2", "meta": {"env": "FWS", **KBEAR_MARK}},
                "consumerGroupIds": [{"groupName": GROUP, "topicId": HELLO}],
            },
        ),
    ]


def test_a_changed_answer_switches_like_a_file_change(service: FakeService, tmp_path: Path) -> None:
    router = Router.from_source(source(service, tmp_path))
    assert router.route_producer("other.topic").cluster_id == "fws"
    seen: list[KBearConfig] = []
    router.subscribe(lambda old, new: seen.append(new))
    watcher = ConfigWatcher(router, router.source, 60.0)  # type: ignore[arg-type]
    assert not watcher.check()
    moved = kbear_copy(tmp_path / "moved")
    rules = (
        (moved / "route-rules.yaml")
        .read_text()
        .replace("rule: use cluster fws\n", "rule: use cluster uat\n", 1)
    )
    (moved / "route-rules.yaml").write_text(rules)
    service.router = Router.from_path(moved)
    assert watcher.check()  # one check: a service's answer changes atomically
    assert router.route_producer("other.topic").cluster_id == "uat"
    assert len(seen) == 1


def test_clients_watch_every_reload_interval(service: FakeService, tmp_path: Path) -> None:
    router = Router.from_source(source(service, tmp_path))
    router.route_producer("other.topic")
    router.watch(0.05)
    try:
        deadline = time.monotonic() + 5
        while len(service.requests) < 4 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(service.requests) >= 4
    finally:
        router.close()


def test_lookup_for_another_client_is_refused(service: FakeService, tmp_path: Path) -> None:
    router = Router.from_source(source(service, tmp_path))
    with pytest.raises(ValueError, match="needs a router of its own"):
        router.route_producer(HELLO, Client("someone-else"))


def test_partial_answer_routes_what_it_can(service: FakeService, tmp_path: Path) -> None:
    bare = FakeService(Router.from_path(write_topic_only(tmp_path)))
    router = Router.from_source(source(bare, tmp_path))
    assert router.route_producer("orders").cluster_id == "east"
    with pytest.raises(NoRouteError):
        router.route_producer("unrouted")
    assert bare.requests[-1][1]["topicIds"] == ["orders", "unrouted"]
    assert router.route_producer("orders").cluster_id == "east"


def write_topic_only(tmp_path: Path) -> Path:
    conf = tmp_path / "topic-only"
    conf.mkdir()
    (conf / "clusters.yaml").write_text(
        "clusters:\n  - id: east\n    meta: {bootstrap.servers: 'east:9092'}\n"
    )
    (conf / "route-rules.yaml").write_text(
        "route-rules:\n  - id: r1\n    meta: {topic.id: orders}\n    rule: use cluster east\n"
    )
    return conf


# --------------------------------------------------------------------------- faults


def test_service_down_keeps_last_good_routes(
    service: FakeService, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    router = Router.from_source(source(service, tmp_path, attempts=3))
    route = router.route_producer(HELLO)
    service.requests.clear()

    def down(path: str, body: Any) -> Any:
        raise httpx.ConnectError("connection refused")

    service.override = down
    watcher = ConfigWatcher(router, router.source, 60.0)  # type: ignore[arg-type]
    assert not watcher.check()
    assert len(service.requests) == 3  # retried, then given up
    assert "meta-service unreachable" in caplog.text
    assert router.route_producer(HELLO) == route
    with pytest.raises(NoRouteError):  # a new topic has no route while the service is down
        router.route_producer("brand.new")
    service.override = None
    assert watcher.check()  # back: the new topic is asked for at the next refresh
    assert router.route_producer("brand.new").cluster_id == "fws"


def hostile(service: FakeService, tmp_path: Path, bad: Any, status: int = 200, **options: Any) -> str:
    """Route once, then serve ``bad``: the refusal's logged reason; the route must stay."""
    router = Router.from_source(source(service, tmp_path, **options))
    route = router.route_producer(HELLO)
    service.override = lambda path, body: (status, bad)
    with pytest.raises(ConfigError) as info:
        router.reload()
    assert router.route_producer(HELLO) == route
    return str(info.value)


PRODUCER_ROUTE = {HELLO: {"clusterId": "x", "topicId": HELLO}}


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (answer(topicIdRoutes={HELLO: {"clusterId": 7, "topicId": HELLO}}), "topicIdRoutes"),
        (
            answer(topicIdRoutes=PRODUCER_ROUTE, clusters={"x": {"id": "x", "meta": {"a": 1}}}),
            "clusters.x.meta.a",
        ),
        (answer("maybe"), "status.ack"),
        ([1, 2, 3], "malformed answer"),
        (answer("fail"), "the service answered fail"),
        (answer(topicIdRoutes=PRODUCER_ROUTE), "uses cluster 'x', which is not in"),
        (
            answer(topicIdRoutes=PRODUCER_ROUTE, clusters={"x": {"id": "y", "meta": {}}}),
            "described with id 'y'",
        ),
        (
            answer(
                topicIdRoutes=PRODUCER_ROUTE,
                clusters={"x": {"id": "x", "meta": {"bootstrap.servers": "x:1", "acks": "no"}}},
            ),
            "meta 'acks': librdkafka refuses it",
        ),
        (b"<html>oops</html>", "not JSON"),
    ],
)
def test_hostile_answers_are_refused(service: FakeService, tmp_path: Path, bad: Any, reason: str) -> None:
    assert reason in hostile(service, tmp_path, bad)


def test_big_body_is_refused(service: FakeService, tmp_path: Path) -> None:
    big = json.dumps(answer(padding="x" * 2_000_000)).encode()
    declared = hostile(service, tmp_path, big, max_body_bytes=1_000_000)
    assert "body of 2000045 bytes, more than 1000000" in declared


def test_big_streamed_body_is_cut_off(service: FakeService, tmp_path: Path) -> None:
    sent: list[int] = []

    def chunks() -> Any:
        for _ in range(50_000):  # 50 MB if read to the end
            sent.append(1)
            yield b"x" * 1000

    router = Router.from_source(source(service, tmp_path, max_body_bytes=1_000_000))
    route = router.route_producer(HELLO)
    service.override = lambda path, body: (200, chunks())
    with pytest.raises(ConfigError, match="larger than 1000000 bytes"):
        router.reload()
    assert len(sent) < 1100  # stopped reading soon after the bound
    assert router.route_producer(HELLO) == route


def test_unauthorized_is_refused_without_retry(service: FakeService, tmp_path: Path) -> None:
    assert "HTTP 401" in hostile(service, tmp_path, answer("fail"), status=401, attempts=3)
    assert [p for p, _ in service.requests].count("/route/producer") == 2  # the first lookup, one refusal


def test_token_is_sent(service: FakeService, tmp_path: Path) -> None:
    seen: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization"))
        return service.handler(request)

    meta = MetaServiceSource(
        URL, APP, transport=httpx.MockTransport(handler), cache_file=None, token="s3cret"
    )
    Router.from_source(meta).route_producer(HELLO)
    assert seen == ["Bearer s3cret"]


def test_reference_server_remap_key_is_ignored_and_noted(
    service: FakeService, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # KBear's Java server keys a remapped producer route by the physical topic.
    cluster = {"fws": {"id": "fws", "meta": {"bootstrap.servers": "fws:9092"}}}
    service.override = lambda path, body: (
        200,
        answer(topicIdRoutes={"physical": {"clusterId": "fws", "topicId": "physical"}}, clusters=cluster),
    )
    router = Router.from_source(source(service, tmp_path))
    with pytest.raises(NoRouteError):
        router.route_producer("logical")
    assert "ignored producer routes for topics not asked for: ['physical']" in caplog.text


def slow_server(dribble_s: float) -> tuple[socket.socket, str, threading.Event]:
    """A server on 127.0.0.1 that sends headers, then one byte every ``dribble_s``."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        with listener:
            listener.settimeout(5)
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
                )
                for _ in range(200):
                    if stop.wait(dribble_s):
                        return
                    try:
                        conn.sendall(b" ")
                    except OSError:
                        return

    threading.Thread(target=serve, daemon=True).start()
    return listener, f"http://127.0.0.1:{listener.getsockname()[1]}", stop


def test_slow_loris_answer_is_cut_off(tmp_path: Path) -> None:
    _, url, stop = slow_server(0.05)
    meta = MetaServiceSource(url, APP, cache_file=None, timeout_s=0.5, attempts=1)
    try:
        router = Router.from_source(meta)
        started = time.monotonic()
        with pytest.raises(NoRouteError):
            router.route_producer(HELLO)
        assert time.monotonic() - started < 2.0
    finally:
        stop.set()
        meta.close()


# --------------------------------------------------------------------------- cache


def test_client_starts_from_cache_while_service_is_down(
    service: FakeService, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first = Router.from_source(source(service, tmp_path, client=APP2))
    expected = first.route_producer(HELLO)
    first.route_consumer(HELLO, GROUP)
    first.close()
    cache = tmp_path / "cache.json"
    assert stat.S_IMODE(os.stat(cache).st_mode) == 0o600

    def down(path: str, body: Any) -> Any:
        raise httpx.ConnectError("connection refused")

    service.override = down
    caplog.set_level(logging.ERROR, "kbear.meta")
    second = Router.from_source(source(service, tmp_path, client=APP2))
    assert "STARTING FROM THE CACHED ANSWER" in caplog.text
    assert second.route_producer(HELLO) == expected
    assert second.route_consumer(HELLO, GROUP).topic == "fx.hellobom.string"
    other = Router.from_source(source(service, tmp_path, client=Client("another-app")))
    with pytest.raises(NoRouteError):  # the cache was for another client: not used
        other.route_producer(HELLO)


def test_without_cache_a_down_service_only_fails_lookups(service: FakeService, tmp_path: Path) -> None:
    service.override = lambda path, body: (503, answer("fail"))
    router = Router.from_source(source(service, tmp_path, cache_file=None, attempts=2))
    with pytest.raises(NoRouteError):
        router.route_producer(HELLO)
    assert len(service.requests) == 2


# --------------------------------------------------------------------------- secrets


def secret_answer(path: str, body: Any) -> tuple[int, Any]:
    meta = {"bootstrap.servers": "east:9092", "sasl.username": "app", "sasl.password": "${EAST_PASSWORD}"}
    return 200, answer(
        topicIdRoutes={t: {"clusterId": "east", "topicId": t} for t in body["topicIds"]},
        clusters={"east": {"id": "east", "meta": meta}},
    )


def test_placeholders_are_resolved_on_the_client(service: FakeService, tmp_path: Path) -> None:
    service.override = secret_answer
    router = Router.from_source(source(service, tmp_path, environ={"EAST_PASSWORD": "pw-PLANTED-9"}))
    assert router.route_producer(HELLO).properties["sasl.password"] == "pw-PLANTED-9"
    cached = (tmp_path / "cache.json").read_text()
    assert "${EAST_PASSWORD}" in cached
    assert "pw-PLANTED-9" not in cached
    unset = Router.from_source(source(service, tmp_path / "x", environ={}, cache_file=None))
    with pytest.raises(ConfigError, match="EAST_PASSWORD is not set"):
        unset.route_producer(HELLO)


def test_unset_placeholder_is_refused_with_reason(
    service: FakeService, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    service.override = secret_answer
    router = Router.from_source(source(service, tmp_path, environ={}, cache_file=None))
    # The same error a directory holding the same configuration gives (#25 item 3).
    with pytest.raises(ConfigError) as raised:
        router.route_producer(HELLO)
    assert not isinstance(raised.value, NoRouteError)
    assert "environment variable EAST_PASSWORD is not set" in str(raised.value)
    assert "environment variable EAST_PASSWORD is not set" in caplog.text


# --------------------------------------------------------------------------- over real HTTP


def test_cli_route_with_a_url(service: FakeService, capsys: pytest.CaptureFixture[str]) -> None:
    server = HttpServer(service)
    try:
        code = main(["route", "--config", server.url, "--topic", HELLO, "--client-id", "100000001", "--json"])
        assert code == 0
        assert json.loads(capsys.readouterr().out)["cluster"] == "prod"
        assert main(["route", "--config", server.url, "--topic", HELLO, "--group", GROUP]) == 0
        assert (
            "cluster=fws topic=fx.hellobom.string (remapped from fx.kafka.demo.hello.run)"
            in capsys.readouterr().out
        )
    finally:
        server.close()


def test_validate_url_checks_what_the_service_holds() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        what = request.url.path.split("/")[2]
        if what == "rules":  # a service that does not serve its rules
            return httpx.Response(404, json={"status": {"ack": "fail"}})
        items = {
            "clusters": [{"id": "east", "meta": {"bootstrap.servers": "east:9092", "acks": "banana"}}],
            "topics": [{"id": "orders", "meta": {"bu": "x"}}],
            "consumer-groups": [],
        }[what]
        key = {"clusters": "clusters", "topics": "topics", "consumer-groups": "consumerGroups"}[what]
        return httpx.Response(200, json={"status": {"ack": "success"}, key: items})

    with pytest.raises(ConfigError, match="cluster 'east': meta 'acks': librdkafka refuses it"):
        load_everything(URL, transport=httpx.MockTransport(handler))


def test_routed_producer_with_a_meta_service_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = EmbeddedCluster()
    server = HttpServer(
        FakeService(Router.from_path(kbear_copy(tmp_path, servers=cluster.bootstrap_servers)))
    )
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    try:
        producer = RoutedProducer(
            {"kbear.config": server.url, "kbear.client.id": "100000001", "kbear.reload.interval.ms": 100}
        )
        try:
            producer.produce(HELLO, b"via meta-service")
            assert producer.flush(10) == 0
            assert producer.route(HELLO).cluster_id == "prod"
        finally:
            producer.close()
        assert list((tmp_path / "xdg" / "kbear").glob("meta-*.json"))
    finally:
        server.close()
        cluster.close()


def test_live_move_through_the_meta_service_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    a, b = EmbeddedCluster(), EmbeddedCluster()
    conf_a = tmp_path / "a"
    conf_b = tmp_path / "b"
    for conf, cluster in ((conf_a, "A"), (conf_b, "B")):
        conf.mkdir()
        (conf / "clusters.yaml").write_text(
            f"clusters:\n  - id: A\n    meta: {{bootstrap.servers: '{a.bootstrap_servers}'}}\n"
            f"  - id: B\n    meta: {{bootstrap.servers: '{b.bootstrap_servers}'}}\n"
        )
        (conf / "route-rules.yaml").write_text(
            f"route-rules:\n  - id: r1\n    meta: {{rule.isGlobal: true}}\n    rule: use cluster {cluster}\n"
        )
    service = FakeService(Router.from_path(conf_a))
    server = HttpServer(service)
    sent = 0
    try:
        producer = RoutedProducer({"kbear.config": server.url, "kbear.reload.interval.ms": 100})
        try:
            for i in range(100):
                producer.produce("moving", str(i).encode())
                sent += 1
            service.router = Router.from_path(conf_b)
            deadline = time.monotonic() + 10
            while producer.route("moving").cluster_id != "B" and time.monotonic() < deadline:
                producer.produce("moving", str(sent).encode())
                sent += 1
                producer.poll(0.02)
            assert producer.route("moving").cluster_id == "B"
            for i in range(100):
                producer.produce("moving", str(sent + i).encode())
            sent += 100
            assert producer.flush(15) == 0
        finally:
            producer.close()
        in_a, in_b = message_count(a, "moving"), message_count(b, "moving")
        assert in_b >= 100
        assert in_a + in_b == sent
    finally:
        server.close()
        b.close()
        a.close()


def test_routed_client_without_client_keys_sends_its_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("KBEAR_ENV", "UAT")
    monkeypatch.setenv("KBEAR_APP_ID", "app-7")
    service = FakeService(Router.from_path(kbear_copy(tmp_path, servers="127.0.0.1:1")))
    server = HttpServer(service)
    try:
        producer = RoutedProducer({"kbear.config": server.url, "kbear.reload.interval.ms": 0})
        try:
            assert producer.route("other.topic").cluster_id == "uat"  # r100006: client.env=UAT
        finally:
            producer.close()
    finally:
        server.close()
    sent = service.requests[0][1]["client"]
    assert sent["id"] == "app-7"
    assert sent["meta"]["env"] == "UAT"
    assert sent["meta"]["hostName"]


def test_lint_of_a_url_reports_cluster_meta_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = Router.from_path(kbear_copy(tmp_path)).config
    clusters = [{"id": c.id, "meta": dict(c.meta)} for c in config.clusters.values()]

    class Everything(FakeService):
        def answer(self, path: str, body: Any) -> tuple[int, Any]:
            if path == "/route/rules/all":  # a service that does not serve its rules
                return 404, {"status": {"ack": "fail", "error": {"code": "NOT_FOUND"}}}
            what = {"/meta/clusters/all": "clusters", "/meta/topics/all": "topics"}.get(
                path, "consumerGroups"
            )
            return 200, {"status": {"ack": "success"}, what: clusters if what == "clusters" else []}

    service = Everything(Router.from_path(kbear_copy(tmp_path / "x")))
    server = HttpServer(service)
    try:
        assert main(["validate", "--config", server.url]) == 0
        validated = capsys.readouterr()
        assert "OK: 3 clusters, 0 topics" in validated.out
        assert "rules not checked" in validated.out
        assert "does not serve its rules" in validated.err
        assert main(["lint", "--config", server.url]) == 1
        linted = capsys.readouterr()
        out = linted.out.splitlines()
        assert "rule checks skipped" in linted.err
    finally:
        server.close()
    assert len(out) == 3
    assert all("meta 'zookeeper.connect': not a librdkafka client property" in line for line in out)


def test_literal_secret_in_an_answer_stays_out_of_reprs_and_logs(
    service: FakeService, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def with_secret(acks: str) -> Any:
        meta = {"bootstrap.servers": "east:9092", "sasl.password": "pw-PLANTED-7", "acks": acks}
        return lambda path, body: (
            200,
            answer(
                topicIdRoutes={t: {"clusterId": "east", "topicId": t} for t in body["topicIds"]},
                clusters={"east": {"id": "east", "meta": meta}},
            ),
        )

    caplog.set_level(logging.DEBUG)
    service.override = with_secret("all")
    router = Router.from_source(source(service, tmp_path, cache_file=None))
    route = router.route_producer(HELLO)
    assert route.properties["sasl.password"] == "pw-PLANTED-7"
    service.override = with_secret("banana")
    with pytest.raises(ConfigError) as info:
        router.reload()
    watcher = ConfigWatcher(router, router.source, 60.0)  # type: ignore[arg-type]
    assert not watcher.check()
    shown = [repr(route), str(route), repr(router.config.clusters["east"]), str(info.value), caplog.text]
    assert "meta 'acks'" in caplog.text
    for text in shown:
        assert "pw-PLANTED-7" not in text


def not_gzip() -> httpx.Response:
    return httpx.Response(
        200, headers={"Content-Encoding": "gzip"}, stream=httpx.ByteStream(b"not gzip at all")
    )


def too_deep() -> httpx.Response:
    return httpx.Response(200, content=b"[" * 100_000 + b"]" * 100_000)


@pytest.mark.parametrize("bad", [not_gzip, too_deep])
def test_undecodable_answers_are_refused(service: FakeService, tmp_path: Path, bad: Any) -> None:
    router = Router.from_source(source(service, tmp_path))
    route = router.route_producer(HELLO)
    meta = router.source
    assert isinstance(meta, MetaServiceSource)
    meta._http._transport = httpx.MockTransport(lambda request: bad())
    with pytest.raises(ConfigError, match="answer refused"):
        router.reload()
    assert router.route_producer(HELLO) == route


def test_requests_are_counted_by_outcome_in_the_metrics(service: FakeService, tmp_path: Path) -> None:
    """kbear.metrics counts each meta-service request (retries too) by path and
    outcome, and times it; the location carries no credentials."""
    from prometheus_client import CollectorRegistry

    from kbear.metrics import instrument, uninstrument

    registry = CollectorRegistry()
    instrument(registry)
    try:
        url = "http://user:secret@meta.test:8080"
        src = MetaServiceSource(
            url,
            APP,
            transport=service.transport(),
            cache_file=tmp_path / "c.json",
            backoff_s=0.001,
            attempts=2,
        )
        router = Router.from_source(src)
        router.route_producer(HELLO)

        def down(path: str, body: Any) -> Any:
            raise httpx.ConnectError("connection refused")

        service.override = down
        with pytest.raises(ConfigError):
            router.reload()
        service.override = lambda path, body: (404, answer("fail"))
        with pytest.raises(ConfigError):
            router.reload()

        def count(outcome: str) -> float | None:
            labels = {"location": URL, "path": "/route/producer", "outcome": outcome}
            return registry.get_sample_value("kbear_meta_requests_total", labels)

        assert (count("ok"), count("unavailable"), count("refused")) == (1.0, 2.0, 1.0)
        timed = registry.get_sample_value(
            "kbear_meta_request_duration_seconds_count", {"location": URL, "path": "/route/producer"}
        )
        assert timed == 4.0
        assert "secret" not in repr([m.samples for m in registry.collect()])
        router.close()
    finally:
        uninstrument(registry)
