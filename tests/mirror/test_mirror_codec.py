"""MirrorMaker 2's checkpoint and offset-sync records, byte for byte (kbear.mirror, #27 item 4).

The fixed byte strings are records MirrorMaker 2 (connect-mirror 4.3.1, dedicated
mode, east -> west) wrote on the target of ``integration/test_mirror.py``'s setup:
decoding them gives what that run committed and mirrored (50 records produced,
all in partition 1 by their keys, the group committed offset 30 there; the first
checkpoint was written while the mirror had synced offset 0 only, the second once
it had synced offset 15: 30 translates to 1, then 16, never past 30), and encoding
what was decoded gives the same bytes back.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kbear.mirror import (
    Checkpoint,
    MirrorRecordError,
    OffsetSync,
    decode_checkpoint,
    decode_offset_sync,
    encode_checkpoint,
    encode_offset_sync,
)

# -- records MirrorMaker 2 wrote (hex of key, value), see the module docstring
CAPTURED_CHECKPOINTS: list[tuple[str, str, Checkpoint]] = [
    (
        "00186d6d322d67726f75702e746573742d636170747572652e31001c656173742e6d6972726f7265642e746573742d636170747572652e3000000001",
        "0000000000000000001e00000000000000010000",
        Checkpoint("mm2-group.test-capture.1", "east.mirrored.test-capture.0", 1, 30, 1, ""),
    ),
    (
        "00186d6d322d67726f75702e746573742d636170747572652e31001c656173742e6d6972726f7265642e746573742d636170747572652e3000000001",
        "0000000000000000001e00000000000000100000",
        Checkpoint("mm2-group.test-capture.1", "east.mirrored.test-capture.0", 1, 30, 16, ""),
    ),
]
CAPTURED_SYNCS: list[tuple[str, str, OffsetSync]] = [
    (
        "00176d6972726f7265642e746573742d636170747572652e3000000001",
        "00000000000000000000000000000000",
        OffsetSync("mirrored.test-capture.0", 1, 0, 0),
    ),
    (
        "00176d6972726f7265642e746573742d636170747572652e3000000001",
        "00000000000000090000000000000009",
        OffsetSync("mirrored.test-capture.0", 1, 9, 9),
    ),
    (
        "00176d6972726f7265642e746573742d636170747572652e3000000001",
        "000000000000000f000000000000000f",
        OffsetSync("mirrored.test-capture.0", 1, 15, 15),
    ),
]


@pytest.mark.parametrize(("key", "value", "expected"), CAPTURED_CHECKPOINTS)
def test_a_checkpoint_mirrormaker2_wrote_decodes_and_encodes_back(
    key: str, value: str, expected: Checkpoint
) -> None:
    decoded = decode_checkpoint(bytes.fromhex(key), bytes.fromhex(value))
    assert decoded == expected
    assert encode_checkpoint(decoded) == (bytes.fromhex(key), bytes.fromhex(value))


@pytest.mark.parametrize(("key", "value", "expected"), CAPTURED_SYNCS)
def test_an_offset_sync_mirrormaker2_wrote_decodes_and_encodes_back(
    key: str, value: str, expected: OffsetSync
) -> None:
    decoded = decode_offset_sync(bytes.fromhex(key), bytes.fromhex(value))
    assert decoded == expected
    assert encode_offset_sync(decoded) == (bytes.fromhex(key), bytes.fromhex(value))


def test_the_layout_is_kafkas_protocol_types() -> None:
    key, value = encode_checkpoint(Checkpoint("g", "east.t", 3, 10, 7, "m"))
    # STRING: int16 length + UTF-8; INT32 / INT64 big-endian; value starts with version 0
    assert key == b"\x00\x01g" + b"\x00\x06east.t" + b"\x00\x00\x00\x03"
    assert value == b"\x00\x00" + (10).to_bytes(8, "big") + (7).to_bytes(8, "big") + b"\x00\x01m"
    key, value = encode_offset_sync(OffsetSync("t", 1, 2**40, 5))
    assert key == b"\x00\x01t\x00\x00\x00\x01"
    assert value == (2**40).to_bytes(8, "big") + (5).to_bytes(8, "big")


def test_an_unknown_checkpoint_version_is_refused_naming_it() -> None:
    key, value = encode_checkpoint(Checkpoint("g", "t", 0, 1, 1))
    with pytest.raises(MirrorRecordError, match=r"checkpoint value: version 1 is not known"):
        decode_checkpoint(key, b"\x00\x01" + value[2:])


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (b"\x00\x01g\x00\x01t\x00\x00", None, r"checkpoint key: partition needs 4 bytes"),
        (b"\x00\x05g", None, r"checkpoint key: group has length 5 but only 1 bytes are left"),
        (b"\xff\xffg", None, r"checkpoint key: group has length -1 \(null\)"),
        (b"\x00\x01\xff\x00\x01t\x00\x00\x00\x00", None, r"checkpoint key: group is not UTF-8"),
        (b"\x00\x01g\x00\x01t\x00\x00\x00\x00!", None, r"checkpoint key: 1 bytes left over"),
        (None, None, r"checkpoint key: null"),
        (
            b"\x00\x01g\x00\x01t\x00\x00\x00\x00",
            b"\x00\x00\x00",
            r"checkpoint value: upstream offset needs 8",
        ),
    ],
)
def test_a_malformed_checkpoint_is_refused_naming_the_field(
    key: bytes | None, value: bytes | None, message: str
) -> None:
    good = encode_checkpoint(Checkpoint("g", "t", 0, 1, 1))[1]
    with pytest.raises(MirrorRecordError, match=message):
        decode_checkpoint(key, good if value is None else value)


def test_a_malformed_offset_sync_is_refused_naming_the_field() -> None:
    key, value = encode_offset_sync(OffsetSync("t", 0, 1, 1))
    with pytest.raises(MirrorRecordError, match=r"offset sync value: downstream offset needs 8 bytes"):
        decode_offset_sync(key, value[:12])
    with pytest.raises(MirrorRecordError, match=r"offset sync value: 1 bytes left over"):
        decode_offset_sync(key, value + b"\x00")
    with pytest.raises(MirrorRecordError, match=r"offset sync value: null"):
        decode_offset_sync(key, None)


def test_what_mirrormaker2_cannot_write_is_not_encoded() -> None:
    with pytest.raises(
        MirrorRecordError, match=r"checkpoint group: 32768 bytes of UTF-8, a STRING holds at most 32767"
    ):
        encode_checkpoint(Checkpoint("g" * 32768, "t", 0, 1, 1))
    with pytest.raises(MirrorRecordError, match=r"offset sync partition: 2147483648 does not fit in 32 bits"):
        encode_offset_sync(OffsetSync("t", 2**31, 1, 1))


STRINGS = st.text(max_size=40)  # UTF-8 encodable (hypothesis leaves surrogates out)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)


@settings(max_examples=300, deadline=None)
@given(STRINGS, STRINGS, INT32, INT64, INT64, STRINGS)
def test_checkpoints_round_trip(
    group: str, topic: str, partition: int, up: int, down: int, meta: str
) -> None:
    checkpoint = Checkpoint(group, topic, partition, up, down, meta)
    key, value = encode_checkpoint(checkpoint)
    assert decode_checkpoint(key, value) == checkpoint
    assert len(key) == 2 + len(group.encode()) + 2 + len(topic.encode()) + 4
    assert len(value) == 2 + 8 + 8 + 2 + len(meta.encode())


@settings(max_examples=300, deadline=None)
@given(STRINGS, INT32, INT64, INT64)
def test_offset_syncs_round_trip(topic: str, partition: int, up: int, down: int) -> None:
    sync = OffsetSync(topic, partition, up, down)
    key, value = encode_offset_sync(sync)
    assert decode_offset_sync(key, value) == sync
    assert len(value) == 16


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=40), st.binary(max_size=40))
def test_any_bytes_decode_or_raise_the_codecs_error(key: bytes, value: bytes) -> None:
    for decode in (decode_checkpoint, decode_offset_sync):
        try:
            decoded = decode(key, value)
        except MirrorRecordError:
            continue
        # what decodes is exactly what encodes back
        encode = encode_checkpoint if isinstance(decoded, Checkpoint) else encode_offset_sync
        assert encode(decoded) == (key, value)  # type: ignore[arg-type]
