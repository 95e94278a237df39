"""Spark Kafka-connector options from kbear routes (pure Python, no pyspark needed).

Spark's Kafka connector (``spark-sql-kafka-0-10``) runs the Java Kafka client,
configured with ``kafka.``-prefixed Java property names; ``clusters.yaml``
holds librdkafka property names. :func:`translate_properties` maps one to the
other (:mod:`kbear.spark._translate`; the table is :data:`TRANSLATION_TABLE`, also in
docs/guides/spark.md).

Sources: librdkafka ``CONFIGURATION.md``; Apache Kafka's client configuration
reference (``security.protocol``, ``sasl.*``, ``ssl.*``, KIP-651 PEM stores);
Spark's ``KafkaSourceProvider`` for the refused options and their advice text.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kbear._identity import Client
from kbear._route import Route
from kbear._secrets import is_secret
from kbear.router import Router
from kbear.spark._translate import TRANSLATION_TABLE, SparkOptionsError, translate_properties

__all__ = [
    "FORBIDDEN_READ_OPTIONS",
    "FORBIDDEN_WRITE_OPTIONS",
    "TRANSLATION_TABLE",
    "SparkOptionsError",
    "checkpoint_location",
    "kafka_options",
    "route_topics",
    "translate_properties",
    "write_options",
]

log = logging.getLogger("kbear.spark")


# --------------------------------------------------------------------------- refused options

_AUTO_OFFSET_RESET_ADVICE = (
    "Kafka option 'auto.offset.reset' is not supported. Instead set the source option "
    "'startingOffsets' to 'earliest' or 'latest' to specify where to start. Structured Streaming "
    "manages which offsets are consumed internally, rather than relying on the kafkaConsumer to do "
    "it. This will ensure that no data is missed when new topics/partitions are dynamically "
    "subscribed. Note that 'startingOffsets' only applies when a new Streaming query is started, "
    "and that resuming will always pick up from where the query left off. See the docs for more details."
)

#: Source options refused, with Spark's own advice (``KafkaSourceProvider``) or kbear's.
FORBIDDEN_READ_OPTIONS: Mapping[str, str] = {
    "kafka.auto.offset.reset": _AUTO_OFFSET_RESET_ADVICE,
    "kafka.enable.auto.commit": "Kafka option 'enable.auto.commit' is not supported.",
    "kafka.interceptor.classes": "Kafka option 'interceptor.classes' is not supported.",
    "kafka.key.deserializer": (
        "Kafka option 'key.deserializer' is not supported as keys are deserialized as byte arrays "
        "with ByteArrayDeserializer. Use DataFrame operations to explicitly deserialize the keys."
    ),
    "kafka.value.deserializer": (
        "Kafka option 'value.deserializer' is not supported as values are deserialized as byte arrays "
        "with ByteArrayDeserializer. Use DataFrame operations to explicitly deserialize the values."
    ),
    "kafka.bootstrap.servers": "kbear sets 'kafka.bootstrap.servers' from the route (clusters.yaml).",
    "subscribe": "kbear sets 'subscribe' from the routed topics; pass them as topics=.",
    "subscribePattern": "kbear routes named topics only; 'subscribePattern' is not supported.",
    "assign": "kbear routes named topics only; 'assign' is not supported.",
}

#: Sink options refused, with Spark's own advice or kbear's.
FORBIDDEN_WRITE_OPTIONS: Mapping[str, str] = {
    "kafka.key.serializer": (
        "Kafka option 'key.serializer' is not supported as keys are serialized with ByteArraySerializer."
    ),
    "kafka.value.serializer": (
        "Kafka option 'value.serializer' is not supported as value are serialized with ByteArraySerializer."
    ),
    "kafka.bootstrap.servers": "kbear sets 'kafka.bootstrap.servers' from the route (clusters.yaml).",
    "topic": "kbear sets 'topic' from the route; pass it as topic=.",
}


def check_options(options: Mapping[str, Any], forbidden: Mapping[str, str]) -> None:
    """Refuse ``options`` keys Spark's connector (or kbear) forbids (case-insensitive keys).

    Raises:
        SparkOptionsError: one line per refused key, with the advice.
    """
    lowered = {k.lower(): v for k, v in forbidden.items()}
    problems = [f"{key}: {lowered[key.lower()]}" for key in options if key.lower() in lowered]
    if problems:
        raise SparkOptionsError(problems)


# --------------------------------------------------------------------------- routing


def _router(router: Router | None, config: str | None, client: Client | None = None) -> Router:
    if router is not None:
        return router
    if config is None:
        raise ValueError("pass router= (a kbear.Router) or config= (a configuration directory)")
    # a directory, or a meta-service URL asked on behalf of ``client``
    return Router.from_source(config, client=client)


def route_topics(
    topics: str | Iterable[str],
    *,
    group: str | None = None,
    client: Client | None = None,
    router: Router,
) -> dict[str, Route]:
    """Logical topic -> :class:`~kbear.Route` (consumer lookups with ``group``, else producer).

    Args:
        topics: a topic or topics (comma-separated string allowed, as Spark's ``subscribe``).

    Raises:
        NoRouteError: a topic has no route.
    """
    names = topic_names(topics)
    if not names:
        raise ValueError("no topics given")
    return {t: router.route(t, group, client) for t in names}


def same_route(a: Route, b: Route) -> bool:
    """Whether two routes read the same place: cluster and physical topic.

    Unlike the switch engine's :func:`kbear._switch.same_route`, the cluster's client
    properties do not count: a change of them (``bootstrap.servers``, a rotated
    credential in ``clusters.yaml``) reaches the same messages, so it is no move
    (nothing drained, no offsets translated). The kbear source reads each
    micro-batch with the properties then in force; :func:`~kbear.spark.run_query`'s
    supervisor starts its next generation where the last one committed, Spark's
    connector keeping the properties its query started with.
    """
    return (a.cluster_id, a.topic) == (b.cluster_id, b.topic)


def topic_names(topics: str | Iterable[str]) -> list[str]:
    """Topic names, in order, once each: an iterable, or a comma-separated ``str`` (blanks trimmed)."""
    names = [t.strip() for t in topics.split(",")] if isinstance(topics, str) else [str(t) for t in topics]
    return [t for t in dict.fromkeys(names) if t]


def source_options(routes: Sequence[Route], group: str | None, opts: Mapping[str, str]) -> dict[str, str]:
    """Options of Spark's Kafka source over ``routes`` (all on one cluster): the cluster's
    translated properties, ``subscribe`` (the physical topics), ``groupIdPrefix``
    (``<group or spark-kafka-source>-kbear-<cluster>``: distinct per cluster, never
    shared; not with ``kafka.group.id`` in ``opts``), then ``opts``."""
    cluster = routes[0].cluster_id
    out = translate_properties(routes[0].properties, cluster=cluster)
    out["subscribe"] = ",".join(dict.fromkeys(r.topic for r in routes))
    if "kafka.group.id" not in opts:
        out["groupIdPrefix"] = f"{group or 'spark-kafka-source'}-kbear-{cluster}"
    out.update({k: str(v) for k, v in opts.items()})
    return out


def kafka_options(
    topics: str | Iterable[str],
    *,
    group: str | None = None,
    client: Client | None = None,
    router: Router | None = None,
    config: str | None = None,
    **extra: str,
) -> dict[str, str]:
    """Options for ``spark.readStream.format("kafka").options(**...)`` of routed topics.

    Args:
        topics: logical topic names (an iterable, or a comma-separated ``str``).
        group: the consumer group for consumer lookups (CRRL
            ``consumerGroup.*`` factors); None makes producer lookups. Also the
            start of ``groupIdPrefix``.
        client: who reads (``client.*`` factors); anonymous when None.
        router: a :class:`~kbear.Router`; or ``config``, a configuration directory.
        **extra: more source options, passed on as given (``startingOffsets``,
            ``maxOffsetsPerTrigger``, ``kafka.*``...). Python keywords cannot
            hold dots: pass those with ``**{"kafka.fetch.max.bytes": "..."}``.

    Returns:
        ``str -> str``: ``kafka.bootstrap.servers``, ``subscribe`` (the
        physical, remapped topic names, comma-separated), ``groupIdPrefix``
        (``<group or spark-kafka-source>-kbear-<cluster>``), the cluster's
        translated connection settings (:func:`translate_properties`, secrets
        included) and ``extra``. Spark's ``topic`` column then shows the
        physical names; :func:`kbear.spark.read_stream` maps them back.

    Raises:
        SparkOptionsError: the topics route to more than one cluster (use
            :func:`kbear.spark.read_stream`), an ``extra`` key is forbidden
            (:data:`FORBIDDEN_READ_OPTIONS`, with Spark's advice), or a
            cluster property cannot be translated.
        NoRouteError: a topic has no route.
        ConfigError: ``config`` is an invalid configuration directory.
    """
    check_options(extra, FORBIDDEN_READ_OPTIONS)
    routes = route_topics(topics, group=group, client=client, router=_router(router, config, client))
    clusters = sorted({r.cluster_id for r in routes.values()})
    if len(clusters) > 1:
        where = ", ".join(f"{t} -> {r.cluster_id}" for t, r in routes.items())
        raise SparkOptionsError(
            [
                f"the topics route to {len(clusters)} clusters ({where}); one Kafka source reads "
                "one cluster: use kbear.spark.read_stream(), which unions one source per cluster"
            ]
        )
    return source_options(list(routes.values()), group, extra)


def write_options(
    topic: str,
    *,
    client: Client | None = None,
    router: Router | None = None,
    config: str | None = None,
    **extra: str,
) -> dict[str, str]:
    """Options for ``df.writeStream.format("kafka").options(**...)`` to one routed topic.

    Args:
        topic: the logical topic written to (producer lookup).
        client: who writes (``client.*`` factors); anonymous when None.
        router: a :class:`~kbear.Router`; or ``config``, a configuration directory.
        **extra: more sink options, passed on (``kafka.*``, ``checkpointLocation``...).

    Returns:
        ``str -> str``: ``kafka.bootstrap.servers``, ``topic`` (the physical
        name), the translated connection settings and ``extra``. Rows must not
        carry a ``topic`` column that disagrees (Spark's column wins over
        the option); drop it first.

    Raises:
        SparkOptionsError: an ``extra`` key is forbidden
            (:data:`FORBIDDEN_WRITE_OPTIONS`) or a property cannot be translated.
        NoRouteError: the topic has no route.
    """
    check_options(extra, FORBIDDEN_WRITE_OPTIONS)
    route = _router(router, config, client).route_producer(topic, client)
    out = translate_properties(route.properties, cluster=route.cluster_id)
    out["topic"] = route.topic
    out.update({k: str(v) for k, v in extra.items()})
    return out


_UNSAFE_PATH = re.compile(r"[^A-Za-z0-9._-]+")


def checkpoint_location(
    base: str,
    topics: str | Iterable[str],
    *,
    group: str | None = None,
    client: Client | None = None,
    router: Router | None = None,
    config: str | None = None,
) -> str:
    """A checkpoint path that changes when the topics' routes change.

    A Kafka source's checkpoint records offsets of one cluster; restarted after
    a route change it would resume those offsets on another cluster (wrong
    data, or ``OffsetOutOfRange``). This path names the clusters and physical
    topics the routes give, so a restarted query after a change starts a fresh
    checkpoint under ``base``, while an unchanged route keeps its checkpoint.

    Args:
        base: directory (or URI, e.g. ``s3a://bucket/ckpt``) under which checkpoints live.
        topics, group, client, router, config: as :func:`kafka_options`.

    Returns:
        ``f"{base}/{cluster}[+{cluster}...]-{digest}"``: clusters sorted, and a
        12-hex-digit SHA-256 of the sorted (topic, cluster, physical topic) triples.

    Raises:
        NoRouteError: a topic has no route.
    """
    routes = route_topics(topics, group=group, client=client, router=_router(router, config, client))
    triples = sorted((t, r.cluster_id, r.topic) for t, r in routes.items())
    digest = hashlib.sha256(repr(triples).encode()).hexdigest()[:12]
    clusters = "+".join(sorted({_UNSAFE_PATH.sub("_", r.cluster_id) for r in routes.values()}))
    return f"{base.rstrip('/')}/{clusters}-{digest}"


def is_secret_option(key: str) -> bool:
    """Whether a Spark option holds a secret: :func:`kbear._secrets.is_secret` keys plus
    ``kafka.ssl.keystore.key`` (a private key in PEM)."""
    return is_secret(key) or key.lower().endswith("keystore.key")


def describe_options(options: Mapping[str, str]) -> dict[str, str]:
    """``options`` with secret values (:func:`is_secret_option`) replaced by ``***``,
    for logs and error messages."""
    return {k: ("***" if is_secret_option(k) else v) for k, v in options.items()}
