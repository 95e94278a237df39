"""Configuration watcher: reloads a router when its directory's content changes.

The watcher compares a SHA-256 digest of the files' bytes (not their mtimes), so
a touched but unchanged file does nothing and a change within the same second
is still seen. A configuration that fails validation is refused: the errors are
logged at ERROR level on the ``kbear.reload`` logger and the last good
configuration stays in force.

Write configuration files atomically (write a temporary file in the same
directory, then ``os.replace`` it over the old one): a file caught half-written
is refused like any invalid configuration and picked up at the next check once
complete.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from kbear.config import ConfigError, config_digest, load_config

if TYPE_CHECKING:
    from kbear.router import Router

__all__ = ["ConfigWatcher"]

log = logging.getLogger("kbear.reload")


class ConfigWatcher:
    """A daemon thread that checks ``directory`` every ``interval_s`` seconds.

    Args:
        router: the router to reload; its listeners are notified on change.
        directory: the configuration directory.
        interval_s: seconds between checks (> 0).

    Use :meth:`Router.watch` rather than building one yourself.
    """

    def __init__(self, router: Router, directory: Path, interval_s: float) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self._router = router
        self._directory = directory
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kbear-config-watcher", daemon=True)
        self._refused_digest: str | None = None

    @property
    def running(self) -> bool:
        """Whether the watcher thread is alive."""
        return self._thread.is_alive()

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the thread and wait up to ``timeout_s`` seconds for it."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)

    def check(self) -> bool:
        """Check once now; True when a new configuration was applied."""
        digest = config_digest(self._directory)
        if digest == self._router.config.digest:
            # Back to the configuration in force: a later repeat of a refused
            # change is refused (and logged) again.
            self._refused_digest = None
            return False
        if digest == self._refused_digest:
            return False
        try:
            new = load_config(self._directory)
        except ConfigError as exc:
            self._refused_digest = digest
            log.error("kbear configuration change refused, the previous one stays: %s", exc)
            return False
        self._refused_digest = None
        return self._router.apply(new)

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self.check()
            except Exception:
                log.exception("kbear configuration watcher failed; retrying next interval")
