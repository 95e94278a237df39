"""The topic-addressed calls of RoutedAdminClient (private): each topic goes to the
cluster of its producer route under its physical name; the futures come back under
the names the application used.

Every method takes ``cluster=``: the names are then sent to that cluster as they
are (physical names, no routing), which is how an operator addresses a copy of a
topic on a cluster its route does not name (``kbear move`` does).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any

from confluent_kafka import TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic, ResourceType

from kbear._clients import renamed
from kbear._route import Route
from kbear.admin._checks import check_delete_records, check_list_offsets, offset_spec_value
from kbear.admin._clusters import AdminClusters
from kbear.admin._split import Send, Share, fan_out


def _new_topic(spec: NewTopic, topic: str) -> NewTopic:
    extra: dict[str, Any] = {}
    if spec.replica_assignment is not None:
        extra["replica_assignment"] = spec.replica_assignment
    if spec.config:
        extra["config"] = dict(spec.config)
    return NewTopic(topic, spec.num_partitions, spec.replication_factor, **extra)


def _new_partitions(spec: NewPartitions, topic: str) -> NewPartitions:
    if spec.replica_assignment is not None:
        return NewPartitions(topic, spec.new_total_count, spec.replica_assignment)
    return NewPartitions(topic, spec.new_total_count)


def _config_resource(resource: ConfigResource, name: str) -> ConfigResource:
    return ConfigResource(
        resource.restype,
        name,
        set_config=resource.set_config_dict or None,
        incremental_configs=resource.incremental_configs or None,
    )


def _topic_of(item: Any) -> str:
    return str(item.topic)


def _same(_item: Any, physical: str) -> str:
    """A name-keyed call's item and key on a cluster: the physical name itself."""
    return physical


def _renaming(_topic: Any, name: str) -> Callable[[Any], Any]:
    """Sets ``.name`` of a TopicDescription to the logical name."""

    def rename(description: Any) -> Any:
        description.name = name
        return description

    return rename


def _check_list(value: Any, what: str) -> None:
    if not isinstance(value, list):
        raise TypeError(f"argument 1 must be list, not {type(value).__name__}")
    if not value:
        raise ValueError(f"Expected non-empty list of {what}")


