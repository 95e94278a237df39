"""librdkafka cluster properties as Spark Kafka-connector (Java client) options.

Spark's Kafka connector (``spark-sql-kafka-0-10``) runs the Java Kafka client,
configured with ``kafka.``-prefixed Java property names; ``clusters.yaml``
holds librdkafka property names. :func:`translate_properties` maps one to the
other (the table is :data:`TRANSLATION_TABLE`, also in docs/guides/spark.md).

Sources: librdkafka ``CONFIGURATION.md``; Apache Kafka's client configuration
reference (``security.protocol``, ``sasl.*``, ``ssl.*``, KIP-651 PEM stores).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

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


def option_bool(value: str | None, default: bool) -> bool:
    """A Spark boolean option: ``default`` when absent (None), else whether it reads ``true``
    (any case, surrounding blanks ignored)."""
    return default if value is None else str(value).strip().lower() == "true"


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
        "bootstrap.servers",
        "sasl.oauthbearer.token.endpoint.url",
        "sasl.kerberos.service.name",
        "ssl.key.password",
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
        "broker.version.fallback",
        "socket.keepalive.enable",
        "socket.nagle.disable",
        "topic.metadata.refresh.interval.ms",
        "log.connection.close",
    }
)
# Consumed by the rules below (not "unknown"); _SAME_NAME: passed on with the kafka. prefix.
_HANDLED = frozenset(
    {
        "security.protocol",
        "sasl.mechanism",
        "sasl.mechanisms",
        "sasl.username",
        "sasl.password",
        "sasl.oauthbearer.method",
        "sasl.oauthbearer.client.id",
        "sasl.oauthbearer.client.secret",
        "sasl.oauthbearer.scope",
        "sasl.kerberos.keytab",
        "sasl.kerberos.principal",
        "ssl.ca.location",
        "ssl.ca.pem",
        "ssl.certificate.location",
        "ssl.key.location",
        "ssl.certificate.pem",
        "ssl.key.pem",
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
        elif key in _SKIPPED or key.startswith(("api.version.", "test.mock.")):
            log.debug("cluster %s: librdkafka property %s has no Java equivalent; skipped", cluster, key)
        elif key not in _HANDLED:
            problems.append(
                f"cluster '{cluster}': librdkafka property '{key}' has no Java Kafka client "
                "equivalent kbear knows (see kbear.spark.TRANSLATION_TABLE); pass the Java "
                "setting yourself as a 'kafka.*' option and remove it from clusters.yaml for Spark"
            )
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
    if "ssl.keystore.location" in props:
        out["kafka.ssl.keystore.type"] = "PKCS12"
        out["kafka.ssl.keystore.location"] = props["ssl.keystore.location"]
        if "ssl.keystore.password" in props:
            out["kafka.ssl.keystore.password"] = props["ssl.keystore.password"]
    algorithm = props.get("ssl.endpoint.identification.algorithm")
    if algorithm is not None:
        out["kafka.ssl.endpoint.identification.algorithm"] = "" if algorithm.lower() == "none" else algorithm
