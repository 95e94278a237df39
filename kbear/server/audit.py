"""The audit log of ``kbear serve``: every configuration change it saw and every action.

Kept where the fleet is (one table more: ``audit``): its SQLite file, so that
every worker of one ``kbear serve --workers N`` writes to and reads one log, or
its PostgreSQL database (``--fleet-store postgresql://...``), shared by replicas. Two kinds of entry:

- ``config``: a configuration the service put in force (``outcome`` ``applied``,
  with the unified diff of the four files against the one served before, both
  digests) or refused (``outcome`` ``refused``, the problems as the plan text).
  Each worker sees each change: a change is written once (its key is the pair
  of digests, or the refused content's problems).
- ``action``: a move, failover or fail-back asked for through ``POST /actions/...``:
  who (the token's fingerprint, or the console session's), the action and its
  target, the plan text (what the ``kbear`` command printed), and the outcome
  (``planned``, ``applying``, ``applied``, ``not ready``, ``failed``, or
  ``refused`` with the reason: a read token, a missing CSRF token).

``GET /audit?limit=N&before=ID``: the entries newest first, ``limit`` (default 50,
at most 500) per page, ``before`` the id of the last entry of the previous page.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import hashlib
import logging
import sqlite3
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kbear.config import CONFIG_FILES, KBearConfig
from kbear.server._fleet_store import connect, is_postgres
from kbear.server.holder import iso

if TYPE_CHECKING:
    from kbear.server.holder import ConfigHolder

log = logging.getLogger("kbear.server")

__all__ = ["DEFAULT_PAGE", "MAX_PAGE", "STORE_ERRORS", "AuditEntry", "AuditLog", "ConfigAudit", "files_diff"]

#: Entries per page of ``GET /audit`` by default, and at most.
DEFAULT_PAGE, MAX_PAGE = 50, 500

_SCHEMA = """
CREATE TABLE IF NOT EXISTS audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    kind TEXT NOT NULL,
    who TEXT NOT NULL,
    action TEXT NOT NULL,
    target TEXT NOT NULL,
    plan TEXT NOT NULL,
    outcome TEXT NOT NULL,
    digest TEXT NOT NULL,
    previous_digest TEXT NOT NULL,
    dedupe TEXT UNIQUE
)
"""
_INSERT = (
    "INSERT INTO audit (at, kind, who, action, target, plan, outcome, digest, previous_digest, dedupe) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING id"
)
_COLUMNS = "id, at, kind, who, action, target, plan, outcome, digest, previous_digest"

try:
    import psycopg

    #: What a fleet store or audit log raises when its database cannot be used:
    #: :class:`sqlite3.Error`, and :class:`psycopg.Error` where psycopg is installed.
    STORE_ERRORS: tuple[type[Exception], ...] = (sqlite3.Error, psycopg.Error)
except ImportError:  # psycopg is in the server extra; a PostgreSQL store needs it
    STORE_ERRORS = (sqlite3.Error,)


@dataclass(frozen=True)
class AuditEntry:
    """One entry of the audit log (see the module docstring for the kinds).

    Attributes:
        id: its number (increasing); at: when (Unix time, seconds).
        kind: ``config`` or ``action``; who: who asked ('' for a configuration change).
        action: ``change`` (config) or ``move``, ``failover``, ``failback``.
        target: the topic or cluster acted on ('' for a configuration change).
        plan: the diff, the problems or the command's output; outcome: see the module.
        digest, previous_digest: the configuration's digest and the one before.
    """

    id: int
    at: float
    kind: str
    who: str
    action: str
    target: str
    plan: str
    outcome: str
    digest: str
    previous_digest: str

    def as_json(self) -> dict[str, Any]:
        """The entry as ``GET /audit`` answers it (camelCase)."""
        answer = {**dataclasses.asdict(self), "at": iso(self.at)}
        answer["previousDigest"] = answer.pop("previous_digest")
        return answer


def files_diff(old: Mapping[str, str], new: Mapping[str, str]) -> str:
    """The unified diff of two sets of files (name -> text), file by file, in name order."""
    out: list[str] = []
    for name in sorted(old.keys() | new.keys()):
        before, after = old.get(name, ""), new.get(name, "")
        if before != after:
            out += difflib.unified_diff(
                before.splitlines(keepends=True), after.splitlines(keepends=True), name, name
            )
    return "".join(line if line.endswith("\n") else line + "\n" for line in out)


class AuditLog:
    """The audit log in a SQLite file (``path``, or ``sqlite:///path``; ``:memory:`` for
    one process only), or in a PostgreSQL database (``postgresql://...``, the fleet's).

    Raises:
        sqlite3.Error: the file cannot be opened; psycopg.Error: the database cannot be reached.
    """

    def __init__(self, path: str | Path = ":memory:") -> None:
        self.path = str(path).removeprefix("sqlite://")
        self._lock = threading.Lock()
        # replicas sharing a PostgreSQL fleet share the log too
        self._db = connect(self.path, check_same_thread=False)
        if not is_postgres(self.path) and self.path != ":memory:":
            self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(_SCHEMA)

    def add(
        self,
        kind: str,
        action: str,
        *,
        who: str = "",
        target: str = "",
        plan: str = "",
        outcome: str = "",
        digest: str = "",
        previous_digest: str = "",
        dedupe: str | None = None,
        at: float | None = None,
    ) -> int | None:
        """Write an entry; its id, or None when an entry with the same ``dedupe`` key
        was written already (by this process or another)."""
        when = time.time() if at is None else at
        with self._lock:
            cursor = self._db.execute(
                _INSERT,
                (when, kind, who, action, target, plan, outcome, digest, previous_digest, dedupe),
            )
            row = cursor.fetchone()
            return None if row is None else int(row[0])

    def finish(self, entry_id: int, outcome: str, plan: str | None = None) -> None:
        """Set the outcome (and the plan text) of an action once it is known."""
        with self._lock:
            self._db.execute(
                "UPDATE audit SET outcome = ?, plan = COALESCE(?, plan) WHERE id = ?",
                (outcome, plan, entry_id),
            )

    def page(self, limit: int = DEFAULT_PAGE, before: int | None = None) -> list[AuditEntry]:
        """At most ``limit`` entries, newest first, older than entry ``before`` when given."""
        where = "" if before is None else " WHERE id < ?"
        count = min(max(1, limit), MAX_PAGE)
        params: tuple[int, ...] = (count,) if before is None else (before, count)
        with self._lock:
            rows = self._db.execute(f"SELECT {_COLUMNS} FROM audit{where} ORDER BY id DESC LIMIT ?", params)
            return [AuditEntry(*row) for row in rows.fetchall()]

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._db.close()


def _texts(directory: Path) -> dict[str, str]:
    out = {}
    for name in CONFIG_FILES:
        with contextlib.suppress(OSError):  # a file missing: not in the diff
            out[name] = (directory / name).read_text(encoding="utf-8")
    return out


class ConfigAudit:
    """Writes the configuration changes a holder applies, and the one it refuses,
    into an :class:`AuditLog`: an applied change when it is applied (the diff of the
    files against the texts read when the one before was applied); a refused one
    when :meth:`sync` sees it (at every change, ``GET /audit`` and console page)."""

    def __init__(self, holder: ConfigHolder, audit: AuditLog) -> None:
        self._holder = holder
        self._audit = audit
        self._texts = _texts(holder.directory)
        holder.subscribe(self._applied)

    def _add(self, plan: str, outcome: str, digest: str, previous_digest: str, dedupe: str) -> None:
        try:
            self._audit.add(
                "config",
                "change",
                plan=plan,
                outcome=outcome,
                digest=digest,
                previous_digest=previous_digest,
                dedupe=dedupe,
            )
        except STORE_ERRORS:  # the change is applied (or refused) all the same
            log.exception("kbear serve: writing the audit log failed")

    def _applied(self, old: KBearConfig, new: KBearConfig) -> None:
        texts = _texts(self._holder.directory)
        diff, self._texts = files_diff(self._texts, texts), texts
        dedupe = f"config:{old.digest}:{new.digest}:{int(time.time() // 60)}"
        self._add(diff, "applied", new.digest, old.digest, dedupe)

    def sync(self) -> None:
        """Write the refused change the holder reports, once."""
        refused = self._holder.refused
        if refused is None:
            return
        problems = "\n".join(str(p) for p in refused.problems) or str(refused)
        key = hashlib.sha256(problems.encode()).hexdigest()[:16]
        served = self._holder.served.config.digest
        self._add(problems, "refused", served, served, f"refused:{served}:{key}")
