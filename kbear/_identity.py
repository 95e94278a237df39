"""Who asks for a route: :class:`Client` (public as ``kbear.Client``), and who this
process is, for CRRL's ``client.*`` factors (:meth:`Client.from_environment`).

KBear's Java client sends ``Client.meta`` with ``appId``, ``idc``, ``env``,
``subEnv``, ``ip`` and ``hostName``, and big-data jobs add ``jobType``,
``jobName`` and ``jobDepartment`` (``meta-service.md``, "Client identity";
KBear's ``doc/kbear-client.md``). The open-source Java client leaves filling
them to Ctrip's internal module (``CKafkaClientFactory.newDefaultClient()``),
which reads Ctrip's framework settings; kbear reads environment variables
instead, with the host's name and address for ``hostName`` and ``ip``:

================  ===========================================  ==================
meta key          environment variable (first one set wins)    otherwise
================  ===========================================  ==================
``appId``         ``KBEAR_APP_ID``, ``APP_ID``                 absent
``env``           ``KBEAR_ENV``, ``ENV``                       absent
``subEnv``        ``KBEAR_SUB_ENV``                            absent
``idc``           ``KBEAR_IDC``, ``IDC``                       absent
``ip``            ``KBEAR_IP``                                 the host's address
``hostName``      ``KBEAR_HOST_NAME``, ``HOSTNAME``            ``socket.gethostname()``
``jobType``       ``KBEAR_JOB_TYPE``                           absent
``jobName``       ``KBEAR_JOB_NAME``                           absent
``jobDepartment`` ``KBEAR_JOB_DEPARTMENT``                     absent
================  ===========================================  ==================

The client's ``id`` is ``KBEAR_CLIENT_ID``, else the ``appId`` (KBear's
examples use the app id as the client id), else none.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

#: meta key -> environment variables read for it, first set wins.
ENVIRONMENT_KEYS: dict[str, tuple[str, ...]] = {
    "appId": ("KBEAR_APP_ID", "APP_ID"),
    "env": ("KBEAR_ENV", "ENV"),
    "subEnv": ("KBEAR_SUB_ENV",),
    "idc": ("KBEAR_IDC", "IDC"),
    "ip": ("KBEAR_IP",),
    "hostName": ("KBEAR_HOST_NAME", "HOSTNAME"),
    "jobType": ("KBEAR_JOB_TYPE",),
    "jobName": ("KBEAR_JOB_NAME",),
    "jobDepartment": ("KBEAR_JOB_DEPARTMENT",),
}


def _first(environ: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    for name in names:
        value = environ.get(name, "").strip()
        if value:
            return value
    return None


def host_ip() -> str | None:
    """This host's outward IPv4 address: the local end of a UDP socket "connected" to a
    public address (no packet is sent), else the address of the host name; None if neither."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))  # TEST-NET-1: routing table lookup only
            address = str(s.getsockname()[0])
            if not address.startswith("0."):
                return address
    except OSError:
        pass
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return None


@dataclass(frozen=True, repr=False)
class Client:
    """The application asking for a route.

    Args:
        id: the client's id (CRRL factor ``client.id``), e.g. an application
            id; None when the client has none (then ``client.id`` is absent and
            never matches).
        meta: string -> string (``client.<key>`` factors), e.g.
            ``{"env": "uat", "idc": "sh"}``.

    Clients are immutable and hashable: equal id and meta are the same client.
    """

    id: str | None = None
    meta: Mapping[str, str] = field(default_factory=dict)
    _hash: int = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "meta", MappingProxyType(dict(self.meta or {})))
        object.__setattr__(self, "_hash", hash((self.id, frozenset(self.meta.items()))))

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"Client(id={self.id!r}, meta={dict(self.meta)!r})"

    def __reduce__(self) -> tuple[type[Client], tuple[str | None, dict[str, str]]]:
        # pickle and copy (e.g. a Client shipped to Spark executors).
        return type(self), (self.id, dict(self.meta))

    @classmethod
    def from_environment(
        cls, environ: Mapping[str, str] | None = None, *, meta: Mapping[str, str] | None = None
    ) -> Client:
        """The client this process is, filled as KBear's Java client fills its meta.

        Args:
            environ: environment variables to read; ``os.environ`` when None.
            meta: extra meta entries, which win (``{"jobType": "spark"}``).

        Returns:
            A Client whose meta holds ``appId``, ``env``, ``subEnv``, ``idc``,
            ``jobType``, ``jobName``, ``jobDepartment`` when their environment
            variables are set (``KBEAR_APP_ID`` / ``APP_ID``, ``KBEAR_ENV`` / ``ENV``,
            ``KBEAR_SUB_ENV``, ``KBEAR_IDC`` / ``IDC``, ``KBEAR_JOB_TYPE``,
            ``KBEAR_JOB_NAME``, ``KBEAR_JOB_DEPARTMENT``), and always ``hostName``
            and (when the host has one) ``ip``; its id is ``KBEAR_CLIENT_ID``, else
            the app id, else None. See :mod:`kbear._identity` for the table.
        """
        env = os.environ if environ is None else environ
        found = {key: value for key, names in ENVIRONMENT_KEYS.items() if (value := _first(env, names))}
        found.setdefault("hostName", socket.gethostname())
        if "ip" not in found and (ip := host_ip()) is not None:
            found["ip"] = ip
        client_id = _first(env, ("KBEAR_CLIENT_ID",)) or found.get("appId")
        return cls(client_id, {**found, **(meta or {})})

    def factors(self) -> dict[str, str]:
        """The ``client.*`` factors of this client.

        ``client.id`` is the client's id only: a meta key ``id`` never stands in
        for it (an id-less client has no ``client.id`` factor, as the spec says).
        """
        out = {f"client.{k}": v for k, v in self.meta.items() if k != "id"}
        if self.id is not None:
            out["client.id"] = self.id
        return out
