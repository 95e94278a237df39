"""librdkafka's statistics, per cluster client, as metric samples (private).

Responsible for: the ``stats_cb`` kbear gives each cluster's confluent-kafka
client (it chains the application's own callback), and turning the latest
statistics of every client into samples labelled by client id, cluster and
topic. The callback runs in ``poll()`` once per ``statistics.interval.ms`` (not
per message): it parses the JSON and adds the per-partition counters up, so a
partition that leaves the client (a topic moved away, a revocation) keeps
counting what it did.

Which librdkafka fields (``STATISTICS.md`` of librdkafka) feed which figure is
written beside each family in :func:`families`.
"""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from kbear._events import client_id
from kbear.metrics._delivered import CountingConsumer, Delivered

#: at most this many clients' statistics are kept (the oldest are dropped)
MAX_CLIENTS = 1000
#: gauges (lag, queues, in-flight) of a client whose statistics are older than this
#: many intervals are no longer exported (a closed client's last figures)
STALE_INTERVALS = 3
#: nor older than this (seconds), whatever the interval
STALE_MIN_S = 10.0

#: (kind, client id, cluster, physical topic) -> logical topic
Names = Mapping[tuple[str, str, str, str], str]
_Sums = defaultdict[tuple[str, tuple[str, ...]], float]


#: the per-partition counters kept: librdkafka field names
_COUNTERS = ("msgs", "txmsgs", "txbytes", "rxmsgs", "rxbytes")


@dataclass(slots=True, eq=False, repr=False)  # no statistics in a logged configuration
class _Slot:
    """The latest statistics of one cluster client, and its per-partition counters."""

    kind: str
    cluster: str
    client_id: str
    interval_s: float
    stats: dict[str, Any] | None = None
    at: float = 0.0
    #: (physical topic, partition, field) -> [counted before a restart, last value]
    counters: dict[tuple[str, str, str], list[float]] = field(default_factory=dict)
    #: broker name -> (avg, p99) round-trip time in µs of the last interval that had one
    rtt: dict[str, tuple[float, float]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: consumer: messages poll()/consume() handed out, by physical topic (None: not counted)
    delivered: Delivered | None = None
    #: the application's own ``stats_cb``, called after kbear's (None: none, or statistics off)
    user_cb: Callable[[str], None] | None = None

    def __call__(self, text: str) -> None:
        """The ``stats_cb`` given to the cluster client: :meth:`update`, then the
        application's callback."""
        self.update(text)
        if self.user_cb is not None:
            self.user_cb(text)

    def update(self, text: str) -> None:
        """Take the statistics JSON ``text``; unparsable text is ignored."""
        try:
            stats = json.loads(text)
        except ValueError:
            return
        with self.lock:
            counters = self.counters
            for physical, topic in (stats.get("topics") or {}).items():
                for pid, part in (topic.get("partitions") or {}).items():
                    for name in _COUNTERS:
                        value = _num(part.get(name))
                        kept = counters.setdefault((physical, pid, name), [0.0, value])
                        if value < kept[1]:  # the partition's counters restarted
                            kept[0] += kept[1]
                        kept[1] = value
            for name, broker in (stats.get("brokers") or {}).items():
                rtt = broker.get("rtt") or {}
                if _num(rtt.get("cnt")) > 0:  # an interval without a response has no figure
                    self.rtt[name] = (_num(rtt.get("avg")), _num(rtt.get("p99")))
            self.stats = stats
            self.at = time.monotonic()

    def totals(self) -> dict[tuple[str, str, str], float]:
        """(physical topic, partition, field) -> count since the client was built."""
        with self.lock:
            return {key: base + last for key, (base, last) in self.counters.items()}


class StatsStore:
    """The statistics callbacks given out, and their latest statistics.

    Args:
        interval_ms: ``statistics.interval.ms`` set on clients whose configuration
            does not set it (ms).
    """

    def __init__(self, interval_ms: int) -> None:
        self.interval_ms = interval_ms
        self._slots: deque[_Slot] = deque(maxlen=MAX_CLIENTS)
        self._lock = threading.Lock()

    def configure(self, kind: str, cluster: str, conf: MutableMapping[str, Any]) -> None:
        """Add ``statistics.interval.ms`` (unless set) and a ``stats_cb`` to ``conf``,
        the configuration of a cluster client of ``kind`` for ``cluster``. The
        ``stats_cb`` in ``conf`` (the application's, left there by
        :func:`kbear._events.configure` only if the application had statistics on
        itself) keeps being called."""
        user_cb = conf.get("stats_cb")
        interval_s = int(conf.setdefault("statistics.interval.ms", self.interval_ms) or 0) / 1000.0
        if interval_s <= 0:
            return  # statistics turned off by the application
        slot = _Slot(kind, cluster, client_id(conf), interval_s, user_cb=user_cb)
        with self._lock:
            self._slots.append(slot)
        conf["stats_cb"] = slot

    def build(self, kind: str, cluster: str, conf: dict[str, Any], factory: Callable[..., Any]) -> Any:
        """A consumer cluster client that counts what its poll()/consume() hand out
        (:class:`~kbear.metrics._delivered.CountingConsumer`), when ``conf`` got its
        statistics callback from :meth:`configure` and ``factory`` is confluent-kafka's
        ``Consumer``; else None (the caller builds the client)."""
        from confluent_kafka import Consumer

        slot = conf.get("stats_cb")
        if kind != "consumer" or factory is not Consumer or not isinstance(slot, _Slot):
            return None
        slot.delivered = Delivered()
        return CountingConsumer(conf, slot.delivered)

    def latest(self) -> list[tuple[_Slot, dict[str, Any], bool]]:
        """(slot, latest statistics, fresh) of every client that reported; ``fresh``:
        within :data:`STALE_INTERVALS` intervals (or :data:`STALE_MIN_S`)."""
        with self._lock:
            slots = list(self._slots)
        now = time.monotonic()
        return [
            (slot, stats, now - slot.at <= max(STALE_MIN_S, STALE_INTERVALS * slot.interval_s))
            for slot in slots
            if (stats := slot.stats) is not None
        ]


def _counter(name: str, doc: str, labels: list[str]) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, labels=labels)


