"""Authentication and TLS errors of a cluster's client, named after the cluster (private).

A routed client holds one confluent-kafka client per cluster; librdkafka's error
for a refused login or an unverifiable certificate names a broker address
(``sasl_plaintext://127.0.0.1:9094/bootstrap: SASL authentication error: ...``),
not the ``clusters.yaml`` entry whose credentials or CA are wrong. The client's
``error_cb`` is wrapped as each cluster's client is built
(:func:`kbear._events.configure`): for those errors the application's
``error_cb`` receives a :class:`~confluent_kafka.KafkaError` of the same code,
fatal and retriable flags whose text starts with ``cluster '<id>':``, and the
``kbear.client`` logger writes one warning naming the cluster, its
``security.protocol`` and ``sasl.mechanism`` (never a credential: librdkafka's
text carries none, and no property value other than those two is read). Other
errors reach the application's ``error_cb`` unchanged; without one, they are
logged on ``kbear.client`` at ERROR with the cluster named, where librdkafka
would have logged them itself. The records (the warnings too) are rate-limited per
cluster client (:class:`kbear._outage_log.OutageLog`: the first at once, then one
summary a minute, one when the outage is over); ``counted`` sees every error.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, MutableMapping
from typing import Any

from confluent_kafka import KafkaError

from kbear._outage_log import OutageLog

log = logging.getLogger("kbear.client")

#: the codes of a refused login (SASL) or a failed TLS handshake (unknown CA, wrong
#: client certificate)
AUTH_CODES = frozenset({KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED, KafkaError._SSL})

#: what librdkafka's text says when a TLS handshake failed (an unknown CA, a refused
#: client certificate) but the error came as ``_TRANSPORT``: librdkafka 2.16 reports
#: the same failed verification as ``_SSL`` or ``_TRANSPORT`` depending on where the
#: handshake stood (seen on Apache Kafka 4.4, integration/test_auth.py)
_TLS_HANDSHAKE_TEXTS = ("in state SSL_HANDSHAKE", "SSL routines::", "SSL handshake failed")


def refused(err: KafkaError) -> bool:
    """Whether ``err`` says a cluster refused the connection: a refused login (SASL)
    or a failed TLS handshake, whatever code librdkafka gave it (:data:`AUTH_CODES`,
    or ``_TRANSPORT`` with a TLS handshake failure in its text)."""
    code = err.code()
    if code in AUTH_CODES:
        return True
    return code == KafkaError._TRANSPORT and any(t in err.str() for t in _TLS_HANDSHAKE_TEXTS)


def name_cluster_errors(
    kind: str,
    cluster_id: str,
    conf: MutableMapping[str, Any],
    counted: Callable[[KafkaError], None] | None = None,
) -> None:
    """Wrap ``conf``'s ``error_cb`` (the configuration of ``kind``'s client of cluster
    ``cluster_id``) as the module docstring says; a configuration with an ``oauth_cb``
    and no ``error_cb`` is left as it is (its errors are not named after the cluster).
    ``counted(err)`` is called with every error (kbear's metrics count them)."""
    app: Callable[[KafkaError], Any] | None = conf.get("error_cb")
    if app is not None and not callable(app):
        return  # confluent-kafka refuses it, with its own message
    if app is None and "oauth_cb" in conf:
        # confluent-kafka calls an error_cb while an oauth_cb's exception is still pending
        # (its construction then fails with a SystemError instead of the KafkaException it
        # raises without one; confluent-kafka 2.16.1, its test_oauth_cb_failure): leave the
        # client exactly as confluent-kafka would build it.
        return
    if app is None and kind == "share_consumer":
        # confluent-kafka 2.16's ShareConsumer.poll hangs or raises SystemError instead
        # of KeyboardInterrupt when Ctrl+C lands in a Python error_cb (its
        # test_poll_interruptible_by_signal with any error_cb set): without the
        # application's own error_cb, leave the share consumer as confluent-kafka builds it
        return
    protocol = str(conf.get("security.protocol", "plaintext")).upper()
    mechanism = conf.get("sasl.mechanism", conf.get("sasl.mechanisms"))
    how = protocol if mechanism is None else f"{protocol} {str(mechanism).upper()}"
    outage = OutageLog(log, f"kbear {kind}: cluster '{cluster_id}'")

    def error_cb(err: KafkaError) -> None:
        if counted is not None:
            counted(err)
        if refused(err):
            outage.failure(
                logging.WARNING,
                " (%s) refused the connection: %s",
                how,
                err.str(),
                extra={"event": "authentication_failed", "cluster": cluster_id, "reason": err.name()},
            )
            err = KafkaError(
                err.code(),
                f"cluster '{cluster_id}': {err.str()}",
                fatal=err.fatal(),
                retriable=err.retriable(),
                txn_requires_abort=err.txn_requires_abort(),
            )
        elif app is None:
            outage.failure(logging.ERROR, ": %s", err.str())
        if app is not None:
            app(err)

    conf["error_cb"] = error_cb
