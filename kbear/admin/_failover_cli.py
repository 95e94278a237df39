"""``kbear failover`` and ``kbear failback`` (private; issue #27 item 2b): the
operator's trigger.

A failover of cluster ``C`` is one meta key of its ``clusters.yaml`` entry,
``kbear.failover.active: "true"``: every lookup of every client (and of a ``kbear
serve`` answering the fleet) then gives C's routes to its standby
(``kbear.failover.to``; :func:`kbear._standby.standby_route`), as a configuration
reload. A fail-back removes the key. Both write the time of the decision,
``kbear.failover.decided``: a client that failed the cluster over itself
(``kbear.failover.enable``) follows ``clusters.yaml`` again once it reads a decision
taken after its failover, so a fail-back brings it back too (a fail-back of a
cluster ``clusters.yaml`` does not fail over writes that key alone). The plan
comes first, as ``kbear move``'s: the cluster, its standby, whether each answers
(an AdminClient ``list_topics`` within ``--timeout``), the rules whose routes
move, and the diff of ``clusters.yaml``; ``--apply`` writes the file atomically once the new text was
validated (loaded from a temporary copy of the directory).

Ready: a failover needs the standby to answer, a fail-back the cluster itself.
Exit codes: 0 done or ready, 1 not ready, 2 usage or configuration error.

The file is edited in place (comments and layout of the rest kept); a layout the
edit cannot follow (flow style) is written back whole by PyYAML instead (comments
lost), which the plan says.
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient

from kbear._clients import DebugLog, current_factory, mount, quieted
from kbear._standby import topics_note
from kbear.admin._failover_starts import GroupStarts, failover_starts
from kbear.admin._move_fleet import service_directory
from kbear.admin._move_rules import load_changed, text_diff
from kbear.config import (
    FAILOVER_ACTIVE,
    FAILOVER_DECIDED,
    ClusterConfig,
    ConfigError,
    KBearConfig,
    load_config,
)
from kbear.reload import replace_file

EXIT_OK, EXIT_NOT_READY, EXIT_CONFIG_ERROR = 0, 1, 2
CLUSTERS_FILE = "clusters.yaml"

DESCRIPTION = {
    False: "Plan the failover of a cluster to its standby (kbear.failover.to): whether the standby answers, "
    "the rules whose routes move, the change of clusters.yaml (kbear.failover.active); exit 0 ready "
    "(or done), 1 not ready. --apply writes clusters.yaml atomically: clients follow at their next reload.",
    True: "Plan the fail-back of a failed-over cluster: whether it answers again, the rules whose routes "
    "come back, the change of clusters.yaml (kbear.failover.active removed, kbear.failover.decided: clients "
    "that failed the cluster over themselves come back too); exit 0 ready, 1 not ready. --apply writes it.",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``kbear failover`` / ``kbear failback`` options but ``--config``."""
    parser.add_argument("--cluster", required=True, metavar="ID", help="the cluster (its clusters.yaml id)")
    parser.add_argument("--apply", action="store_true", help="write clusters.yaml (atomically) when ready")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--timeout", type=float, default=5.0, metavar="S", help="how long a cluster has to answer, s (5)"
    )
    parser.add_argument(
        "--group",
        action="append",
        default=[],
        metavar="G",
        help="failover: a consumer group whose start on the standby is shown, per partition "
        "(repeatable; default: the groups of consumer-groups.yaml)",
    )
    parser.add_argument(
        "--topic",
        action="append",
        default=[],
        metavar="T",
        help="failover: with --group, a topic the group reads (repeatable; default: the topics of "
        "topics.yaml and consumer-groups.yaml)",
    )


