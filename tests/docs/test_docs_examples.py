"""Every Python example of the documentation (docs/**/*.md and README.md) runs here.

Each fenced ``python`` block runs on its own (pytest-examples), as a reader would
paste it, in a fresh directory holding ``routing/``: a copy of
``examples/demo-config`` (clusters ``east`` and ``west``, topics ``orders``,
``payments``, ``audit``), whose clusters are two embedded clusters started for the
example (``kbear.testing.EmbeddedCluster``; their addresses in ``KBEAR_DEMO_EAST`` and
``KBEAR_DEMO_WEST``, as the files expect). An example's ``assert`` lines are its
checks.

A block whose fence says ``test="spark"`` needs a local Spark (pyspark and Java 17)
and is skipped without one, like the Spark tests.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest_examples = pytest.importorskip("pytest_examples", reason="the docs extra: pip install -e '.[docs]'")

from pytest_examples import CodeExample, EvalExample, find_examples  # noqa: E402

from kbear.testing import EmbeddedCluster  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = [e for e in find_examples(ROOT / "docs", ROOT / "README.md") if e.prefix_tags() & {"py", "python"}]
TOPICS = ("orders", "payments", "audit", "audit.v2")


@pytest.fixture
def routing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A working directory with ``routing/`` over two embedded clusters."""
    clusters = [EmbeddedCluster(), EmbeddedCluster()]
    try:
        for cluster in clusters:
            for topic in TOPICS:
                cluster.create_topic(topic, 4)
        monkeypatch.setenv("KBEAR_DEMO_EAST", clusters[0].bootstrap_servers)
        monkeypatch.setenv("KBEAR_DEMO_WEST", clusters[1].bootstrap_servers)
        shutil.copytree(ROOT / "examples" / "demo-config", tmp_path / "routing")
        monkeypatch.chdir(tmp_path)
        yield tmp_path / "routing"
    finally:
        for cluster in clusters:
            cluster.close()


def test_there_are_examples() -> None:
    files = {Path(e.path).relative_to(ROOT).as_posix() for e in EXAMPLES}
    assert "README.md" in files and "docs/index.md" in files


@pytest.mark.parametrize("example", EXAMPLES, ids=str)
def test_example_runs(
    example: CodeExample, eval_example: EvalExample, routing: Path, request: pytest.FixtureRequest
) -> None:
    if example.prefix_settings().get("test") == "spark":
        pytest.importorskip("pyspark")
        if shutil.which("java") is None:
            pytest.skip("no Java here: the Spark examples need Java 17")
        # The test process's one SparkSession (conftest.py), with Spark's Kafka connector
        # on its classpath, must be the first: an example's getOrCreate() then gets it.
        # Were the example first, its JVM would fix a classpath without the connector for
        # every later test of the process ("Failed to find data source: kafka").
        request.getfixturevalue("spark_session")
    try:
        eval_example.run(example)
    except Exception as exc:
        # Reported without the example's frames: Python 3.11's traceback module fails on
        # the code objects pytest-examples compiles (StopIteration in _get_code_position),
        # which would end the whole pytest run. The example's lines are named here.
        raise AssertionError(_failure(example, exc)) from None


def _failure(example: CodeExample, exc: BaseException) -> str:
    lines = []
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == str(example.path):
            lines.append(tb.tb_lineno)
        tb = tb.tb_next
    where = f"{example.path}, line {lines[-1]}" if lines else str(example)
    return (
        f"the example at {where} raised {type(exc).__name__}: {exc}\n(examples run on their own in a "
        "directory holding routing/, a copy of examples/demo-config: docs/contributing/docs.md)"
    )
