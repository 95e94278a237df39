"""The ``kbear.*`` keys of a routed client's configuration: one model, defaults in one place.

Every key a :class:`~kbear.RoutedProducer`, :class:`~kbear.RoutedConsumer` or
the Spark ``kbear`` source takes, with its default (the README's table is
checked against :data:`DEFAULTS` by ``tests/test_settings.py``):

=================================== ============ ==========================================
key                                 default      meaning
=================================== ============ ==========================================
``kbear.config``                    none         configuration directory
``kbear.client.id``                 none         the Client's id (``client.id`` factor)
``kbear.client.meta.<k>``           none         the Client's meta (``client.<k>`` factors)
``kbear.reload.interval.ms``        10000        watch interval, ms; 0 disables the watcher
``kbear.switch.drain.timeout.ms``   30000        longest wait for the old cluster in a move, ms
``kbear.switch.drain.idle.ms``      2000         consumer: idle time of the old cluster, ms
``kbear.switch.mode``               ``drain``    consumer: :class:`SwitchMode`
``kbear.switch.start``              ``committed`` consumer: :class:`SwitchStart`
``kbear.switch.timestamp.margin.ms`` 0           consumer, ``timestamp`` start: margin, ms
=================================== ============ ==========================================

The Spark source takes the same names (Spark lowercases option keys); its
``kbear.switch.start`` accepts ``earliest`` and ``latest`` only, default
:data:`SPARK_SWITCH_START` (its positions live in Spark's checkpoint: there are
no group commits to start from). ``kbear.switch.startingOffsets``, the name it
used before, still works with a ``DeprecationWarning``.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from kbear.router import Client

__all__ = [
    "DEFAULTS",
    "SPARK_SWITCH_START",
    "KBearSettings",
    "SwitchMode",
    "SwitchStart",
    "parse_settings",
]

KBEAR_PREFIX = "kbear."
CLIENT_META_PREFIX = "kbear.client.meta."


class SwitchMode(StrEnum):
    """``kbear.switch.mode``: how a consumer follows a topic to another cluster.

    ``drain``: read the old cluster until the group has committed it at its end,
    then switch; ``immediate``: switch at once (unread messages stay behind).
    """

    DRAIN = "drain"
    IMMEDIATE = "immediate"


class SwitchStart(StrEnum):
    """``kbear.switch.start``: where a moved topic starts on its new cluster.

    ``committed``: the group's committed offsets there, else ``auto.offset.reset``;
    ``earliest`` / ``latest``; ``timestamp``: the first offset at or after the
    earliest last-read timestamp on the old cluster, less
    ``kbear.switch.timestamp.margin.ms``.
    """

    COMMITTED = "committed"
    EARLIEST = "earliest"
    LATEST = "latest"
    TIMESTAMP = "timestamp"


#: the Spark source's ``kbear.switch.start`` (earliest or latest only)
SPARK_SWITCH_START = SwitchStart.EARLIEST

_MS_KEYS = (
    "kbear.reload.interval.ms",
    "kbear.switch.drain.timeout.ms",
    "kbear.switch.drain.idle.ms",
    "kbear.switch.timestamp.margin.ms",
)


class KBearSettings(BaseModel):
    """The kbear keys of a routed client's configuration, parsed (field alias = key)."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", populate_by_name=True, arbitrary_types_allowed=True
    )

    config_dir: str | None = Field(None, alias="kbear.config")
    client: Client = Field(default_factory=lambda: Client(None, {}))
    reload_interval_ms: int = Field(10_000, alias="kbear.reload.interval.ms")
    drain_timeout_ms: int = Field(30_000, alias="kbear.switch.drain.timeout.ms")
    drain_idle_ms: int = Field(2_000, alias="kbear.switch.drain.idle.ms")
    switch_mode: SwitchMode = Field(SwitchMode.DRAIN, alias="kbear.switch.mode")
    switch_start: SwitchStart = Field(SwitchStart.COMMITTED, alias="kbear.switch.start")
    timestamp_margin_ms: int = Field(0, alias="kbear.switch.timestamp.margin.ms")

    @field_validator(
        "reload_interval_ms", "drain_timeout_ms", "drain_idle_ms", "timestamp_margin_ms", mode="before"
    )
    @classmethod
    def _milliseconds(cls, value: Any, info: Any) -> int:
        key = cls.model_fields[info.field_name].alias
        try:
            number = int(value)
        except (TypeError, ValueError):
            raise ValueError(f"{key} must be an integer number of milliseconds, got {value!r}") from None
        if number < 0:
            raise ValueError(f"{key} must be >= 0, got {number}")
        return number

    @field_validator("switch_mode", mode="before")
    @classmethod
    def _mode(cls, value: Any) -> SwitchMode:
        try:
            return SwitchMode(str(value))
        except ValueError:
            raise ValueError(
                f"kbear.switch.mode must be 'drain' or 'immediate', got {str(value)!r}"
            ) from None

    @field_validator("switch_start", mode="before")
    @classmethod
    def _start(cls, value: Any) -> SwitchStart:
        try:
            return SwitchStart(str(value))
        except ValueError:
            names = ", ".join(s.value for s in SwitchStart)
            raise ValueError(f"kbear.switch.start must be one of {names}, got {str(value)!r}") from None


#: key -> default, for every kbear key with a default (the README's table)
DEFAULTS: dict[str, Any] = {
    str(f.alias): f.default for f in KBearSettings.model_fields.values() if f.alias is not None
}


def parse_settings(kbear_conf: Mapping[str, Any], client: Client | None, kind: str) -> KBearSettings:
    """Parse the kbear keys of a configuration.

    Args:
        kbear_conf: the configuration's ``kbear.*`` keys and their values.
        client: a Client given as ``client=`` (then no ``kbear.client.*`` key may be set).
        kind: the class being configured, for error messages (``"RoutedConsumer"``).

    Raises:
        ValueError: an unknown kbear key, a bad value (naming the key), or a client
            given both as ``client=`` and as ``kbear.client.*`` keys.
    """
    known = set(DEFAULTS) | {"kbear.client.id"}
    unknown = [k for k in kbear_conf if k not in known and not k.startswith(CLIENT_META_PREFIX)]
    if unknown:
        raise ValueError(f"{kind}: unknown kbear configuration key(s) {sorted(unknown)}")
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
    if "kbear.config" in values:
        values["kbear.config"] = str(values["kbear.config"])
    try:
        return KBearSettings.model_validate({**values, "client": client})
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ValueError(f"{kind}: {first.get('ctx', {}).get('error', first['msg'])}") from None
