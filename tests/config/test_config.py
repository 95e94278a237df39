"""Configuration loading and validation (issue 2, section 3)."""

from __future__ import annotations

import copy
import pickle
import textwrap
from pathlib import Path

import pytest

import kbear
from kbear.config import (
    ConfigError,
    ConfigProblem,
    KBearConfig,
    RuleKind,
    _fastyaml,
    config_digest,
    load_config,
)
from kbear.config import _documents as kdocs
from kbear.crrl import Condition, Statement
from kbear.router import Route, Router

CLUSTERS = """
clusters:
  - id: fws
    meta:
      bootstrap.servers: fws-1:9092,fws-2:9092
  - id: uat
    meta:
      bootstrap.servers: uat-1:9092
      security.protocol: SASL_SSL
"""

TOPICS = """
topics:
  - id: fx.kafka.demo.hello.run
    meta:
      bu: hotel
      partitions: 3
      compacted: true
"""

GROUPS = """
consumer-groups:
  - id:
      groupName: fx.kafka.demo.hello.run.consumer
      topicId: fx.kafka.demo.hello.run
    meta:
      jobType: batch
"""

RULES = """
route-rules:
  - id: r100001
    meta:
      rule.isGlobal: true
    rule: use cluster fws
  - id: r100002
    priority: 2
    meta:
      topic.id: fx.kafka.demo.hello.run
    rule: use cluster uat when client.env=uat
  - id: r100003
    meta:
      consumerGroup.groupName: fx.kafka.demo.hello.run.consumer
      consumerGroup.topicId: fx.kafka.demo.hello.run
    rule: use cluster uat, topic fx.kafka.demo.hello.run.v2
"""


