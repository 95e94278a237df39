"""The fixture's own look-ups: tenacity retries around metadata and admin calls."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaException

from integration.backends import free_port, topic_partitions, wait_until_answers
from integration.conftest import Harness


def test_waiting_for_a_broker_that_never_answers_gives_up_in_time() -> None:
    t0 = time.monotonic()
    with pytest.raises((OSError, KafkaException)):
        wait_until_answers(f"127.0.0.1:{free_port()}", timeout_s=1.5)
    assert time.monotonic() - t0 < 5


def test_topic_creation_is_idempotent_and_visible(it: Harness) -> None:
    topic = it.name("created")
    for _ in range(2):  # the second time the topic exists: not an error
        it.create_topic(topic, 3, "A")
    assert topic_partitions(it.bootstrap("A"), topic) == 3
    assert topic_partitions(it.bootstrap("B"), topic) == 0
