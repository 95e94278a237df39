"""The route of a failed-over cluster's topic on its standby (issue #27): the mirror's
copy, read and written there (docs/concepts/failover.md, "Topic names on the standby").

Under MirrorMaker 2's default replication policy, ``east``'s topic ``T`` is
``<alias>.T`` on ``west``: a failed-over consumer reads that copy (where ``east``'s
messages are, at translated offsets) and a failed-over producer writes it (one log
for the mirrored past and the new writes: nothing lost, nothing read twice beyond
the mirror's sync lag). Under the identity policy, an identical mirror or none: the
topic's own name."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kbear._standby import standby_route
from kbear.config import load_config
from kbear.router import Router


def write(directory: Path, rule: str, **metas: dict[str, str]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    clusters = [
        {"id": cid, "meta": {"bootstrap.servers": f"{cid}-1:9092", **meta}} for cid, meta in metas.items()
    ]
    (directory / "clusters.yaml").write_text(yaml.safe_dump({"clusters": clusters}))
    rules = [{"id": "r1", "meta": {"rule.isGlobal": True}, "rule": rule}]
    (directory / "route-rules.yaml").write_text(yaml.safe_dump({"route-rules": rules}))
    return directory


@pytest.mark.parametrize(
    ("east", "expected"),
    [
        ({"kbear.mirror": "mm2"}, "east.orders"),
        ({"kbear.mirror": "mm2", "kbear.mirror.source.alias": "primary"}, "primary.orders"),
        ({"kbear.mirror": "mm2", "kbear.mirror.replication.policy": "identity"}, "orders"),
        ({"kbear.mirror": "identical"}, "orders"),
        ({}, "orders"),
    ],
    ids=["mm2-default", "mm2-alias", "mm2-identity", "identical", "none"],
)
def test_a_failed_over_topic_is_the_mirror_s_copy_for_producers_and_consumers(
    tmp_path: Path, east: dict[str, str], expected: str
) -> None:
    conf = write(
        tmp_path,
        "use cluster east",
        east={"kbear.failover.to": "west", "kbear.failover.active": "true", **east},
        west={},
    )
    router = Router.from_path(conf)
    try:
        produced = router.route_producer("orders")
        consumed = router.route_consumer("orders", "billing")
    finally:
        router.close()
    for route in (produced, consumed):
        assert (route.cluster_id, route.topic, route.requested_topic) == ("west", expected, "orders")
        assert route.bootstrap_servers == "west-1:9092"


def test_a_remapped_topic_and_a_chain_of_standbys_follow_each_hop_s_policy(tmp_path: Path) -> None:
    # east -> west (MirrorMaker 2, default policy), west -> north (MirrorMaker 2,
    # default policy): east's copy on north is west.east.<topic>, as MirrorMaker 2
    # names a topic mirrored twice
    config = load_config(
        write(
            tmp_path,
            "use cluster east, topic orders.v2",
            east={"kbear.failover.to": "west", "kbear.mirror": "mm2"},
            west={"kbear.failover.to": "north", "kbear.mirror": "mm2"},
            north={},
        )
    )
    router = Router(config)
    try:
        route = router.route_producer("orders")
    finally:
        router.close()
    assert (route.cluster_id, route.topic) == ("east", "orders.v2")
    assert standby_route(route, config, {"east"}).topic == "east.orders.v2"
    both = standby_route(route, config, {"east", "west"})
    assert (both.cluster_id, both.topic, both.requested_topic) == ("north", "west.east.orders.v2", "orders")
    assert standby_route(route, config, {"west"}) is route  # east is not failed over