@pytest.fixture(autouse=True, params=["pyyaml", "rapidyaml"])
def yaml_reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test runs twice: with PyYAML alone, and with every file, however
    small, offered to the rapidyaml reader first (large files are, when the
    fast-yaml extra is installed): results and errors must be the same."""
    if request.param == "rapidyaml":
        if not _fastyaml.AVAILABLE:
            pytest.skip("rapidyaml (the fast-yaml extra) is not installed")
        monkeypatch.setattr(kdocs, "_FAST_YAML_MIN_CHARS", 0)
    else:
        monkeypatch.setattr(_fastyaml, "AVAILABLE", False)
    return str(request.param)


def write(directory: Path, **files: str | None) -> Path:
    """Write ``clusters=...`` as clusters.yaml etc.; None removes the file."""
    names = {
        "clusters": "clusters.yaml",
        "topics": "topics.yaml",
        "groups": "consumer-groups.yaml",
        "rules": "route-rules.yaml",
    }
    for key, text in files.items():
        path = directory / names[key]
        if text is None:
            path.unlink(missing_ok=True)
        else:
            path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return directory


def full(directory: Path, **overrides: str | None) -> Path:
    files: dict[str, str | None] = {"clusters": CLUSTERS, "topics": TOPICS, "groups": GROUPS, "rules": RULES}
    files.update(overrides)
    return write(directory, **files)


def problems_of(directory: Path, **kwargs: object) -> list[ConfigProblem]:
    with pytest.raises(ConfigError) as info:
        load_config(directory, **kwargs)  # type: ignore[arg-type]
    return info.value.problems


def only_problem(directory: Path, **kwargs: object) -> tuple[ConfigProblem, str]:
    with pytest.raises(ConfigError) as info:
        load_config(directory, **kwargs)  # type: ignore[arg-type]
    assert len(info.value.problems) == 1, str(info.value)
    return info.value.problems[0], str(info.value)


# --------------------------------------------------------------------------- loading


def test_loads_the_four_files(tmp_path: Path) -> None:
    config = load_config(full(tmp_path))
    assert isinstance(config, KBearConfig)
    assert kbear.load_config is load_config
    assert config.directory == tmp_path
    assert list(config.clusters) == ["fws", "uat"]
    assert config.clusters["fws"].bootstrap_servers == "fws-1:9092,fws-2:9092"
    assert config.clusters["uat"].client_properties == {
        "bootstrap.servers": "uat-1:9092",
        "security.protocol": "SASL_SSL",
    }
    assert config.topics["fx.kafka.demo.hello.run"].meta["bu"] == "hotel"
    group = config.consumer_groups[("fx.kafka.demo.hello.run.consumer", "fx.kafka.demo.hello.run")]
    assert group.group_name == "fx.kafka.demo.hello.run.consumer"
    assert group.topic_id == "fx.kafka.demo.hello.run"
    assert group.meta == {"jobType": "batch"}
    assert [r.id for r in config.rules] == ["r100001", "r100002", "r100003"]
    r1, r2, r3 = config.rules
    assert (r1.kind, r1.priority, r1.position) == (RuleKind.GLOBAL, 0, 0)
    assert (r2.kind, r2.priority, r2.topic_id) == (RuleKind.TOPIC, 2, "fx.kafka.demo.hello.run")
    assert r2.statement == Statement("uat", None, (Condition("client.env", "uat"),))
    assert r3.kind is RuleKind.CONSUMER_GROUP
    assert (r3.group_name, r3.topic_id) == ("fx.kafka.demo.hello.run.consumer", "fx.kafka.demo.hello.run")
    assert r3.statement.topic == "fx.kafka.demo.hello.run.v2"


def test_topics_and_consumer_groups_are_optional(tmp_path: Path) -> None:
    config = load_config(full(tmp_path, topics=None, groups=None))
    assert config.topics == {}
    assert config.consumer_groups == {}
    assert len(config.rules) == 3


def test_empty_optional_files_are_fine(tmp_path: Path) -> None:
    config = load_config(full(tmp_path, topics="", groups="consumer-groups:\n"))
    assert config.topics == {}
    assert config.consumer_groups == {}


def test_scalars_become_strings(tmp_path: Path) -> None:
    config = load_config(full(tmp_path))
    meta = config.topics["fx.kafka.demo.hello.run"].meta
    assert meta["partitions"] == "3"
    assert meta["compacted"] == "true"
    assert config.rules[0].meta == {"rule.isGlobal": "true"}


def test_numbers_and_dates_keep_their_written_text(tmp_path: Path) -> None:
    # CRRL compares text: `topic.version=1.10` must match `version: 1.10`, not "1.1".
    full(
        tmp_path,
        topics="""
        topics:
          - id: 1.10
            meta: {version: 1.10, since: 2024-01-01, at: 2024-01-01T10:00:00Z, mode: 0o17, big: 1_000}
        """,
    )
    topic = load_config(tmp_path).topics["1.10"]
    assert topic.meta == {
        "version": "1.10",
        "since": "2024-01-01",
        "at": "2024-01-01T10:00:00Z",
        "mode": "0o17",
        "big": "1_000",
    }


def test_numeric_ids_become_strings(tmp_path: Path) -> None:
    write(
        tmp_path,
        clusters="""
        clusters:
          - id: 42
            meta: {bootstrap.servers: h:1, linger.ms: 5, enable.idempotence: false}
        """,
        rules="""
        route-rules:
          - id: 7
            meta: {rule.isGlobal: true}
            rule: use cluster 42
        """,
    )
    config = load_config(tmp_path)
    assert config.clusters["42"].meta == {
        "bootstrap.servers": "h:1",
        "linger.ms": "5",
        "enable.idempotence": "false",
    }
    assert config.rules[0].id == "7"


def test_env_references_are_read_from_environ_argument(tmp_path: Path) -> None:
    write(
        tmp_path,
        clusters="""
        clusters:
          - id: fws
            meta:
              bootstrap.servers: ${FWS_HOST}:9092
              sasl.username: app
              sasl.password: ${FWS_PASSWORD}
              ssl.ca.location: $${NOT_A_REF}
        """,
        rules=RULES.replace("use cluster uat", "use cluster fws"),
    )
    config = load_config(tmp_path, environ={"FWS_HOST": "broker", "FWS_PASSWORD": "s3cr3t"})
    meta = config.clusters["fws"].meta
    assert meta["bootstrap.servers"] == "broker:9092"
    assert meta["sasl.password"] == "s3cr3t"
    assert meta["ssl.ca.location"] == "${NOT_A_REF}"


def test_env_references_default_to_os_environ(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KBEAR_TEST_BOOTSTRAP", "from-env:9092")
    write(
        tmp_path,
        clusters="""
        clusters:
          - id: fws
            meta: {bootstrap.servers: "${KBEAR_TEST_BOOTSTRAP}"}
        """,
        rules="""
        route-rules:
          - id: r1
            meta: {rule.isGlobal: true}
            rule: use cluster fws
        """,
    )
    assert load_config(tmp_path).clusters["fws"].bootstrap_servers == "from-env:9092"


def test_digest_follows_content_not_mtime(tmp_path: Path) -> None:
    full(tmp_path)
    first = load_config(tmp_path).digest
    assert first == config_digest(tmp_path)
    (tmp_path / "route-rules.yaml").write_text((tmp_path / "route-rules.yaml").read_text())
    assert load_config(tmp_path).digest == first
    full(tmp_path, rules=RULES.replace("priority: 2", "priority: 3"))
    assert load_config(tmp_path).digest != first


# --------------------------------------------------------------------------- errors


def test_config_error_is_a_value_error_listing_problems(tmp_path: Path) -> None:
    full(tmp_path, rules=RULES.replace("use cluster fws", "use clusterfws"))
    with pytest.raises(ValueError) as info:
        load_config(tmp_path)
    assert isinstance(info.value, kbear.ConfigError)
    assert str(tmp_path) in str(info.value)
    assert "1 problem(s)" in str(info.value)


def test_yaml_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    full(
        tmp_path,
        topics="""
        topics:
          - id: a
            meta: {bu: [unclosed
          - id: b
        """,
    )
    problem, text = only_problem(tmp_path)
    assert problem.file == "topics.yaml"
    assert "YAML syntax error at line 4" in problem.message
    assert "topics.yaml: YAML syntax error at line 4" in text


def test_yaml_tab_indentation_error_has_line(tmp_path: Path) -> None:
    full(tmp_path, clusters="clusters:\n  - id: fws\n\tmeta: {bootstrap.servers: h:1}\n")
    problem, _ = only_problem(tmp_path)
    assert problem.file == "clusters.yaml"
    assert "line 3" in problem.message


@pytest.mark.parametrize(
    ("files", "file", "key", "line"),
    [
        (
            {"rules": "route-rules:\n  - id: r1\n    id: r2\n    meta: {rule.isGlobal: true}\n    rule: x\n"},
            "route-rules.yaml",
            "'id'",
            3,
        ),
        (
            {
                "clusters": "clusters:\n  - id: fws\n    meta:\n      bootstrap.servers: a:1\n"
                "      bootstrap.servers: b:1\n"
            },
            "clusters.yaml",
            "'bootstrap.servers'",
            5,
        ),
        ({"topics": "topics: []\ntopics: []\n"}, "topics.yaml", "'topics'", 2),
    ],
)
def test_duplicate_yaml_keys_are_refused(
    tmp_path: Path, files: dict[str, str], file: str, key: str, line: int
) -> None:
    full(tmp_path, **files)
    problem, text = only_problem(tmp_path)
    assert problem.file == file
    assert f"duplicate key {key}" in problem.message
    assert f"line {line}" in problem.message
    assert file in text


def ignored(directory: Path, caplog: pytest.LogCaptureFixture, rule_id: str) -> str:
    """The reason ``rule_id`` is ignored in the configuration of ``directory``: it
    loads, the rule is left out of the chain, and a warning names it."""
    with caplog.at_level("WARNING", logger="kbear.config"):
        config = load_config(directory)
    assert rule_id not in {r.id for r in config.rules}
    (entry, reason), *others = config.ignored_rules
    assert not others and entry == f"rule '{rule_id}'"
    messages = [r.getMessage() for r in caplog.records]
    assert any(f"rule '{rule_id}'" in m and "no lookup" in m for m in messages)
    return reason


def test_rule_of_no_kind_is_ignored(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A rule of no kind takes part in no lookup (CRRL spec, "Kinds of rule"): loaded
    and ignored with a warning, as the reference system does with its own test files."""
    full(
        tmp_path,
        rules="""
        route-rules:
          - id: r0
            meta:
              rule.isGlobal: true
            rule: use cluster fws
          - id: r9
            meta:
              rule.isGlobal: false
              owner: team-a
            rule: use cluster fws
        """,
    )
    assert "rule of no kind" in ignored(tmp_path, caplog, "r9")


def test_rule_without_meta_is_of_no_kind(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    full(tmp_path, rules="route-rules:\n  - id: r9\n    rule: use cluster fws\n")
    assert "rule of no kind" in ignored(tmp_path, caplog, "r9")


def test_an_ignored_rule_must_still_be_valid(tmp_path: Path) -> None:
    """Ignored, not unchecked: its CRRL and its cluster are checked like any rule's."""
    full(tmp_path, rules="route-rules:\n  - id: r9\n    rule: use cluster nowhere\n")
    problem, _ = only_problem(tmp_path)
    assert problem.entry == "rule 'r9'" and "nowhere" in problem.message


@pytest.mark.parametrize(
    ("present", "missing"),
    [
        ("consumerGroup.groupName: g", "consumerGroup.topicId"),
        ("consumerGroup.topicId: t", "consumerGroup.groupName"),
    ],
)
def test_half_consumer_group_rule_is_ignored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, present: str, missing: str
) -> None:
    full(
        tmp_path,
        rules=f"""
        route-rules:
          - id: r5
            meta:
              {present}
            rule: use cluster fws
        """,
    )
    reason = ignored(tmp_path, caplog, "r5")
    assert "consumer-group rule needs both" in reason
    assert f"missing {missing}" in reason


def test_half_consumer_group_on_a_topic_rule_is_refused(tmp_path: Path) -> None:
    full(
        tmp_path,
        rules="""
        route-rules:
          - id: r5
            meta:
              topic.id: t
              consumerGroup.groupName: g
            rule: use cluster fws
        """,
    )
    problem, _ = only_problem(tmp_path)
    assert problem.entry == "rule 'r5'" and "consumer-group rule needs both" in problem.message


def test_rule_of_two_kinds_is_refused(tmp_path: Path) -> None:
    full(
        tmp_path,
        rules="""
        route-rules:
          - id: r6
            meta: {rule.isGlobal: true, topic.id: t}
            rule: use cluster fws
        """,
    )
    problem, _ = only_problem(tmp_path)
    assert problem.entry == "rule 'r6'"
    assert "more than one kind" in problem.message


def test_crrl_syntax_error_names_rule_and_column(tmp_path: Path) -> None:
    full(
        tmp_path,
        rules="""
        route-rules:
          - id: r7
            meta: {rule.isGlobal: true}
            rule: use cluster c when topic.id=t AND client.id=x
        """,
    )
    problem, text = only_problem(tmp_path)
    assert (problem.file, problem.entry) == ("route-rules.yaml", "rule 'r7'")
    assert "expected 'and' or end of rule at column 31, found 'AND'" in problem.message
    assert "route-rules.yaml: rule 'r7': key 'rule': expected 'and'" in text


@pytest.mark.parametrize(
    ("files", "file", "entry", "reason"),
    [
        (
            {"clusters": CLUSTERS + "  - id: fws\n    meta: {bootstrap.servers: other:9092}\n"},
            "clusters.yaml",
            "cluster 'fws'",
            "duplicate cluster id",
        ),
        (
            {"topics": TOPICS + "  - id: fx.kafka.demo.hello.run\n"},
            "topics.yaml",
            "topic 'fx.kafka.demo.hello.run'",
            "duplicate topic id",
        ),
        (
            {"rules": RULES + "  - id: r100001\n    meta: {topic.id: t}\n    rule: use cluster uat\n"},
            "route-rules.yaml",
            "rule 'r100001'",
            "duplicate rule id",
        ),
        (
            {
                "groups": GROUPS
                + "  - id: {groupName: fx.kafka.demo.hello.run.consumer, topicId: fx.kafka.demo.hello.run}\n"
            },
            "consumer-groups.yaml",
            "consumer group 'fx.kafka.demo.hello.run.consumer' on topic 'fx.kafka.demo.hello.run'",
            "duplicate (groupName, topicId)",
        ),
    ],
)
def test_duplicate_ids(tmp_path: Path, files: dict[str, str], file: str, entry: str, reason: str) -> None:
    full(tmp_path, **files)
    problem, text = only_problem(tmp_path)
    assert (problem.file, problem.entry) == (file, entry)
    assert reason in problem.message
    assert f"{file}: {entry}: " in text


def test_same_group_on_two_topics_is_not_a_duplicate(tmp_path: Path) -> None:
    full(
        tmp_path,
        groups=GROUPS + "  - id: {groupName: fx.kafka.demo.hello.run.consumer, topicId: other}\n",
    )
    assert len(load_config(tmp_path).consumer_groups) == 2


def test_a_consumer_group_entry_is_named_by_its_place_in_the_file(tmp_path: Path) -> None:
    # An entry that is no mapping still counts: the bad group after it is entry 2.
    full(tmp_path, groups="consumer-groups:\n  - not a mapping\n  - id: {groupName: g}\n")
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path)
    assert [(p.file, p.entry) for p in info.value.problems] == [
        ("consumer-groups.yaml", "entry 1"),
        ("consumer-groups.yaml", "entry 2"),
    ]


def test_rule_naming_an_unknown_cluster(tmp_path: Path) -> None:
    full(tmp_path, rules=RULES.replace("use cluster fws", "use cluster prod"))
    problem, text = only_problem(tmp_path)
    assert (problem.file, problem.entry) == ("route-rules.yaml", "rule 'r100001'")
    assert "'prod'" in problem.message
    assert "not in clusters.yaml" in problem.message
    assert "known: fws, uat" in problem.message
    assert "prod" in text


def test_rules_are_refused_when_clusters_yaml_lists_no_cluster(tmp_path: Path) -> None:
    # An empty cluster list must not let rules through: they would route to nothing.
    full(tmp_path, clusters="clusters: []\n")
    problems = problems_of(tmp_path)
    assert {p.entry for p in problems} == {"rule 'r100001'", "rule 'r100002'", "rule 'r100003'"}
    assert all("not in clusters.yaml (known: none)" in p.message for p in problems)


def test_rule_naming_an_invalid_cluster_reports_the_cluster_only(tmp_path: Path) -> None:
    full(
        tmp_path,
        clusters=CLUSTERS.replace("      bootstrap.servers: uat-1:9092\n", ""),
    )
    problem, _ = only_problem(tmp_path)
    assert (problem.file, problem.entry) == ("clusters.yaml", "cluster 'uat'")
    assert "bootstrap.servers" in problem.message


@pytest.mark.parametrize(
    ("priority", "shown"),
    [("-1", "-1"), ("true", "True"), ('"3"', "'3'"), ("1.5", "1.5"), ("high", "'high'")],
)
def test_priority_must_be_a_non_negative_integer(tmp_path: Path, priority: str, shown: str) -> None:
    full(tmp_path, rules=RULES.replace("priority: 2", f"priority: {priority}"))
    problem, text = only_problem(tmp_path)
    assert problem.file == "route-rules.yaml"
    assert "r100002" in (problem.entry or "")
    assert "priority" in problem.message
    assert f"must be a non-negative integer, got {shown}" in problem.message
    assert "route-rules.yaml" in text


def test_priority_zero_and_large_are_fine(tmp_path: Path) -> None:
    full(tmp_path, rules=RULES.replace("priority: 2", "priority: 1000000"))
    assert load_config(tmp_path).rules[1].priority == 1000000


@pytest.mark.parametrize(
    "meta",
    ["meta: {security.protocol: SSL}", "meta: {bootstrap.servers: ''}", "meta: {bootstrap.servers: '  '}"],
)
def test_cluster_without_bootstrap_servers(tmp_path: Path, meta: str) -> None:
    full(tmp_path, clusters=CLUSTERS + f"  - id: prod\n    {meta}\n")
    problem, text = only_problem(tmp_path)
    assert (problem.file, problem.entry) == ("clusters.yaml", "cluster 'prod'")
    assert "'bootstrap.servers' is required" in problem.message
    assert "clusters.yaml: cluster 'prod':" in text


def test_cluster_without_meta(tmp_path: Path) -> None:
    full(tmp_path, clusters=CLUSTERS + "  - id: prod\n")
    problem, _ = only_problem(tmp_path)
    assert problem.file == "clusters.yaml"
    assert "prod" in (problem.entry or "")
    assert "meta" in problem.message


def test_bootstrap_servers_empty_after_env_is_refused(tmp_path: Path) -> None:
    full(tmp_path, clusters=CLUSTERS.replace("fws-1:9092,fws-2:9092", "'${FWS_BOOTSTRAP}'"))
    problem, _ = only_problem(tmp_path, environ={"FWS_BOOTSTRAP": ""})
    assert (problem.file, problem.entry) == ("clusters.yaml", "cluster 'fws'")
    assert "bootstrap.servers" in problem.message


@pytest.mark.parametrize("name", ["clusters.yaml", "route-rules.yaml"])
def test_missing_required_file(tmp_path: Path, name: str) -> None:
    full(tmp_path)
    (tmp_path / name).unlink()
    problem, text = only_problem(tmp_path)
    assert problem.file == name
    assert "missing" in problem.message
    assert f"{name}: missing" in text


def test_empty_required_file(tmp_path: Path) -> None:
    full(tmp_path, clusters="")
    problems = problems_of(tmp_path)
    assert problems[0].file == "clusters.yaml"
    assert "empty" in problems[0].message


def test_wrong_top_level_key(tmp_path: Path) -> None:
    full(tmp_path, topics="topic:\n  - id: a\n")
    problem, _ = only_problem(tmp_path)
    assert problem.file == "topics.yaml"
    assert "top-level key 'topics'" in problem.message


@pytest.mark.parametrize(
    ("kind", "says"),
    [
        ("missing", "no such directory (kbear init DIR writes"),
        ("file", "a file, not a directory"),
        ("dangling link", "a symbolic link to '../gone', which does not exist (a copy of a link?"),
    ],
)
def test_not_a_directory_says_what_is_there(tmp_path: Path, kind: str, says: str) -> None:
    """A missing path, a file and a copied relative link that points nowhere (what
    ``cp -r`` of a link to a directory makes) each get their own words."""
    target = tmp_path / "conf"
    if kind == "file":
        target.write_text("clusters: []\n")
    elif kind == "dangling link":
        target.symlink_to("../gone")
    problem, text = only_problem(target)
    assert problem.file == str(target)
    assert says in problem.message
    assert str(target) in text


def test_unset_environment_variable(tmp_path: Path) -> None:
    full(tmp_path, clusters=CLUSTERS.replace("SASL_SSL", "SASL_SSL\n      sasl.password: ${UAT_PASSWORD}"))
    problem, text = only_problem(tmp_path, environ={})
    assert (problem.file, problem.entry) == ("clusters.yaml", "cluster 'uat'")
    assert "'sasl.password'" in problem.message
    assert "UAT_PASSWORD is not set" in problem.message
    assert "clusters.yaml: cluster 'uat': key 'sasl.password'" in text


def test_unknown_rule_key_is_refused(tmp_path: Path) -> None:
    full(tmp_path, rules=RULES.replace("    rule: use cluster fws", "    rule: use cluster fws\n    prio: 3"))
    problem, _ = only_problem(tmp_path)
    assert problem.file == "route-rules.yaml"
    assert "r100001" in (problem.entry or "")
    assert "prio" in problem.message


def test_every_problem_is_reported_together(tmp_path: Path) -> None:
    write(
        tmp_path,
        clusters="""
        clusters:
          - id: fws
            meta: {bootstrap.servers: h:1, sasl.password: "${NOPE}"}
          - id: fws
            meta: {bootstrap.servers: h:2}
        """,
        topics="topics:\n  - id: [oops\n",
        rules="""
        route-rules:
          - id: a
            meta: {rule.isGlobal: true}
            rule: use cluster fws when x=y AND z=w
          - id: b
            meta: {topic.id: t, rule.isGlobal: true}
            rule: use cluster fws
          - id: c
            priority: -2
            meta: {topic.id: t}
            rule: use cluster fws
          - id: d
            meta: {topic.id: t}
            rule: use cluster nowhere
          - id: d
            meta: {consumerGroup.groupName: g, topic.id: t}
            rule: use cluster fws
        """,
    )
    problems = problems_of(tmp_path, environ={})
    found = {(p.file, p.entry): p.message for p in problems}
    fws_messages = [p.message for p in problems if (p.file, p.entry) == ("clusters.yaml", "cluster 'fws'")]
    assert any("NOPE is not set" in m for m in fws_messages)
    assert "duplicate cluster id" in fws_messages
    assert "YAML syntax error" in found[("topics.yaml", None)]
    assert "column 26" in found[("route-rules.yaml", "rule 'a'")]
    assert "more than one kind" in found[("route-rules.yaml", "rule 'b'")]
    assert any("non-negative" in p.message and "'c'" in (p.entry or "") for p in problems)
    d_messages = [p.message for p in problems if p.entry == "rule 'd'"]
    assert any("nowhere" in m for m in d_messages)
    assert any("duplicate rule id" in m for m in d_messages)
    assert any("consumerGroup.topicId" in m for m in d_messages)
    assert len(problems) >= 9


# --------------------------------------------------------------------------- secrets

SECRET_CLUSTERS = """
clusters:
  - id: prod
    meta:
      bootstrap.servers: prod:9092
      security.protocol: SASL_SSL
      sasl.username: app
      sasl.password: pw-VALUE-1
      sasl.jaas.config: org.apache...PlainLoginModule required password="jaas-VALUE-2";
      ssl.key.pem: "-----BEGIN PRIVATE KEY-----pem-VALUE-3"
      sasl.oauthbearer.client.secret: "${OAUTH_SECRET}"
"""
SECRETS = ("pw-VALUE-1", "jaas-VALUE-2", "pem-VALUE-3", "env-VALUE-4")


def secret_config(tmp_path: Path) -> KBearConfig:
    write(
        tmp_path,
        clusters=SECRET_CLUSTERS,
        rules="route-rules:\n  - id: r1\n    meta: {rule.isGlobal: true}\n    rule: use cluster prod\n",
    )
    return load_config(tmp_path, environ={"OAUTH_SECRET": "env-VALUE-4"})


def test_secrets_are_loaded_for_the_client(tmp_path: Path) -> None:
    cluster = secret_config(tmp_path).clusters["prod"]
    props = cluster.client_properties
    assert props["sasl.password"] == "pw-VALUE-1"
    assert props["sasl.oauthbearer.client.secret"] == "env-VALUE-4"
    # A Java-only property librdkafka refuses whatever its value: kept as meta, never
    # passed to clients (issue #12).
    assert "jaas-VALUE-2" in cluster.meta["sasl.jaas.config"]
    assert "sasl.jaas.config" not in props


def test_secrets_never_appear_in_repr(tmp_path: Path) -> None:
    config = secret_config(tmp_path)
    cluster = config.clusters["prod"]
    route = Router(config).route_producer("orders")
    assert isinstance(route, Route)
    assert route.properties["sasl.password"] == "pw-VALUE-1"
    for shown in (repr(cluster), str(cluster), repr(route), str(route), repr(config)):
        for secret in SECRETS:
            assert secret not in shown
    assert "sasl.username" in repr(cluster) and "'app'" in repr(cluster)
    assert "sasl.password" in repr(route)


def test_secrets_never_appear_in_config_errors(tmp_path: Path) -> None:
    write(
        tmp_path,
        clusters=SECRET_CLUSTERS
        + "  - id: prod\n    meta: {bootstrap.servers: x:1, sasl.password: pw-VALUE-1}\n",
        rules="route-rules:\n  - id: r1\n    meta: {rule.isGlobal: true}\n    rule: use cluster nope\n",
    )
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path, environ={"OAUTH_SECRET": "env-VALUE-4"})
    assert len(info.value.problems) == 2
    for secret in SECRETS:
        assert secret not in str(info.value)


