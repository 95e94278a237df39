"""The router: chains, factors, remap, errors and explanations (issue 2, section 4)."""

from __future__ import annotations

import copy
import pickle
import textwrap
from collections.abc import Mapping
from pathlib import Path

import pytest

import kbear
from kbear.crrl import Statement
from kbear.router import Client, Explanation, NoRouteError, Router

HELLO = "fx.kafka.demo.hello.run"
HELLO_GROUP = "fx.kafka.demo.hello.run.consumer"

CLUSTERS = """
clusters:
  - id: fws
    meta: {bootstrap.servers: "fws:9092"}
  - id: uat
    meta: {bootstrap.servers: "uat:9092", security.protocol: SASL_SSL}
  - id: prod
    meta: {bootstrap.servers: "prod-1:9092,prod-2:9092"}
"""

SPEC_RULES = f"""
route-rules:
  - id: r100001
    meta:
      rule.isGlobal: true
    rule: use cluster fws
  - id: r100002
    meta:
      topic.id: {HELLO}
    rule: use cluster uat
  - id: r100003
    meta:
      consumerGroup.groupName: {HELLO_GROUP}
      consumerGroup.topicId: {HELLO}
    rule: use cluster prod
"""


def make_router(directory: Path, rules: str, topics: str | None = None, groups: str | None = None) -> Router:
    (directory / "clusters.yaml").write_text(textwrap.dedent(CLUSTERS))
    (directory / "route-rules.yaml").write_text(textwrap.dedent(rules))
    if topics is not None:
        (directory / "topics.yaml").write_text(textwrap.dedent(topics))
    if groups is not None:
        (directory / "consumer-groups.yaml").write_text(textwrap.dedent(groups))
    return Router.from_path(directory)


def rules_yaml(*rules: tuple[str, int, Mapping[str, str], str]) -> str:
    """route-rules.yaml from (id, priority, meta, rule) tuples."""
    lines = ["route-rules:"]
    for rule_id, priority, meta, rule in rules:
        lines += [f"  - id: {rule_id}", f"    priority: {priority}", "    meta:"]
        lines += [f"      {k}: {v}" for k, v in meta.items()]
        lines.append(f"    rule: '{rule}'")
    return "\n".join(lines) + "\n"


GLOBAL = {"rule.isGlobal": "true"}


def topic_meta(topic: str) -> dict[str, str]:
    return {"topic.id": topic}


def group_meta(group: str, topic: str) -> dict[str, str]:
    return {"consumerGroup.groupName": group, "consumerGroup.topicId": topic}


def chain_ids(explanation: Explanation) -> list[str]:
    return [v.rule.id for v in explanation.verdicts]


@pytest.fixture
def spec_router(tmp_path: Path) -> Router:
    return make_router(tmp_path, SPEC_RULES)


# --------------------------------------------------------------------------- the spec's tables


def test_spec_example_consumer_group_beats_topic_beats_global(spec_router: Router) -> None:
    route = spec_router.route_consumer(HELLO, HELLO_GROUP)
    assert (route.cluster_id, route.rule_id) == ("prod", "r100003")
    assert chain_ids(spec_router.explain_consumer(HELLO, HELLO_GROUP)) == ["r100003", "r100002", "r100001"]


def test_spec_example_producer_takes_the_topic_rule(spec_router: Router) -> None:
    route = spec_router.route_producer(HELLO)
    assert (route.cluster_id, route.rule_id) == ("uat", "r100002")
    assert route.bootstrap_servers == "uat:9092"


def test_spec_example_other_group_on_the_topic_takes_the_topic_rule(spec_router: Router) -> None:
    route = spec_router.route_consumer(HELLO, "someone.else")
    assert (route.cluster_id, route.rule_id) == ("uat", "r100002")


