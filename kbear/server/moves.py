"""A move's progress from the fleet: who still holds the old route (no I/O).

The last digest change is the one from the configuration a worker served
before (``previous``) to the one it serves (``current``), applied at
``changed_at``. For each fleet entry the route under each is taken from the
entry itself when it was answered from that configuration, else evaluated
with the entry's client (id and meta as recorded: a rule on a secret-looking
meta key sees ``***``). An entry whose two routes differ is part of the move
of its topic; it is, at its client's last request:

- on the new route: answered the new route;
- on the old route: asked since the change, still answered otherwise (a
  worker that had not applied the change yet);
- not asked since: its last request came before the change.

A client counts once per topic, by its least advanced entry (not asked since,
then old, then new). ``remaining`` = on the old route + not asked since.

Only the topics the change can have moved are read (:func:`changed_topics`):
those whose topic or consumer-group rules, ``topics.yaml`` meta or
consumer-group meta differ; every topic when the global rules differ.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kbear._chain import index_rules
from kbear._identity import Client
from kbear._route import NoRouteError
from kbear.config import KBearConfig, RouteRule
from kbear.router import Router
from kbear.server.fleet import FleetEntry
from kbear.server.holder import Served

__all__ = ["MOVED", "NOT_ASKED", "ON_OLD", "TopicMove", "changed_topics", "moves_json", "topic_moves"]

MOVED, ON_OLD, NOT_ASKED = "onNewRoute", "onOldRoute", "notAskedSince"
_RANK = {MOVED: 0, ON_OLD: 1, NOT_ASKED: 2}
#: Most stragglers listed per topic.
_STRAGGLERS_LISTED = 100

_Route = tuple[str, str] | None


@dataclass
class TopicMove:
    """The progress of one topic's move.

    Attributes:
        topic: the requested topic.
        routes: (old route, new route) -> entries, routes as (cluster, physical topic).
        clients: client key -> its state (:data:`MOVED`, :data:`ON_OLD`, :data:`NOT_ASKED`).
        stragglers: the least advanced entry of each client not moved yet.
    """

    topic: str
    routes: dict[tuple[_Route, _Route], int] = field(default_factory=dict)
    clients: dict[tuple[str, str, str], str] = field(default_factory=dict)
    stragglers: dict[tuple[str, str, str], FleetEntry] = field(default_factory=dict)

    def count(self, state: str) -> int:
        """How many clients are in ``state``."""
        return sum(1 for s in self.clients.values() if s == state)


def _evaluate(router: Router, entry: FleetEntry) -> _Route:
    client = Client(entry.client_id or None, entry.meta)
    try:
        if entry.kind == "consumer":
            route = router.route_consumer(entry.topic, entry.group, client)
        else:
            route = router.route_producer(entry.topic, client)
    except NoRouteError:
        return None
    return (route.cluster_id, route.topic)


class _RouteUnder:
    """The route of entries under one served configuration: the entry's own when it
    was answered from it, else evaluated once per lookup and client meta (and client
    id, when a rule tests ``client.id``): clients differing only by id share it."""

    def __init__(self, served: Served) -> None:
        self.served = served
        self.by_id = any(c.key == "client.id" for r in served.config.rules for c in r.statement.conditions)
        self.known: dict[tuple[str, str, str, str, tuple[tuple[str, str], ...]], _Route] = {}

    def __call__(self, entry: FleetEntry) -> _Route:
        if entry.digest == self.served.config.digest:
            return (entry.cluster, entry.route_topic)
        key = (
            entry.kind,
            entry.topic,
            entry.group,
            entry.client_id if self.by_id else "",
            tuple(sorted(entry.meta.items())),
        )
        try:
            return self.known[key]
        except KeyError:
            route = self.known[key] = _evaluate(self.served.router, entry)
            return route


def _rule_list(rules: Iterable[RouteRule]) -> list[tuple[str, int, dict[str, str], str]]:
    return [(r.id, r.priority, dict(r.meta), str(r.statement)) for r in rules]


def changed_topics(old: KBearConfig, new: KBearConfig) -> set[str] | None:
    """The topics whose routes can differ between ``old`` and ``new``, for any
    client: a lookup's route depends on the global rules, the rules of its topic
    (and of its group on that topic), each list in chain order, and the topic's
    and group's meta (``topic.*``, ``consumerGroup.*`` factors). None when the
    global rules differ (every topic may have moved).
    """
    old_globals, old_topics, old_groups = index_rules(old.rules)
    new_globals, new_topics, new_groups = index_rules(new.rules)
    if _rule_list(old_globals) != _rule_list(new_globals):
        return None
    out: set[str] = set()
    for topic in old_topics.keys() | new_topics.keys():
        if _rule_list(old_topics.get(topic, ())) != _rule_list(new_topics.get(topic, ())):
            out.add(topic)
    for key in old_groups.keys() | new_groups.keys():
        if _rule_list(old_groups.get(key, ())) != _rule_list(new_groups.get(key, ())):
            out.add(key[1])
    for topic in old.topics.keys() | new.topics.keys():
        if old.topic_meta(topic) != new.topic_meta(topic):
            out.add(topic)
    for key in old.consumer_groups.keys() | new.consumer_groups.keys():
        before, after = old.consumer_groups.get(key), new.consumer_groups.get(key)
        if (before is None) != (after is None) or (
            before is not None and after is not None and dict(before.meta) != dict(after.meta)
        ):
            out.add(key[1])
    return out


def topic_moves(
    entries: Iterable[FleetEntry], current: Served, previous: Served | None, changed_at: float
) -> list[TopicMove]:
    """The topics whose route changed for some recorded client in the last change, sorted by topic.

    Args:
        entries: the fleet (or the part of it asked about).
        current: the configuration served; previous: the one before (None: no
            change since this process started, so no move).
        changed_at: when ``current`` was applied (Unix time, seconds).
    """
    if previous is None or previous.config.digest == current.config.digest:
        return []
    moves: dict[str, TopicMove] = {}
    under_previous, under_current = _RouteUnder(previous), _RouteUnder(current)
    for entry in entries:
        old, new = under_previous(entry), under_current(entry)
        if old == new:
            continue
        held = (entry.cluster, entry.route_topic)
        if held == new and entry.digest == current.config.digest:
            state = MOVED
        elif entry.seen >= changed_at:
            state = ON_OLD
        else:
            state = NOT_ASKED
        move = moves.setdefault(entry.topic, TopicMove(entry.topic))
        move.routes[(old, new)] = move.routes.get((old, new), 0) + 1
        key = entry.client_key
        if _RANK[state] >= _RANK.get(move.clients.get(key, MOVED), 0):
            move.clients[key] = state
            if state != MOVED:
                move.stragglers[key] = entry
    return [moves[t] for t in sorted(moves)]


def _iso(unix_s: float) -> str:
    return datetime.fromtimestamp(unix_s, UTC).isoformat(timespec="milliseconds")


def _route_json(route: _Route) -> dict[str, str] | None:
    return None if route is None else {"clusterId": route[0], "topicId": route[1]}


def moves_json(
    moves: list[TopicMove], current: Served, previous: Served | None, changed_at: float
) -> dict[str, Any]:
    """The ``GET /fleet/moves`` answer (camelCase, as the protocol's messages)."""
    topics = []
    for move in moves:
        moved, on_old, not_asked = move.count(MOVED), move.count(ON_OLD), move.count(NOT_ASKED)
        total = len(move.clients)
        stragglers = sorted(
            (e for k, e in move.stragglers.items() if move.clients[k] != MOVED), key=lambda e: e.seen
        )
        topics.append(
            {
                "topic": move.topic,
                "routes": [
                    {"from": _route_json(old), "to": _route_json(new), "entries": n}
                    for (old, new), n in sorted(move.routes.items(), key=lambda kv: -kv[1])
                ],
                "clients": total,
                MOVED: moved,
                ON_OLD: on_old,
                NOT_ASKED: not_asked,
                "remaining": on_old + not_asked,
                "progress": round(moved / total, 4) if total else 1.0,
                "stragglers": [
                    {
                        "id": e.client_id,
                        "address": e.address,
                        "kind": e.kind,
                        "group": e.group or None,
                        "route": {"clusterId": e.cluster, "topicId": e.route_topic},
                        "lastSeen": _iso(e.seen),
                        "state": move.clients[e.client_key],
                    }
                    for e in stragglers[:_STRAGGLERS_LISTED]
                ],
            }
        )
    return {
        "digest": current.config.digest,
        "previousDigest": None if previous is None else previous.config.digest,
        "changedAt": None if previous is None else _iso(changed_at),
        "moves": topics,
    }
