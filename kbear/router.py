"""The router: who is asking, for which topic (and group), gets which cluster.

The chain (``docs/reference/crrl-spec.md``, "The chain"):

- a producer lookup (client, topic) uses the topic rules of that topic and the
  global rules;
- a consumer lookup (client, group, topic) uses the consumer-group rules of
  (group, topic), the topic rules of that topic and the global rules;
- rules are ordered by priority descending, then consumer group > topic >
  global, then by order of appearance in ``route-rules.yaml`` (kbear's choice
  where the reference leaves the order undefined);
- the first rule whose statement matches yields the route; none is
  :class:`NoRouteError`.

Lookups never scan the whole configuration: rules are indexed by topic and by
(group, topic), and answers are cached per configuration snapshot
(:mod:`kbear._chain`; what a lookup answers is in :mod:`kbear._route`).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from types import MappingProxyType
from typing import TYPE_CHECKING

from kbear import _events
from kbear._chain import Snapshot
from kbear._identity import Client
from kbear._route import Explanation, MetaServiceUnavailable, NoRouteError, Route, RuleVerdict
from kbear._source import ConfigSource
from kbear.config import KBearConfig, load_config
from kbear.sources import DirectorySource, open_source

if TYPE_CHECKING:
    from kbear.reload import ConfigWatcher

# Client, Explanation, NoRouteError, Route and RuleVerdict are defined in
# kbear._identity and kbear._route; they stay importable from here for users
# (and from kbear). Nothing inside kbear imports them through this module.
__all__ = [
    "Client",
    "Explanation",
    "MetaServiceUnavailable",
    "NoRouteError",
    "Route",
    "Router",
    "RuleVerdict",
]

log = logging.getLogger("kbear.router")

_ANONYMOUS = Client()


RouteChangeListener = Callable[[KBearConfig, KBearConfig], None]


def _emit_failovers(old: KBearConfig, new: KBearConfig) -> None:
    """A :class:`~kbear._events.FailedOver` (trigger ``config``) per cluster whose
    ``kbear.failover.active`` changed between ``old`` and ``new``."""
    for cluster in new.clusters.values():
        before = old.clusters.get(cluster.id)
        was = before is not None and before.failover.active
        if cluster.failover.active != was and cluster.failover.standby is not None:
            _events.emit(_events.FailedOver("config", cluster.id, cluster.failover.standby, back=was))


class Router:
    """Answers route lookups from a :class:`~kbear.config.KBearConfig`.

    Args:
        config: a loaded configuration (see :func:`kbear.load_config`).
        source: where :meth:`reload` and :meth:`watch` read new configurations
            (:mod:`kbear.sources`); by default the directory ``config`` was read
            from, none for an in-memory configuration.

    Thread-safe: lookups read an immutable snapshot; :meth:`reload` swaps it.
    """

    def __init__(self, config: KBearConfig, source: ConfigSource | None = None) -> None:
        self._snapshot = Snapshot(config)
        self._listeners: list[RouteChangeListener] = []
        self._lock = threading.Lock()
        self._watcher: ConfigWatcher | None = None
        if source is None and config.directory is not None:
            source = DirectorySource(config.directory)
        self._source = source
        self._on_demand = source if source is not None and source.on_demand else None
        if self._on_demand is not None:
            # The source tells us when lookups taught it something new; we reload.
            self._on_demand.add_change_listener(self._source_changed)
        self._owns_source = False

    @classmethod
    def from_path(cls, path: str | os.PathLike[str]) -> Router:
        """A router over the configuration directory ``path``.

        Raises:
            ConfigError: the directory's configuration is invalid (every problem listed).
        """
        return cls(load_config(path))

    @classmethod
    def from_source(
        cls, source: str | os.PathLike[str] | ConfigSource, *, client: Client | None = None, **options: object
    ) -> Router:
        """A router over a configuration source: a directory, an ``http(s)://``
        meta-service URL, or a :class:`~kbear.sources.ConfigSource`
        (see :func:`kbear.sources.open_source`).

        Args:
            source: the directory, URL or source.
            client: who asks a meta-service; the service evaluates the chain for
                this client, so lookups with another client are refused (a
                directory ignores it).
            options: keyword arguments of :class:`kbear.meta.MetaServiceSource`.

        Raises:
            ConfigError: the configuration is invalid (every problem listed), or a
                meta-service is unreachable and no cached answer can stand in.
        """
        opened = open_source(source, client=client, **options)
        try:
            router = cls(opened.load(), opened)
        except BaseException:
            if opened is not source:
                opened.close()
            raise
        router._owns_source = opened is not source
        return router

    @property
    def source(self) -> ConfigSource | None:
        """Where :meth:`reload` and the watcher read new configurations, if anywhere."""
        return self._source

    @property
    def config(self) -> KBearConfig:
        """The configuration in force."""
        return self._snapshot.config

    def route(self, topic: str, group: str | None = None, client: Client | None = None) -> Route:
        """The route of ``topic``: a consumer lookup when ``group`` is given (its
        consumer-group rules, then topic rules, then global rules), else a producer
        lookup (topic rules, then global rules).

        Args:
            topic: the topic (logical name).
            group: the consumer group (``group.id``), or None for a producer.
            client: who asks; an anonymous client (no id, no meta) when None.

        Raises:
            NoRouteError: no rule matches (naming client, topic and group).
            MetaServiceUnavailable: (a NoRouteError) a meta-service source cannot be
                reached and has not answered this lookup before.
            ConfigError: a meta-service's answer for this new lookup was refused as
                invalid (an unset ``${NAME}``, a bad property): the same error as
                the same configuration read from a directory.
        """
        client = client or _ANONYMOUS
        on_demand = self._on_demand
        if on_demand is not None:
            on_demand.prepare(topic, group, client)
            if not on_demand.answers(topic, group, self._snapshot.config.digest):
                raise on_demand.unanswered(topic, group, client)
        route = self._snapshot.lookup(topic, group, client)
        if route is None:
            raise NoRouteError(client, topic, group)
        return route

    def route_producer(self, topic: str, client: Client | None = None) -> Route:
        """The route of a producer lookup: topic rules of ``topic``, then global rules.

        Args:
            topic: the topic the application produces to (logical name).
            client: who asks; an anonymous client (no id, no meta) when None.

        Returns:
            The :class:`Route` of the first matching rule of the chain.

        Raises:
            NoRouteError: no rule matches.
        """
        return self.route(topic, None, client)

    def route_consumer(self, topic: str, group: str, client: Client | None = None) -> Route:
        """The route of a consumer lookup: consumer-group rules of (group, topic),
        topic rules of ``topic``, then global rules.

        Args:
            topic: the topic the application consumes (logical name).
            group: the consumer group (``group.id``).
            client: who asks; an anonymous client when None.

        Raises:
            NoRouteError: no rule matches.
        """
        return self.route(topic, group, client)

    def explain_producer(self, topic: str, client: Client | None = None) -> Explanation:
        """The producer chain of ``topic`` with each rule's verdict (never raises
        NoRouteError). Over a meta-service, see :meth:`explain_consumer`."""
        return self._explain(topic, None, client)

    def explain_consumer(self, topic: str, group: str, client: Client | None = None) -> Explanation:
        """The consumer chain of (``group``, ``topic``) with each rule's verdict.

        Over a meta-service the chain is the service's: the rules it serves
        (``GET /route/rules/all``, read at each call) evaluated for this lookup; a
        service that does not serve them gives an explanation without a chain
        (``chain_unknown`` says why) whose route is the service's answer, never
        the rules kbear builds from its answers.

        Raises:
            ConfigError: over a meta-service, the service cannot be reached
                (:class:`~kbear.meta.ServiceUnreachableError`) or what it holds
                is invalid (an unset ``${NAME}`` included), as a directory's.
            MetaServiceUnavailable: the service stopped answering between the
                two requests (its rules, then the lookup).
        """
        return self._explain(topic, group, client)

    def _explain(self, topic: str, group: str | None, client: Client | None) -> Explanation:
        client = client or _ANONYMOUS
        source = self._on_demand
        if source is None:
            return self._snapshot.explain(topic, group, client)
        source.prepare(topic, group, client)
        served, why = source.chain_config()
        if served is not None:
            return Snapshot(served).explain(topic, group, client)
        if why is None:
            return self._snapshot.explain(topic, group, client)
        try:
            answered: Route | None = self.route(topic, group, client)
        except MetaServiceUnavailable:
            raise
        except NoRouteError:
            answered = None
        factors = self._snapshot.factors(topic, group, client)
        return Explanation(MappingProxyType(factors), (), 0, answered, f"cannot explain the chain: {why}")

    # ------------------------------------------------------------------ reload

    def subscribe(self, listener: RouteChangeListener) -> None:
        """Call ``listener(old_config, new_config)`` after each applied reload.

        Listeners run in the thread that reloads (the watcher's, or the caller
        of :meth:`reload`); they must be quick and must not raise (exceptions
        are logged and ignored).
        """
        with self._lock:
            self._listeners.append(listener)

    def unsubscribe(self, listener: RouteChangeListener) -> None:
        """Stop calling ``listener``; unknown listeners are ignored."""
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def reload(self) -> bool:
        """Re-read the configuration source (directory, meta-service) and apply it if it changed.

        Returns:
            True when a new configuration was applied, False when the source is
            unchanged (same content digest).

        Raises:
            ConfigError: the new configuration is invalid, or the source cannot
                be read (a meta-service unreachable); the old one stays in force.
            RuntimeError: the router was built from an in-memory configuration
                without a source.
        """
        source = self._source
        if source is None:
            raise RuntimeError("this Router has no configuration directory to reload")
        if source.digest() == self.config.digest:
            return False  # unchanged files: not even parsed (the Spark source reloads per batch)
        return self.apply(source.load())

    def _source_changed(self) -> None:
        # An on-demand source learned new lookups: what it now answers is read
        # like any change (ConfigError reaches the source, which logs it).
        self.reload()

    def apply(self, new: KBearConfig) -> bool:
        """Put ``new`` in force and notify listeners; False if its digest equals the current one."""
        with self._lock:
            old = self._snapshot.config
            if new.digest == old.digest and new.directory == old.directory:
                return False
            self._snapshot = Snapshot(new)
            listeners = list(self._listeners)
        log.info("kbear configuration reloaded from %s", new.directory or new.location)
        _events.emit(_events.ReloadApplied(_events.location(new.directory or new.location), new.digest))
        _emit_failovers(old, new)
        _events.call_each(log, "kbear route change listener %r failed", listeners, old, new)
        return True

    def watch(self, interval_s: float = 10.0) -> ConfigWatcher:
        """Start (once) a background watcher that reloads on change.

        Args:
            interval_s: seconds between checks of the source (the files' content
                digest, or one refresh from a meta-service).

        Returns:
            The running :class:`~kbear.reload.ConfigWatcher`; calling again returns it
            (with the interval it was started with).

        Raises:
            RuntimeError: the router was built from an in-memory configuration.
            ValueError: ``interval_s`` <= 0.
        """
        from kbear.reload import ConfigWatcher

        with self._lock:
            if self._watcher is None or not self._watcher.running:
                if self._source is None:
                    raise RuntimeError("this Router has no configuration directory to watch")
                self._watcher = ConfigWatcher(self, self._source, interval_s)
                self._watcher.start()
            return self._watcher

    def close(self) -> None:
        """Stop the watcher, if any, and close the source :meth:`from_source`
        opened from a directory or URL (a source passed in stays open)."""
        with self._lock:
            watcher, self._watcher = self._watcher, None
        if watcher is not None:
            watcher.stop()
        if self._on_demand is not None:
            self._on_demand.remove_change_listener(self._source_changed)
        if self._owns_source and self._source is not None:
            self._source.close()
