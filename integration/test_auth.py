"""Authentication really checked, on Apache Kafka: one KRaft cluster (a JVM process)
with four listeners, each a cluster of ``clusters.yaml``: ``plain`` (SASL_PLAINTEXT,
PLAIN), ``scram`` (SASL_PLAINTEXT, SCRAM-SHA-512, the user created through the
admin API), ``tls`` (SSL, a CA and broker certificate made by the test) and
``mtls`` (SSL with a client certificate required). Credentials live in the
environment (``${VAR}`` in ``clusters.yaml``).

Through each: RoutedProducer/RoutedConsumer, a client routed by ``kbear serve``,
and Spark's own connector with kbear's translated options move data. A wrong
password and an unknown CA give an error naming the cluster, never the secret;
no secret reaches a log record, an event, stdout or stderr of the run.

Runs on any backend (it starts its own Apache Kafka), skipped only without Java
and Maven (``integration/jvm.py``).
"""

from __future__ import annotations

import logging
import secrets
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("cryptography")

from confluent_kafka import KafkaError
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from integration.backends import RDKAFKA_LOG, BackendUnavailable, admin_create_topics
from integration.helpers import topic_rule, write_yaml_atomically
from integration.jvm import JvmUnavailable
from integration.pki import Pki, make_pki
from kbear import RoutedConsumer, RoutedProducer, _events

CLUSTERS = ("plain", "scram", "tls", "mtls")
PLAIN_USER, SCRAM_USER = "alice", "bob"
_PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
_SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
WAIT_S = 180.0
EARLIEST = {"startingOffsets": "earliest"}


@dataclass
class Secured:
    """The secured cluster: its listeners' bootstrap servers, the PKI, the passwords."""

    bootstrap: dict[str, str]  # clusters.yaml id -> bootstrap.servers of its listener
    plaintext: str  # the unauthenticated listener (admin, topic creation)
    pki: Pki
    plain_password: str
    scram_password: str

    @property
    def secrets(self) -> list[str]:
        """Every secret of the run, as text that must not appear in any output (the
        private key by its base64 body)."""
        key = self.pki.client_key.read_text().splitlines()[1]
        return [self.plain_password, self.scram_password, self.pki.keystore_password, key]


def _server_properties(pki: Pki, plain_password: str) -> dict[str, str]:
    keystore = {
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(pki.broker_keystore),
        "ssl.keystore.password": pki.keystore_password,
    }
    props = {
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
            f'{_PLAIN} required user_{PLAIN_USER}="{plain_password}";'
        ),
        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": f"{_SCRAM} required;",
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.mtls.ssl.truststore.type": "PEM",
        "listener.name.mtls.ssl.truststore.location": str(pki.ca),
    }
    for listener in ("ssl", "mtls"):
        props.update({f"listener.name.{listener}.{k}": v for k, v in keystore.items()})
    return props


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    try:
        from integration.kafka import KafkaCluster, Listener
    except ImportError as exc:  # the Apache Kafka launcher
        pytest.skip(f"integration/kafka.py missing: {exc}")
    directory = tmp_path_factory.mktemp("auth")
    pki = make_pki(directory / "pki")
    plain_password = f"plain-PLANTED-{secrets.token_hex(6)}"
    scram_password = f"scram-PLANTED-{secrets.token_hex(6)}"
    listeners = [Listener("SASL_PLAINTEXT"), Listener("SSL"), Listener("MTLS", "SSL")]
    try:
        cluster = KafkaCluster(
            "auth", directory, listeners=listeners, properties=_server_properties(pki, plain_password)
        )
    except (BackendUnavailable, JvmUnavailable) as exc:
        pytest.skip(f"Apache Kafka cannot start here: {exc}")
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap(), "logger": RDKAFKA_LOG})
        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
        upsert = UserScramCredentialUpsertion(SCRAM_USER, info, scram_password.encode())
        for future in admin.alter_user_scram_credentials([upsert]).values():
            future.result(timeout=60)
        sasl = cluster.bootstrap("SASL_PLAINTEXT")
        yield Secured(
            bootstrap={
                "plain": sasl,
                "scram": sasl,
                "tls": cluster.bootstrap("SSL"),
                "mtls": cluster.bootstrap("MTLS"),
            },
            plaintext=cluster.bootstrap(),
            pki=pki,
            plain_password=plain_password,
            scram_password=scram_password,
        )
    finally:
        cluster.close()