def test_route_is_a_consumer_lookup_with_a_group_and_a_producer_lookup_without(spec_router: Router) -> None:
    with_group = spec_router.route(HELLO, HELLO_GROUP)
    assert (with_group.cluster_id, with_group.rule_id) == ("prod", "r100003")  # the group's rule
    assert with_group == spec_router.route_consumer(HELLO, HELLO_GROUP)
    without = spec_router.route(HELLO)
    assert (without.cluster_id, without.rule_id) == ("uat", "r100002")  # group rules do not apply
    assert without == spec_router.route_producer(HELLO)


def test_spec_example_other_topic_takes_the_global_rule(spec_router: Router) -> None:
    assert spec_router.route_producer("fx.other").rule_id == "r100001"
    assert spec_router.route_consumer("fx.other", HELLO_GROUP).rule_id == "r100001"
    assert spec_router.route_producer("fx.other").bootstrap_servers == "fws:9092"


PRIORITY_RULES = f"""
route-rules:
  - id: r100005
    priority: 0
    meta:
      consumerGroup.groupName: fx.hellobom.string.consumer
      consumerGroup.topicId: {HELLO}
    rule: use cluster fws
  - id: r100006
    priority: 1
    meta:
      rule.isGlobal: true
    rule: use cluster uat when client.env=UAT
"""


@pytest.mark.parametrize(
    ("client", "cluster", "rule"),
    [
        (Client("app", {"env": "UAT"}), "uat", "r100006"),
        (Client(None, {"env": "UAT"}), "uat", "r100006"),
        (Client("app", {"env": "uat"}), "fws", "r100005"),
        (Client("app", {"env": "PROD"}), "fws", "r100005"),
        (Client("app"), "fws", "r100005"),
        (None, "fws", "r100005"),
    ],
)
def test_spec_priority_example(tmp_path: Path, client: Client | None, cluster: str, rule: str) -> None:
    router = make_router(tmp_path, PRIORITY_RULES)
    route = router.route_consumer(HELLO, "fx.hellobom.string.consumer", client)
    assert (route.cluster_id, route.rule_id) == (cluster, rule)
    assert chain_ids(router.explain_consumer(HELLO, "fx.hellobom.string.consumer")) == ["r100006", "r100005"]


def test_spec_priority_example_other_group_or_producer_has_no_route_unless_uat(tmp_path: Path) -> None:
    router = make_router(tmp_path, PRIORITY_RULES)
    with pytest.raises(NoRouteError):
        router.route_consumer(HELLO, "another.group", Client("app", {"env": "PROD"}))
    with pytest.raises(NoRouteError):
        router.route_producer(HELLO, Client("app", {"env": "PROD"}))
    assert router.route_producer(HELLO, Client("app", {"env": "UAT"})).cluster_id == "uat"


# --------------------------------------------------------------------------- chain order


def test_higher_priority_beats_kind(tmp_path: Path) -> None:
    router = make_router(
        tmp_path,
        rules_yaml(
            ("g", 0, group_meta("grp", "t"), "use cluster prod"),
            ("t", 1, topic_meta("t"), "use cluster uat"),
            ("x", 2, GLOBAL, "use cluster fws when client.env=fws"),
        ),
    )
    assert router.route_consumer("t", "grp").rule_id == "t"
    assert router.route_consumer("t", "grp", Client("a", {"env": "fws"})).rule_id == "x"
    assert chain_ids(router.explain_consumer("t", "grp")) == ["x", "t", "g"]


@pytest.mark.parametrize("order", [("a", "b", "c"), ("c", "a", "b"), ("b", "c", "a")])
def test_equal_priority_and_kind_follow_file_order(tmp_path: Path, order: tuple[str, ...]) -> None:
    cluster = {"a": "fws", "b": "uat", "c": "prod"}
    router = make_router(
        tmp_path,
        rules_yaml(
            ("tt", 0, topic_meta("other"), "use cluster fws"),
            *((name, 0, GLOBAL, f"use cluster {cluster[name]}") for name in order),
            *((f"t{name}", 0, topic_meta("t"), f"use cluster {cluster[name]}") for name in order),
        ),
    )
    first = order[0]
    assert router.route_producer("x").rule_id == first
    assert router.route_producer("t").rule_id == f"t{first}"
    assert router.route_producer("t").cluster_id == cluster[first]
    assert chain_ids(router.explain_producer("t")) == [f"t{n}" for n in order] + list(order)


