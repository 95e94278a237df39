"""Spark Kafka-connector options from kbear routes (pure Python, no pyspark needed).

Spark's Kafka connector (``spark-sql-kafka-0-10``) runs the Java Kafka client,
configured with ``kafka.``-prefixed Java property names; ``clusters.yaml``
holds librdkafka property names. :func:`translate_properties` maps one to the
other (the table is :data:`TRANSLATION_TABLE`, also in the README, "Spark").

Sources: librdkafka ``CONFIGURATION.md``; Apache Kafka's client configuration
reference (``security.protocol``, ``sasl.*``, ``ssl.*``, KIP-651 PEM stores);
Spark's ``KafkaSourceProvider`` for the refused options and their advice text.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from kbear._secrets import is_secret
from kbear.router import Client, Route, Router

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


class SparkOptionsError(ValueError):
    """Spark options kbear cannot build or will not pass on.

    Raised for an untranslatable cluster property, an option Spark's Kafka
    connector forbids, or topics spread over several clusters where one cluster
    is required. The message names keys, clusters and topics, never a secret value.

    Attributes:
        problems: one line per problem.
    """

    def __init__(self, problems: Iterable[str]) -> None:
        self.problems = list(problems)
        super().__init__("; ".join(self.problems))

    def __reduce__(self) -> tuple[type[SparkOptionsError], tuple[list[str]]]:
        return type(self), (self.problems,)


# --------------------------------------------------------------------------- translation

_PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
_SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
_OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
_KRB_MODULE = "com.sun.security.auth.module.Krb5LoginModule"
_OAUTH_HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"

#: librdkafka property -> what the Java client gets (for the docs; the code is below).
TRANSLATION_TABLE: tuple[tuple[str, str], ...] = (
    ("bootstrap.servers", "kafka.bootstrap.servers"),
    ("security.protocol", "kafka.security.protocol (upper-cased)"),
    ("sasl.mechanism / sasl.mechanisms", "kafka.sasl.mechanism"),
    (
        "sasl.username + sasl.password",
        f"kafka.sasl.jaas.config: {_PLAIN_MODULE} (PLAIN) or {_SCRAM_MODULE} (SCRAM-SHA-256/512)",
    ),
    (
        "sasl.oauthbearer.method=oidc + sasl.oauthbearer.client.id/.client.secret/.scope",
        f"kafka.sasl.jaas.config ({_OAUTH_MODULE}), kafka.sasl.login.callback.handler.class",
    ),
    ("sasl.oauthbearer.token.endpoint.url", "kafka.sasl.oauthbearer.token.endpoint.url"),
    ("sasl.kerberos.service.name", "kafka.sasl.kerberos.service.name"),
    ("sasl.kerberos.keytab + sasl.kerberos.principal", f"kafka.sasl.jaas.config ({_KRB_MODULE})"),
    ("ssl.ca.location (PEM file)", "kafka.ssl.truststore.type=PEM, kafka.ssl.truststore.location"),
    ("ssl.ca.location=probe", "nothing (the JVM's default truststore)"),
    ("ssl.ca.pem", "kafka.ssl.truststore.type=PEM, kafka.ssl.truststore.certificates"),
    (
        "ssl.certificate.location + ssl.key.location (PEM files, key in PKCS#8)",
        "kafka.ssl.keystore.type=PEM, kafka.ssl.keystore.certificate.chain, kafka.ssl.keystore.key "
        "(the files' content, read when the options are built)",
    ),
    (
        "ssl.certificate.pem + ssl.key.pem",
        "kafka.ssl.keystore.type=PEM, kafka.ssl.keystore.certificate.chain, kafka.ssl.keystore.key",
    ),
    ("ssl.key.password", "kafka.ssl.key.password"),
    (
        "ssl.keystore.location + ssl.keystore.password (PKCS#12)",
        "kafka.ssl.keystore.type=PKCS12, kafka.ssl.keystore.location, kafka.ssl.keystore.password",
    ),
    ("ssl.endpoint.identification.algorithm", "same key; librdkafka 'none' becomes '' (disabled)"),
    (
        "client.id, client.dns.lookup, request.timeout.ms, metadata.max.age.ms, "
        "reconnect.backoff.ms, reconnect.backoff.max.ms, retry.backoff.ms, "
        "socket.connection.setup.timeout.ms, connections.max.idle.ms",
        "same key with the kafka. prefix",
    ),
    (
        "debug, log_level, statistics.interval.ms, api.version.*, broker.version.fallback, "
        "socket.keepalive.enable, socket.nagle.disable, topic.metadata.refresh.interval.ms, "
        "log.connection.close, test.mock.*",
        "skipped (librdkafka-only tuning and logging)",
    ),
    ("anything else", "SparkOptionsError naming the property (never its value)"),
)

_SAME_NAME = frozenset(
    {
        "client.id",
        "client.dns.lookup",
        "request.timeout.ms",
        "metadata.max.age.ms",
        "reconnect.backoff.ms",
        "reconnect.backoff.max.ms",
        "retry.backoff.ms",
        "socket.connection.setup.timeout.ms",
        "connections.max.idle.ms",
    }
)
_SKIPPED = frozenset(
    {
        "debug",
        "log_level",
        "statistics.interval.ms",
        "api.version.request",
        "api.version.request.timeout.ms",
        "api.version.fallback.ms",
        "broker.version.fallback",
        "socket.keepalive.enable",
        "socket.nagle.disable",
        "topic.metadata.refresh.interval.ms",
        "log.connection.close",
    }
)
# Consumed by the rules below (not "unknown").
_HANDLED = frozenset(
    {
        "bootstrap.servers",
        "security.protocol",
        "sasl.mechanism",
        "sasl.mechanisms",
        "sasl.username",
        "sasl.password",
        "sasl.oauthbearer.method",
        "sasl.oauthbearer.client.id",
        "sasl.oauthbearer.client.secret",
        "sasl.oauthbearer.scope",
        "sasl.oauthbearer.token.endpoint.url",
        "sasl.kerberos.service.name",
        "sasl.kerberos.keytab",
        "sasl.kerberos.principal",
        "ssl.ca.location",
        "ssl.ca.pem",
        "ssl.certificate.location",
        "ssl.key.location",
        "ssl.certificate.pem",
        "ssl.key.pem",
        "ssl.key.password",
        "ssl.keystore.location",
        "ssl.keystore.password",
        "ssl.endpoint.identification.algorithm",
    }
)
_PKCS8 = re.compile(r"-----BEGIN (ENCRYPTED )?PRIVATE KEY-----")


def _jaas_quote(value: str) -> str:
    # JAAS values are read by java.io.StreamTokenizer: backslash escapes inside "...".
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _jaas(module: str, **options: str) -> str:
    body = " ".join(f"{k}={_jaas_quote(v)}" for k, v in options.items())
    return f"{module} required {body};" if body else f"{module} required;"


def _read_pem(path: str, what: str, cluster: str, problems: list[str]) -> str | None:
    try:
        return Path(path).read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as exc:
        problems.append(f"cluster '{cluster}': cannot read {what} '{path}': {type(exc).__name__}")
        return None


def translate_properties(properties: Mapping[str, str], *, cluster: str = "?") -> dict[str, str]:
    """The Java-client ``kafka.*`` Spark options for a cluster's librdkafka properties.

    Args:
        properties: librdkafka properties (``clusters.yaml`` meta of one
            cluster, i.e. ``Route.properties``), ``bootstrap.servers`` included.
        cluster: the cluster id, for error messages.

    Returns:
        ``{"kafka.bootstrap.servers": ..., "kafka.security.protocol": ..., ...}``
        (``str -> str``), secrets included (e.g. ``kafka.sasl.jaas.config``):
        hand it to Spark, do not log it (:func:`kbear._secrets.redact` hides them).
        The mapping is :data:`TRANSLATION_TABLE`; in short:

        ========================================  =================================================
        librdkafka                                Spark option (Java client)
        ========================================  =================================================
        bootstrap.servers                         kafka.bootstrap.servers
        security.protocol                         kafka.security.protocol (upper-cased)
        sasl.mechanism(s)                         kafka.sasl.mechanism
        sasl.username + sasl.password             kafka.sasl.jaas.config (PlainLoginModule for
                                                  PLAIN, ScramLoginModule for SCRAM-SHA-256/512)
        ssl.ca.location (PEM file)                kafka.ssl.truststore.type=PEM + .location
        ssl.ca.pem                                kafka.ssl.truststore.type=PEM + .certificates
        ssl.certificate.* + ssl.key.* (PKCS#8)    kafka.ssl.keystore.type=PEM +
                                                  .certificate.chain + .key (PEM content)
        ssl.keystore.location/.password           kafka.ssl.keystore.type=PKCS12 + same
        ssl.key.password                          kafka.ssl.key.password
        ssl.endpoint.identification.algorithm     same ('none' becomes '')
        ========================================  =================================================

        ``ssl.certificate.location`` and ``ssl.key.location`` are read here (the
        driver) and passed as PEM content.

    Raises:
        SparkOptionsError: a property has no Java equivalent (e.g.
            ``ssl.cipher.suites``, ``enable.ssl.certificate.verification``),
            a SASL mechanism lacks its credentials, a PEM file is unreadable or
            a private key is not PKCS#8; every problem is listed, with
            property names only.
    """
    props = {k: str(v) for k, v in properties.items()}
    out: dict[str, str] = {}
    problems: list[str] = []
    for key, value in props.items():
        if key in _SAME_NAME:
            out[f"kafka.{key}"] = value
        elif key in _SKIPPED or key.startswith("test.mock."):
            log.debug("cluster %s: librdkafka property %s has no Java equivalent; skipped", cluster, key)
        elif key not in _HANDLED:
            problems.append(
                f"cluster '{cluster}': librdkafka property '{key}' has no Java Kafka client "
                "equivalent kbear knows (see kbear.spark.TRANSLATION_TABLE); pass the Java "
                "setting yourself as a 'kafka.*' option and remove it from clusters.yaml for Spark"
            )
    if "bootstrap.servers" in props:
        out["kafka.bootstrap.servers"] = props["bootstrap.servers"]
    protocol = props.get("security.protocol", "").upper()
    if protocol:
        out["kafka.security.protocol"] = protocol
    mechanism = props.get("sasl.mechanism", props.get("sasl.mechanisms", "")).upper()
    if mechanism:
        out["kafka.sasl.mechanism"] = mechanism
    if mechanism and protocol not in ("SASL_PLAINTEXT", "SASL_SSL"):
        log.debug("cluster %s: sasl.mechanism set with security.protocol %r", cluster, protocol)
    _translate_sasl(props, mechanism, cluster, out, problems)
    _translate_ssl(props, cluster, out, problems)
    if problems:
        raise SparkOptionsError(problems)
    return out


def _translate_sasl(
    props: Mapping[str, str], mechanism: str, cluster: str, out: dict[str, str], problems: list[str]
) -> None:
    user, password = props.get("sasl.username"), props.get("sasl.password")
    if mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
        if user is None or password is None:
            problems.append(
                f"cluster '{cluster}': sasl.mechanism {mechanism} needs sasl.username and sasl.password"
            )
        else:
            module = _PLAIN_MODULE if mechanism == "PLAIN" else _SCRAM_MODULE
            out["kafka.sasl.jaas.config"] = _jaas(module, username=user, password=password)
    elif user is not None or password is not None:
        problems.append(
            f"cluster '{cluster}': sasl.username/sasl.password need sasl.mechanism PLAIN, "
            f"SCRAM-SHA-256 or SCRAM-SHA-512 (got {mechanism or 'none'!r})"
        )
    if mechanism == "OAUTHBEARER":
        if props.get("sasl.oauthbearer.method", "default").lower() != "oidc":
            problems.append(
                f"cluster '{cluster}': OAUTHBEARER without sasl.oauthbearer.method=oidc relies on "
                "a librdkafka token callback, which the Java client cannot use"
            )
        else:
            options = {
                k: props[f"sasl.oauthbearer.{p}"]
                for k, p in (("clientId", "client.id"), ("clientSecret", "client.secret"), ("scope", "scope"))
                if f"sasl.oauthbearer.{p}" in props
            }
            out["kafka.sasl.jaas.config"] = _jaas(_OAUTH_MODULE, **options)
            out["kafka.sasl.login.callback.handler.class"] = _OAUTH_HANDLER
    if "sasl.oauthbearer.token.endpoint.url" in props:
        out["kafka.sasl.oauthbearer.token.endpoint.url"] = props["sasl.oauthbearer.token.endpoint.url"]
    if "sasl.kerberos.service.name" in props:
        out["kafka.sasl.kerberos.service.name"] = props["sasl.kerberos.service.name"]
    if mechanism == "GSSAPI":
        keytab, principal = props.get("sasl.kerberos.keytab"), props.get("sasl.kerberos.principal")
        if keytab is None or principal is None:
            problems.append(
                f"cluster '{cluster}': GSSAPI needs sasl.kerberos.keytab and sasl.kerberos.principal"
            )
        else:
            out["kafka.sasl.jaas.config"] = (
                f"{_KRB_MODULE} required useKeyTab=true storeKey=true "
                f"keyTab={_jaas_quote(keytab)} principal={_jaas_quote(principal)};"
            )


def _translate_ssl(props: Mapping[str, str], cluster: str, out: dict[str, str], problems: list[str]) -> None:
    ca = props.get("ssl.ca.location")
    if ca is not None and ca != "probe":
        if Path(ca).is_dir():
            problems.append(
                f"cluster '{cluster}': ssl.ca.location '{ca}' is a directory; the Java client needs "
                "one PEM file (concatenate the certificates)"
            )
        else:
            out["kafka.ssl.truststore.type"] = "PEM"
            out["kafka.ssl.truststore.location"] = ca
    if "ssl.ca.pem" in props:
        out["kafka.ssl.truststore.type"] = "PEM"
        out["kafka.ssl.truststore.certificates"] = props["ssl.ca.pem"]
    cert, key = props.get("ssl.certificate.pem"), props.get("ssl.key.pem")
    if "ssl.certificate.location" in props:
        cert = _read_pem(props["ssl.certificate.location"], "ssl.certificate.location", cluster, problems)
    if "ssl.key.location" in props:
        key = _read_pem(props["ssl.key.location"], "ssl.key.location", cluster, problems)
    has_cert = "ssl.certificate.location" in props or "ssl.certificate.pem" in props
    has_key = "ssl.key.location" in props or "ssl.key.pem" in props
    if has_cert != has_key:
        problems.append(f"cluster '{cluster}': a client certificate needs both the certificate and its key")
    elif cert is not None and key is not None:
        if not _PKCS8.search(key):
            problems.append(
                f"cluster '{cluster}': the private key is not PKCS#8 ('BEGIN PRIVATE KEY'), which the "
                "Java client requires; convert it with 'openssl pkcs8 -topk8'"
            )
        else:
            out["kafka.ssl.keystore.type"] = "PEM"
            out["kafka.ssl.keystore.certificate.chain"] = cert
            out["kafka.ssl.keystore.key"] = key
    if "ssl.key.password" in props:
        out["kafka.ssl.key.password"] = props["ssl.key.password"]
    if "ssl.keystore.location" in props:
        out["kafka.ssl.keystore.type"] = "PKCS12"
        out["kafka.ssl.keystore.location"] = props["ssl.keystore.location"]
        if "ssl.keystore.password" in props:
            out["kafka.ssl.keystore.password"] = props["ssl.keystore.password"]
    algorithm = props.get("ssl.endpoint.identification.algorithm")
    if algorithm is not None:
        out["kafka.ssl.endpoint.identification.algorithm"] = "" if algorithm.lower() == "none" else algorithm


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


def _router(router: Router | None, config: str | None) -> Router:
    if router is not None:
        return router
    if config is None:
        raise ValueError("pass router= (a kbear.Router) or config= (a configuration directory)")
    return Router.from_path(config)


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
    names = [t.strip() for t in topics.split(",")] if isinstance(topics, str) else [str(t) for t in topics]
    names = [t for t in dict.fromkeys(names) if t]
    if not names:
        raise ValueError("no topics given")
    return {t: router.route(t, group, client) for t in names}


def group_id_prefix(cluster_id: str, group: str | None) -> str:
    """The ``groupIdPrefix`` of one cluster's source: distinct per cluster, never shared."""
    return f"{group or 'spark-kafka-source'}-kbear-{cluster_id}"


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
    routes = route_topics(topics, group=group, client=client, router=_router(router, config))
    clusters = sorted({r.cluster_id for r in routes.values()})
    if len(clusters) > 1:
        where = ", ".join(f"{t} -> {r.cluster_id}" for t, r in routes.items())
        raise SparkOptionsError(
            [
                f"the topics route to {len(clusters)} clusters ({where}); one Kafka source reads "
                "one cluster: use kbear.spark.read_stream(), which unions one source per cluster"
            ]
        )
    route = next(iter(routes.values()))
    out = translate_properties(route.properties, cluster=route.cluster_id)
    out["subscribe"] = ",".join(dict.fromkeys(r.topic for r in routes.values()))
    if "kafka.group.id" not in extra:
        out["groupIdPrefix"] = group_id_prefix(route.cluster_id, group)
    out.update({k: str(v) for k, v in extra.items()})
    return out


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
    route = _router(router, config).route_producer(topic, client)
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
    routes = route_topics(topics, group=group, client=client, router=_router(router, config))
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
