"""Configuration watcher: reloads a router when its source's content changes.

The source is a directory (below) or any :class:`~kbear.sources.ConfigSource`:
each check asks it for its digest (a meta-service source refreshes its answer
then); a source that cannot be read (a service down) is logged at ERROR level
and the last good configuration stays in force. Sources whose state changes
atomically (``settle`` False) are loaded at the check that sees the change.

The watcher compares a SHA-256 digest of the files' bytes (not their mtimes), so
a touched but unchanged file does nothing and a change within the same second
is still seen. A configuration that fails validation is refused: the errors are
logged at ERROR level on the ``kbear.reload`` logger and the last good
configuration stays in force.

A change is applied only once the files have held still: the watcher loads a
new digest when it saw the same digest at the previous check, and applies what
it loaded only if that is still the digest it saw. After a check that sees a new
digest, the next check comes after a short settle time (``SETTLE_S``, 0.2 s, or
the interval if shorter) rather than a whole interval, so a change takes effect
within one interval plus the settle time. Checks start every interval (the
time a check takes does not push the next one back), unless a check takes
longer than the interval: then the next one waits a whole interval. A file
being written in place, even one whose first half happens to be a valid
configuration (a cut between two rules), is not applied half-written as long
as the writer does not pause for the settle time.

Write configuration files atomically all the same (write a temporary file in
the same directory, then ``os.replace`` it over the old one: :func:`replace_file`): that is the only
way to guarantee that no reader ever sees a partial file. A file caught
half-written and invalid is refused (logged) like any invalid configuration
and picked up once complete.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Protocol

from kbear import _events
from kbear._source import ConfigSource
from kbear.config import ConfigError, KBearConfig, replace_file
from kbear.sources import DirectorySource

__all__ = ["ConfigWatcher", "Reloadable", "replace_file"]

log = logging.getLogger("kbear.reload")

#: Seconds between the check that sees a new digest and the check that confirms it.
SETTLE_S = 0.2

_monotonic = time.monotonic  # the watcher's clock (a test replaces it)


class Reloadable(Protocol):
    """What a watcher reloads (a :class:`~kbear.Router`): the configuration in
    force, and how a new one is put in force."""

    @property
    def config(self) -> KBearConfig:
        """The configuration in force (its ``digest`` is compared with the source's)."""
        ...

    def apply(self, new: KBearConfig) -> bool:
        """Put ``new`` in force; False when its digest equals the one in force."""
        ...


class ConfigWatcher:
    """A daemon thread that checks a configuration source every ``interval_s`` seconds.

    Args:
        router: the router to reload (anything :class:`Reloadable`); its
            listeners are notified on change.
        source: the configuration directory, or a :class:`~kbear.sources.ConfigSource`.
        interval_s: seconds between checks (> 0).

    Use :meth:`Router.watch` rather than building one yourself.
    """

    def __init__(self, router: Reloadable, source: ConfigSource | Path, interval_s: float) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self._router = router
        self._source = source if isinstance(source, ConfigSource) else DirectorySource(source)
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kbear-config-watcher", daemon=True)
        self._refused_digest: str | None = None
        self._refused: ConfigError | None = None
        # A new digest seen once: loaded at the next check if it is still the same.
        self._pending_digest: str | None = None

    @property
    def running(self) -> bool:
        """Whether the watcher thread is alive."""
        return self._thread.is_alive()

    @property
    def refused(self) -> ConfigError | None:
        """The error of the change refused last, while the directory still holds it
        (None once the files are back to the configuration in force or a change is applied)."""
        return self._refused

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the thread and wait up to ``timeout_s`` seconds for it."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)

    def check(self) -> bool:
        """Check once now; True when a new configuration was applied.

        A new content digest is only noted the first time it is seen; it is
        loaded (and applied, or refused) when a later check sees it again.
        """
        source = self._source
        try:
            digest = source.digest()
        except ConfigError as exc:
            self._refuse(
                "unreadable",
                "kbear configuration source unreadable, the previous configuration stays: %s",
                exc,
            )
            return False
        if digest == self._router.config.digest:
            # Back to the configuration in force: a later repeat of a refused
            # change is refused (and logged) again.
            self._refused_digest = self._pending_digest = None
            self._refused = None
            return False
        if digest == self._refused_digest:
            return False
        if source.settle and digest != self._pending_digest:
            self._pending_digest = digest
            log.debug("kbear configuration change seen in %s; applied once it holds still", source.location)
            return False
        try:
            new = source.load()
        except ConfigError as exc:
            self._refused_digest = digest
            self._refused = exc
            self._refuse("invalid", "kbear configuration change refused, the previous one stays: %s", exc)
            return False
        if new.digest != digest:
            # The files changed while they were read (or the service answered
            # anew): wait for them to hold still.
            self._pending_digest = new.digest if source.settle else None
            return False
        self._refused_digest = self._pending_digest = None
        self._refused = None
        return self._router.apply(new)

    def _refuse(self, reason: str, message: str, exc: ConfigError) -> None:
        location = _events.location(self._source.location)
        extra = _events.fields("reload_refused", reason=reason)
        log.error(message, exc, extra={**extra, "location": location})
        _events.emit(_events.ReloadRefused(location, reason))

    def _run(self) -> None:
        settle_s = min(SETTLE_S, self._interval_s)
        wait = self._interval_s
        while not self._stop.wait(wait):
            started = _monotonic()
            try:
                self.check()
            except Exception:
                log.exception("kbear configuration watcher failed; retrying next interval")
            period = settle_s if self._pending_digest else self._interval_s
            # Checks start every period (a check's own time does not push the next
            # one back: no drift), unless one took longer than the period: then a
            # whole period, so that a slow source (a service under load) is not
            # asked back to back.
            took = _monotonic() - started
            wait = period - took if took < period else period