def cluster_meta(s: Secured, cluster: str, *, ca: Path | None = None) -> dict[str, str]:
    """The ``clusters.yaml`` meta of ``cluster``: passwords as ``${VAR}``."""
    meta = {"bootstrap.servers": s.bootstrap[cluster]}
    if cluster == "plain":
        meta.update(
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.username": PLAIN_USER,
                "sasl.password": "${KBEAR_IT_PLAIN_PASSWORD}",
            }
        )
    elif cluster == "scram":
        meta.update(
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": SCRAM_USER,
                "sasl.password": "${KBEAR_IT_SCRAM_PASSWORD}",
            }
        )
    else:
        meta.update({"security.protocol": "SSL", "ssl.ca.location": str(ca or s.pki.ca)})
        if cluster == "mtls":
            meta["ssl.certificate.location"] = str(s.pki.client_cert)
            meta["ssl.key.location"] = str(s.pki.client_key)
    return meta


def write_config(directory: Path, s: Secured, topics: dict[str, str], **metas: dict[str, str]) -> Path:
    """A configuration directory: the four clusters (``metas`` replaces some) and one
    topic rule per cluster (``topics``: cluster -> logical topic)."""
    directory.mkdir(parents=True, exist_ok=True)
    clusters = [{"id": c, "meta": metas.get(c) or cluster_meta(s, c)} for c in CLUSTERS]
    write_yaml_atomically(directory / "clusters.yaml", {"clusters": clusters})
    rules = [topic_rule(topic, cluster) for cluster, topic in topics.items()]
    write_yaml_atomically(directory / "route-rules.yaml", {"route-rules": rules})
    return directory


@pytest.fixture
def topics(secured: Secured, request: pytest.FixtureRequest) -> dict[str, str]:
    """A fresh topic per cluster (created on the plaintext listener: one broker)."""
    base = request.node.name.replace("[", "-").replace("]", "").replace("_", "-")[:40]
    names = {c: f"auth.{base}.{c}.{secrets.token_hex(3)}" for c in CLUSTERS}
    admin_create_topics(secured.plaintext, {t: 2 for t in names.values()})
    return names


