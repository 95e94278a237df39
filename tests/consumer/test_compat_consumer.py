"""RoutedConsumer behaves as confluent_kafka.Consumer where confluent-kafka's own
unit tests look (scripts/compat.sh runs those; these keep the behaviours in CI):
argument checking and its wording, a subclass that skips ``__init__``, the
cluster's client existing from construction when the configuration names one
cluster (callbacks fire then, group metadata answers), and an unclosed consumer
being freed."""

from __future__ import annotations

import gc
import logging
import time
import weakref
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from kbear import RoutedConsumer, Router

GROUP = {"group.id": "compat", "kbear.reload.interval.ms": 0}


# ------------------------------------------------------------------ arguments


def test_no_configuration_at_all_is_a_type_error_worded_as_confluent_kafka() -> None:
    with pytest.raises(TypeError, match=r"^expected configuration dict"):
        RoutedConsumer()


@pytest.mark.parametrize("config", [None, "group.id=g", [("group.id", "g")]])
def test_a_configuration_that_is_not_a_dict_is_a_type_error(config: Any, dead_cluster: Router) -> None:
    with pytest.raises(TypeError, match=r"^expected configuration dict"):
        RoutedConsumer(config, router=dead_cluster)


def test_a_missing_group_id_keeps_confluent_kafkas_words(dead_cluster: Router) -> None:
    with pytest.raises(ValueError, match=r"^Failed to create consumer: group\.id must be set"):
        RoutedConsumer({"kbear.reload.interval.ms": 0}, router=dead_cluster)


def test_commit_and_store_offsets_name_their_argument_errors_as_confluent_kafka(dead_cluster: Router) -> None:
    consumer = RoutedConsumer(GROUP, router=dead_cluster)
    try:
        tp = TopicPartition("orders", 0, 1)
        msg: Any = object()  # the arguments are checked before the message is looked at
        with pytest.raises(ValueError, match=r"^message and offsets are mutually exclusive"):
            consumer.commit(message=msg, offsets=[tp])
        with pytest.raises(ValueError, match=r"^message and offsets are mutually exclusive"):
            consumer.store_offsets(message=msg, offsets=[tp])
        with pytest.raises(ValueError, match=r"^expected either message or offsets"):
            consumer.store_offsets()
    finally:
        consumer.close()


# ------------------------------------------------------------------ uninitialized subclass


def test_a_subclass_that_skips_init_refuses_every_call_as_a_closed_consumer() -> None:
    class Lazy(RoutedConsumer):
        def __init__(self) -> None:  # never calls RoutedConsumer.__init__
            pass

    lazy = Lazy()
    tp = TopicPartition("orders", 0)
    calls = [
        lambda: lazy.poll(0),
        lambda: lazy.consume(1, 0),
        lambda: lazy.subscribe(["orders"]),
        lambda: lazy.assign([tp]),
        lambda: lazy.assignment(),
        lambda: lazy.commit(asynchronous=False),
        lambda: lazy.position([tp]),
        lambda: lazy.pause([tp]),
        lambda: lazy.consumer_group_metadata(),
    ]
    for call in calls:
        with pytest.raises(RuntimeError, match=r"^Consumer closed"):
            call()
    with pytest.raises(RuntimeError, match=r"^Handle has been closed"):  # confluent-kafka's words here
        lazy.list_topics()
    lazy.close()  # returns, as confluent-kafka's


# ------------------------------------------------------------------ the client exists from construction


def test_oauth_cb_is_called_while_the_consumer_is_built(dead_cluster: Router) -> None:
    asked: list[Any] = []

    def token(config: Any) -> tuple[str, float]:
        asked.append(config)
        return "token", time.time() + 3600

    consumer = RoutedConsumer(
        {
            **GROUP,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "OAUTHBEARER",
            "sasl.oauthbearer.config": "scope=orders",
            "oauth_cb": token,
        },
        router=dead_cluster,
    )
    try:
        assert asked == ["scope=orders"]  # before any subscribe, as confluent-kafka
    finally:
        consumer.close()


def test_a_failing_oauth_cb_fails_the_construction_as_confluent_kafka(dead_cluster: Router) -> None:
    def token(config: Any) -> tuple[str, float]:
        raise ZeroDivisionError("no token")

    conf = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "OAUTHBEARER", "oauth_cb": token}
    # confluent-kafka waits 10 s for the token, then refuses to build the client
    with pytest.raises(KafkaException) as exc:
        RoutedConsumer({**GROUP, **conf}, router=dead_cluster)
    assert exc.value.args[0].code() == KafkaError.SASL_AUTHENTICATION_FAILED


def test_the_logger_gets_the_clients_lines_from_construction(dead_cluster: Router) -> None:
    lines: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record)

    logger = logging.getLogger("kbear.test.compat.consumer")
    logger.addHandler(Keep())
    logger.setLevel(logging.DEBUG)
    consumer = RoutedConsumer({**GROUP, "debug": "conf"}, router=dead_cluster, logger=logger)
    try:
        deadline = time.monotonic() + 10
        while not lines and time.monotonic() < deadline:
            consumer.poll(0.05)  # confluent-kafka serves log lines in poll
        assert lines, "no librdkafka log line reached the logger"
    finally:
        consumer.close()


def test_group_metadata_answers_right_after_construction_on_one_cluster(dead_cluster: Router) -> None:
    consumer = RoutedConsumer(GROUP, router=dead_cluster)
    try:
        assert consumer.consumer_group_metadata() is not None
    finally:
        consumer.close()


def test_over_several_clusters_no_client_is_built_before_it_is_needed(dead_clusters: Router) -> None:
    asked: list[Any] = []

    def token(config: Any) -> tuple[str, float]:
        asked.append(config)
        return "token", time.time() + 3600

    consumer = RoutedConsumer(
        {**GROUP, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "OAUTHBEARER", "oauth_cb": token},
        router=dead_clusters,
    )
    try:
        assert asked == []  # which cluster(s) depends on the topics subscribed
        assert consumer.memberids() == {}
    finally:
        consumer.close()


def test_an_unclosed_consumer_on_a_shared_router_is_freed(dead_cluster: Router) -> None:
    consumer = RoutedConsumer(GROUP, router=dead_cluster)
    ref = weakref.ref(consumer)
    del consumer
    gc.collect()
    assert ref() is None


def test_consume_takes_zero_to_a_million_messages_as_confluent_kafka(dead_clusters: Router) -> None:
    consumer = RoutedConsumer(GROUP, router=dead_clusters)
    try:
        assert consumer.consume(0, 0) == []
        for wrong in (-1, 1_000_001):
            with pytest.raises(ValueError, match=r"^num_messages must be between 0 and 1000000 \(1M\)$"):
                consumer.consume(wrong, 0)
    finally:
        consumer.close()


def test_a_closed_consumer_refuses_calls_in_confluent_kafkas_words(dead_cluster: Router) -> None:
    consumer = RoutedConsumer(GROUP, router=dead_cluster)
    consumer.close()
    with pytest.raises(RuntimeError, match=r"^Handle has been closed$"):
        consumer.list_topics()
    with pytest.raises(RuntimeError, match=r"^Consumer closed$"):
        consumer.memberid()
    consumer.close()  # a second close returns
