"""The configuration ``kbear serve`` answers from: the last good one of a watched directory.

The directory is read with ``${NAME}`` left as written (``load_config(...,
resolve_env=False)``): kbear's clients resolve the placeholders from their
own environment; only a client that is not kbear's gets them resolved from the
server's, in its answer (:mod:`kbear.server.service`). A change is applied
only once it validated (:class:`kbear.reload.ConfigWatcher`: content digest,
settle time); a refused change keeps the last good configuration in force and
is reported by :attr:`ConfigHolder.refused` until the files are fixed or back
to the configuration in force.

Each applied configuration gets its own :class:`~kbear.router.Router`, swapped
whole: a request reads one :class:`Served` and so answers from one
configuration even when a reload lands in the middle of it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from kbear.config import ConfigError, KBearConfig, load_config
from kbear.reload import ConfigWatcher
from kbear.router import Router
from kbear.sources import DirectorySource

__all__ = ["DEFAULT_WATCH_INTERVAL_S", "ConfigHolder", "Rounds", "Served", "iso", "load_unresolved"]

log = logging.getLogger("kbear.server")

#: Seconds between two checks of the directory. With the watcher's settle time
#: (0.2 s) a change is served within 0.7 s plus its load time, so that a client
#: refreshing every second sees it within its interval + 1 s.
DEFAULT_WATCH_INTERVAL_S = 0.5


def iso(unix_s: float, timespec: str = "milliseconds") -> str:
    """A Unix time (seconds) as the server's answers and pages show it: ISO 8601, UTC."""
    return datetime.fromtimestamp(unix_s, UTC).isoformat(timespec=timespec)


def load_unresolved(directory: str | os.PathLike[str]) -> KBearConfig:
    """Load and validate ``directory`` keeping ``${NAME}`` placeholders as written.

    Raises:
        ConfigError: the configuration is invalid (every problem listed).
    """
    return load_config(directory, resolve_env=False)


class Rounds:
    """Runs :meth:`check` (a round over the served configuration) every ``interval_s``
    seconds in a daemon thread named ``name``, from :meth:`start` to :meth:`stop`: the
    first round at once when ``first_now``, else after an interval; a round that fails
    is logged ("``what`` failed") and the next one runs."""

    def __init__(self, interval_s: float, name: str, what: str, first_now: bool) -> None:
        self.interval_s = interval_s
        self._name, self._what, self._first_now = name, what, first_now
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def check(self) -> object:
        """One round."""
        raise NotImplementedError

    def start(self) -> None:
        """Run :meth:`check` every ``interval_s`` in a daemon thread (once)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        wait = 0.0 if self._first_now else self.interval_s
        while not self._stop.wait(wait):
            try:
                self.check()
            except Exception:  # a round that fails is logged; the next one runs
                log.exception("kbear serve: %s failed", self._what)
            wait = self.interval_s

    def stop(self) -> None:
        """Stop the thread (waits for its current round)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)


@dataclass(frozen=True)
class Served:
    """One configuration in force, with the router that answers from it.

    Attributes:
        config: the configuration (cluster meta with ``${NAME}`` unresolved).
        router: a router over exactly ``config``.
        loaded_at: when it was put in force (Unix time, seconds).
    """

    config: KBearConfig
    router: Router
    loaded_at: float


class ConfigHolder:
    """Holds the configuration in force for the server and watches its directory.

    Args:
        directory: the configuration directory.
        watch_interval_s: seconds between checks of the directory (> 0).

    Raises:
        ConfigError: the directory's configuration is invalid at start.
        ValueError: ``watch_interval_s`` <= 0.
    """

    def __init__(
        self, directory: str | os.PathLike[str], watch_interval_s: float = DEFAULT_WATCH_INTERVAL_S
    ) -> None:
        if watch_interval_s <= 0:
            raise ValueError(f"watch_interval_s must be > 0, got {watch_interval_s}")
        self.directory = Path(directory)
        self.watch_interval_s = watch_interval_s
        config = load_unresolved(self.directory)
        # (served, served before the last change), swapped whole: read together, they match
        self._pair: tuple[Served, Served | None] = (Served(config, Router(config), time.time()), None)
        # The watcher drives this router; each applied configuration also gets a
        # router of its own (see Served), swapped in by the listener below.
        self._primary = Router(config)
        self._primary.subscribe(self._applied)
        source = DirectorySource(self.directory, resolve_env=False)
        self._watcher = ConfigWatcher(self._primary, source, watch_interval_s)
        self._started = False
        self._listeners: list[Callable[[KBearConfig, KBearConfig], None]] = []

    @property
    def served(self) -> Served:
        """The configuration in force (read it once per request)."""
        return self._pair[0]

    @property
    def served_and_previous(self) -> tuple[Served, Served | None]:
        """The configuration in force and the one served before the last change
        (None before any change), read together: what a move's progress is
        measured from (:mod:`kbear.server.moves`)."""
        return self._pair

    @property
    def refused(self) -> ConfigError | None:
        """Why the directory's current content is not served, or None when it is."""
        return self._watcher.refused

    @property
    def watching(self) -> bool:
        """Whether the watcher thread runs (False before :meth:`start` and after :meth:`stop`)."""
        return self._watcher.running

    def start(self) -> None:
        """Start watching the directory (once)."""
        if not self._started:
            self._started = True
            self._watcher.start()

    def stop(self) -> None:
        """Stop watching."""
        self._watcher.stop()

    def check(self) -> bool:
        """Check the directory once now (what the watcher does every interval);
        True when a new configuration was put in force. A new content is applied
        at the second check that sees it (the watcher's settle rule)."""
        return self._watcher.check()

    def subscribe(self, listener: Callable[[KBearConfig, KBearConfig], None]) -> None:
        """Call ``listener(old, new)`` after each configuration put in force (in the
        watcher's thread; an exception is logged)."""
        self._listeners.append(listener)

    def _applied(self, old: KBearConfig, new: KBearConfig) -> None:
        self._pair = (Served(new, Router(new), time.time()), self._pair[0])
        for listener in self._listeners:
            try:
                listener(old, new)
            except Exception:
                log.exception("kbear serve: a configuration listener failed")
        log.info(
            "kbear serve: configuration %s applied from %s (%d clusters, %d topics, %d rules)",
            new.digest[:12],
            self.directory,
            len(new.clusters),
            len(new.topics),
            len(new.rules),
        )
