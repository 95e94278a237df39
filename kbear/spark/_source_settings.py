"""The options of the ``kbear`` Spark source, parsed (driver and executors).

The kbear keys (``kbear.config``, ``kbear.group``, ``kbear.client.*``,
``kbear.cluster``, ``kbear.switch.start``) take the names of :mod:`kbear.settings`;
``kafka.*`` are librdkafka properties for every cluster (prefix removed); the
rest are the names of Spark's Kafka connector (``subscribe``, ``startingOffsets``,
``maxOffsetsPerTrigger``, ``includeHeaders``, ``kafkaConsumer.pollTimeoutMs``).
"""

from __future__ import annotations

from collections.abc import Mapping

from kbear.settings import parse_source_options
from kbear.spark._options import FORBIDDEN_READ_OPTIONS, SparkOptionsError, check_options
from kbear.spark._translate import option_bool


class SourceSettings:
    """The source options, parsed (driver and executors; pickled with the reader).

    Attributes:
        topics: the ``subscribe`` topics (logical names when routed), in order, once each.
        config_dir, group, client, cluster, switch_start, failover_enable,
            failover_after_ms: the kbear keys, parsed by
            :func:`kbear.settings.parse_source_options` (defaults there, the
            ``kbear.switch.start`` default being ``SPARK_SWITCH_START``, earliest).
        bootstrap: ``kafka.bootstrap.servers`` (one cluster) or None (routed).
        extra: the other ``kafka.<property>`` options, prefix removed.
        starting: ``startingOffsets`` as given (default ``latest``, Spark's).
        max_offsets: ``maxOffsetsPerTrigger`` (>= 1) or None (all available).
        include_headers: ``includeHeaders`` (default false).
        poll_timeout_s: ``kafkaConsumer.pollTimeoutMs`` in seconds (default
            120000 ms, Spark's).

    Raises:
        SparkOptionsError: a forbidden option, no ``subscribe``, not exactly one of
            ``kbear.config`` and ``kafka.bootstrap.servers``, an unknown ``kbear.*``
            option or a bad kbear value (every one listed), a bad
            ``maxOffsetsPerTrigger``.
    """

    def __init__(self, options: Mapping[str, str]) -> None:
        opts = {str(k): str(v) for k, v in options.items()}
        lowered = {k.lower(): v for k, v in opts.items()}
        check_options(opts, FORBIDDEN_READ_OPTIONS_KBEAR)
        topics = [t.strip() for t in lowered.get("subscribe", "").split(",") if t.strip()]
        if not topics:
            raise SparkOptionsError(["the kbear source needs 'subscribe' (comma-separated topics)"])
        self.topics = list(dict.fromkeys(topics))
        try:
            keys = parse_source_options(opts)
        except ValueError as exc:
            raise SparkOptionsError([str(exc)]) from None
        self.config_dir = keys.config_dir
        self.bootstrap = lowered.get("kafka.bootstrap.servers")
        if (self.config_dir is None) == (self.bootstrap is None):
            raise SparkOptionsError(
                ["set exactly one of 'kbear.config' (routed) and 'kafka.bootstrap.servers' (one cluster)"]
            )
        self.group = keys.group
        self.client = keys.client
        self.cluster = keys.cluster
        self.switch_start = keys.switch_start
        self.failover_enable = keys.failover_enable
        self.failover_after_ms = keys.failover_after_ms
        # librdkafka properties for every cluster (kafka.<property>), the bootstrap excepted
        self.extra = {
            k[len("kafka.") :]: v
            for k, v in opts.items()
            if k.lower().startswith("kafka.") and k.lower() != "kafka.bootstrap.servers"
        }
        self.starting = lowered.get("startingoffsets", "latest").strip()
        max_rows = lowered.get("maxoffsetspertrigger")
        try:
            self.max_offsets = None if max_rows is None else int(max_rows)
        except ValueError:
            raise SparkOptionsError([f"maxOffsetsPerTrigger must be an integer, got {max_rows!r}"]) from None
        if self.max_offsets is not None and self.max_offsets < 1:
            raise SparkOptionsError(["maxOffsetsPerTrigger must be >= 1"])
        self.include_headers = option_bool(lowered.get("includeheaders"), False)
        self.poll_timeout_s = int(lowered.get("kafkaconsumer.polltimeoutms", "120000")) / 1000.0


# The kbear source takes kafka.bootstrap.servers and subscribe itself.
FORBIDDEN_READ_OPTIONS_KBEAR = {
    k: v for k, v in FORBIDDEN_READ_OPTIONS.items() if k not in ("kafka.bootstrap.servers", "subscribe")
}
