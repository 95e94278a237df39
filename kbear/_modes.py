"""The values of the enumerated ``kbear.*`` keys: switch modes and starts, ack modes.

Defined apart from the model of :mod:`kbear.settings` (which re-exports them, the
public path) so that the switch engine, which decides with them, needs no pydantic.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["SPARK_SWITCH_START", "SPARK_SWITCH_STARTS", "AckMode", "SwitchMode", "SwitchStart"]


class SwitchMode(StrEnum):
    """``kbear.switch.mode``: how a consumer follows a topic to another cluster.

    ``drain`` (default): read the old cluster until the group has committed it
    at its end, then switch; ``immediate``: switch at once (unread messages stay
    behind). A ``StrEnum``: ``SwitchMode.DRAIN == "drain"``.
    """

    DRAIN = "drain"
    IMMEDIATE = "immediate"


class SwitchStart(StrEnum):
    """``kbear.switch.start``: where a moved topic starts on its new cluster.

    ``committed`` (default for the clients): the group's committed offsets
    there, else ``auto.offset.reset``; ``earliest`` / ``latest``;
    ``timestamp``: the first offset at or after the earliest last-read
    timestamp on the old cluster, less ``kbear.switch.timestamp.margin.ms``;
    ``translated``: the group's offsets on the old cluster translated to the
    new one through the old cluster's mirror (``kbear.mirror`` in
    ``clusters.yaml``: MirrorMaker 2's checkpoints and offset syncs; the same
    offsets for ``identical``), where no translation exists the committed
    offsets there (docs/concepts/failover.md).
    The Spark source takes :data:`SPARK_SWITCH_STARTS` only. A ``StrEnum``:
    ``SwitchStart.COMMITTED == "committed"``.
    """

    COMMITTED = "committed"
    EARLIEST = "earliest"
    LATEST = "latest"
    TIMESTAMP = "timestamp"
    TRANSLATED = "translated"


class AckMode(StrEnum):
    """``kbear.ack.mode``: how a RoutedConsumer's progress is committed.

    ``offset`` (default): as confluent-kafka (offsets stored and committed per
    partition; ``ack``/``nack`` are refused); ``individual``: message-level
    acknowledgement (:meth:`~kbear.RoutedConsumer.ack`, ``nack``,
    ``reconsume_later``): per partition only the contiguous prefix of
    acknowledged offsets is committed (see
    docs/concepts/acknowledgement.md). A ``StrEnum``: ``AckMode.OFFSET == "offset"``.
    """

    OFFSET = "offset"
    INDIVIDUAL = "individual"


#: ``kbear.switch.start`` of the Spark source when the option is absent. Not the
#: model's default (``committed``): the source keeps its positions in Spark's
#: checkpoint and reads with no consumer group, so there are no group commits on
#: the new cluster to start from; ``earliest`` loses nothing.
SPARK_SWITCH_START = SwitchStart.EARLIEST
#: the ``kbear.switch.start`` values the Spark source takes (``committed`` and
#: ``timestamp`` need a group's commits and a consumer's last-read timestamps)
SPARK_SWITCH_STARTS = (SwitchStart.EARLIEST, SwitchStart.LATEST)
