"""kbear.settings: one model for every kbear.* key, checked against the README's table."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

from kbear import Client, RoutedConsumer, RoutedProducer
from kbear.settings import DEFAULTS, KBearSettings, SwitchMode, SwitchStart, parse_settings

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_table() -> dict[str, str]:
    """key -> default column of the README's kbear keys table (the first table whose
    header is ``| key | default | meaning |``)."""
    text = README.read_text()
    start = text.index("| key | default | meaning |")
    rows: dict[str, str] = {}
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        key_cell, default, _meaning = (c.strip() for c in line.strip("|").split("|", 2))
        for key in re.findall(r"`(kbear\.[^`]+)`", key_cell):
            rows[key] = default.strip("`")
    return rows


def test_readme_table_lists_every_key_with_the_models_default() -> None:
    table = readme_table()
    assert set(table) == set(DEFAULTS) | {"kbear.client.id", "kbear.client.meta.<k>"}
    for key, default in DEFAULTS.items():
        shown = table[key]
        expected = "—" if default is None else str(default.value if hasattr(default, "value") else default)
        assert shown == expected, key


def test_defaults_and_enums() -> None:
    s = parse_settings({}, None, "RoutedConsumer")
    assert s == KBearSettings(client=Client(None, {}))
    assert s.switch_mode is SwitchMode.DRAIN and s.switch_mode == "drain"
    assert s.switch_start is SwitchStart.COMMITTED
    assert (s.reload_interval_ms, s.drain_timeout_ms, s.drain_idle_ms, s.timestamp_margin_ms) == (
        10_000,
        30_000,
        2_000,
        0,
    )
    s = parse_settings(
        {
            "kbear.switch.mode": "immediate",
            "kbear.switch.start": "timestamp",
            "kbear.switch.drain.idle.ms": "250",
        },
        None,
        "RoutedConsumer",
    )
    assert s.switch_mode is SwitchMode.IMMEDIATE and s.switch_start is SwitchStart.TIMESTAMP
    assert s.drain_idle_ms == 250


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
            "RoutedConsumer: kbear.switch.mode must be 'drain' or 'immediate'",
        ),
        ("kbear.switch.start", "middle", "kbear.switch.start must be one of committed, earliest, latest"),
        ("kbear.switch.drain.idle.ms", "soon", "kbear.switch.drain.idle.ms must be an integer number of ms"),
        ("kbear.reload.interval.ms", -5, "kbear.reload.interval.ms must be >= 0, got -5"),
        ("kbear.switch.drain", 1, r"unknown kbear configuration key\(s\) \['kbear.switch.drain'\]"),
    ],
)
def test_bad_values_name_the_key(key: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("number of ms", "number of milliseconds")):
        parse_settings({key: value}, None, "RoutedConsumer")


def test_clients_refuse_bad_keys_before_building_anything() -> None:
    with pytest.raises(ValueError, match=re.escape("RoutedConsumer: kbear.switch.start must be one of")):
        RoutedConsumer({"group.id": "g", "kbear.switch.start": "never"})
    with pytest.raises(
        ValueError, match=re.escape("RoutedProducer: kbear.switch.drain.timeout.ms must be an integer")
    ):
        RoutedProducer({"kbear.switch.drain.timeout.ms": "1s"})


def test_spark_source_takes_the_same_name_and_the_old_one_with_a_warning() -> None:
    pytest.importorskip("pyspark")
    from kbear.spark._options import SparkOptionsError
    from kbear.spark._source_settings import SourceSettings as _Settings

    base = {"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "t"}
    assert _Settings(base).switch_start == "earliest"
    assert _Settings({**base, "kbear.switch.start": "latest"}).switch_start == "latest"
    with pytest.warns(DeprecationWarning, match="use 'kbear.switch.start'"):
        assert _Settings({**base, "kbear.switch.startingOffsets": "latest"}).switch_start == "latest"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _Settings({**base, "kbear.switch.start": "earliest"})  # the new name: no warning
    with pytest.raises(SparkOptionsError, match="earliest' or 'latest' for the kbear source"):
        _Settings({**base, "kbear.switch.start": "committed"})