def test_config_error_survives_pickle_and_copy(tmp_path: Path) -> None:
    full(tmp_path, rules=RULES.replace("use cluster fws", "use cluster nowhere"))
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path)
    for clone in (pickle.loads(pickle.dumps(info.value)), copy.deepcopy(info.value)):
        assert isinstance(clone, ConfigError)
        assert clone.problems == info.value.problems
        assert clone.directory == info.value.directory
        assert str(clone) == str(info.value)


# --------------------------------------------------------------------------- the catalogue of bad input
#
# Each case is a row of the table in docs/guides/lint.md: what a user gets
# for one mistake, word for word (str(ConfigProblem), as `kbear validate` prints it).

_C = "clusters:\n  - id: fws\n    meta:\n      bootstrap.servers: fws-1:9092\n"
_R = "route-rules:\n  - id: r1\n    meta: {rule.isGlobal: true}\n    rule: use cluster fws\n"

CATALOGUE: list[tuple[str, dict[str, str | bytes | None], list[str]]] = [
    (
        "empty required file",
        {"clusters.yaml": ""},
        ["clusters.yaml: empty; expected a top-level key 'clusters' holding a list"],
    ),
    (
        "comments only",
        {"route-rules.yaml": "# nothing yet\n"},
        ["route-rules.yaml: empty; expected a top-level key 'route-rules' holding a list"],
    ),
    ("missing required file", {"route-rules.yaml": None}, ["route-rules.yaml: missing (required in {dir})"]),
    (
        "tab indentation",
        {"clusters.yaml": "clusters:\n  - id: fws\n    meta:\n\t  bootstrap.servers: h:1\n"},
        [
            "clusters.yaml: YAML syntax error at line 4, column 1: while scanning for the next token "
            "found character '\\t' that cannot start any token "
            "(YAML does not allow tabs for indentation: indent with spaces)"
        ],
    ),
    (
        "entry is not a mapping",
        {"route-rules.yaml": "route-rules:\n  - use cluster fws\n  - [r2, use cluster fws]\n"},
        [
            "route-rules.yaml: entry 1: must be a mapping, got str",
            "route-rules.yaml: entry 2: must be a mapping, got list",
        ],
    ),
    (
        "list is a mapping",
        {"route-rules.yaml": "route-rules:\n  id: r1\n"},
        ["route-rules.yaml: 'route-rules' must be a list, got dict"],
    ),
    (
        "wrong types",
        {"route-rules.yaml": "route-rules:\n  - id: [r1]\n    meta: [rule.isGlobal]\n    rule: {use: fws}\n"},
        [
            "route-rules.yaml: entry 1: key 'id': Input should be a valid string",
            "route-rules.yaml: entry 1: key 'meta': Input should be a valid dictionary",
            "route-rules.yaml: entry 1: key 'rule': Input should be a valid string",
        ],
    ),
    (
        "meta value not a scalar",
        {"clusters.yaml": _C + "      linger.ms: [5]\n"},
        ["clusters.yaml: cluster 'fws': key 'meta.linger.ms': Input should be a valid string"],
    ),
    (
        "duplicate YAML key",
        {"route-rules.yaml": _R + "    rule: use cluster uat\n"},
        [
            "route-rules.yaml: YAML syntax error at line 5, column 5: "
            "while constructing a mapping found duplicate key 'rule'"
        ],
    ),
    (
        "duplicate id",
        {"route-rules.yaml": _R + "  - id: r1\n    meta: {topic.id: t}\n    rule: use cluster fws\n"},
        ["route-rules.yaml: rule 'r1': duplicate rule id"],
    ),
    (
        "unknown cluster",
        {"route-rules.yaml": _R.replace("use cluster fws", "use cluster prod")},
        ["route-rules.yaml: rule 'r1': uses cluster 'prod', which is not in clusters.yaml (known: fws)"],
    ),
    (
        "unset ${VAR}",
        {"clusters.yaml": _C + "      sasl.password: ${FWS_PASSWORD}\n"},
        ["clusters.yaml: cluster 'fws': key 'sasl.password': environment variable FWS_PASSWORD is not set"],
    ),
    (
        "every problem of a rule at once",
        {
            "route-rules.yaml": "route-rules:\n  - id: r1\n    priority: -1\n"
            "    meta: {topic.id: o, rule.isGlobal: true}\n    rule: use cluster prod\n"
        },
        [
            "route-rules.yaml: rule 'r1': key 'priority': must be a non-negative integer, got -1",
            "route-rules.yaml: rule 'r1': rule of more than one kind (global and topic)",
            "route-rules.yaml: rule 'r1': uses cluster 'prod', which is not in clusters.yaml (known: fws)",
        ],
    ),
    (
        "integer too long",
        {"route-rules.yaml": _R.replace("    meta:", "    priority: " + "9" * 5000 + "\n    meta:")},
        [
            "route-rules.yaml: YAML syntax error at line 3, column 15: "
            "cannot read this value: an integer of more than 4300 digits"
        ],
    ),
    (
        "nesting too deep",
        {"topics.yaml": "topics: " + "[" * 100_000 + "]" * 100_000 + "\n"},
        ["topics.yaml: YAML nested too deeply to read"],
    ),
    ("not UTF-8", {"topics.yaml": b"\xff\xfetopics: []\n"}, ["topics.yaml: not UTF-8 text (byte 0)"]),
    (
        "control character",
        {"topics.yaml": "topics:\n  - id: a\x00b\n"},
        ["topics.yaml: YAML error at line 2, column 10: character #x0000 is not allowed"],
    ),
    (
        "half-written file",
        {"route-rules.yaml": _R + "  - id: r2\n    meta: {topic.id: ord"},
        [
            "route-rules.yaml: YAML syntax error at line 6, column 25: "
            "while parsing a flow mapping expected ',' or '}', but got '<stream end>'"
        ],
    ),
    (
        "half-written rule",
        {"route-rules.yaml": _R + "  - id: r2\n    meta: {topic.id: orders}\n    rule: use clus"},
        [
            "route-rules.yaml: rule 'r2': key 'rule': "
            "expected 'cluster' at column 5, found 'clus' in 'use clus'"
        ],
    ),
]


