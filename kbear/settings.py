"""The ``kbear.*`` keys: one model, defaults in one place.

Every kbear key a :class:`~kbear.RoutedProducer`, a :class:`~kbear.RoutedConsumer`
or the Spark ``kbear`` source takes is a field of :class:`KBearSettings` (the
field's alias is the key); its default is the field's default, and
:data:`DEFAULTS` lists them (docs/reference/settings.md is generated from them, checked by
``tests/config/test_settings.py``):

==================================== ============= ==========================================
key                                  default       meaning
==================================== ============= ==========================================
``kbear.config``                     none          configuration directory or meta-service URL
``kbear.client.id``                  none          the Client's id (``client.id`` factor)
``kbear.client.meta.<k>``            none          the Client's meta (``client.<k>`` factors)
``kbear.reload.interval.ms``         10000         clients: watch interval, ms; 0: no watcher
``kbear.switch.drain.timeout.ms``    30000         clients: longest wait for the old cluster, ms
``kbear.switch.drain.idle.ms``       2000          consumer: idle time of the old cluster, ms
``kbear.switch.mode``                ``drain``     consumer: :class:`SwitchMode`
``kbear.switch.start``               ``committed`` consumer: :class:`SwitchStart`; Spark source:
                                                   ``earliest`` (:data:`SPARK_SWITCH_START`)
                                                   or ``latest``
``kbear.switch.timestamp.margin.ms`` 0             consumer, ``timestamp`` start: margin, ms
``kbear.group``                      none          Spark source: group of consumer lookups
``kbear.cluster``                    ``kafka``     Spark source, one cluster: its name
``kbear.ack.mode``                   ``offset``    consumer: :class:`AckMode`
``kbear.nack.backoff.min.ms``        1000          consumer, individual: first redelivery delay
``kbear.nack.backoff.max.ms``        60000         consumer, individual: longest redelivery delay
``kbear.nack.backoff.multiplier``    2.0           consumer, individual: delay growth per redelivery
``kbear.ack.timeout.ms``             0             consumer, individual: redeliver unacked, ms; 0 off
``kbear.ack.timeout.tick.ms``        1000          consumer, individual: ack timeout check interval
``kbear.retry.enable``               False         consumer, individual: read the retry topics
``kbear.retry.topic``                see right     ``{topic}-{group}-RETRY`` (template)
``kbear.dlq.topic``                  see right     ``{topic}-{group}-DLQ`` (template)
``kbear.max.redeliver.count``        0             consumer, individual: redeliveries before DLQ
``kbear.chunking.enable``            False         producer: split large values; consumer: join
``kbear.chunking.expire.ms``         60000         consumer: incomplete chunked message expiry
``kbear.chunking.max.pending``       10            consumer: chunked messages held at once
``kbear.delay.enable``               False         producer: ``deliver_after`` / ``deliver_at``
``kbear.failover.enable``            False         producer, consumer, Spark source: fail over
``kbear.failover.after.ms``          30000         clients: unreachable this long = lost, ms
==================================== ============= ==========================================

Which reader takes which key: :data:`CLIENT_KEYS` (:func:`parse_settings`) and
:data:`SPARK_SOURCE_KEYS` (:func:`parse_source_options`); any other ``kbear.*``
key is refused, so a key meant for the other reader is not silently ignored.

Errors: a bad value is a ``ValueError`` whose message names the key; all the
problems of one configuration are reported at once, separated by ``"; "``.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Annotated, Any, cast

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    model_validator,
)

from kbear._identity import Client
from kbear._modes import SPARK_SWITCH_START, SPARK_SWITCH_STARTS, AckMode, SwitchMode, SwitchStart

__all__ = [
    "CLIENT_KEYS",
    "DEFAULTS",
    "SPARK_SOURCE_KEYS",
    "SPARK_SWITCH_START",
    "SPARK_SWITCH_STARTS",
    "AckMode",
    "KBearSettings",
    "SwitchMode",
    "SwitchStart",
    "parse_settings",
    "parse_source_options",
]

#: every kbear key starts with it
KBEAR_PREFIX = "kbear."
#: ``kbear.client.meta.<k>``: the Client's meta entry ``k``
CLIENT_META_PREFIX = "kbear.client.meta."


#: how close a key must be to a known one to be suggested (difflib's ``get_close_matches``)
SUGGEST_CUTOFF = 0.8


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` naming the candidate closest to ``word`` (difflib), or ``""``."""
    known = set(candidates)
    if word in known:
        return ""
    found = difflib.get_close_matches(word, sorted(known), n=1, cutoff=SUGGEST_CUTOFF)
    return f" (did you mean '{found[0]}'?)" if found else ""


