"""Fuzzing the configuration (issue #31): random shapes, types, keys and
``${NAME}``s, as in-memory documents and as the same YAML files, and CRRL
evaluated against random factors. Whatever the input: a ConfigError whose every
problem names its file (and entry), or a configuration that routes; a document
loads from memory exactly when it loads from its YAML file."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import yaml
from _fuzz import KEYS, NAMES, VALUES, examples
from hypothesis import given
from hypothesis import strategies as st

from kbear import Client, ConfigError, MemorySource, NoRouteError, Router
from kbear.config import CONFIG_FILES, KBearConfig, load_config, load_documents
from kbear.crrl import Condition, Statement, parse

ENV = {"EAST": "east:9092", "WEST": "west:9092"}
CLUSTER_IDS = ["east", "west", "dr"]
FACTORS = ["client.env", "client.id", "topic.id", "topic.bu", "consumerGroup.groupName", "env"]


def maybe(strategy: st.SearchStrategy[Any], p_junk: int = 8) -> st.SearchStrategy[Any]:
    """``strategy`` mostly, a random value one time in ``p_junk``."""
    return st.one_of(*([strategy] * (p_junk - 1)), VALUES)


_servers = st.sampled_from(["east:9092", "${EAST}", "${WEST}", "${MISSING}", "$${EAST}", "h1:1,h2:2"])
_cluster = st.fixed_dictionaries(
    {
        "id": maybe(st.sampled_from(CLUSTER_IDS)),
        "meta": maybe(
            st.fixed_dictionaries(
                {"bootstrap.servers": maybe(_servers)},
                optional={
                    "linger.ms": maybe(st.sampled_from(["5", 5, "x"])),
                    "linger.mss": st.just("5"),
                    "zookeeper.connect": st.just("zk:2181"),
                },
            ).flatmap(lambda m: st.dictionaries(KEYS, VALUES, max_size=1).map(lambda extra: {**m, **extra}))
        ),
    }
)
_conditions = st.lists(
    st.tuples(st.sampled_from(FACTORS), st.sampled_from(["uat", "orders", "g1", "x", ""])), max_size=2
)
_statement_text = st.builds(
    lambda c, t, conds: (
        f"use cluster {c}"
        + (f", topic {t}" if t else "")
        + (" when " + " and ".join(f"{k}={v or chr(34) * 2}" for k, v in conds) if conds else "")
    ),
    st.sampled_from([*CLUSTER_IDS, "nowhere"]),
    st.sampled_from([None, "orders.v2"]),
    _conditions,
)
_rule_meta = st.sampled_from(
    [
        {"rule.isGlobal": True},
        {"rule.isGlobal": "true"},
        {"topic.id": "orders"},
        {"topic.id": "audit"},
        {"consumerGroup.groupName": "g1", "consumerGroup.topicId": "orders"},
        {"topic.idXX": "orders"},
        {},
    ]
)
_rule = st.fixed_dictionaries(
    {
        "id": maybe(st.sampled_from(["r1", "r2", "r3", "r4"])),
        "meta": maybe(_rule_meta),
        "rule": maybe(_statement_text | st.text(max_size=20)),
    },
    optional={"priority": maybe(st.integers(-1, 3))},
)
_topic = st.fixed_dictionaries(
    {"id": maybe(st.sampled_from(["orders", "audit"])), "meta": maybe(st.just({"bu": "hotel"}))}
)
_group = st.fixed_dictionaries(
    {"id": maybe(st.just({"groupName": "g1", "topicId": "orders"})), "meta": maybe(st.just({"bu": "x"}))}
)


def _file(top: str, entries: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return maybe(st.lists(maybe(entries), max_size=4).map(lambda items: {top: items}), p_junk=12)


_documents = st.fixed_dictionaries(
    {"clusters.yaml": _file("clusters", _cluster), "route-rules.yaml": _file("route-rules", _rule)},
    optional={
        "topics.yaml": _file("topics", _topic),
        "consumer-groups.yaml": _file("consumer-groups", _group),
    },
)
_lookups = st.lists(
    st.tuples(
        st.sampled_from(["orders", "audit", "other", ""]),
        st.none() | st.sampled_from(["g1", "g2"]),
        st.dictionaries(st.sampled_from(["env", "bu"]), st.sampled_from(["uat", "x"]), max_size=2),
    ),
    min_size=1,
    max_size=4,
)


def check_refusal(exc: ConfigError, origin: str) -> None:
    """Every problem names its file (one of the four, or the location itself)."""
    assert exc.problems
    for problem in exc.problems:
        assert problem.file in CONFIG_FILES or problem.file == origin, problem
        assert problem.message, problem
        assert str(problem).startswith(f"{problem.file}: "), problem


def check_routes(config: KBearConfig, lookups: list[tuple[str, str | None, dict[str, str]]]) -> None:
    router = Router(config)
    for topic, group, meta in lookups:
        client = Client("c1", meta)
        try:
            route = router.route(topic, group, client)
        except NoRouteError:
            explained = (
                router.explain_consumer(topic, group, client)
                if group
                else router.explain_producer(topic, client)
            )
            assert explained.route is None
            continue
        assert route.cluster_id in config.clusters
        assert route.requested_topic == topic
        assert route.bootstrap_servers == config.clusters[route.cluster_id].bootstrap_servers


def load(documents: dict[str, Any]) -> KBearConfig | ConfigError:
    try:
        return load_documents(documents, origin="memory", environ=ENV)
    except ConfigError as exc:
        check_refusal(exc, "memory")
        return exc


@examples(250)
@given(documents=_documents, lookups=_lookups)
def test_in_memory_documents_route_or_are_refused_naming_the_file(
    documents: dict[str, Any], lookups: list[tuple[str, str | None, dict[str, str]]]
) -> None:
    source = MemorySource(documents, environ=ENV)
    assert len(source.digest()) == 64  # any document has a digest (mixed key types included)
    got = load(documents)
    if isinstance(got, KBearConfig):
        assert got.digest == source.digest()
        check_routes(got, lookups)


def _yaml_safe(value: Any) -> bool:
    """Whether YAML writes ``value`` back as the same value (no float keys like 1.0 vs 1)."""
    if isinstance(value, dict):
        return all(not isinstance(k, float) and _yaml_safe(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_yaml_safe(v) for v in value)
    return True


@examples(120)
@given(documents=_documents)
def test_a_document_loads_from_memory_exactly_when_its_yaml_file_does(documents: dict[str, Any]) -> None:
    if not _yaml_safe(documents):
        return
    from_memory = load(documents)
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        for name, doc in documents.items():
            (directory / name).write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
        try:
            from_file: KBearConfig | ConfigError = load_config(directory, environ=ENV)
        except ConfigError as exc:
            check_refusal(exc, str(directory))
            from_file = exc
    if isinstance(from_memory, ConfigError) or isinstance(from_file, ConfigError):
        assert type(from_memory) is type(from_file), (from_memory, from_file)
        assert isinstance(from_file, ConfigError) and isinstance(from_memory, ConfigError)
        files = {(p.file, p.entry) for p in from_file.problems}
        assert {(p.file, p.entry) for p in from_memory.problems} == files
        return
    assert {c: dict(v.meta) for c, v in from_memory.clusters.items()} == {
        c: dict(v.meta) for c, v in from_file.clusters.items()
    }
    assert [(r.id, r.priority, str(r.statement)) for r in from_memory.rules] == [
        (r.id, r.priority, str(r.statement)) for r in from_file.rules
    ]


_statements = st.builds(
    Statement,
    cluster=NAMES,
    topic=st.none() | NAMES,
    conditions=st.lists(
        st.builds(Condition, key=st.sampled_from(FACTORS) | NAMES, value=NAMES), max_size=4
    ).map(tuple),
)
_factors = st.dictionaries(st.sampled_from(FACTORS) | NAMES, NAMES, max_size=6)


@examples(400)
@given(statement=_statements, factors=_factors, data=st.data())
def test_crrl_parse_print_and_evaluate_against_random_factors(
    statement: Statement, factors: dict[str, str], data: st.DataObject
) -> None:
    printed = str(statement)
    parsed = parse(printed)
    assert parsed == statement and str(parsed) == printed
    expected = all(factors.get(c.key) == c.value for c in statement.conditions)
    assert statement.matches(factors) is expected
    # Make it match: every condition's factor set as written (when the statement is consistent).
    wanted = {c.key: c.value for c in statement.conditions}
    if all(wanted[c.key] == c.value for c in statement.conditions):
        assert statement.matches({**factors, **wanted})
    extra = data.draw(st.sampled_from(FACTORS))
    if extra not in wanted:
        assert statement.matches({**factors, extra: "anything"}) is expected
