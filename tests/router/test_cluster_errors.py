"""A refused login or TLS handshake reaches the application's ``error_cb`` (and the
``kbear.client`` log) naming the ``clusters.yaml`` cluster, never a credential; other
errors pass unchanged (``kbear/_cluster_errors.py``). The real brokers' side is in
``integration/test_auth.py``."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from confluent_kafka import KafkaError

from kbear._events import configure

SECRET = "pw-PLANTED-err"
AUTH_TEXT = (
    "sasl_plaintext://127.0.0.1:9094/bootstrap: SASL authentication error: Authentication failed "
    "during authentication due to invalid credentials with SASL mechanism PLAIN"
)


def conf_for(**extra: Any) -> dict[str, Any]:
    return {
        "security.protocol": "sasl_plaintext",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "alice",
        "sasl.password": SECRET,
        **extra,
    }


AUTH_CODES = [KafkaError._AUTHENTICATION, KafkaError._SSL, KafkaError.SASL_AUTHENTICATION_FAILED]


@pytest.mark.parametrize("code", AUTH_CODES)
def test_an_authentication_error_names_the_cluster(code: int, caplog: pytest.LogCaptureFixture) -> None:
    got: list[KafkaError] = []
    conf = configure("producer", "payments-eu", conf_for(error_cb=got.append))
    with caplog.at_level(logging.WARNING, logger="kbear.client"):
        conf["error_cb"](KafkaError(code, AUTH_TEXT, fatal=False, retriable=False))
    assert len(got) == 1 and got[0].code() == code
    assert got[0].str() == f"cluster 'payments-eu': {AUTH_TEXT}"
    assert not got[0].fatal() and not got[0].retriable()
    [record] = caplog.records
    assert "cluster 'payments-eu' (SASL_PLAINTEXT PLAIN) refused the connection" in record.getMessage()
    assert record.cluster == "payments-eu"  # type: ignore[attr-defined]
    assert SECRET not in caplog.text and SECRET not in got[0].str()


TLS_TEXT = (
    "ssl://127.0.0.1:52243/bootstrap: error:0A000086:SSL routines::certificate verify failed "
    "(after 44ms in state SSL_HANDSHAKE)"
)


def test_a_tls_handshake_failure_reported_as_transport_names_the_cluster(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # librdkafka 2.16 gave an unknown CA this code on Apache Kafka 4.4 (a CI run of
    # integration/test_auth.py), where other runs gave _SSL
    got: list[KafkaError] = []
    conf = configure("producer", "tls", {"security.protocol": "ssl", "error_cb": got.append})
    with caplog.at_level(logging.WARNING, logger="kbear.client"):
        conf["error_cb"](KafkaError(KafkaError._TRANSPORT, TLS_TEXT))
    assert len(got) == 1 and got[0].code() == KafkaError._TRANSPORT
    assert got[0].str() == f"cluster 'tls': {TLS_TEXT}"
    assert "cluster 'tls' (SSL) refused the connection" in caplog.records[0].getMessage()


def test_other_errors_pass_unchanged_or_are_logged_with_the_cluster(caplog: pytest.LogCaptureFixture) -> None:
    got: list[KafkaError] = []
    err = KafkaError(KafkaError._TRANSPORT, "127.0.0.1:9092/bootstrap: Connect failed")
    configure("consumer", "A", conf_for(error_cb=got.append))["error_cb"](err)
    assert got == [err] and got[0] is err
    with caplog.at_level(logging.ERROR, logger="kbear.client"):
        configure("consumer", "A", conf_for())["error_cb"](err)  # no application error_cb
    assert "kbear consumer: cluster 'A': 127.0.0.1:9092/bootstrap: Connect failed" in caplog.text


def test_a_failing_oauth_cb_fails_construction_as_in_confluent_kafka(tmp_path: Any) -> None:
    """confluent-kafka's own test_oauth_cb_failure, through kbear: an ``oauth_cb`` that
    raises makes the client's construction raise ``KafkaException``. An ``error_cb``
    installed by kbear turned it into a ``SystemError`` (confluent-kafka calls the
    error_cb while the oauth_cb's exception is pending), so none is installed then."""
    from confluent_kafka import KafkaException

    from kbear import RoutedConsumer

    (tmp_path / "clusters.yaml").write_text(
        "clusters:\n  - id: c\n    meta:\n      bootstrap.servers: 127.0.0.1:1\n"
    )
    (tmp_path / "route-rules.yaml").write_text(
        "route-rules:\n  - id: g\n    meta: {rule.isGlobal: true}\n    rule: use cluster c\n"
    )

    def oauth_cb(_config: str) -> tuple[str, float]:
        raise RuntimeError("no token")

    conf = {
        "kbear.config": str(tmp_path),
        "group.id": "oauth",
        "security.protocol": "sasl_plaintext",
        "sasl.mechanisms": "OAUTHBEARER",
        "session.timeout.ms": 1000,
        "oauth_cb": oauth_cb,
    }
    with pytest.raises(KafkaException):
        RoutedConsumer(conf)
    assert "error_cb" not in configure("consumer", "c", {"oauth_cb": oauth_cb})
