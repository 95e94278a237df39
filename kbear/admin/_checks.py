"""Input checks of RoutedAdminClient's partition-addressed calls (private).

A routed call splits its request by cluster and sends each share with
confluent-kafka's public method, which checks that share again. These checks
run first, on the whole request, so that bad input raises before any share is
sent, with confluent-kafka's exception and words for the same input (a drop-in
client's errors are confluent-kafka's; tests/admin/test_admin.py compares them with a
plain AdminClient's).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from confluent_kafka import (
    OFFSET_INVALID,
    ConsumerGroupTopicPartitions,
    ElectionType,
    IsolationLevel,
    TopicPartition,
)
from confluent_kafka.admin import OffsetSpec

#: librdkafka's offset specs (rdkafka.h: RD_KAFKA_OFFSET_SPEC_EARLIEST, _LATEST, _MAX_TIMESTAMP)
_EARLIEST, _LATEST, _MAX_TIMESTAMP = -2, -1, -3


#: list_offsets' checks of one (TopicPartition, OffsetSpec): confluent-kafka's, in its order
_OFFSETS_CHECKS: tuple[tuple[Callable[[Any, Any], bool], type[Exception], str], ...] = (
    (lambda tp, _: tp is None, TypeError, "partition cannot be None"),
    (lambda tp, _: not isinstance(tp, TopicPartition), TypeError, "partition must be a TopicPartition"),
    (lambda tp, _: tp.topic is None, TypeError, "partition topic name cannot be None"),
    (lambda tp, _: not isinstance(tp.topic, str), TypeError, "partition topic name must be string"),
    (lambda tp, _: not tp.topic, ValueError, "partition topic name cannot be empty"),
    (lambda tp, _: tp.partition < 0, ValueError, "partition index must be non-negative"),
    (lambda _, spec: spec is None, TypeError, "OffsetSpec cannot be None"),
    (lambda _, spec: not isinstance(spec, OffsetSpec), TypeError, "Value must be a OffsetSpec"),
)


def check_list_offsets(request: Any, kwargs: dict[str, Any]) -> None:
    """``list_offsets(topic_partition_offsets, **kwargs)``: a dict of TopicPartition
    (topic a non-empty str, partition >= 0) -> OffsetSpec; ``isolation_level`` an
    IsolationLevel."""
    if not isinstance(request, dict):
        raise TypeError(
            "Expected topic_partition_offsets to be dict of [TopicPartitions,OffsetSpec] "
            "for list offsets request"
        )
    for tp, spec in request.items():
        for bad, error, text in _OFFSETS_CHECKS:
            if bad(tp, spec):
                raise error(text)
    if "isolation_level" in kwargs and not isinstance(kwargs["isolation_level"], IsolationLevel):
        raise TypeError("isolation_level argument should be an IsolationLevel")


def _partitions(items: Any, what: str, *, plural: str = "request list") -> None:
    """``items``: a list of TopicPartition with partitions >= 0 (delete_records, elect_leaders)."""
    if not isinstance(items, list):
        raise TypeError(f"Expected {what} to be a list, got '{type(items).__name__}' ")
    for tp in items:
        if not isinstance(tp, TopicPartition):
            raise TypeError(
                f"Element of the {plural} must be of type 'TopicPartition' got '{type(tp).__name__}' "
            )


def check_delete_records(request: Any) -> None:
    """``delete_records(topic_partition_offsets)``: a list of TopicPartition, partitions >= 0."""
    _partitions(request, "Request")
    for tp in request:
        if tp.partition < 0:
            raise ValueError("'partition' cannot be negative")


def check_elect_leaders(election_type: Any, partitions: Any) -> None:
    """``elect_leaders(election_type, partitions)``: an ElectionType; None or a list of
    TopicPartition with partitions >= 0."""
    if not isinstance(election_type, ElectionType):
        raise TypeError("Expected 'election_type' to be of type 'ElectionType'")
    if partitions is None:
        return
    if not isinstance(partitions, list):
        raise TypeError(f"Expected 'partitions' to be a list, got '{type(partitions).__name__}'")
    _partitions(partitions, "'partitions'", plural="'partitions' list")
    for tp in partitions:
        if tp.partition < 0:
            raise ValueError(
                "Elements of the 'partitions' list must not have negative value for 'partition' field"
            )


def check_group_offsets(request: Any, *, altering: bool) -> None:
    """``list_consumer_group_offsets`` / ``alter_consumer_group_offsets`` (``altering``)
    requests: a list of one ConsumerGroupTopicPartitions with a non-empty str
    ``group_id``; its ``topic_partitions`` None (listing only) or a non-empty list of
    TopicPartition (non-empty topic, partition >= 0), without offsets when listing,
    with offsets >= 0 when altering."""
    if request is None:
        raise TypeError("request cannot be None")
    if not isinstance(request, list):
        raise TypeError("request must be a list")
    if len(request) != 1:
        verb = "altering" if altering else "listing"
        raise ValueError(f"Currently we support {verb} offsets for a single consumer group only")
    for req in request:
        if not isinstance(req, ConsumerGroupTopicPartitions):
            raise TypeError("Expected list of 'ConsumerGroupTopicPartitions'")
        if req.group_id is None:
            raise TypeError("'group_id' cannot be None")
        if not isinstance(req.group_id, str):
            raise TypeError("'group_id' must be a string")
        if not req.group_id:
            raise ValueError("'group_id' cannot be empty")
        parts = req.topic_partitions
        if parts is None:
            if altering:
                raise ValueError("'topic_partitions' cannot be null")
            continue
        if not isinstance(parts, list):
            raise TypeError("'topic_partitions' must be a list" + ("" if altering else " or None"))
        if not parts:
            raise ValueError("'topic_partitions' cannot be empty")
        for tp in parts:
            _group_partition(tp, altering)


def _group_partition(tp: Any, altering: bool) -> None:
    prefix = "Element of 'topic_partitions'"
    if tp is None:
        raise ValueError(f"{prefix} cannot be None")
    if not isinstance(tp, TopicPartition):
        raise TypeError(f"{prefix} must be of type TopicPartition")
    if tp.topic is None:
        raise TypeError(f"{prefix} must not have 'topic' attribute as None")
    if not tp.topic:
        raise ValueError(f"{prefix} must not have 'topic' attribute as Empty")
    if tp.partition < 0:
        what = "negative value for 'partition' field" if altering else "negative 'partition' value"
        raise ValueError(f"{prefix} must not have {what}")
    if altering and tp.offset < 0:
        raise ValueError(f"{prefix} must not have negative value for 'offset' field")
    if not altering and tp.offset != OFFSET_INVALID:
        raise ValueError(f"{prefix} must not have 'offset' value")


def offset_spec_value(spec: OffsetSpec) -> int:
    """The offset a list_offsets answer is keyed by for ``spec``: its timestamp (ms) for
    ``OffsetSpec.for_timestamp(t)``, else librdkafka's code of the spec (earliest -2,
    latest -1, max timestamp -3).

    Raises:
        TypeError: ``spec`` is none of confluent-kafka's OffsetSpecs.
    """
    timestamp = getattr(spec, "timestamp", None)
    if isinstance(timestamp, int):
        return timestamp
    named = {
        _EARLIEST: OffsetSpec.earliest(),  # type: ignore[no-untyped-call]
        _LATEST: OffsetSpec.latest(),  # type: ignore[no-untyped-call]
        _MAX_TIMESTAMP: OffsetSpec.max_timestamp(),  # type: ignore[no-untyped-call]
    }
    for code, one in named.items():
        if spec is one:
            return code
    raise TypeError(f"list_offsets: unknown OffsetSpec {spec!r}")
