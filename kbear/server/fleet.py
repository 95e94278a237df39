"""The fleet: who asked ``kbear serve`` for which route, recorded in an embedded SQLite database.

Every answered ``/route/producer`` and ``/route/consumer`` request is noted as
one entry per item answered: the client (id, meta with secret-looking values
hidden as everywhere in kbear, the peer address), the lookup (producer topic,
or consumer group and topic), the route answered (cluster, physical topic),
the configuration digest it came from, and when (Unix time, seconds).

Where it is kept: one SQLite file (stdlib ``sqlite3``, WAL journal), shared by
every worker process of one ``kbear serve --workers N`` (each opens it; SQLite
serialises their writes), so that any worker answers ``GET /fleet`` for all of
them. Replicas on several hosts each keep their own file and show the clients
*they* answered: ask each replica (``kbear move`` takes several
``--meta-service`` URLs and merges them).

Off the request path: :meth:`FleetRecorder.record_answer` only appends a
note (a flat tuple of strings) to an in-memory list; a writer thread writes
them every ``flush_interval_s`` seconds in one transaction. An
entry whose answer did not change is rewritten at most once per
``seen_resolution_s`` seconds (5): last-seen times are exact to that, a
changed route is written at the next flush. Bounded: at most ``max_pending``
notes wait for a flush (more are dropped, counted); entries unseen for
``ttl_s`` seconds are deleted; past ``max_entries`` entries the least recently
seen are deleted (counted).
"""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kbear._secrets import redact
from kbear.server.protocol import ClientMessage, ConsumerRouteResponse, ProducerRouteResponse, StatusResponse

__all__ = [
    "DEFAULT_FLUSH_INTERVAL_S",
    "DEFAULT_MAX_ENTRIES",
    "DEFAULT_TTL_S",
    "FleetEntry",
    "FleetRecorder",
    "FleetStats",
]

log = logging.getLogger("kbear.server")

