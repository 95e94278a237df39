"""kbear.settings: one model for every kbear.* key (its documentation, generated from the
model, is checked in tests/docs/test_docs_reference.py)."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

from kbear import Client, RoutedConsumer, RoutedProducer
from kbear.settings import (
    CLIENT_KEYS,
    DEFAULTS,
    SPARK_SOURCE_KEYS,
    SPARK_SWITCH_START,
    SPARK_SWITCH_STARTS,
    KBearSettings,
    SwitchMode,
    SwitchStart,
    parse_settings,
    parse_source_options,
)


def test_every_key_belongs_to_a_reader() -> None:
    assert set(DEFAULTS) | {"kbear.client.id"} == CLIENT_KEYS | SPARK_SOURCE_KEYS
    assert {"kbear.group", "kbear.cluster"}.isdisjoint(CLIENT_KEYS)
    assert all(k == k.lower() for k in SPARK_SOURCE_KEYS)  # Spark lowercases option keys


def test_defaults_and_enums() -> None:
    s = parse_settings({}, None, "RoutedConsumer")
    assert s == KBearSettings(client=Client(None, {}))
    assert s.switch_mode is SwitchMode.DRAIN and s.switch_mode == "drain"
    assert s.switch_start is SwitchStart.COMMITTED and s.switch_start == "committed"
    assert (s.reload_interval_ms, s.drain_timeout_ms, s.drain_idle_ms, s.timestamp_margin_ms) == (
        10_000,
        30_000,
        2_000,
        0,
    )
    assert s.config_dir is None and s.client == Client(None, {})
    s = parse_settings(
        {
            "kbear.config": Path("/etc/kbear"),
            "kbear.switch.mode": "immediate",
            "kbear.switch.start": "timestamp",
            "kbear.switch.drain.idle.ms": "250",
            "kbear.switch.drain.timeout.ms": 1000.0,
            "kbear.reload.interval.ms": None,  # None: the default
        },
        None,
        "RoutedConsumer",
    )
    assert s.switch_mode is SwitchMode.IMMEDIATE and s.switch_start is SwitchStart.TIMESTAMP
    assert (s.drain_idle_ms, s.drain_timeout_ms, s.reload_interval_ms) == (250, 1000, 10_000)
    assert s.config_dir == "/etc/kbear"
    assert [m.value for m in SwitchMode] == ["drain", "immediate"]
    assert {m.value for m in SwitchStart} == {"committed", "timestamp", "earliest", "latest", "translated"}


def test_settings_are_frozen() -> None:
    s = parse_settings({}, None, "RoutedProducer")
    with pytest.raises(ValueError, match="frozen"):
        s.drain_timeout_ms = 5  # type: ignore[misc]


def test_client_from_keys_or_argument() -> None:
    s = parse_settings({"kbear.client.id": "billing", "kbear.client.meta.env": "prod"}, None, "X")
    assert s.client == Client("billing", {"env": "prod"})
    given = Client("app", {})
    assert parse_settings({}, given, "X").client is given
    with pytest.raises(ValueError, match=re.escape("either as client= or as kbear.client")):
        parse_settings({"kbear.client.id": "x"}, given, "X")


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (
            "kbear.switch.mode",
            "sometimes",
            "RoutedConsumer: kbear.switch.mode must be 'drain' or 'immediate', got 'sometimes'",
        ),
        (
            "kbear.switch.start",
            "middle",
            "kbear.switch.start must be one of committed, earliest, latest, timestamp, translated, "
            "got 'middle'",
        ),
        ("kbear.switch.drain.idle.ms", "soon", "kbear.switch.drain.idle.ms must be an integer number of ms"),
        ("kbear.switch.drain.idle.ms", 2.5, "kbear.switch.drain.idle.ms must be an integer number of ms"),
        ("kbear.switch.timestamp.margin.ms", True, "kbear.switch.timestamp.margin.ms must be an integer"),
        ("kbear.reload.interval.ms", -5, "kbear.reload.interval.ms must be >= 0, got -5"),
        ("kbear.switch.drain", 1, "unknown kbear configuration key(s) ['kbear.switch.drain']"),
        ("kbear.group", "g", "unknown kbear configuration key(s) ['kbear.group']"),  # Spark only
        ("kbear.cluster", "A", "unknown kbear configuration key(s) ['kbear.cluster']"),  # Spark only
    ],
)
def test_bad_values_name_the_key(key: str, value: object, message: str) -> None:
    expected = re.escape(message.replace("number of ms", "number of milliseconds"))
    with pytest.raises(ValueError, match=expected):
        parse_settings({key: value}, None, "RoutedConsumer")


def test_every_bad_value_is_reported_at_once() -> None:
    with pytest.raises(ValueError) as caught:
        parse_settings({"kbear.switch.mode": "x", "kbear.switch.drain.idle.ms": -1}, None, "RoutedConsumer")
    message = str(caught.value)
    assert message.startswith("RoutedConsumer: ")
    assert "kbear.switch.mode must be" in message and "kbear.switch.drain.idle.ms must be >= 0" in message


def test_clients_refuse_bad_keys_before_building_anything() -> None:
    with pytest.raises(ValueError, match=re.escape("RoutedConsumer: kbear.switch.start must be one of")):
        RoutedConsumer({"group.id": "g", "kbear.switch.start": "never"})
    with pytest.raises(
        ValueError, match=re.escape("RoutedProducer: kbear.switch.drain.timeout.ms must be an integer")
    ):
        RoutedProducer({"kbear.switch.drain.timeout.ms": "1s"})


# ----------------------------------------------------------------- the Spark source's keys


def test_source_options_defaults_and_case_insensitive_keys() -> None:
    s = parse_source_options({"subscribe": "t", "kafka.bootstrap.servers": "b:1"})
    assert s.switch_start is SPARK_SWITCH_START is SwitchStart.EARLIEST
    assert (s.config_dir, s.group, s.cluster, s.client) == (None, None, "kafka", Client(None, {}))
    s = parse_source_options(
        {
            "KBear.Config": "/etc/kbear",
            "kbear.group": "g",
            "kbear.cluster": "A",
            "kbear.client.id": "app",
            "kbear.client.meta.Env": "prod",
            "kbear.switch.start": " Latest ",
        }
    )
    assert (s.config_dir, s.group, s.cluster) == ("/etc/kbear", "g", "A")
    assert s.client == Client("app", {"Env": "prod"})
    assert s.switch_start is SwitchStart.LATEST


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"kbear.switch.start": "committed"}, "earliest' or 'latest' for the kbear source, got 'committed'"),
        ({"kbear.switch.start": "timestamp"}, "earliest' or 'latest' for the kbear source"),
        ({"kbear.reload.interval.ms": "0"}, "unknown kbear source option(s) ['kbear.reload.interval.ms']"),
        ({"kbear.switch.mode": "drain"}, "unknown kbear source option(s) ['kbear.switch.mode']"),
        # the name the option had before kbear.switch.start, never released
        (
            {"kbear.switch.startingOffsets": "latest"},
            "unknown kbear source option(s) ['kbear.switch.startingOffsets']",
        ),
    ],
)
def test_source_options_refuse_what_the_source_does_not_do(options: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_source_options(options)
    assert all(v in SwitchStart for v in SPARK_SWITCH_STARTS)


def test_spark_source_takes_the_same_name() -> None:
    pytest.importorskip("pyspark")
    from kbear.spark._options import SparkOptionsError
    from kbear.spark._source import KBearDataSource
    from kbear.spark._source_settings import SourceSettings

    base = {"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "t"}
    assert SourceSettings(base).switch_start == "earliest"
    assert SourceSettings({**base, "kbear.switch.start": "latest"}).switch_start == "latest"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        SourceSettings({**base, "kbear.switch.start": "earliest"})  # the new name: no warning
    with pytest.raises(SparkOptionsError, match="earliest' or 'latest' for the kbear source"):
        SourceSettings({**base, "kbear.switch.start": "committed"})
    with pytest.raises(SparkOptionsError, match="unknown kbear source option"):
        SourceSettings({**base, "kbear.switch.drain.idle.ms": "5"})
    reader = KBearDataSource({**base, "kbear.switch.start": "latest"}).streamReader(None)  # type: ignore[arg-type]
    assert reader._s.switch_start == "latest"
