"""A cluster's standby and mirror in clusters.yaml (issue #27 item 1): meta-only
keys, checked when the configuration loads, refused by ``kbear validate``."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kbear.cli import main
from kbear.config import ConfigError, Failover, MirrorKind, ReplicationPolicy, load_config

RULES = [{"id": "r1", "meta": {"rule.isGlobal": True}, "rule": "use cluster east"}]


def write(directory: Path, **metas: dict[str, str]) -> Path:
    """clusters.yaml with one cluster per keyword (its meta beside bootstrap.servers)."""
    directory.mkdir(parents=True, exist_ok=True)
    clusters = [
        {"id": cid, "meta": {"bootstrap.servers": f"{cid}-1:9092", **meta}} for cid, meta in metas.items()
    ]
    (directory / "clusters.yaml").write_text(yaml.safe_dump({"clusters": clusters}))
    (directory / "route-rules.yaml").write_text(yaml.safe_dump({"route-rules": RULES}))
    return directory


def problems(directory: Path) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(directory)
    return [str(p) for p in info.value.problems]


def test_declared_standby_loads_meta_only(tmp_path: Path) -> None:
    conf = load_config(
        write(
            tmp_path,
            east={
                "kbear.failover.to": "west",
                "kbear.mirror": "mm2",
                "kbear.mirror.source.alias": "primary",
                "kbear.cluster.id": "MkU3OEVBNTcwNTJENDM2Qk",
            },
            west={"kbear.failover.to": "dr", "kbear.mirror": "identical"},
            dr={},
        )
    )
    east = conf.clusters["east"]
    assert east.failover == Failover(
        standby="west",
        mirror=MirrorKind.MM2,
        source_alias="primary",
        policy=ReplicationPolicy.DEFAULT,
        cluster_id="MkU3OEVBNTcwNTJENDM2Qk",
    )
    assert east.failover.remote_topic("orders") == "primary.orders"
    assert conf.clusters["west"].failover.remote_topic("orders") == "orders"
    assert conf.clusters["dr"].failover == Failover(
        None, MirrorKind.NONE, "dr", ReplicationPolicy.DEFAULT, None
    )
    # never given to a client
    assert not any(k.startswith("kbear.") for k in east.client_properties)
    assert {k for k in east.meta_only_keys if k.startswith("kbear.")} == {
        "kbear.failover.to",
        "kbear.mirror",
        "kbear.mirror.source.alias",
        "kbear.cluster.id",
    }


def test_identity_policy_keeps_the_name(tmp_path: Path) -> None:
    conf = load_config(
        write(
            tmp_path,
            east={
                "kbear.failover.to": "west",
                "kbear.mirror": "mm2",
                "kbear.mirror.replication.policy": "identity",
            },
            west={},
        )
    )
    assert conf.clusters["east"].failover.source_alias == "east"
    assert conf.clusters["east"].failover.remote_topic("orders") == "orders"


@pytest.mark.parametrize(
    ("metas", "expected"),
    [
        (
            {"east": {"kbear.failover.to": "wets"}, "west": {}},
            ["clusters.yaml: cluster 'east': meta 'kbear.failover.to': standby 'wets' is not a cluster"],
        ),
        (
            {"east": {"kbear.failover.to": "east"}},
            ["clusters.yaml: cluster 'east': meta 'kbear.failover.to': a cluster cannot be its own standby"],
        ),
        (
            {
                "east": {"kbear.failover.to": "west"},
                "west": {"kbear.failover.to": "dr"},
                "dr": {"kbear.failover.to": "east"},
            },
            [
                "clusters.yaml: cluster 'east': meta 'kbear.failover.to': the chain of standbys loops: "
                "east -> west -> dr -> east",
                "clusters.yaml: cluster 'west': meta 'kbear.failover.to': the chain of standbys loops: "
                "west -> dr -> east -> west",
                "clusters.yaml: cluster 'dr': meta 'kbear.failover.to': the chain of standbys loops: "
                "dr -> east -> west -> dr",
            ],
        ),
        (
            {"east": {"kbear.failover.to": "west", "kbear.mirror": "mm3"}, "west": {}},
            ["clusters.yaml: cluster 'east': meta 'kbear.mirror': unknown mirror kind 'mm3'"],
        ),
        (
            {"east": {"kbear.mirror": "mm2"}, "west": {}},
            ["clusters.yaml: cluster 'east': meta 'kbear.mirror': 'mm2' needs 'kbear.failover.to'"],
        ),
        (
            {"east": {"kbear.failover.to": "west", "kbear.mirror.source.alias": "a"}, "west": {}},
            ["clusters.yaml: cluster 'east': meta 'kbear.mirror.source.alias' applies to"],
        ),
        (
            {
                "east": {
                    "kbear.failover.to": "west",
                    "kbear.mirror": "mm2",
                    "kbear.mirror.replication.policy": "x",
                },
                "west": {},
            },
            ["clusters.yaml: cluster 'east': meta 'kbear.mirror.replication.policy': unknown policy 'x'"],
        ),
        (
            {"east": {"kbear.cluster.id": " "}},
            ["clusters.yaml: cluster 'east': meta 'kbear.cluster.id': ' ' is not a Kafka cluster id"],
        ),
        (
            {"east": {"kbear.failover.to": "west", "kbear.failover.active": "yes"}, "west": {}},
            ["clusters.yaml: cluster 'east': meta 'kbear.failover.active': 'yes' is not true or false"],
        ),
        (
            {"east": {"kbear.failover.active": "true"}, "west": {}},
            ["clusters.yaml: cluster 'east': meta 'kbear.failover.active': a cluster failed over needs"],
        ),
        (
            {
                "east": {"kbear.failover.to": "west", "kbear.failover.decided": "2026-11-28T15:20:03"},
                "west": {},
            },
            [
                "clusters.yaml: cluster 'east': meta 'kbear.failover.decided': "
                "'2026-11-28T15:20:03' is not an ISO"
            ],
        ),
    ],
    ids=[
        "unknown-standby",
        "itself",
        "loop",
        "mirror-kind",
        "mirror-no-standby",
        "alias-not-mm2",
        "policy",
        "id",
        "active-not-a-flag",
        "active-no-standby",
        "decided-no-offset",
    ],
)
def test_bad_keys_are_refused_naming_file_cluster_and_key(
    tmp_path: Path, metas: dict[str, dict[str, str]], expected: list[str]
) -> None:
    found = problems(write(tmp_path, **metas))
    assert len(found) == len(expected), found
    for got, prefix in zip(found, expected, strict=True):
        assert got.startswith(prefix), got


def test_kbear_validate_says_where_each_cluster_s_topics_go_once_failed_over(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = write(
        tmp_path,
        east={"kbear.failover.to": "west", "kbear.mirror": "mm2"},
        west={"kbear.failover.to": "dr", "kbear.mirror": "identical"},
        dr={},
    )
    assert main(["validate", "--config", str(conf)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("OK: 3 clusters")
    east, west = lines[1:]
    assert east.startswith("  failover east -> west (kbear.mirror: mm2): topics are MirrorMaker 2's copies")
    assert "'east.<topic>' on 'west'" in east and "producers write there too" in east
    assert west.startswith("  failover west -> dr (kbear.mirror: identical): topics keep their names on 'dr'")
    assert "producers write there" in west


def test_kbear_validate_refuses_a_loop(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conf = write(tmp_path, east={"kbear.failover.to": "west"}, west={"kbear.failover.to": "east"})
    code = main(["validate", "--config", str(conf)])
    err = capsys.readouterr().err
    assert code == 2
    assert "the chain of standbys loops: east -> west -> east" in err
    conf = write(tmp_path, east={"kbear.failover.to": "west", "kbear.mirror": "mm2"}, west={})
    assert main(["validate", "--config", str(conf)]) == 0


def test_lint_takes_the_keys_and_the_standby_as_intended(tmp_path: Path) -> None:
    """kbear's own cluster keys are meta only by design (no ``meta-only`` warning), and a
    standby no rule names is not an unused cluster; another meta-only key still is."""
    from kbear.lint import lint

    conf = load_config(
        write(
            tmp_path,
            east={"kbear.failover.to": "west", "kbear.mirror": "mm2", "kbear.cluster.id": "abc"},
            west={"zookeeper.connect": "zk:2181"},
            spare={},
        )
    )
    assert sorted((w.code, w.subject) for w in lint(conf)) == [
        ("meta-only", "cluster 'west'"),
        ("unused-cluster", "cluster 'spare'"),
    ]
