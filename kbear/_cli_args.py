"""argparse pieces the ``kbear`` subcommands share (private): argument types and the
``--client-id`` / ``--client-meta`` options of the commands that look routes up
for a client (``route``, ``explain``, ``move``)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

__all__ = ["MetaAction", "add_client_options", "key_value", "non_empty", "positive_int"]


def key_value(text: str) -> tuple[str, str]:
    """argparse type of ``--client-meta``: ``KEY=VALUE`` with a non-empty key."""
    key, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r} (no '=')")
    if not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r} (empty key)")
    return key, value


class MetaAction(argparse.Action):
    """Collects ``--client-meta`` pairs into one dict; a key given twice with
    different values is a usage error."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        assert isinstance(values, list)  # nargs="+" with type=key_value: a list of pairs
        meta: dict[str, str] = dict(getattr(namespace, self.dest) or {})
        for key, value in values:
            if meta.get(key, value) != value:
                parser.error(
                    f"argument {option_string}: key {key!r} given twice ({meta[key]!r} and {value!r})"
                )
            meta[key] = value
        setattr(namespace, self.dest, meta)


def non_empty(text: str) -> str:
    """argparse type of a name that must not be empty (topic, group, cluster)."""
    if not text:
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def positive_int(text: str) -> int:
    """argparse type of a count that must be > 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def add_client_options(parser: argparse.ArgumentParser, *, id_help: str, meta_help: str) -> None:
    """``--client-id ID`` and ``--client-meta KEY=VALUE...`` (repeatable, collected
    into one dict by :class:`MetaAction`): the client the routes are looked up for."""
    parser.add_argument("--client-id", metavar="ID", help=id_help)
    parser.add_argument(
        "--client-meta",
        metavar="KEY=VALUE",
        type=key_value,
        nargs="+",
        action=MetaAction,
        default={},
        help=meta_help,
    )
