"""KBearMetrics: kbear's events and librdkafka's statistics as Prometheus metrics (private).

Responsible for: following :mod:`kbear._events` (route changes, drains, reloads:
counters and a histogram updated as they happen), giving each cluster client a
statistics callback (:mod:`kbear.metrics._stats`), and, at scrape time, reading
the routes in use and the configuration in force of the live routed clients
(an info metric each) and the clients' latest statistics.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from functools import partial

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.registry import Collector

from kbear import _events
from kbear._route import Route
from kbear.metrics._stats import StatsStore, families

#: drain duration buckets (seconds): drains last from a flush (ms) to
#: ``kbear.switch.drain.timeout.ms`` (30 s by default) and beyond
DRAIN_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
#: meta-service request duration buckets (seconds), up to kbear.meta.timeout.ms's range
META_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class KBearMetrics(Collector):
    """kbear's metrics in one Prometheus registry; build it with :func:`kbear.metrics.instrument`.

    Args:
        registry: where the metrics are registered.
        stats_interval_ms: ``statistics.interval.ms`` given to cluster clients
            whose configuration does not set it (ms).
    """

    def __init__(self, registry: CollectorRegistry, stats_interval_ms: int) -> None:
        self.registry = registry
        self.stats = StatsStore(stats_interval_ms)
        self._lock = threading.Lock()
        #: (kind, client id, cluster, physical topic) -> logical topic, of every route seen
        self._names: dict[tuple[str, str, str, str], str] = {}
        #: location -> (digest, wall time) of the last configuration applied there
        self._applied: dict[str, tuple[str, float]] = {}
        #: location -> wall time kbear's metrics first saw a configuration from there
        self._first_seen: dict[str, float] = {}
        self._producer_drains = 0
        counter = partial(Counter, registry=registry)
        self.route_changes = counter(
            "kbear_route_changes",
            "Topics that switched clusters (or lost their route) after a reload",
            ["kind", "client", "topic", "old_cluster", "new_cluster"],
        )
        self.drains_started = counter(
            "kbear_drains_started",
            "Drains begun before a topic moves "
            "(producer: a flush; consumer, spark: reading the old cluster out)",
            ["kind", "topic", "cluster"],
        )
        self.drains_finished = counter(
            "kbear_drains_finished",
            "Drains ended, complete or timed out (kbear.switch.drain.timeout.ms)",
            ["kind", "topic", "cluster", "outcome"],
        )
        self.drain_messages = counter(
            "kbear_drain_messages",
            "Messages a consumer read from the old cluster during its drains",
            ["kind", "topic", "cluster"],
        )
        self.switch_timeouts = counter(
            "kbear_switch_timeouts",
            "Switches made when kbear.switch.drain.timeout.ms ran out, before the drain was complete",
            ["kind", "topic", "cluster"],
        )
        self.drain_seconds = Histogram(
            "kbear_drain_duration_seconds",
            "How long drains took, in seconds",
            ["kind", "cluster"],
            buckets=DRAIN_BUCKETS,
            registry=registry,
        )
        self.messages_resent = counter(
            "kbear_messages_resent",
            "Messages a producer took back from a dead cluster's client and sent along the "
            "routes now (reason: queued; in_flight: sent again, at-least-once; failed: could "
            "not be re-sent, reported failed)",
            ["kind", "cluster", "reason"],
        )
        self.clusters_lost = counter(
            "kbear_clusters_lost",
            "Clusters declared lost by the lost-cluster policy (no broker reachable for "
            "kbear.failover.after.ms), by observer (producer, consumer, serve)",
            ["observer", "cluster"],
        )
        self.clusters_unanswered = counter(
            "kbear_clusters_unanswered",
            "Micro-batches of the Spark kbear source planned without a cluster that did not "
            "answer (its topics got no new offsets), by kind and cluster",
            ["kind", "cluster"],
        )
        self.clusters_recovered = counter(
            "kbear_clusters_recovered",
            "Lost clusters reachable again for as long (the policy's hysteresis), by observer",
            ["observer", "cluster"],
        )
        self.failovers = counter(
            "kbear_failovers",
            "Routes to a cluster sent to its standby (direction: over) or back (direction: back), "
            "by trigger (client, config, serve)",
            ["trigger", "cluster", "standby", "direction"],
        )
        self.mirrored_starts = counter(
            "kbear_mirrored_starts",
            "Partitions a consumer group started on a cluster after a move from a mirrored "
            "cluster (kbear.switch.start=translated, or a failover): start translated (from a "
            "MirrorMaker 2 checkpoint or offset sync, or an identical mirror's offsets) or "
            "fallback (the group's committed offsets there, else auto.offset.reset)",
            ["kind", "cluster", "topic", "source", "start", "decided_by"],
        )
        self.cluster_errors = counter(
            "kbear_cluster_errors",
            "Errors librdkafka reported to the error_cb of a routed client's cluster client "
            "(connections refused, brokers down...), by client kind, cluster and error name: every "
            "one, while kbear's log writes the first of an outage, then a summary a minute",
            ["kind", "cluster", "error"],
        )
        self.cluster_id_mismatches = counter(
            "kbear_cluster_id_mismatches",
            "Clusters refused because their brokers reported another cluster id than "
            "kbear.cluster.id in clusters.yaml, by client kind",
            ["kind", "cluster"],
        )
        self.reloads = counter(
            "kbear_config_reloads",
            "Configuration changes applied, or refused (the last good configuration stays)",
            ["result", "reason", "location"],
        )
        self.meta_requests = counter(
            "kbear_meta_requests",
            "HTTP requests to a meta-service, by outcome (ok, unavailable: retried, refused)",
            ["location", "path", "outcome"],
        )
        self.meta_seconds = Histogram(
            "kbear_meta_request_duration_seconds",
            "How long meta-service requests took, in seconds (failed ones too)",
            ["location", "path"],
            buckets=META_BUCKETS,
            registry=registry,
        )
        # the meta-services asked: whether each was reachable at its last refresh, for how
        # long it has not been, and the age of its last good answer (read at scrape time)
        gauge = partial(Gauge, labelnames=["location"], registry=registry)
        self.meta_up = gauge(
            "kbear_meta_service_up",
            "1 when the last refresh reached the meta-service, 0 when it could not be reached",
        )
        self.meta_unreachable = gauge(
            "kbear_meta_service_unreachable_seconds",
            "Seconds since the meta-service was first found unreachable (0 while reachable)",
        )
        self.meta_answer_age = gauge(
            "kbear_meta_last_answer_age_seconds",
            "Seconds since the last good answer of the meta-service (a cached one's save time)",
        )
        registry.register(self)
        _events.subscribe(self.on_event, self.stats.configure, self.stats.build)

    def close(self) -> None:
        """Stop following kbear's events and unregister from the registry (clients
        built from now on get no statistics callback)."""
        _events.unsubscribe(self.on_event, self.stats.configure, self.stats.build)
        for metric in (self, *(m for m in vars(self).values() if isinstance(m, MetricWrapperBase))):
            self.registry.unregister(metric)

    # ------------------------------------------------------------------ events

    def on_event(self, event: _events.Event) -> None:
        """Count ``event`` (called by :mod:`kbear._events`, in the slow path's thread)."""
        if isinstance(event, _events.RouteChanged):
            self._remember(event.kind, event.client_id, event.old)
            if event.new is not None:
                self._remember(event.kind, event.client_id, event.new)
            new = "" if event.new is None else event.new.cluster_id
            self.route_changes.labels(
                event.kind, event.client_id, event.topic, event.old.cluster_id, new
            ).inc()
        elif isinstance(event, _events.DrainStarted):
            self.drains_started.labels(event.kind, event.topic, event.cluster).inc()
            self.switch_timeouts.labels(event.kind, event.topic, event.cluster)  # a series at 0
            if event.kind == "producer":
                with self._lock:
                    self._producer_drains += 1
        elif isinstance(event, _events.DrainFinished):
            outcome = "timed_out" if event.timed_out else "complete"
            self.drains_finished.labels(event.kind, event.topic, event.cluster, outcome).inc()
            self.drain_seconds.labels(event.kind, event.cluster).observe(event.duration_s)
            if event.kind == "consumer":
                self.drain_messages.labels(event.kind, event.topic, event.cluster).inc(event.messages)
            if event.timed_out:
                self.switch_timeouts.labels(event.kind, event.topic, event.cluster).inc()
            if event.kind == "producer":
                with self._lock:
                    self._producer_drains -= 1
        elif isinstance(event, _events.MessagesResent):
            for reason, count in (
                ("queued", event.queued),
                ("in_flight", event.in_flight),
                ("failed", event.failed),
            ):
                if count:
                    self.messages_resent.labels(event.kind, event.cluster, reason).inc(count)
        elif isinstance(event, _events.ClusterHealthChanged):
            (self.clusters_lost if event.lost else self.clusters_recovered).labels(
                event.observer, event.cluster
            ).inc()
            if event.lost:  # a series at 0: recovered, not yet
                self.clusters_recovered.labels(event.observer, event.cluster)
        elif isinstance(event, _events.ClusterUnanswered):
            self.clusters_unanswered.labels(event.kind, event.cluster).inc()
        elif isinstance(event, _events.ClusterError):
            self.cluster_errors.labels(event.kind, event.cluster, event.error).inc()
        elif isinstance(event, _events.ClusterIdMismatch):
            self.cluster_id_mismatches.labels(event.kind, event.cluster).inc()
        elif isinstance(event, _events.FailedOver):
            direction = "back" if event.back else "over"
            self.failovers.labels(event.trigger, event.cluster, event.standby, direction).inc()
            if not event.back:  # a series at 0: failed back, not yet
                self.failovers.labels(event.trigger, event.cluster, event.standby, "back")
        elif isinstance(event, _events.MirroredStart):
            start = "translated" if event.translated else "fallback"
            self.mirrored_starts.labels(
                event.kind, event.cluster, event.topic, event.source, start, event.decided_by
            ).inc(event.partitions)
        elif isinstance(event, _events.ReloadApplied):
            self.reloads.labels("applied", "", event.location).inc()
            with self._lock:
                self._applied[event.location] = (event.digest, event.at)
        elif isinstance(event, _events.ReloadRefused):
            self.reloads.labels("refused", event.reason, event.location).inc()
        elif isinstance(event, _events.MetaRequest):
            self.meta_requests.labels(event.location, event.path, event.outcome).inc()
            self.meta_seconds.labels(event.location, event.path).observe(event.duration_s)
        elif isinstance(event, _events.MetaServiceState):
            where, down, answer_at = event.location, event.down_since, event.answer_at
            self.meta_up.labels(where).set(1 if down is None else 0)
            self.meta_unreachable.labels(where).set_function(lambda: 0.0 if down is None else _since(down))
            if answer_at is not None:
                self.meta_answer_age.labels(where).set_function(lambda: _since(answer_at))

    def _remember(self, kind: str, client_id: str, route: Route) -> None:
        with self._lock:
            self._names[(kind, client_id, route.cluster_id, route.topic)] = route.requested_topic

    # ------------------------------------------------------------------ scrape

    def collect(self) -> Iterator[Metric]:
        """The scrape-time families: routes in use, drains in progress, configuration
        in force, librdkafka statistics (called by the registry)."""
        info = GaugeMetricFamily(
            "kbear_route_info",
            "The route each routed client uses for a topic: cluster, physical topic, rule id (value 1)",
            labels=["kind", "client", "group", "topic", "cluster", "physical_topic", "rule"],
        )
        draining = GaugeMetricFamily("kbear_drains_in_progress", "Drains in progress", labels=["kind"])
        config = GaugeMetricFamily(
            "kbear_config_info",
            "The configuration in force: its location and content digest (value 1)",
            labels=["location", "digest"],
        )
        age = GaugeMetricFamily(
            "kbear_config_seconds_since_reload",
            "Seconds since the last configuration change was applied (or since kbear's metrics "
            "first saw the configuration, when none was applied since)",
            labels=["location"],
        )
        consumer_drains = 0
        configs: dict[str, str] = {}
        for snap in _snapshots():
            for topic, route in snap.routes.items():
                self._remember(snap.kind, snap.client_id, route)
                labels = [snap.kind, snap.client_id, snap.group, topic, route.cluster_id, route.topic]
                info.add_metric([*labels, route.rule_id], 1)
            consumer_drains += snap.drains
            configs[snap.config_location] = snap.config_digest
        now = time.time()
        with self._lock:
            producer_drains = self._producer_drains
            names = dict(self._names)
            for location in configs:
                self._first_seen.setdefault(location, now)
            applied = dict(self._applied)
            first_seen = dict(self._first_seen)
        draining.add_metric(["producer"], producer_drains)
        draining.add_metric(["consumer"], consumer_drains)
        for location, digest in configs.items():
            config.add_metric([location, digest], 1)
            last = applied.get(location)
            since = last[1] if last is not None and last[0] == digest else first_seen[location]
            age.add_metric([location], max(0.0, now - since))
        yield from (info, draining, config, age)
        yield from families(self.stats, names)


def _since(at: float) -> float:
    """Seconds from ``at`` (``time.time()``) to now, never negative."""
    return max(0.0, time.time() - at)


def _snapshots() -> Iterator[_events.ClientSnapshot]:
    """The snapshot of every live routed client (taken from another thread: one whose
    tables changed during the copy is asked again, a few times at most)."""
    for client in _events.open_clients():
        for _ in range(5):
            try:
                snapshot = client.snapshot()
            except RuntimeError:  # changed during the copy
                continue
            if snapshot is not None:
                yield snapshot
            break
