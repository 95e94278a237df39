"""The group-addressed calls of RoutedAdminClient (private).

CRRL routes a consumer group per topic (consumer lookups of (group, topic)), so:

- offsets of named partitions go, per topic, to the cluster of the group's route
  for that topic (physical names there), and come back merged under the logical names;
- offsets of a whole group are read on every cluster and kept where the group's
  route of the topic names that cluster (a copy left on another cluster by a move
  is not the group's any more; ``cluster=`` reads one cluster as it is);
- a group as a whole (describe, delete) lives on the clusters its routes name for
  the topics the configuration knows for it (``Names.group_clusters``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future
from functools import partial
from typing import Any

from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from kbear.admin._checks import check_group_offsets
from kbear.admin._clusters import AdminClusters
from kbear.admin._futures import gather, settled
from kbear.admin._split import rename_partitions, split_partitions

Decide = Callable[[str, list[str], Sequence[Future[Any]]], Any]


class GroupCalls:
    """list/alter group offsets, describe and delete groups."""

    def __init__(self, clusters: AdminClusters) -> None:
        self._clusters = clusters

    def _offsets_call(
        self,
        request: ConsumerGroupTopicPartitions,
        cluster: str | None,
        send: Callable[[AdminClient, ConsumerGroupTopicPartitions], dict[str, Future[Any]]],
    ) -> dict[str, Future[Any]]:
        group = request.group_id
        target = self._clusters.target(cluster)
        if target is not None:
            return send(self._clusters.admin(target), request)
        names = self._clusters.names(group)
        if request.topic_partitions is None:  # the whole group: every cluster, kept where routed
            clusters = names.clusters()
            answers = [send(self._clusters.admin(c), request)[group] for c in clusters]

            def merge(results: list[Any]) -> ConsumerGroupTopicPartitions:
                merged = []
                for cluster_id, result in zip(clusters, results, strict=True):
                    tps = result.topic_partitions or []
                    logical = {
                        tp.topic: n for tp in tps if (n := names.logical(cluster_id, tp.topic)) is not None
                    }
                    merged += rename_partitions([tp for tp in tps if tp.topic in logical], logical)
                return ConsumerGroupTopicPartitions(group, merged)

            return {group: gather(answers, merge)}
        routes = names.routes(tp.topic for tp in request.topic_partitions)
        per_cluster, to_logical = split_partitions(request.topic_partitions, routes)
        answers = [
            send(self._clusters.admin(c), ConsumerGroupTopicPartitions(group, tps))[group]
            for c, tps in per_cluster.items()
        ]

        def join(results: list[Any]) -> ConsumerGroupTopicPartitions:
            merged = [
                tp for result in results for tp in rename_partitions(result.topic_partitions, to_logical)
            ]
            return ConsumerGroupTopicPartitions(group, merged)

        return {group: gather(answers, join)}

    def list_consumer_group_offsets(
        self,
        /,
        list_consumer_group_offsets_request: list[ConsumerGroupTopicPartitions],
        *,
        cluster: str | None = None,
        **kwargs: Any,
    ) -> dict[str, Future[Any]]:
        """Committed offsets of one group, as ``AdminClient.list_consumer_group_offsets``.

        With ``topic_partitions``: each topic is asked on the cluster of the group's
        route for it (consumer lookup), under its physical name. Without: every
        cluster is asked and a partition is kept when the group's route of its
        topic names that cluster (remapped topics under their logical names).

        Returns:
            ``{group_id: future}``; the future's result is one
            ``ConsumerGroupTopicPartitions`` holding every cluster's partitions, or
            the first cluster's ``KafkaException``.

        Raises:
            TypeError, ValueError: bad request (confluent-kafka's checks and words).
            NoRouteError: a topic has no route for the group; nothing is sent.

        librdkafka 2.16 (confluent-kafka 2.16) ends the process with SIGSEGV when a
        cluster answers this request with ``COORDINATOR_LOAD_IN_PROGRESS`` (a cluster
        that has just started or restarted), ``NOT_COORDINATOR`` or
        ``COORDINATOR_NOT_AVAILABLE``, with or without kbear: on such a cluster read
        committed offsets with a ``Consumer``'s ``committed()`` (``group.id`` set,
        never subscribed), as ``kbear move`` does.
        """
        check_group_offsets(list_consumer_group_offsets_request, altering=False)
        return self._offsets_call(
            list_consumer_group_offsets_request[0],  # confluent-kafka's checks allow one group per request
            cluster,
            lambda admin, request: admin.list_consumer_group_offsets([request], **kwargs),
        )

    def alter_consumer_group_offsets(
        self,
        /,
        alter_consumer_group_offsets_request: list[ConsumerGroupTopicPartitions],
        *,
        cluster: str | None = None,
        **kwargs: Any,
    ) -> dict[str, Future[Any]]:
        """Set a group's committed offsets, each topic on the cluster of the group's
        route for it, as ``AdminClient.alter_consumer_group_offsets``.

        Returns:
            ``{group_id: future}`` of one merged ``ConsumerGroupTopicPartitions``
            (logical names), or the first cluster's ``KafkaException``.

        Raises:
            TypeError, ValueError: bad request (confluent-kafka's checks and words).
            NoRouteError: a topic has no route for the group; nothing is sent.
        """
        check_group_offsets(alter_consumer_group_offsets_request, altering=True)
        return self._offsets_call(
            alter_consumer_group_offsets_request[0],
            cluster,
            lambda admin, request: admin.alter_consumer_group_offsets([request], **kwargs),
        )

    def _per_group(
        self, verb: str, group_ids: list[str], cluster: str | None, kwargs: dict[str, Any], decide: Decide
    ) -> dict[str, Future[Any]]:
        """``AdminClient.<verb>_consumer_groups`` on the clusters of each group (or
        ``cluster``), their answers ``decide``d per group."""
        if not isinstance(group_ids, list):
            raise TypeError(f"Expected input to be list of group ids to be {verb}d")
        if len(group_ids) == 0:
            raise ValueError(f"Expected at least one group to be {verb}d")

        def send(admin: AdminClient, groups: list[str]) -> dict[str, Future[Any]]:
            return getattr(admin, f"{verb}_consumer_groups")(groups, **kwargs)  # type: ignore[no-any-return]

        target = self._clusters.target(cluster)
        if target is not None:
            return send(self._clusters.admin(target), group_ids)
        names = self._clusters.names()
        homes = {g: names.group_clusters(g) for g in group_ids}
        asked: dict[str, list[str]] = {}
        for group, clusters in homes.items():
            for cluster_id in clusters:
                asked.setdefault(cluster_id, []).append(group)
        answers = {c: send(self._clusters.admin(c), groups) for c, groups in asked.items()}
        out: dict[str, Future[Any]] = {}
        for group, clusters in homes.items():
            futures = [answers[c][group] for c in clusters]
            out[group] = settled(futures, partial(decide, group, clusters))
        return out

    def describe_consumer_groups(
        self, /, group_ids: list[str], *, cluster: str | None = None, **kwargs: Any
    ) -> dict[str, Future[Any]]:
        """Describe groups, as ``AdminClient.describe_consumer_groups``.

        Each group is described on the clusters its routes name (all clusters when
        the configuration knows no topic of it); the future's result is the
        description from the first of them (clusters.yaml order) where the group
        has members, else where it exists (state not ``DEAD``), else the first
        one's. Member assignments of remapped topics carry the logical names.

        Raises:
            TypeError, ValueError: as confluent-kafka (not a list, empty list).
        """

        def decide(group: str, clusters: list[str], futures: Sequence[Future[Any]]) -> Any:
            failed = [f for f in futures if f.exception() is not None]
            if failed:
                raise failed[0].exception()  # type: ignore[misc]
            found = [(c, f.result()) for c, f in zip(clusters, futures, strict=True)]
            live = [p for p in found if p[1].members] or [
                p for p in found if p[1].state not in (ConsumerGroupState.DEAD, ConsumerGroupState.UNKNOWN)
            ]
            cluster_id, description = (live or found)[0]
            names = self._clusters.names(group)
            for member in description.members or []:
                for assignment in (member.assignment, getattr(member, "target_assignment", None)):
                    if assignment is None:
                        continue
                    logical = {
                        tp.topic: name
                        for tp in assignment.topic_partitions
                        if (name := names.logical(cluster_id, tp.topic)) not in (None, tp.topic)
                    }
                    assignment.topic_partitions = rename_partitions(assignment.topic_partitions, logical)
            return description

        return self._per_group("describe", group_ids, cluster, kwargs, decide)

    def delete_consumer_groups(
        self, /, group_ids: list[str], *, cluster: str | None = None, **kwargs: Any
    ) -> dict[str, Future[Any]]:
        """Delete groups on every cluster their routes name (all clusters when the
        configuration knows no topic of the group), as ``AdminClient.delete_consumer_groups``.

        Returns:
            group -> future whose result is None when every cluster deleted the group
            or did not have it (``GROUP_ID_NOT_FOUND``) and at least one deleted it;
            otherwise it raises the first cluster's ``KafkaException`` (so a group
            found nowhere raises ``GROUP_ID_NOT_FOUND``, as confluent-kafka).

        Raises:
            TypeError, ValueError: as confluent-kafka (not a list, empty list).
        """

        def decide(group: str, clusters: list[str], futures: Sequence[Future[Any]]) -> Any:
            errors = [f.exception() for f in futures]
            missing = [
                e
                for e in errors
                if isinstance(e, KafkaException) and e.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND
            ]
            others = [e for e in errors if e is not None and all(e is not m for m in missing)]
            if others:
                raise others[0]
            if len(missing) == len(errors):
                raise missing[0]
            return None

        return self._per_group("delete", group_ids, cluster, kwargs, decide)