@dataclass
class FailoverPlan:
    """What ``kbear failover``/``failback`` found and would change.

    Attributes:
        action: ``failover`` or ``failback``.
        cluster, standby: the cluster and its standby.
        state: ``failed-over`` or ``normal``, now.
        done: nothing to change (a failover of a cluster already failed over; a
            fail-back is never done: it writes the decision's time for the clients
            that failed over themselves).
        reachable: cluster id -> None when it answered, else the error.
        ready: the change may be applied (see the module).
        why_not: why not ready ("" when ready).
        rules: ids of the rules whose routes name the cluster (they move).
        diff: the unified diff of clusters.yaml.
        rewritten: clusters.yaml would be written back whole (comments lost).
        applied: ``--apply`` wrote the file.
        groups: for a failover, where each consumer group starts on the standby, per
            partition (:func:`kbear.admin._failover_starts.failover_starts`).
        topics: what the topics are called on the standby and what producers do
            there (:func:`kbear._standby.topics_note`).
        new_text: clusters.yaml's new text (not in the JSON output).
    """

    action: str
    cluster: str
    standby: str
    state: str
    done: bool
    reachable: dict[str, str | None] = field(default_factory=dict)
    ready: bool = False
    why_not: str = ""
    rules: list[str] = field(default_factory=list)
    diff: str = ""
    rewritten: bool = False
    applied: bool = False
    groups: list[GroupStarts] = field(default_factory=list)
    topics: str = ""
    new_text: str = field(default="", repr=False)


def probe(cluster: ClusterConfig, timeout_s: float) -> str | None:
    """None when ``cluster``'s brokers answer a metadata request within ``timeout_s``,
    else the error's text."""
    conf: dict[str, Any] = {**cluster.client_properties, "socket.timeout.ms": max(100, int(timeout_s * 1000))}
    conf["error_cb"] = lambda err: None  # the answer (or its absence) says it
    conf["logger"] = DebugLog()  # librdkafka's lines at debug level, not on stderr
    try:
        AdminClient(conf).list_topics(timeout=timeout_s)
    except Exception as exc:  # KafkaException (timed out, transport), or a refused property
        return error_text(exc)
    return None


def unanswered(config: KBearConfig, cluster_ids: list[str], timeout_s: float) -> dict[str, str]:
    """Cluster id -> why it did not answer (:func:`probe`, all at once, each within
    ``timeout_s`` seconds), for those of ``cluster_ids`` that did not; ids absent
    from ``config`` are skipped."""
    ids = [c for c in dict.fromkeys(cluster_ids) if c in config.clusters]
    with ThreadPoolExecutor(max_workers=max(1, len(ids))) as pool:
        answers = dict(zip(ids, pool.map(lambda c: probe(config.clusters[c], timeout_s), ids), strict=True))
    return {c: why for c, why in answers.items() if why is not None}


def error_text(exc: BaseException) -> str:
    """What went wrong, in words: a KafkaException's error string (``Failed to get
    metadata: Local: Broker transport failure``), not the ``KafkaError{...}`` repr."""
    first = exc.args[0] if exc.args else None
    text = first.str() if isinstance(first, KafkaError) else str(exc)
    return text or type(exc).__name__


def tcp_probe(cluster: ClusterConfig, timeout_s: float) -> str | None:
    """None when a TCP connection to one of ``cluster``'s bootstrap servers opens
    within ``timeout_s``, else why none did (no credentials needed: what ``kbear
    serve``, which holds none, can tell of a cluster)."""
    errors = []
    for server in cluster.bootstrap_servers.split(","):
        address = server.strip().rsplit("://", 1)[-1]
        host, _, port = address.rpartition(":")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
        except (OSError, ValueError) as exc:
            errors.append(f"{address}: {exc}")
            continue
        return None
    return "; ".join(errors) or "no bootstrap server"


#: ``probe(cluster, timeout_s)``: None when the cluster answers, else why not
Probe = Callable[[ClusterConfig, float], str | None]


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _entry_lines(lines: list[str], cluster_id: str) -> tuple[int, int] | None:
    """(first, end) line indexes of ``cluster_id``'s block-style list entry."""
    start = re.compile(rf"^(\s*)-\s+id:\s*['\"]?{re.escape(cluster_id)}['\"]?\s*(#.*)?$")
    first = next((i for i, line in enumerate(lines) if start.match(line)), None)
    if first is None:
        return None
    indent = _indent(lines[first])
    ends = (j for j in range(first + 1, len(lines)) if lines[j].strip()[:1] not in ("", "#"))
    return first, next((j for j in ends if _indent(lines[j]) <= indent), len(lines))


