"""kbear.admin: :class:`RoutedAdminClient`, confluent-kafka's AdminClient over the
clusters the routes name.

- ``_facade``: construction, one AdminClient per cluster, cluster-wide calls
  (metadata, group listings, cluster description, ACLs, SCRAM, elections), poll, close;
- ``_topics``: topic-addressed calls (create/delete/describe topics, partitions,
  configs, offsets, records);
- ``_groups``: group-addressed calls (group offsets, describe/delete groups);
- ``_names``: routes of names and logical names of a cluster's topics (no I/O);
- ``_split``: one request per cluster, one future per key;
- ``_futures``: application futures fed by the clusters' futures;
- ``_failover_cli``: ``kbear failover`` / ``kbear failback`` (the operator's trigger).
"""

from kbear.admin._facade import RoutedAdminClient
from kbear.admin._failover_cli import DESCRIPTION as FAILOVER_DESCRIPTION
from kbear.admin._failover_cli import FailoverPlan, tcp_probe
from kbear.admin._failover_cli import add_arguments as add_failover_arguments
from kbear.admin._failover_cli import apply as apply_failover
from kbear.admin._failover_cli import plan as plan_failover
from kbear.admin._failover_cli import run as run_failover

__all__ = [
    "FAILOVER_DESCRIPTION",
    "FailoverPlan",
    "RoutedAdminClient",
    "add_failover_arguments",
    "apply_failover",
    "plan_failover",
    "run_failover",
    "tcp_probe",
]
