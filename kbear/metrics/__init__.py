"""kbear's metrics: where the traffic goes, per cluster, as Prometheus metrics.

Needs the ``metrics`` extra (``pip install kbear[metrics]``: ``prometheus_client``).

Turn them on with :func:`instrument` (or the ``kbear.metrics.enable`` key of a
routed client), then expose them with :func:`serve` or the application's own
registry. Nothing is added to ``produce()`` or ``poll()`` per message: the
figures come from kbear's slow paths (reloads, route switches, drains, client
construction, read at scrape time) and from librdkafka's own statistics
(``statistics.interval.ms`` and ``stats_cb`` on each cluster's client).

Metric names (``_total`` is added to counters by the exposition format):

- routes: ``kbear_route_info`` (labels kind, client, group, topic, cluster,
  physical_topic, rule), ``kbear_route_changes_total``;
- drains: ``kbear_drains_started_total``, ``kbear_drains_finished_total``
  (outcome), ``kbear_drains_in_progress``, ``kbear_drain_duration_seconds``
  (histogram), ``kbear_switch_timeouts_total``;
- configuration: ``kbear_config_reloads_total`` (result applied/refused,
  reason), ``kbear_config_info`` (location, digest),
  ``kbear_config_seconds_since_reload``;
- librdkafka statistics per cluster client (labels client = ``client.id``,
  cluster, topic = logical name, physical_topic): ``kbear_producer_messages_total``,
  ``kbear_producer_transmitted_messages_total`` / ``_bytes_total``,
  ``kbear_producer_queued_messages``, ``kbear_producer_in_flight_messages`` /
  ``_bytes``, ``kbear_consumer_messages_total`` / ``_bytes_total`` (fetched),
  ``kbear_consumer_lag`` and ``kbear_consumer_committed_offset`` (per
  partition), ``kbear_rdkafka_reply_queue``, ``kbear_rdkafka_broker_rtt_seconds``
  (stat avg/p99), ``kbear_rdkafka_broker_queued_requests``,
  ``kbear_rdkafka_broker_requests_in_flight``, ``kbear_rdkafka_broker_errors_total``,
  ``kbear_rdkafka_broker_retries_total``, ``kbear_rdkafka_statistics_age_seconds``.
"""

from __future__ import annotations

import threading
from typing import Any

try:
    from prometheus_client import REGISTRY, CollectorRegistry, start_http_server
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "kbear.metrics needs prometheus_client: install the extra, pip install 'kbear[metrics]'"
    ) from exc

from kbear.metrics._collector import DRAIN_BUCKETS, KBearMetrics

__all__ = [
    "DEFAULT_STATS_INTERVAL_MS",
    "DRAIN_BUCKETS",
    "KBearMetrics",
    "instrument",
    "serve",
    "uninstrument",
]

#: ``statistics.interval.ms`` given to cluster clients whose configuration sets none (ms)
DEFAULT_STATS_INTERVAL_MS = 5000

_lock = threading.Lock()
_instances: dict[int, KBearMetrics] = {}


def instrument(
    registry: CollectorRegistry | None = None, *, stats_interval_ms: int = DEFAULT_STATS_INTERVAL_MS
) -> KBearMetrics:
    """Turn kbear's metrics on for the process, in ``registry``.

    Args:
        registry: the Prometheus registry (default: ``prometheus_client.REGISTRY``,
            the one :func:`serve` and most frameworks expose).
        stats_interval_ms: librdkafka's ``statistics.interval.ms`` (ms, > 0) for
            the cluster clients built from now on whose configuration does not
            set it (a client with ``kbear.failover.enable`` gets the shorter of
            this and its failover watch's 1000); an application's own
            ``statistics.interval.ms`` is kept (0: no statistics from that
            client), and its ``stats_cb`` called as confluent-kafka calls it
            (only if the application set ``statistics.interval.ms`` itself).

    Returns:
        The :class:`KBearMetrics` of ``registry``; calling again with the same
        registry returns it unchanged.

    Route, drain and reload metrics cover every routed client; librdkafka's
    statistics only the cluster clients built after this call.

    Raises:
        ValueError: ``stats_interval_ms`` <= 0.
    """
    if stats_interval_ms <= 0:
        raise ValueError(f"stats_interval_ms must be > 0, got {stats_interval_ms}")
    registry = REGISTRY if registry is None else registry
    with _lock:
        metrics = _instances.get(id(registry))
        if metrics is None:
            metrics = KBearMetrics(registry, stats_interval_ms)
            _instances[id(registry)] = metrics
        return metrics


def uninstrument(registry: CollectorRegistry | None = None) -> None:
    """Turn off what :func:`instrument` turned on for ``registry`` (default
    ``REGISTRY``); nothing if it was not on."""
    registry = REGISTRY if registry is None else registry
    with _lock:
        metrics = _instances.pop(id(registry), None)
    if metrics is not None:
        metrics.close()


def serve(port: int, addr: str = "127.0.0.1", registry: CollectorRegistry | None = None) -> Any:
    """Serve ``registry`` (default ``REGISTRY``, instrumented if it is not yet) over
    HTTP for Prometheus, from a daemon thread (``prometheus_client.start_http_server``).

    Args:
        port: TCP port; 0 picks a free one (``server.server_address[1]``).
        addr: the address to listen on (default loopback only).

    Returns:
        The HTTP server; ``server.shutdown()`` stops it.

    Raises:
        OSError: the port is taken.
    """
    registry = REGISTRY if registry is None else registry
    instrument(registry)
    server, _thread = start_http_server(port, addr=addr, registry=registry)
    return server