@pytest.fixture
def watched(
    secured: Secured,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> Iterator[Callable[[], None]]:
    """The passwords in the environment; every log record (DEBUG and up, librdkafka's
    included), every kbear event and the process's stdout/stderr (file descriptors)
    captured. The returned check asserts that no secret appears in any of them."""
    monkeypatch.setenv("KBEAR_IT_PLAIN_PASSWORD", secured.plain_password)
    monkeypatch.setenv("KBEAR_IT_SCRAM_PASSWORD", secured.scram_password)
    events: list[Any] = []
    _events.subscribe(events.append)
    caplog.set_level(logging.DEBUG)

    def check() -> None:
        out, err = capfd.readouterr()
        # py4j's DEBUG records trace the Python-JVM wire protocol, every Spark option value
        # included (as for any option a user sets): not kbear's to hide; keep py4j at INFO
        records = [r for r in caplog.records if not r.name.startswith("py4j")]
        texts = {
            "log records": "\n".join(f"{r.name} {r.getMessage()} {r.__dict__}" for r in records),
            "events": "\n".join(repr(e) for e in events),
            "stdout": out,
            "stderr": err,
        }
        for where, text in texts.items():
            for secret in secured.secrets:
                assert secret not in text, f"a secret reached the {where}"

    try:
        yield check
    finally:
        _events.unsubscribe(events.append)


def produce_each(producer: Any, topics: dict[str, str], n: int) -> Counter[tuple[str, bytes]]:
    sent: Counter[tuple[str, bytes]] = Counter()
    errors: list[Any] = []

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    for cluster, topic in topics.items():
        for i in range(n):
            key = f"{cluster}-{i}".encode()
            producer.produce(topic, value=b"v", key=key, on_delivery=report)
            sent[(topic, key)] += 1
        producer.poll(0)
    assert producer.flush(60) == 0 and errors == []
    return sent


def consume_all(consumer: Any, wanted: int) -> Counter[tuple[str, bytes]]:
    got: Counter[tuple[str, bytes]] = Counter()
    deadline = time.monotonic() + 90
    while sum(got.values()) < wanted and time.monotonic() < deadline:
        for m in consumer.consume(500, 0.5):
            if m.error() is None:
                got[(m.topic(), bytes(m.key()))] += 1
    return got


def routed_clients_move_data(config: str, topics: dict[str, str], group: str) -> None:
    producer = RoutedProducer({"kbear.config": config, "logger": RDKAFKA_LOG, "kbear.reload.interval.ms": 0})
    try:
        sent = produce_each(producer, topics, 40)
        assert {c: producer.route(t).cluster_id for c, t in topics.items()} == {c: c for c in topics}
    finally:
        producer.close()
    consumer = RoutedConsumer(
        {
            "kbear.config": config,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "logger": RDKAFKA_LOG,
            "kbear.reload.interval.ms": 0,
        }
    )
    try:
        consumer.subscribe(list(topics.values()))
        assert consume_all(consumer, sum(sent.values())) == sent
    finally:
        consumer.close()


def test_routed_clients_authenticate_on_each_cluster(
    secured: Secured, topics: dict[str, str], watched: Callable[[], None], tmp_path: Path
) -> None:
    conf = write_config(tmp_path / "conf", secured, topics)
    text = (conf / "clusters.yaml").read_text()
    assert "${KBEAR_IT_PLAIN_PASSWORD}" in text and secured.plain_password not in text
    routed_clients_move_data(str(conf), topics, f"auth-routed-{secrets.token_hex(3)}")
    watched()


def test_clients_routed_by_kbear_serve_authenticate(
    secured: Secured,
    topics: dict[str, str],
    watched: Callable[[], None],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("uvicorn", reason="kbear serve needs the server extra")
    from kbear.server.embedded import EmbeddedMetaService

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    conf = write_config(tmp_path / "served", secured, topics)
    with EmbeddedMetaService(conf, watch_interval_s=0.5) as service:
        routed_clients_move_data(service.url, topics, f"auth-served-{secrets.token_hex(3)}")
    watched()


@dataclass
class Refusal:
    cluster: str
    meta: dict[str, str]
    secret: str | None  # the wrong password, which must not appear either


def refusals(s: Secured) -> list[Refusal]:
    wrong = f"wrong-PLANTED-{secrets.token_hex(4)}"
    plain = {**cluster_meta(s, "plain"), "sasl.password": wrong}
    scram = {**cluster_meta(s, "scram"), "sasl.password": wrong}
    return [
        Refusal("plain", plain, wrong),
        Refusal("scram", scram, wrong),
        Refusal("tls", cluster_meta(s, "tls", ca=s.pki.other_ca), None),
    ]


@pytest.mark.parametrize("case", range(3), ids=["plain-wrong-password", "scram-wrong-password", "unknown-ca"])
def test_a_refused_login_names_the_cluster_never_the_secret(
    case: int,
    secured: Secured,
    topics: dict[str, str],
    watched: Callable[[], None],
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    refusal = refusals(secured)[case]
    conf = write_config(tmp_path / "conf", secured, topics, **{refusal.cluster: refusal.meta})
    errors: list[KafkaError] = []
    producer = RoutedProducer(
        {
            "kbear.config": str(conf),
            "logger": RDKAFKA_LOG,
            "error_cb": errors.append,
            "message.timeout.ms": 5000,
            "kbear.reload.interval.ms": 0,
        }
    )
    try:
        producer.produce(topics[refusal.cluster], b"never")
        deadline = time.monotonic() + 60
        while not errors and time.monotonic() < deadline:
            producer.poll(0.2)
    finally:
        producer.close(10)
    assert errors, "no error reported"
    first = errors[0]
    if refusal.cluster == "tls":
        # librdkafka 2.16 reports the failed verification as _SSL or, depending on where
        # the handshake stood, _TRANSPORT (both seen here); either way it says so
        assert first.code() in (KafkaError._SSL, KafkaError._TRANSPORT), first
        assert "certificate verify failed" in first.str(), first
    else:
        assert first.code() == KafkaError._AUTHENTICATION, first
    assert first.str().startswith(f"cluster '{refusal.cluster}': "), first.str()
    logged = [r.getMessage() for r in caplog.records if r.name == "kbear.client"]
    assert any(f"cluster '{refusal.cluster}'" in m and "refused the connection" in m for m in logged)
    if refusal.secret is not None:
        assert all(refusal.secret not in e.str() for e in errors)
        assert refusal.secret not in caplog.text
    watched()


def _spark(spark_session: tuple[Any, str | None]) -> Any:
    session, missing = spark_session
    if missing is not None:
        pytest.skip(missing)
    return session


# 180-280 s alone (the secured cluster and the Spark session start inside it) on a
# 2-core machine at load 7-17; the default 300 s of pytest-timeout is too close
@pytest.mark.timeout(600)
def test_spark_connector_authenticates_with_translated_options(
    secured: Secured,
    topics: dict[str, str],
    watched: Callable[[], None],
    spark_session: tuple[Any, str | None],
    tmp_path: Path,
) -> None:
    """``read_stream``/``write_stream`` over Spark's connector, each cluster's options
    translated by kbear (``kafka.sasl.jaas.config``, PEM truststore and keystore)."""
    from pyspark.sql import functions as F

    from kbear.spark import read_stream, write_stream

    spark = _spark(spark_session)
    outs = {c: f"{t}.out" for c, t in topics.items()}
    admin_create_topics(secured.plaintext, {t: 1 for t in outs.values()})
    conf = write_config(tmp_path / "conf", secured, {**topics, **{f"{c}-out": t for c, t in outs.items()}})
    # one rule per topic: the out topics go to their own cluster too
    rules = [topic_rule(t, c) for c, t in topics.items()] + [topic_rule(t, c) for c, t in outs.items()]
    write_yaml_atomically(conf / "route-rules.yaml", {"route-rules": rules})
    producer = RoutedProducer({"kbear.config": str(conf), "logger": RDKAFKA_LOG})
    try:
        sent = produce_each(producer, topics, 30)
    finally:
        producer.close()

    df = read_stream(spark, list(topics.values()), config=str(conf), options=EARLIEST, source="kafka")
    to_out = F.create_map(*[x for c, t in outs.items() for x in (F.lit(c), F.lit(t))])
    # every message read from its cluster and written to its cluster's out topic, in
    # micro-batches until the backlog is done (availableNow): one query, few Spark jobs
    query = write_stream(
        df.select("key", "value", to_out[F.col("cluster")].alias("topic")),
        checkpoint=str(tmp_path / "ckpt"),
        config=str(conf),
        sink="kafka",
        trigger={"availableNow": True},
    )
    try:
        assert query.awaitTermination(WAIT_S), "the query did not finish its backlog"
        assert query.exception() is None, query.exception()
        progress = str(query.recentProgress)
    finally:
        query.stop()
    consumer = RoutedConsumer(
        {
            "kbear.config": str(conf),
            "group.id": f"auth-spark-{secrets.token_hex(3)}",
            "auto.offset.reset": "earliest",
            "logger": RDKAFKA_LOG,
        }
    )
    try:
        consumer.subscribe(list(outs.values()))
        copied = consume_all(consumer, sum(sent.values()))
    finally:
        consumer.close()
    assert copied == Counter({(f"{t}.out", k): n for (t, k), n in sent.items()})
    for secret in secured.secrets:
        assert secret not in progress
    watched()


@pytest.mark.timeout(600)  # alone, the secured cluster and the Spark session start inside it
def test_spark_connector_refused_login_never_shows_the_secret(
    secured: Secured,
    topics: dict[str, str],
    watched: Callable[[], None],
    spark_session: tuple[Any, str | None],
    tmp_path: Path,
) -> None:
    """A wrong password through Spark's connector: the query fails with the Java
    client's authentication error; the failed query's description names the cluster
    (kbear's ``cluster`` column of each cluster's source), never the password."""
    from kbear.spark import read_stream

    spark = _spark(spark_session)
    wrong = f"wrong-PLANTED-{secrets.token_hex(4)}"
    plain = {**cluster_meta(secured, "plain"), "sasl.password": wrong}
    conf = write_config(tmp_path / "conf", secured, {"plain": topics["plain"]}, plain=plain)
    df = read_stream(spark, [topics["plain"]], config=str(conf), options=EARLIEST, source="kafka")
    query = (
        df.writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    text = ""
    try:
        try:
            finished = query.awaitTermination(WAIT_S)
        except Exception as exc:  # pyspark's StreamingQueryException
            finished, text = True, str(exc)
        assert finished, "the query neither failed nor finished"
    finally:
        query.stop()
    assert "SaslAuthenticationException: Authentication failed" in text, text[:2000]
    assert "plain AS cluster" in text, text[:2000]
    for secret in (wrong, *secured.secrets):
        assert secret not in text
    watched()
