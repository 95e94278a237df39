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
- not asked since: its last request came before the change, and its client is
  expected to ask again;
- not seen since: its last request came before the change, and its client is not
  expected to ask again: it asked once (a ``curl``, a short-lived job) more than
  :data:`~kbear.server._move_counts.ONE_OFF_S` seconds ago (75), or it is silent
  for more than twice its last interval between two requests plus 5 s. Listed
  apart and not waited for (``kbear move --apply --meta-service`` returns
  without it); it counts again as soon as it asks.

A client counts once per topic, by its least advanced entry (not seen since,
not asked since, then old, then new). ``remaining`` = on the old route + not
asked since; ``progress`` = on the new route / the clients but those not seen since.

Only the topics the change can have moved are read (:func:`changed_topics`):
those whose topic or consumer-group rules, ``topics.yaml`` meta or
consumer-group meta differ; every topic when the global rules differ. The
entries are not read one by one: the fleet's store answers its distinct
lookups (kind, topic, group, meta, digest, route held; client id too when a
rule tests it), :func:`classify` evaluates each once under both
configurations, and the store counts the clients of the moving lookups by
state in SQL (:meth:`kbear.server.fleet.FleetRecorder.move_progress`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from kbear._chain import index_rules
from kbear._identity import Client
from kbear._route import NoRouteError
from kbear.config import KBearConfig, RouteRule
from kbear.server._move_counts import Lookup, MovingLookup, StragglerRow
from kbear.server.holder import Served, iso

__all__ = [
    "MOVED",
    "NOT_ASKED",
    "NOT_SEEN",
    "ON_OLD",
    "STRAGGLERS_LISTED",
    "STRAGGLERS_LISTED_IN_ALL",
    "TopicMove",
    "changed_topics",
    "classify",
    "moves_json",
    "rules_test_client_id",
    "topic_moves",
]

MOVED, ON_OLD, NOT_ASKED, NOT_SEEN = "onNewRoute", "onOldRoute", "notAskedSince", "notSeenSince"
#: The states by rank, as the fleet's store ranks them (0 the most advanced).
_STATES = (MOVED, ON_OLD, NOT_ASKED, NOT_SEEN)
#: Most stragglers listed per topic, and in one answer.
STRAGGLERS_LISTED, STRAGGLERS_LISTED_IN_ALL = 100, 1000

_Route = tuple[str, str] | None
_K = TypeVar("_K")


@dataclass
class TopicMove:
    """The progress of one topic's move.

    Attributes:
        topic: the requested topic.
        routes: (old route, new route) -> entries, routes as (cluster, physical topic).
        states: state (:data:`MOVED`, :data:`ON_OLD`, :data:`NOT_ASKED`, :data:`NOT_SEEN`)
            -> clients in it.
        stragglers: the least advanced entry of at most :data:`STRAGGLERS_LISTED`
            clients not moved yet, least recently seen first.
    """

    topic: str
    routes: dict[tuple[_Route, _Route], int] = field(default_factory=dict)
    states: dict[str, int] = field(default_factory=dict)
    stragglers: list[StragglerRow] = field(default_factory=list)

    def count(self, state: str) -> int:
        """How many clients are in ``state``."""
        return self.states.get(state, 0)


def _route_under(served: Served, lookup: Lookup, meta: Callable[[str], dict[str, str]]) -> _Route:
    """The route of ``lookup`` under ``served``: the lookup's own when it was answered
    from it, else evaluated with its client (id, when a rule tests ``client.id``, and
    meta: ``meta`` reads a meta's JSON, once per meta)."""
    _, client_id, kind, topic, group, meta_json, digest, cluster, route_topic, _ = lookup
    if digest == served.config.digest:
        return (cluster, route_topic)
    client = Client(client_id or None, meta(meta_json))
    try:
        if kind == "consumer":
            route = served.router.route_consumer(topic, group, client)
        else:
            route = served.router.route_producer(topic, client)
    except NoRouteError:
        return None
    return (route.cluster_id, route.topic)


def rules_test_client_id(config: KBearConfig) -> bool:
    """Whether a rule of ``config`` tests ``client.id`` (then clients differing only
    by id may have different routes)."""
    return any(c.key == "client.id" for r in config.rules for c in r.statement.conditions)


def classify(
    lookups: Iterable[Lookup], current: Served, previous: Served
) -> tuple[list[MovingLookup], dict[str, dict[tuple[_Route, _Route], int]]]:
    """The lookups whose route differs between ``previous`` and ``current``.

    Args:
        lookups: the distinct lookups held (:data:`~kbear.server._fleet_store.Lookup`),
            each route evaluated once per lookup (a lookup whose client id is '' is
            evaluated as a client without an id: pass ids when
            :func:`rules_test_client_id` says a rule reads them).

    Returns:
        the moving lookups (hash, client id, topic, and 1 when they hold the new
        route, answered from ``current``, else 0), and per topic (old route, new
        route) -> entries.
    """
    moving: list[MovingLookup] = []
    routes: dict[str, dict[tuple[_Route, _Route], int]] = {}
    meta = functools.cache(json.loads)
    digest = current.config.digest
    for lookup in lookups:
        old, new = _route_under(previous, lookup, meta), _route_under(current, lookup, meta)
        if old == new:
            continue
        lookup_hash, client_id, _, topic, _, _, answered_from, cluster, route_topic, entries = lookup
        moved = (cluster, route_topic) == new and answered_from == digest
        moving.append((lookup_hash, client_id, topic, int(moved)))
        by_route = routes.setdefault(topic, {})
        by_route[(old, new)] = by_route.get((old, new), 0) + entries
    return moving, routes


def _rule_list(rules: Iterable[RouteRule] | None) -> list[tuple[str, int, dict[str, str], str]]:
    return [(r.id, r.priority, dict(r.meta), str(r.statement)) for r in rules or ()]


def _differing(old: Mapping[_K, Any], new: Mapping[_K, Any], view: Callable[[Any], object]) -> set[_K]:
    """The keys of ``old`` or ``new`` whose values differ, as ``view`` shows them (a missing one: None)."""
    return {key for key in old.keys() | new.keys() if view(old.get(key)) != view(new.get(key))}


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
    out = _differing(old_topics, new_topics, _rule_list)
    out |= {topic for _, topic in _differing(old_groups, new_groups, _rule_list)}
    out |= {
        topic
        for topic in old.topics.keys() | new.topics.keys()
        if old.topic_meta(topic) != new.topic_meta(topic)
    }
    group_meta = lambda group: None if group is None else dict(group.meta)  # noqa: E731
    return out | {topic for _, topic in _differing(old.consumer_groups, new.consumer_groups, group_meta)}


def topic_moves(
    routes: dict[str, dict[tuple[_Route, _Route], int]],
    counts: Iterable[tuple[str, int, int]],
    stragglers: Iterable[StragglerRow],
) -> list[TopicMove]:
    """The moves of the topics whose route changed for some recorded client, sorted by topic.

    Args:
        routes: per topic, (old route, new route) -> entries (from :func:`classify`).
        counts: (topic, rank, clients): clients by their least advanced entry, rank
            0 on the new route, 1 on the old, 2 not asked since, 3 not seen since.
        stragglers: the listed stragglers, least recently seen first per topic.
    """
    moves = {topic: TopicMove(topic, dict(by_route)) for topic, by_route in routes.items()}
    for topic, rank, clients in counts:
        moves[topic].states[_STATES[rank]] = clients
    for row in stragglers:
        moves[row[0]].stragglers.append(row)
    return [moves[t] for t in sorted(moves)]


def _route_json(route: _Route) -> dict[str, str] | None:
    return None if route is None else {"clusterId": route[0], "topicId": route[1]}


def moves_json(
    moves: list[TopicMove], current: Served, previous: Served | None, changed_at: float
) -> dict[str, Any]:
    """The ``GET /fleet/moves`` answer (camelCase, as the protocol's messages)."""
    topics = []
    for move in moves:
        moved, on_old, not_asked = move.count(MOVED), move.count(ON_OLD), move.count(NOT_ASKED)
        not_seen = move.count(NOT_SEEN)
        live = moved + on_old + not_asked
        total = live + not_seen
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
                NOT_SEEN: not_seen,
                "remaining": on_old + not_asked,
                "progress": round(moved / live, 4) if live else 1.0,
                "stragglers": [
                    {
                        "id": cid,
                        "address": address,
                        "kind": kind,
                        "group": group or None,
                        "route": {"clusterId": cluster, "topicId": route_topic},
                        "lastSeen": iso(seen),
                        "state": _STATES[rank],
                    }
                    for _, rank, cid, address, kind, group, cluster, route_topic, seen in move.stragglers
                ],
            }
        )
    return {
        "digest": current.config.digest,
        "previousDigest": None if previous is None else previous.config.digest,
        "changedAt": None if previous is None else iso(changed_at),
        "moves": topics,
    }
