"""Count the lines of code of a Python package the way issue-sized goals are stated:
a line counts when Python's tokenizer finds a token on it that is neither a comment
nor a docstring (a string statement first in a module, class or function body);
blank lines, comment lines and docstring lines do not count. Other files (C
sources, YAML, templates) are not counted.

    python scripts/loc.py [PATH ...]          # default: kbear
    python scripts/loc.py --per-file kbear    # one line per file, largest first

Prints the number of code lines, docstring lines, comment-only lines and blank
lines, and the number of files.
"""

from __future__ import annotations

import argparse
import ast
import io
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path

_NOT_CODE = {
    tokenize.COMMENT,
    tokenize.NL,
    tokenize.NEWLINE,
    tokenize.INDENT,
    tokenize.DEDENT,
    tokenize.ENDMARKER,
    tokenize.ENCODING,
}


@dataclass
class Count:
    """Lines of one file (or a sum of files) by kind."""

    code: int = 0
    docstrings: int = 0
    comments: int = 0
    blank: int = 0
    files: int = 0

    def __iadd__(self, other: Count) -> Count:
        self.code += other.code
        self.docstrings += other.docstrings
        self.comments += other.comments
        self.blank += other.blank
        self.files += other.files
        return self


def _docstring_lines(tree: ast.AST) -> set[int]:
    """The line numbers (1-based) docstrings occupy."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            value = first.value if isinstance(first, ast.Expr) else None
            if first is not None and isinstance(value, ast.Constant) and isinstance(value.value, str):
                lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return lines


def count_source(source: str) -> Count:
    """The line counts of one Python source text."""
    docstrings = _docstring_lines(ast.parse(source))
    code: set[int] = set()
    comments: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comments.add(token.start[0])
        elif token.type not in _NOT_CODE:
            spanned = set(range(token.start[0], token.end[0] + 1))
            if not spanned <= docstrings:
                code.update(spanned)
    lines = source.splitlines()
    blank = sum(1 for line in lines if not line.strip())
    return Count(
        code=len(code),
        docstrings=len(docstrings),
        comments=len(comments - code - docstrings),
        blank=blank,
        files=1,
    )


def count_paths(paths: list[Path]) -> dict[Path, Count]:
    """The counts of every ``.py`` file under the given files or directories."""
    counts: dict[Path, Count] = {}
    for path in paths:
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
        for file in files:
            counts[file] = count_source(file.read_text(encoding="utf-8"))
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path, default=[Path("kbear")])
    parser.add_argument("--per-file", action="store_true", help="one line per file, most code first")
    args = parser.parse_args(argv)
    counts = count_paths(args.paths)
    total = Count()
    for count in counts.values():
        total += count
    if args.per_file:
        for file, count in sorted(counts.items(), key=lambda item: -item[1].code):
            print(f"{count.code:6d}  {file}")
    print(
        f"code {total.code}  docstrings {total.docstrings}  comments {total.comments}  "
        f"blank {total.blank}  files {total.files}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
