"""The ``kbear`` command line (kbear.cli): route, explain, validate, --version, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

import kbear
from kbear.cli import main

SECRET = "s3cr3t-value"

CLUSTERS: list[dict[str, Any]] = [
    {
        "id": "prod",
        "meta": {
            "bootstrap.servers": "prod-1:9092,prod-2:9092",
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "app",
            "sasl.password": SECRET,
        },
    },
    {"id": "uat", "meta": {"bootstrap.servers": "uat-1:9092"}},
    {"id": "fws", "meta": {"bootstrap.servers": "fws-1:9092"}},
]

RULES: list[dict[str, Any]] = [
    {
        "id": "g-prod",
        "priority": 0,
        "meta": {"rule.isGlobal": True},
        "rule": "use cluster prod when client.env=prod",
    },
    {
        "id": "t-orders",
        "priority": 0,
        "meta": {"topic.id": "orders"},
        "rule": "use cluster uat when client.env=uat",
    },
    {
        "id": "t-payments",
        "priority": 0,
        "meta": {"topic.id": "payments"},
        "rule": "use cluster fws, topic payments.v2 when client.env=fws",
    },
    {
        "id": "cg-billing",
        "priority": 0,
        "meta": {"consumerGroup.groupName": "billing", "consumerGroup.topicId": "orders"},
        "rule": "use cluster fws when consumerGroup.jobType=batch and client.env=uat",
    },
]

TOPICS: list[dict[str, Any]] = [{"id": "orders", "meta": {"bu": "hotel"}}, {"id": "payments", "meta": {}}]

GROUPS: list[dict[str, Any]] = [
    {"id": {"groupName": "billing", "topicId": "orders"}, "meta": {"jobType": "batch"}},
]


def write_config(
    directory: Path,
    *,
    clusters: list[dict[str, Any]] | None = None,
    rules: list[dict[str, Any]] | None = None,
    topics: list[dict[str, Any]] | None = None,
    groups: list[dict[str, Any]] | None = None,
) -> Path:
    """Write the four YAML files of a configuration directory (defaults: the module's tables)."""
    directory.mkdir(parents=True, exist_ok=True)
    files = {
        "clusters.yaml": {"clusters": CLUSTERS if clusters is None else clusters},
        "route-rules.yaml": {"route-rules": RULES if rules is None else rules},
        "topics.yaml": {"topics": TOPICS if topics is None else topics},
        "consumer-groups.yaml": {"consumer-groups": GROUPS if groups is None else groups},
    }
    for name, doc in files.items():
        (directory / name).write_text(yaml.safe_dump(doc, sort_keys=False))
    return directory


@pytest.fixture
def conf(tmp_path: Path) -> str:
    return str(write_config(tmp_path / "conf"))


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Call main(argv) and return (exit code, stdout, stderr)."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert SECRET not in out
    assert SECRET not in err
    return code, out, err


# --------------------------------------------------------------------------- route


def test_route_producer_lookup(capsys: pytest.CaptureFixture[str], conf: str) -> None:
    code, out, err = run(capsys, "route", "--config", conf, "--topic", "orders", "--client-meta", "env=uat")
    assert code == 0
    assert err == ""
    lines = out.splitlines()
    assert len(lines) == 1
    assert "cluster=uat" in lines[0]
    assert "topic=orders " in lines[0]
    assert "remapped" not in lines[0]
    assert "bootstrap.servers=uat-1:9092" in lines[0]
    assert "rule=t-orders" in lines[0]


def test_route_consumer_lookup_uses_group_rules(capsys: pytest.CaptureFixture[str], conf: str) -> None:
    # Same client and topic: the producer gets the topic rule, the consumer of
    # group billing gets the consumer-group rule (group meta jobType=batch).
    argv = ("--config", conf, "--topic", "orders", "--client-meta", "env=uat", "--json")
    code, out, _ = run(capsys, "route", *argv)
    assert code == 0
    assert json.loads(out)["cluster"] == "uat"

    code, out, _ = run(capsys, "route", *argv, "--group", "billing")
    assert code == 0
    assert json.loads(out) == {
        "cluster": "fws",
        "topic": "orders",
        "bootstrap_servers": "fws-1:9092",
        "rule": "cg-billing",
    }

    # Another group on the same topic has no group rule: the topic rule routes it.
    code, out, _ = run(capsys, "route", *argv, "--group", "audit")
    assert code == 0
    assert json.loads(out)["rule"] == "t-orders"


def test_route_remap(capsys: pytest.CaptureFixture[str], conf: str) -> None:
    code, out, _ = run(capsys, "route", "--config", conf, "--topic", "payments", "--client-meta", "env=fws")
    assert code == 0
    assert "cluster=fws" in out
    assert "topic=payments.v2 (remapped from payments)" in out
    assert "rule=t-payments" in out

    code, out, _ = run(
        capsys, "route", "--config", conf, "--topic", "payments", "--client-meta", "env=fws", "--json"
    )
    assert code == 0
    assert json.loads(out)["topic"] == "payments.v2"


def test_route_json_shape_is_exactly_one_object(capsys: pytest.CaptureFixture[str], conf: str) -> None:
    code, out, err = run(
        capsys, "route", "--config", conf, "--topic", "anything", "--client-meta", "env=prod", "--json"
    )
    assert code == 0
    assert err == ""
    assert out.endswith("\n")
    assert len(out.strip().splitlines()) == 1
    obj = json.loads(out)
    assert obj == {
        "cluster": "prod",
        "topic": "anything",
        "bootstrap_servers": "prod-1:9092,prod-2:9092",
        "rule": "g-prod",
    }
    assert list(obj) == ["cluster", "topic", "bootstrap_servers", "rule"]


def test_route_client_id_and_several_meta(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rules = [
        {
            "id": "by-id",
            "meta": {"rule.isGlobal": True},
            "rule": "use cluster uat when client.id=app7 and client.idc=sh and client.env=uat",
        }
    ]
    conf = str(write_config(tmp_path / "c", rules=rules))
    base = ("route", "--config", conf, "--topic", "t", "--json")
    # Several pairs after one option, and the option repeated, both accumulate.
    code, out, _ = run(capsys, *base, "--client-id", "app7", "--client-meta", "idc=sh", "env=uat")
    assert code == 0 and json.loads(out)["rule"] == "by-id"
    code, out, _ = run(
        capsys, *base, "--client-id", "app7", "--client-meta", "idc=sh", "--client-meta", "env=uat"
    )
    assert code == 0 and json.loads(out)["rule"] == "by-id"
    code, _, _ = run(capsys, *base, "--client-id", "app8", "--client-meta", "idc=sh", "env=uat")
    assert code == 3


def test_route_meta_value_may_hold_equals(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rules = [{"id": "eq", "meta": {"rule.isGlobal": True}, "rule": 'use cluster uat when client.expr="a=b"'}]
    conf = str(write_config(tmp_path / "c", rules=rules))
    code, out, _ = run(
        capsys, "route", "--config", conf, "--topic", "t", "--client-meta", "expr=a=b", "--json"
    )
    assert code == 0
    assert json.loads(out)["rule"] == "eq"


def test_route_no_route_exits_3(capsys: pytest.CaptureFixture[str], conf: str) -> None:
    code, out, err = run(
        capsys,
        "route",
        "--config",
        conf,
        "--topic",
        "orders",
        "--group",
        "billing",
        "--client-id",
        "app42",
        "--client-meta",
        "env=dev",
        "--json",
    )
    assert code == 3
    assert out == ""
    assert "no route" in err
    assert "app42" in err
    assert "'env': 'dev'" in err
    assert "orders" in err
    assert "billing" in err


def test_route_no_route_producer_says_no_group(capsys: pytest.CaptureFixture[str], conf: str) -> None:
    code, out, err = run(capsys, "route", "--config", conf, "--topic", "orders")
    assert code == 3
    assert out == ""
    assert "orders" in err
    assert "producer lookup" in err


def test_route_config_error_exits_2_naming_file_and_rule(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    rules = [*RULES, {"id": "r-ghost", "meta": {"rule.isGlobal": True}, "rule": "use cluster ghost"}]
    conf = str(write_config(tmp_path / "c", rules=rules))
    for command in ("route", "explain"):
        code, out, err = run(
            capsys, command, "--config", conf, "--topic", "orders", "--client-meta", "env=uat"
        )
        assert code == 2
        assert out == ""
        assert "route-rules.yaml" in err
        assert "r-ghost" in err
        assert "ghost" in err


def test_route_missing_directory_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    code, out, err = run(capsys, "route", "--config", str(missing), "--topic", "t")
    assert code == 2
    assert out == ""
    assert str(missing) in err


@pytest.mark.parametrize("bad", ["env", "=uat"])
def test_bad_client_meta_is_a_usage_error(capsys: pytest.CaptureFixture[str], conf: str, bad: str) -> None:
    code, out, err = run(capsys, "route", "--config", conf, "--topic", "t", "--client-meta", bad)
    assert code == 2
    assert out == ""
    assert "usage:" in err
    assert "KEY=VALUE" in err


def test_conflicting_client_meta_is_a_usage_error(capsys: pytest.CaptureFixture[str], conf: str) -> None:
    code, _, err = run(capsys, "route", "--config", conf, "--topic", "t", "--client-meta", "env=a", "env=b")
    assert code == 2
    assert "usage:" in err
    assert "'env'" in err


def test_missing_required_arguments_are_usage_errors(capsys: pytest.CaptureFixture[str], conf: str) -> None:
    assert run(capsys, "route", "--config", conf)[0] == 2
    assert run(capsys, "route", "--topic", "t")[0] == 2
    assert run(capsys)[0] == 2


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--version")
    assert code == 0
    assert out.strip() == f"kbear {kbear.__version__}"


# --------------------------------------------------------------------------- explain


def test_explain_verdicts_in_chain_order(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rules = [
        {"id": "g-low", "priority": 0, "meta": {"rule.isGlobal": True}, "rule": "use cluster prod"},
        {
            "id": "t-uat",
            "priority": 0,
            "meta": {"topic.id": "orders"},
            "rule": "use cluster uat when client.env=uat",
        },
        {
            "id": "cg-fws",
            "priority": 0,
            "meta": {"consumerGroup.groupName": "billing", "consumerGroup.topicId": "orders"},
            "rule": "use cluster fws when client.env=uat and topic.bu=travel",
        },
        {
            "id": "g-high",
            "priority": 5,
            "meta": {"rule.isGlobal": True},
            "rule": "use cluster fws when client.idc=sz",
        },
    ]
    conf = str(write_config(tmp_path / "c", rules=rules))
    code, out, err = run(
        capsys,
        "explain",
        "--config",
        conf,
        "--topic",
        "orders",
        "--group",
        "billing",
        "--client-meta",
        "env=uat",
        "idc=sh",
    )
    assert code == 0
    assert err == ""
    lines = out.splitlines()
    rule_lines = [line for line in lines if line.lstrip()[:1].isdigit()]
    # priority 5 first; then at priority 0 consumer group > topic > global.
    assert [line.split()[1] for line in rule_lines] == ["g-high", "cg-fws", "t-uat", "g-low"]

    g_high, cg, topic, g_low = rule_lines
    assert "global" in g_high and "priority 5" in g_high
    assert "use cluster fws when client.idc=sz" in g_high
    assert "no match" in g_high and "client.idc=sz (actual: sh)" in g_high

    assert "consumer-group" in cg and "priority 0" in cg
    assert "no match" in cg
    assert "topic.bu=travel (actual: hotel)" in cg
    assert "client.env=uat (actual" not in cg  # only the failed condition is listed

    assert "topic" in topic and "use cluster uat when client.env=uat" in topic
    assert topic.endswith("match (winner)")

    assert "global" in g_low and g_low.endswith("not evaluated")

    assert lines[-1].startswith("winner: t-uat")
    assert "cluster=uat" in lines[-1]
    assert "bootstrap.servers=uat-1:9092" in lines[-1]


def test_explain_producer_chain_excludes_group_rules(capsys: pytest.CaptureFixture[str], conf: str) -> None:
    code, out, _ = run(capsys, "explain", "--config", conf, "--topic", "orders", "--client-meta", "env=uat")
    assert code == 0
    assert "cg-billing" not in out
    assert "producer lookup" in out


def test_explain_no_match_exits_3(capsys: pytest.CaptureFixture[str], conf: str) -> None:
    code, out, err = run(
        capsys,
        "explain",
        "--config",
        conf,
        "--topic",
        "orders",
        "--group",
        "billing",
        "--client-meta",
        "env=dev",
    )
    assert code == 3
    rule_lines = [line for line in out.splitlines() if line.lstrip()[:1].isdigit()]
    assert len(rule_lines) == 3
    assert all("no match" in line for line in rule_lines)
    assert "client.env=uat (actual: dev)" in out
    assert out.splitlines()[-1].startswith("winner: none")
    assert "orders" in err and "billing" in err


def test_explain_empty_chain(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rules = [{"id": "t", "meta": {"topic.id": "orders"}, "rule": "use cluster uat"}]
    conf = str(write_config(tmp_path / "c", rules=rules))
    code, out, _ = run(capsys, "explain", "--config", conf, "--topic", "other")
    assert code == 3
    assert "empty" in out
    assert out.splitlines()[-1].startswith("winner: none")


def test_explain_json(capsys: pytest.CaptureFixture[str], conf: str) -> None:
    code, out, _ = run(
        capsys,
        "explain",
        "--config",
        conf,
        "--topic",
        "orders",
        "--group",
        "billing",
        "--client-id",
        "app1",
        "--client-meta",
        "env=prod",
        "--json",
    )
    assert code == 0
    obj = json.loads(out)
    assert obj["lookup"] == "consumer"
    assert obj["client"] == {"id": "app1", "meta": {"env": "prod"}}
    assert obj["factors"]["consumerGroup.jobType"] == "batch"
    assert [(r["rule"], r["kind"], r["verdict"]) for r in obj["chain"]] == [
        ("cg-billing", "consumer-group", "no match"),
        ("t-orders", "topic", "no match"),
        ("g-prod", "global", "match"),
    ]
    assert obj["chain"][1]["failed"] == ["client.env=uat (actual: prod)"]
    assert obj["chain"][1]["statement"] == "use cluster uat when client.env=uat"
    assert obj["winner"] == {
        "cluster": "prod",
        "topic": "orders",
        "bootstrap_servers": "prod-1:9092,prod-2:9092",
        "rule": "g-prod",
    }


# --------------------------------------------------------------------------- validate


def test_validate_ok(capsys: pytest.CaptureFixture[str], conf: str) -> None:
    code, out, err = run(capsys, "validate", "--config", conf)
    assert code == 0
    assert err == ""
    assert out.strip() == "OK: 3 clusters, 2 topics, 1 consumer groups, 4 rules"


def test_validate_lists_every_problem(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rules = [
        *RULES,
        {"id": "r-ghost", "meta": {"rule.isGlobal": True}, "rule": "use cluster ghost"},
        {"id": "r-syntax", "meta": {"rule.isGlobal": True}, "rule": "use cluster prod when a=b AND c=d"},
        {
            "id": "r-twokinds",
            "meta": {"owner": "me", "topic.id": "t", "rule.isGlobal": True},
            "rule": "use cluster prod",
        },
        {"id": "g-prod", "meta": {"rule.isGlobal": True}, "rule": "use cluster prod"},
        {"id": "r-prio", "priority": -1, "meta": {"rule.isGlobal": True}, "rule": "use cluster prod"},
    ]
    conf = str(write_config(tmp_path / "c", rules=rules))
    code, out, err = run(capsys, "validate", "--config", conf)
    assert code == 2
    assert out == ""
    problems = [line for line in err.splitlines() if line.startswith("  ")]
    assert len(problems) == 5, err
    assert all("route-rules.yaml" in p for p in problems)
    by_rule = {
        rule: next(p for p in problems if rule in p) for rule in ("ghost", "r-syntax", "r-twokinds", "r-prio")
    }
    assert "not in clusters.yaml" in by_rule["ghost"]
    assert "column" in by_rule["r-syntax"] and "'AND'" in by_rule["r-syntax"]
    assert "more than one kind" in by_rule["r-twokinds"]
    assert "priority" in by_rule["r-prio"]
    assert any("g-prod" in p and "duplicate" in p for p in problems)
    assert "5 problem(s)" in err


def test_validate_problems_across_files(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    conf = write_config(tmp_path / "c")
    (conf / "topics.yaml").write_text("topics:\n  - id: a\n    meta: [unclosed\n")
    (conf / "clusters.yaml").write_text(
        yaml.safe_dump({"clusters": [*CLUSTERS, {"id": "nobs", "meta": {"sasl.password": SECRET}}]})
    )
    code, _, err = run(capsys, "validate", "--config", str(conf))
    assert code == 2
    assert "topics.yaml" in err and "line" in err
    assert "clusters.yaml" in err and "nobs" in err and "bootstrap.servers" in err


# --------------------------------------------------------------------------- secrets


def test_secret_never_printed(capsys: pytest.CaptureFixture[str], conf: str, tmp_path: Path) -> None:
    """The planted sasl.password appears in no output of any command (run() checks every one)."""
    prod = ("--topic", "orders", "--client-meta", "env=prod")
    for command in ("route", "explain"):
        for extra in ((), ("--json",), ("--group", "billing"), ("--group", "billing", "--json")):
            code, out, _ = run(capsys, command, "--config", conf, *prod, *extra)
            assert code == 0
            assert "prod-1:9092" in out  # the prod cluster, which holds the secret, was printed
            assert "password" not in out
    assert run(capsys, "validate", "--config", conf)[0] == 0
    assert run(capsys, "route", "--config", conf, "--topic", "orders")[0] == 3

    broken = write_config(
        tmp_path / "broken",
        rules=[*RULES, {"id": "x", "meta": {"topic.id": "t"}, "rule": "use cluster ghost"}],
    )
    assert run(capsys, "validate", "--config", str(broken))[0] == 2
    assert run(capsys, "route", "--config", str(broken), *prod)[0] == 2


# --------------------------------------------------------------------------- console script


def _console_script() -> Path:
    script = Path(sys.executable).parent / "kbear"
    if not script.exists():
        pytest.skip(f"console script not installed next to {sys.executable}")
    return script


def test_console_script_exit_codes_propagate(conf: str) -> None:
    script = _console_script()
    ok = subprocess.run(
        [str(script), "route", "--config", conf, "--topic", "orders", "--client-meta", "env=uat", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout) == {
        "cluster": "uat",
        "topic": "orders",
        "bootstrap_servers": "uat-1:9092",
        "rule": "t-orders",
    }

    no_route = subprocess.run(
        [str(script), "route", "--config", conf, "--topic", "orders", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert no_route.returncode == 3
    assert no_route.stdout == ""
    assert "orders" in no_route.stderr
    assert SECRET not in ok.stdout + ok.stderr + no_route.stdout + no_route.stderr
