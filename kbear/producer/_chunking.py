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

import uuid
from collections.abc import Mapping
from typing import Any

CHUNK_UUID = "kbear-chunk-uuid"
CHUNK_INDEX = "kbear-chunk-index"
CHUNK_COUNT = "kbear-chunk-count"
CHUNK_NOKEY = "kbear-chunk-nokey"

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