def _key(info: ValidationInfo) -> str:
    """The kbear key of the field being validated: its alias."""
    return str(KBearSettings.model_fields[str(info.field_name)].alias)


def _count(value: Any, info: ValidationInfo) -> int:
    key = _key(info)
    try:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError
        number = int(value)
    except (TypeError, ValueError):
        what = "an integer number of milliseconds" if key.endswith(".ms") else "an integer"
        raise ValueError(f"{key} must be {what}, got {value!r}") from None
    if number < 0:
        raise ValueError(f"{key} must be >= 0, got {number}")
    return number


def _choice(value: Any, info: ValidationInfo) -> StrEnum:
    field = KBearSettings.model_fields[str(info.field_name)]
    kind = cast(type[StrEnum], field.annotation)
    try:
        return kind(str(value))
    except ValueError:
        names = [member.value for member in kind]
        allowed = f"'{names[0]}' or '{names[1]}'" if len(names) == 2 else f"one of {', '.join(names)}"
        raise ValueError(f"{field.alias} must be {allowed}, got {str(value)!r}") from None


def _multiplier(value: Any) -> float:
    try:
        if isinstance(value, bool):
            raise ValueError
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"kbear.nack.backoff.multiplier must be a number, got {value!r}") from None
    if not number >= 1.0 or number == float("inf"):
        raise ValueError(f"kbear.nack.backoff.multiplier must be >= 1, got {value!r}")
    return number


def _flag(value: Any, info: ValidationInfo) -> bool:
    text = value if isinstance(value, bool) else str(value).strip().lower()
    if text in (True, "true", "1"):
        return True
    if text in (False, "false", "0"):
        return False
    raise ValueError(f"{_key(info)} must be true or false, got {value!r}")


def _template(value: Any, info: ValidationInfo) -> str:
    text = str(value)
    try:
        name = text.format(topic="t", group="g")
    except (KeyError, IndexError, ValueError):
        raise ValueError(
            f"{_key(info)} may use only the placeholders {{topic}} and {{group}}, got {text!r}"
        ) from None
    if not name:
        raise ValueError(f"{_key(info)} must not be empty")
    return text


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


# The kinds of value of the kbear keys, each checked before pydantic's own validation
# (the messages name the key).
_Count = Annotated[int, BeforeValidator(_count)]  # ms or a count, >= 0
_Choice = BeforeValidator(_choice)  # one of the field's StrEnum
_Flag = Annotated[bool, BeforeValidator(_flag)]
_Multiplier = Annotated[float, BeforeValidator(_multiplier)]
_Template = Annotated[str, BeforeValidator(_template)]
_Text = BeforeValidator(_text)