def _gauge(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=labels)


_CT = ["client", "cluster", "topic", "physical_topic"]
_CTP = [*_CT, "partition"]
_CB = ["kind", "client", "cluster", "broker"]


def families(store: StatsStore, names: Names) -> Iterator[Metric]:
    """The metric families of every client's latest statistics; topic labels are the
    logical names (``names``), ``physical_topic`` the name on the cluster."""
    f: dict[str, CounterMetricFamily | GaugeMetricFamily] = {
        # producer: partition "msgs" (enqueued) of real partitions, plus what still
        # waits in the unassigned partition (-1) to be partitioned
        "produced": _counter(
            "kbear_producer_messages",
            "Messages produced (enqueued by the application), per cluster and topic (librdkafka msgs)",
            _CT,
        ),
        "tx": _counter(
            "kbear_producer_transmitted_messages",
            "Messages transmitted to the brokers, per cluster and topic; a retried batch counts "
            "again (librdkafka txmsgs)",
            _CT,
        ),
        "txb": _counter(
            "kbear_producer_transmitted_bytes",
            "Bytes of message keys and values transmitted, per cluster and topic (librdkafka txbytes)",
            _CT,
        ),
        "queued": _gauge(
            "kbear_producer_queued_messages",
            "Messages of a topic waiting in the producer's queues (librdkafka msgq_cnt + xmit_msgq_cnt)",
            _CT,
        ),
        "inflight": _gauge(
            "kbear_producer_in_flight_messages",
            "Messages not yet delivered (or failed), per cluster client (librdkafka msg_cnt)",
            ["client", "cluster"],
        ),
        "inflight_b": _gauge(
            "kbear_producer_in_flight_bytes",
            "Bytes of messages not yet delivered, per cluster client (librdkafka msg_size)",
            ["client", "cluster"],
        ),
        "rx": _counter(
            "kbear_consumer_messages",
            "Messages handed to the application by poll() and consume(), per cluster and topic "
            "(counted by kbear; a record fetched again after a pause, seek or rebalance is not "
            "counted twice unless handed out twice)",
            _CT,
        ),
        "fetched": _counter(
            "kbear_consumer_fetched_messages",
            "Records fetched from the brokers, per cluster and topic; a record fetched again "
            "after a pause, a seek or a rebalance counts again (librdkafka rxmsgs)",
            _CT,
        ),
        "rxb": _counter(
            "kbear_consumer_bytes",
            "Bytes of messages fetched, per cluster and topic (librdkafka rxbytes)",
            _CT,
        ),
        "lag": _gauge(
            "kbear_consumer_lag",
            "Messages between the committed offset and the end of a partition (librdkafka consumer_lag)",
            _CTP,
        ),
        "committed": _gauge(
            "kbear_consumer_committed_offset",
            "The group's committed offset of a partition (librdkafka committed_offset)",
            _CTP,
        ),
        "replyq": _gauge(
            "kbear_rdkafka_reply_queue",
            "Events waiting for poll() in a cluster client (librdkafka replyq)",
            ["kind", "client", "cluster"],
        ),
        "rtt": _gauge(
            "kbear_rdkafka_broker_rtt_seconds",
            "Broker round-trip time, average and 99th percentile over the last interval that "
            "had a response (librdkafka rtt)",
            [*_CB, "stat"],
        ),
        "outbuf": _gauge(
            "kbear_rdkafka_broker_queued_requests",
            "Requests waiting to be sent to a broker (librdkafka outbuf_cnt)",
            _CB,
        ),
        "waitresp": _gauge(
            "kbear_rdkafka_broker_requests_in_flight",
            "Requests sent to a broker awaiting its response (librdkafka waitresp_cnt)",
            _CB,
        ),
        "errors": _counter(
            "kbear_rdkafka_broker_errors",
            "Broker request errors: transmit, receive, timed out (librdkafka txerrs, rxerrs, req_timeouts)",
            [*_CB, "error"],
        ),
        "retries": _counter(
            "kbear_rdkafka_broker_retries",
            "Requests retried (librdkafka txretries)",
            _CB,
        ),
        "age": _gauge(
            "kbear_rdkafka_statistics_age_seconds",
            "Seconds since a cluster client last reported statistics",
            ["kind", "client", "cluster"],
        ),
    }
    #: (family, label values) -> value: clients of one cluster replaced meanwhile add up
    sums: _Sums = defaultdict(float)
    now = time.monotonic()
    for slot, stats, fresh in store.latest():
        _samples(sums, slot, stats, fresh, names, now)
    for (key, labels), value in sums.items():
        f[key].add_metric(list(labels), value)
    yield from f.values()