class TopicCalls:
    """create/delete topics, partitions, describe topics, configs, offsets, records."""

    def __init__(self, clusters: AdminClusters) -> None:
        self._clusters = clusters

    def _shares(
        self,
        items: Mapping[Any, Any],
        topic_of: Callable[[Any], str],
        copy: Callable[[Any, str], Any],
        key_of: Callable[[Any, str], Any],
        cluster: str | None,
        transform: Callable[[Any, str], Callable[[Any], Any] | None] | None = None,
    ) -> dict[Any, Share]:
        """A :class:`Share` per key of ``items`` (key -> item): the item's topic
        routed (or ``cluster``), the item copied under the physical name when remapped."""
        target = self._clusters.target(cluster)
        routes: dict[str, Route] = {}
        if target is None:
            routes = self._clusters.names().routes(topic_of(item) for item in items.values())
        shares: dict[Any, Share] = {}
        for key, item in items.items():
            topic = topic_of(item)
            if target is not None:
                shares[key] = Share(target, item, key_of(item, topic))
                continue
            route = routes[topic]
            physical = route.topic
            shaped = copy(item, physical) if route.remapped else item
            after = transform(item, topic) if transform is not None and route.remapped else None
            shares[key] = Share(route.cluster_id, shaped, key_of(shaped, physical), after)
        return shares

    def _fan_out(self, shares: dict[Any, Share], cluster: str | None, send: Send) -> dict[Any, Future[Any]]:
        """:func:`fan_out`; an empty request goes to one cluster's client as it is
        (confluent-kafka checks its keyword arguments and answers ``{}``)."""
        if not shares:
            return dict(send(self._clusters.admin(self._clusters.cluster_wide(cluster)[0]), []))
        return fan_out(shares, self._clusters.admin, send)

    def create_topics(
        self, /, new_topics: list[NewTopic], *, cluster: str | None = None, **kwargs: Any
    ) -> dict[str, Future[Any]]:
        """Create topics, each on the cluster of its route (``AdminClient.create_topics``).

        Args:
            new_topics: ``NewTopic`` specifications under the application's (logical)
                names; a remapped topic is created under its physical name.
            cluster: send every topic to this cluster as named (no routing).
            **kwargs: ``operation_timeout``, ``request_timeout`` (seconds),
                ``validate_only``, as confluent-kafka.

        Returns:
            topic (as given) -> future whose ``result()`` is None, or raises
            ``KafkaException`` (e.g. ``TOPIC_ALREADY_EXISTS``).

        Raises:
            NoRouteError: a topic has no route (every such topic named); nothing is sent.
            ValueError: ``cluster`` is not in clusters.yaml; empty list.
            TypeError, KafkaException: as confluent-kafka.
        """
        topics = [x.topic for x in new_topics]
        _check_list(new_topics, "NewTopic objects")
        specs = dict(zip(topics, new_topics, strict=True))
        shares = self._shares(specs, _topic_of, _new_topic, _same, cluster)
        return fan_out(shares, self._clusters.admin, lambda a, items: a.create_topics(items, **kwargs))

    def delete_topics(
        self, /, topics: list[str], *, cluster: str | None = None, **kwargs: Any
    ) -> dict[str, Future[Any]]:
        """Delete topics on the clusters of their routes (physical names), as
        ``AdminClient.delete_topics``; futures keyed by the names given, results None.

        Raises:
            NoRouteError, ValueError, TypeError, KafkaException: as :meth:`create_topics`.
        """
        _check_list(topics, "topic strings")
        shares = self._shares({t: t for t in topics}, str, _same, _same, cluster)
        return fan_out(shares, self._clusters.admin, lambda a, items: a.delete_topics(items, **kwargs))

    def create_partitions(
        self, /, new_partitions: list[NewPartitions], *, cluster: str | None = None, **kwargs: Any
    ) -> dict[str, Future[Any]]:
        """Add partitions to topics on the clusters of their routes, as
        ``AdminClient.create_partitions``; futures keyed by the names given, results None.

        Raises:
            NoRouteError, ValueError, TypeError, KafkaException: as :meth:`create_topics`.
        """
        topics = [x.topic for x in new_partitions]
        _check_list(new_partitions, "NewPartitions objects")
        specs = dict(zip(topics, new_partitions, strict=True))
        shares = self._shares(specs, _topic_of, _new_partitions, _same, cluster)
        return fan_out(shares, self._clusters.admin, lambda a, items: a.create_partitions(items, **kwargs))

    def describe_topics(
        self, /, topics: TopicCollection, *, cluster: str | None = None, **kwargs: Any
    ) -> dict[str, Future[Any]]:
        """Describe topics on the clusters of their routes, as ``AdminClient.describe_topics``.

        Returns:
            topic (as given) -> future of a ``TopicDescription`` whose ``name`` is
            the name given (the logical name of a remapped topic).

        Raises:
            TypeError: ``topics`` is not a ``TopicCollection`` of names (confluent-kafka's words).
            NoRouteError, ValueError, KafkaException: as :meth:`create_topics`.
        """
        if not isinstance(topics, TopicCollection):
            raise TypeError("Expected input to be instance of TopicCollection")
        names = topics.topic_names
        if not isinstance(names, list):
            raise TypeError("Expected list of topic names to be described")
        for name in names:
            if not isinstance(name, str):
                raise TypeError(f"Expected list of topics strings, not {type(name).__name__}")
        shares = self._shares({t: t for t in names}, str, _same, _same, cluster, _renaming)
        return self._fan_out(
            shares, cluster, lambda a, items: a.describe_topics(TopicCollection(items), **kwargs)
        )

    def _config_shares(self, resources: list[ConfigResource], cluster: str | None) -> dict[Any, Share]:
        _check_list(resources, "ConfigResource objects")
        for resource in resources:
            if not isinstance(resource, ConfigResource):
                raise ValueError(f"Expected list of {ConfigResource!r}")
        target = self._clusters.target(cluster)
        topics = {r: r for r in resources if r.restype == ResourceType.TOPIC}
        if target is None and len(topics) < len(resources):
            clusters = self._clusters.cluster_wide(None)
            if len(clusters) > 1:
                kinds = sorted({str(r.restype) for r in resources if r.restype != ResourceType.TOPIC})
                raise ValueError(
                    f"RoutedAdminClient: {', '.join(kinds)} resources are not routed: pass cluster= "
                    "(the routes of this client name several clusters)"
                )
            target = clusters[0]
        if target is not None:
            return {r: Share(target, r, _config_key(r, r.name)) for r in resources}
        return self._shares(topics, lambda r: str(r.name), _config_resource, _config_key, None)

    def describe_configs(
        self, /, resources: list[ConfigResource], *, cluster: str | None = None, **kwargs: Any
    ) -> dict[ConfigResource, Future[Any]]:
        """Describe configurations, as ``AdminClient.describe_configs``: a topic
        resource goes to the cluster of the topic's route (physical name); other
        resource types (broker, group) need ``cluster=`` unless the client's routes
        name one cluster only.

        Returns:
            resource (as given) -> future of ``dict(name -> ConfigEntry)``.

        Raises:
            ValueError: a non-topic resource without ``cluster=``; as confluent-kafka.
            NoRouteError, TypeError, KafkaException: as :meth:`create_topics`.
        """
        shares = self._config_shares(resources, cluster)
        return fan_out(shares, self._clusters.admin, lambda a, items: a.describe_configs(items, **kwargs))

    def incremental_alter_configs(
        self, /, resources: list[ConfigResource], *, cluster: str | None = None, **kwargs: Any
    ) -> dict[ConfigResource, Future[Any]]:
        """Alter configurations incrementally, routed as :meth:`describe_configs`
        (``AdminClient.incremental_alter_configs``); results None."""
        shares = self._config_shares(resources, cluster)
        admin = self._clusters.admin
        return fan_out(shares, admin, lambda a, items: a.incremental_alter_configs(items, **kwargs))

    def alter_configs(
        self, /, resources: list[ConfigResource], *, cluster: str | None = None, **kwargs: Any
    ) -> dict[ConfigResource, Future[Any]]:
        """Deprecated (as in confluent-kafka 2.2): replace configurations, routed as
        :meth:`describe_configs`; warns ``DeprecationWarning`` like confluent-kafka."""
        warnings.warn(
            "alter_configs has been deprecated. Use incremental_alter_configs instead.",
            category=DeprecationWarning,
            stacklevel=2,
        )
        shares = self._config_shares(resources, cluster)

        def send(admin: AdminClient, items: list[Any]) -> Mapping[Any, Future[Any]]:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                return admin.alter_configs(items, **kwargs)

        return fan_out(shares, self._clusters.admin, send)

    def list_offsets(
        self,
        /,
        topic_partition_offsets: dict[TopicPartition, Any],
        *,
        cluster: str | None = None,
        **kwargs: Any,
    ) -> dict[TopicPartition, Future[Any]]:
        """Offsets by ``OffsetSpec`` (earliest, latest, max timestamp, timestamp),
        each partition asked on the cluster of its topic's route, as ``AdminClient.list_offsets``.

        Returns:
            ``TopicPartition(topic as given, partition, spec value)`` -> future of
            ``ListOffsetsResultInfo`` (offset, timestamp, leader_epoch).

        Raises:
            TypeError, ValueError: bad input (confluent-kafka's checks and words).
            NoRouteError, KafkaException: as :meth:`create_topics`.
        """
        check_list_offsets(topic_partition_offsets, kwargs)
        keyed = {
            TopicPartition(tp.topic, int(tp.partition), offset_spec_value(spec)): (tp, spec)
            for tp, spec in topic_partition_offsets.items()
        }
        shares = self._shares(
            keyed,
            lambda pair: str(pair[0].topic),
            lambda pair, topic: (renamed(pair[0], topic), pair[1]),
            lambda pair, topic: TopicPartition(topic, pair[0].partition),
            cluster,
        )
        return self._fan_out(shares, cluster, lambda a, items: a.list_offsets(dict(items), **kwargs))

    def delete_records(
        self, /, topic_partition_offsets: list[TopicPartition], *, cluster: str | None = None, **kwargs: Any
    ) -> dict[TopicPartition, Future[Any]]:
        """Delete records before the given offsets, each partition on the cluster
        of its topic's route, as ``AdminClient.delete_records``.

        Returns:
            each ``TopicPartition`` given -> future of ``DeletedRecords``.

        Raises:
            TypeError, ValueError: bad input (confluent-kafka's checks and words).
            NoRouteError, KafkaException: as :meth:`create_topics`.
        """
        check_delete_records(topic_partition_offsets)
        shares = self._shares(
            {tp: tp for tp in topic_partition_offsets},
            _topic_of,
            renamed,
            lambda tp, topic: TopicPartition(topic, tp.partition),
            cluster,
        )
        return self._fan_out(shares, cluster, lambda a, items: a.delete_records(items, **kwargs))


def _config_key(resource: Any, name: str) -> ConfigResource:
    return ConfigResource(resource.restype, name)
