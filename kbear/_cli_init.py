"""``kbear init DIR``: write a configuration directory to start from (private to
:mod:`kbear.cli`).

The four files of a configuration directory (the CRRL specification, section 6),
each a real file with comments saying what it holds: ``clusters.yaml`` (the
clusters given with ``--cluster ID[=SERVERS]``, by default ``east`` and ``west``),
``topics.yaml``, ``consumer-groups.yaml`` and ``route-rules.yaml`` (everything on
the first cluster; clients whose ``client.env`` is ``uat`` on the second).

A cluster given without its servers gets a placeholder, ``${KBEAR_<ID>_BOOTSTRAP_SERVERS}``
(:func:`placeholder`), read from the environment of each application: ``kbear
validate`` says which variable is unset and what to put in it, and ``kbear dev
--config DIR`` starts a local cluster for each placeholder that is not set.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from kbear.config import CLUSTERS_FILE, CONSUMER_GROUPS_FILE, ROUTE_RULES_FILE, TOPICS_FILE

__all__ = ["DEFAULT_CLUSTERS", "FILES", "add_init_arguments", "cmd_init", "placeholder", "write_config"]

#: The files ``kbear init`` writes, in the order it writes them.
FILES = (CLUSTERS_FILE, TOPICS_FILE, CONSUMER_GROUPS_FILE, ROUTE_RULES_FILE)
#: The clusters of ``kbear init`` without ``--cluster``.
DEFAULT_CLUSTERS = ("east", "west")
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")

_CLUSTERS_HEAD = """\
# The Kafka clusters kbear routes to (kbear init). Each has an id, which the rules
# of route-rules.yaml name, and "meta": the librdkafka properties of the clients
# kbear makes for it (bootstrap.servers is required; security.protocol,
# sasl.username... go here too).
#
# ${NAME} is read from the environment of each application (and of kbear validate):
#   export NAME=host1:9092,host2:9092
# or write the addresses here instead. `kbear dev --config DIR` starts a local
# cluster for each ${NAME} that is not set and prints the export lines.
clusters:
"""

_TOPICS = """\
# Facts about topics (optional): a rule may test them, e.g.
#   rule: use cluster west when topic.team=shop
# A topic need not be listed here to be routed.
topics:
  - id: orders
    meta:
      team: shop
"""

_GROUPS = """\
# Facts about consumer groups (optional), one entry per group and topic; a rule
# may test them (consumerGroup.KEY). Example:
#   - id:
#       groupName: billing
#       topicId: orders
#     meta:
#       team: billing
consumer-groups: []
"""

_RULES_HEAD = """\
# The rules: which cluster (and topic there) serves a topic, for which clients.
# A lookup (a producer's topic, or a consumer's topic and group) tries the rules
# in chain order: priority first (higher first), then consumer-group rules,
# topic rules, global rules, then order in this file; the first that applies
# wins. See a lookup's chain with:
#   kbear explain --config DIR --topic orders --client-meta env=uat
# Edit this file while applications run: they follow without a restart.
route-rules:
  # Every topic goes to {first} unless a rule below says otherwise.
  - id: default
    meta:
      rule.isGlobal: true
    rule: use cluster {first}
"""

_RULES_SECOND = """\
  # Applications created with kbear.client.meta.env=uat use {second}.
  - id: uat-on-{second}
    priority: 1
    meta:
      rule.isGlobal: true
    rule: use cluster {second} when client.env=uat