#: Seconds an entry is kept after its client's last request (``kbear serve --fleet-ttl``).
DEFAULT_TTL_S = 300.0
#: Most entries (client x lookup) kept (``kbear serve --fleet-max-entries``).
DEFAULT_MAX_ENTRIES = 100_000
#: Seconds between two flushes of the recorded requests to the database.
DEFAULT_FLUSH_INTERVAL_S = 0.1
#: Most notes waiting for a flush; more are dropped (and counted).
DEFAULT_MAX_PENDING = 200_000
#: An entry whose route, digest and address did not change is rewritten (its
#: last-seen time) at most once per this many seconds: a client refreshing every
#: second costs one row write per 5 s; a changed route is written at once.
DEFAULT_SEEN_RESOLUTION_S = 5.0
#: Seconds between two applications of the bounds (TTL, entry cap).
_MAINTENANCE_S = 1.0
#: How long a writer waits for another process's transaction, milliseconds.
_BUSY_TIMEOUT_MS = 5000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS fleet (
    key TEXT NOT NULL PRIMARY KEY,
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
    first_seen REAL NOT NULL,
    seen REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS fleet_seen ON fleet (seen);
CREATE INDEX IF NOT EXISTS fleet_client ON fleet (client_id, meta, host);
CREATE TABLE IF NOT EXISTS fleet_counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
"""

_UPSERT = """
INSERT INTO fleet (key, client_id, meta, host, kind, topic, grp, address, cluster, route_topic, digest,
                   first_seen, seen)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (key) DO UPDATE SET
    address = excluded.address, cluster = excluded.cluster, route_topic = excluded.route_topic,
    digest = excluded.digest, seen = excluded.seen
WHERE excluded.seen >= fleet.seen
"""

_COLUMNS = "client_id, meta, address, kind, topic, grp, cluster, route_topic, digest, first_seen, seen"


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

    @property
    def client_key(self) -> tuple[str, str, str]:
        """What tells two clients apart: id, meta and the peer's host."""
        return (self.client_id, json.dumps(dict(self.meta), sort_keys=True), self.address.rsplit(":", 1)[0])


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


class FleetRecorder:
    """Records route answers in a SQLite file shared by the processes of one host.

    Args:
        path: the database file (created with its tables when missing).
        ttl_s: seconds an entry is kept after its last request (> 0).
        max_entries: most entries kept (> 0); past it the least recently seen go.
        flush_interval_s: seconds between two writes of the pending notes (> 0).
        max_pending: most notes waiting for a write; more are dropped.
        seen_resolution_s: an unchanged entry's last-seen time is rewritten at
            most once per this many seconds (>= 0): last-seen times are exact to it.

    Raises:
        ValueError: a bound is not positive.
        sqlite3.Error: the file cannot be opened or is not a fleet database.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        flush_interval_s: float = DEFAULT_FLUSH_INTERVAL_S,
        max_pending: int = DEFAULT_MAX_PENDING,
        seen_resolution_s: float = DEFAULT_SEEN_RESOLUTION_S,
    ) -> None:
        for name, value in (
            ("ttl_s", ttl_s),
            ("max_entries", max_entries),
            ("flush_interval_s", flush_interval_s),
            ("max_pending", max_pending),
        ):
            if value <= 0:
                raise ValueError(f"fleet {name} must be > 0, got {value}")
        self.path = Path(path)
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self.flush_interval_s = flush_interval_s
        self.max_pending = max_pending
        self.seen_resolution_s = max(0.0, seen_resolution_s)
        # notes: (kind, client id, meta json, host, address, digest, at, then
        # topic, group, cluster, physical topic for each lookup), flat
        self._pending: list[tuple[Any, ...]] = []
        # what this process last wrote per entry key: (address, cluster, route topic, digest, seen)
        self._written: dict[str, tuple[str, str, str, str, float]] = {}
        self._maintained_at = 0.0
        self._meta_json: dict[tuple[tuple[str, str], ...], str] = {}
        # requests this process noted last: (peer, digest, request body) -> when
        self._answers: dict[tuple[Any, ...], float] = {}
        self._db: sqlite3.Connection | None = None
        self._dropped = 0
        self._flush_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        with self._connect() as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(_SCHEMA)

    @contextlib.contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, timeout=_BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        try:
            db.execute(f"PRAGMA busy_timeout={_BUSY_TIMEOUT_MS}")
            db.execute("PRAGMA synchronous=NORMAL")
            yield db
        finally:
            db.close()

    # ------------------------------------------------------------------ the request path

    def record(
        self,
        client_id: str,
        meta: Mapping[str, str],
        address: str,
        kind: str,
        digest: str,
        lookups: Sequence[tuple[str, str, str, str]],
        at: float | None = None,
    ) -> None:
        """Note lookups answered to a client (no I/O: written by the next flush).

        Args:
            client_id: ``client.id`` as sent ('' for none); meta: the client's meta
                (secret-looking values are hidden here, before anything is kept).
            address: the peer, ``host:port``; kind: ``producer`` or ``consumer``.
            digest: the digest of the configuration that answered.
            lookups: (requested topic, group or '', cluster, physical topic) per item answered.
            at: when (Unix time, seconds; now when None).
        """
        when = time.time() if at is None else at
        host = address.rsplit(":", 1)[0]
        head = (kind, client_id, self._meta_json_of(meta), host, address, digest, when)
        self._note(head + tuple(item for lookup in lookups for item in lookup))

    def record_answer(
        self,
        client: ClientMessage,
        answer: StatusResponse,
        digest: str,
        peer: tuple[str, int] | None,
        request: bytes,
    ) -> None:
        """Note an answered ``/route/producer`` or ``/route/consumer`` request (what the
        request path calls: a few microseconds, no I/O).

        The same request (``request``: its body) from the same connection answered
        from the same configuration less than ``seen_resolution_s`` ago is not noted
        again: its answer is the same. A note is one flat tuple of strings, which the
        garbage collector stops tracking at once, so that notes waiting for the writer
        do not make full collections more frequent.

        Args:
            client: the request's client; answer: the response sent
                (:class:`ProducerRouteResponse` or :class:`ConsumerRouteResponse`).
            digest: the digest of the configuration that answered.
            peer: the peer's (host, port), None when unknown.
            request: the request's body as received.
        """
        at = time.time()
        same = (peer, digest, request)
        last = self._answers.get(same)
        if last is not None and at - last < self.seen_resolution_s:
            return
        flat: list[str | float] = []
        if isinstance(answer, ProducerRouteResponse):
            kind = "producer"
            for topic, route in answer.topic_id_routes.items():
                flat += (topic, "", route.cluster_id, route.topic_id)
        elif isinstance(answer, ConsumerRouteResponse):
            kind = "consumer"
            for item in answer.consumer_group_id_routes:
                group = item.consumer_group_id
                flat += (group.topic_id, group.group_name, item.route.cluster_id, item.route.topic_id)
        else:
            return
        if not flat:
            return
        if len(self._answers) > 2 * self.max_entries:
            self._answers.clear()
        self._answers[same] = at
        host, address = ("unknown", "unknown") if peer is None else (peer[0], f"{peer[0]}:{peer[1]}")
        self._note((kind, client.id, self._meta_json_of(client.meta), host, address, digest, at, *flat))

    def _note(self, note: tuple[str | float, ...]) -> None:
        if len(self._pending) >= self.max_pending:
            self._dropped += 1
            return
        self._pending.append(note)

    def _meta_json_of(self, meta: Mapping[str, str]) -> str:
        """The meta as kept: secret-looking values hidden, JSON with sorted keys (cached)."""
        items = tuple(meta.items())
        meta_json = self._meta_json.get(items)
        if meta_json is None:
            if len(self._meta_json) > 10_000:
                self._meta_json.clear()
            meta_json = self._meta_json[items] = json.dumps(redact(meta), sort_keys=True)
        return meta_json

    # ------------------------------------------------------------------ the writer

    def start(self) -> None:
        """Start the writer thread (once)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="kbear-serve-fleet", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop the writer thread after a last flush."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10.0)
        self.flush()
        with self._flush_lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def _run(self) -> None:
        while not self._stop.wait(self.flush_interval_s):
            try:
                self.flush()
            except sqlite3.Error:
                log.exception("kbear serve: writing the fleet to %s failed", self.path)

    def flush(self, now: float | None = None) -> int:
        """Write the pending notes; apply the bounds when a second passed since the
        last time (or ``now`` is given). Returns the entries written."""
        with self._flush_lock:
            pending, self._pending = self._pending, []
            dropped, self._dropped = self._dropped, 0
            maintain = now is not None or time.time() - self._maintained_at >= _MAINTENANCE_S
            now = time.time() if now is None else now
            rows = self._rows(pending)
            if not rows and not dropped and not maintain:
                return 0
            db = self._writer()
            db.execute("BEGIN IMMEDIATE")
            try:
                db.executemany(_UPSERT, rows)
                counts = {"dropped": dropped}
                if maintain:
                    self._maintained_at = now
                    counts["expired"] = db.execute(
                        "DELETE FROM fleet WHERE seen < ?", (now - self.ttl_s,)
                    ).rowcount
                    (count,) = db.execute("SELECT COUNT(*) FROM fleet").fetchone()
                    if count > self.max_entries:
                        counts["evicted"] = db.execute(
                            "DELETE FROM fleet WHERE rowid IN "
                            "(SELECT rowid FROM fleet ORDER BY seen LIMIT ?)",
                            (count - self.max_entries,),
                        ).rowcount
                for name, value in counts.items():
                    if value:
                        db.execute(
                            "INSERT INTO fleet_counters VALUES (?, ?) "
                            "ON CONFLICT (name) DO UPDATE SET value = value + excluded.value",
                            (name, value),
                        )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                self._written.clear()  # what was not written must not be skipped next time
                raise
            return len(rows)

    def _rows(self, pending: list[tuple[Any, ...]]) -> list[tuple[str | float, ...]]:
        """The rows to write: the last note of each entry, unless this process wrote the
        same route, digest and address for it less than ``seen_resolution_s`` ago."""
        if len(self._written) > 2 * self.max_entries:
            self._written.clear()
        rows: dict[str, tuple[str | float, ...]] = {}
        for note in pending:
            kind, cid, meta_json, host, address, digest, at = note[:7]
            for i in range(7, len(note), 4):
                topic, group, cluster, route_topic = note[i : i + 4]
                key = "\x1f".join((cid, meta_json, host, kind, topic, group))
                state = (address, cluster, route_topic, digest)
                last = self._written.get(key)
                if last is not None and last[:4] == state and at - last[4] < self.seen_resolution_s:
                    continue
                self._written[key] = (*state, at)
                rows[key] = (key, cid, meta_json, host, kind, topic, group, *state, at, at)
        return list(rows.values())

    def _writer(self) -> sqlite3.Connection:
        """The writer's own connection (kept open: flushes run under ``_flush_lock``)."""
        if self._db is None:
            self._db = sqlite3.connect(
                self.path, timeout=_BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
            )
            self._db.execute(f"PRAGMA busy_timeout={_BUSY_TIMEOUT_MS}")
            self._db.execute("PRAGMA synchronous=NORMAL")
        return self._db

    # ------------------------------------------------------------------ reading

    def entries(
        self,
        *,
        topic: str | None = None,
        group: str | None = None,
        cluster: str | None = None,
        clients: int | None = None,
    ) -> list[FleetEntry]:
        """The entries held, filtered by requested topic, consumer group and route
        cluster (None: any), the most recently seen client first, each client's
        entries together, most recently seen first.

        Args:
            clients: the entries of at most this many clients (None: every client):
                the most recently seen, read without loading the others.
        """
        filters = [
            (c, v) for c, v in (("topic", topic), ("grp", group), ("cluster", cluster)) if v is not None
        ]
        values: list[str | int] = [v for _, v in filters]
        inner = " AND ".join(f"{c} = ?" for c, _ in filters)
        outer = " AND ".join(f"f.{c} = ?" for c, _ in filters)
        columns = ", ".join("f." + c.strip() for c in _COLUMNS.split(","))
        if clients is None:  # every client: one scan, no join
            sql = (
                f"SELECT {columns} FROM fleet f{' WHERE ' + outer if outer else ''} "
                "ORDER BY MAX(f.seen) OVER (PARTITION BY f.client_id, f.meta, f.host) DESC, "
                "f.client_id, f.meta, f.host, f.seen DESC"
            )
        else:  # the most recently seen clients, then their entries (by the fleet_client index)
            sql = (
                "WITH c AS (SELECT client_id, meta, host, MAX(seen) AS last FROM fleet"
                f"{' WHERE ' + inner if inner else ''} GROUP BY client_id, meta, host "
                "ORDER BY last DESC LIMIT ?) "
                f"SELECT {columns} FROM c CROSS JOIN fleet f "
                "ON f.client_id = c.client_id AND f.meta = c.meta AND f.host = c.host"
                f"{' WHERE ' + outer if outer else ''} "
                "ORDER BY c.last DESC, f.client_id, f.meta, f.host, f.seen DESC"
            )
        params = values if clients is None else [*values, clients, *values]
        with self._connect() as db:
            rows = db.execute(sql, params).fetchall()
        metas: dict[str, dict[str, str]] = {}
        return [
            FleetEntry(
                cid,
                metas.setdefault(meta, json.loads(meta)) if meta not in metas else metas[meta],
                address,
                kind,
                t,
                g,
                c,
                rt,
                d,
                first,
                seen,
            )
            for cid, meta, address, kind, t, g, c, rt, d, first, seen in rows
        ]

    def count_clients(
        self, *, topic: str | None = None, group: str | None = None, cluster: str | None = None
    ) -> int:
        """How many clients have an entry matching the filters (as :meth:`entries`)."""
        where: list[str] = []
        params: list[str] = []
        for column, value in (("topic", topic), ("grp", group), ("cluster", cluster)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        condition = (" WHERE " + " AND ".join(where)) if where else ""
        with self._connect() as db:
            (count,) = db.execute(
                f"SELECT COUNT(*) FROM (SELECT DISTINCT client_id, meta, host FROM fleet{condition})", params
            ).fetchone()
        return int(count)

    def stats(self) -> FleetStats:
        """The fleet's size and the bounds' counters (every process of the file together)."""
        with self._connect() as db:
            (entries,) = db.execute("SELECT COUNT(*) FROM fleet").fetchone()
            (clients,) = db.execute(
                "SELECT COUNT(*) FROM (SELECT DISTINCT client_id, meta, host FROM fleet)"
            ).fetchone()
            counters = dict(db.execute("SELECT name, value FROM fleet_counters").fetchall())
        return FleetStats(
            entries,
            clients,
            counters.get("evicted", 0),
            counters.get("expired", 0),
            counters.get("dropped", 0) + self._dropped,
        )
