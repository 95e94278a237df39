"""``import kbear`` is light: the public names are imported on first use (PEP 562), so a
program that imports kbear pays for what it uses, not for Spark, the server, the
Schema Registry client or every routed client."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import kbear

#: modules ``import kbear`` alone must not import (top-level package names)
HEAVY = (
    "pyspark",
    "pyarrow",
    "starlette",
    "uvicorn",
    "httpx",
    "prometheus_client",
    "confluent_kafka",
    "pydantic",
    "yaml",
    "kbear.schema_registry",
    "kbear.producer",
    "kbear.consumer",
    "kbear.server",
    "kbear.spark",
    "kbear.aio",
    "kbear.share",
)


def _modules_after(code: str) -> set[str]:
    """The modules a fresh interpreter has imported after running ``code``."""
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    return set(json.loads(out.splitlines()[-1]))


def _heavy(modules: set[str]) -> set[str]:
    return {m for m in modules for h in HEAVY if m == h or m.startswith(h + ".")}


def test_import_kbear_imports_no_client_spark_server_or_registry() -> None:
    assert _heavy(_modules_after("import kbear")) == set()


def test_a_name_imports_what_it_needs_and_no_more() -> None:
    loaded = _modules_after("from kbear import RoutedProducer")
    assert "kbear.producer" in loaded and "confluent_kafka" in loaded
    assert not {m for m in loaded if m.split(".")[0] in ("pyspark", "starlette", "uvicorn")}
    assert "kbear.server" not in loaded and "kbear.spark" not in loaded
    assert "confluent_kafka.schema_registry" not in loaded


def test_every_public_name_resolves_and_is_listed() -> None:
    for name in kbear.__all__:
        assert getattr(kbear, name) is not None, name
        assert name in dir(kbear), name
    assert kbear.RoutedProducer.__module__.startswith("kbear.producer")
    assert kbear.schema_registry.__name__ == "kbear.schema_registry"


def test_an_unknown_name_is_an_attribute_error() -> None:
    try:
        kbear.RoutedNothing  # noqa: B018
    except AttributeError as exc:
        assert "RoutedNothing" in str(exc)
    else:
        raise AssertionError("kbear.RoutedNothing resolved")


def test_all_the_lazy_table_and_the_type_checking_imports_agree() -> None:
    """What mypy and editors read (the ``if TYPE_CHECKING:`` imports), what ``import *``
    gives (``__all__``) and what resolves at run time (``_EXPORTS``) are the same names."""
    tree = ast.parse(Path(kbear.__file__).read_text())
    checked: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom) and imp.module is not None
                for alias in imp.names:
                    module = imp.module if imp.module != "kbear" else f"kbear.{alias.name}"
                    checked[alias.asname or alias.name] = module
    exports = kbear._EXPORTS
    assert checked == exports
    assert set(kbear.__all__) == {*exports, "__version__"}