def test_mixed_priorities_sort_descending_then_kind_then_file(tmp_path: Path) -> None:
    router = make_router(
        tmp_path,
        rules_yaml(
            ("g1", 0, GLOBAL, "use cluster fws when client.id=never"),
            ("t1", 5, topic_meta("t"), "use cluster fws when client.id=never"),
            ("c1", 0, group_meta("grp", "t"), "use cluster fws when client.id=never"),
            ("g2", 5, GLOBAL, "use cluster fws when client.id=never"),
            ("c2", 5, group_meta("grp", "t"), "use cluster fws when client.id=never"),
            ("t2", 0, topic_meta("t"), "use cluster fws when client.id=never"),
            ("g3", 3, GLOBAL, "use cluster fws when client.id=never"),
        ),
    )
    explanation = router.explain_consumer("t", "grp")
    assert chain_ids(explanation) == ["c2", "t1", "g2", "g3", "c1", "t2", "g1"]
    assert explanation.route is None
    assert explanation.evaluated == 7


# --------------------------------------------------------------------------- producer / consumer scope


def test_producer_lookups_ignore_consumer_group_rules(tmp_path: Path) -> None:
    router = make_router(tmp_path, rules_yaml(("g", 9, group_meta("grp", "t"), "use cluster prod")))
    with pytest.raises(NoRouteError):
        router.route_producer("t")
    assert chain_ids(router.explain_producer("t")) == []
    assert router.route_consumer("t", "grp").cluster_id == "prod"


def test_consumer_group_rule_applies_to_its_group_and_topic_pair_only(tmp_path: Path) -> None:
    router = make_router(
        tmp_path,
        rules_yaml(
            ("g", 0, group_meta("grp", "t1"), "use cluster prod"),
            ("x", 0, GLOBAL, "use cluster fws"),
        ),
    )
    assert router.route_consumer("t1", "grp").rule_id == "g"
    assert router.route_consumer("t2", "grp").rule_id == "x"
    assert router.route_consumer("t1", "other").rule_id == "x"
    # The group name is not a topic name, nor the reverse.
    assert router.route_consumer("grp", "t1").rule_id == "x"


def test_topic_rule_applies_to_its_topic_only(tmp_path: Path) -> None:
    router = make_router(tmp_path, rules_yaml(("t", 0, topic_meta("orders"), "use cluster uat")))
    assert router.route_producer("orders").cluster_id == "uat"
    assert router.route_consumer("orders", "any").cluster_id == "uat"
    for topic in ("orders.v2", "Orders", "order"):
        with pytest.raises(NoRouteError):
            router.route_producer(topic)


# --------------------------------------------------------------------------- remap and Route


def test_topic_remap(tmp_path: Path) -> None:
    router = make_router(
        tmp_path,
        rules_yaml(
            ("m", 0, topic_meta("orders"), "use cluster prod, topic orders.v2 when client.env=prod"),
            ("x", 0, GLOBAL, "use cluster fws"),
        ),
    )
    moved = router.route_producer("orders", Client("app", {"env": "prod"}))
    assert (moved.cluster_id, moved.topic, moved.requested_topic) == ("prod", "orders.v2", "orders")
    assert moved.remapped
    assert moved.bootstrap_servers == "prod-1:9092,prod-2:9092"
    stayed = router.route_producer("orders", Client("app", {"env": "dev"}))
    assert (stayed.cluster_id, stayed.topic, stayed.requested_topic) == ("fws", "orders", "orders")
    assert not stayed.remapped
    consumer = router.route_consumer("orders", "g", Client("app", {"env": "prod"}))
    assert consumer.topic == "orders.v2"