class KBearSettings(BaseModel):
    """The kbear keys of a configuration, parsed: one field per key (alias = key).

    Frozen; build it with :func:`parse_settings` (RoutedProducer,
    RoutedConsumer) or :func:`parse_source_options` (the Spark source), which
    check which keys their reader takes. Defaults are the fields' defaults here.

    Attributes:
        config_dir: ``kbear.config`` (str): the configuration directory or a
            meta-service ``http(s)://`` URL (:mod:`kbear.meta`); None
            (default) when the client is given ``router=`` instead.
        client: the :class:`~kbear.Client` of ``kbear.client.id`` (str) and
            ``kbear.client.meta.<k>`` (str values), or the ``client=`` argument;
            default: the anonymous ``Client(None, {})``.
        reload_interval_ms: ``kbear.reload.interval.ms`` (int, ms, >= 0):
            how often the router's watcher looks at the configuration; 0
            disables it. Default 10000. Clients only (the Spark source reloads
            before every micro-batch).
        drain_timeout_ms: ``kbear.switch.drain.timeout.ms`` (int, ms, >= 0):
            longest wait for the old cluster during a topic move (producer
            flush, consumer drain). Default 30000. Clients only.
        drain_idle_ms: ``kbear.switch.drain.idle.ms`` (int, ms, >= 0): how long
            the old cluster must stay idle at its end before a consumer moves.
            Default 2000. Clients only.
        switch_mode: ``kbear.switch.mode`` (:class:`SwitchMode`), default
            ``drain``. Clients only (the Spark source always drains).
        switch_start: ``kbear.switch.start`` (:class:`SwitchStart`): ``committed``
            (default), ``earliest``, ``latest``, ``timestamp`` or ``translated``
            (the group's offsets translated through the old cluster's mirror,
            ``kbear.mirror`` in ``clusters.yaml``; clients only); the Spark
            source's default is :data:`SPARK_SWITCH_START`.
        timestamp_margin_ms: ``kbear.switch.timestamp.margin.ms`` (int, ms,
            >= 0): with ``timestamp`` starts, how far before the last consumed
            timestamp to start. Default 0. Clients only.
        group: ``kbear.group`` (str): the consumer group whose routes the Spark
            source follows (consumer lookups); None (default): producer
            lookups. Spark source only (the clients take ``group.id``).
        cluster: ``kbear.cluster`` (str): the cluster's name in offsets and the
            ``cluster`` column when the Spark source reads one cluster
            (``kafka.bootstrap.servers``). Default ``"kafka"``. Spark source only.
        metrics_enable: ``kbear.metrics.enable`` (bool, or ``"true"``/``"false"``):
            turn kbear's metrics on for the process (as :func:`kbear.metrics.instrument`
            with its defaults; needs the ``metrics`` extra). Default False. Clients only.
        ack_mode: ``kbear.ack.mode`` (:class:`AckMode`), default ``offset``.
            Consumer only. The keys below marked "individual" act only with
            ``individual``.
        nack_backoff_min_ms: ``kbear.nack.backoff.min.ms`` (int, ms, >= 0):
            delay of the first redelivery after a ``nack`` (or an ack timeout).
            Default 1000 (the issue's reference table). Individual.
        nack_backoff_max_ms: ``kbear.nack.backoff.max.ms`` (int, ms, >= 0 and
            >= ``kbear.nack.backoff.min.ms``): the longest redelivery delay.
            Default 60000 (the issue's reference table). Individual.
        nack_backoff_multiplier: ``kbear.nack.backoff.multiplier`` (float,
            >= 1): the n-th redelivery (n from 0) waits
            ``min(min_ms * multiplier**n, max_ms)``. Default 2.0.
        ack_timeout_ms: ``kbear.ack.timeout.ms`` (int, ms, >= 0): a message not
            acknowledged this long after its delivery is redelivered (after
            the backoff delay too); 0 (default) turns it off. Individual.
        ack_timeout_tick_ms: ``kbear.ack.timeout.tick.ms`` (int, ms, > 0): how
            often unacknowledged messages are checked against the ack timeout.
            Default 1000 (Pulsar's ``tickDurationMillis``). Individual.
        retry_enable: ``kbear.retry.enable`` (bool): ``reconsume_later`` may be
            used and the consumer also reads the retry topics of its topics.
            Default False. Individual.
        retry_topic: ``kbear.retry.topic`` (str): the retry-letter topic's name;
            ``{topic}`` and ``{group}`` are replaced by the message's topic and
            the consumer group. Default ``{topic}-{group}-RETRY`` (Pulsar's).
        dlq_topic: ``kbear.dlq.topic`` (str): the dead-letter topic's name, as
            ``retry_topic``. Default ``{topic}-{group}-DLQ`` (Pulsar's).
        max_redeliver_count: ``kbear.max.redeliver.count`` (int, >= 0): after
            this many redeliveries (nack, ack timeout, reconsume_later) the
            message goes to the dead-letter topic and is acknowledged; 0
            (default): no dead-letter topic, redelivered for ever. Individual.
        chunking_enable: ``kbear.chunking.enable`` (bool): producer: a value
            larger than ``message.max.bytes`` is sent in chunks; consumer
            (individual only): chunks are joined into one message. Default False.
        chunking_expire_ms: ``kbear.chunking.expire.ms`` (int, ms, >= 0): an
            incomplete chunked message older than this is dropped (its chunks
            acknowledged). Default 60000 (Pulsar's
            ``expireTimeOfIncompleteChunkedMessage``).
        chunking_max_pending: ``kbear.chunking.max.pending`` (int, >= 1): most
            incomplete chunked messages held; the oldest is dropped (acknowledged)
            beyond it. Default 10 (Pulsar's ``maxPendingChunkedMessage``).
        delay_enable: ``kbear.delay.enable`` (bool): the producer's ``produce``
            takes ``deliver_after`` / ``deliver_at`` (its one-cluster fast path
            is then a Python function). Default False. Producer only.
        failover_enable: ``kbear.failover.enable`` (bool): the producer or consumer
            declares a cluster lost itself (docs/concepts/failover.md#when-is-a-cluster-lost)
            and sends (reads) the topics routed there to (on) its standby
            (``kbear.failover.to``, docs/concepts/failover.md). Default False. Producers and
            consumers (not the share consumers).
        failover_after_ms: ``kbear.failover.after.ms`` (int, ms, >= 0): how long no
            broker of a cluster must be reachable before it is lost (and as long
            reachable again before it is recovered). Default 30000.

    Raises:
        pydantic.ValidationError: a bad value, at validation; :func:`parse_settings`
            and :func:`parse_source_options` turn it into ``ValueError`` naming the key.
    """

    model_config = ConfigDict(
        frozen=True, extra="forbid", populate_by_name=True, arbitrary_types_allowed=True
    )

    config_dir: Annotated[str | None, _Text] = Field(None, alias="kbear.config")
    client: Client = Field(default_factory=lambda: Client(None, {}))
    reload_interval_ms: _Count = Field(10_000, alias="kbear.reload.interval.ms")
    drain_timeout_ms: _Count = Field(30_000, alias="kbear.switch.drain.timeout.ms")
    drain_idle_ms: _Count = Field(2_000, alias="kbear.switch.drain.idle.ms")
    switch_mode: Annotated[SwitchMode, _Choice] = Field(SwitchMode.DRAIN, alias="kbear.switch.mode")
    switch_start: Annotated[SwitchStart, _Choice] = Field(SwitchStart.COMMITTED, alias="kbear.switch.start")
    timestamp_margin_ms: _Count = Field(0, alias="kbear.switch.timestamp.margin.ms")
    group: Annotated[str | None, _Text] = Field(None, alias="kbear.group")
    cluster: Annotated[str, _Text] = Field("kafka", alias="kbear.cluster")
    metrics_enable: _Flag = Field(False, alias="kbear.metrics.enable")
    ack_mode: Annotated[AckMode, _Choice] = Field(AckMode.OFFSET, alias="kbear.ack.mode")
    nack_backoff_min_ms: _Count = Field(1_000, alias="kbear.nack.backoff.min.ms")
    nack_backoff_max_ms: _Count = Field(60_000, alias="kbear.nack.backoff.max.ms")
    nack_backoff_multiplier: _Multiplier = Field(2.0, alias="kbear.nack.backoff.multiplier")
    ack_timeout_ms: _Count = Field(0, alias="kbear.ack.timeout.ms")
    ack_timeout_tick_ms: _Count = Field(1_000, alias="kbear.ack.timeout.tick.ms")
    retry_enable: _Flag = Field(False, alias="kbear.retry.enable")
    retry_topic: _Template = Field("{topic}-{group}-RETRY", alias="kbear.retry.topic")
    dlq_topic: _Template = Field("{topic}-{group}-DLQ", alias="kbear.dlq.topic")
    max_redeliver_count: _Count = Field(0, alias="kbear.max.redeliver.count")
    chunking_enable: _Flag = Field(False, alias="kbear.chunking.enable")
    chunking_expire_ms: _Count = Field(60_000, alias="kbear.chunking.expire.ms")
    chunking_max_pending: _Count = Field(10, alias="kbear.chunking.max.pending")
    delay_enable: _Flag = Field(False, alias="kbear.delay.enable")
    failover_enable: _Flag = Field(False, alias="kbear.failover.enable")
    failover_after_ms: _Count = Field(30_000, alias="kbear.failover.after.ms")

    @model_validator(mode="after")
    def _ranges(self) -> KBearSettings:
        if self.nack_backoff_max_ms < self.nack_backoff_min_ms:
            raise ValueError(
                f"kbear.nack.backoff.max.ms ({self.nack_backoff_max_ms}) must be >= "
                f"kbear.nack.backoff.min.ms ({self.nack_backoff_min_ms})"
            )
        if self.ack_timeout_tick_ms == 0:
            raise ValueError("kbear.ack.timeout.tick.ms must be > 0")
        if self.chunking_max_pending == 0:
            raise ValueError("kbear.chunking.max.pending must be >= 1")
        return self