@pytest.mark.parametrize(("files", "expected"), [c[1:] for c in CATALOGUE], ids=[c[0] for c in CATALOGUE])
def test_catalogue_of_bad_configuration(
    tmp_path: Path, files: dict[str, str | bytes | None], expected: list[str]
) -> None:
    (tmp_path / "clusters.yaml").write_text(_C)
    (tmp_path / "route-rules.yaml").write_text(_R)
    for name, content in files.items():
        if content is None:
            (tmp_path / name).unlink()
        elif isinstance(content, bytes):
            (tmp_path / name).write_bytes(content)
        else:
            (tmp_path / name).write_text(content, encoding="utf-8")
    shown = [str(p) for p in problems_of(tmp_path, environ={})]
    assert shown == [line.replace("{dir}", str(tmp_path)) for line in expected]


def test_utf8_bom_loads(tmp_path: Path) -> None:
    # Editors on Windows write one; the file must read the same without it.
    (tmp_path / "clusters.yaml").write_bytes(b"\xef\xbb\xbf" + _C.encode())
    (tmp_path / "route-rules.yaml").write_bytes(b"\xef\xbb\xbf" + _R.encode())
    config = load_config(tmp_path)
    assert list(config.clusters) == ["fws"]
    assert config.rules[0].id == "r1"


