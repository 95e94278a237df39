"""``GET /fleet`` and ``GET /fleet/moves``: the recorded fleet as JSON.

``GET /fleet?topic=T&group=G&cluster=C&limit=N``: the clients whose recorded
lookups match every filter given (requested topic, consumer group, route
cluster), most recently seen first, each with the matching lookups::

    {"digest": served digest, "fleet": {entries, clients, maxEntries, ttlSeconds,
     evicted, expired, dropped}, "clients": [{id, meta, address, lastSeen,
     lookups: [{kind, topic, group, route: {clusterId, topicId}, digest, at}]}],
     "truncated": more clients matched than limit (default 1,000)}

``GET /fleet/moves?topic=T``: see :func:`kbear.server.moves.moves_json`.

Errors have the protocol's status shape: 400 ``fail`` / ``bad_request`` for a
bad ``limit``; 404 ``fail`` / ``not_found`` when the fleet is not recorded
(``kbear serve --fleet off``). Times are ISO 8601, UTC. The database is read
in a worker thread, not in the event loop.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from kbear.server._move_counts import Lookup, MoveQuery, MovingLookup
from kbear.server.fleet import FleetEntry, FleetRecorder
from kbear.server.holder import ConfigHolder, iso
from kbear.server.moves import (
    STRAGGLERS_LISTED,
    STRAGGLERS_LISTED_IN_ALL,
    changed_topics,
    classify,
    moves_json,
    rules_test_client_id,
    topic_moves,
)
from kbear.server.protocol import ErrorCode
from kbear.server.service import fail

__all__ = ["DEFAULT_LIMIT", "FleetEndpoints", "fleet_json"]

#: Clients listed by ``GET /fleet`` when no ``limit`` is given; the largest ``limit`` accepted.
DEFAULT_LIMIT, MAX_LIMIT = 1000, 100_000


def filters(params: Any, prefix: str = "") -> dict[str, str | None]:
    """``topic``, ``group``, ``cluster`` of a query string, their names after ``prefix``
    (absent or empty: None)."""
    return {name: (params.get(prefix + name) or None) for name in ("topic", "group", "cluster")}


def limit_of(params: Any) -> int:
    """``limit`` of a query string (default :data:`DEFAULT_LIMIT`).

    Raises:
        HTTPException: 400, not an integer in 1..100,000 (answered as the protocol's ``fail``).
    """
    text = params.get("limit")
    if not text:
        return DEFAULT_LIMIT
    if not text.isdigit() or not 1 <= int(text) <= MAX_LIMIT:
        raise HTTPException(400, f"limit must be an integer from 1 to {MAX_LIMIT}")
    return int(text)


def fleet_json(
    recorder: FleetRecorder, holder: ConfigHolder, found: dict[str, str | None], limit: int
) -> dict[str, Any]:
    """The ``GET /fleet`` answer (reads the database: call it off the event loop)."""
    by_client: dict[tuple[str, str, str], list[FleetEntry]] = {}  # in the order of their first entry
    for entry in recorder.entries(**found, clients=limit):
        by_client.setdefault(entry.client_key, []).append(entry)
    clients = list(by_client.values())
    matched = recorder.count_clients(**found)
    stats = recorder.stats()
    return {
        "digest": holder.served.config.digest,
        "fleet": {
            "entries": stats.entries,
            "clients": stats.clients,
            "maxEntries": recorder.max_entries,
            "ttlSeconds": recorder.ttl_s,
            "evicted": stats.evicted,
            "expired": stats.expired,
            "dropped": stats.dropped,
        },
        "clients": [
            {
                "id": entries[0].client_id,
                "meta": dict(entries[0].meta),
                "address": max(entries, key=lambda e: e.seen).address,
                "lastSeen": iso(max(e.seen for e in entries)),
                "lookups": [
                    {
                        "kind": e.kind,
                        "topic": e.topic,
                        "group": e.group or None,
                        "route": {"clusterId": e.cluster, "topicId": e.route_topic},
                        "digest": e.digest,
                        "at": iso(e.seen),
                    }
                    for e in entries
                ],
            }
            for entries in clients
        ],
        "truncated": matched > len(clients),
    }


def moves_answer(recorder: FleetRecorder, holder: ConfigHolder, topic: str | None) -> dict[str, Any]:
    """The ``GET /fleet/moves`` answer (reads the database: call it off the event loop).

    Without ``topic``, only the lookups of the topics the last change can have
    moved are read (:func:`~kbear.server.moves.changed_topics`, by the fleet's
    topic index); every topic's when the global rules changed. Counted in SQL
    over the fleet's distinct lookups (:func:`~kbear.server.moves.classify`),
    never entry by entry in Python."""
    current, previous = holder.served_and_previous
    if previous is None or previous.config.digest == current.config.digest:
        return moves_json([], current, previous, current.loaded_at)
    topics = changed_topics(previous.config, current.config) if topic is None else {topic}
    routes: dict[str, Any] = {}

    def moving(lookups: list[Lookup]) -> list[MovingLookup]:
        found, routes_by_topic = classify(lookups, current, previous)
        routes.update(routes_by_topic)
        return found

    by_id = rules_test_client_id(current.config) or rules_test_client_id(previous.config)
    query = MoveQuery(
        topics,
        by_client_id=by_id,
        classify=moving,
        changed_at=current.loaded_at,
        listed=STRAGGLERS_LISTED,
        listed_in_all=STRAGGLERS_LISTED_IN_ALL,
        now=time.time(),
    )
    counts, stragglers = recorder.move_progress(query)
    moves = topic_moves(routes, counts, stragglers)
    return moves_json(moves, current, previous, current.loaded_at)


@dataclass
class FleetEndpoints:
    """The handlers of ``/fleet`` and ``/fleet/moves`` over a recorder (None: not recorded)."""

    holder: ConfigHolder
    recorder: FleetRecorder | None

    def _off(self) -> Response:
        return fail(404, ErrorCode.NOT_FOUND, "the fleet is not recorded (kbear serve --fleet off)")

    def fleet(self, request: Request) -> Response:  # reads the database: Starlette runs it in a thread
        if self.recorder is None:
            return self._off()
        limit, found = limit_of(request.query_params), filters(request.query_params)
        body = fleet_json(self.recorder, self.holder, found, limit)
        return JSONResponse(body, headers=_digest(self.holder))

    def moves(self, request: Request) -> Response:  # reads the database: Starlette runs it in a thread
        if self.recorder is None:
            return self._off()
        body = moves_answer(self.recorder, self.holder, request.query_params.get("topic") or None)
        return JSONResponse(body, headers=_digest(self.holder))


def _digest(holder: ConfigHolder) -> dict[str, str]:
    return {"X-KBear-Config-Digest": holder.served.config.digest, "Cache-Control": "no-store"}