def test_remap_to_the_same_name_is_not_a_remap(tmp_path: Path) -> None:
    router = make_router(tmp_path, rules_yaml(("m", 0, GLOBAL, "use cluster uat, topic orders")))
    route = router.route_producer("orders")
    assert route.topic == "orders"
    assert not route.remapped


def test_route_carries_cluster_properties(spec_router: Router) -> None:
    route = spec_router.route_producer(HELLO)
    assert isinstance(route, kbear.Route)
    assert dict(route.properties) == {"bootstrap.servers": "uat:9092", "security.protocol": "SASL_SSL"}
    with pytest.raises(TypeError):
        route.properties["security.protocol"] = "PLAINTEXT"  # type: ignore[index]
    assert spec_router.route_producer(HELLO) == route


# --------------------------------------------------------------------------- factors

TOPICS = """
topics:
  - id: orders
    meta:
      bu: hotel
      id: not-the-topic-id
"""

GROUPS = """
consumer-groups:
  - id: {groupName: billing, topicId: orders}
    meta:
      jobType: batch
      groupName: not-the-group-name
"""


@pytest.fixture
def factor_router(tmp_path: Path) -> Router:
    rules = rules_yaml(
        ("client-id", 9, GLOBAL, "use cluster prod when client.id=app-1"),
        ("client-meta", 8, GLOBAL, "use cluster prod when client.idc=sh"),
        ("topic-id", 7, GLOBAL, "use cluster uat when topic.id=orders and client.env=test"),
        ("topic-meta", 6, GLOBAL, "use cluster uat when topic.bu=hotel and client.env=bu"),
        ("group-name", 5, GLOBAL, "use cluster uat when consumerGroup.groupName=billing and client.env=g"),
        ("group-topic", 4, GLOBAL, "use cluster uat when consumerGroup.topicId=orders and client.env=gt"),
        ("group-meta", 3, GLOBAL, "use cluster uat when consumerGroup.jobType=batch and client.env=gm"),
        ("fallback", 0, GLOBAL, "use cluster fws"),
    )
    return make_router(tmp_path, rules, topics=TOPICS, groups=GROUPS)


@pytest.mark.parametrize(
    ("client", "producer_rule", "consumer_rule"),
    [
        (Client("app-1"), "client-id", "client-id"),
        (Client("app-2", {"idc": "sh"}), "client-meta", "client-meta"),
        (Client("x", {"env": "test"}), "topic-id", "topic-id"),
        (Client("x", {"env": "bu"}), "topic-meta", "topic-meta"),
        (Client("x", {"env": "g"}), "fallback", "group-name"),
        (Client("x", {"env": "gt"}), "fallback", "group-topic"),
        (Client("x", {"env": "gm"}), "fallback", "group-meta"),
        (Client("x", {"idc": "SH"}), "fallback", "fallback"),
        (None, "fallback", "fallback"),
    ],
)
def test_route_factors(
    factor_router: Router, client: Client | None, producer_rule: str, consumer_rule: str
) -> None:
    assert factor_router.route_producer("orders", client).rule_id == producer_rule
    assert factor_router.route_consumer("orders", "billing", client).rule_id == consumer_rule


def test_topic_meta_applies_only_to_its_topic(factor_router: Router) -> None:
    assert factor_router.route_producer("payments", Client("x", {"env": "bu"})).rule_id == "fallback"
    assert factor_router.route_producer("payments", Client("x", {"env": "test"})).rule_id == "fallback"


def test_group_meta_applies_only_to_its_group_and_topic(factor_router: Router) -> None:
    client = Client("x", {"env": "gm"})
    assert factor_router.route_consumer("payments", "billing", client).rule_id == "fallback"
    assert factor_router.route_consumer("orders", "audit", client).rule_id == "fallback"


