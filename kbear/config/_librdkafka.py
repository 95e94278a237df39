"""Asking librdkafka which cluster meta keys are client properties (private).

A cluster's meta (``clusters.yaml``) holds the client properties of every client
of that cluster, and may hold keys that are not Kafka client properties at all
(KBear's own files carry ``zookeeper.connect``). librdkafka is the judge: each
key is set, with its value, on a fresh configuration object through
confluent-kafka's ``Producer`` constructor, followed by a sentinel property with
a value librdkafka always refuses. The constructor therefore fails on the first
error in order:

- ``No such configuration property: "<key>"``: the key is not a client
  property; it stays meta and is never passed to confluent-kafka;
- the same refusal whatever the value (``sasl.jaas.config``:
  ``Java JAAS configuration is not supported``): a Java client property that
  librdkafka knows only to refuse; it stays meta too (a ``clusters.yaml``
  shared with KBear's Java clients may carry it);
- another error on the key (``Invalid value``, ``outside allowed range``):
  librdkafka refuses the value, a configuration error naming the key;
- the sentinel's error: librdkafka accepts the key and value.

No client handle is ever created (no thread, no socket): one probe cost 29
microseconds per key on a machine loaded by other jobs, against 2.3 ms for
building a real Producer handle (``bench/librdkafka_probe.py``); answers are
cached per (key, value). What librdkafka
only checks when a handle is created (a missing ``ssl.ca.location`` file,
property combinations such as idempotence with ``acks=0``) is not checked here:
it still fails when the first client of that cluster is built.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache

# librdkafka's own client class, bound at import: a name rebound later in
# ``confluent_kafka`` (a test harness's stand-in) must not answer the probe.
from confluent_kafka import KafkaException, Producer

from kbear._secrets import REDACTED, is_secret

# A property every librdkafka knows, with a value it always refuses.
_SENTINEL = ("batch.num.messages", "kbear-probe-not-an-integer")
_UNKNOWN = "No such configuration property"


@lru_cache(maxsize=4096)
def _probe(key: str, value: str) -> str | None:
    """librdkafka's complaint about ``key: value`` on its own; None when accepted,
    ``_UNKNOWN`` when the key is not a property."""
    try:
        Producer({key: value, _SENTINEL[0]: _SENTINEL[1]})
    except KafkaException as exc:
        message = str(exc.args[0].str() if exc.args else exc)
    except (TypeError, ValueError) as exc:  # confluent-kafka's own checks of a few keys
        message = str(exc)
    else:  # cannot happen with the sentinel; a handle was built, let it go
        return None
    if _SENTINEL[0] in message and key != _SENTINEL[0]:
        return None
    if message.startswith(_UNKNOWN):
        return _UNKNOWN
    return message.strip()


@lru_cache(maxsize=4096)
def property_kind(key: str) -> str:
    """``"client"``: librdkafka knows ``key`` as a client configuration property
    (``bootstrap.servers``, ``acks``, ``sasl.password``); ``"unknown"``: it does
    not (``zookeeper.connect``); ``"unsupported"``: it knows it only to refuse
    every value (Java-only properties such as ``sasl.jaas.config``)."""
    empty = _probe(key, "")
    if empty == _UNKNOWN:
        return "unknown"
    if empty is not None and empty == _probe(key, "kbear-probe") and "configuration property" not in empty:
        return "unsupported"
    return "client"


def is_client_property(key: str) -> bool:
    """Whether ``key`` is passed to librdkafka (:func:`property_kind` is ``"client"``)."""
    return property_kind(key) == "client"


def client_properties(meta: Mapping[str, str]) -> dict[str, str]:
    """The entries of a cluster's ``meta`` that librdkafka knows as client properties,
    in their order; the others (meta only) are left out."""
    return {k: v for k, v in meta.items() if is_client_property(k)}


def meta_only_keys(meta: Mapping[str, str]) -> list[str]:
    """The keys of ``meta`` that are not client properties, in their order."""
    return [k for k in meta if not is_client_property(k)]


def refused_value(key: str, value: str) -> str | None:
    """librdkafka's reason for refusing ``value`` for the client property ``key``,
    or None when it accepts it (or ``key`` is not a client property). The value of
    a secret key (:func:`kbear._secrets.is_secret`) never appears in the reason."""
    if not is_client_property(key):
        return None
    # A secret's value is not kept in the cache (a rotated password would stay alive there).
    reason = _probe.__wrapped__(key, value) if is_secret(key) else _probe(key, value)
    if reason is None or reason == _UNKNOWN:
        return None
    if is_secret(key) and value:
        reason = reason.replace(value, REDACTED)
    return reason