def test_priority_error_does_not_hide_the_rest_of_the_rule(tmp_path: Path) -> None:
    # Before: a failing pydantic field stopped the checks of its rule.
    full(
        tmp_path, rules=RULES.replace("priority: 2", "priority: -1").replace("client.env=uat", "a=b AND c=d")
    )
    messages = [p.message for p in problems_of(tmp_path) if p.entry == "rule 'r100002'"]
    assert len(messages) == 2
    assert "must be a non-negative integer, got -1" in messages[0]
    assert "found 'AND'" in messages[1]


def test_rule_with_a_bad_field_still_counts_for_duplicate_ids(tmp_path: Path) -> None:
    full(
        tmp_path,
        rules=RULES
        + "  - id: r100002\n    priority: x\n    meta: {topic.id: t}\n    rule: use cluster fws\n",
    )
    shown = [str(p) for p in problems_of(tmp_path) if p.entry == "rule 'r100002'"]
    assert shown == [
        "route-rules.yaml: rule 'r100002': key 'priority': must be a non-negative integer, got 'x'",
        "route-rules.yaml: rule 'r100002': duplicate rule id",
    ]


def test_huge_bad_value_is_shown_briefly(tmp_path: Path) -> None:
    # A value multiplied by aliases must not be rendered whole in the message.
    full(
        tmp_path,
        rules="a: &a [x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a]\n"
        "route-rules:\n  - id: r1\n    priority: [*b, *b, *b, *b, *b, *b, *b, *b]\n"
        "    meta: {rule.isGlobal: true}\n    rule: use cluster fws\n",
    )
    messages = [str(p) for p in problems_of(tmp_path)]
    assert (
        "route-rules.yaml: rule 'r1': key 'priority': must be a non-negative integer, got a list" in messages
    )
    assert all(len(m) < 200 for m in messages)