def test_factors_seen_by_a_consumer_lookup(factor_router: Router) -> None:
    factors = factor_router.explain_consumer("orders", "billing", Client("app-1", {"env": "e"})).factors
    assert dict(factors) == {
        "client.id": "app-1",
        "client.env": "e",
        "topic.id": "orders",
        "topic.bu": "hotel",
        "consumerGroup.groupName": "billing",
        "consumerGroup.topicId": "orders",
        "consumerGroup.jobType": "batch",
    }


def test_producer_has_no_consumer_group_factors_and_anonymous_client_no_client_id(
    factor_router: Router,
) -> None:
    factors = factor_router.explain_producer("orders").factors
    assert dict(factors) == {"topic.id": "orders", "topic.bu": "hotel"}


# --------------------------------------------------------------------------- errors


def test_no_route_error_names_client_topic_and_group(tmp_path: Path) -> None:
    router = make_router(tmp_path, rules_yaml(("u", 0, GLOBAL, "use cluster uat when client.env=uat")))
    client = Client("billing-app", {"env": "prod"})
    with pytest.raises(LookupError) as info:
        router.route_consumer("orders", "billing", client)
    err = info.value
    assert isinstance(err, NoRouteError)
    assert isinstance(err, kbear.NoRouteError)
    assert (err.client, err.topic, err.group) == (client, "orders", "billing")
    for part in ("billing-app", "'env': 'prod'", "orders", "consumer group 'billing'"):
        assert part in str(err)

    with pytest.raises(NoRouteError) as pinfo:
        router.route_producer("orders", client)
    assert pinfo.value.group is None
    assert "billing-app" in str(pinfo.value)
    assert "orders" in str(pinfo.value)
    assert "group" not in str(pinfo.value)


def test_no_rules_at_all_means_no_route(tmp_path: Path) -> None:
    router = make_router(tmp_path, "route-rules: []\n")
    with pytest.raises(NoRouteError):
        router.route_producer("t")


# --------------------------------------------------------------------------- explain


def test_explain_gives_each_verdict(tmp_path: Path) -> None:
    router = make_router(
        tmp_path,
        rules_yaml(
            ("a", 3, GLOBAL, "use cluster uat when client.env=uat and client.idc=sh"),
            ("b", 2, topic_meta("t"), "use cluster prod when client.env=prod"),
            ("c", 1, GLOBAL, "use cluster fws when client.idc=sh"),
            ("d", 0, GLOBAL, "use cluster fws"),
        ),
    )
    client = Client("app", {"idc": "sh"})
    explanation = router.explain_producer("t", client)
    assert chain_ids(explanation) == ["a", "b", "c", "d"]
    a, b, c, d = explanation.verdicts
    assert not a.matched
    assert a.failed == ("client.env=uat (actual: <absent>)",)
    assert not b.matched
    assert b.failed == ("client.env=prod (actual: <absent>)",)
    assert c.matched
    assert c.failed == ()
    assert not d.matched  # after the winner: not evaluated
    assert explanation.evaluated == 3
    assert explanation.route == router.route_producer("t", client)
    assert explanation.route is not None and explanation.route.rule_id == "c"


def test_explain_shows_actual_values_and_no_route(tmp_path: Path) -> None:
    router = make_router(tmp_path, rules_yaml(("a", 0, GLOBAL, "use cluster uat when client.env=UAT")))
    explanation = router.explain_consumer("t", "g", Client("app", {"env": "uat"}))
    assert explanation.route is None
    assert explanation.evaluated == 1
    (verdict,) = explanation.verdicts
    assert not verdict.matched
    assert verdict.failed == ("client.env=UAT (actual: uat)",)


# --------------------------------------------------------------------------- the index


def test_chain_holds_only_rules_of_the_topic_and_pair(tmp_path: Path) -> None:
    rules = [("glob", 0, GLOBAL, "use cluster fws when client.env=x")]
    for i in range(50):
        rules.append((f"t{i}", 0, topic_meta(f"topic{i}"), "use cluster uat"))
        rules.append((f"g{i}", 0, group_meta(f"group{i}", f"topic{i}"), "use cluster prod"))
    router = make_router(tmp_path, rules_yaml(*rules))
    assert chain_ids(router.explain_producer("topic7")) == ["t7", "glob"]
    assert chain_ids(router.explain_consumer("topic7", "group7")) == ["g7", "t7", "glob"]
    assert chain_ids(router.explain_consumer("topic7", "group8")) == ["t7", "glob"]
    assert chain_ids(router.explain_producer("unknown")) == ["glob"]


