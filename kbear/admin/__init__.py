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
- ``_failover_cli``: ``kbear failover`` / ``kbear failback`` (the operator's trigger);
- ``_move``, ``_move_rules``, ``_move_state``, ``_move_watch``, ``_move_fleet``: moving a
  topic to another cluster (what ``kbear move`` runs: :func:`plan_move`,
  :func:`create_on_target`, :func:`apply_move`, and :class:`FleetWatch` over the
  fleets of ``kbear serve``).
"""

from kbear.admin._facade import RoutedAdminClient
from kbear.admin._failover_cli import DESCRIPTION as FAILOVER_DESCRIPTION
from kbear.admin._failover_cli import FailoverPlan, error_text, tcp_probe, unanswered
from kbear.admin._failover_cli import add_arguments as add_failover_arguments
from kbear.admin._failover_cli import apply as apply_failover
from kbear.admin._failover_cli import plan as plan_failover
from kbear.admin._failover_cli import run as run_failover
from kbear.admin._move import ApplyResult, MovePlan, apply_move, create_on_target, plan_move
from kbear.admin._move_fleet import FleetState, FleetWatch, service_directory

__all__ = [
    "FAILOVER_DESCRIPTION",
    "ApplyResult",
    "FailoverPlan",
    "FleetState",
    "FleetWatch",
    "MovePlan",
    "RoutedAdminClient",
    "add_failover_arguments",
    "apply_failover",
    "apply_move",
    "create_on_target",
    "error_text",
    "plan_failover",
    "plan_move",
    "run_failover",
    "service_directory",
    "tcp_probe",
    "unanswered",
]
