"""Markdown that Python-Markdown (the site's renderer) shows differently from what was meant.

Each case rendered wrong on the site once: ``#28`` at the start of a line is a heading
(no space needed), a code fence closed on a line that goes on with text swallows what
follows into the code block, and ``\\|`` inside backticks in a table cell shows its
backslash (the tables extension keeps a ``|`` inside a code span as it is).
CHANGELOG.md is on the site too (docs/changelog.md includes it).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md", ROOT / "CHANGELOG.md"]
#: Rendered by GitHub only, whose tables need a backslash before a ``|`` even inside code.
GITHUB_ONLY = {ROOT / "README.md"}
_CODE_SPAN = re.compile(r"`[^`]*`")


def _prose_lines(path: Path) -> list[tuple[int, str]]:
    """The lines of ``path`` outside fenced code blocks, numbered from 1."""
    lines, fenced = [], False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, line))
    return lines


@pytest.mark.parametrize("path", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_markdown_renders_as_meant(path: Path) -> None:
    problems = []
    text = path.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(text, 1):
        if re.match(r"\s*```+[^`\w\s{]", line) or re.match(r"\s*```+\s+\S", line):
            problems.append(f"{number}: a code fence with text after it: {line.strip()[:60]}")
    fences = sum(1 for line in text if line.lstrip().startswith("```"))
    if fences % 2:
        problems.append(f"{fences} code fences: one is not closed")
    for number, line in _prose_lines(path):
        if re.match(r"#+[^#\s]", line):
            problems.append(f"{number}: renders as a heading: {line[:60]}")
        if (
            path not in GITHUB_ONLY
            and line.startswith("|")
            and any("\\|" in span for span in _CODE_SPAN.findall(line))
        ):
            problems.append(f"{number}: '\\|' inside backticks in a table shows its backslash")
    assert not problems, f"{path.relative_to(ROOT)}:\n" + "\n".join(problems)