def test_one_megabyte_of_rules_loads(tmp_path: Path) -> None:
    """1 MB of route-rules.yaml (about 7,500 rules) loads; no time is asserted
    (measured: 1.2 s with libyaml, 5.6 s without, on 2 cores)."""
    lines = ["route-rules:"]
    size = 0
    while size < 1_000_000:
        i = len(lines) - 1
        entry = (
            f"  - id: rule-{i:06d}\n    priority: {i % 7}\n    meta: {{topic.id: topic.{i % 2000:05d}}}\n"
            f"    rule: use cluster {('fws', 'uat')[i % 2]} "
            f"when client.env=env{i % 13} and client.idc=idc{i % 5}"
        )
        lines.append(entry)
        size += len(entry) + 1
    write(tmp_path, clusters=CLUSTERS, rules="\n".join(lines) + "\n")
    assert (tmp_path / "route-rules.yaml").stat().st_size >= 1_000_000
    config = load_config(tmp_path)
    assert len(config.rules) == len(lines) - 1
    router = Router(config)
    route = router.route_producer("topic.00003", kbear.Client("app", {"env": "env3", "idc": "idc3"}))
    assert route.rule_id == "rule-000003"


# --------------------------------------------------------------------------- secrets in YAML errors


@pytest.mark.parametrize(
    "value", ["!Hunter2Secret", "*Hunter2Secret", '"Hunter2Secret\\q"', "&Hunter2Secret x: y"]
)
def test_yaml_error_on_a_secret_line_does_not_quote_it(tmp_path: Path, value: str) -> None:
    # PyYAML quotes tags and aliases in its messages: an unquoted password that
    # starts with ! or * would be printed.
    full(tmp_path, clusters=CLUSTERS + f"      sasl.password: {value}\n")
    problem, text = only_problem(tmp_path)
    assert problem.file == "clusters.yaml"
    assert "line 9" in problem.message
    assert "Hunter2Secret" not in text
    assert "\\q" not in text


def test_yaml_error_elsewhere_keeps_its_detail(tmp_path: Path) -> None:
    full(tmp_path, clusters=CLUSTERS + "      client.id: !custom\n")
    problem, _ = only_problem(tmp_path)
    assert problem.message.endswith("could not determine a constructor for the tag '!custom'")
