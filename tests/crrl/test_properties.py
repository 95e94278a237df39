"""Property-based tests: whatever the input, the CRRL parser and the configuration loader
either succeed or raise their own error with a location; never another exception."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kbear.config import CONFIG_FILES, ConfigError, KBearConfig, load_config
from kbear.crrl import KEYWORDS, Condition, CrrlSyntaxError, Statement, parse

SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

VALID = {
    "clusters.yaml": (
        "clusters:\n  - id: fws\n    meta:\n      bootstrap.servers: fws-1:9092\n"
        "      sasl.password: pw\n  - id: uat\n    meta: {bootstrap.servers: 'uat:9092'}\n"
    ),
    "topics.yaml": "topics:\n  - id: orders\n    meta:\n      bu: hotel\n",
    "consumer-groups.yaml": (
        "consumer-groups:\n  - id:\n      groupName: billing\n      topicId: orders\n"
        "    meta: {jobType: batch}\n"
    ),
    "route-rules.yaml": (
        "route-rules:\n  - id: r1\n    meta:\n      rule.isGlobal: true\n    rule: use cluster fws\n"
        "  - id: r2\n    priority: 2\n    meta: {topic.id: orders}\n"
        "    rule: use cluster uat, topic orders.v2 when client.env=uat and topic.bu=hotel\n"
    ),
}

_LOCATED = re.compile(r"line \d+, column \d+")


def load_or_error(directory: Path) -> KBearConfig | ConfigError:
    """Load; a ConfigError is returned after checking that every problem is located."""
    try:
        return load_config(directory, environ={})
    except ConfigError as exc:
        assert exc.problems
        for problem in exc.problems:
            assert problem.file in CONFIG_FILES, problem
            assert problem.message
            if "YAML syntax error" in problem.message or problem.message.startswith("YAML error at"):
                assert _LOCATED.search(problem.message), problem
            assert f"{problem.file}: " in str(exc)
        return exc


def write_valid(directory: Path, **replace: bytes) -> None:
    for name, text in VALID.items():
        (directory / name).write_bytes(replace.get(name, text.encode()))


def test_the_base_configuration_is_valid(tmp_path: Path) -> None:
    write_valid(tmp_path)
    assert isinstance(load_or_error(tmp_path), KBearConfig)


# --------------------------------------------------------------------------- random YAML documents

_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12)
_keys = st.sampled_from(
    ["id", "meta", "rule", "priority", "clusters", "topics", "route-rules", "x"]
) | st.text(max_size=6)
_documents = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_keys, inner, max_size=4),
    max_leaves=20,
)


@SETTINGS
@given(name=st.sampled_from(CONFIG_FILES), doc=_documents, wrap=st.booleans())
def test_any_yaml_document_loads_or_is_refused_with_a_location(
    tmp_path: Path, name: str, doc: object, wrap: bool
) -> None:
    top = {"clusters.yaml": "clusters", "topics.yaml": "topics"}.get(name, name.removesuffix(".yaml"))
    content = {top: [doc]} if wrap else doc
    write_valid(tmp_path, **{name: yaml.safe_dump(content, allow_unicode=True).encode()})
    load_or_error(tmp_path)


# --------------------------------------------------------------------------- mutations of a valid file

_pieces = st.sampled_from(
    [
        "\t",
        " ",
        "\n",
        ":",
        "- ",
        "[",
        "]",
        "{",
        "}",
        '"',
        "'",
        "!",
        "&a",
        "*a",
        "#",
        "\ufeff",
        "\x00",
        "${X}",
        "id: r1\n",
    ]
)
_mutation = st.tuples(
    st.sampled_from(["insert", "delete", "duplicate-line", "truncate"]), st.integers(0, 10_000), _pieces
)


def mutate(text: str, mutations: list[tuple[str, int, str]]) -> str:
    for op, at, piece in mutations:
        pos = at % (len(text) + 1)
        if op == "insert":
            text = text[:pos] + piece + text[pos:]
        elif op == "delete":
            text = text[:pos] + text[pos + len(piece) :]
        elif op == "truncate":
            text = text[:pos]
        else:
            lines = text.splitlines(keepends=True) or [""]
            i = at % len(lines)
            text = "".join(lines[: i + 1] + lines[i:])
    return text


@SETTINGS
@given(name=st.sampled_from(CONFIG_FILES), mutations=st.lists(_mutation, min_size=1, max_size=4))
def test_a_mutated_file_loads_or_is_refused_with_a_location(
    tmp_path: Path, name: str, mutations: list[tuple[str, int, str]]
) -> None:
    write_valid(tmp_path, **{name: mutate(VALID[name], mutations).encode("utf-8", "surrogatepass")})
    load_or_error(tmp_path)


@SETTINGS
@given(name=st.sampled_from(CONFIG_FILES), data=st.binary(max_size=200))
def test_random_bytes_load_or_are_refused_with_a_location(tmp_path: Path, name: str, data: bytes) -> None:
    write_valid(tmp_path, **{name: data})
    load_or_error(tmp_path)


# --------------------------------------------------------------------------- CRRL spellings

_word = st.text(
    st.characters(codec="utf-8", exclude_characters=',="\\', exclude_categories=["Z", "C"]),
    min_size=1,
    max_size=8,
).filter(lambda w: w not in KEYWORDS)
_name = _word | st.text(max_size=8)
_space = st.text(st.sampled_from(" \t"), min_size=1, max_size=3)


@st.composite
def spelled(draw: st.DrawFn) -> tuple[Statement, str]:
    """A statement and one of its many spellings: any whitespace between tokens,
    names quoted or not (when they may be bare)."""

    def name(value: str) -> str:
        bare_ok = value and value not in KEYWORDS and not any(c.isspace() or c in ',="\\' for c in value)
        if bare_ok and draw(st.booleans()):
            return value
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'

    def gap() -> str:
        return draw(_space)

    def opt_gap() -> str:
        return draw(st.just("") | _space)

    statement = Statement(
        draw(_name),
        draw(st.none() | _name),
        tuple(draw(st.lists(st.builds(Condition, _name, _name), max_size=3))),
    )
    out = f"{opt_gap()}use{gap()}cluster{gap()}{name(statement.cluster)}"
    if statement.topic is not None:
        out += f"{opt_gap()},{opt_gap()}topic{gap()}{name(statement.topic)}"
    for i, cond in enumerate(statement.conditions):
        keyword = "when" if i == 0 else "and"
        out += f"{gap()}{keyword}{gap()}{name(cond.key)}{opt_gap()}={opt_gap()}{name(cond.value)}"
    return statement, out + opt_gap()


@settings(max_examples=300, deadline=None)
@given(spelled())
def test_every_spelling_parses_to_its_statement_and_prints_canonically(case: tuple[Statement, str]) -> None:
    statement, text = case
    parsed = parse(text)
    assert parsed == statement
    assert parse(str(parsed)) == parsed
    assert str(parse(str(parsed))) == str(parsed)


@settings(max_examples=300, deadline=None)
@given(spelled(), st.integers(0, 200), st.sampled_from(["", "x", ",", "=", '"', "\\", "AND", "when"]))
def test_a_damaged_statement_parses_or_fails_with_a_column(
    case: tuple[Statement, str], at: int, piece: str
) -> None:
    _, text = case
    pos = at % (len(text) + 1)
    damaged = text[:pos] + piece + text[pos + 1 :]
    try:
        parse(damaged)
    except CrrlSyntaxError as err:
        assert 1 <= err.column <= len(damaged) + 1
        assert str(err).startswith(f"expected {err.expected} at column {err.column}, found ")