#: key -> default, for every kbear key of :class:`KBearSettings` (the settings
#: page of the docs; ``kbear.client.id`` and ``kbear.client.meta.<k>`` make the ``client``)
DEFAULTS: dict[str, Any] = {
    str(f.alias): f.default for f in KBearSettings.model_fields.values() if f.alias is not None
}

#: the kbear keys RoutedProducer and RoutedConsumer take (and ``kbear.client.meta.<k>``)
CLIENT_KEYS = frozenset(set(DEFAULTS) - {"kbear.group", "kbear.cluster"} | {"kbear.client.id"})
#: the kbear keys the Spark source takes (and ``kbear.client.meta.<k>``), compared
#: case-insensitively (Spark lowercases option keys)
SPARK_SOURCE_KEYS = frozenset(
    {
        "kbear.config",
        "kbear.client.id",
        "kbear.group",
        "kbear.cluster",
        "kbear.switch.start",
        "kbear.failover.enable",
        "kbear.failover.after.ms",
    }
)


def _validate(values: Mapping[str, Any], client: Client) -> tuple[KBearSettings | None, list[str]]:
    """The model of ``values`` (key -> value) and ``client``, or None and one problem
    per bad key (each message names its key)."""
    try:
        return KBearSettings.model_validate({**values, "client": client}), []
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            cause = error.get("ctx", {}).get("error")
            key = ".".join(str(part) for part in error["loc"])
            problems.append(str(cause) if cause is not None else f"{key}: {error['msg']}")
        return None, problems


