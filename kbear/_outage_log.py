"""Rate-limited log records about a cluster's outage, per client and cluster (private).

While a cluster is down, librdkafka reports every failed connection attempt to
the client's ``error_cb`` (measured: ~2 a second for a producer, ~20 for a
consumer, 40 a second for a group of 2 on Apache Kafka), and kbear logs what
the application's own ``error_cb`` does not take (:mod:`kbear._cluster_errors`).
One :class:`OutageLog` per cluster client turns that into:

- the first failure of an outage, logged at once (as before: the text names the
  cluster and carries librdkafka's words);
- then one summary per ``interval_s`` (60 s) while failures go on: ``cluster
  'east': 312 connection failures in the last 60 s (last: ...)``;
- one record (INFO) when the outage is over: :data:`QUIET_S` (30 s) passed without
  a failure (librdkafka retries a connection at least every
  ``reconnect.backoff.max.ms``, 10 s by default, and reports each failure; a
  client that stopped asking the cluster, a producer with nothing to send
  there, reports none either).

Every failure is counted exactly for kbear's metrics all the same
(:class:`kbear._events.ClusterErrors`, ``kbear_cluster_errors_total``). The
summaries and the end of an outage are written by a daemon timer thread
(``kbear-outage-log``, :class:`threading.Timer`) set again every second while the
outage is open, and no more once the application's main thread has ended
(nothing is written after the application's own last words).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field

#: seconds between two summaries of one outage
INTERVAL_S = 60.0
#: seconds without a failure after which an outage is over (librdkafka retries a
#: connection at least every ``reconnect.backoff.max.ms``, 10 s by default)
QUIET_S = 30.0
#: how often the timer looks at an open outage (seconds)
_TICK_S = 1.0


@dataclass(eq=False)
class OutageLog:
    """The log records of one cluster client's outages.

    Args:
        logger: where the records go.
        prefix: what each record starts with, naming the client and the cluster
            (``"kbear consumer: cluster 'east'"``).
        interval_s: seconds between two summaries.
        clock: monotonic seconds (tests give theirs).
    """

    logger: logging.Logger
    prefix: str
    _: KW_ONLY
    interval_s: float = INTERVAL_S
    clock: Callable[[], float] = time.monotonic
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    #: when the open outage began (None: no outage open)
    _since: float | None = field(default=None, init=False)
    _window_start: float = field(default=0.0, init=False)
    _last_at: float = field(default=0.0, init=False)
    #: failures since the last record, the level and text of the last one
    _unlogged: int = field(default=0, init=False)
    _level: int = field(default=logging.ERROR, init=False)
    _last_text: str = field(default="", init=False)
    #: every failure of the open outage
    _total: int = field(default=0, init=False)

    @property
    def open(self) -> bool:
        """Whether an outage is open (a failure seen, not yet over)."""
        return self._since is not None

    def failure(self, level: int, text: str, *args: object, extra: dict[str, object] | None = None) -> None:
        """A failure of the cluster (a connection refused, brokers down...): logged at
        ``level`` (the prefix followed by ``text % args``: ``text`` starts with its
        separator, ``": %s"``) when it opens an outage, else counted for the next
        summary."""
        now = self.clock()
        with self._lock:
            self._total += 1
            self._last_at = now
            if self._since is not None:
                self._unlogged += 1
                self._level = max(self._level, level)
                self._last_text = (text % args if args else text).lstrip(": ")
                if now - self._window_start >= self.interval_s:
                    self._summary(now)
                return
            self._since = self._window_start = now
            self._unlogged = 0
            self._level = level
        self.logger.log(level, f"{self.prefix}{text}", *args, extra=extra)
        self._set_timer()

    def _set_timer(self) -> None:
        timer = threading.Timer(_TICK_S, self._timer_ended)
        timer.name, timer.daemon = "kbear-outage-log", True
        timer.start()

    def _timer_ended(self) -> None:
        if threading.main_thread().is_alive() and self.tick():
            self._set_timer()

    def tick(self) -> bool:
        """What the timer does every second: a summary when ``interval_s`` passed,
        the end of the outage when :data:`QUIET_S` passed without a failure. Returns
        whether the outage is still open."""
        now = self.clock()
        with self._lock:
            if self._since is None:
                return False
            if now - self._last_at >= QUIET_S:
                self._over(now)
                return False
            if self._unlogged and now - self._window_start >= self.interval_s:
                self._summary(now)
            return True

    def _summary(self, now: float) -> None:
        """One record for the failures since the last one (under the lock)."""
        self.logger.log(
            self._level,
            "%s: %d connection failures in the last %.0f s (last: %s)",
            self.prefix,
            self._unlogged,
            now - self._window_start,
            self._last_text,
            extra={"event": "cluster_outage", "failures": self._unlogged},
        )
        self._unlogged = 0
        self._level = logging.ERROR
        self._window_start = now

    def _over(self, now: float) -> None:
        """The end of the open outage (under the lock): one record at INFO."""
        assert self._since is not None
        self.logger.info(
            "%s: no failure for %.0f s, outage over: %d failures in %.0f s",
            self.prefix,
            now - self._last_at,
            self._total,
            self._last_at - self._since,
            extra={"event": "cluster_outage_over", "failures": self._total},
        )
        self._since = None
        self._unlogged = 0
        self._total = 0
