"""kbear.spark option helpers: translation of cluster properties, refused options,
per-cluster checkpoints. Pure Python: no pyspark, no Kafka needed."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kbear import NoRouteError, Router
from kbear.spark import (
    FORBIDDEN_READ_OPTIONS,
    SparkOptionsError,
    checkpoint_location,
    describe_options,
    kafka_options,
    translate_properties,
    write_options,
)

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


def _config(tmp_path: Path, clusters: dict[str, dict[str, str]], rules: list[dict[str, object]]) -> Router:
    (tmp_path / "clusters.yaml").write_text(
        yaml.safe_dump({"clusters": [{"id": c, "meta": m} for c, m in clusters.items()]})
    )
    (tmp_path / "route-rules.yaml").write_text(yaml.safe_dump({"route-rules": rules}))
    return Router.from_path(tmp_path)


@pytest.fixture
def router(tmp_path: Path) -> Router:
    return _config(
        tmp_path,
        {
            "east": {
                "bootstrap.servers": "e1:9092,e2:9092",
                "security.protocol": "sasl_ssl",
                "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": "app",
                "sasl.password": "s3cr3t-pw",
            },
            "west": {"bootstrap.servers": "w1:9092"},
        },
        [
            {"id": "g", "meta": {"rule.isGlobal": True}, "rule": "use cluster east"},
            {"id": "t", "meta": {"topic.id": "audit"}, "rule": "use cluster west, topic audit.v2"},
            {"id": "u", "meta": {"topic.id": "uat"}, "rule": "use cluster west when client.env=uat"},
        ],
    )


def test_plain_translates_to_plain_login_module() -> None:
    out = translate_properties(
        {
            "bootstrap.servers": "b:9092",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "PLAIN",
            "sasl.username": "u",
            "sasl.password": 'p"w\\x',
            "client.id": "billing",
            "debug": "all",
        }
    )
    assert out == {
        "kafka.bootstrap.servers": "b:9092",
        "kafka.security.protocol": "SASL_PLAINTEXT",
        "kafka.sasl.mechanism": "PLAIN",
        "kafka.sasl.jaas.config": f'{PLAIN} required username="u" password="p\\"w\\\\x";',
        "kafka.client.id": "billing",
    }


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_translates_to_scram_login_module(mechanism: str) -> None:
    out = translate_properties(
        {"bootstrap.servers": "b:1", "sasl.mechanism": mechanism, "sasl.username": "u", "sasl.password": "p"}
    )
    assert out["kafka.sasl.mechanism"] == mechanism
    assert out["kafka.sasl.jaas.config"] == f'{SCRAM} required username="u" password="p";'


def test_ssl_pem_files_become_pem_stores(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n")
    cert = tmp_path / "client.pem"
    cert.write_text("-----BEGIN CERTIFICATE-----\nC\n-----END CERTIFICATE-----\n")
    key = tmp_path / "client.key"
    key.write_text("-----BEGIN PRIVATE KEY-----\nK\n-----END PRIVATE KEY-----\n")
    out = translate_properties(
        {
            "bootstrap.servers": "b:1",
            "security.protocol": "SSL",
            "ssl.ca.location": str(ca),
            "ssl.certificate.location": str(cert),
            "ssl.key.location": str(key),
            "ssl.key.password": "kp",
            "ssl.endpoint.identification.algorithm": "none",
        }
    )
    assert out["kafka.ssl.truststore.type"] == "PEM"
    assert out["kafka.ssl.truststore.location"] == str(ca)
    assert out["kafka.ssl.keystore.type"] == "PEM"
    assert out["kafka.ssl.keystore.certificate.chain"] == cert.read_text()
    assert out["kafka.ssl.keystore.key"] == key.read_text()
    assert out["kafka.ssl.key.password"] == "kp"
    assert out["kafka.ssl.endpoint.identification.algorithm"] == ""
    shown = describe_options(out)
    assert shown["kafka.ssl.keystore.key"] == "***" and shown["kafka.ssl.key.password"] == "***"


def test_pkcs1_key_and_ca_directory_are_refused(tmp_path: Path) -> None:
    cert = tmp_path / "c.pem"
    cert.write_text("cert")
    key = tmp_path / "k.pem"
    key.write_text("-----BEGIN RSA PRIVATE KEY-----\nsecretkeymaterial\n-----END RSA PRIVATE KEY-----\n")
    with pytest.raises(SparkOptionsError) as info:
        translate_properties(
            {
                "bootstrap.servers": "b:1",
                "ssl.ca.location": str(tmp_path),
                "ssl.certificate.location": str(cert),
                "ssl.key.location": str(key),
            },
            cluster="east",
        )
    text = str(info.value)
    assert "PKCS#8" in text and "directory" in text and "east" in text
    assert "secretkeymaterial" not in text


def test_untranslatable_properties_are_listed_without_values() -> None:
    with pytest.raises(SparkOptionsError) as info:
        translate_properties(
            {
                "bootstrap.servers": "b:1",
                "ssl.cipher.suites": "TOPSECRETCIPHER",
                "enable.ssl.certificate.verification": "false",
                "sasl.username": "u",
                "sasl.password": "hunter2",
            },
            cluster="c1",
        )
    err = info.value
    assert len(err.problems) == 3
    text = str(err)
    assert "ssl.cipher.suites" in text and "enable.ssl.certificate.verification" in text
    assert "hunter2" not in text and "TOPSECRETCIPHER" not in text


def test_kafka_options_routes_and_remaps(router: Router) -> None:
    opts = kafka_options(["audit"], router=router, startingOffsets="earliest")
    assert opts["kafka.bootstrap.servers"] == "w1:9092"
    assert opts["subscribe"] == "audit.v2"
    assert opts["startingOffsets"] == "earliest"
    assert opts["groupIdPrefix"] == "spark-kafka-source-kbear-west"
    east = kafka_options("orders,payments", group="billing", router=router)
    assert east["subscribe"] == "orders,payments"
    assert east["groupIdPrefix"] == "billing-kbear-east"
    assert SCRAM in east["kafka.sasl.jaas.config"]
    assert "s3cr3t-pw" in east["kafka.sasl.jaas.config"]  # the options themselves carry the secret
    assert describe_options(east)["kafka.sasl.jaas.config"] == "***"
    assert "s3cr3t-pw" not in repr(describe_options(east))


def test_kafka_options_refuses_topics_on_several_clusters(router: Router) -> None:
    with pytest.raises(SparkOptionsError, match="read_stream"):
        kafka_options(["orders", "audit"], router=router)


@pytest.mark.parametrize("key", sorted(FORBIDDEN_READ_OPTIONS))
def test_forbidden_read_options_carry_the_advice(router: Router, key: str) -> None:
    with pytest.raises(SparkOptionsError) as info:
        kafka_options(["orders"], router=router, **{key: "x"})
    assert FORBIDDEN_READ_OPTIONS[key] in str(info.value)


def test_auto_offset_reset_refused_with_sparks_advice(router: Router) -> None:
    with pytest.raises(SparkOptionsError, match="Instead set the source option 'startingOffsets'"):
        kafka_options(["orders"], router=router, **{"KAFKA.auto.offset.reset": "earliest"})


def test_write_options(router: Router) -> None:
    opts = write_options("audit", router=router, **{"kafka.linger.ms": "5"})
    assert opts == {"kafka.bootstrap.servers": "w1:9092", "topic": "audit.v2", "kafka.linger.ms": "5"}
    with pytest.raises(SparkOptionsError, match="ByteArraySerializer"):
        write_options("audit", router=router, **{"kafka.value.serializer": "x"})


def test_no_route_names_the_topic(tmp_path: Path) -> None:
    router = _config(
        tmp_path,
        {"A": {"bootstrap.servers": "a:1"}},
        [{"id": "t", "meta": {"topic.id": "orders"}, "rule": "use cluster A when client.env=prod"}],
    )
    with pytest.raises(NoRouteError, match="orders"):
        kafka_options(["orders"], group="g", router=router)
    with pytest.raises(NoRouteError):
        write_options("orders", router=router)


def test_checkpoint_location_follows_the_routes(tmp_path: Path) -> None:
    clusters = {"A": {"bootstrap.servers": "a:1"}, "B": {"bootstrap.servers": "b:1"}}
    conf = tmp_path / "c"
    conf.mkdir()
    router = _config(conf, clusters, [{"id": "g", "meta": {"rule.isGlobal": True}, "rule": "use cluster A"}])
    first = checkpoint_location("/ckpt/", ["orders"], router=router)
    assert first.startswith("/ckpt/A-") and first == checkpoint_location("/ckpt", "orders", router=router)
    (conf / "route-rules.yaml").write_text(
        yaml.safe_dump(
            {"route-rules": [{"id": "g", "meta": {"rule.isGlobal": True}, "rule": "use cluster B"}]}
        )
    )
    router.reload()
    moved = checkpoint_location("/ckpt", ["orders"], router=router)
    assert moved.startswith("/ckpt/B-") and moved != first


def test_spark_error_pickles() -> None:
    err = pickle.loads(pickle.dumps(SparkOptionsError(["a", "b"])))
    assert err.problems == ["a", "b"]


def test_option_helpers_import_without_pyspark() -> None:
    code = (
        "import sys; sys.modules['pyspark'] = None\n"
        "import kbear.spark as s\n"
        "assert s.translate_properties({'bootstrap.servers': 'b:1'}) == {'kafka.bootstrap.servers': 'b:1'}\n"
        "try:\n    s.KBearDataSource\nexcept ImportError:\n    print('lazy')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "lazy"
