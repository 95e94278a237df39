"""A griffe extension for the API pages (mkdocs.yml, mkdocstrings): kbear's docstrings
are Google style with reStructuredText inline markup (Sphinx roles, double
backticks, ``::`` literal blocks, simple tables); this turns that markup into the
Markdown mkdocstrings renders, without touching the docstrings in the code.

- ``:class:`~kbear.Client``` -> ```Client``` (``~``: the last part, as Sphinx shows it);
- a line ending in ``::`` ends in ``:`` (the indented block after it is a code block
  in Markdown too);
- a simple table (``====  ====`` borders) becomes a fenced ``text`` block, so its
  columns stay aligned.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from griffe import Extension

sys.path.insert(0, str(Path(__file__).resolve().parent))

from docs_reference import sphinx_roles_to_markdown

_BORDER = re.compile(r"^\s*=+( +=+)+\s*$")


def _tables_to_blocks(text: str) -> str:
    lines = text.splitlines()
    out: list[str] = []
    inside = False
    for i, line in enumerate(lines):
        border = bool(_BORDER.match(line))
        if border and not inside:
            indent = line[: len(line) - len(line.lstrip())]
            out.append(f"{indent}```text")
            inside = True
            out.append(line)
            continue
        out.append(line)
        if border and inside and (i + 1 == len(lines) or not lines[i + 1].strip()):
            out.append(f"{indent}```")
            inside = False
    if inside:
        out.append("```")
    return "\n".join(out)


def rst_to_markdown(text: str) -> str:
    """The Markdown of a docstring written with reStructuredText inline markup."""
    text = _tables_to_blocks(text)
    text = re.sub(r"(?m)(\S)::$", r"\1:", text)
    return sphinx_roles_to_markdown(text)


class SphinxMarkup(Extension):
    """Rewrites every docstring griffe loads (see the module docstring)."""

    def on_instance(self, **kwargs: Any) -> None:
        obj = kwargs["obj"]
        if obj.docstring is not None:
            obj.docstring.value = rst_to_markdown(obj.docstring.value)
