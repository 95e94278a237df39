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

from kbear.mirror._codec import CHECKPOINT_VERSION as CHECKPOINT_VERSION
from kbear.mirror._codec import Checkpoint as Checkpoint
from kbear.mirror._codec import MirrorRecordError as MirrorRecordError
from kbear.mirror._codec import OffsetSync as OffsetSync
from kbear.mirror._codec import decode_checkpoint as decode_checkpoint
from kbear.mirror._codec import decode_offset_sync as decode_offset_sync
from kbear.mirror._codec import encode_checkpoint as encode_checkpoint
from kbear.mirror._codec import encode_offset_sync as encode_offset_sync
from kbear.mirror._reading import MirrorView as MirrorView
from kbear.mirror._reading import checkpoints_topic as checkpoints_topic
from kbear.mirror._reading import offset_syncs_topic as offset_syncs_topic
from kbear.mirror._reading import read_mirror as read_mirror
from kbear.mirror._reading import read_records as read_records
from kbear.mirror._translate import CheckpointIndex as CheckpointIndex
from kbear.mirror._translate import OffsetSyncIndex as OffsetSyncIndex
from kbear.mirror._translate import StartSource as StartSource
from kbear.mirror._translate import TranslatedStart as TranslatedStart
from kbear.mirror._translate import translate_group as translate_group
