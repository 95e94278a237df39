"""Ownership reports of client-balanced nodes and their analysis. No I/O.

Each :class:`~kbear.ClientBalancedConsumer` publishes, to a small registry topic
on every cluster its topics route to, one JSON record per instance (key
``<group>/<instance>``): its ``node_id`` and ``source_count``, the partition layout
it balances over and the keys it owns. The record is sent after every
reconciliation and every change of what it owns, and a last one with
``state: "left"`` at ``close()``.

Why a registry topic rather than metadata on the commits: a partition's committed
offset carries the metadata of its *last* committer only, so two nodes with the
same ``node_id`` overwrite each other there and cannot be told apart, and a node
that owns a partition it has not committed yet is invisible. A record per instance
shows every node's whole claim at once; newest record per instance wins
(:func:`live_reports`).

:func:`analyse` turns the live reports into the partition -> owners table of
``kbear assignments`` and flags overlaps (a key owned by more than one instance),
orphans (a key of the layout owned by none), duplicate ``node_id``s, nodes
disagreeing on ``source_count``, ``node_id >= source_count`` and node numbers
nobody reports.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from kbear.balanced._assignment import APPLICATION_ASSIGNS, PartitionKey, full_set

#: Version of the record format (field ``v``).
RECORD_VERSION = 1
#: A record is live while younger than this many reporting intervals.
LIVE_INTERVALS = 3


@dataclass(frozen=True)
class Report:
    """One node's ownership record (see the module docstring).

    Attributes:
        group: the consumer group (``group.id``).
        instance: the process's instance id (``host:pid:random``), unique per consumer.
        node_id, source_count: as given to the consumer.
        ts_ms: when it was sent (ms since the epoch).
        interval_ms: the node's reconciliation interval (ms): how often it reports.
        layout: logical topic -> (cluster id, partition count) it balances over.
        owned: the keys it has registered.
        state: ``"up"``, or ``"left"`` (sent by ``close()``).
    """

    group: str
    instance: str
    node_id: int
    source_count: int
    ts_ms: int
    interval_ms: int
    layout: Mapping[str, tuple[str, int]] = field(default_factory=dict)
    owned: tuple[PartitionKey, ...] = ()
    state: str = "up"

    @property
    def record_key(self) -> bytes:
        """The record's key, ``<group>/<instance>`` (UTF-8): one per instance, for compaction."""
        return f"{self.group}/{self.instance}".encode()

    def encode(self) -> bytes:
        """The record's value (UTF-8 JSON)."""
        record: dict[str, Any] = {
            "v": RECORD_VERSION,
            **{f.name: getattr(self, f.name) for f in fields(self)},
        }
        record["layout"] = {t: [c, n] for t, (c, n) in sorted(self.layout.items())}
        record["owned"] = [str(k) for k in sorted(self.owned)]
        return json.dumps(record, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, value: bytes | str | None) -> Report | None:
        """The record in ``value``, or None when it is not a kbear ownership record
        of a known version (the topic may hold anything else)."""
        if not value:
            return None
        try:
            data: Any = json.loads(value)
            if not isinstance(data, dict) or data.get("v") != RECORD_VERSION:
                return None
            return cls(
                group=str(data["group"]),
                instance=str(data["instance"]),
                node_id=int(data["node_id"]),
                source_count=int(data["source_count"]),
                ts_ms=int(data["ts_ms"]),
                interval_ms=int(data["interval_ms"]),
                layout={str(t): (str(c), int(n)) for t, (c, n) in data["layout"].items()},
                owned=tuple(PartitionKey.parse(k) for k in data["owned"]),
                state=str(data.get("state", "up")),
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            return None


def live_reports(reports: Iterable[Report], group: str, now_ms: int) -> tuple[list[Report], list[Report]]:
    """The newest record of each instance of ``group``, split into live ones and
    stale ones (older than :data:`LIVE_INTERVALS` of its own interval, or ``left``)."""
    newest: dict[str, Report] = {}
    for report in reports:
        if report.group != group:
            continue
        seen = newest.get(report.instance)
        if seen is None or report.ts_ms >= seen.ts_ms:
            newest[report.instance] = report
    live: list[Report] = []
    stale: list[Report] = []
    for report in sorted(newest.values(), key=lambda r: (r.node_id, r.instance)):
        fresh = now_ms - report.ts_ms <= LIVE_INTERVALS * max(report.interval_ms, 1)
        (live if fresh and report.state == "up" else stale).append(report)
    return live, stale


@dataclass
class Analysis:
    """The partition -> owners table and its problems.

    Attributes:
        owners: every key of the layout (and every key owned) -> the live reports owning it.
        problems: one line per problem found (empty: the assignment is sound).
    """

    owners: dict[PartitionKey, list[Report]]
    problems: list[str]


def analyse(live: list[Report]) -> Analysis:
    """Check the live reports of one group (see the module docstring)."""
    layout: dict[str, set[tuple[str, int]]] = {}
    keys: set[PartitionKey] = set()
    by_node: dict[int, list[Report]] = {}
    for report in live:
        by_node.setdefault(report.node_id, []).append(report)
        for topic, where in report.layout.items():
            layout.setdefault(topic, set()).add(where)
            keys.update(full_set({topic: where}))
    owners: dict[PartitionKey, list[Report]] = {key: [] for key in keys}
    for report in live:
        for key in report.owned:
            owners.setdefault(key, []).append(report)
    problems: list[str] = []
    for topic, wheres in sorted(layout.items()):
        if len(wheres) > 1:
            seen = ", ".join(f"{c} ({n} partitions)" for c, n in sorted(wheres))
            problems.append(f"layout: nodes disagree on topic {topic!r}: {seen}")
    for key, owning in sorted(owners.items()):
        if len(owning) > 1:
            problems.append(f"overlap: {key} owned by {', '.join(_who(r) for r in owning)}")
        elif not owning:
            problems.append(f"orphan: {key} owned by no live node")
    for node_id, reports in sorted(by_node.items()):
        if len(reports) > 1:
            instances = ", ".join(r.instance for r in reports)
            problems.append(f"duplicate node_id {node_id}: instances {instances}")
    counts = sorted({r.source_count for r in live if r.source_count != APPLICATION_ASSIGNS})
    if len(counts) > 1:
        problems.append(f"source_count: nodes disagree: {', '.join(map(str, counts))}")
    for report in live:
        if report.source_count != APPLICATION_ASSIGNS and report.node_id >= report.source_count:
            problems.append(f"node_id {report.node_id} >= source_count {report.source_count}: {_who(report)}")
    if len(counts) == 1:
        missing = sorted(set(range(counts[0])) - set(by_node))
        if missing:
            problems.append(f"missing nodes: {', '.join(map(str, missing))} of source_count {counts[0]}")
    return Analysis(owners, problems)


def _who(report: Report) -> str:
    return f"node {report.node_id} ({report.instance})"


def table_lines(analysis: Analysis) -> list[str]:
    """The partition -> node table, one line per key, problems marked."""
    rows = [("PARTITION", "NODE", "INSTANCE", "")]
    for key, owning in sorted(analysis.owners.items()):
        nodes = ",".join(str(r.node_id) for r in owning) or "-"
        instances = ",".join(r.instance for r in owning) or "-"
        flag = "OVERLAP" if len(owning) > 1 else ("ORPHAN" if not owning else "")
        rows.append((str(key), nodes, instances, flag))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    return [
        f"{row[0]:<{widths[0]}}  {row[1]:<{widths[1]}}  {row[2]:<{widths[2]}}  {row[3]}".rstrip()
        for row in rows
    ]
