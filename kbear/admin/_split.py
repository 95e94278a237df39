"""Splitting one admin call into one request per cluster (private).

A call names keys (topics, ``TopicPartition``s, ``ConfigResource``s, groups); each
key has a :class:`Share`: the cluster it goes to, the item put in that cluster's
request (a copy under the physical name for a remapped topic) and the item's key
in the futures that cluster answers with. :func:`fan_out` sends one request per
cluster, in the order the clusters first appear, and hands back one future per
key of the call, forwarding the cluster's future for it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from confluent_kafka import TopicPartition

from kbear._clients import renamed
from kbear._route import Route
from kbear.admin._futures import forward

#: sends ``items`` to the admin client of one cluster; answers its futures by key
Send = Callable[[Any, list[Any]], Mapping[Any, Future[Any]]]


@dataclass(frozen=True)
class Share:
    """One key's part of a call.

    Attributes:
        cluster: the cluster id it goes to.
        item: what goes into that cluster's request.
        key: the item's key in that cluster's futures (hashable).
        transform: applied to the cluster's result before the application sees
            it (renaming to the logical topic name), or None.
    """

    cluster: str
    item: Any
    key: Hashable
    transform: Callable[[Any], Any] | None = None


def fan_out(shares: Mapping[Any, Share], admin: Callable[[str], Any], send: Send) -> dict[Any, Future[Any]]:
    """One request per cluster, one future per key of ``shares``.

    Args:
        shares: application key -> its :class:`Share`, in the call's order.
        admin: cluster id -> that cluster's confluent-kafka ``AdminClient``.
        send: ``send(admin_client, items)`` makes the cluster's request (items in
            the order of ``shares``, each key once) and returns its futures by key.

    Raises:
        what ``send`` raises (TypeError, ValueError, KafkaException of
        confluent-kafka); requests already sent to other clusters stay sent.
    """
    per_cluster: dict[str, list[Any]] = {}
    keys: dict[str, set[Any]] = {}
    for share in shares.values():
        seen = keys.setdefault(share.cluster, set())
        if share.key not in seen:
            seen.add(share.key)
            per_cluster.setdefault(share.cluster, []).append(share.item)
    answers = {cluster: send(admin(cluster), items) for cluster, items in per_cluster.items()}
    return {key: forward(answers[s.cluster][s.key], s.transform) for key, s in shares.items()}


def rename_partitions(tps: list[TopicPartition] | None, names: Mapping[str, str]) -> list[TopicPartition]:
    """``tps`` with each topic found in ``names`` (physical -> logical) renamed;
    the others unchanged. A renamed copy loses its ``error`` (TopicPartition is
    immutable and takes no error)."""
    return [renamed(tp, names[tp.topic]) if tp.topic in names else tp for tp in tps or []]


def split_partitions(
    tps: Iterable[TopicPartition], routes: Mapping[str, Route]
) -> tuple[dict[str, list[TopicPartition]], dict[str, str]]:
    """``tps`` by the cluster of their topic's route (``routes``: topic -> route),
    under the physical names there; and physical -> logical name of each remapped
    topic, to rename the clusters' answers."""
    per_cluster: dict[str, list[TopicPartition]] = {}
    for tp in tps:
        route = routes[tp.topic]
        tp = renamed(tp, route.topic) if route.remapped else tp
        per_cluster.setdefault(route.cluster_id, []).append(tp)
    return per_cluster, {r.topic: t for t, r in routes.items() if r.remapped}
