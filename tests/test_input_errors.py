"""Bad input found by fuzzing and by new users (issues #31 and #25), each failing
example kept: in-memory documents with keys of mixed types, a ``--config`` URL
of another scheme, ``kbear lint --json``, "did you mean" for unknown keys, and
no message pointing outside the repository."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kbear import ConfigError, MemorySource, Router, load_config
from kbear.cli import EXIT_CONFIG_ERROR, EXIT_LINT_WARNINGS, EXIT_OK, main
from kbear.config import documents_digest, load_documents
from kbear.settings import parse_settings

KBEAR = Path(__file__).resolve().parent.parent / "kbear"
RULES = {"route-rules": [{"id": "d", "meta": {"rule.isGlobal": True}, "rule": "use cluster east"}]}


def mixed_keys() -> dict[str, Any]:
    """The document of issue #31: a cluster meta with an integer key."""
    return {
        "clusters.yaml": {"clusters": [{"id": "east", "meta": {1: "x", "bootstrap.servers": "east:9092"}}]},
        "route-rules.yaml": RULES,
    }


def test_in_memory_document_with_mixed_key_types_loads_as_the_yaml_file_does(tmp_path: Path) -> None:
    docs = mixed_keys()
    for name, doc in docs.items():
        (tmp_path / name).write_text(yaml.safe_dump(doc))
    from_file = load_config(tmp_path)
    from_memory = load_documents(docs)
    assert dict(from_memory.clusters["east"].meta) == dict(from_file.clusters["east"].meta)
    router = Router.from_source(MemorySource(docs))
    assert router.route("orders").cluster_id == "east"


def test_digest_of_mixed_keys_is_stable_and_tells_documents_apart() -> None:
    assert documents_digest(mixed_keys()) == documents_digest(mixed_keys())
    other = mixed_keys()
    other["clusters.yaml"]["clusters"][0]["meta"] = {"1": "x", "bootstrap.servers": "east:9092"}
    assert documents_digest(other) != documents_digest(mixed_keys())
    odd: dict[str, Any] = {"clusters.yaml": {(1, 2): {None: 1.5, True: [b"x"]}}, 3: "y"}
    assert len(documents_digest(odd)) == 64


def test_in_memory_document_with_a_bad_key_is_a_config_error_naming_it() -> None:
    docs = mixed_keys()
    docs["route-rules.yaml"] = {
        "route-rules": [{"id": "d", "meta": {(1, 2): "x"}, "rule": "use cluster east"}]
    }
    with pytest.raises(ConfigError, match=r"route-rules.yaml: rule 'd': key 'meta\.\(1, 2\)"):
        MemorySource(docs).load()


@pytest.mark.parametrize("command", ["route", "explain", "validate", "lint"])
def test_config_of_another_scheme_names_it(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    lookup = ["--topic", "orders"] if command in ("route", "explain") else []
    assert main([command, "--config", "ftp://x", *lookup]) == EXIT_CONFIG_ERROR
    err = capsys.readouterr().err
    assert "unsupported scheme 'ftp://'" in err
    assert "http://" in err and "https://" in err and "directory" in err
    assert "not a directory" not in err


def test_router_from_a_url_of_another_scheme_names_it() -> None:
    with pytest.raises(ConfigError, match="unsupported scheme 'ftp://'"):
        Router.from_source("ftp://x")


@pytest.mark.parametrize(
    ("url", "why"), [("http://[::1", "Invalid IPv6 URL"), ("http://", "no host"), ("https://h:x", "Port")]
)
def test_a_malformed_url_is_a_config_error(url: str, why: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Found by the CLI fuzz test: httpx's InvalidURL escaped as a traceback."""
    assert main(["route", "--config", url, "--topic", "orders"]) == EXIT_CONFIG_ERROR
    err = capsys.readouterr().err
    assert "not a valid URL" in err and why in err and "Traceback" not in err


def test_config_with_a_nul_character_is_a_config_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--config", "a\x00b"]) == EXIT_CONFIG_ERROR
    assert "NUL character" in capsys.readouterr().err


def write(directory: Path, clusters: list[dict[str, Any]], rules: list[dict[str, Any]]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "clusters.yaml").write_text(yaml.safe_dump({"clusters": clusters}))
    (directory / "route-rules.yaml").write_text(yaml.safe_dump({"route-rules": rules}))
    return directory


def test_lint_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    clusters = [
        {"id": "east", "meta": {"bootstrap.servers": "east:9092"}},
        {"id": "dr", "meta": {"bootstrap.servers": "dr:9092"}},
    ]
    directory = write(tmp_path / "c", clusters, RULES["route-rules"])
    assert main(["lint", "--config", str(directory), "--json"]) == EXIT_LINT_WARNINGS
    out = json.loads(capsys.readouterr().out)
    assert out["rules_checked"] is True and out["location"] == str(directory)
    assert out["warnings"] == [
        {
            "code": "unused-cluster",
            "file": "clusters.yaml",
            "subject": "cluster 'dr'",
            "message": "no rule routes to it",
        }
    ]
    clean = write(tmp_path / "d", clusters[:1], RULES["route-rules"])
    assert main(["lint", "--config", str(clean), "--json"]) == EXIT_OK
    assert json.loads(capsys.readouterr().out)["warnings"] == []


def test_lint_names_the_nearest_property_and_setting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    meta = {
        "bootstrap.servers": "east:9092",
        "linger.mss": "5",
        "sasl.pasword": "x",
        "kbear.switch.mdoe": "drain",
        "zookeeper.connect": "zk:2181",
    }
    directory = write(tmp_path / "c", [{"id": "east", "meta": meta}], RULES["route-rules"])
    assert main(["lint", "--config", str(directory)]) == EXIT_LINT_WARNINGS
    lines = {line.split("meta '")[1].split("'")[0]: line for line in capsys.readouterr().out.splitlines()}
    assert "did you mean 'linger.ms'?" in lines["linger.mss"]
    assert "did you mean 'sasl.password'?" in lines["sasl.pasword"]
    assert "did you mean 'kbear.switch.mode'?" in lines["kbear.switch.mdoe"]
    assert "did you mean" not in lines["zookeeper.connect"]


def test_unknown_kbear_setting_names_the_nearest() -> None:
    with pytest.raises(ValueError, match=r"did you mean 'kbear\.reload\.interval\.ms'\?"):
        parse_settings({"kbear.reload.intervall.ms": 5}, None, "RoutedProducer")


def _messages(tree: ast.AST) -> list[str]:
    """Every string constant of ``tree`` that is not a docstring."""
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstrings.add(id(body[0].value))
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def test_no_message_points_outside_the_repository() -> None:
    offenders = [
        f"{path.relative_to(KBEAR.parent)}: {text!r}"
        for path in sorted(KBEAR.rglob("*.py"))
        for text in _messages(ast.parse(path.read_text(encoding="utf-8")))
        if "shared/" in text
    ]
    assert offenders == []
