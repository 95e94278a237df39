"""A cluster's standby and mirror, declared in ``clusters.yaml`` (issue #27 item 1).

Meta-only cluster keys (librdkafka does not know them, so no client ever gets
them, and KBear's own files, which have none, load unchanged):

- ``kbear.failover.to``: the id of the cluster that stands by for this one;
- ``kbear.mirror``: how this cluster is mirrored to its standby: ``mm2``
  (MirrorMaker 2), ``identical`` (offsets are the same on both sides, as Cluster
  Linking and other offset-preserving mirrors give) or ``none`` (default);
- ``kbear.mirror.source.alias`` (``mm2`` only): this cluster's alias in
  MirrorMaker 2's configuration (default: the cluster's id);
- ``kbear.mirror.replication.policy`` (``mm2`` only): ``default`` (the remote
  topic is ``<alias>.<topic>``, MirrorMaker 2's DefaultReplicationPolicy) or
  ``identity`` (the same name, IdentityReplicationPolicy);
- ``kbear.cluster.id``: the Kafka cluster id its brokers report;
- ``kbear.failover.active``: ``true`` while the cluster is failed over (its routes
  go to its standby; written by ``kbear failover --apply``, removed by ``kbear
  failback --apply``; default ``false``);
- ``kbear.failover.decided``: when the operator last decided about the cluster
  (an ISO 8601 time with its offset, ``2026-11-28T15:20:03Z``; written with
  ``kbear.failover.active`` by ``kbear failover --apply``, ``kbear failback
  --apply`` and ``kbear serve --failover-after-ms``): a client that failed the
  cluster over itself follows ``clusters.yaml`` again once it reads a decision
  taken after its own failover (:mod:`kbear._lost`).

:func:`failover_problems` checks them over the whole file (a standby that is no
cluster, a chain of standbys that loops, an unknown mirror kind or policy);
configuration loading reports each as a problem of the cluster's entry. Nothing
acts on them yet: they are read by :func:`failover_of`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

__all__ = [
    "FAILOVER_ACTIVE",
    "FAILOVER_DECIDED",
    "FAILOVER_KEYS",
    "Failover",
    "MirrorKind",
    "ReplicationPolicy",
    "failover_of",
    "failover_problems",
]

FAILOVER_TO = "kbear.failover.to"
MIRROR = "kbear.mirror"
MIRROR_ALIAS = "kbear.mirror.source.alias"
MIRROR_POLICY = "kbear.mirror.replication.policy"
CLUSTER_ID = "kbear.cluster.id"
FAILOVER_ACTIVE = "kbear.failover.active"
FAILOVER_DECIDED = "kbear.failover.decided"
#: the cluster meta keys of this module (meta only, by design)
FAILOVER_KEYS = frozenset(
    {FAILOVER_TO, MIRROR, MIRROR_ALIAS, MIRROR_POLICY, CLUSTER_ID, FAILOVER_ACTIVE, FAILOVER_DECIDED}
)


class MirrorKind(StrEnum):
    """``kbear.mirror``: how a cluster is mirrored to its standby."""

    MM2 = "mm2"
    IDENTICAL = "identical"
    NONE = "none"


class ReplicationPolicy(StrEnum):
    """``kbear.mirror.replication.policy``: MirrorMaker 2's naming of remote topics."""

    DEFAULT = "default"
    IDENTITY = "identity"


@dataclass(frozen=True, slots=True)
class Failover:
    """What ``clusters.yaml`` declares of one cluster's standby (defaults filled in).

    Attributes:
        standby: ``kbear.failover.to`` (None: no standby).
        mirror: ``kbear.mirror`` (``none`` by default).
        source_alias: ``kbear.mirror.source.alias`` (default: the cluster's id).
        policy: ``kbear.mirror.replication.policy`` (``default`` by default).
        cluster_id: ``kbear.cluster.id`` (None: not checked).
        active: ``kbear.failover.active``: the cluster is failed over (its routes go
            to ``standby``; default False).
        decided: ``kbear.failover.decided``: when the operator last failed the
            cluster over or back (timezone-aware; None: never written).
    """

    standby: str | None
    mirror: MirrorKind
    source_alias: str
    policy: ReplicationPolicy
    cluster_id: str | None
    active: bool = False
    decided: datetime | None = None

    def remote_topic(self, topic: str) -> str:
        """The name of ``topic``'s copy on the standby (MirrorMaker 2's policies; the
        same name for ``identical`` and ``none``)."""
        if self.mirror is MirrorKind.MM2 and self.policy is ReplicationPolicy.DEFAULT:
            return f"{self.source_alias}.{topic}"
        return topic


def failover_of(cluster_id: str, meta: Mapping[str, str]) -> Failover:
    """The :class:`Failover` of cluster ``cluster_id`` from its (valid) ``meta``."""
    return Failover(
        standby=meta.get(FAILOVER_TO) or None,
        mirror=MirrorKind(meta.get(MIRROR, MirrorKind.NONE.value)),
        source_alias=meta.get(MIRROR_ALIAS) or cluster_id,
        policy=ReplicationPolicy(meta.get(MIRROR_POLICY, ReplicationPolicy.DEFAULT.value)),
        cluster_id=meta.get(CLUSTER_ID) or None,
        active=meta.get(FAILOVER_ACTIVE, "false").strip().lower() == "true",
        decided=decision_time(meta.get(FAILOVER_DECIDED)),
    )


