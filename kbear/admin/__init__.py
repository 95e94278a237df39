"""kbear.admin: :class:`RoutedAdminClient`, confluent-kafka's AdminClient over the
clusters the routes name.

- ``_facade``: construction, one AdminClient per cluster, cluster-wide calls
  (metadata, group listings, cluster description, ACLs, SCRAM, elections), poll, close;
- ``_topics``: topic-addressed calls (create/delete/describe topics, partitions,
  configs, offsets, records);
- ``_groups``: group-addressed calls (group offsets, describe/delete groups);
- ``_names``: routes of names and logical names of a cluster's topics (no I/O);
- ``_split``: one request per cluster, one future per key;
- ``_futures``: application futures fed by the clusters' futures.
"""

from kbear.admin._facade import RoutedAdminClient

__all__ = ["RoutedAdminClient"]
