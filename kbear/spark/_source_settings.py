"""The options of the ``kbear`` Spark source, parsed (driver and executors).

The kbear keys (``kbear.config``, ``kbear.group``, ``kbear.client.*``,
``kbear.cluster``, ``kbear.switch.start``) take the names of :mod:`kbear.settings`;
``kafka.*`` are librdkafka properties for every cluster (prefix removed); the
rest are the names of Spark's Kafka connector (``subscribe``, ``startingOffsets``,
``maxOffsetsPerTrigger``, ``includeHeaders``, ``kafkaConsumer.pollTimeoutMs``).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping

from kbear.router import Client
from kbear.settings import SPARK_SWITCH_START, SwitchStart
from kbear.spark._options import FORBIDDEN_READ_OPTIONS, SparkOptionsError, check_options

# kbear keys of the source; kafka.* are librdkafka properties (prefix removed).
_KBEAR_KEYS = frozenset(
    {
        "kbear.config",
        "kbear.group",
        "kbear.client.id",
        "kbear.cluster",
        "kbear.switch.start",
        "kbear.switch.startingoffsets",  # deprecated name of kbear.switch.start
    }
)


def option_bool(value: str | None, default: bool) -> bool:
    return default if value is None else str(value).strip().lower() == "true"


def _switch_start(lowered: Mapping[str, str]) -> str:
    """``kbear.switch.start`` (kbear.settings), earliest or latest here; the deprecated
    ``kbear.switch.startingOffsets`` is read when the new name is absent.

    Raises:
        SparkOptionsError: another value.
    """
    value = lowered.get("kbear.switch.start")
    if value is None and "kbear.switch.startingoffsets" in lowered:
        warnings.warn(
            "the kbear source option 'kbear.switch.startingOffsets' is deprecated: use 'kbear.switch.start'",
            DeprecationWarning,
            stacklevel=4,
        )
        value = lowered["kbear.switch.startingoffsets"]
    start = SPARK_SWITCH_START.value if value is None else value.strip().lower()
    if start not in (SwitchStart.EARLIEST, SwitchStart.LATEST):
        raise SparkOptionsError(
            [f"kbear.switch.start must be 'earliest' or 'latest' for the kbear source, got {value!r}"]
        )
    return start


class SourceSettings:
    """The source options, parsed (driver and executors)."""

    def __init__(self, options: Mapping[str, str]) -> None:
        opts = {str(k): str(v) for k, v in options.items()}
        lowered = {k.lower(): v for k, v in opts.items()}
        check_options(opts, FORBIDDEN_READ_OPTIONS_KBEAR)
        topics = [t.strip() for t in lowered.get("subscribe", "").split(",") if t.strip()]
        if not topics:
            raise SparkOptionsError(["the kbear source needs 'subscribe' (comma-separated topics)"])
        self.topics = list(dict.fromkeys(topics))
        self.config_dir = lowered.get("kbear.config")
        self.bootstrap = lowered.get("kafka.bootstrap.servers")
        if (self.config_dir is None) == (self.bootstrap is None):
            raise SparkOptionsError(
                ["set exactly one of 'kbear.config' (routed) and 'kafka.bootstrap.servers' (one cluster)"]
            )
        self.group = lowered.get("kbear.group")
        meta = {
            k[len("kbear.client.meta.") :]: v
            for k, v in opts.items()
            if k.lower().startswith("kbear.client.meta.")
        }
        self.client = Client(lowered.get("kbear.client.id"), meta)
        unknown = [
            k
            for k in opts
            if k.lower().startswith("kbear.")
            and k.lower() not in _KBEAR_KEYS
            and not k.lower().startswith("kbear.client.meta.")
        ]
        if unknown:
            raise SparkOptionsError([f"unknown kbear source option(s) {sorted(unknown)}"])
        self.cluster = lowered.get("kbear.cluster", "kafka")
        # librdkafka properties for every cluster (kafka.<property>), the bootstrap excepted
        self.extra = {
            k[len("kafka.") :]: v
            for k, v in opts.items()
            if k.lower().startswith("kafka.") and k.lower() != "kafka.bootstrap.servers"
        }
        self.starting = lowered.get("startingoffsets", "latest").strip()
        self.switch_start = _switch_start(lowered)
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
