"""MirrorMaker 2's records, decoded and encoded byte for byte (pure: no I/O).

MirrorMaker 2 (Kafka's ``connect-mirror``) writes two kinds of records that
translate a consumer group's offsets from a source cluster to a target:

- **checkpoints** (``<source alias>.checkpoints.internal`` on the target), class
  ``Checkpoint`` of ``connect-mirror-client``: key = group ``STRING``, topic
  ``STRING`` (the topic's name on the target), partition ``INT32``; value =
  version ``INT16`` (0, the only version Kafka has written, up to 4.3), upstream
  offset ``INT64`` (the group's committed offset on the source), downstream
  offset ``INT64`` (its translation on the target), metadata ``STRING`` (the
  commit's metadata);
- **offset syncs** (``mm2-offset-syncs.<alias>.internal``), class ``OffsetSync``
  of ``connect-mirror``: key = topic ``STRING`` (the topic's name on the source),
  partition ``INT32``; value = upstream offset ``INT64``, downstream offset
  ``INT64`` (where the record at the upstream offset was written on the target).
  No version field.

The types are Kafka's protocol types (``org.apache.kafka.common.protocol.types``):
``STRING`` is an ``INT16`` byte length then that many bytes of UTF-8 (never
null, at most 32767 bytes), ``INT16/32/64`` are big-endian two's complement.
Decoding is strict: short input, a negative string length, invalid UTF-8,
bytes left over after the record or an unknown checkpoint version raise
:class:`MirrorRecordError` naming the record kind and the field.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = [
    "CHECKPOINT_VERSION",
    "Checkpoint",
    "MirrorRecordError",
    "OffsetSync",
    "decode_checkpoint",
    "decode_offset_sync",
    "encode_checkpoint",
    "encode_offset_sync",
]

#: the checkpoint value version this module reads and writes (``Checkpoint.VERSION``)
CHECKPOINT_VERSION = 0
#: longest ``STRING`` in bytes (Kafka's ``Type.STRING``: an ``INT16`` length)
_MAX_STRING = 0x7FFF

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


class MirrorRecordError(ValueError):
    """A record is not in MirrorMaker 2's format (or is of a version not known here).

    The message names the record kind (``checkpoint key``, ``offset sync value``, ...)
    and the field that could not be read."""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """One checkpoint: ``group``'s committed ``upstream_offset`` on the source for
    ``topic``/``partition`` (``topic`` named as on the target, e.g. ``east.orders``)
    and its translation ``downstream_offset`` on the target, with the commit's
    ``metadata`` (text)."""

    group: str
    topic: str
    partition: int
    upstream_offset: int
    downstream_offset: int
    metadata: str = ""


@dataclass(frozen=True, slots=True)
class OffsetSync:
    """One offset sync: the record at ``upstream_offset`` of ``topic``/``partition``
    on the source (``topic`` named as on the source) was written at
    ``downstream_offset`` on the target."""

    topic: str
    partition: int
    upstream_offset: int
    downstream_offset: int


class _Reader:
    """Reads Kafka protocol types from ``data``; errors name ``what`` (the record part)."""

    def __init__(self, data: bytes | None, what: str) -> None:
        if data is None:
            raise MirrorRecordError(f"{what}: null (MirrorMaker 2 writes no null key or value)")
        self.data = bytes(data)
        self.what = what
        self.at = 0

    def number(self, fmt: struct.Struct, field: str) -> int:
        """The ``fmt`` number (``INT16/32/64``) at the current byte."""
        if self.at + fmt.size > len(self.data):
            raise MirrorRecordError(
                f"{self.what}: {field} needs {fmt.size} bytes at byte {self.at}, "
                f"{len(self.data) - self.at} left ({len(self.data)} in all)"
            )
        (value,) = fmt.unpack_from(self.data, self.at)
        self.at += fmt.size
        return int(value)

    def string(self, field: str) -> str:
        size = self.number(_INT16, f"{field} (length)")
        if size < 0:
            raise MirrorRecordError(
                f"{self.what}: {field} has length {size} (null), MirrorMaker 2 writes a string"
            )
        if self.at + size > len(self.data):
            raise MirrorRecordError(
                f"{self.what}: {field} has length {size} but only {len(self.data) - self.at} bytes are left"
            )
        raw = self.data[self.at : self.at + size]
        self.at += size
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MirrorRecordError(f"{self.what}: {field} is not UTF-8 ({exc.reason})") from None

    def done(self) -> None:
        if self.at != len(self.data):
            left, total = len(self.data) - self.at, len(self.data)
            raise MirrorRecordError(f"{self.what}: {left} bytes left over after the record ({total} in all)")


def _string(text: str, field: str) -> bytes:
    raw = text.encode("utf-8")
    if len(raw) > _MAX_STRING:
        raise MirrorRecordError(f"{field}: {len(raw)} bytes of UTF-8, a STRING holds at most {_MAX_STRING}")
    return _INT16.pack(len(raw)) + raw


def _int(fmt: struct.Struct, value: int, field: str) -> bytes:
    try:
        return fmt.pack(value)
    except struct.error:
        raise MirrorRecordError(f"{field}: {value} does not fit in {fmt.size * 8} bits") from None


def decode_checkpoint(key: bytes | None, value: bytes | None) -> Checkpoint:
    """A record of ``<alias>.checkpoints.internal``, from its ``key`` and ``value`` bytes.

    Raises:
        MirrorRecordError: a null, short or over-long key or value, a null or
            non-UTF-8 string, or a value version other than :data:`CHECKPOINT_VERSION`.
    """
    k = _Reader(key, "checkpoint key")
    group, topic, partition = k.string("group"), k.string("topic"), k.number(_INT32, "partition")
    k.done()
    v = _Reader(value, "checkpoint value")
    version = v.number(_INT16, "version")
    if version != CHECKPOINT_VERSION:
        raise MirrorRecordError(
            f"checkpoint value: version {version} is not known (this kbear reads version "
            f"{CHECKPOINT_VERSION}, the one MirrorMaker 2 writes up to Kafka 4.3)"
        )
    upstream, downstream = v.number(_INT64, "upstream offset"), v.number(_INT64, "downstream offset")
    metadata = v.string("metadata")
    v.done()
    return Checkpoint(group, topic, partition, upstream, downstream, metadata)


def encode_checkpoint(checkpoint: Checkpoint) -> tuple[bytes, bytes]:
    """``checkpoint`` as MirrorMaker 2 writes it: (key, value) bytes, value version 0.

    Raises:
        MirrorRecordError: a string over 32767 bytes of UTF-8, a number out of its range.
    """
    key = (
        _string(checkpoint.group, "checkpoint group")
        + _string(checkpoint.topic, "checkpoint topic")
        + _int(_INT32, checkpoint.partition, "checkpoint partition")
    )
    value = (
        _INT16.pack(CHECKPOINT_VERSION)
        + _int(_INT64, checkpoint.upstream_offset, "checkpoint upstream offset")
        + _int(_INT64, checkpoint.downstream_offset, "checkpoint downstream offset")
        + _string(checkpoint.metadata, "checkpoint metadata")
    )
    return key, value


def decode_offset_sync(key: bytes | None, value: bytes | None) -> OffsetSync:
    """A record of ``mm2-offset-syncs.<alias>.internal``, from its ``key`` and ``value`` bytes.

    Raises:
        MirrorRecordError: a null, short or over-long key or value, a null or non-UTF-8 topic.
    """
    k = _Reader(key, "offset sync key")
    topic, partition = k.string("topic"), k.number(_INT32, "partition")
    k.done()
    v = _Reader(value, "offset sync value")
    upstream, downstream = v.number(_INT64, "upstream offset"), v.number(_INT64, "downstream offset")
    v.done()
    return OffsetSync(topic, partition, upstream, downstream)


def encode_offset_sync(sync: OffsetSync) -> tuple[bytes, bytes]:
    """``sync`` as MirrorMaker 2 writes it: (key, value) bytes.

    Raises:
        MirrorRecordError: a topic over 32767 bytes of UTF-8, a number out of its range.
    """
    key = _string(sync.topic, "offset sync topic") + _int(_INT32, sync.partition, "offset sync partition")
    value = _int(_INT64, sync.upstream_offset, "offset sync upstream offset") + _int(
        _INT64, sync.downstream_offset, "offset sync downstream offset"
    )
    return key, value
