"""Certificates made by the tests (Python's ``cryptography``): a CA, a broker certificate
for 127.0.0.1/localhost signed by it, a client certificate for mTLS, and a second CA
the brokers do not know (for the "unknown CA" failure).

Files written (PEM unless said): ``ca.pem``; ``broker.p12`` (PKCS#12 keystore: the
broker's key and certificate chain, password :attr:`Pki.keystore_password`);
``client.pem`` and ``client-key.pem`` (PKCS#8, unencrypted: what the Java client's
PEM keystore needs, and what librdkafka reads); ``other-ca.pem``.
"""

from __future__ import annotations

import datetime
import ipaddress
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pki:
    """Where :func:`make_pki` wrote the files, and the keystore's password."""

    directory: Path
    ca: Path
    broker_keystore: Path
    keystore_password: str
    client_cert: Path
    client_key: Path
    other_ca: Path


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _certificate(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[str, ec.EllipticCurvePrivateKey] | None,
    *,
    ca: bool = False,
    server: bool = False,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    issuer_name, issuer_key = issuer if issuer is not None else (subject, key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        usage = x509.KeyUsage(False, False, False, False, False, True, True, False, False)
        builder = builder.add_extension(usage, critical=True)
    else:
        eku = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([eku]), critical=False)
    if server:
        alt = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def make_pki(directory: Path) -> Pki:
    """Write a CA, a broker keystore, a client certificate and key, and an unknown CA
    under ``directory`` (created); valid for two days."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _certificate("kbear test CA", ca_key, None, ca=True)
    broker_key = ec.generate_private_key(ec.SECP256R1())
    broker = _certificate("localhost", broker_key, ("kbear test CA", ca_key), server=True)
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = _certificate("kbear-client", client_key, ("kbear test CA", ca_key))
    other_key = ec.generate_private_key(ec.SECP256R1())
    other = _certificate("some other CA", other_key, None, ca=True)

    password = secrets.token_hex(12)
    keystore = pkcs12.serialize_key_and_certificates(
        b"broker",
        broker_key,
        broker,
        [ca],
        serialization.BestAvailableEncryption(password.encode()),
    )
    pki = Pki(
        directory=directory,
        ca=directory / "ca.pem",
        broker_keystore=directory / "broker.p12",
        keystore_password=password,
        client_cert=directory / "client.pem",
        client_key=directory / "client-key.pem",
        other_ca=directory / "other-ca.pem",
    )
    pki.ca.write_bytes(_pem(ca))
    pki.broker_keystore.write_bytes(keystore)
    pki.client_cert.write_bytes(_pem(client))
    pki.client_key.write_bytes(
        client_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    pki.other_ca.write_bytes(_pem(other))
    return pki