def _edit(text: str, cluster_id: str, changes: dict[str, str | None]) -> str | None:
    """``text`` with ``cluster_id``'s meta keys set (a value) or removed (None), layout
    kept; None when the layout is not one this edit follows."""
    lines = text.splitlines(keepends=True)
    found = _entry_lines(lines, cluster_id)
    if found is None:
        return None
    first, end = found
    meta = next((i for i in range(first, end) if re.match(r"^\s*meta:\s*(#.*)?$", lines[i])), None)
    if meta is None:
        return None
    children = [
        i for i in range(meta + 1, end) if lines[i].strip() and _indent(lines[i]) > _indent(lines[meta])
    ]
    if not children:
        return None
    child_indent = " " * _indent(lines[children[0]])
    keys = re.compile(rf"^\s*({'|'.join(re.escape(k) for k in changes)})\s*:")
    drop = {i for i in children if keys.match(lines[i])}
    after = max([meta, *(i for i in children if i not in drop)])
    out = ["" if i in drop else line for i, line in enumerate(lines)]
    added = [f'{child_indent}{k}: "{v}"\n' for k, v in changes.items() if v is not None]
    if added and not out[after].endswith("\n"):
        out[after] += "\n"
    out[after + 1 : after + 1] = added
    return "".join(out)


def _rewrite(text: str, cluster_id: str, changes: dict[str, str | None]) -> str:
    document = yaml.safe_load(text)
    for entry in document["clusters"]:
        if str(entry.get("id")) == cluster_id:
            meta = entry.setdefault("meta", {})
            for key, value in changes.items():
                if value is None:
                    meta.pop(key, None)
                else:
                    meta[key] = value
    return str(yaml.safe_dump(document, sort_keys=False))


def plan(
    directory: Path,
    config: KBearConfig,
    cluster_id: str,
    back: bool,
    timeout_s: float,
    check: Probe = probe,
    load: Callable[[Path], KBearConfig] = load_config,
) -> FailoverPlan:
    """The plan of a failover (``back`` False) or fail-back of ``cluster_id``.

    ``check`` tells whether a cluster answers (default :func:`probe`); ``load`` loads
    the changed copy of the directory to validate it (default ``load_config``).

    Raises:
        ValueError: no such cluster, or it has no standby (the message says which).
        ConfigError: the changed clusters.yaml would not load.
    """
    cluster = config.clusters.get(cluster_id)
    if cluster is None:
        raise ValueError(
            f"no cluster {cluster_id!r} in {CLUSTERS_FILE} (clusters: {', '.join(config.clusters)})"
        )
    standby = cluster.failover.standby
    if standby is None:
        raise ValueError(f"cluster {cluster_id!r} has no standby: set 'kbear.failover.to' in {CLUSTERS_FILE}")
    active = cluster.failover.active
    out = FailoverPlan(
        action="failback" if back else "failover",
        cluster=cluster_id,
        standby=standby,
        state="failed-over" if active else "normal",
        # a fail-back is never done: written over a cluster that clusters.yaml does not
        # fail over, its decision ends the failovers clients made themselves (kbear._lost)
        done=active and not back,
        rules=[r.id for r in config.rules if r.statement.cluster == cluster_id],
        topics=topics_note(cluster, back),
    )
    if out.done:
        out.ready = True
        return out
    for cid in (cluster_id, standby):
        out.reachable[cid] = check(config.clusters[cid], timeout_s)
    needed = cluster_id if back else standby
    if out.reachable[needed] is not None:
        out.why_not = f"cluster {needed!r} does not answer: {out.reachable[needed]}"
    out.ready = not out.why_not
    old = (directory / CLUSTERS_FILE).read_text(encoding="utf-8")
    # the meta keys the decision writes (a value) or removes (None); the decision's time
    # in UTC to the millisecond: 2026-11-28T15:20:03.123Z
    decided = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    changes = {FAILOVER_ACTIVE: None if back else "true", FAILOVER_DECIDED: decided}
    new = _edit(old, cluster_id, changes)
    if new is None:
        new, out.rewritten = _rewrite(old, cluster_id, changes), True
    load_changed(directory, CLUSTERS_FILE, new, load, "kbear-failover-")
    out.diff = text_diff(old, new, CLUSTERS_FILE, CLUSTERS_FILE)
    out.new_text = new
    return out


