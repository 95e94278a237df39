"""kbear.metrics: scraped during a routed run with a live move, the figures agree with
what the clients reported; events are structured log records without secrets."""

from __future__ import annotations

import io
import json
import logging
import re
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from conftest import FAST_GROUP, consume_until, plain_producer, rewrite_rules, rule
from kbear import RoutedConsumer, RoutedProducer, Router
from kbear._events import FIELDS, ClientSnapshot, location
from kbear.demo import run_demo
from kbear.metrics import instrument, serve, uninstrument
from kbear.metrics._stats import StatsStore, families
from kbear.reload import ConfigWatcher
from kbear.testing import EmbeddedCluster

NO_WATCH = {"kbear.reload.interval.ms": 0}
KEYS = [f"key{i}".encode() for i in range(6)]
DASHBOARD = Path(__file__).resolve().parents[2] / "examples" / "grafana-dashboard.json"

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture
def registry() -> Iterator[CollectorRegistry]:
    """A registry instrumented with a short statistics interval, and its endpoint."""
    reg = CollectorRegistry()
    instrument(reg, stats_interval_ms=100)
    yield reg
    uninstrument(reg)


@pytest.fixture
def endpoint(registry: CollectorRegistry) -> Iterator[str]:
    server = serve(0, registry=registry)
    yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    server.shutdown()
    server.server_close()


def scrape_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as answer:
        return str(answer.read().decode())


def scrape(url: str) -> Samples:
    """sample name and labels -> value, of one scrape of ``url``."""
    out: Samples = {}
    for family in text_string_to_metric_families(scrape_text(url)):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sum of the samples ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


def labelsets(samples: Samples, name: str, **labels: str) -> list[dict[str, str]]:
    want = set(labels.items())
    return [dict(ls) for (n, ls), _ in samples.items() if n == name and want <= ls]


def produce_round(producer: RoutedProducer, topic: str, label: str, per_key: int, sent: list[Any]) -> int:
    for i in range(per_key):
        for key in KEYS:
            producer.produce(topic, f"{label}-{i}".encode(), key, on_delivery=lambda e, m: sent.append(e))
    return per_key * len(KEYS)


def wait_for(
    url: str, ready: Callable[[Samples], bool], clients: list[Any], timeout: float = 20.0
) -> Samples:
    """Scrape until ``ready`` (polling ``clients`` meanwhile: their statistics are served
    by poll()), at most ``timeout`` seconds; the last scrape."""
    deadline = time.monotonic() + timeout
    samples = scrape(url)
    while not ready(samples) and time.monotonic() < deadline:
        for client in clients:
            got = client.poll(0.05)  # a producer answers with a count of events served
            if isinstance(client, RoutedConsumer):
                assert got is None or got.error() is not None  # everything was consumed before
        samples = scrape(url)
    return samples


def rules_for(cluster: str, topic: str) -> list[dict[str, Any]]:
    """``topic`` on ``cluster``; every other topic on B (so A is not the only cluster:
    the producer routes per topic)."""
    return [
        rule("move", f"use cluster {cluster}", topic=topic),
        rule("global", "use cluster B", isGlobal=True),
    ]


def test_a_client_snapshot_is_what_the_metrics_read_and_nothing_once_closed(
    two_clusters: tuple[EmbeddedCluster, EmbeddedCluster],
    make_config: Callable[..., Path],
    unique: Callable[[str], str],
) -> None:
    """``snapshot()`` (kbear_route_info, kbear_drains_in_progress, kbear_config_info
    read it at scrape time): kind, client.id, group, the routes in use, drains in
    progress, the configuration in force; None once the client is closed."""
    topic = unique("snap")
    for cluster in two_clusters:
        cluster.create_topic(topic, 1)
    conf_dir = make_config(rules_for("A", topic))
    router = Router.from_path(conf_dir)
    producer = RoutedProducer({**NO_WATCH, "client.id": "app-p"}, router=router)
    native = {**NO_WATCH, **FAST_GROUP, "group.id": "g", "client.id": "app-c"}
    consumer = RoutedConsumer(native, router=router)
    try:
        producer.produce(topic, b"v")
        consumer.subscribe([topic])
        where = (str(conf_dir), router.config.digest)
        assert producer.snapshot() == ClientSnapshot(
            "producer", "app-p", "", {topic: router.route_producer(topic)}, 0, *where
        )
        assert consumer.snapshot() == ClientSnapshot(
            "consumer", "app-c", "g", {topic: router.route_consumer(topic, "g")}, 0, *where
        )
    finally:
        producer.close(10)
        consumer.close()
        router.close()
    assert producer.snapshot() is None and consumer.snapshot() is None


