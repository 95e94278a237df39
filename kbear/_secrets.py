"""Which configuration keys hold secrets, and how they are hidden (private)."""

from __future__ import annotations

from collections.abc import Mapping

REDACTED = "***"

# "user.info": a Schema Registry's ``basic.auth.user.info`` is ``user:password``.
_SECRET_PARTS = ("password", "secret", "jaas", "key.pem", "token", "credential", "user.info")


def is_secret(key: str) -> bool:
    """Whether a client property ``key`` holds a secret (``sasl.password``,
    ``sasl.jaas.config``, ``ssl.key.pem``, ``sasl.oauthbearer.client.secret``,
    ``schema.registry.basic.auth.user.info``, ...)."""
    lowered = key.lower()
    return any(part in lowered for part in _SECRET_PARTS)


def looks_secret(text: str) -> bool:
    """Whether a piece of text (a line of ``clusters.yaml``) mentions a secret key."""
    return is_secret(text)


def redact(properties: Mapping[str, object]) -> dict[str, object]:
    """A copy of ``properties`` with every secret value replaced by ``***``."""
    return {k: (REDACTED if is_secret(k) else v) for k, v in properties.items()}
