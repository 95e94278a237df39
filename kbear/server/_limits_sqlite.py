"""A storage for the ``limits`` library in a SQLite file, shared by the processes that open it.

``limits`` ships storages in one process's memory or in a server (Redis,
Memcached, MongoDB, etcd); ``kbear serve --workers N`` has neither a server nor
one process, so the console's failed sign-ins are counted here, in one SQLite
file (stdlib ``sqlite3``, WAL journal) that every worker opens: a peer gets
:data:`kbear.server.console.LOGIN_FAILURES_ALLOWED` failed attempts in all, not
per worker. This is a custom storage as the library documents them (a subclass
of :class:`limits.storage.Storage`, registered under the ``kbear+sqlite``
scheme: ``limits.storage.storage_from_string("kbear+sqlite:///path/to/file")``),
with the moving window (:class:`limits.strategies.MovingWindowRateLimiter`) and
the fixed window's counters. Each call is one short transaction; expired rows
are deleted as entries are added.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from limits.storage import MovingWindowSupport, Storage

from kbear.server._fleet_store import connect, transaction

__all__ = ["SQLiteStorage"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS limits_entries (key TEXT NOT NULL, at REAL NOT NULL, expires REAL NOT NULL);
CREATE INDEX IF NOT EXISTS limits_entries_key ON limits_entries (key, at);
CREATE INDEX IF NOT EXISTS limits_entries_expires ON limits_entries (expires);
CREATE TABLE IF NOT EXISTS limits_counters (
    key TEXT PRIMARY KEY, value INTEGER NOT NULL, expires REAL NOT NULL
)
"""


class SQLiteStorage(Storage, MovingWindowSupport):
    """Rate-limit entries and counters in one SQLite file.

    Args:
        uri: ``kbear+sqlite:///absolute/path`` (the file; created with its tables
            when missing); or pass ``path``.
        path: the file, instead of ``uri``.
        wrap_exceptions: raise :class:`limits.errors.StorageError` instead of
            :class:`sqlite3.Error` (the library's option).

    Raises:
        ValueError: neither a path nor a ``kbear+sqlite`` URI with one.
        sqlite3.Error: the file cannot be opened or holds other tables of these names.
    """

    STORAGE_SCHEME = ["kbear+sqlite"]  # noqa: RUF012  # the library's registry reads this list

    def __init__(
        self,
        uri: str | None = None,
        wrap_exceptions: bool = False,
        *,
        path: str | os.PathLike[str] | None = None,
        **options: float | str | bool,
    ) -> None:
        super().__init__(uri, wrap_exceptions, **options)
        if path is None and uri is not None:
            parsed = urlparse(uri)
            if parsed.scheme == "kbear+sqlite" and parsed.path:
                path = unquote(parsed.path)
        if path is None:
            raise ValueError(f"a SQLite storage needs a file: kbear+sqlite:///path, got {uri!r}")
        self.path = Path(path)
        with contextlib.closing(connect(self.path)) as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(_SCHEMA)

    @property
    def base_exceptions(self) -> type[Exception]:
        return sqlite3.Error

    def _read(self, statement: str, *params: object) -> Any:
        """The first row a read answers (None: none)."""
        with contextlib.closing(connect(self.path)) as db:
            return db.execute(statement, params).fetchone()

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction (``BEGIN IMMEDIATE``: one process at a time), committed
        when the block ends, rolled back when it raises."""
        with contextlib.closing(connect(self.path)) as db, transaction(db):
            yield db

    # ------------------------------------------------------------------ moving window

    def acquire_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        """Add ``amount`` entries to ``key`` at this time when fewer than ``limit`` -
        ``amount`` + 1 of its entries are younger than ``expiry`` seconds; True when added."""
        if amount > limit:
            return False
        now = time.time()
        with self._transaction() as db:
            db.execute("DELETE FROM limits_entries WHERE expires < ?", (now,))
            (held,) = db.execute(
                "SELECT COUNT(*) FROM limits_entries WHERE key = ? AND at >= ?", (key, now - expiry)
            ).fetchone()
            if held + amount > limit:
                return False
            db.executemany("INSERT INTO limits_entries VALUES (?, ?, ?)", [(key, now, now + expiry)] * amount)
        return True

    def get_moving_window(self, key: str, limit: int, expiry: int) -> tuple[float, int]:
        """(when the oldest entry of ``key`` younger than ``expiry`` seconds was added,
        how many there are); (now, 0) when none."""
        now = time.time()
        oldest, held = self._read(
            "SELECT MIN(at), COUNT(*) FROM limits_entries WHERE key = ? AND at >= ?", key, now - expiry
        )
        return (now, 0) if not held else (float(oldest), int(held))

    # ------------------------------------------------------------------ counters (fixed window)

    def incr(self, key: str, expiry: int, amount: int = 1) -> int:
        """Add ``amount`` to the counter of ``key`` (a new one expires in ``expiry`` s)."""
        now = time.time()
        with self._transaction() as db:
            db.execute("DELETE FROM limits_counters WHERE key = ? AND expires <= ?", (key, now))
            (value,) = db.execute(
                "INSERT INTO limits_counters VALUES (?, ?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = value + excluded.value RETURNING value",
                (key, amount, now + expiry),
            ).fetchone()
        return int(value)

    def get(self, key: str) -> int:
        """The counter of ``key`` (0 when none or expired)."""
        row = self._read("SELECT value FROM limits_counters WHERE key = ? AND expires > ?", key, time.time())
        return 0 if row is None else int(row[0])

    def get_expiry(self, key: str) -> float:
        """When the counter of ``key`` expires (Unix time, seconds; now when none)."""
        now = time.time()
        row = self._read("SELECT expires FROM limits_counters WHERE key = ? AND expires > ?", key, now)
        return now if row is None else float(row[0])

    # ------------------------------------------------------------------ housekeeping

    def check(self) -> bool:
        """Whether the file answers."""
        try:
            self._read("SELECT 1 FROM limits_counters LIMIT 1")
        except sqlite3.Error:
            return False
        return True

    def reset(self) -> int | None:
        """Delete every entry and counter; returns how many rows went."""
        with self._transaction() as db:
            removed = db.execute("DELETE FROM limits_entries").rowcount
            removed += db.execute("DELETE FROM limits_counters").rowcount
        return int(removed)

    def clear(self, key: str) -> None:
        """Delete the entries and the counter of ``key``."""
        with self._transaction() as db:
            db.execute("DELETE FROM limits_entries WHERE key = ?", (key,))
            db.execute("DELETE FROM limits_counters WHERE key = ?", (key,))
