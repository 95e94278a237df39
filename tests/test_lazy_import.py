"""``import kbear`` is light: the public names are imported on first use (PEP 562), so a
program that imports kbear pays for what it uses, not for Spark, the server, the
Schema Registry client or every routed client."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

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


#: what Spark's Python process planning a query of the ``kbear`` source does not need:
#: the driver's helpers (``read_stream``, ``run_query``), the other clients, and
#: MirrorMaker 2's records unless a cluster is mirrored by it
NOT_PLANNING = (
    "kbear.spark._stream",
    "kbear.spark._supervise",
    "kbear.mirror",
    "kbear.producer",
    "kbear.consumer",
)


def _loaded(modules: set[str], names: tuple[str, ...]) -> set[str]:
    return {m for m in modules for n in names if m == n or m.startswith(n + ".")}


def test_import_kbear_spark_imports_no_pyspark_pydantic_or_client() -> None:
    loaded = _modules_after("import kbear.spark")
    heavy = ("pyspark", "pydantic", "confluent_kafka", "yaml", "kbear.config", "kbear.router")
    assert _loaded(loaded, heavy) == set()
    assert {m for m in loaded if m.startswith("kbear.spark.")} == set()


def test_the_source_module_spark_unpickles_imports_no_configuration_model_or_client() -> None:
    """Spark's Python worker imports the data source's module to unpickle the class and
    ask its schema: pyspark's types, not kbear's configuration (pydantic) or a client."""
    pytest.importorskip("pyspark")
    loaded = _modules_after("import kbear.spark._source")
    assert "pyspark.sql.datasource" in loaded
    heavy = ("pydantic", "confluent_kafka", "yaml", "kbear.config", "kbear.router", "kbear.settings")
    assert _loaded(loaded, (*heavy, *NOT_PLANNING, "kbear.spark._reader")) == set()


def test_the_stream_reader_imports_what_planning_needs_and_no_more() -> None:
    pytest.importorskip("pyspark")
    loaded = _modules_after(
        "from kbear.spark._source import KBearDataSource, spark_schema\n"
        "source = KBearDataSource({'subscribe': 't', 'kafka.bootstrap.servers': '127.0.0.1:1'})\n"
        "source.streamReader(spark_schema(False))"
    )
    assert {"kbear.spark._reader", "kbear.router", "confluent_kafka"} <= loaded
    assert _loaded(loaded, NOT_PLANNING) == set()
