"""An in-process ``kbear serve`` for tests, examples and the demo.

:class:`EmbeddedMetaService` runs the meta-service application (:func:`create_app`)
with uvicorn in a background thread on ``127.0.0.1`` and a free port, over a
configuration directory it watches, exactly as ``kbear serve --config DIR``
would (secrets left unresolved for the clients, a bad edit refused and the last
good configuration served). Clients reach it at :attr:`url`::

    with EmbeddedMetaService("conf") as service:
        producer = kbear.RoutedProducer({"kbear.config": service.url})

Needs the ``server`` extra.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from pathlib import Path

import uvicorn

from kbear.server.app import create_app
from kbear.server.audit import AuditLog
from kbear.server.clusters import ClusterBoard
from kbear.server.failover import FailoverWatch
from kbear.server.fleet import FleetRecorder
from kbear.server.holder import ConfigHolder

#: Longest wait for the server to start or stop, seconds.
_START_STOP_S = 10.0


class EmbeddedMetaService:
    """``kbear serve`` over ``directory`` in a background thread of this process.

    Args:
        directory: the configuration directory served (watched every
            ``watch_interval_s`` seconds).
        watch_interval_s: seconds between checks of the directory (``kbear serve
            --watch-interval``; default 0.2 here, 0.5 for the command).
        token: a bearer token the service requires (None: none).
        fleet: record the fleet (``GET /fleet``, the console) in a SQLite file
            in a temporary directory removed by :meth:`close`.
        failover_after_ms: watch the clusters and fail a lost one over (``kbear
            serve --failover-after-ms``, :mod:`kbear.server.failover`); None: no watch.
        operator_token: a token that may also act (``POST /actions/...``, the
            console's actions; ``kbear serve --operator-token-file``); None: none.

    Raises:
        ConfigError: the directory's configuration is invalid.
        RuntimeError: the server did not start within 10 s.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        watch_interval_s: float = 0.2,
        token: str | None = None,
        fleet: bool = True,
        failover_after_ms: int | None = None,
        operator_token: str | None = None,
    ) -> None:
        self.holder = ConfigHolder(directory, watch_interval_s)
        #: the failover watch (None without ``failover_after_ms``)
        self.failover: FailoverWatch | None = None
        if failover_after_ms is not None:
            holder = self.holder
            self.failover = FailoverWatch(
                Path(directory), lambda: holder.served.config, failover_after_ms, interval_s=0.2
            )
            self.failover.start()
        self._tmp = tempfile.TemporaryDirectory(prefix="kbear-embedded-serve-")
        #: The recorded fleet (None when ``fleet=False``).
        self.fleet = FleetRecorder(Path(self._tmp.name) / "fleet.db") if fleet else None
        audit = AuditLog(Path(self._tmp.name) / ("fleet.db" if fleet else "audit.db"))
        app = create_app(
            self.holder,
            tokens=(token,) if token else (),
            fleet=self.fleet,
            operator_tokens=(operator_token,) if operator_token else (),
            audit=audit,
            clusters=ClusterBoard(lambda: self.holder.served.config, 0.5),
        )
        config = uvicorn.Config(
            app, host="127.0.0.1", port=0, log_config=None, access_log=False, lifespan="on"
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="kbear-embedded-serve", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + _START_STOP_S
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.close()
                raise RuntimeError("the embedded meta-service did not start on 127.0.0.1")
            time.sleep(0.01)
        #: the port it listens on (a free one, chosen by the system)
        self.port: int = self._server.servers[0].sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``: the ``kbear.config`` of clients routed by this service."""
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        """Stop serving (waits up to 10 s for the server thread)."""
        if self.failover is not None:
            self.failover.stop()
        self._server.should_exit = True
        self._thread.join(_START_STOP_S)
        self._tmp.cleanup()

    def __enter__(self) -> EmbeddedMetaService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
