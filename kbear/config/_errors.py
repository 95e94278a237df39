"""The errors of configuration loading: :class:`ConfigError` carrying every :class:`ConfigProblem`."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["ConfigError", "ConfigProblem"]


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    """One problem found in a configuration directory.

    Attributes:
        file: the file name (``route-rules.yaml``) or the directory.
        entry: the entry at fault (``rule 'r7'``, ``cluster 'prod'``, ``entry 3``) or None.
        message: what is wrong, e.g. ``key 'rule': expected 'and' ... at column 31``.
    """

    file: str
    entry: str | None
    message: str

    def __str__(self) -> str:
        where = f"{self.file}: {self.entry}" if self.entry else self.file
        return f"{where}: {self.message}"


class ConfigError(ValueError):
    """A configuration directory that cannot be used.

    Raised by :func:`load_config` (and so by ``Router.from_path`` and
    ``Router.reload``) with every problem found, not just the first.

    Attributes:
        problems: list of :class:`ConfigProblem`, in file order.
    """

    def __init__(self, problems: Iterable[ConfigProblem], directory: str | None = None) -> None:
        self.problems = list(problems)
        self.directory = directory
        head = f"invalid kbear configuration{f' in {directory}' if directory else ''}"
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{head} ({len(self.problems)} problem(s)):\n{lines}")

    def __reduce__(self) -> tuple[type[ConfigError], tuple[list[ConfigProblem], str | None]]:
        # Rebuilt from its problems (pickle, copy), not from the formatted message.
        return type(self), (self.problems, self.directory)
