"""``kbear serve``: load the directory, then run the application under uvicorn.

The arguments are defined by :mod:`kbear.cli` (``kbear serve --help``); this
module turns them into a running server. A configuration that does not load
at start is an error (exit 2, every problem printed); once running, a bad edit
is refused and the last good configuration stays served.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import logging
import os
import ssl
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette

from kbear.config import ConfigError
from kbear.server.app import create_app
from kbear.server.audit import AuditLog
from kbear.server.auth import OPERATOR_TOKEN_ENV, TOKEN_ENV, read_tokens
from kbear.server.clusters import ClusterBoard
from kbear.server.failover import FailoverWatch
from kbear.server.fleet import FleetRecorder, shown_location
from kbear.server.holder import ConfigHolder

__all__ = ["run", "worker_app"]

log = logging.getLogger("kbear.server")

_EXIT_OK = 0
_EXIT_CONFIG_ERROR = 2
#: Seconds uvicorn waits for a worker's health-check answer before killing it (uvicorn >= 0.30).
_WORKER_HEALTHCHECK_S = 30
# How run() hands its arguments to worker processes (--workers N > 1).
_WORKER_ENV = "KBEAR_SERVE_WORKER_SETTINGS"


def _fail(message: str, details: Iterable[object] = ()) -> int:
    print(f"kbear serve: {message}", *(f"  {detail}" for detail in details), sep="\n", file=sys.stderr)
    return _EXIT_CONFIG_ERROR


def run(args: argparse.Namespace) -> int:
    """Serve until interrupted (SIGINT / SIGTERM end it gracefully).

    Args:
        args: ``config``, ``host``, ``port``, ``token_file``, ``ssl_certfile``,
            ``ssl_keyfile``, ``ssl_ca_certs``, ``watch_interval`` (seconds),
            ``workers``, ``fleet``, ``fleet_db``, ``fleet_store``, ``fleet_ttl``, ``fleet_max_entries``,
            ``failover_after_ms`` (None: no failover watch, :mod:`kbear.server.failover`),
            ``probe_interval`` (seconds, :mod:`kbear.server.clusters`),
            ``access_log``, ``log_level`` as parsed by :func:`kbear.cli.build_parser`.

    Returns:
        0 after a graceful stop (on SIGTERM uvicorn ends the process by that
        signal once stopped gracefully; SIGINT ends as ``kbear``'s 130); 2 when
        the configuration, the token or the TLS options are unusable (the
        reason on stderr).
    """
    try:
        tokens = read_tokens(args.token_file, os.environ)
        read_tokens(args.operator_token_file, os.environ, OPERATOR_TOKEN_ENV)  # refused here, not in _app
    except (OSError, ValueError) as exc:
        return _fail(f"cannot read the token: {exc}")
    if (args.ssl_certfile is None) != (args.ssl_keyfile is None):
        return _fail("--ssl-certfile and --ssl-keyfile go together")
    if args.ssl_ca_certs is not None and args.ssl_certfile is None:
        return _fail("--ssl-ca-certs needs --ssl-certfile and --ssl-keyfile")
    if args.fleet_ttl <= 0:
        return _fail(f"--fleet-ttl must be > 0, got {args.fleet_ttl}")
    if args.probe_interval <= 0:
        return _fail(f"--probe-interval must be > 0, got {args.probe_interval}")
    try:
        holder = ConfigHolder(args.config, args.watch_interval)
    except ConfigError as exc:
        return _fail(f"invalid configuration in {args.config}: {len(exc.problems)} problem(s)", exc.problems)
    except ValueError as exc:
        return _fail(str(exc))
    _configure_logging(args.log_level)
    options: dict[str, Any] = {
        "host": args.host,
        "port": args.port,
        "log_config": None,  # kbear's and uvicorn's records go through the root logger
        "log_level": args.log_level,
        "access_log": args.access_log,
        "ssl_certfile": args.ssl_certfile,
        "ssl_keyfile": args.ssl_keyfile,
        "ssl_ca_certs": args.ssl_ca_certs,
        "ssl_cert_reqs": ssl.CERT_REQUIRED if args.ssl_ca_certs else ssl.CERT_NONE,
        "server_header": False,
    }
    served = holder.served.config
    scheme = "https" if args.ssl_certfile else "http"
    log.info(
        "kbear serve: %s (digest %s: %d clusters, %d topics, %d consumer groups, %d rules) on %s://%s:%d, "
        "%d worker process(es), bearer token %s",
        args.config,
        served.digest[:12],
        len(served.clusters),
        len(served.topics),
        len(served.consumer_groups),
        len(served.rules),
        scheme,
        args.host,
        args.port,
        args.workers,
        "required" if tokens else f"not required (set --token-file or {TOKEN_ENV})",
    )
    with contextlib.ExitStack() as cleanup:
        # the failover watch probes through the board the console and GET /clusters show
        board = ClusterBoard(lambda: holder.served.config, args.probe_interval)
        if args.failover_after_ms is not None:
            watch = FailoverWatch(
                args.config, lambda: holder.served.config, args.failover_after_ms, probe=board.probe
            )
            watch.start()
            cleanup.callback(watch.stop)
            log.info("kbear serve: failing over clusters lost for %d ms", args.failover_after_ms)
        # the files the workers share: the fleet (unless --fleet-db), the failed sign-ins
        shared = Path(cleanup.enter_context(tempfile.TemporaryDirectory(prefix="kbear-serve-")))
        logins = str(shared / "logins.db")
        fleet: dict[str, Any] | None = None
        if args.fleet == "on":
            if args.fleet_store is not None and args.fleet_db is not None:
                return _fail("--fleet-store and --fleet-db name the same thing: give one")
            if args.fleet_store is not None and not args.fleet_store.startswith(
                ("sqlite://", "postgresql://", "postgres://")
            ):
                return _fail(
                    f"--fleet-store: expected sqlite:///FILE or postgresql://..., got {args.fleet_store!r}"
                )
            path = args.fleet_store or args.fleet_db or str(shared / "fleet.db")
            fleet = {"path": path, "ttl_s": args.fleet_ttl, "max_entries": args.fleet_max_entries}
            try:
                FleetRecorder(**fleet)  # creates the file and its tables before the workers open it
            except Exception as exc:  # OSError, sqlite3.Error, psycopg.Error
                return _fail(f"cannot open the fleet store {shown_location(path)}: {exc}")
            log.info("kbear serve: recording the fleet in %s", shown_location(path))
        # the audit log: in the fleet's file when there is one (one table more), else its own
        audit_path = fleet["path"] if fleet is not None else str(shared / "audit.db")
        try:
            AuditLog(audit_path).close()  # its table made before the workers open it
        except Exception as exc:  # sqlite3.Error, psycopg.Error
            return _fail(f"cannot open the audit log in {shown_location(audit_path)}: {exc}")
        settings = {
            "config": args.config,
            "watch_interval": args.watch_interval,
            "token_file": args.token_file,
            "log_level": args.log_level,
            "fleet": fleet,
            "logins": logins,
            "probe_interval": args.probe_interval,
            "operator_token_file": args.operator_token_file,
            "audit": audit_path,
        }
        try:
            if args.workers == 1:
                uvicorn.Server(uvicorn.Config(_app(settings, holder, board), **options)).run()
            else:
                # Each worker process loads and watches the directory itself (see worker_app).
                os.environ[_WORKER_ENV] = json.dumps(settings)
                if "timeout_worker_healthcheck" in inspect.signature(uvicorn.Config).parameters:
                    # uvicorn kills a worker that does not answer its health check within
                    # 5 s; a worker importing kbear on a loaded machine can take longer.
                    options["timeout_worker_healthcheck"] = _WORKER_HEALTHCHECK_S
                uvicorn.run(f"{__name__}:worker_app", factory=True, workers=args.workers, **options)
        except (OSError, ssl.SSLError) as exc:
            return _fail(str(exc))
    return _EXIT_OK


def _configure_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper()),
        format="%(asctime)s %(levelname)s %(name)s[%(process)d]: %(message)s",
    )


def worker_app() -> Starlette:
    """The application of one worker process of ``kbear serve --workers N`` (N > 1),
    built from what :func:`run` put in the environment: uvicorn starts each worker
    with ``worker_app`` as its application factory. Each worker loads the directory,
    reads the token file (or ``KBEAR_SERVE_TOKEN``) and watches the directory itself;
    the workers record the fleet in one SQLite file (:mod:`kbear.server.fleet`) and
    count the console's failed sign-ins in another (:mod:`kbear.server._limits_sqlite`).

    Raises:
        ConfigError: the directory no longer loads (the worker does not start).
    """
    settings = json.loads(os.environ[_WORKER_ENV])
    _configure_logging(settings["log_level"])
    holder = ConfigHolder(settings["config"], settings["watch_interval"])
    return _app(settings, holder, ClusterBoard(lambda: holder.served.config, settings["probe_interval"]))


def _app(settings: dict[str, Any], holder: ConfigHolder, board: ClusterBoard) -> Starlette:
    """The application of :func:`run`'s ``settings`` over ``holder`` and ``board``."""
    fleet = None if settings["fleet"] is None else FleetRecorder(**settings["fleet"])
    return create_app(
        holder,
        tokens=read_tokens(settings["token_file"], os.environ),
        fleet=fleet,
        login_failures_db=settings["logins"],
        clusters=board,
        operator_tokens=read_tokens(settings["operator_token_file"], os.environ, OPERATOR_TOKEN_ENV),
        audit=AuditLog(settings["audit"]),
    )