def parse_settings(kbear_conf: Mapping[str, Any], client: Client | None, kind: str) -> KBearSettings:
    """Parse the kbear keys of a RoutedProducer's or RoutedConsumer's configuration.

    Args:
        kbear_conf: the configuration's ``kbear.*`` keys (exact case) and their
            values; a None value counts as absent (the default applies).
        client: a Client given as ``client=`` (then no ``kbear.client.*`` key may be set).
        kind: the class being configured, for error messages (``"RoutedConsumer"``).

    Returns:
        The settings; absent keys take the defaults of :class:`KBearSettings`.

    Raises:
        ValueError: ``"<kind>: ..."``: a key not in :data:`CLIENT_KEYS` (nor
            ``kbear.client.meta.<k>``), a bad value (the message names the key;
            every bad key is listed), or a client given both as ``client=`` and
            as ``kbear.client.*`` keys.
    """
    unknown = [k for k in kbear_conf if k not in CLIENT_KEYS and not k.startswith(CLIENT_META_PREFIX)]
    if unknown:
        hints = "".join(did_you_mean(k, CLIENT_KEYS) for k in sorted(unknown))
        raise ValueError(f"{kind}: unknown kbear configuration key(s) {sorted(unknown)}{hints}")
    meta = {
        k.removeprefix(CLIENT_META_PREFIX): str(v)
        for k, v in kbear_conf.items()
        if k.startswith(CLIENT_META_PREFIX)
    }
    client_id = kbear_conf.get("kbear.client.id")
    if client is not None and (client_id is not None or meta):
        raise ValueError(f"{kind}: pass the client either as client= or as kbear.client.* keys")
    if client is None:
        client = Client(None if client_id is None else str(client_id), meta)
    values = {k: v for k, v in kbear_conf.items() if k in DEFAULTS and v is not None}
    settings, problems = _validate(values, client)
    if settings is None:
        raise ValueError(f"{kind}: {'; '.join(problems)}")
    return settings


