"""RoutedConsumer: a drop-in ``confluent_kafka.Consumer`` whose topics are routed by CRRL.

The package's parts (each module's docstring says what it is responsible for):

- ``_facade``: :class:`RoutedConsumer`, which builds the parts below and hands
  each its collaborators (never itself): the shared state
  (``_subscription.ReadState``), the registry, the rebalance state, the switch
  driver, the move guard, the lock, callables; its methods delegate to them;
- ``_polling``: ``poll`` and ``consume`` over the clusters in turn, and the fast
  paths bound over them;
- ``_subscribing``: subscribe / unsubscribe, patterns, the work between calls,
  applying a reload and the switches;
- ``_partitions``: the calls addressed to partitions (commit, seek, assign...),
  each sent to the cluster of its topic;
- ``_placing``: the route of a topic, the client of a cluster (built on first
  use, handed over when its properties change), partitions split by cluster;
- ``_assigned``: a manual assignment following route changes;
- ``_deserializing``: :class:`RoutedDeserializingConsumer`, confluent-kafka's
  ``DeserializingConsumer`` over a RoutedConsumer (deserializers per cluster);
- ``_cluster``: the per-cluster confluent-kafka clients and the logical/physical
  topic names on each;
- ``_subscription``: the subscription state (none / topics / pattern / assigned);
- ``_rebalance``: the wrapping of rebalance callbacks (logical names, start
  offsets after a move, the commit before partitions leave, resuming at this
  member's positions when that commit was refused);
- ``_guard``: the commits during a move and the pause after a commit the group
  refused while it rebalances (group moves without duplicate storms);
- ``_mover``: the driver of the switch engine (:mod:`kbear._switch`): route
  changes in, probes in the background, switches out;
- ``_turns``: ``poll``/``consume`` over several clusters with nothing to
  translate: compiled (``kbear._cdispatch``) or pure-Python turn taking;
- ``_manual``: :class:`AssignedConsumer`, the routed consumer under
  :class:`~kbear.ClientBalancedConsumer` (exported with what it takes and
  gives: :class:`ClusterRegistry`, ``SwitchedHook``; not re-exported by ``kbear``);
- message-level acknowledgement (``kbear.ack.mode=individual``):
  ``_individual`` (the settings' check; the layer: ``ack``, ``ack_cumulative``,
  ``nack``, ``reconsume_later``, letters, stores; the refusals without it) and
  ``_delivering`` (its poll/consume: tracking, redelivery, holds; the state both
  share), ``_acks`` (the acknowledged prefix),
  ``_redelivery`` (backoff, schedule, ack timer), ``_letters`` (retry and
  dead-letter topics), ``_chunks`` (joining chunked values); the last four do no I/O
  except ``_letters.LetterSender``.
"""

from kbear.consumer._assigned import SwitchedHook
from kbear.consumer._cluster import ClusterRegistry
from kbear.consumer._deserializing import RoutedDeserializingConsumer
from kbear.consumer._facade import RoutedConsumer
from kbear.consumer._manual import AssignedConsumer

__all__ = [
    "AssignedConsumer",
    "ClusterRegistry",
    "RoutedConsumer",
    "RoutedDeserializingConsumer",
    "SwitchedHook",
]
