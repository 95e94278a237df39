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
*they* answered (ask each replica: ``kbear move`` takes several
``--meta-service`` URLs and merges them), unless they share a PostgreSQL
database (``kbear serve --fleet-store postgresql://...``): then any replica
answers for the whole fleet. A store that is down does not fail a lookup: the
routes are answered, the notes wait (bounded, then dropped and counted), one
log line says so, and ``kbear_serve_fleet_store_up`` reads 0.

Off the request path: :meth:`FleetRecorder.record_answer` only appends a
note (a flat tuple of strings) to an in-memory queue, and not even that for a
request repeated on the same connection; a writer thread writes the notes
in one transaction when one of them may be news (a request its connection
did not send before, under this configuration: a new entry, a changed route,
digest or address), at most once per ``flush_interval_s`` seconds (0.1), and
else with the bounds once a second: a steady fleet wakes it once a second.
An entry whose answer did not change is rewritten at most once per
``seen_resolution_s`` seconds (5), by an update of its last-seen time only:
last-seen times are exact to that (plus the second they may wait), a changed
route is written within ``flush_interval_s``.
Bounded: at most ``max_pending`` notes wait for a flush (more are dropped,
counted); entries unseen for ``ttl_s`` seconds are deleted; past
``max_entries`` entries the least recently seen are deleted (counted).
"""

from __future__ import annotations

import collections
import functools
import json
import logging
import re
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kbear._secrets import redact
from kbear.server._fleet_store import FleetEntry, FleetStats, FleetStore
from kbear.server._move_counts import MoveQuery, StragglerRow
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
#: Shortest time between two flushes of the recorded requests to the database, seconds.
DEFAULT_FLUSH_INTERVAL_S = 0.1
#: Most notes waiting for a flush; more are dropped (and counted).
DEFAULT_MAX_PENDING = 200_000
#: An entry whose route, digest and address did not change is rewritten (its
#: last-seen time) at most once per this many seconds: a client refreshing every
#: second costs one row write per 5 s; a changed route is written at once.
DEFAULT_SEEN_RESOLUTION_S = 5.0
#: Seconds between two applications of the bounds (TTL, entry cap).
_MAINTENANCE_S = 1.0


def shown_location(location: object) -> str:
    """A store's location for a log line: a URL's password hidden."""
    return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", str(location))


@functools.lru_cache(maxsize=10_000)
def _meta_json(items: tuple[tuple[str, str], ...]) -> str:
    """A client's meta (its items) as kept: secret-looking values hidden, JSON with sorted keys."""
    return json.dumps(redact(dict(items)), sort_keys=True)


class FleetRecorder:
    """Records route answers in a SQLite file shared by the processes of one host.

    Args:
        path: the database file (created with its tables when missing), as a path or
            ``sqlite:///path``; or ``postgresql://...``: a PostgreSQL database shared
            by replicas (:mod:`kbear.server._fleet_store`, its schema created or
            migrated here).
        ttl_s: seconds an entry is kept after its last request (> 0).
        max_entries: most entries kept (> 0); past it the least recently seen go.
        flush_interval_s: shortest time between two writes of the pending notes,
            seconds (> 0): news waits at most this long.
        max_pending: most notes waiting for a write; more are dropped.
        seen_resolution_s: an unchanged entry's last-seen time is rewritten at
            most once per this many seconds (>= 0): last-seen times are exact to it.

    Raises:
        ValueError: a bound is not positive.
        sqlite3.Error: the file cannot be opened or is not a fleet database.
        psycopg.Error: the PostgreSQL database cannot be reached.
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
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self.flush_interval_s = flush_interval_s
        self.max_pending = max_pending
        self.seen_resolution_s = max(0.0, seen_resolution_s)
        # notes: (kind, client id, meta json, host, address, digest, at, then
        # topic, group, cluster, physical topic for each lookup), flat
        self._pending: collections.deque[tuple[Any, ...]] = collections.deque()
        # what this process last wrote per entry key: (address, cluster, route topic, digest, seen)
        self._written: dict[str, tuple[str, str, str, str, float]] = {}
        # rows staged for the next write, by entry key: news (a new entry, a changed
        # route, digest or address) and last-seen refreshes of what this process wrote
        self._staged: dict[str, tuple[str | float, ...]] = {}
        # (the refreshes of one note: one last-seen time, address and digest)
        self._refreshed: list[list[tuple[str | float, ...]]] = []
        self._maintained_at = 0.0
        # requests this process noted last: (peer, digest, request body) -> when
        self._answers: dict[tuple[Any, ...], float] = {}
        self._dropped = 0
        self._flush_lock = threading.Lock()
        self._stop = threading.Event()
        # set by the request path when a note may be news: wakes the writer
        self._news = threading.Event()
        self._thread: threading.Thread | None = None
        #: whether the last write to the store succeeded (``kbear_serve_fleet_store_up``)
        self.store_up = True
        self._store = FleetStore(str(path).removeprefix("sqlite://"))
        #: the SQLite file, or the PostgreSQL URL
        self.path: Path | str = self._store.path

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
        head = (kind, client_id, _meta_json(tuple(meta.items())), host, address, digest, when)
        self._note(head + tuple(item for lookup in lookups for item in lookup))
        self._news.set()

    def record_answer(
        self,
        client: ClientMessage,
        answer: StatusResponse,
        digest: str,
        peer: tuple[str, int] | None,
        request: bytes,
    ) -> None:
        """Note an answered ``/route/producer`` or ``/route/consumer`` request (what the
        request path calls: about 2 us, 10 us when noted, no I/O).

        The same request (``request``: its body) from the same connection answered
        from the same configuration less than ``seen_resolution_s`` ago is not noted
        again: its answer is the same. A note is one flat tuple of strings, which the
        garbage collector stops tracking at once (keeping the request's client and
        answer objects instead until the writer reads them costs more: measured with
        ``bench/fleet_overhead.py --seen-resolution 0``, the writer's CPU per request
        2.5 times higher, garbage collection of the waiting objects).

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
        if len(self._answers) > 2 * self.max_entries:
            self._answers.clear()
        self._answers[same] = at
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
        host, address = ("unknown", "unknown") if peer is None else (peer[0], f"{peer[0]}:{peer[1]}")
        self._note(
            (kind, client.id, _meta_json(tuple(client.meta.items())), host, address, digest, at, *flat)
        )
        if last is None and not self._news.is_set():
            self._news.set()  # a request not answered before from this connection: maybe news

    def _note(self, note: tuple[Any, ...]) -> None:
        if len(self._pending) >= self.max_pending:
            self._dropped += 1
            return
        self._pending.append(note)

    # ------------------------------------------------------------------ the writer

    def start(self) -> None:
        """Start the writer thread (once)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="kbear-serve-fleet", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop the writer thread after a last flush."""
        self._stop.set()
        self._news.set()
        if self._thread is not None:
            self._thread.join(10.0)
        self.flush()
        with self._flush_lock:
            self._store.close()

    def _run(self) -> None:
        """Flush when the request path noted what may be news (a request not answered
        before from its connection), at most once per ``flush_interval_s``, and when the
        bounds are due (once a second): a steady fleet wakes the writer once a second."""
        flushed = time.monotonic() - self.flush_interval_s
        while True:
            self._news.wait(max(0.0, self._maintained_at + _MAINTENANCE_S - time.time()))
            gap = flushed + self.flush_interval_s - time.monotonic()
            if self._stop.is_set() or (gap > 0 and self._stop.wait(gap)):
                return
            self._news.clear()
            try:
                self.flush(news_only=True)
            except Exception as exc:  # sqlite3.Error, psycopg.Error: the store is down
                if self.store_up:  # one line per outage: routes are answered, not recorded
                    log.error(
                        "kbear serve: the fleet store %s is unusable, routes are answered without "
                        "being recorded (up to %d waiting, then dropped and counted): %s",
                        shown_location(self.path),
                        self.max_pending,
                        exc,
                    )
                self.store_up = False
            else:
                if not self.store_up:
                    log.warning("kbear serve: the fleet store %s is usable again", shown_location(self.path))
                self.store_up = True
            flushed = time.monotonic()

    def flush(self, now: float | None = None, *, news_only: bool = False) -> int:
        """Write the pending notes; apply the bounds when a second passed since the
        last time (or ``now`` is given). Returns the entries written.

        Args:
            news_only: write only when a note brings news (a new entry, or a changed
                route, digest or address) or the bounds are due (once a second): an
                unchanged entry's new last-seen time waits for one of those, so that
                a steady fleet is written once a second in one transaction (what the
                writer thread does).
        """
        with self._flush_lock:
            pending = [self._pending.popleft() for _ in range(len(self._pending))]
            news = self._stage(pending)
            maintain = now is not None or time.time() - self._maintained_at >= _MAINTENANCE_S
            now = time.time() if now is None else now
            if news_only and not news and not maintain:
                return 0
            staged, self._staged = self._staged, {}
            refreshes, self._refreshed = self._refreshed, []
            if staged:  # an entry refreshed, then news: the news only
                kept = ([row for row in group if row[0] not in staged] for group in refreshes)
                refreshes = [group for group in kept if group]
            rows = list(staged.values())
            dropped, self._dropped = self._dropped, 0
            if not rows and not refreshes and not dropped and not maintain:
                return 0
            if maintain:
                self._maintained_at = now
            try:
                self._store.write(
                    rows,
                    {"dropped": dropped},
                    refreshes=refreshes,
                    expire_before=now - self.ttl_s if maintain else None,
                    max_entries=self.max_entries if maintain else None,
                )
            except BaseException:
                self._store.close()  # a connection that failed is not used again (the next write opens one)
                self._written.clear()  # what was not written must not be skipped next time
                # kept for the next write (a store down): the later notes of an entry win
                self._staged = {**staged, **self._staged}
                self._refreshed = [*refreshes, *self._refreshed]
                self._dropped += dropped
                raise
            return len(rows) + sum(map(len, refreshes))

    def _stage(self, pending: list[tuple[Any, ...]]) -> bool:
        """Stage the rows to write: the last note of each entry, unless this process
        wrote (or staged) the same route, digest and address for it less than
        ``seen_resolution_s`` ago. True when one of them is news: a new entry, or a
        changed route, digest or address."""
        if len(self._written) > 2 * self.max_entries:
            self._written.clear()
        news = False
        for note in pending:
            kind, cid, meta_json, host, address, digest, at = note[:7]
            refreshed: list[tuple[str | float, ...]] = []
            for i in range(7, len(note), 4):
                topic, group, cluster, route_topic = note[i : i + 4]
                key = "\x1f".join((cid, meta_json, host, kind, topic, group))
                state = (address, cluster, route_topic, digest)
                last = self._written.get(key)
                refresh = last is not None and last[:4] == state
                if last is not None and refresh and at - last[4] < self.seen_resolution_s:
                    continue
                self._written[key] = (*state, at)
                row = (key, cid, meta_json, host, kind, topic, group, *state, at, at)
                if refresh and key not in self._staged:
                    refreshed.append(row)
                else:  # news, or a later note of news not written yet
                    news = news or not refresh
                    self._staged[key] = row
            if refreshed:
                self._refreshed.append(refreshed)
        return news

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
        return self._store.entries(topic=topic, group=group, cluster=cluster, clients=clients)

    def count_clients(
        self, *, topic: str | None = None, group: str | None = None, cluster: str | None = None
    ) -> int:
        """How many clients have an entry matching the filters (as :meth:`entries`)."""
        return self._store.count_clients(topic=topic, group=group, cluster=cluster)

    def move_progress(self, query: MoveQuery) -> tuple[list[tuple[str, int, int]], list[StragglerRow]]:
        """A move's counts, aggregated in the database: ``query.classify`` is given
        the distinct lookups of ``query.topics`` and answers those whose route
        changed; then the clients of those are counted by state per topic and the
        least recently seen stragglers returned
        (:func:`kbear.server._move_counts.move_progress` says how)."""
        return self._store.move_progress(query)

    def stats(self) -> FleetStats:
        """The fleet's size and the bounds' counters (every process of the file together)."""
        return self._store.stats(self._dropped)