def parse_source_options(options: Mapping[str, str]) -> KBearSettings:
    """Parse the kbear keys among the options of the Spark ``kbear`` source.

    Keys are compared case-insensitively (Spark lowercases option keys; the meta
    key ``k`` of ``kbear.client.meta.<k>`` keeps the case it arrives in); other
    options (``subscribe``, ``kafka.*``...) are ignored here. Values are strings
    (Spark's); ``kbear.switch.start`` is also trimmed and lowercased.

    ``kbear.switch.start`` takes :data:`SPARK_SWITCH_STARTS` only and defaults to
    :data:`SPARK_SWITCH_START` (why: see there).

    Returns:
        The settings: ``config_dir``, ``client``, ``group``, ``cluster`` and
        ``switch_start``, ``failover_enable`` and ``failover_after_ms`` from the
        options; the clients-only fields keep their
        defaults.

    Raises:
        ValueError: a ``kbear.*`` key not in :data:`SPARK_SOURCE_KEYS` (nor
            ``kbear.client.meta.<k>``), or a bad value;
            every problem is listed, separated by ``"; "``.
    """
    kbear = {str(k): v for k, v in options.items() if str(k).lower().startswith(KBEAR_PREFIX)}
    meta_prefix = CLIENT_META_PREFIX.lower()
    meta = {k[len(meta_prefix) :]: str(v) for k, v in kbear.items() if k.lower().startswith(meta_prefix)}
    lowered = {k.lower(): v for k, v in kbear.items() if not k.lower().startswith(meta_prefix)}
    problems = []
    unknown = [k for k in kbear if k.lower() in lowered and k.lower() not in SPARK_SOURCE_KEYS]
    if unknown:
        hints = "".join(did_you_mean(k.lower(), SPARK_SOURCE_KEYS) for k in sorted(unknown))
        problems.append(f"unknown kbear source option(s) {sorted(unknown)}{hints}")
    start = str(lowered.get("kbear.switch.start", SPARK_SWITCH_START.value)).strip().lower()
    if start not in SPARK_SWITCH_STARTS:
        problems.append(
            "kbear.switch.start must be 'earliest' or 'latest' for the kbear source, "
            f"got {lowered['kbear.switch.start']!r}"
        )
    client_id = lowered.get("kbear.client.id")
    values = {k: v for k, v in lowered.items() if k in SPARK_SOURCE_KEYS and k in DEFAULTS}
    values["kbear.switch.start"] = start if start in SPARK_SWITCH_STARTS else SPARK_SWITCH_START
    settings, invalid = _validate(values, Client(None if client_id is None else str(client_id), meta))
    problems += invalid
    if settings is None or problems:
        raise ValueError("; ".join(problems))
    return settings