"""


def placeholder(cluster_id: str) -> str:
    """The environment variable ``kbear init`` writes for the servers of ``cluster_id``:
    ``KBEAR_<ID>_BOOTSTRAP_SERVERS``, the id upper-cased, other characters than
    letters and digits made ``_`` (``eu-west`` -> ``KBEAR_EU_WEST_BOOTSTRAP_SERVERS``)."""
    return f"KBEAR_{re.sub(r'[^A-Z0-9]', '_', cluster_id.upper())}_BOOTSTRAP_SERVERS"


def _clusters_file(clusters: dict[str, str | None]) -> str:
    lines = [_CLUSTERS_HEAD]
    for cluster_id, servers in clusters.items():
        lines.append(
            f"  - id: {cluster_id}\n"
            "    meta:\n"
            f"      bootstrap.servers: {servers or '${' + placeholder(cluster_id) + '}'}\n"
        )
    return "".join(lines)


def _rules_file(ids: list[str]) -> str:
    text = _RULES_HEAD.format(first=ids[0])
    if len(ids) > 1:
        text += _RULES_SECOND.format(second=ids[1])
    return text


def write_config(directory: Path, clusters: dict[str, str | None], *, force: bool = False) -> list[Path]:
    """Write the four files of a configuration directory into ``directory``.

    Args:
        directory: created (with its parents) when missing.
        clusters: at least one cluster id (a CRRL identifier: letters, digits,
            ``.``, ``_``, ``-``; ``--cluster`` checks it) -> its ``bootstrap.servers``
            (``"host:port,..."``), or None for a placeholder (:func:`placeholder`);
            in the order written. The rules use the first (and the second, when given).
        force: overwrite files that exist (otherwise refused).

    Returns:
        The paths written.

    Raises:
        ValueError: ``directory`` already holds one of the files and ``force`` is
            False (naming them).
        OSError: ``directory`` cannot be created or written.
    """
    present = [name for name in FILES if (directory / name).exists() or (directory / name).is_symlink()]
    if present and not force:
        raise ValueError(f"{directory} already holds {', '.join(present)} (--force overwrites)")
    directory.mkdir(parents=True, exist_ok=True)
    texts = {
        CLUSTERS_FILE: _clusters_file(clusters),
        TOPICS_FILE: _TOPICS,
        CONSUMER_GROUPS_FILE: _GROUPS,
        ROUTE_RULES_FILE: _rules_file(list(clusters)),
    }
    written = [directory / name for name in FILES]
    for path in written:
        path.unlink(missing_ok=True)  # a link is replaced by a file, never written through
        path.write_text(texts[path.name], encoding="utf-8")
    return written


def cluster_option(text: str) -> tuple[str, str | None]:
    """argparse type of ``--cluster``: ``ID`` or ``ID=HOST:PORT[,HOST:PORT...]``."""
    cluster_id, sep, servers = text.partition("=")
    if not cluster_id or not _ID.match(cluster_id):
        raise argparse.ArgumentTypeError(
            f"expected ID or ID=HOST:PORT[,...], got {text!r} (an id is letters, digits, '.', '_', '-')"
        )
    if sep and not servers.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: no servers after '='")
    return cluster_id, servers.strip() or None


def add_init_arguments(parser: argparse.ArgumentParser) -> None:
    """``kbear init``'s arguments."""
    parser.add_argument("directory", metavar="DIR", help="the directory to write (created when missing)")
    parser.add_argument(
        "--cluster",
        action="append",
        type=cluster_option,
        metavar="ID[=SERVERS]",
        help="a cluster and its bootstrap.servers (repeat; without =SERVERS, a ${KBEAR_ID_BOOTSTRAP_SERVERS} "
        f"placeholder; default: {' and '.join(DEFAULT_CLUSTERS)})",
    )
    parser.add_argument("--force", action="store_true", help="overwrite the files if DIR holds them")


def cmd_init(args: argparse.Namespace) -> int:
    """``kbear init``: 0 written, 2 refused (the reason on stderr)."""
    pairs: list[tuple[str, str | None]] = args.cluster or [(c, None) for c in DEFAULT_CLUSTERS]
    clusters = dict(pairs)
    if len(clusters) != len(pairs):
        print("kbear: init: a cluster id given twice", file=sys.stderr)
        return 2
    directory = Path(args.directory)
    try:
        written = write_config(directory, clusters, force=args.force)
    except (ValueError, OSError) as exc:
        print(f"kbear: init: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path}")
    unset = [placeholder(c) for c, servers in clusters.items() if servers is None]
    if unset:
        print("clusters.yaml reads the brokers' addresses from the environment:")
        for name in unset:
            print(f"  export {name}=HOST:PORT")
        print(f"or start local clusters for them: kbear dev --config {directory}")
    print(f"check it: kbear validate --config {directory}")
    return 0
