"""The rapidyaml reader for large YAML files (issue 6): it reads a document
exactly as kbear's PyYAML loader does, or declines and leaves it to PyYAML."""

from __future__ import annotations

import gc
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kbear import config as kconfig
from kbear import load_config
from kbear.config import _documents as kdocs
from kbear.config._fastyaml import Declined

pytest.importorskip("ryml", reason="rapidyaml (the fast-yaml extra) is not installed")

READER = kdocs._fast_reader


def pyyaml(text: str) -> tuple[str, Any]:
    """What kbear's own PyYAML loader makes of the text: ("ok", data) or ("error", type)."""
    try:
        return "ok", kdocs._load_with(kdocs._UniqueKeyLoader, text)
    except (yaml.YAMLError, ValueError, RecursionError) as exc:
        return "error", type(exc).__name__


def exact(value: Any) -> Any:
    """The value with every type and written number text made visible, so that
    ``1.10`` read as ``1.1`` or ``yes`` read as ``"yes"`` compare unequal."""
    if isinstance(value, dict):
        return {"dict": [(exact(k), exact(v)) for k, v in value.items()]}
    if isinstance(value, list):
        return {"list": [exact(v) for v in value]}
    return (type(value).__name__, value, getattr(value, "source", None))


def assert_read_alike(text: str) -> bool:
    """The reader either declines, or gives exactly PyYAML's result; it never
    accepts a document PyYAML refuses. Returns whether it took the document."""
    try:
        got = READER.load(text)
    except Declined:
        return False
    outcome, expected = pyyaml(text)
    assert outcome == "ok", f"rapidyaml accepted a document PyYAML refuses ({expected}): {text!r}"
    assert exact(got) == exact(expected), text
    return True


def topics_document(n: int) -> str:
    doc = {
        "topics": [
            {"id": f"orders.{i:06d}", "meta": {"bu": f"bu{i % 10}", "partitions": 6}} for i in range(n)
        ]
    }
    return yaml.safe_dump(doc, sort_keys=False)


def test_a_generated_block_style_file_is_read_by_rapidyaml_as_pyyaml_reads_it() -> None:
    text = topics_document(2_000)
    assert assert_read_alike(text)  # taken, not declined
    data = READER.load(text)
    assert data["topics"][1999] == {"id": "orders.001999", "meta": {"bu": "bu9", "partitions": 6}}
    assert data["topics"][0]["meta"]["partitions"].source == "6"


@pytest.mark.parametrize(
    "text",
    [
        "a: yes\n",  # YAML 1.1 bool for PyYAML, a string for rapidyaml
        "a: ~\n",
        "a: 0x1F\n",
        "a: 010\n",
        "a: 1_000\n",
        "a: 12:30\n",
        "a: 1e5\n",  # a string for PyYAML (no dot), a number in JSON
        "a: .5\n",  # written out by rapidyaml as 0.5
        "a: 1.\n",  # written out as 1.0
        "a: 1.0\n",  # might have been written 1.
        "a: 'yes'\n",  # quoted: cannot be told from the plain one in the JSON
        "a: ''\n",
        "a: &x 1\nb: *x\n",
        "a: !!str 1\n",
        "<<:\n  a: 1\n",
        "--- 1\n--- 2\n",
        "%YAML 1.1\n---\na: 1\n",
        "a: @x\n",
        "a: `x\n",
        "a: [1, 2]\n",
        "a: {b: 1}\n",
        "- 000000'':'\n- - 09\n  - null\n- [] - ':'\n",  # found by the property test below
        "a: {} x\n",
        "a: []#x\n",
        "- []\n- - '0:'  - ':'\n",  # found by the property test below
        "a: 'x' y\n",
        "a: |\n  text\n",
        "a: >\n  text\n",
        "'multi\n  line': 1\n",
        'a: "x\\N"\n',
        "a:\tb\n",
        "a: 1\r\nb: 2\r\n",
        "a: 1\na: 2\n",
        "a: b\u2028c\n",
        f"{'k' * 1100}: 1\n",
        "",
        "just a scalar\n",
    ],
)
def test_documents_the_two_parsers_may_read_differently_are_declined(text: str) -> None:
    with pytest.raises(Declined):
        READER.load(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a: yes\n", {"a": True}),
        ("a: 1e5\n", {"a": "1e5"}),
        ("a: 1.\n", {"a": 1.0}),
        ("a: &x 1\nb: *x\n", {"a": 1, "b": 1}),
    ],
)
def test_a_declined_large_document_is_read_by_pyyaml(
    monkeypatch: pytest.MonkeyPatch, text: str, expected: dict[str, Any]
) -> None:
    monkeypatch.setattr(kdocs, "_FAST_YAML_MIN_CHARS", 0)
    assert kdocs._load_yaml(text) == expected


