"""RoutedProducer: a drop-in ``confluent_kafka.Producer`` whose topics are routed by CRRL.

The package's parts:

- ``_facade``: :class:`RoutedProducer`, routing, produce, poll/flush, moves;
- ``_transactions``: the transactional API (a transaction spans one cluster);
- ``_cluster``: one cluster's client, the one-cluster proof of the fast path;
- ``_dispatch``: produce() over several clusters: the compiled dispatcher
  (``kbear._cdispatch``, from kbear/_dispatch.c, see kbear._compiled) or the
  pure-Python one;
- ``_serializing``: :class:`RoutedSerializingProducer`, confluent-kafka's
  ``SerializingProducer`` over a RoutedProducer (serializers per cluster).
"""

from kbear.producer._facade import RoutedProducer
from kbear.producer._serializing import RoutedSerializingProducer

__all__ = ["RoutedProducer", "RoutedSerializingProducer"]
