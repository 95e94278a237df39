"""``kbear serve``: load the directory, then run the application under uvicorn.

The arguments are defined by :mod:`kbear.cli` (``kbear serve --help``); this
module turns them into a running server. A configuration that does not load
at start is an error (exit 2, every problem printed); once running, a bad edit
is refused and the last good configuration stays served.
"""

from __future__ import annotations

import argparse
import logging
import os
import ssl
import sys

import uvicorn

from kbear.config import ConfigError
from kbear.server.app import create_app
from kbear.server.auth import TOKEN_ENV, read_tokens
from kbear.server.holder import ConfigHolder

__all__ = ["run"]

log = logging.getLogger("kbear.server")

_EXIT_OK = 0
_EXIT_CONFIG_ERROR = 2


def _fail(message: str) -> int:
    print(f"kbear serve: {message}", file=sys.stderr)
    return _EXIT_CONFIG_ERROR


def run(args: argparse.Namespace) -> int:
    """Serve until interrupted (SIGINT / SIGTERM end it gracefully).

    Args:
        args: ``config``, ``host``, ``port``, ``token_file``, ``ssl_certfile``,
            ``ssl_keyfile``, ``ssl_ca_certs``, ``watch_interval`` (seconds),
            ``access_log``, ``log_level`` as parsed by :func:`kbear.cli.build_parser`.

    Returns:
        0 after a graceful stop (on SIGTERM uvicorn ends the process by that
        signal once stopped gracefully; SIGINT ends as ``kbear``'s 130); 2 when
        the configuration, the token or the TLS options are unusable (the
        reason on stderr).
    """
    try:
        tokens = read_tokens(args.token_file, os.environ)
    except (OSError, ValueError) as exc:
        return _fail(f"cannot read the token: {exc}")
    if (args.ssl_certfile is None) != (args.ssl_keyfile is None):
        return _fail("--ssl-certfile and --ssl-keyfile go together")
    if args.ssl_ca_certs is not None and args.ssl_certfile is None:
        return _fail("--ssl-ca-certs needs --ssl-certfile and --ssl-keyfile")
    try:
        holder = ConfigHolder(args.config, args.watch_interval)
    except ConfigError as exc:
        print(
            f"kbear serve: invalid configuration in {args.config}: {len(exc.problems)} problem(s)",
            file=sys.stderr,
        )
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return _EXIT_CONFIG_ERROR
    except ValueError as exc:
        return _fail(str(exc))
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    app = create_app(holder, tokens=tokens)
    config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        log_config=None,  # kbear's and uvicorn's records go through the root logger set above
        log_level=args.log_level,
        access_log=args.access_log,
        ssl_certfile=args.ssl_certfile,
        ssl_keyfile=args.ssl_keyfile,
        ssl_ca_certs=args.ssl_ca_certs,
        ssl_cert_reqs=ssl.CERT_REQUIRED if args.ssl_ca_certs else ssl.CERT_NONE,
        server_header=False,
    )
    served = holder.served.config
    scheme = "https" if args.ssl_certfile else "http"
    log.info(
        "kbear serve: %s (digest %s: %d clusters, %d topics, %d consumer groups, %d rules) on %s://%s:%d, "
        "bearer token %s",
        args.config,
        served.digest[:12],
        len(served.clusters),
        len(served.topics),
        len(served.consumer_groups),
        len(served.rules),
        scheme,
        args.host,
        args.port,
        "required" if tokens else f"not required (set --token-file or {TOKEN_ENV})",
    )
    try:
        uvicorn.Server(config).run()
    except (OSError, ssl.SSLError) as exc:
        return _fail(str(exc))
    return _EXIT_OK