def test_a_routed_run_with_a_live_move_is_scraped_as_the_clients_reported(
    two_clusters: tuple[EmbeddedCluster, EmbeddedCluster],
    make_config: Callable[..., Path],
    unique: Callable[[str], str],
    closing: Callable[[Any], Any],
    endpoint: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = unique("moving")
    for cluster in two_clusters:
        cluster.create_topic(topic, 3)
    conf_dir = make_config(rules_for("A", topic))
    router = Router.from_path(conf_dir)
    group = topic + ".group"
    producer = closing(RoutedProducer({**NO_WATCH, "client.id": "app-p"}, router=router))
    consumer = closing(
        RoutedConsumer(
            {
                **NO_WATCH,
                **FAST_GROUP,
                "group.id": group,
                "client.id": "app-c",
                "kbear.switch.drain.idle.ms": 200,
            },
            router=router,
        )
    )
    consumer.subscribe([topic])
    reports: list[Any] = []
    on_a = produce_round(producer, topic, "A", 4, reports)
    assert producer.flush(10) == 0
    got = consume_until(consumer, on_a)
    assert len(got) == on_a

    def routes_on(cluster: str) -> Callable[[Samples], bool]:
        def ready(s: Samples) -> bool:
            return {(d["kind"], d["cluster"]) for d in labelsets(s, "kbear_route_info", topic=topic)} == {
                ("producer", cluster),
                ("consumer", cluster),
            }

        return ready

    before = wait_for(endpoint, routes_on("A"), [consumer])
    assert routes_on("A")(before)
    assert {d["rule"] for d in labelsets(before, "kbear_route_info", topic=topic)} == {"move"}

    # the move: the producer drains A and sends to B; the consumer drains A, then reads B
    caplog.set_level(logging.INFO, logger="kbear")
    rewrite_rules(conf_dir, rules_for("B", topic))
    assert router.reload() is True
    on_b = produce_round(producer, topic, "B", 3, reports)
    assert producer.flush(10) == 0
    got += consume_until(consumer, on_b, timeout=20)
    assert len(got) == on_a + on_b
    assert all(e is None for e in reports) and len(reports) == on_a + on_b

    # a refused reload: a rule naming an unknown cluster (seen twice: it held still)
    rewrite_rules(conf_dir, [rule("broken", "use cluster Nowhere", isGlobal=True)])
    watcher = ConfigWatcher(router, conf_dir, 60)
    watcher.check()
    watcher.check()

    def final(s: Samples) -> bool:
        counts = [
            value(s, "kbear_producer_transmitted_messages_total", cluster="A", topic=topic),
            value(s, "kbear_producer_transmitted_messages_total", cluster="B", topic=topic),
            value(s, "kbear_consumer_messages_total", cluster="A", topic=topic),
            value(s, "kbear_consumer_messages_total", cluster="B", topic=topic),
        ]
        rtt = labelsets(s, "kbear_rdkafka_broker_rtt_seconds", client="app-c", cluster="B", stat="avg")
        # the committed offset reaches the statistics after the (auto-)commit
        committed = labelsets(s, "kbear_consumer_committed_offset", client="app-c", cluster="B", topic=topic)
        return counts == [on_a, on_b, on_a, on_b] and routes_on("B")(s) and bool(rtt) and bool(committed)

    after = wait_for(endpoint, final, [consumer, producer])
    # produced / delivered / consumed per cluster and topic: what the clients reported
    for cluster, count in (("A", on_a), ("B", on_b)):
        where = {"cluster": cluster, "topic": topic, "client": "app-p"}
        assert value(after, "kbear_producer_messages_total", **where) == count
        assert value(after, "kbear_producer_transmitted_messages_total", **where) == count
        assert value(after, "kbear_producer_transmitted_bytes_total", **where) > 0
        assert (
            value(after, "kbear_consumer_messages_total", cluster=cluster, topic=topic, client="app-c")
            == count
        )
    assert value(after, "kbear_producer_in_flight_messages", client="app-p") == 0
    # the route info switched from A to B, rule "move"
    assert routes_on("B")(after)
    # one route change each, A -> B
    for kind, client in (("producer", "app-p"), ("consumer", "app-c")):
        where = {"kind": kind, "client": client, "topic": topic}
        assert value(after, "kbear_route_changes_total", **where) == 1
        assert value(after, "kbear_route_changes_total", old_cluster="A", new_cluster="B", **where) == 1
    # one consumer drain on A, complete, with its duration (at least the idle time)
    assert value(after, "kbear_drains_started_total", kind="consumer", topic=topic, cluster="A") == 1
    assert value(after, "kbear_drains_finished_total", kind="consumer", topic=topic, outcome="complete") == 1
    assert value(after, "kbear_drain_duration_seconds_count", kind="consumer", cluster="A") == 1
    assert value(after, "kbear_drain_duration_seconds_sum", kind="consumer", cluster="A") >= 0.2
    assert value(after, "kbear_drains_in_progress", kind="consumer") == 0
    # everything on A was read before the move: the drain read nothing more there
    assert value(after, "kbear_drain_messages_total", kind="consumer", topic=topic, cluster="A") == 0
    assert value(after, "kbear_switch_timeouts_total", topic=topic) == 0
    # the producer's drain (a flush of A) too
    assert value(after, "kbear_drains_finished_total", kind="producer", topic=topic, cluster="A") == 1
    # the reload applied and the one refused; the digest in force is the applied one
    location = str(conf_dir)
    assert value(after, "kbear_config_reloads_total", result="applied", location=location) == 1
    assert (
        value(after, "kbear_config_reloads_total", result="refused", reason="invalid", location=location) == 1
    )
    assert labelsets(after, "kbear_config_info", location=location) == [
        {"location": location, "digest": router.config.digest}
    ]
    assert 0 <= value(after, "kbear_config_seconds_since_reload", location=location) < 60
    # librdkafka's own figures per cluster client
    assert labelsets(after, "kbear_rdkafka_broker_rtt_seconds", client="app-c", cluster="B", stat="avg")
    assert labelsets(after, "kbear_consumer_committed_offset", client="app-c", cluster="B", topic=topic)

    # the same events as structured log records
    events = [(r.event, r.topic, r.cluster) for r in caplog.records if getattr(r, "event", None)]  # type: ignore[attr-defined]
    assert ("route_change", topic, "B") in events
    assert ("drain_started", topic, "A") in events
    assert ("drain_finished", topic, "A") in events
    assert ("reload_refused", None, None) in events
    moved = [r for r in caplog.records if getattr(r, "event", None) == "route_change"]
    assert {r.rule for r in moved} == {"move"} and {r.old_cluster for r in moved} == {"A"}  # type: ignore[attr-defined]
    router.close()


def test_the_dashboard_queries_only_metrics_a_run_exports(
    two_clusters: tuple[EmbeddedCluster, EmbeddedCluster],
    make_config: Callable[..., Path],
    unique: Callable[[str], str],
    closing: Callable[[Any], Any],
    endpoint: str,
) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    queried = {m for e in exprs for m in re.findall(r"\bkbear_[a-z0-9_]+", e)}
    assert len(queried) >= 8
    # a short run: a move of a produced and consumed topic
    topic = unique("dash")
    for cluster in two_clusters:
        cluster.create_topic(topic, 1)
    conf_dir = make_config(rules_for("A", topic))
    router = Router.from_path(conf_dir)
    producer = closing(RoutedProducer(NO_WATCH, router=router))
    consumer = closing(
        RoutedConsumer(
            {
                **NO_WATCH,
                **FAST_GROUP,
                "group.id": topic,
                "kbear.switch.drain.idle.ms": 100,
                # A is not mirrored to B: the translated start falls back (the mirrored-starts panel)
                "kbear.switch.start": "translated",
            },
            router=router,
        )
    )
    consumer.subscribe([topic])
    producer.produce(topic, b"a")
    producer.flush(10)
    assert len(consume_until(consumer, 1)) == 1
    rewrite_rules(conf_dir, rules_for("B", topic))
    router.reload()
    producer.produce(topic, b"b")
    producer.flush(10)
    assert len(consume_until(consumer, 1)) == 1
    # ... and a failover: B (standby: A) down, a producer that fails over itself
    # sends to A what B's client held (the failover panels)
    b = two_clusters[1]
    clusters_yaml = conf_dir / "clusters.yaml"
    clusters_yaml.write_text(
        clusters_yaml.read_text().replace(
            f"bootstrap.servers: {b.bootstrap_servers}",
            f"bootstrap.servers: {b.bootstrap_servers}\n    kbear.failover.to: A",
        )
    )
    router.reload()
    failing = closing(
        RoutedProducer(
            {**NO_WATCH, "kbear.failover.enable": True, "kbear.failover.after.ms": 300}, router=router
        )
    )
    other = unique("other")  # on B (the global rule)
    for cluster in two_clusters:
        cluster.create_topic(other, 1)
    failing.produce(other, b"warm")
    assert failing.flush(10) == 0
    b.set_broker_down(-1)
    try:
        reports: list[Any] = []
        failing.produce(other, b"stuck", callback=lambda err, msg: reports.append(err))
        assert failing.flush(10) == 0  # failed over to A inside: taken back, delivered there
        assert failing.route(other).cluster_id == "A" and reports == [None]
    finally:
        b.set_broker_up(-1)

    def exported(s: Samples) -> set[str]:
        return {n for n, _ in s}

    def complete(s: Samples) -> bool:
        names = exported(s)
        return all(any(n == q or n.startswith(q + "_") for n in names) for q in queried)

    samples = wait_for(endpoint, complete, [consumer, producer])
    missing = sorted(
        q for q in queried if not any(n == q or n.startswith(q + "_") for n in exported(samples))
    )
    assert missing == []
    router.close()


def test_the_applications_stats_cb_keeps_working(
    two_clusters: tuple[EmbeddedCluster, EmbeddedCluster],
    make_router: Callable[..., Router],
    closing: Callable[[Any], Any],
    registry: CollectorRegistry,
) -> None:
    router = make_router([rule("all", "use cluster A", isGlobal=True)])
    seen: list[str] = []
    mine = closing(
        RoutedProducer({**NO_WATCH, "statistics.interval.ms": 100, "stats_cb": seen.append}, router=router)
    )
    # a stats_cb without statistics.interval.ms was never called: kbear's interval does not change that
    silent: list[str] = []
    other = closing(RoutedProducer({**NO_WATCH, "stats_cb": silent.append}, router=router))
    deadline = time.monotonic() + 10
    while not seen and time.monotonic() < deadline:
        mine.poll(0.05)
        other.poll(0.05)
    assert seen and json.loads(seen[-1])["type"] == "producer"
    other.poll(0.3)
    assert silent == []


def test_the_enable_key_instruments_the_process(
    make_router: Callable[..., Router], closing: Callable[[Any], Any]
) -> None:
    router = make_router([rule("all", "use cluster A", isGlobal=True)])
    with pytest.raises(ValueError, match=r"kbear\.metrics\.enable"):
        RoutedProducer({**NO_WATCH, "kbear.metrics.enable": "yes"}, router=router)
    from prometheus_client import REGISTRY

    try:
        closing(RoutedProducer({**NO_WATCH, "kbear.metrics.enable": "true"}, router=router))
        assert REGISTRY.get_sample_value("kbear_drains_in_progress", {"kind": "producer"}) == 0
    finally:
        uninstrument()
    assert REGISTRY.get_sample_value("kbear_drains_in_progress", {"kind": "producer"}) is None


SECRETS = ("pw-PLANTED-1", "jaas-PLANTED-2")
SECRET_CLUSTERS = """\
clusters:
  - id: {cid}
    meta:
      bootstrap.servers: {servers}
      security.protocol: SASL_PLAINTEXT
      sasl.mechanism: PLAIN
      sasl.username: app
      sasl.password: pw-PLANTED-1
      sasl.jaas.config: org.apache...PlainLoginModule required password="jaas-PLANTED-2";
"""


def test_no_secret_in_events_logs_or_metrics(
    tmp_path: Path, closing: Callable[[Any], Any], endpoint: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Clusters whose properties carry credentials: a move, its drain and a refused
    reload (whose file holds a credential) leave them out of every record and scrape."""
    clusters = SECRET_CLUSTERS.format(cid="P", servers="127.0.0.1:1") + SECRET_CLUSTERS.format(
        cid="Q", servers="127.0.0.1:2"
    ).replace("clusters:\n", "")
    (tmp_path / "clusters.yaml").write_text(clusters)
    rewrite_rules(
        tmp_path, [rule("t", "use cluster P", topic="t"), rule("g", "use cluster Q", isGlobal=True)]
    )
    router = Router.from_path(tmp_path)
    caplog.set_level(logging.DEBUG, logger="kbear")
    producer = closing(
        RoutedProducer({**NO_WATCH, "kbear.switch.drain.timeout.ms": 100}, router=router, topics=["t"])
    )
    rewrite_rules(
        tmp_path, [rule("t", "use cluster Q", topic="t"), rule("g", "use cluster Q", isGlobal=True)]
    )
    router.reload()
    assert producer.route("t").cluster_id == "Q"
    (tmp_path / "clusters.yaml").write_text(clusters.replace("bootstrap.servers: 127.0.0.1:2", "nope: 1"))
    watcher = ConfigWatcher(router, tmp_path, 60)
    watcher.check()
    watcher.check()
    records = [r for r in caplog.records if getattr(r, "event", None)]
    assert {r.event for r in records} >= {"route_change", "drain_started", "drain_finished", "reload_refused"}  # type: ignore[attr-defined]
    for r in caplog.records:
        shown = r.getMessage() + " ".join(str(getattr(r, f, "")) for f in (*FIELDS, "location"))
        for secret in SECRETS:
            assert secret not in shown
    text = scrape_text(endpoint)
    assert 'kbear_config_reloads_total{location="' in text and 'result="refused"' in text
    for secret in SECRETS:
        assert secret not in text
    router.close()


def test_the_demo_serves_metrics_that_agree_with_its_table() -> None:
    out = io.StringIO()
    try:
        assert run_demo(messages=40, out=out, metrics_port=0) == 0, out.getvalue()
    finally:
        uninstrument()
    text = out.getvalue()
    assert re.search(r"^metrics: http://127\.0\.0\.1:\d+/metrics$", text, re.M)
    assert "metrics: the scrape agrees with the table" in text


def test_a_meta_service_url_is_shown_without_credentials_or_query() -> None:
    url = "https://app:pw-PLANTED-1@meta.example:8443/kbear?token=jaas-PLANTED-2#frag"
    assert location(url) == "https://meta.example:8443/kbear"
    assert location("/etc/kbear") == "/etc/kbear"


def test_partition_counters_keep_counting_across_a_client_restart_of_them() -> None:
    """A partition that leaves a client and comes back restarts librdkafka's counters:
    the exported total keeps what was counted before."""
    store = StatsStore(100)
    conf: dict[str, Any] = {"client.id": "c1"}
    store.configure("producer", "A", conf)
    assert conf["statistics.interval.ms"] == 100
    for txmsgs in (5, 7, 2):
        part = {"msgs": txmsgs, "txmsgs": txmsgs, "msgq_cnt": 0, "xmit_msgq_cnt": 0}
        conf["stats_cb"](json.dumps({"type": "producer", "topics": {"t": {"partitions": {"0": part}}}}))
    sent = {
        tuple(s.labels.values()): s.value
        for family in families(store, {("producer", "c1", "A", "t"): "logical"})
        for s in family.samples
        if s.name == "kbear_producer_transmitted_messages_total"
    }
    assert sent == {("c1", "A", "logical", "t"): 9}


# --------------------------------------------------------------------------- what the application got


def _total(registry: CollectorRegistry, name: str, **labels: str) -> float:
    want = labels.items()
    return sum(
        s.value for f in registry.collect() for s in f.samples if s.name == name and want <= s.labels.items()
    )


@pytest.mark.parametrize("batch", [None, 7], ids=["poll", "consume"])
def test_consumer_messages_are_what_the_application_got_after_a_seek_back(
    batch: int | None,
    two_clusters: tuple[EmbeddedCluster, EmbeddedCluster],
    make_config: Callable[..., Path],
    unique: Callable[[str], str],
    closing: Callable[[Any], Any],
    registry: CollectorRegistry,
) -> None:
    a, _b = two_clusters
    topic = unique("seek")
    a.create_topic(topic, 1)
    producer = plain_producer(a)
    for i in range(300):
        producer.produce(topic, f"m{i}".encode())
    assert producer.flush(10) == 0
    conf = make_config([rule("all", "use cluster A", isGlobal=True)])
    consumer = closing(
        RoutedConsumer(
            {"kbear.config": str(conf), **FAST_GROUP, "group.id": unique("g"), "client.id": "app-c"}
        )
    )
    consumer.subscribe([topic])
    got = consume_until(consumer, 40, batch=batch)
    # librdkafka fetched ahead of what was handed out; seeking back drops those
    # records, which are fetched again.
    consumer.seek(TopicPartition(topic, 0, 0))
    got += consume_until(consumer, 40, batch=batch)
    handed = len(got)
    assert handed >= 80
    where = {"client": "app-c", "cluster": "A", "topic": topic}
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        fetched = _total(registry, "kbear_consumer_fetched_messages_total", **where)
        if fetched > handed and _total(registry, "kbear_consumer_messages_total", **where) > 0:
            break
        msg = consumer.poll(0.1)  # statistics are served by poll(); nothing is left to hand out?
        if msg is not None and msg.error() is None:
            handed += 1
    assert _total(registry, "kbear_consumer_messages_total", **where) == handed
    assert _total(registry, "kbear_consumer_fetched_messages_total", **where) > handed


def test_mirrored_starts_are_counted_translated_or_fallback_per_cluster_and_topic(
    registry: CollectorRegistry,
) -> None:
    """#27 item 7: the partitions a group started from the mirror (translated: a
    checkpoint, an offset sync, an identical mirror's offsets) or not (fallback: the
    committed offsets), per cluster and topic, as the consumer reports them."""
    from kbear import _events

    for decided_by, partitions in (("checkpoint", 2), ("offset-sync", 1), ("committed", 3)):
        _events.emit(_events.MirroredStart("consumer", "orders", "west", "east", decided_by, partitions))
    _events.emit(_events.MirroredStart("consumer", "orders", "west", "east", "checkpoint", 1))

    def count(start: str, decided_by: str) -> float | None:
        labels = {"kind": "consumer", "cluster": "west", "topic": "orders", "source": "east"}
        return registry.get_sample_value(
            "kbear_mirrored_starts_total", {**labels, "start": start, "decided_by": decided_by}
        )

    assert count("translated", "checkpoint") == 3
    assert count("translated", "offset-sync") == 1
    assert count("fallback", "committed") == 3
    assert count("fallback", "checkpoint") is None
