"""The client-balanced consumer: partitions assigned by the application (or by a
modulo over a fixed fleet), not by a group coordinator; no group join.

The package's parts (each module's docstring says what it is responsible for):

- ``_assignment``: partition keys ``cluster:topic:partition``, the modulo
  assignment, the reconciliation plan (no I/O);
- ``_consumer``: :class:`ClientBalancedConsumer`, its topics, registered
  partitions, periodic reconciliation and the confluent-kafka reading calls;
- ``_calls``: the confluent-kafka reading and committing calls, handed to the
  routed consumer underneath (:class:`kbear.consumer.AssignedConsumer`, a manual
  assignment whose topics follow route changes through the switch engine);
- ``_layout``: the partition layout of the balanced topics and partition states;
- ``_ownership``: the ownership report of each node and its analysis (overlaps,
  orphans, duplicate ``node_id``...; no I/O);
- ``_registry``: sending the reports to the registry topic;
- ``_report``: reading them back for ``kbear assignments`` (:func:`run_assignments`).
"""

from kbear.balanced._consumer import ClientBalancedConsumer, Reconciliation
from kbear.balanced._layout import PartitionState
from kbear.balanced._report import run_assignments

__all__ = ["ClientBalancedConsumer", "PartitionState", "Reconciliation", "run_assignments"]
