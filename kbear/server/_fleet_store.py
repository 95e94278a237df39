"""The fleet's store: its tables, the one transaction of a flush, and the reads
behind ``GET /fleet`` (private: :class:`kbear.server.fleet.FleetRecorder` owns one).

One SQLite file (stdlib ``sqlite3``, WAL journal) shared by every worker process of
one ``kbear serve --workers N``: each opens it and SQLite serialises their writes.
A reader opens a connection per call; the writer keeps its own (used under the
recorder's flush lock).

Or a PostgreSQL database (``kbear serve --fleet-store postgresql://...``, psycopg 3
from the ``server`` extra), so that N replicas of ``kbear serve`` over one
configuration share one fleet, one move progress and one audit log: the same tables
and the same statements, given to PostgreSQL through :class:`_Dialect`
(placeholders, ``GREATEST``, the ``id`` column for SQLite's ``rowid``); a move's
client ranking, which relies on SQLite's bare columns beside ``MAX``, uses
``DISTINCT ON`` there (:func:`kbear.server._move_counts.move_progress`). The schema is
versioned in ``kbear_schema``: created when missing, and a fleet of an older version
is dropped and made anew (the fleet is a cache of the last ``--fleet-ttl`` seconds;
the audit log is kept), under an advisory lock so that replicas starting together
do it once.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import re
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kbear.server._move_counts import MoveQuery, StragglerRow, move_progress

if TYPE_CHECKING:
    import psycopg

__all__ = ["FleetEntry", "FleetStats", "FleetStore", "connect", "is_postgres"]

#: How long a writer waits for another process's transaction (SQLite), or a
#: connection attempt (PostgreSQL), seconds.
_TIMEOUT_S = 5
#: An advisory lock's key: one PostgreSQL replica creates or migrates the schema at a time.
_LOCK = 0x6B62656172

#: The tables, in types SQLite (by their affinity) and PostgreSQL both read; the fleet's
#: ``id`` is SQLite's ``rowid`` (an alias of it), a ``BIGSERIAL`` in PostgreSQL (:class:`_Dialect`).
_SCHEMA = """
CREATE TABLE IF NOT EXISTS fleet (
    id INTEGER PRIMARY KEY,
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
#: The schema's version (in ``kbear_schema``, written by the process that creates or
#: migrates it): a fleet of an older one has its entries dropped at open (they are a
#: cache of the last ``--fleet-ttl`` seconds; the audit log is kept).
SCHEMA_VERSION = 3

_UPSERT = """
INSERT INTO fleet (key, client_id, meta, host, kind, topic, grp, address, cluster, route_topic, digest,
                   first_seen, seen, lookup_hash, client_hash)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (key) DO UPDATE SET
    address = excluded.address, cluster = excluded.cluster, route_topic = excluded.route_topic,
    digest = excluded.digest, seen = excluded.seen, lookup_hash = excluded.lookup_hash,
    prev_seen = CASE WHEN excluded.seen > fleet.seen THEN fleet.seen ELSE fleet.prev_seen END
WHERE excluded.seen >= fleet.seen
"""

#: An entry's row as written (:meth:`FleetStore.write`).
_Row = tuple[str | float, ...]

#: Most entries whose last-seen time one statement refreshes.
_REFRESHED_AT_MOST = 500


def _refresh_sql(count: int) -> str:
    """A last-seen refresh of ``count`` entries answered to one request: it matches
    fewer rows when one is gone or was written since by another process with another
    address or digest (the route of an entry's lookup and client under one digest is
    one)."""
    keys = ", ".join("?" * count)
    return (
        "UPDATE fleet SET prev_seen = CASE WHEN ? > seen THEN seen ELSE prev_seen END, seen = max(seen, ?) "
        f"WHERE key IN ({keys}) AND address = ? AND digest = ?"
    )


_COLUMNS = (
    "f.client_id, f.meta, f.address, f.kind, f.topic, f.grp, f.cluster, "
    "f.route_topic, f.digest, f.first_seen, f.seen"
)


class _Dialect:
    """A psycopg connection answering the SQLite store's statements (``execute``,
    ``executemany`` returning the cursor, as ``sqlite3`` does)."""

    _REWRITES = (
        (re.compile(r"\bBEGIN IMMEDIATE\b"), "BEGIN"),
        (re.compile(r"\bmax\(seen, \?\)"), "GREATEST(seen, ?)"),
        (re.compile(r"\browid\b"), "id"),
        (re.compile(r"\bCROSS JOIN\b"), "JOIN"),
        (re.compile(r"\bINTEGER PRIMARY KEY( AUTOINCREMENT)?\b"), "BIGSERIAL PRIMARY KEY"),
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
        return self.connection.execute(self.sql(statement), params or None)

    def executemany(self, statement: str, params: Sequence[Any]) -> Any:
        cursor = self.connection.cursor()
        if params:
            cursor.executemany(self.sql(statement), params)
        return cursor

    def close(self) -> None:
        self.connection.close()


def is_postgres(location: object) -> bool:
    """Whether a store's location is a PostgreSQL URL (else a SQLite file)."""
    return str(location).startswith(("postgresql://", "postgres://"))


def connect(location: str | Path, *, check_same_thread: bool = True) -> Any:
    """A connection to a store: a PostgreSQL database's (``postgresql://...``: libpq's
    URL, password included or from ``PGPASSWORD``/``.pgpass``; autocommit, answering the
    SQLite statements, :class:`_Dialect`), else a SQLite file's (autocommit).

    Raises:
        sqlite3.Error, psycopg.Error: the store cannot be opened or reached.
    """
    if is_postgres(location):
        import psycopg  # the server extra's: only for a PostgreSQL store

        return _Dialect(psycopg.connect(str(location), autocommit=True, connect_timeout=_TIMEOUT_S))
    return sqlite3.connect(
        location, timeout=_TIMEOUT_S, isolation_level=None, check_same_thread=check_same_thread
    )


@contextlib.contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """A write transaction of ``db`` (``BEGIN IMMEDIATE``: one process at a time),
    committed when the block ends, rolled back when it raises."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def create_schema(db: Any) -> None:
    """Create the tables in one transaction (one PostgreSQL replica at a time: an
    advisory lock), the fleet's made anew when ``kbear_schema`` says it is older than
    :data:`SCHEMA_VERSION` (``db``: a fleet file's connection or a PostgreSQL one)."""
    with transaction(db):
        if isinstance(db, _Dialect):
            db.execute(f"SELECT pg_advisory_xact_lock({_LOCK})")
        db.execute("CREATE TABLE IF NOT EXISTS kbear_schema (name TEXT PRIMARY KEY, version INT NOT NULL)")
        row = db.execute("SELECT version FROM kbear_schema WHERE name = 'fleet'").fetchone()
        if row is None or row[0] < SCHEMA_VERSION:
            db.execute("DROP TABLE IF EXISTS fleet")
        for statement in _SCHEMA.split(";"):
            db.execute(statement)
        db.execute(
            "INSERT INTO kbear_schema VALUES ('fleet', ?) "
            "ON CONFLICT (name) DO UPDATE SET version = excluded.version",
            (SCHEMA_VERSION,),
        )


def _where(
    prefix: str, topic: str | None, group: str | None, cluster: str | None
) -> tuple[str, list[str | int]]:
    """The ``WHERE`` clause (with its values) of the filters given (columns named with ``prefix``)."""
    filters = [(c, v) for c, v in (("topic", topic), ("grp", group), ("cluster", cluster)) if v is not None]
    condition = " AND ".join(f"{prefix}{c} = ?" for c, _ in filters)
    return (" WHERE " + condition if condition else ""), [v for _, v in filters]


@dataclass(frozen=True)
class FleetEntry:
    """One lookup of one client, as last answered.

    Attributes:
        client_id: ``client.id`` ('' when the client sent none).
        meta: the client's meta, secret-looking values replaced by ``***``.
        address: the peer address of its last request (``host:port``).
        kind: ``producer`` or ``consumer``.
        topic: the requested topic; group: the consumer group ('' for a producer).
        cluster, route_topic: the route answered (cluster id, physical topic).
        digest: the configuration digest the answer came from.
        first_seen, seen: its first and last answer (Unix time, seconds).
    """

    client_id: str
    meta: Mapping[str, str]
    address: str
    kind: str
    topic: str
    group: str
    cluster: str
    route_topic: str
    digest: str
    first_seen: float
    seen: float
    #: the meta as stored (JSON, sorted keys), when read from the store ("": not kept)
    meta_json: str = field(default="", compare=False, repr=False)

    @cached_property
    def client_key(self) -> tuple[str, str, str]:
        """What tells two clients apart: id, meta (as JSON, sorted keys) and the
        peer's host (computed once)."""
        meta = self.meta_json or json.dumps(dict(self.meta), sort_keys=True)
        return (self.client_id, meta, self.address.rsplit(":", 1)[0])


@dataclass(frozen=True)
class FleetStats:
    """The fleet's size and what its bounds cost.

    Attributes:
        entries: entries held; clients: distinct clients among them.
        evicted: entries deleted because ``max_entries`` was reached.
        expired: entries deleted after ``ttl_s`` unseen.
        dropped: notes dropped because ``max_pending`` notes waited for a flush.
    """

    entries: int
    clients: int
    evicted: int
    expired: int
    dropped: int


#: Most lookups and clients whose hashes a writer remembers.
_HASHES_KEPT = 200_000


@functools.lru_cache(maxsize=_HASHES_KEPT)
def _hash(parts: tuple[str | float, ...]) -> int:
    """A 64-bit hash of ``parts`` (signed, as SQLite's integers), the same in every process.
    Remembered (a fleet's rows repeat a few lookups and clients), so that a row costs a
    cache read, not a hash."""
    text = "\x1f".join(map(str, parts)).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big", signed=True)


def _hashes(row: Sequence[str | float]) -> tuple[int, int]:
    """The hashes kept with an entry's row: of its lookup as answered (kind, topic,
    group, meta, digest, cluster, physical topic: what its route under any
    configuration depends on, but for the client id) and of its client (id, meta,
    host): what a move's progress groups the entries by, as integers."""
    _, cid, meta, host, kind, topic, group, _, cluster, route_topic, digest = row[:11]
    return _hash((kind, topic, group, meta, digest, cluster, route_topic)), _hash((cid, meta, host))


class FleetStore:
    """The fleet's tables in one SQLite file, or in a PostgreSQL database.

    Args:
        location: the database file (created with its tables when missing), or
            ``postgresql://...`` (its schema created or migrated here).

    Raises:
        sqlite3.Error: the file cannot be opened or is not a fleet database.
        psycopg.Error: the PostgreSQL database cannot be reached or its schema made.
    """

    def __init__(self, location: str | Path) -> None:
        self.postgres = is_postgres(location)
        #: the SQLite file, or the PostgreSQL URL
        self.path: Path | str = str(location) if self.postgres else Path(location)
        self._db: Any = None
        with self._connect() as db:
            if not self.postgres:
                db.execute("PRAGMA journal_mode=WAL")
            create_schema(db)

    def _open(self, *, check_same_thread: bool = True) -> Any:
        db = connect(self.path, check_same_thread=check_same_thread)
        if not self.postgres:
            db.execute("PRAGMA synchronous=NORMAL")
        return db

    def _connect(self) -> contextlib.closing[Any]:
        return contextlib.closing(self._open())

    # ------------------------------------------------------------------ writing

    def write(
        self,
        rows: Sequence[tuple[str | float, ...]],
        counts: Mapping[str, int],
        *,
        refreshes: Sequence[Sequence[_Row]] = (),
        expire_before: float | None = None,
        max_entries: int | None = None,
    ) -> None:
        """Write in one transaction: upsert ``rows`` (a row per entry: key, client id,
        meta JSON, host, kind, topic, group, address, cluster, physical topic, digest,
        first seen, seen; an older ``seen`` never overwrites a newer one; each kept
        with the hashes of its lookup and of its client, :func:`_hashes`); before
        them, update the last-seen time of ``refreshes`` (groups of rows as ``rows``
        of entries whose answer this process wrote before, one group per request:
        same last-seen time, address and digest; one statement per group, a third of
        an upsert's cost per row; upserted as ``rows`` when one of them is gone or was
        written since by another process with another answer); with
        ``expire_before`` (Unix time, seconds) delete the entries last seen before it
        and keep at most ``max_entries`` (the least recently seen go); add ``counts``
        (``dropped``...) and the entries deleted (``expired``, ``evicted``) to the
        shared counters.

        Raises:
            sqlite3.Error, psycopg.Error: the write failed (the transaction is rolled back).
        """
        with transaction(self._writer()) as db:
            if refreshes:
                self._refresh(db, refreshes)
            db.executemany(_UPSERT, [(*row, *_hashes(row)) for row in rows])
            added = dict(counts)
            if expire_before is not None:
                added["expired"] = db.execute("DELETE FROM fleet WHERE seen < ?", (expire_before,)).rowcount
            if max_entries is not None:
                (count,) = db.execute("SELECT COUNT(*) FROM fleet").fetchone()
                if count > max_entries:
                    added["evicted"] = db.execute(
                        "DELETE FROM fleet WHERE rowid IN (SELECT rowid FROM fleet ORDER BY seen LIMIT ?)",
                        (count - max_entries,),
                    ).rowcount
            db.executemany(
                "INSERT INTO fleet_counters VALUES (?, ?) "
                "ON CONFLICT (name) DO UPDATE SET value = fleet_counters.value + excluded.value",
                [(name, value) for name, value in added.items() if value],
            )

    def _refresh(self, db: sqlite3.Connection, refreshes: Sequence[Sequence[_Row]]) -> None:
        """The last-seen refreshes of :meth:`write`, in its transaction."""
        by_count: dict[int, list[_Row]] = {}
        for group in refreshes:
            for start in range(0, len(group), _REFRESHED_AT_MOST):
                rows = group[start : start + _REFRESHED_AT_MOST]
                seen, address, digest = rows[0][12], rows[0][7], rows[0][10]
                by_count.setdefault(len(rows), []).append(
                    (seen, seen, *(row[0] for row in rows), address, digest)
                )
        updated = sum(db.executemany(_refresh_sql(n), params).rowcount for n, params in by_count.items())
        if updated < sum(map(len, refreshes)):
            db.executemany(_UPSERT, [(*row, *_hashes(row)) for group in refreshes for row in group])

    def _writer(self) -> Any:
        """The writer's own connection (kept open; its caller serialises the writes)."""
        if self._db is None:
            self._db = self._open(check_same_thread=False)
        return self._db

    def close(self) -> None:
        """Close the writer's connection (a later write opens another)."""
        if self._db is not None:
            self._db.close()
            self._db = None

    # ------------------------------------------------------------------ reading

    def entries(
        self, *, topic: str | None, group: str | None, cluster: str | None, clients: int | None
    ) -> list[FleetEntry]:
        """What :meth:`kbear.server.fleet.FleetRecorder.entries` answers (filters and
        order there)."""
        inner, values = _where("", topic, group, cluster)
        outer, _ = _where("f.", topic, group, cluster)
        if clients is None:  # every client: one scan, no join
            sql = (
                f"SELECT {_COLUMNS} FROM fleet f{outer} "
                "ORDER BY MAX(f.seen) OVER (PARTITION BY f.client_id, f.meta, f.host) DESC, "
                "f.client_id, f.meta, f.host, f.seen DESC"
            )
        else:  # the most recently seen clients, then their entries (by the fleet_client index)
            sql = (
                "WITH c AS (SELECT client_id, meta, host, MAX(seen) AS last FROM fleet"
                f"{inner} GROUP BY client_id, meta, host "
                "ORDER BY last DESC LIMIT ?) "
                f"SELECT {_COLUMNS} FROM c CROSS JOIN fleet f "
                "ON f.client_id = c.client_id AND f.meta = c.meta AND f.host = c.host"
                f"{outer} "
                "ORDER BY c.last DESC, f.client_id, f.meta, f.host, f.seen DESC"
            )
        params = values if clients is None else [*values, clients, *values]
        with self._connect() as db:
            rows = db.execute(sql, params).fetchall()
        metas = {meta: json.loads(meta) for meta in {row[1] for row in rows}}
        return [
            FleetEntry(cid, metas[meta], addr, kind, t, g, c, rt, d, first, seen, meta)
            for cid, meta, addr, kind, t, g, c, rt, d, first, seen in rows
        ]

    def count_clients(
        self, *, topic: str | None = None, group: str | None = None, cluster: str | None = None
    ) -> int:
        """How many clients have an entry matching the filters (as :meth:`entries`)."""
        condition, params = _where("", topic, group, cluster)
        with self._connect() as db:
            (count,) = db.execute(
                f"SELECT COUNT(*) FROM (SELECT DISTINCT client_id, meta, host FROM fleet{condition}) AS d",
                params,
            ).fetchone()
        return int(count)

    def stats(self, dropped: int) -> FleetStats:
        """Entries held, distinct clients among them, and the shared counters (every
        process of the file together; ``dropped``: notes this process dropped since
        its last write, added)."""
        with self._connect() as db:
            (entries,) = db.execute("SELECT COUNT(*) FROM fleet").fetchone()
            (clients,) = db.execute(
                "SELECT COUNT(*) FROM (SELECT DISTINCT client_id, meta, host FROM fleet) AS d"
            ).fetchone()
            counters = dict(db.execute("SELECT name, value FROM fleet_counters").fetchall())
        counted = {name: int(counters.get(name, 0)) for name in ("evicted", "expired", "dropped")}
        counted["dropped"] += dropped
        return FleetStats(int(entries), int(clients), **counted)

    # ------------------------------------------------------------------ a move's progress

    def move_progress(self, query: MoveQuery) -> tuple[list[tuple[str, int, int]], list[StragglerRow]]:
        """What :func:`kbear.server._move_counts.move_progress` answers, in one read
        transaction (repeatable read in PostgreSQL): one snapshot for every read."""
        with self._connect() as db:
            if self.postgres:
                db.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            else:
                db.execute("PRAGMA temp_store=MEMORY")
                db.execute("BEGIN")
            return move_progress(db, query)
