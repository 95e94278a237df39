"""A move's counts, aggregated in the fleet's SQLite file (private: what
:meth:`kbear.server._fleet_store.FleetStore.move_progress` runs).

The entries are never read one by one into Python: every entry carries the hash
of its lookup as answered (kind, topic, group, meta, digest, route held) and of
its client (id, meta, host), indexed together with its last-seen time
(``fleet_lookup``). The distinct lookups are read from that index, classified
in Python (a route evaluated once per lookup under each configuration), and
the clients of the moving ones ranked and counted in SQL.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Collection
from dataclasses import dataclass

__all__ = [
    "GRACE_S",
    "MISSED_REFRESHES",
    "ONE_OFF_S",
    "Lookup",
    "MoveQuery",
    "MovingLookup",
    "StragglerRow",
    "move_progress",
]

#: A distinct lookup held: its hash, client id ('' unless asked by id), kind, topic,
#: group, meta JSON, digest, cluster, physical topic, and how many entries hold it.
Lookup = tuple[int, str, str, str, str, str, str, str, str, int]
#: A lookup whose route changed: its hash, client id (as in :data:`Lookup`), topic,
#: and 1 when its entries hold the new route, else 0.
MovingLookup = tuple[int, str, str, int]
#: A straggler: topic, rank (1 on the old route, 2 not asked since, 3 not seen since), client id, address,
#: kind, group, cluster, physical topic, last seen (Unix time, seconds).
StragglerRow = tuple[str, int, str, str, str, str, str, str, float]

#: An entry not asked since the change whose client is not expected to ask again
#: (not seen since): one that asked once (no earlier request recorded) longer than
#: ``:once`` seconds ago, or one that is overdue: silent for more than ``:misses``
#: times its last interval between two requests plus ``:grace`` seconds.
_GONE = (
    "(:now - f.seen > CASE WHEN f.prev_seen IS NULL THEN :once "
    "ELSE :misses * (f.seen - f.prev_seen) + :grace END)"
)
#: Each client's least advanced entry per topic, as one number so that SQLite's
#: ``MAX`` (PostgreSQL's ``DISTINCT ON``) picks its row: rank x 1e11 - last seen
#: (seen < 1e11 s, i.e. until year 5138). The highest is the highest rank (1 on the
#: old route, 2 not asked since, 3 not seen since; 0 on the new), then the least
#: recently seen; the integer part of ``w / 1e11 + 1`` is the rank again.
_WORST = (
    f"CASE WHEN m.moved = 1 THEN 0 WHEN f.seen >= :at THEN 1 WHEN {_GONE} THEN 3 ELSE 2 END * 1e11 - f.seen"
)

#: A client that asked once, and not since the change, is not waited for once its
#: lookup is this old (seconds): KBear's Java client refreshes every 60 s by default.
ONE_OFF_S = 75.0
#: A client that asked more than once is not waited for once silent for this many
#: times its last interval between two requests ...
MISSED_REFRESHES = 2.0
#: ... plus this many seconds.
GRACE_S = 5.0


@dataclass(frozen=True)
class MoveQuery:
    """What a move's progress is counted over.

    Attributes:
        topics: the topics read (None: every topic).
        by_client_id: group the lookups by client id too (a rule tests ``client.id``:
            slower, the table is read rather than its index).
        classify: given the distinct lookups of ``topics``, answers those whose
            route changed (:data:`MovingLookup`).
        changed_at: when the change was applied (Unix time, seconds): an entry not on
            the new route is on the old one when seen since, else not asked since,
            or not seen since when its client is not expected to ask again (``_GONE``).
        now: the time the progress is read at (Unix time, seconds).
        listed: most stragglers listed per topic; listed_in_all: in all.
    """

    topics: Collection[str] | None
    by_client_id: bool
    classify: Callable[[list[Lookup]], list[MovingLookup]]
    changed_at: float
    listed: int
    listed_in_all: int
    now: float = 0.0


def move_progress(
    db: sqlite3.Connection, query: MoveQuery
) -> tuple[list[tuple[str, int, int]], list[StragglerRow]]:
    """Count a move's clients by state (``db``: a fleet file's connection, or the
    PostgreSQL store's (:class:`kbear.server._fleet_store_pg._Dialect`), in a read
    transaction; temporary tables are made in it).

    Returns:
        (topic, rank, clients) per rank held (0 new route, 1 old, 2 not asked since,
        3 not seen since;
        a client counts once per topic, by its least advanced entry), and the
        stragglers least recently seen, each by its least advanced entry, sorted by
        topic then last seen.
    """
    topics, by_client_id, changed_at = query.topics, query.by_client_id, query.changed_at
    postgres = not isinstance(db, sqlite3.Connection)
    where, asked = "", {}
    if topics is not None and postgres:
        where, asked = " WHERE topic = ANY(:topics)", {"topics": list(topics)}
    elif topics is not None:
        db.execute("CREATE TEMP TABLE asked (topic TEXT PRIMARY KEY)")
        db.executemany("INSERT OR IGNORE INTO asked VALUES (?)", [(t,) for t in topics])
        where = " WHERE topic IN (SELECT topic FROM asked)"
    cid = "client_id" if by_client_id else "''"
    lookups = db.execute(
        f"SELECT c.h, c.cid, f.kind, f.topic, f.grp, f.meta, f.digest, f.cluster, f.route_topic, c.n "
        f"FROM (SELECT lookup_hash AS h, {cid} AS cid, COUNT(*) AS n, MIN(rowid) AS r FROM fleet{where} "
        f"GROUP BY 1, 2) c JOIN fleet f ON f.rowid = c.r",
        asked,
    ).fetchall()
    moving = query.classify(lookups)
    if not moving:
        return [], []
    names = sorted({topic for _, _, topic, _ in moving})
    number = {name: i for i, name in enumerate(names)}
    db.execute("CREATE TEMP TABLE moving (h BIGINT, cid TEXT, t INT, moved INT, PRIMARY KEY (h, cid))")
    db.executemany(
        "INSERT INTO moving VALUES (?, ?, ?, ?)", [(h, c, number[t], moved) for h, c, t, moved in moving]
    )
    on = "m.h = f.lookup_hash" + (" AND m.cid = f.client_id" if by_client_id else "")
    clients = (  # PostgreSQL has no bare column beside MAX
        f"SELECT DISTINCT ON (m.t, f.client_hash) m.t AS t, f.rowid AS r, {_WORST} AS w "
        f"FROM fleet f JOIN moving m ON {on} ORDER BY m.t, f.client_hash, w DESC"
        if postgres
        else f"SELECT m.t AS t, f.rowid AS r, MAX({_WORST}) AS w FROM fleet f JOIN moving m ON {on} "
        "GROUP BY m.t, f.client_hash"
    )
    db.execute(
        "CREATE TEMP TABLE clients AS " + clients,
        {"at": changed_at, "now": query.now, "once": ONE_OFF_S, "misses": MISSED_REFRESHES, "grace": GRACE_S},
    )
    rank_of = "FLOOR(w / 1e11 + 1)" if postgres else "w / 1e11 + 1"  # PostgreSQL's CAST rounds
    counts = [
        (names[t], rank, n)
        for t, rank, n in db.execute(
            f"SELECT t, CAST({rank_of} AS INTEGER), COUNT(*) FROM clients GROUP BY 1, 2"
        )
    ]
    chosen: dict[int, tuple[int, int]] = {}  # entry rowid -> topic number, rank
    per_topic = [0] * len(names)
    for t, r, w in db.execute("SELECT t, r, w FROM clients WHERE w > 0 ORDER BY w DESC"):
        if per_topic[t] < query.listed:
            per_topic[t] += 1
            chosen[r] = (t, int(w / 1e11 + 1))
            if len(chosen) >= query.listed_in_all:
                break
    stragglers: list[StragglerRow] = []
    rowids = list(chosen)
    for start in range(0, len(rowids), 500):
        part = rowids[start : start + 500]
        for r, client_id, address, kind, group, cluster, route_topic, seen in db.execute(
            "SELECT rowid, client_id, address, kind, grp, cluster, route_topic, seen FROM fleet "
            f"WHERE rowid IN ({', '.join('?' * len(part))})",
            part,
        ):
            t, rank = chosen[r]
            stragglers.append((names[t], rank, client_id, address, kind, group, cluster, route_topic, seen))
    stragglers.sort(key=lambda s: (s[0], s[8]))
    return counts, stragglers
