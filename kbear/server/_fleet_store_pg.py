"""The fleet in PostgreSQL (private: ``kbear serve --fleet-store postgresql://...``).

The same tables as the SQLite file (:mod:`kbear.server._fleet_store`), so that N
replicas of ``kbear serve`` over one configuration share one fleet, one move
progress and one audit log. The statements are the SQLite store's, given to
PostgreSQL through :class:`_Dialect` (placeholders, ``GREATEST``, the ``id``
column for SQLite's ``rowid``); a move's client ranking, which relies on
SQLite's bare columns beside ``MAX``, is written for PostgreSQL
(``DISTINCT ON``).

The schema is versioned in ``kbear_schema``: created when missing, and a fleet of
an older version is dropped and made anew (the fleet is a cache of the last
``--fleet-ttl`` seconds; the audit log is kept), under an advisory lock so that
replicas starting together do it once. psycopg 3 (the ``server`` extra).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg

from kbear.server._fleet_store import FleetStore
from kbear.server._move_counts import GONE, GRACE_S, MISSED_REFRESHES, ONE_OFF_S, MoveQuery, StragglerRow

__all__ = ["SCHEMA_VERSION", "PostgresFleetStore"]

#: The schema's version (``kbear_schema``), written by the replica that creates or migrates it.
SCHEMA_VERSION = 3
#: An advisory lock's key: one replica creates or migrates the schema at a time.
_LOCK = 0x6B62656172
_SCHEMA = """
CREATE TABLE IF NOT EXISTS fleet (
    id BIGSERIAL PRIMARY KEY,
    key TEXT NOT NULL UNIQUE,
    client_id TEXT NOT NULL,
    meta TEXT NOT NULL,
    host TEXT NOT NULL,
    kind TEXT NOT NULL,
    topic TEXT NOT NULL,
    grp TEXT NOT NULL,
    address TEXT NOT NULL,
    cluster TEXT NOT NULL,
    route_topic TEXT NOT NULL,
    digest TEXT NOT NULL,
    first_seen DOUBLE PRECISION NOT NULL,
    seen DOUBLE PRECISION NOT NULL,
    prev_seen DOUBLE PRECISION,
    lookup_hash BIGINT NOT NULL,
    client_hash BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS fleet_seen ON fleet (seen);
CREATE INDEX IF NOT EXISTS fleet_client ON fleet (client_id, meta, host);
CREATE INDEX IF NOT EXISTS fleet_topic_lookup ON fleet (topic, lookup_hash);
CREATE INDEX IF NOT EXISTS fleet_lookup ON fleet (lookup_hash, client_hash, seen);
CREATE TABLE IF NOT EXISTS fleet_counters (name TEXT PRIMARY KEY, value BIGINT NOT NULL)
"""


class _Dialect:
    """A psycopg connection answering the SQLite store's statements (``execute``,
    ``executemany`` returning the cursor, as ``sqlite3`` does)."""

    _REWRITES = (
        (re.compile(r"\bBEGIN IMMEDIATE\b"), "BEGIN"),
        (re.compile(r"\bmax\(seen, \?\)"), "GREATEST(seen, ?)"),
        (re.compile(r"\browid\b"), "id"),
        (re.compile(r"\bCROSS JOIN\b"), "JOIN"),
        (re.compile(r":([a-z]+)\b"), r"%(\1)s"),
        (re.compile(r"\?"), "%s"),
    )

    def __init__(self, connection: psycopg.Connection[Any]) -> None:
        self.connection = connection

    @classmethod
    def sql(cls, statement: str) -> str:
        for pattern, replacement in cls._REWRITES:
            statement = pattern.sub(replacement, statement)
        return statement

    def execute(self, statement: str, params: Any = ()) -> Any:
        if statement.lstrip().upper().startswith("PRAGMA"):
            return self.connection.cursor()
        return self.connection.execute(self.sql(statement), params or None)

    def executemany(self, statement: str, params: Sequence[Any]) -> Any:
        cursor = self.connection.cursor()
        if params:
            cursor.executemany(self.sql(statement), params)
        return cursor

    def close(self) -> None:
        self.connection.close()


class PostgresFleetStore(FleetStore):
    """The fleet's tables in a PostgreSQL database.

    Args:
        url: ``postgresql://user@host:port/database`` (libpq's URL, password
            included or from ``PGPASSWORD``/``.pgpass``).
        connect_timeout_s: bound of a connection attempt, seconds.

    Raises:
        psycopg.Error: the database cannot be reached or its schema made.
    """

    def __init__(self, url: str, connect_timeout_s: float = 5.0) -> None:
        self.url = url
        self.path = url  # type: ignore[assignment]  # named in log lines as the file is
        self._timeout = max(1, int(connect_timeout_s))
        self._db = None
        from kbear.server._fleet_store import _Hashes

        self._hashes = _Hashes()
        with (
            psycopg.connect(url, autocommit=True, connect_timeout=self._timeout) as db,
            db.transaction(),
        ):
            db.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK,))
            db.execute(
                "CREATE TABLE IF NOT EXISTS kbear_schema (name TEXT PRIMARY KEY, version INT NOT NULL)"
            )
            row = db.execute("SELECT version FROM kbear_schema WHERE name = 'fleet'").fetchone()
            if row is not None and row[0] < SCHEMA_VERSION:
                db.execute("DROP TABLE IF EXISTS fleet")
            for statement in _SCHEMA.split(";"):
                db.execute(statement.encode())
            db.execute(
                "INSERT INTO kbear_schema VALUES ('fleet', %s) "
                "ON CONFLICT (name) DO UPDATE SET version = EXCLUDED.version",
                (SCHEMA_VERSION,),
            )

    def _open(self, *, check_same_thread: bool = True) -> Any:
        return _Dialect(psycopg.connect(self.url, autocommit=True, connect_timeout=self._timeout))

    @contextlib.contextmanager
    def _connect(self) -> Iterator[Any]:
        db = self._open()
        try:
            yield db
        finally:
            db.close()

    def write(self, *args: Any, **kwargs: Any) -> None:
        try:
            super().write(*args, **kwargs)
        except psycopg.Error:
            self.close()  # a connection that failed is not used again
            raise

    def move_progress(self, query: MoveQuery) -> tuple[list[tuple[str, int, int]], list[StragglerRow]]:
        """What :func:`kbear.server._move_counts.move_progress` answers, in one
        repeatable-read transaction of the database."""
        with self._connect() as db, db.connection.transaction():
            db.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            return _move_progress(db, query)


def _move_progress(db: _Dialect, query: MoveQuery) -> tuple[list[tuple[str, int, int]], list[StragglerRow]]:
    """:func:`kbear.server._move_counts.move_progress` for PostgreSQL."""
    topics, by_client_id, at = query.topics, query.by_client_id, query.changed_at
    where, params = "", {}
    if topics is not None:
        where, params = " WHERE topic = ANY(%(topics)s)", {"topics": list(topics)}
    cid = "client_id" if by_client_id else "''"
    lookups = db.connection.execute(
        "SELECT c.h, c.cid, f.kind, f.topic, f.grp, f.meta, f.digest, f.cluster, f.route_topic, c.n "
        f"FROM (SELECT lookup_hash AS h, {cid} AS cid, COUNT(*) AS n, MIN(id) AS r FROM fleet{where} "
        "GROUP BY 1, 2) c JOIN fleet f ON f.id = c.r",
        params,
    ).fetchall()
    moving = query.classify([tuple(row) for row in lookups])
    if not moving:
        return [], []
    names = sorted({topic for _, _, topic, _ in moving})
    number = {name: i for i, name in enumerate(names)}
    conn = db.connection
    conn.execute(
        "CREATE TEMP TABLE moving (h BIGINT, cid TEXT, t INT, moved INT, PRIMARY KEY (h, cid)) ON COMMIT DROP"
    )
    with conn.cursor() as cursor:
        cursor.executemany(
            "INSERT INTO moving VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
            [(h, c, number[t], moved) for h, c, t, moved in moving],
        )
    on = "m.h = f.lookup_hash" + (" AND m.cid = f.client_id" if by_client_id else "")
    gone = _Dialect.sql(GONE)
    worst = (
        f"(CASE WHEN m.moved = 1 THEN 0 WHEN f.seen >= %(at)s THEN 1 WHEN {gone} THEN 3 ELSE 2 END "
        "* 1e11 - f.seen)"
    )
    conn.execute(
        "CREATE TEMP TABLE clients ON COMMIT DROP AS SELECT DISTINCT ON (m.t, f.client_hash) "
        f"m.t AS t, f.id AS r, {worst} AS w FROM fleet f JOIN moving m ON {on} "
        "ORDER BY m.t, f.client_hash, w DESC",
        {"at": at, "now": query.now, "once": ONE_OFF_S, "misses": MISSED_REFRESHES, "grace": GRACE_S},
    )
    counts = [
        (names[t], int(rank), int(n))
        for t, rank, n in conn.execute(
            "SELECT t, FLOOR(w / 1e11 + 1)::int AS rank, COUNT(*) FROM clients GROUP BY 1, 2"
        )
    ]
    chosen: dict[int, tuple[int, int]] = {}
    per_topic = [0] * len(names)
    for t, r, w in conn.execute("SELECT t, r, w FROM clients WHERE w > 0 ORDER BY w DESC"):
        if per_topic[t] < query.listed:
            per_topic[t] += 1
            chosen[r] = (t, int(w / 1e11 + 1))
            if len(chosen) >= query.listed_in_all:
                break
    stragglers: list[StragglerRow] = []
    if chosen:
        for r, client_id, address, kind, group, cluster, route_topic, seen in conn.execute(
            "SELECT id, client_id, address, kind, grp, cluster, route_topic, seen FROM fleet "
            "WHERE id = ANY(%s)",
            (list(chosen),),
        ):
            t, rank = chosen[r]
            stragglers.append((names[t], rank, client_id, address, kind, group, cluster, route_topic, seen))
    stragglers.sort(key=lambda s: (s[0], s[8]))
    return counts, stragglers
