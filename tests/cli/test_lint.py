"""``kbear lint``: rules that never win, order-dependent rules, unreachable topics, unused clusters."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kbear.cli import main
from kbear.config import load_config
from kbear.lint import LintWarning, lint


def g(rule_id: str, statement: str, priority: int = 0) -> dict[str, Any]:
    return {"id": rule_id, "priority": priority, "meta": {"rule.isGlobal": True}, "rule": statement}


def t(rule_id: str, topic: str, statement: str, priority: int = 0) -> dict[str, Any]:
    return {"id": rule_id, "priority": priority, "meta": {"topic.id": topic}, "rule": statement}


def cg(rule_id: str, group: str, topic: str, statement: str, priority: int = 0) -> dict[str, Any]:
    meta = {"consumerGroup.groupName": group, "consumerGroup.topicId": topic}
    return {"id": rule_id, "priority": priority, "meta": meta, "rule": statement}


def warnings_of(
    tmp_path: Path,
    rules: list[dict[str, Any]],
    *,
    topics: list[dict[str, Any]] | None = None,
    groups: list[dict[str, Any]] | None = None,
    clusters: tuple[str, ...] = ("a", "b"),
) -> list[str]:
    docs = {
        "clusters.yaml": {
            "clusters": [{"id": c, "meta": {"bootstrap.servers": f"{c}:9092"}} for c in clusters]
        },
        "route-rules.yaml": {"route-rules": rules},
        "topics.yaml": {"topics": topics or []},
        "consumer-groups.yaml": {"consumer-groups": groups or []},
    }
    for name, doc in docs.items():
        (tmp_path / name).write_text(yaml.safe_dump(doc, sort_keys=False))
    return [str(w) for w in lint(load_config(tmp_path))]


def test_a_clean_configuration_has_no_warnings(tmp_path: Path) -> None:
    rules = [
        g("default", "use cluster a"),
        t("orders-uat", "orders", "use cluster b when client.env=uat", priority=1),
        cg("billing", "billing", "orders", "use cluster b, topic orders.v2"),
    ]
    assert warnings_of(tmp_path, rules, topics=[{"id": "orders"}]) == []


# --------------------------------------------------------------------------- rules that never win


def test_higher_priority_unconditional_global_shadows_everything_after_it(tmp_path: Path) -> None:
    rules = [
        g("everything-to-a", "use cluster a", priority=5),
        t("orders", "orders", "use cluster b when client.env=uat"),
        g("late", "use cluster b when client.env=x", priority=1),
    ]
    assert warnings_of(tmp_path, rules) == [
        "route-rules.yaml: rule 'orders': can never win: rule 'everything-to-a' comes before it and "
        "always matches in every chain it takes part in [shadowed]",
        "route-rules.yaml: rule 'late': can never win: rule 'everything-to-a' comes before it and "
        "always matches in every chain it takes part in [shadowed]",
    ]


def test_a_condition_that_always_holds_in_the_chain_shadows_too(tmp_path: Path) -> None:
    rules = [
        t("by-bu", "orders", "use cluster a when topic.bu=hotel and topic.id=orders"),
        t("uat", "orders", "use cluster b when client.env=uat"),
    ]
    out = warnings_of(tmp_path, rules, topics=[{"id": "orders", "meta": {"bu": "hotel"}}])
    assert out == [
        "route-rules.yaml: rule 'uat': can never win: rule 'by-bu' comes before it and "
        "always matches in every chain it takes part in [shadowed]"
    ]


def test_an_earlier_conditional_rule_does_not_shadow(tmp_path: Path) -> None:
    rules = [g("prod", "use cluster a when client.env=prod", priority=1), g("rest", "use cluster b")]
    assert warnings_of(tmp_path, rules) == []


def test_a_rule_shadowed_for_producers_only_is_not_reported(tmp_path: Path) -> None:
    # A consumer-group rule comes first only for that group's consumers: the topic
    # rule still wins for producers and other groups.
    rules = [cg("billing", "billing", "orders", "use cluster b"), t("orders", "orders", "use cluster a")]
    assert warnings_of(tmp_path, rules) == []


def test_a_global_shadowed_only_on_named_topics_still_wins_elsewhere(tmp_path: Path) -> None:
    rules = [t("orders", "orders", "use cluster a"), g("default", "use cluster b")]
    assert warnings_of(tmp_path, rules) == []


def test_a_consumer_group_rule_shadowed_in_its_only_chain(tmp_path: Path) -> None:
    rules = [
        t("orders", "orders", "use cluster a", priority=1),
        cg("billing", "billing", "orders", "use cluster b"),
    ]
    assert warnings_of(tmp_path, rules) == [
        "route-rules.yaml: rule 'billing': can never win: rule 'orders' comes before it and "
        "always matches in every chain it takes part in [shadowed]"
    ]


@pytest.mark.parametrize(
    ("rule", "conditions"),
    [
        (g("r", "use cluster a when env=prod"), "env=prod"),
        (t("r", "orders", "use cluster a when topic.id=payments"), "topic.id=payments"),
        (t("r", "orders", "use cluster a when topic.bu=flight"), "topic.bu=flight"),
        (g("r", "use cluster a when client.env=x and client.env=y"), "client.env=x and client.env=y"),
        (
            cg("r", "billing", "orders", "use cluster a when consumerGroup.jobType=stream"),
            "consumerGroup.jobType=stream",
        ),
    ],
)
def test_rules_that_can_never_match(tmp_path: Path, rule: dict[str, Any], conditions: str) -> None:
    out = warnings_of(
        tmp_path, [rule, g("default", "use cluster b")], topics=[{"id": "orders", "meta": {"bu": "hotel"}}]
    )
    assert out == [
        f"route-rules.yaml: rule 'r': never matches: its conditions ({conditions}) are false in every "
        "lookup it takes part in [never-matches]"
    ]


# --------------------------------------------------------------------------- order-dependent


def test_equal_priority_same_scope_different_clusters_is_order_dependent(tmp_path: Path) -> None:
    rules = [
        t("prod", "orders", "use cluster a when client.env=prod"),
        t("sh", "orders", "use cluster b when client.idc=sh"),
        g("default", "use cluster a"),
    ]
    assert warnings_of(tmp_path, rules) == [
        "route-rules.yaml: rules 'prod' and 'sh': same priority 0 and scope (topic 'orders'), one lookup "
        "can match both, and they pick cluster 'a' and cluster 'b': only their order in route-rules.yaml "
        "decides ('prod' wins) [order-dependent]"
    ]


@pytest.mark.parametrize(
    "second",
    [
        t("uat", "orders", "use cluster b when client.env=uat"),  # disjoint: env cannot be both
        t("uat", "orders", "use cluster a when client.idc=sh"),  # same cluster
        t("uat", "orders", "use cluster b when client.idc=sh", priority=1),  # different priority
        t("uat", "payments", "use cluster b when client.idc=sh"),  # other topic
        g("uat", "use cluster b when client.idc=sh"),  # other kind
    ],
)
def test_rules_whose_order_does_not_matter(tmp_path: Path, second: dict[str, Any]) -> None:
    rules = [t("prod", "orders", "use cluster a when client.env=prod"), second, g("default", "use cluster a")]
    assert warnings_of(tmp_path, rules, clusters=("a", "b")) == (
        []
        if "cluster b" in second["rule"]
        else ["clusters.yaml: cluster 'b': no rule routes to it [unused-cluster]"]
    )


def test_a_default_written_last_is_not_order_dependent(tmp_path: Path) -> None:
    rules = [g("prod", "use cluster a when client.env=prod"), g("default", "use cluster b")]
    assert warnings_of(tmp_path, rules) == []


def test_a_remap_counts_as_a_different_route(tmp_path: Path) -> None:
    rules = [
        g("x", "use cluster a when client.env=prod"),
        g("y", "use cluster a, topic v2 when client.idc=sh"),
    ]
    assert [
        w.split(": ")[1] for w in warnings_of(tmp_path, [*rules, g("d", "use cluster b", priority=0)])
    ] == ["rules 'x' and 'y'"]


# --------------------------------------------------------------------------- reach and clusters


def test_topic_and_group_without_a_route_for_some_clients(tmp_path: Path) -> None:
    rules = [
        t("orders-prod", "orders", "use cluster a when client.env=prod"),
        cg("billing", "billing", "payments", "use cluster b when consumerGroup.jobType=batch"),
        t("payments", "payments", "use cluster a"),
    ]
    out = warnings_of(
        tmp_path,
        rules,
        topics=[{"id": "orders"}, {"id": "payments"}],
        groups=[
            {"id": {"groupName": "billing", "topicId": "payments"}, "meta": {"jobType": "batch"}},
            {"id": {"groupName": "audit", "topicId": "orders"}},
        ],
    )
    assert out == [
        "topics.yaml: topic 'orders': some producers have no route: none of the 1 rule(s) of its chain "
        "always matches (a client without id and meta gets NoRouteError) [no-route]",
        "consumer-groups.yaml: consumer group 'audit' on topic 'orders': some consumers have no route: "
        "none of the 1 rule(s) of its chain always matches (a client without id and meta gets NoRouteError) "
        "[no-route]",
    ]


def test_unused_cluster(tmp_path: Path) -> None:
    assert warnings_of(tmp_path, [g("d", "use cluster a")], clusters=("a", "dr", "b")) == [
        "clusters.yaml: cluster 'dr': no rule routes to it [unused-cluster]",
        "clusters.yaml: cluster 'b': no rule routes to it [unused-cluster]",
    ]


def test_warning_fields() -> None:
    w = LintWarning("unused-cluster", "clusters.yaml", "cluster 'dr'", "no rule routes to it")
    assert str(w) == "clusters.yaml: cluster 'dr': no rule routes to it [unused-cluster]"


# --------------------------------------------------------------------------- command line


def test_lint_command_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    clean = tmp_path / "clean"
    clean.mkdir()
    warnings_of(clean, [g("d", "use cluster a"), g("e", "use cluster b when client.env=x", priority=1)])
    assert main(["lint", "--config", str(clean)]) == 0
    out, err = capsys.readouterr()
    assert out == "OK: no warnings (2 clusters, 0 topics, 0 consumer groups, 2 rules)\n"
    assert err == ""

    dirty = tmp_path / "dirty"
    dirty.mkdir()
    warnings_of(dirty, [g("d", "use cluster a")])
    assert main(["lint", "--config", str(dirty)]) == 1
    out, err = capsys.readouterr()
    assert out == "clusters.yaml: cluster 'b': no rule routes to it [unused-cluster]\n"
    assert err == f"kbear: 1 warning(s) in {dirty}\n"

    (dirty / "route-rules.yaml").write_text("route-rules:\n  - id: x\n")
    assert main(["lint", "--config", str(dirty)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "route-rules.yaml: rule 'x': key 'meta'" not in err  # meta is optional
    assert "route-rules.yaml: rule 'x': key 'rule': Field required" in err


def test_lint_reads_factors_as_the_router_does(tmp_path: Path) -> None:
    # a topic meta key "id" must not stand in for topic.id (the router sets topic.id
    # last): the rule matches the topic, so lint must not call it never-matching
    rules = [t("by-id", "orders", "use cluster b when topic.id=orders"), g("default", "use cluster a")]
    topics = [{"id": "orders", "meta": {"id": "something-else"}}]
    assert not [w for w in warnings_of(tmp_path, rules, topics=topics) if "never-matches" in w]
    config = load_config(tmp_path)
    from kbear import Router

    assert Router(config).route_producer("orders").cluster_id == "b"
