"""The generated reference pages (scripts/docs_reference.py) cover what the code has:
every kbear.* key, every CLI option, every metric; something added without its
documentation fails here (and the strict docs build in scripts/test.sh)."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import pytest
from pydantic import Field

import kbear.settings
from kbear.cli import build_parser

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import docs_reference

pytest.importorskip("griffe", reason="the docs extra: pip install -e '.[docs]'")


def test_settings_page_lists_every_key_with_the_models_default() -> None:
    rows = {key: (default, meaning) for key, default, _readers, meaning in docs_reference.settings_rows()}
    assert set(rows) == set(kbear.settings.DEFAULTS) | {"kbear.client.id", "kbear.client.meta.<k>"}
    for key, default in kbear.settings.DEFAULTS.items():
        shown = rows[key][0]
        if default is None:
            assert shown == "none", key
        else:
            text = str(default).lower() if isinstance(default, bool) else getattr(default, "value", default)
            assert shown.startswith(f"`{text}`"), key
        assert rows[key][1].strip(), key
    # the Spark source's own default of kbear.switch.start is in that row too
    assert f"(Spark source: `{kbear.settings.SPARK_SWITCH_START.value}`)" in rows["kbear.switch.start"][0]
    page = docs_reference.settings_page()
    assert "kbear.balanced.reconcile.interval.ms" in page and "kbear.balanced.registry.topic" in page


def test_a_setting_without_its_docstring_entry_fails_the_page(monkeypatch: pytest.MonkeyPatch) -> None:
    class WithNewKey(kbear.settings.KBearSettings):
        brand_new_ms: int = Field(5, alias="kbear.brand.new.ms")

    monkeypatch.setattr(kbear.settings, "KBearSettings", WithNewKey)
    with pytest.raises(docs_reference.UndocumentedError, match="brand_new_ms"):
        docs_reference.settings_page()


def _options(parser: argparse.ArgumentParser) -> set[str]:
    flags = {flag for action in parser._actions for flag in action.option_strings}
    return flags - {"-h", "--help"}


def test_cli_page_has_every_subcommand_and_option() -> None:
    page = docs_reference.cli_page()
    subcommands = {name: sub for name, sub, _help in docs_reference._subcommands(build_parser())}
    expected = {"route", "explain", "validate", "lint", "demo", "assignments", "move", "serve"}
    assert expected <= set(subcommands)
    for name, sub in subcommands.items():
        section = page.split(f"## kbear {name} ", 1)[1].split("\n## ", 1)[0]
        for flag in _options(sub):
            assert f"`{flag}" in section, (name, flag)


def test_an_option_without_help_fails_the_page(monkeypatch: pytest.MonkeyPatch) -> None:
    def parser() -> argparse.ArgumentParser:
        p = argparse.ArgumentParser(prog="kbear")
        sub = p.add_subparsers()
        sub.add_parser("route", help="print the route").add_argument("--undocumented")
        return p

    monkeypatch.setattr("kbear.cli.build_parser", parser)
    with pytest.raises(docs_reference.UndocumentedError, match="--undocumented"):
        docs_reference.cli_page()


def test_metrics_page_has_every_metric_of_a_scrape() -> None:
    pytest.importorskip("prometheus_client")
    from prometheus_client import CollectorRegistry, generate_latest

    from kbear.metrics import KBearMetrics

    registry = CollectorRegistry()
    metrics = KBearMetrics(registry, 5000)
    try:
        scraped = {
            line.split()[2]
            for line in generate_latest(registry).decode().splitlines()
            if line.startswith("# TYPE ")
        }
    finally:
        metrics.close()
    page = docs_reference.metrics_page()
    documented = {name for name, *_ in docs_reference.metric_rows()["clients"]}
    for name in scraped:
        shown = name if name in documented else f"{name}_total"
        assert shown in documented, name
        assert f"`{shown}`" in page
    assert "kbear_serve_requests_total" in page


def test_every_public_name_of_kbear_has_an_api_entry() -> None:
    import kbear

    api = Path(__file__).resolve().parents[2] / "docs" / "reference" / "api"
    entries = {
        line.removeprefix("::: ").strip()
        for page in api.glob("*.md")
        for line in page.read_text().splitlines()
        if line.startswith("::: ")
    }
    documented = {entry.rsplit(".", 1)[-1] for entry in entries}
    missing = [name for name in kbear.__all__ if not name.startswith("_") and name not in documented]
    assert not missing, f"no ::: entry in docs/reference/api/ for {missing}"


def test_the_readme_is_a_front_door() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert len(readme.splitlines()) <= 200, "the README is a front door: the reference goes in docs/"
    for command in ("bash scripts/demo.sh", "bash scripts/test.sh"):
        assert f"\n{command}" in readme.split("\n## ", 1)[0], f"{command} at the top"


def test_module_map_lists_every_module() -> None:
    package = Path(kbear.settings.__file__).resolve().parent
    listed = {path for path, _text in docs_reference.module_rows()}
    assert listed == {p.relative_to(package.parent).as_posix() for p in package.rglob("*.py")}
    assert all(text.strip() for _path, text in docs_reference.module_rows())


def test_pages_named_in_docstrings_become_links_to_pages_that_exist() -> None:
    # a docstring names a page by its path (docs/concepts/failover.md); the site shows a
    # link to it by title, and a path to no page fails here (and the docs build)
    named = set()
    for module in Path(kbear.settings.__file__).parent.rglob("*.py"):
        named |= set(docs_reference._PAGE_PATH.findall(module.read_text(encoding="utf-8")))
    assert named, "no docstring names a page: the pattern no longer matches"
    for quote, page, anchor in named:
        shown = docs_reference.page_links(f"{quote}docs/{page}.md{anchor}{quote}")
        assert re.fullmatch(r"\[[^\]`]+\]\[[\w-]+\]", shown), shown
    assert docs_reference.page_links("see docs/concepts/failover.md.") == (
        "see [Failover and mirrors][failover-and-mirrors]."
    )


@pytest.mark.parametrize("page", ["reference/settings.md", "reference/cli.md", "reference/metrics.md"])
def test_generated_reference_pages_name_no_issue_or_private_module(page: str) -> None:
    # users read these pages: an issue number or kbear._x in a docstring or a help text
    # shows there (the module map, for contributors, may name private modules)
    text = docs_reference.PAGES[page]()
    assert not re.findall(r"(?<![\w&/#])#\d+(?![\w-])|\bkbear\._\w+", text)