def test_lookup_evaluates_only_rules_of_its_chain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rules = [("glob", 0, GLOBAL, "use cluster fws")]
    for i in range(50):
        rules.append((f"t{i}", 1, topic_meta(f"topic{i}"), f"use cluster uat when client.n={i}"))
        rules.append(
            (f"g{i}", 1, group_meta(f"group{i}", f"topic{i}"), f"use cluster prod when client.n={i}")
        )
    router = make_router(tmp_path, rules_yaml(*rules))

    evaluated: list[Statement] = []
    original = Statement.matches

    def counting(self: Statement, factors: Mapping[str, str]) -> bool:
        evaluated.append(self)
        return original(self, factors)

    monkeypatch.setattr(Statement, "matches", counting)
    assert router.route_consumer("topic7", "group7", Client("c", {"n": "99"})).rule_id == "glob"
    assert sorted(str(s) for s in evaluated) == sorted(
        ["use cluster prod when client.n=7", "use cluster uat when client.n=7", "use cluster fws"]
    )
    evaluated.clear()
    assert router.route_producer("topic3", Client("c", {"n": "3"})).rule_id == "t3"
    assert [str(s) for s in evaluated] == ["use cluster uat when client.n=3"]


# --------------------------------------------------------------------------- Client


def test_client_equality_and_hashing() -> None:
    a = Client("app", {"env": "uat", "idc": "sh"})
    b = Client("app", {"idc": "sh", "env": "uat"})
    assert a == b
    assert hash(a) == hash(b)
    assert len({a, b}) == 1
    assert a != Client("app", {"env": "prod", "idc": "sh"})
    assert a != Client("other", {"env": "uat", "idc": "sh"})
    assert a != Client("app")
    assert Client() == Client(None, {})
    assert Client("app") != "app"


def test_client_is_immutable_and_copies_its_meta() -> None:
    meta = {"env": "uat"}
    client = Client("app", meta)
    meta["env"] = "prod"
    assert client.meta == {"env": "uat"}
    with pytest.raises(AttributeError):
        client.id = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        client.meta["env"] = "prod"  # type: ignore[index]
    assert repr(client) == "Client(id='app', meta={'env': 'uat'})"


def test_equal_clients_get_the_same_route(tmp_path: Path) -> None:
    router = make_router(tmp_path, rules_yaml(("u", 0, GLOBAL, "use cluster uat when client.env=uat")))
    assert router.route_producer("t", Client("a", {"env": "uat"})).cluster_id == "uat"
    with pytest.raises(NoRouteError):
        router.route_producer("t", Client("a", {"env": "prod"}))
    assert router.route_producer("t", Client("a", {"env": "uat"})).cluster_id == "uat"


def test_client_route_and_no_route_error_survive_pickle_and_copy(spec_router: Router) -> None:
    # e.g. shipped to Spark executors or copied by the application.
    client = Client("app", {"env": "uat"})
    for clone in (pickle.loads(pickle.dumps(client)), copy.copy(client), copy.deepcopy(client)):
        assert clone == client
        assert hash(clone) == hash(client)
    route = spec_router.route_producer(HELLO, client)
    for rclone in (pickle.loads(pickle.dumps(route)), copy.deepcopy(route)):
        assert rclone == route
        assert dict(rclone.properties) == dict(route.properties)
        assert repr(rclone) == repr(route)
    err = NoRouteError(client, "orders", "billing")
    eclone = pickle.loads(pickle.dumps(err))
    assert (eclone.client, eclone.topic, eclone.group) == (client, "orders", "billing")
    assert str(eclone) == str(err)
