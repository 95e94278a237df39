"""KBear's own files load unchanged (issue #12, item 1).

Test data: tests/data/kbear/, copied unchanged from ctripcorp/kbear (see its README).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from _kbear_files import HELLO, KBEAR_DATA, kbear_copy

from kbear import Client, ConfigError, RoutedProducer, Router, load_config
from kbear.cli import main
from kbear.lint import lint
from kbear.testing import EmbeddedCluster

NEGATIVE_CASES = {"r100101", "r100102", "r100103", "r100104", "r100105"}


def test_kbear_files_load_unchanged_and_the_negative_rules_are_ignored() -> None:
    """The five rules KBear's tests mark "no required meta key, should be ignored,
    negative case" take part in no lookup: ignored, and each named by ``kbear lint``."""
    config = load_config(KBEAR_DATA)
    assert not NEGATIVE_CASES & {r.id for r in config.rules}
    reasons = dict(config.ignored_rules)
    assert set(reasons) == {f"rule '{r}'" for r in NEGATIVE_CASES}
    kindless = {e for e, why in reasons.items() if "rule of no kind" in why}
    half_group = {e for e, why in reasons.items() if "needs both consumerGroup.groupName and" in why}
    assert kindless == {"rule 'r100101'", "rule 'r100102'", "rule 'r100105'"}
    assert half_group == {"rule 'r100103'", "rule 'r100104'"}
    ignored = {w.subject for w in lint(config) if w.code == "ignored-rule"}
    assert ignored == {f"rule '{r}'" for r in NEGATIVE_CASES}


def test_flat_consumer_groups_and_zookeeper_meta_load(tmp_path: Path) -> None:
    config = load_config(kbear_copy(tmp_path))
    assert set(config.consumer_groups) == {
        ("fx.kafka.demo.hello.run.consumer", HELLO),
        ("fx.hellobom.string.consumer", "fx.hellobom.string"),
        ("fx.hellobom.string.consumer", HELLO),
    }
    assert config.consumer_groups[("fx.hellobom.string.consumer", HELLO)].meta == {"bu": "basebiz"}
    fws = config.clusters["fws"]
    assert fws.meta["zookeeper.connect"].startswith("10.2.7.137:2181")
    assert "zookeeper.connect" not in fws.client_properties
    assert fws.client_properties == {"bootstrap.servers": fws.bootstrap_servers}
    assert fws.meta_only_keys == ["zookeeper.connect"]


def test_kbear_files_route_as_the_spec_says(tmp_path: Path) -> None:
    router = Router.from_path(kbear_copy(tmp_path))
    assert router.route_producer(HELLO).cluster_id == "uat"  # r100002
    assert router.route_producer(HELLO, Client("100000001")).rule_id == "r100003"  # priority 1
    assert router.route_producer("other.topic").cluster_id == "fws"  # r100001
    uat = Client(None, {"env": "UAT"})
    assert router.route_producer("other.topic", uat).rule_id == "r100006"
    remapped = router.route_consumer(HELLO, "fx.hellobom.string.consumer")
    assert (remapped.cluster_id, remapped.topic, remapped.rule_id) == ("fws", "fx.hellobom.string", "r100005")
    assert router.route_consumer(HELLO, "fx.hellobom.string.consumer", uat).cluster_id == "uat"
    assert router.route_consumer(HELLO, "fx.kafka.demo.hello.run.consumer").cluster_id == "prod"
    route = router.route_producer(HELLO)
    assert "zookeeper.connect" not in route.properties


def test_kbear_files_build_working_clients(tmp_path: Path) -> None:
    cluster = EmbeddedCluster()
    try:
        conf = kbear_copy(tmp_path, servers=cluster.bootstrap_servers)
        producer = RoutedProducer({"kbear.config": str(conf), "kbear.reload.interval.ms": 0})
        try:
            producer.produce(HELLO, b"hello")
            assert producer.flush(10) == 0
        finally:
            producer.close()
    finally:
        cluster.close()


GROUPS_HEAD = "consumer-groups:\n"


def write_groups(directory: Path, entries: str) -> Path:
    clean = kbear_copy(directory)
    (clean / "consumer-groups.yaml").write_text(GROUPS_HEAD + entries)
    return clean