def _samples(sums: _Sums, slot: _Slot, stats: dict[str, Any], fresh: bool, names: Names, now: float) -> None:
    """Add one client's samples to ``sums``; gauges only when its statistics are ``fresh``."""
    kind, cid, cluster = slot.kind, slot.client_id, slot.cluster

    def topic(physical: str) -> tuple[str, str, str, str]:
        return (cid, cluster, names.get((kind, cid, cluster, physical), physical), physical)

    sums["age", (kind, cid, cluster)] += now - slot.at
    if fresh:
        sums["replyq", (kind, cid, cluster)] += _num(stats.get("replyq"))
        if kind == "producer":
            sums["inflight", (cid, cluster)] += _num(stats.get("msg_cnt"))
            sums["inflight_b", (cid, cluster)] += _num(stats.get("msg_size"))
        for physical, topic_stats in (stats.get("topics") or {}).items():
            _gauges(sums, kind, topic(physical), topic_stats)
    if slot.delivered is not None:
        for physical, count in slot.delivered.totals().items():
            sums["rx", topic(physical)] += count
    for (physical, pid, name), value in slot.totals().items():
        key = _TOTALS.get((kind, name))
        if key is not None and pid != "-1":  # -1: counted again once partitioned
            sums[key, topic(physical)] += value
    for bname, broker in (stats.get("brokers") or {}).items():
        if broker.get("source") not in ("learned", "configured"):
            continue  # the internal and logical (coordinator) brokers
        blabels = (kind, cid, cluster, str(broker.get("nodename") or broker.get("name")))
        for error, field_name in (("tx", "txerrs"), ("rx", "rxerrs"), ("timeout", "req_timeouts")):
            sums["errors", (*blabels, error)] += _num(broker.get(field_name))
        sums["retries", blabels] += _num(broker.get("txretries"))
        if fresh:
            sums["outbuf", blabels] += _num(broker.get("outbuf_cnt"))
            sums["waitresp", blabels] += _num(broker.get("waitresp_cnt"))
            rtt = slot.rtt.get(bname)
            if rtt is not None:
                sums["rtt", (*blabels, "avg")] += rtt[0] / 1e6
                sums["rtt", (*blabels, "p99")] += rtt[1] / 1e6


#: (kind, librdkafka partition counter) -> family
_TOTALS = {
    ("producer", "msgs"): "produced",
    ("producer", "txmsgs"): "tx",
    ("producer", "txbytes"): "txb",
    ("consumer", "rxmsgs"): "fetched",
    ("consumer", "rxbytes"): "rxb",
}


def _gauges(sums: _Sums, kind: str, labels: tuple[str, ...], stats: Any) -> None:
    for pid, part in (stats.get("partitions") or {}).items():
        if kind == "producer":
            waiting = _num(part.get("msgq_cnt")) + _num(part.get("xmit_msgq_cnt"))
            sums["queued", labels] += waiting
            if pid == "-1":  # not partitioned yet: produced, not counted elsewhere
                sums["produced", labels] += waiting
            continue
        lag, committed = _num(part.get("consumer_lag")), _num(part.get("committed_offset"))
        if pid != "-1" and lag >= 0:
            sums["lag", (*labels, pid)] += lag
        if pid != "-1" and committed >= 0:
            sums["committed", (*labels, pid)] += committed


def _num(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) else 0.0
