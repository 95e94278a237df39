"""Where the routed admin client sends a name, and what a cluster's names are
called by the application (private).

- a topic goes where a producer lookup sends it (topic rules, global rules);
- a (group, topic) where a consumer lookup sends it (consumer-group rules too);
- a physical topic ``p`` of cluster ``c`` has the logical name ``l`` when the
  route of ``l`` (producer lookup, or consumer lookup for a group) is ``(c, p)``:
  ``p`` itself, or the topic of a rule ``use cluster c, topic p``; a physical
  topic no route names there has no logical name (it is not the application's).

No I/O: lookups in the router's configuration only.
"""

from __future__ import annotations

from collections.abc import Iterable

from kbear._base import no_route
from kbear._identity import Client
from kbear._route import NoRouteError, Route
from kbear.config import KBearConfig
from kbear.router import Router


def _remap_index(config: KBearConfig) -> dict[tuple[str, str], list[str]]:
    """(cluster, physical topic) -> the logical topics of rules remapping to it there."""
    index: dict[tuple[str, str], list[str]] = {}
    for rule in config.rules:
        statement = rule.statement
        logical = rule.meta.get("topic.id") or rule.meta.get("consumerGroup.topicId")
        if statement.topic is None or logical is None:
            continue
        names = index.setdefault((statement.cluster, statement.topic), [])
        if logical not in names:
            names.append(logical)
    return index


class Names:
    """Route lookups for one admin call, on the configuration in force when made.

    Args:
        router: the router to ask.
        client: who asks (``client.*`` factors).
        group: the consumer group of consumer lookups; None: producer lookups.
    """

    def __init__(self, router: Router, client: Client, group: str | None = None) -> None:
        self._router = router
        self._client = client
        self._group = group
        self._config = router.config
        self._remaps: dict[tuple[str, str], list[str]] | None = None

    def route(self, topic: str) -> Route:
        """The route of ``topic`` (logical name).

        Raises:
            NoRouteError: no rule routes it.
        """
        return self._router.route(topic, self._group, self._client)

    def routes(self, topics: Iterable[str]) -> dict[str, Route]:
        """The route of each topic.

        Raises:
            NoRouteError: naming every topic of ``topics`` that has no route.
        """
        found: dict[str, Route] = {}
        missing: list[str] = []
        for topic in topics:
            if topic in found or topic in missing:
                continue
            try:
                found[topic] = self.route(topic)
            except NoRouteError:
                missing.append(topic)
        if missing:
            raise no_route(self._client, missing, self._group)
        return found

    def logical(self, cluster_id: str, physical: str) -> str | None:
        """The logical name of topic ``physical`` of cluster ``cluster_id``, or None
        when no route of this lookup kind names it there."""
        if self._remaps is None:
            self._remaps = _remap_index(self._config)
        for candidate in (*self._remaps.get((cluster_id, physical), ()), physical):
            try:
                route = self.route(candidate)
            except NoRouteError:
                continue
            if route.cluster_id == cluster_id and route.topic == physical:
                return str(candidate)
        return None

    def clusters(self) -> list[str]:
        """Every cluster id of the configuration, in clusters.yaml order."""
        return list(self._config.clusters)

    def group_clusters(self, group: str) -> list[str]:
        """The clusters consumer lookups of ``group`` name for the topics the
        configuration knows for it (consumer-groups.yaml entries and consumer-group
        rules of that group), in clusters.yaml order; every cluster when it knows no
        topic of the group or a topic has no route."""
        topics = [topic for (name, topic) in self._config.consumer_groups if name == group]
        for rule in self._config.rules:
            if rule.meta.get("consumerGroup.groupName") == group:
                topic = rule.meta.get("consumerGroup.topicId")
                if topic is not None and topic not in topics:
                    topics.append(topic)
        if not topics:
            return self.clusters()
        named: set[str] = set()
        for topic in topics:
            try:
                named.add(self._router.route(topic, group, self._client).cluster_id)
            except NoRouteError:
                return self.clusters()
        return [c for c in self._config.clusters if c in named]
