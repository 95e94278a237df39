"""Watching a move reach every client (private to ``kbear move --apply --meta-service URL``).

``kbear serve`` records which client got which route (``GET /fleet/moves``,
:mod:`kbear.server.moves`). After the rule write, the move is done for the
fleet when every service named serves the new configuration (its digest) and
none of them has a live client of the topic still holding the old route: not one
answered the old route since the change, not one that has not asked since. A
client the service says is not seen since (it asked once long enough ago, or
it is overdue: :mod:`kbear.server.moves`) is listed apart and not waited for.
A topic no client asked for is done once the new configuration is served.

Several services (replicas on several hosts, each recording the clients it
answered) are summed. The token is ``KBEAR_META_TOKEN``, as for the clients.
Needs httpx (the ``meta`` or ``server`` extra).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kbear.config import config_digest

#: Seconds between two reads of ``/fleet/moves``.
POLL_S = 0.25


@dataclass
class FleetState:
    """The fleet's side of a move, from every service named.

    Attributes:
        served: services serving the new configuration; services: how many were asked.
        clients, moved, on_old, not_asked, not_seen: clients of the topic whose route
            changes, on the new route, still answered the old one, not asked since the
            change (waited for), not seen since (one-off lookups and overdue clients:
            not waited for).
        stragglers: (client id, address) of the clients not moved yet (up to 100 per service).
        not_seen_listed: (client id, address, last seen) of the clients not seen since.
        error: why a service could not be read ('' when every one was).
    """

    served: int = 0
    services: int = 0
    clients: int = 0
    moved: int = 0
    on_old: int = 0
    not_asked: int = 0
    not_seen: int = 0
    stragglers: list[tuple[str, str]] = field(default_factory=list)
    not_seen_listed: list[tuple[str, str, str]] = field(default_factory=list)
    error: str = ""

    @property
    def done(self) -> bool:
        """Every service serves the new configuration and no client holds the old route."""
        return not self.error and self.served == self.services and self.on_old + self.not_asked == 0

    def line(self) -> str:
        """One line for the progress output."""
        if self.error:
            return f"fleet: {self.error}"
        if self.served < self.services:
            return f"fleet: {self.served}/{self.services} service(s) serve the new rules"
        return (
            f"fleet: {self.moved}/{self.clients} client(s) on the new route, {self.on_old} still on the old, "
            f"{self.not_asked} not asked since"
            + (f", {self.not_seen} not seen since (not waited for)" if self.not_seen else "")
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "services": self.services,
            "serving_new_rules": self.served,
            "clients": self.clients,
            "on_new_route": self.moved,
            "on_old_route": self.on_old,
            "not_asked_since": self.not_asked,
            "not_seen_since": self.not_seen,
            "stragglers": [{"id": i, "address": a} for i, a in self.stragglers],
            "not_seen": [{"id": i, "address": a, "last_seen": t} for i, a, t in self.not_seen_listed],
            "error": self.error or None,
        }


def _http(url: str, timeout_s: float) -> Any:
    try:
        from kbear._meta_http import http_client
    except ImportError as exc:  # pragma: no cover - the meta and server extras both bring httpx
        raise ValueError("--meta-service needs httpx: pip install 'kbear[meta]'") from exc
    return http_client(url.rstrip("/"), timeout_s, None, None)  # token: KBEAR_META_TOKEN


def read_fleet(clients: Sequence[Any], topic: str, digest: str) -> FleetState:
    """Ask each service (httpx clients) for the move of ``topic``; ``digest``: the new configuration's."""
    state = FleetState(services=len(clients))
    for http in clients:
        try:
            response = http.get("/fleet/moves", params={"topic": topic})
            response.raise_for_status()
            answer = response.json()
        except Exception as exc:
            state.error = f"{http.base_url}: {type(exc).__name__}: {exc}"
            continue
        if answer.get("digest") != digest:
            continue
        state.served += 1
        for move in answer.get("moves", []):
            if move.get("topic") != topic:
                continue
            state.clients += move["clients"]
            state.moved += move["onNewRoute"]
            state.on_old += move["onOldRoute"]
            state.not_asked += move["notAskedSince"]
            state.not_seen += move.get("notSeenSince", 0)
            for s in move["stragglers"]:
                if s.get("state") == "notSeenSince":
                    state.not_seen_listed.append((s["id"], s["address"], s["lastSeen"]))
                else:
                    state.stragglers.append((s["id"], s["address"]))
    return state


class FleetWatch:
    """Reads the fleet every :data:`POLL_S` seconds in a thread (started at once)
    until it is done.

    Args:
        urls: the ``kbear serve`` base URLs; topic: the moved topic;
        digest: the new configuration's digest (the changed ``route-rules.yaml``'s).
        timeout_s: per request.
    """

    def __init__(self, urls: Sequence[str], topic: str, digest: str, timeout_s: float = 5.0) -> None:
        self._clients = [_http(u, timeout_s) for u in urls]
        self._topic, self._digest = topic, digest
        self.state = FleetState(services=len(urls))
        #: time.monotonic() when the fleet was first seen done, else None.
        self.done_at: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kbear-move-fleet", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.state = read_fleet(self._clients, self._topic, self._digest)
            if self.state.done:
                self.done_at = time.monotonic()
                return
            self._stop.wait(POLL_S)

    def wait(self, deadline: float, on_tick: Callable[[FleetState], None]) -> bool:
        """Wait until done or ``deadline`` (time.monotonic()), calling ``on_tick`` with the
        fleet's state about once a second; True when done."""
        while self.done_at is None and time.monotonic() < deadline and self._thread.is_alive():
            on_tick(self.state)
            self._thread.join(min(1.0, max(0.0, deadline - time.monotonic())))
        return self.done_at is not None

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10.0)
        for http in self._clients:
            http.close()


def service_directory(url: str, timeout_s: float = 5.0) -> str:
    """The directory a ``kbear serve`` at ``url`` answers from (``GET /health``), when
    this machine reads the same files (same digest).

    Raises:
        ValueError: the service cannot be read, or its directory is not here with
            the same content (then give ``--config DIR --meta-service URL``).
    """
    with _http(url, timeout_s) as http:
        try:
            response = http.get("/health")
            response.raise_for_status()
            config = response.json()["config"]
        except Exception as exc:
            raise ValueError(f"cannot read {url}/health: {exc}") from exc
    directory, digest = config["directory"], config["digest"]
    if not os.path.isdir(directory) or config_digest(directory) != digest:
        raise ValueError(
            f"{url} serves {directory}, which this machine does not hold with the same content: "
            "give --config DIR (its copy here) --meta-service URL"
        )
    return str(directory)