def decision_time(text: str | None) -> datetime | None:
    """``kbear.failover.decided`` read: an ISO 8601 time with its UTC offset (None:
    absent, or not such a time; :func:`failover_problems` reports the latter)."""
    if text is None:
        return None
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    return when if when.tzinfo is not None else None


def _choices(kind: type[StrEnum]) -> str:
    return ", ".join(repr(k.value) for k in kind)


def _own_problems(cluster_id: str, meta: Mapping[str, str], known: set[str]) -> list[str]:
    problems = []
    standby = meta.get(FAILOVER_TO)
    if standby is not None:
        if not standby.strip():
            problems.append(f"meta '{FAILOVER_TO}' is empty (the id of the standby cluster expected)")
        elif standby == cluster_id:
            problems.append(f"meta '{FAILOVER_TO}': a cluster cannot be its own standby")
        elif standby not in known:
            problems.append(
                f"meta '{FAILOVER_TO}': standby {standby!r} is not a cluster of clusters.yaml "
                f"(clusters: {', '.join(sorted(known))})"
            )
    mirror = meta.get(MIRROR, MirrorKind.NONE.value)
    if mirror not in {k.value for k in MirrorKind}:
        problems.append(f"meta '{MIRROR}': unknown mirror kind {mirror!r} (expected {_choices(MirrorKind)})")
    elif mirror != MirrorKind.NONE and standby is None:
        problems.append(f"meta '{MIRROR}': {mirror!r} needs '{FAILOVER_TO}' (the cluster mirrored to)")
    for key in (MIRROR_ALIAS, MIRROR_POLICY):
        if key in meta and mirror != MirrorKind.MM2:
            problems.append(f"meta '{key}' applies to '{MIRROR}: mm2' only (here: {mirror!r})")
    if MIRROR_ALIAS in meta and not meta[MIRROR_ALIAS].strip():
        problems.append(f"meta '{MIRROR_ALIAS}' is empty (MirrorMaker 2's alias of this cluster expected)")
    policy = meta.get(MIRROR_POLICY)
    if policy is not None and policy not in {p.value for p in ReplicationPolicy}:
        problems.append(
            f"meta '{MIRROR_POLICY}': unknown policy {policy!r} (expected {_choices(ReplicationPolicy)})"
        )
    active = meta.get(FAILOVER_ACTIVE)
    if active is not None:
        if active.strip().lower() not in ("true", "false"):
            problems.append(f"meta '{FAILOVER_ACTIVE}': {active!r} is not true or false")
        elif active.strip().lower() == "true" and not (standby or "").strip():
            problems.append(
                f"meta '{FAILOVER_ACTIVE}': a cluster failed over needs '{FAILOVER_TO}' (its standby)"
            )
    decided = meta.get(FAILOVER_DECIDED)
    if decided is not None and decision_time(decided) is None:
        problems.append(
            f"meta '{FAILOVER_DECIDED}': {decided!r} is not an ISO 8601 time with its UTC offset "
            "(as '2026-11-28T15:20:03Z')"
        )
    own_id = meta.get(CLUSTER_ID)
    if own_id is not None and (not own_id.strip() or own_id != own_id.strip()):
        problems.append(f"meta '{CLUSTER_ID}': {own_id!r} is not a Kafka cluster id (no blanks)")
    return problems


def failover_problems(metas: Mapping[str, Mapping[str, str]], known: set[str]) -> dict[str, list[str]]:
    """The problems of the failover keys of ``clusters.yaml``.

    Args:
        metas: cluster id -> its meta (after ``${NAME}`` interpolation).
        known: every cluster id listed in the file (entries with other problems too).

    Returns:
        cluster id -> its problems (only clusters with some): a standby that is
        empty, itself or no cluster of the file; a chain of standbys that comes
        back to the cluster (``east -> west -> east``); an unknown ``kbear.mirror``
        or ``kbear.mirror.replication.policy``; a mirror without a standby; MirrorMaker
        2 keys on another mirror kind; an empty alias; a blank ``kbear.cluster.id``;
        a ``kbear.failover.active`` other than true/false, or true without a standby;
        a ``kbear.failover.decided`` that is not an ISO 8601 time with its offset.
    """
    out = {cid: p for cid, meta in metas.items() if (p := _own_problems(cid, meta, known))}
    for start in metas:
        chain = [start]
        standby = metas[start].get(FAILOVER_TO)
        while standby is not None and standby in metas and standby not in chain:
            chain.append(standby)
            standby = metas[standby].get(FAILOVER_TO)
        if standby == start and len(chain) > 1:
            loop = " -> ".join([*chain, start])
            out.setdefault(start, []).append(f"meta '{FAILOVER_TO}': the chain of standbys loops: {loop}")
    return out
