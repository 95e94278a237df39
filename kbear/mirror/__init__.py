"""MirrorMaker 2 for kbear: its records byte for byte, and a group's offsets
translated from a mirror's source to its target.

- :mod:`kbear.mirror._codec` (pure): checkpoints and offset syncs decoded and
  encoded as MirrorMaker 2 writes them (:func:`decode_checkpoint`, ...).
- :mod:`kbear.mirror._translate` (pure): where a group starts on the target,
  conservative as MirrorMaker 2 is since Kafka 3.5 (:func:`translate_group`).
- :mod:`kbear.mirror._reading` (blocking I/O, bounded): the two topics read from
  the clusters (:func:`read_mirror`).

See docs/concepts/failover.md.
"""

from kbear.mirror._codec import (
    CHECKPOINT_VERSION,
    Checkpoint,
    MirrorRecordError,
    OffsetSync,
    decode_checkpoint,
    decode_offset_sync,
    encode_checkpoint,
    encode_offset_sync,
)
from kbear.mirror._reading import MirrorView, checkpoints_topic, offset_syncs_topic, read_mirror, read_records
from kbear.mirror._translate import (
    CheckpointIndex,
    OffsetSyncIndex,
    StartSource,
    TranslatedStart,
    translate_group,
)

__all__ = [
    "CHECKPOINT_VERSION",
    "Checkpoint",
    "CheckpointIndex",
    "MirrorRecordError",
    "MirrorView",
    "OffsetSync",
    "OffsetSyncIndex",
    "StartSource",
    "TranslatedStart",
    "checkpoints_topic",
    "decode_checkpoint",
    "decode_offset_sync",
    "encode_checkpoint",
    "encode_offset_sync",
    "offset_syncs_topic",
    "read_mirror",
    "read_records",
    "translate_group",
]
