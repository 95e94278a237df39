"""The pages written for users read as documentation, not as an engineering log.

- the word budgets: a how-to guide (docs/guides/) holds at most 1,500 words of prose,
  a concept page (docs/concepts/) at most 2,500 (fenced code blocks not counted);
- the tutorial (docs/quickstart.md), the guides and the concept pages name no test
  file, no private module (``kbear._x``) and no issue number: how a claim was tested
  or measured goes to docs/evidence/, linked from the page;
- every guide is in the guides index and every concept page in the concepts index;
- the README and the home page list, for each extra, the packages pyproject.toml
  gives it.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
#: section -> the most words of prose a page of it may hold
BUDGETS = {"guides": 1500, "concepts": 2500}
USER_PAGES = [
    DOCS / "quickstart.md",
    *sorted((DOCS / "guides").glob("*.md")),
    *sorted((DOCS / "concepts").glob("*.md")),
]
_FENCE = re.compile(r"\s*(`{3,}|~{3,})")
_COMMENT = re.compile(r"<!--.*?-->", re.S)
#: what a user page must not name, and why
FORBIDDEN = {
    "a test file": re.compile(
        r"(?<![\w/.-])tests/[\w/.*:-]*"  # a path under tests/
        r"|\btest_\w+\.py\b"  # a test module, wherever it lives
        r"|\bconftest\.py\b"
    ),
    "a private module": re.compile(
        r"\bkbear(?:[./][A-Za-z]\w*)*[./]_[A-Za-z]\w*"  # kbear._health, kbear/server/_fleet_store.py
        r"|(?<![\w/.])_[a-z]\w*\.(?:py|c)\b"  # _fleet_store.py
    ),
    # #27, issue 36; not an anchor (#2-check-...) nor an entity (&#123;)
    "an issue number": re.compile(r"(?<![\w&/#])#\d+(?![\w-])|\bissues? #?\d+\b", re.I),
}


def prose(text: str) -> str:
    """``text`` without its fenced code blocks and HTML comments."""
    lines, fence = [], ""
    for line in _COMMENT.sub("", text).splitlines():
        opening = _FENCE.match(line)
        if fence:
            if opening and opening.group(1).startswith(fence[0]) and len(opening.group(1)) >= len(fence):
                fence = ""
            continue
        if opening:
            fence = opening.group(1)
            continue
        lines.append(line)
    return "\n".join(lines)


def words(text: str) -> int:
    """The words of prose of a page: whitespace-separated, code blocks left out."""
    return len(prose(text).split())


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_prose_leaves_out_code_blocks_and_comments() -> None:
    page = "One two.\n\n```python\nx = 1\n```\n\n<!-- a note -->\n~~~~text\n```\nthree\n~~~~\nfour five\n"
    assert words(page) == 4


@pytest.mark.parametrize(
    "path",
    [p for section in BUDGETS for p in sorted((DOCS / section).glob("*.md"))],
    ids=_rel,
)
def test_page_is_within_its_word_budget(path: Path) -> None:
    budget = BUDGETS[path.parent.name]
    count = words(path.read_text(encoding="utf-8"))
    assert count <= budget, (
        f"{_rel(path)}: {count} words of prose, over the {budget} of a {path.parent.name[:-1]} page: "
        "keep what users need to do and why; move what was measured and how it was tested to "
        "docs/evidence/, and split a page that holds two ideas"
    )


@pytest.mark.parametrize("path", USER_PAGES, ids=_rel)
def test_user_page_names_no_test_private_module_or_issue(path: Path) -> None:
    problems = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        for what, pattern in FORBIDDEN.items():
            problems += [f"{number}: names {what}: {m.group(0)}" for m in pattern.finditer(line)]
    assert not problems, f"{_rel(path)} (link to docs/evidence/ instead):\n" + "\n".join(problems)


def test_the_reference_rules_catch_what_they_are_for() -> None:
    caught = {
        "see `tests/router/test_health.py`": "a test file",
        "integration/test_failover_mm2.py": "a test file",
        "the policy is `kbear._health`": "a private module",
        "written in kbear/server/_fleet_store.py": "a private module",
        "(`_cluster_errors.py`)": "a private module",
        "since #27": "an issue number",
        "issue 36": "an issue number",
    }
    for text, what in caught.items():
        assert FORBIDDEN[what].search(text), text
    for fine in (
        "[below](#fail-back)",
        "[step 2](#2-check-the-cluster)",
        "`kbear.server.embedded`",
        "PKCS#8",
        "integration/kafka.py",
        "&#123;",
    ):
        assert not any(p.search(fine) for p in FORBIDDEN.values()), fine


@pytest.mark.parametrize("section", ["guides", "concepts"])
def test_every_page_of_a_section_is_in_its_index(section: str) -> None:
    index = (DOCS / section / "index.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(([\w-]+\.md)(?:#[\w-]*)?\)", index))
    pages = {p.name for p in (DOCS / section).glob("*.md")} - {"index.md"}
    assert pages <= linked, f"docs/{section}/index.md does not link to: {sorted(pages - linked)}"


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _extras() -> dict[str, set[str]]:
    """pyproject.toml's extras: extra -> the distributions it installs (extras of them kept)."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    packages = {}
    for extra, requirements in extras["optional-dependencies"].items():
        names = set()
        for requirement in requirements:
            m = re.match(r"\s*([A-Za-z0-9][\w.-]*)(\[[\w,-]+\])?", requirement)
            assert m, requirement
            names.add(_normalized(m.group(1)) + (m.group(2) or ""))
        packages[extra] = names
    return packages


def _extras_table(path: Path) -> dict[str, set[str]]:
    """The page's table headed ``| extra | adds | for |``: extra -> the packages of its row."""
    lines = path.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(r"\|\s*extra\s*\|\s*adds\s*\|", line))
    rows = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        names = re.findall(r"`(?:kbear\[)?([\w-]+)\]?`", cells[0])
        if len(names) != 1:
            continue  # a row of several extras: working on kbear itself
        listed = re.findall(r"`([^`\[]+)(\[[\w,-]+\])?`", cells[1])
        rows[names[0]] = {_normalized(name) + extras for name, extras in listed}
    return rows


@pytest.mark.parametrize("page", ["README.md", "docs/index.md"])
def test_the_extras_table_lists_what_pyproject_installs(page: str) -> None:
    extras = _extras()
    table = _extras_table(ROOT / page)
    users = {e for e in extras if e not in {"docs", "dev", "integration"}}
    assert set(table) == users, f"{page}: extras table rows {sorted(table)}, pyproject.toml's {sorted(users)}"
    for extra, listed in table.items():
        assert listed == extras[extra], (
            f"{page}: kbear[{extra}] lists {sorted(listed)}, pyproject.toml installs {sorted(extras[extra])}"
        )