def test_a_duplicate_key_in_a_large_file_gets_pyyamls_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kdocs, "_FAST_YAML_MIN_CHARS", 0)
    topics = topics_document(100) + "- id: late\n  id: again\n"
    (tmp_path / "clusters.yaml").write_text("clusters:\n- id: c1\n  meta:\n    bootstrap.servers: h:9092\n")
    (tmp_path / "route-rules.yaml").write_text(
        "route-rules:\n- id: all\n  meta:\n    rule.isGlobal: true\n  rule: use cluster c1\n"
    )
    (tmp_path / "topics.yaml").write_text(topics)
    with pytest.raises(kconfig.ConfigError) as info:
        load_config(tmp_path)
    assert "found duplicate key 'id'" in str(info.value)
    assert "topics.yaml" in str(info.value)


def test_a_large_configuration_loads_the_same_as_block_yaml_json_and_through_pyyaml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    n = 6_000
    topics = {"topics": [{"id": f"t.{i}", "meta": {"bu": f"bu{i % 7}", "version": "1.10"}} for i in range(n)]}
    rules = {
        "route-rules": [
            {"id": "all", "meta": {"rule.isGlobal": True}, "rule": "use cluster c1"},
            *(
                {
                    "id": f"r{i}",
                    "priority": i,
                    "meta": {"topic.id": f"t.{i}"},
                    "rule": "use cluster c2 when client.env=prod",
                }
                for i in range(0, n, 10)
            ),
        ]
    }
    clusters = {"clusters": [{"id": c, "meta": {"bootstrap.servers": f"{c}:9092"}} for c in ("c1", "c2")]}
    configs = {}
    for style, dump in (("block", lambda d: yaml.safe_dump(d, sort_keys=False)), ("json", json.dumps)):
        d = tmp_path / style
        d.mkdir()
        (d / "clusters.yaml").write_text(dump(clusters))
        (d / "topics.yaml").write_text(dump(topics))
        (d / "route-rules.yaml").write_text(dump(rules))
        configs[style] = load_config(d)
    assert (tmp_path / "block" / "topics.yaml").stat().st_size >= kdocs._FAST_YAML_MIN_CHARS
    monkeypatch.setattr(kdocs._fastyaml, "AVAILABLE", False)
    configs["pyyaml"] = load_config(tmp_path / "block")

    def shape(c: kconfig.KBearConfig) -> Any:
        return (
            {t: dict(c.topic_meta(t)) for t in c.topics},
            [(r.id, r.priority, dict(r.meta), str(r.statement), r.kind) for r in c.rules],
        )

    assert shape(configs["block"]) == shape(configs["pyyaml"]) == shape(configs["json"])
    assert configs["block"].topic_meta("t.5")["version"] == "1.10"


scalars = st.one_of(
    st.text(alphabet="abyYnNtTo019.-+_:#' \"~<=é", max_size=8),
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=False, allow_infinity=True, width=32),
    st.booleans(),
    st.none(),
)
keys = st.text(alphabet="abnyto01.-_: #'\"", min_size=1, max_size=6)
documents = st.recursive(
    scalars,
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(keys, children, max_size=4)),
    max_leaves=12,
).filter(lambda d: isinstance(d, dict | list))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents)
def test_any_block_style_document_is_read_alike_or_declined(doc: Any) -> None:
    assert_read_alike(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents, st.data())
def test_a_damaged_document_is_read_alike_or_declined(doc: Any, data: st.DataObject) -> None:
    """Edits like a hand's: indentation, a stray indicator, a deleted character.
    The reader must never take a document PyYAML refuses."""
    text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(text)))
        edit = data.draw(st.sampled_from(["insert", "delete", "indent", "dedent"]))
        if edit == "insert":
            text = text[:i] + data.draw(st.sampled_from(list(" :-'\"#,\n?x"))) + text[i:]
        elif edit == "delete" and text:
            text = text[: max(i - 1, 0)] + text[i:]
        else:
            lines = text.split("\n")
            j = min(i, len(lines) - 1)
            lines[j] = " " + lines[j] if edit == "indent" else lines[j].removeprefix(" ")
            text = "\n".join(lines)
    assert_read_alike(text)


def test_the_collector_is_back_on_after_a_load_even_a_failed_one(tmp_path: Path) -> None:
    assert gc.isenabled()
    with pytest.raises(kconfig.ConfigError):
        load_config(tmp_path)  # no clusters.yaml
    assert gc.isenabled()
    gc.disable()
    try:
        with pytest.raises(kconfig.ConfigError):
            load_config(tmp_path)
        assert not gc.isenabled()  # the application's choice is kept
    finally:
        gc.enable()


@pytest.mark.parametrize(
    "broken",
    [
        "- id: c9\n  meta:\n    sasl.password: hunter2-s3cr3t: x\n",  # two colons on a line
        "- id: c9\n  meta:\n   sasl.password: hunter2-s3cr3t\n  bad\n",  # indentation
        "- id: c9\n meta: hunter2-s3cr3t\n",
    ],
)
def test_rapidyamls_own_diagnostic_shows_no_file_content(
    capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, broken: str
) -> None:
    monkeypatch.setattr(kdocs, "_FAST_YAML_MIN_CHARS", 0)
    text = topics_document(50) + broken
    with pytest.raises(yaml.YAMLError):
        kdocs._load_yaml(text)
    out, err = capfd.readouterr()
    assert "ERROR" in err  # rapidyaml parsed the file and printed its diagnostic
    assert "hunter2" not in out + err
