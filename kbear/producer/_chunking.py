"""Chunking on the producer: a value larger than the message size limit sent in parts.

Responsible for: the chunk size (from the producer's ``message.max.bytes``, the
limit librdkafka enforces before a message leaves: ``MSG_SIZE_TOO_LARGE``), the
split of a value, and the headers each chunk carries (``kbear-chunk-uuid``,
``kbear-chunk-index``, ``kbear-chunk-count``), which kbear consumers with
``kbear.chunking.enable`` use to join the parts (:mod:`kbear.consumer._chunks`).
Every chunk of one value has the same key, so the partitioner puts them on one
partition, in order; a value without a key gets the chunk uuid as key and the
header ``kbear-chunk-nokey`` (the consumer gives the joined message no key).
Pure logic: no I/O.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from kbear._chunk_headers import CHUNK_COUNT, CHUNK_INDEX, CHUNK_NOKEY, CHUNK_UUID

#: librdkafka's default ``message.max.bytes`` (bytes)
DEFAULT_MAX_BYTES = 1_000_000
#: bytes of a message's size left for the record's own overhead (bytes)
RECORD_OVERHEAD = 1024


def max_message_bytes(native: Mapping[str, Any]) -> int:
    """The producer's ``message.max.bytes`` (librdkafka default 1000000)."""
    try:
        return int(native.get("message.max.bytes", DEFAULT_MAX_BYTES))
    except (TypeError, ValueError):
        return DEFAULT_MAX_BYTES


def chunk_size(max_bytes: int, key: bytes | None, headers: list[tuple[str, Any]] | None) -> int:
    """The largest value part that fits in one message of ``max_bytes`` with ``key``,
    ``headers`` and the chunk headers (at least 1 byte)."""
    used = len(key or b"") + RECORD_OVERHEAD + 128  # the chunk headers
    for k, v in headers or []:
        used += len(k) + (len(v) if isinstance(v, bytes | str) else 0)
    return max(1, max_bytes - used)


def split(
    value: bytes, key: bytes | None, headers: list[tuple[str, Any]] | None, max_bytes: int
) -> list[tuple[bytes | None, bytes, list[tuple[str, Any]]]] | None:
    """(key, part, headers) of each chunk of ``value``, or None when it fits in one
    message of ``max_bytes``."""
    size = chunk_size(max_bytes, key, headers)
    if len(value) + len(key or b"") + RECORD_OVERHEAD <= max_bytes:
        return None
    ident = uuid.uuid4().hex
    count = (len(value) + size - 1) // size
    base = list(headers or [])
    if key is None:
        key = ident.encode()
        base.append((CHUNK_NOKEY, b"1"))
    out: list[tuple[bytes | None, bytes, list[tuple[str, Any]]]] = []
    for index in range(count):
        part_headers = [
            *base,
            (CHUNK_UUID, ident.encode()),
            (CHUNK_INDEX, str(index).encode()),
            (CHUNK_COUNT, str(count).encode()),
        ]
        out.append((key, value[index * size : (index + 1) * size], part_headers))
    return out


#: produce()'s positional arguments after the topic (confluent-kafka's order)
_PRODUCE_ARGS = ("value", "key", "partition", "on_delivery", "timestamp", "headers")
#: epoch ms before which kbear consumers do not deliver a message (kbear.consumer._letters)
DELIVER_AT = "kbear-deliver-at"


def _joined_callback(cb: Callable[[Any, Any], None] | None, count: int) -> Callable[[Any, Any], None] | None:
    """One delivery report for ``count`` chunks: ``cb(first error or None, last chunk's message)``."""
    if cb is None:
        return None
    state: dict[str, Any] = {"left": count, "err": None}

    def report(err: Any, msg: Any) -> None:
        if err is not None and state["err"] is None:
            state["err"] = err
        state["left"] -= 1
        if state["left"] == 0:
            cb(state["err"], msg)

    return report


def prepare(
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    chunking: bool,
    max_bytes: int,
    now_s: float,
) -> list[dict[str, Any]]:
    """The keyword arguments of each ``Producer.produce`` call that one
    ``RoutedProducer.produce(topic, *args, **kwargs)`` makes with
    ``kbear.delay.enable`` / ``kbear.chunking.enable``: ``deliver_after`` (seconds
    from ``now_s``) or ``deliver_at`` (epoch seconds) become the header
    ``kbear-deliver-at`` (epoch ms); a value too large for ``max_bytes`` is split
    (one delivery report for all chunks).

    Raises:
        TypeError: a positional and a keyword argument name the same parameter, or
            too many positional arguments (as confluent-kafka).
        ValueError: both ``deliver_after`` and ``deliver_at``, or a negative ``deliver_after``.
    """
    if len(args) > len(_PRODUCE_ARGS):
        raise TypeError(f"produce() takes at most {len(_PRODUCE_ARGS) + 1} positional arguments")
    call = dict(kwargs)
    if "callback" in call:
        call["on_delivery"] = call.pop("callback")
    for name, value in zip(_PRODUCE_ARGS, args, strict=False):
        if name in call:
            raise TypeError(f"produce() got multiple values for argument '{name}'")
        call[name] = value
    after = call.pop("deliver_after", None)
    at = call.pop("deliver_at", None)
    if after is not None and at is not None:
        raise ValueError("produce: give deliver_after or deliver_at, not both")
    headers = call.get("headers")
    if isinstance(headers, Mapping):
        headers = list(headers.items())
    if after is not None or at is not None:
        if after is not None and after < 0:
            raise ValueError(f"produce: deliver_after must be >= 0 seconds, got {after!r}")
        # rounded up: never delivered before the time asked
        due_ms = math.ceil((now_s + after) * 1000) if after is not None else math.ceil(at * 1000)
        headers = [*(headers or []), (DELIVER_AT, str(due_ms).encode())]
    if headers is not None:
        call["headers"] = headers
    value = call.get("value")
    if not chunking or value is None:
        return [call]
    data = value.encode() if isinstance(value, str) else bytes(value)
    key = call.get("key")
    key_bytes = key.encode() if isinstance(key, str) else key
    parts = split(data, key_bytes, headers, max_bytes)
    if parts is None:
        return [call]
    report = _joined_callback(call.get("on_delivery"), len(parts))
    out = []
    for part_key, part, part_headers in parts:
        one = {**call, "key": part_key, "value": part, "headers": part_headers}
        if report is not None:
            one["on_delivery"] = report
        out.append(one)
    return out