def apply(directory: Path, result: FailoverPlan) -> None:
    """Write ``result``'s clusters.yaml into ``directory`` atomically (``applied`` set).

    Raises:
        OSError: the file could not be written (it is then unchanged).
    """
    replace_file(directory / CLUSTERS_FILE, result.new_text)
    result.applied = True


def _print(p: FailoverPlan) -> None:
    arrow = f"{p.cluster} -> {p.standby}" if p.action == "failover" else f"{p.standby} -> {p.cluster}"
    print(f"{p.action} of cluster {p.cluster!r} (standby {p.standby!r}): routes {arrow}")
    print(f"  state now: {p.state}")
    for cid, err in p.reachable.items():
        print(f"  {cid}: {'answers' if err is None else 'does not answer: ' + err}")
    print(f"  rules naming {p.cluster!r}: {', '.join(p.rules) or 'none'}")
    if p.done:
        print("  done: nothing to change")
        return
    if p.action == "failover" and p.reachable.get(p.cluster) is None:
        print(
            f"  warning: {p.cluster!r} still answers here: clients that still reach it keep writing there "
            "until they reload (split brain until the whole fleet has reloaded)",
        )
    if p.action == "failback" and p.state == "normal":
        print(
            f"  {CLUSTERS_FILE} does not fail {p.cluster!r} over: the fail-back writes the decision's time "
            f"({FAILOVER_DECIDED}); clients that failed {p.cluster!r} over themselves come back at their "
            "next reload",
        )
    print(f"  {p.topics}")
    if p.rewritten:
        print(f"  {CLUSTERS_FILE} is written back whole by PyYAML (its layout: comments are lost)")
    for g in p.groups:
        where = f"on {p.standby} as '{g.standby_topic}'"
        print(f"  group '{g.group}', topic '{g.topic}' {where}: {g.mirror}")
        source_down = None if p.reachable.get(p.cluster) is None else p.cluster
        for start in g.starts:
            print(f"    {start.describe(source_down)}")
    print(p.diff, end="")
    if p.applied:
        print(f"applied: {CLUSTERS_FILE} written; clients follow at their next reload")
    elif p.ready:
        print("ready: --apply writes it")
    else:
        print(f"not ready: {p.why_not}")


def run(args: argparse.Namespace, back: bool) -> int:
    """``kbear failover`` (``back`` False) or ``kbear failback``; returns the exit code."""
    location = str(args.config)
    # a cluster that does not answer: one line naming it, none of librdkafka's
    try:
        with mount(quieted(current_factory())):
            directory = Path(service_directory(location) if "://" in location else location)
            config = load_config(directory)
            result = plan(directory, config, args.cluster, back, args.timeout)
            if not back and not result.done and result.reachable.get(result.standby) is None:
                answers = result.reachable.get(result.cluster) is None
                result.groups = failover_starts(
                    config, args.cluster, args.group, args.topic, answers, args.timeout
                )
    except (ValueError, ConfigError, OSError) as exc:
        print(f"kbear: {exc}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    if args.apply and result.ready and not result.done:
        try:
            apply(directory, result)
        except OSError as exc:
            print(f"kbear: cannot write {directory / CLUSTERS_FILE}: {exc}", file=sys.stderr)
            return EXIT_CONFIG_ERROR
    if args.json:
        shown = asdict(result)
        del shown["new_text"]
        print(json.dumps(shown))
    else:
        _print(result)
    return EXIT_OK if result.ready else EXIT_NOT_READY
