"""The fleet in PostgreSQL (private: ``kbear serve --fleet-store postgresql://...``).

The same tables as the SQLite file (:mod:`kbear.server._fleet_store`), so that N
replicas of ``kbear serve`` over one configuration share one fleet, one move
progress and one audit log. The statements are the SQLite store's, given to
PostgreSQL through :class:`_Dialect` (placeholders, ``GREATEST``, the ``id``
column for SQLite's ``rowid``); a move's client ranking, which relies on
SQLite's bare columns beside ``MAX``, uses ``DISTINCT ON`` there
(:func:`kbear.server._move_counts.move_progress`).

The schema is versioned in ``kbear_schema``: created when missing, and a fleet of
an older version is dropped and made anew (the fleet is a cache of the last
``--fleet-ttl`` seconds; the audit log is kept), under an advisory lock so that
replicas starting together do it once. psycopg 3 (the ``server`` extra).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence
from typing import Any

import psycopg

from kbear.server._fleet_store import _SCHEMA, FleetStore, create_schema
from kbear.server._move_counts import MoveQuery, StragglerRow, move_progress

__all__ = ["PostgresFleetStore"]

#: An advisory lock's key: one replica creates or migrates the schema at a time.
_LOCK = 0x6B62656172
#: The SQLite store's tables, with an ``id`` column for SQLite's ``rowid``.
_PG_SCHEMA = _SCHEMA.replace(
    "key TEXT NOT NULL PRIMARY KEY", "id BIGSERIAL PRIMARY KEY, key TEXT NOT NULL UNIQUE"
)


class _Dialect:
    """A psycopg connection answering the SQLite store's statements (``execute``,
    ``executemany`` returning the cursor, as ``sqlite3`` does)."""

    _REWRITES = (
        (re.compile(r"\bBEGIN IMMEDIATE\b"), "BEGIN"),
        (re.compile(r"\bmax\(seen, \?\)"), "GREATEST(seen, ?)"),
        (re.compile(r"\browid\b"), "id"),
        (re.compile(r"\bCROSS JOIN\b"), "JOIN"),
        (re.compile(r"\bINTEGER PRIMARY KEY AUTOINCREMENT\b"), "BIGSERIAL PRIMARY KEY"),
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
        with contextlib.closing(self._open()) as db:
            create_schema(db, _PG_SCHEMA, f"SELECT pg_advisory_xact_lock({_LOCK})")

    def _open(self, *, check_same_thread: bool = True) -> Any:
        return _Dialect(psycopg.connect(self.url, autocommit=True, connect_timeout=self._timeout))

    def write(self, *args: Any, **kwargs: Any) -> None:
        try:
            super().write(*args, **kwargs)
        except psycopg.Error:
            self.close()  # a connection that failed is not used again
            raise

    def move_progress(self, query: MoveQuery) -> tuple[list[tuple[str, int, int]], list[StragglerRow]]:
        """What :func:`kbear.server._move_counts.move_progress` answers, in one
        repeatable-read transaction of the database."""
        with contextlib.closing(self._open()) as db, db.connection.transaction():
            db.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            return move_progress(db, query)