def test_flat_and_nested_group_ids_are_the_same(tmp_path: Path) -> None:
    flat = load_config(
        write_groups(tmp_path / "flat", "  - groupName: g\n    topicId: t\n    meta: {bu: x}\n")
    )
    nested = load_config(
        write_groups(tmp_path / "nested", "  - id: {groupName: g, topicId: t}\n    meta: {bu: x}\n")
    )
    assert flat.consumer_groups == nested.consumer_groups
    assert flat.consumer_groups[("g", "t")].meta == {"bu": "x"}


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ("  - id: {groupName: g, topicId: t}\n    groupName: g\n    topicId: t\n", "written twice"),
        ("  - groupName: g\n    meta: {bu: x}\n", "'groupName' without 'topicId'"),
        ("  - topicId: t\n", "'topicId' without 'groupName'"),
    ],
)
def test_bad_group_ids_are_refused(tmp_path: Path, entry: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(write_groups(tmp_path / "conf", entry))
    (problem,) = info.value.problems
    assert problem.file == "consumer-groups.yaml"
    assert problem.entry == "entry 1"
    assert expected in problem.message


def with_cluster_meta(tmp_path: Path, **meta: str) -> Path:
    conf = kbear_copy(tmp_path)
    clusters = yaml.safe_load((conf / "clusters.yaml").read_text())
    clusters["clusters"][1]["meta"].update(meta)  # uat
    (conf / "clusters.yaml").write_text(yaml.safe_dump(clusters, sort_keys=False))
    return conf


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        ("acks", "banana", "Invalid value"),
        ("message.max.bytes", "1", "outside allowed range"),
        ("compression.type", "zip", "Invalid value"),
    ],
)
def test_a_property_librdkafka_refuses_is_a_load_error(
    tmp_path: Path, key: str, value: str, reason: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(with_cluster_meta(tmp_path, **{key: value}))
    (problem,) = info.value.problems
    assert (problem.file, problem.entry) == ("clusters.yaml", "cluster 'uat'")
    assert f"meta '{key}'" in problem.message
    assert reason in problem.message


def test_validate_names_cluster_and_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--config", str(with_cluster_meta(tmp_path, acks="banana"))]) == 2
    err = capsys.readouterr().err
    assert "clusters.yaml: cluster 'uat': meta 'acks': librdkafka refuses it" in err


def test_accepted_properties_reach_clients(tmp_path: Path) -> None:
    config = load_config(with_cluster_meta(tmp_path, acks="all", **{"linger.ms": "5"}))
    props = config.clusters["uat"].client_properties
    assert props["acks"] == "all"
    assert props["linger.ms"] == "5"
    assert "zookeeper.connect" not in props


def test_lint_warns_about_meta_that_never_reaches_clients(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = with_cluster_meta(tmp_path, **{"sasl.pasword": "typo"})
    warnings = [w for w in lint(load_config(conf)) if w.code == "meta-only"]
    assert {(w.subject, w.message.split(":")[0]) for w in warnings} == {
        ("cluster 'fws'", "meta 'zookeeper.connect'"),
        ("cluster 'uat'", "meta 'zookeeper.connect'"),
        ("cluster 'uat'", "meta 'sasl.pasword'"),
        ("cluster 'prod'", "meta 'zookeeper.connect'"),
    }
    assert main(["lint", "--config", str(conf)]) == 1
    out = capsys.readouterr().out
    assert "clusters.yaml: cluster 'uat': meta 'sasl.pasword': not a librdkafka client property" in out
    assert "typo" not in out


def test_java_only_property_stays_meta(tmp_path: Path) -> None:
    jaas = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="p";'
    config = load_config(with_cluster_meta(tmp_path, **{"sasl.jaas.config": jaas}))
    uat = config.clusters["uat"]
    assert uat.meta["sasl.jaas.config"] == jaas
    assert "sasl.jaas.config" not in uat.client_properties
    (warning,) = [w for w in lint(config) if "sasl.jaas.config" in w.message]
    assert "Java client property" in warning.message


def test_the_property_check_uses_librdkafka_even_when_confluent_kafka_is_patched(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The check asks librdkafka's own client class, bound at import: an application
    (or a test harness, as scripts/compat does) that rebinds ``confluent_kafka.Producer``
    must not be called by it (the harness's routed class deadlocked there)."""
    import confluent_kafka

    from kbear.config import _librdkafka

    def stand_in(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the property check called confluent_kafka.Producer")

    monkeypatch.setattr(confluent_kafka, "Producer", stand_in)
    assert _librdkafka._probe.__wrapped__("acks", "banana") is not None  # refused by librdkafka
    assert _librdkafka._probe.__wrapped__("acks", "all") is None
    assert _librdkafka._probe.__wrapped__("zookeeper.connect", "zk:2181") == _librdkafka._UNKNOWN
