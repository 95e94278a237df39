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
from typing import Any

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

#: the fields of a record part in order: (name, an INT16/32/64 struct, or str for a STRING)
_Fields = tuple[tuple[str, struct.Struct | type[str]], ...]
_CHECKPOINT_KEY: _Fields = (("group", str), ("topic", str), ("partition", _INT32))
#: after the version (INT16)
_CHECKPOINT_VALUE: _Fields = (("upstream offset", _INT64), ("downstream offset", _INT64), ("metadata", str))
_SYNC_KEY: _Fields = (("topic", str), ("partition", _INT32))
_SYNC_VALUE: _Fields = (("upstream offset", _INT64), ("downstream offset", _INT64))


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

    def fields(self, fields: _Fields) -> list[Any]:
        """The values of ``fields`` in order, the last bytes of the record."""
        values = [
            self.number(kind, name) if isinstance(kind, struct.Struct) else self.string(name)
            for name, kind in fields
        ]
        if self.at != len(self.data):
            left, total = len(self.data) - self.at, len(self.data)
            raise MirrorRecordError(f"{self.what}: {left} bytes left over after the record ({total} in all)")
        return values


def _encode(what: str, fields: _Fields, *values: Any) -> bytes:
    """``values`` as ``fields``; errors name the field as ``<what> <field>``."""
    out = b""
    for (name, kind), value in zip(fields, values, strict=True):
        where = f"{what} {name}"
        if isinstance(kind, struct.Struct):
            try:
                out += kind.pack(value)
            except struct.error:
                raise MirrorRecordError(f"{where}: {value} does not fit in {kind.size * 8} bits") from None
        elif len(raw := value.encode("utf-8")) > _MAX_STRING:
            raise MirrorRecordError(
                f"{where}: {len(raw)} bytes of UTF-8, a STRING holds at most {_MAX_STRING}"
            )
        else:
            out += _INT16.pack(len(raw)) + raw
    return out


def decode_checkpoint(key: bytes | None, value: bytes | None) -> Checkpoint:
    """A record of ``<alias>.checkpoints.internal``, from its ``key`` and ``value`` bytes.

    Raises:
        MirrorRecordError: a null, short or over-long key or value, a null or
            non-UTF-8 string, or a value version other than :data:`CHECKPOINT_VERSION`.
    """
    group, topic, partition = _Reader(key, "checkpoint key").fields(_CHECKPOINT_KEY)
    v = _Reader(value, "checkpoint value")
    version = v.number(_INT16, "version")
    if version != CHECKPOINT_VERSION:
        raise MirrorRecordError(
            f"checkpoint value: version {version} is not known (this kbear reads version "
            f"{CHECKPOINT_VERSION}, the one MirrorMaker 2 writes up to Kafka 4.3)"
        )
    return Checkpoint(group, topic, partition, *v.fields(_CHECKPOINT_VALUE))


def encode_checkpoint(checkpoint: Checkpoint) -> tuple[bytes, bytes]:
    """``checkpoint`` as MirrorMaker 2 writes it: (key, value) bytes, value version 0.

    Raises:
        MirrorRecordError: a string over 32767 bytes of UTF-8, a number out of its range.
    """
    c = checkpoint
    key = _encode("checkpoint", _CHECKPOINT_KEY, c.group, c.topic, c.partition)
    value = _encode("checkpoint", _CHECKPOINT_VALUE, c.upstream_offset, c.downstream_offset, c.metadata)
    return key, _INT16.pack(CHECKPOINT_VERSION) + value


def decode_offset_sync(key: bytes | None, value: bytes | None) -> OffsetSync:
    """A record of ``mm2-offset-syncs.<alias>.internal``, from its ``key`` and ``value`` bytes.

    Raises:
        MirrorRecordError: a null, short or over-long key or value, a null or non-UTF-8 topic.
    """
    topic, partition = _Reader(key, "offset sync key").fields(_SYNC_KEY)
    return OffsetSync(topic, partition, *_Reader(value, "offset sync value").fields(_SYNC_VALUE))


def encode_offset_sync(sync: OffsetSync) -> tuple[bytes, bytes]:
    """``sync`` as MirrorMaker 2 writes it: (key, value) bytes.

    Raises:
        MirrorRecordError: a topic over 32767 bytes of UTF-8, a number out of its range.
    """
    key = _encode("offset sync", _SYNC_KEY, sync.topic, sync.partition)
    return key, _encode("offset sync", _SYNC_VALUE, sync.upstream_offset, sync.downstream_offset)
