"""The ``kbear`` command line: ask the router, check a configuration, run the demo.

Subcommands::

    kbear route    --config DIR|URL --topic T [--group G] [--client-id ID]
                   [--client-meta KEY=VALUE ...] [--json]
    kbear explain  --config DIR|URL --topic T [--group G] [--client-id ID]
                   [--client-meta KEY=VALUE ...] [--json]
    kbear validate --config DIR|URL
    kbear lint     --config DIR|URL [--json]

``--config`` takes a configuration directory or a meta-service ``http(s)://``
URL (the ``meta`` extra); another scheme (``ftp://``) is a configuration error
naming it. With a URL, ``route`` asks the service for the route of the
lookup's client (one request); ``explain`` also reads the service's rules
(``GET /route/rules/all``, each statement in the rule's meta ``rule``) and
explains the chain from them, or says plainly that it cannot (a service that
does not serve them) and prints the service's route. ``validate`` and
``lint`` with a URL check everything the service holds (``GET
/meta/clusters/all``, ``/meta/topics/all``, ``/meta/consumer-groups/all``,
``/route/rules/all``); without served rules, the cluster checks only (said on
stderr). See :mod:`kbear._cli_config`.
    kbear init     DIR [--cluster ID[=SERVERS] ...] [--force]
    kbear dev      [--config DIR] [--env-file FILE] [--serve] [--port N] [--brokers N]
    kbear demo     [--messages N] [--keep-config DIR] [--metrics-port N]
    kbear assignments --config DIR --group G [--registry-topic T] [--timeout S]
    kbear move     --config DIR|URL --topic T [--group G ...] --to CLUSTER [--create] [--apply]
                   [--meta-service URL ...] [--json]
    kbear failover --config DIR|URL --cluster ID [--apply] [--json] [--timeout S]
    kbear failback --config DIR|URL --cluster ID [--apply] [--json] [--timeout S]
    kbear serve    --config DIR [--host 127.0.0.1] [--port 8080] [--token-file FILE] [--ssl-certfile FILE ...]
                   [--operator-token-file FILE] [--failover-after-ms MS] [--probe-interval S]
    kbear --version

``route`` and ``explain`` do a consumer lookup when ``--group`` is given and a
producer lookup otherwise. ``--client-meta`` takes one or more ``KEY=VALUE``
pairs and may be repeated; a key given twice with different values, or a pair
without ``=``, is a usage error.

Exit codes:

- 0: success (a route was found, the configuration is valid, ``lint`` found
  nothing, the demo passed, ``init`` wrote the directory, ``dev`` was stopped by
  Ctrl+C or SIGTERM);
- 1: ``lint`` printed warnings (the configuration is valid);
- 2: a configuration error (every problem is printed on stderr), or a usage
  error (argparse); ``init``: DIR already holds the files (``--force``
  overwrites); ``dev``: no unset placeholder to start a cluster for;
- 3: no rule of the chain routes the request (``route``, ``explain``);
- 4: the meta-service of ``--config URL`` cannot be reached (``route`` and
  ``explain``: it has not answered the lookup; ``validate``, ``lint``:
  nothing could be read);
- 1 also: ``assignments`` flagged overlaps, orphans or misconfigured nodes, or
  found no live node of the group (see :func:`kbear.balanced.run_assignments`);
  ``failover`` / ``failback`` are not ready (the standby, or the cluster coming
  back, does not answer; see :mod:`kbear.admin._failover_cli`);
- 130: interrupted (``dev`` excepted: Ctrl+C is how it ends).

``lint`` prints one line per warning on stdout (``FILE: SUBJECT: MESSAGE [CODE]``,
see :mod:`kbear.lint`) and a count on stderr; with ``--json``, one object
``{"location", "rules_checked", "warnings": [{"code", "file", "subject",
"message"}]}``.

Only ``bootstrap.servers`` of a cluster is ever printed: the other cluster
properties (``sasl.password`` and the like) never appear in the output.

The ``kbear`` console script calls :func:`main`, whose return value is the
process exit code (the generated wrapper does ``sys.exit(main())``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import kbear
from kbear._cli_args import add_client_options, non_empty, positive_int
from kbear._cli_config import (
    EXIT_CONFIG_ERROR,
    EXIT_INTERRUPTED,
    EXIT_LINT_WARNINGS,
    EXIT_META_UNAVAILABLE,
    EXIT_NO_ROUTE,
    EXIT_OK,
    cmd_explain,
    cmd_lint,
    cmd_route,
    cmd_validate,
    load_router,
)
from kbear._cli_dev import add_dev_arguments, cmd_dev
from kbear._cli_init import add_init_arguments, cmd_init
from kbear._cli_move import DESCRIPTION, add_arguments
from kbear._cli_move import run as run_move
from kbear.admin import FAILOVER_DESCRIPTION, add_failover_arguments, run_failover
from kbear.balanced import run_assignments

__all__ = [
    "EXIT_CONFIG_ERROR",
    "EXIT_INTERRUPTED",
    "EXIT_LINT_WARNINGS",
    "EXIT_META_UNAVAILABLE",
    "EXIT_NO_ROUTE",
    "EXIT_OK",
    "build_parser",
    "main",
]


# --------------------------------------------------------------------------- parser


def _add_config(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        required=True,
        metavar="DIR|URL",
        help=(
            "configuration directory (clusters.yaml, route-rules.yaml, topics.yaml, consumer-groups.yaml) "
            "or a meta-service http(s):// URL"
        ),
    )


def _add_lookup(parser: argparse.ArgumentParser) -> None:
    _add_config(parser)
    parser.add_argument("--topic", required=True, type=non_empty, help="the topic asked for")
    parser.add_argument(
        "--group",
        type=non_empty,
        help="consumer group: makes this a consumer lookup (a producer lookup without it)",
    )
    add_client_options(
        parser,
        id_help="the client's id (factor client.id)",
        meta_help="client meta (factors client.KEY); one or more pairs, option may be repeated",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def _command(
    sub: Any, name: str, handler: Callable[[argparse.Namespace], int], help: str, description: str
) -> argparse.ArgumentParser:
    """Subcommand ``name`` (``kbear NAME``) run by ``handler``; its parser, to add the options to."""
    parser: argparse.ArgumentParser = sub.add_parser(name, help=help, description=description)
    parser.set_defaults(handler=handler)
    return parser


def build_parser() -> argparse.ArgumentParser:
    """The ``kbear`` argument parser, with its subcommands."""
    parser = argparse.ArgumentParser(
        prog="kbear",
        description="Route Kafka clients across clusters with CRRL rules.",
        epilog=(
            "exit codes: 0 ok, 1 lint warnings, 2 configuration or usage error, 3 no route, "
            "4 meta-service unavailable, 130 interrupted"
        ),
    )
    parser.add_argument("--version", action="version", version=f"kbear {kbear.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    route_description = "Look up the route of a producer (no --group) or consumer (--group) request."
    _add_lookup(_command(sub, "route", cmd_route, "print the route of a lookup", route_description))
    explain_help = "print the chain of a lookup with each rule's verdict"
    explain_description = "Print the chain of a lookup, one line per rule in chain order, and the winner."
    _add_lookup(_command(sub, "explain", cmd_explain, explain_help, explain_description))
    validate_description = "Load a configuration directory and print every problem (exit 2 if any)."
    _add_config(
        _command(sub, "validate", cmd_validate, "check a configuration directory", validate_description)
    )
    lint = _command(
        sub,
        "lint",
        cmd_lint,
        "warn about rules that never win, order-dependent rules, unreachable topics, unused clusters",
        "Load a configuration directory and print one line per warning "
        "(exit 0 none, 1 warnings, 2 configuration error).",
    )
    _add_config(lint)
    lint.add_argument("--json", action="store_true", help="print one JSON object (the warnings)")
    init_description = (
        "Write the four files of a configuration directory, commented: clusters.yaml (the --cluster "
        "options, or east and west with ${KBEAR_<ID>_BOOTSTRAP_SERVERS} placeholders), topics.yaml, "
        "consumer-groups.yaml, route-rules.yaml. Exit 0 written, 2 refused."
    )
    add_init_arguments(
        _command(sub, "init", cmd_init, "write a configuration directory to start from", init_description)
    )
    dev_description = (
        "Start an embedded Kafka cluster (in this process, on 127.0.0.1) for each cluster of DIR whose "
        "bootstrap.servers is an unset ${NAME}, print the export lines for them, optionally run "
        "kbear serve over DIR, and run until Ctrl+C. DIR is written by kbear init when missing."
    )
    dev_help = "run local Kafka clusters for a configuration directory until Ctrl+C"
    add_dev_arguments(_command(sub, "dev", cmd_dev, dev_help, dev_description))
    demo_description = "Produce and consume through two in-process Kafka clusters, move a topic, count."
    demo = _command(sub, "demo", _cmd_demo, "run the demo on two embedded Kafka clusters", demo_description)
    demo.add_argument(
        "--messages",
        type=positive_int,
        default=1000,
        metavar="N",
        help="messages per client environment and topic (default: 1000)",
    )
    demo.add_argument(
        "--keep-config", metavar="DIR", help="write the demo configuration to DIR and keep it afterwards"
    )
    demo.add_argument(
        "--metrics-port",
        type=int,
        metavar="N",
        help="serve kbear's metrics on 127.0.0.1:N while the demo runs (needs the 'metrics' extra)",
    )
    assignments = _command(
        sub,
        "assignments",
        _cmd_assignments,
        "print a client-balanced group's partition -> node table",
        "Read the ownership reports of ClientBalancedConsumer nodes of a group from every cluster "
        "and print the partition -> node table (exit 1 when overlaps, orphans or misconfigured nodes "
        "are flagged, or no node reports).",
    )
    _add_config(assignments)
    assignments.add_argument("--group", required=True, type=non_empty, help="the consumer group (group.id)")
    assignments.add_argument(
        "--registry-topic",
        default="kbear.balanced.registry",
        metavar="T",
        help="the registry topic (kbear.balanced.registry.topic; default: kbear.balanced.registry)",
    )
    assignments.add_argument(
        "--timeout", type=float, default=10.0, metavar="S", help="per-cluster timeout, seconds (default: 10)"
    )
    move = _command(sub, "move", run_move, "plan, prepare and apply the move of a topic", DESCRIPTION)
    _add_config(move)
    add_arguments(move)
    for name, back in (("failover", False), ("failback", True)):
        what = "a failed-over cluster back" if back else "a cluster to its standby"
        handler = partial(run_failover, back=back)
        failover = _command(
            sub, name, handler, f"plan and apply the {name} of {what}", FAILOVER_DESCRIPTION[back]
        )
        _add_config(failover)
        add_failover_arguments(failover)
    _add_serve(sub)
    return parser


def _add_serve(sub: Any) -> None:
    serve = _command(
        sub,
        "serve",
        _cmd_serve,
        "run the meta-service (KBear's protocol) over a configuration directory",
        "Answer route and meta requests (the KBear meta-service protocol, JSON) from DIR, "
        "watched: a valid edit is served, a bad one refused (see GET /health). "
        "Needs the server extra: pip install 'kbear[server]'.",
    )
    _add_config(serve)
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8080, help="port to listen on (default: 8080)")
    serve.add_argument(
        "--operator-token-file",
        metavar="FILE",
        help="tokens that may also act (POST /actions/move, /failover, /failback; the console's "
        "actions), one per line (default: KBEAR_SERVE_OPERATOR_TOKEN; none: no action accepted)",
    )
    serve.add_argument(
        "--token-file",
        metavar="FILE",
        help="require 'Authorization: Bearer TOKEN', TOKEN one of FILE's lines "
        "(default: the KBEAR_SERVE_TOKEN environment variable; none: no authentication)",
    )
    serve.add_argument("--ssl-certfile", metavar="FILE", help="serve HTTPS with this certificate (PEM)")
    serve.add_argument("--ssl-keyfile", metavar="FILE", help="the certificate's private key (PEM)")
    serve.add_argument(
        "--ssl-ca-certs", metavar="FILE", help="require client certificates signed by these CAs (PEM)"
    )
    serve.add_argument(
        "--watch-interval",
        type=float,
        default=0.5,
        metavar="SECONDS",
        help="seconds between checks of DIR for changes (default: 0.5)",
    )
    serve.add_argument(
        "--failover-after-ms",
        type=positive_int,
        default=None,
        metavar="MS",
        help="watch the clusters that have a standby (kbear.failover.to) and fail one over, for every "
        "client, once none of its bootstrap servers took a TCP connection for MS ms (writes "
        "kbear.failover.active into DIR's clusters.yaml; default: no watch)",
    )
    serve.add_argument(
        "--probe-interval",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="seconds between two TCP probes of each cluster (GET /clusters, the console, the failover "
        "watch; default: 2)",
    )
    serve.add_argument(
        "--workers",
        type=positive_int,
        default=1,
        metavar="N",
        help="worker processes sharing the port, each loading and watching DIR (default: 1)",
    )
    serve.add_argument(
        "--fleet",
        choices=["on", "off"],
        default="on",
        help="record which client got which route (GET /fleet, /fleet/moves, the console; default: on)",
    )
    serve.add_argument(
        "--fleet-db",
        metavar="FILE",
        help="the fleet's SQLite file, shared by the workers (default: a temporary file removed at exit)",
    )
    serve.add_argument(
        "--fleet-store",
        metavar="URL",
        help="where the fleet and the audit log are kept: sqlite:///FILE (as --fleet-db) or "
        "postgresql://USER@HOST:PORT/DB, shared by replicas on several hosts (schema made by kbear)",
    )
    serve.add_argument(
        "--fleet-ttl",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="forget a client unseen for this long (default: 300)",
    )
    serve.add_argument(
        "--fleet-max-entries",
        type=positive_int,
        default=100_000,
        metavar="N",
        help="most (client, lookup) entries kept; past it the least recently seen go (default: 100000)",
    )
    serve.add_argument("--access-log", action="store_true", help="log every request (uvicorn's access log)")
    serve.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"], help="(default: info)"
    )


# --------------------------------------------------------------------------- entry point


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``kbear`` command line.

    Args:
        argv: the arguments after the program name; ``sys.argv[1:]`` when None.

    Returns:
        The exit code (see the module docstring). Usage errors, ``--help`` and
        ``--version`` return argparse's code instead of raising ``SystemExit``,
        so ``main`` always returns.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: usage error (2), --help / --version (0)
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    try:
        code: int = args.handler(args)
    except KeyboardInterrupt:
        print("kbear: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return code


# --------------------------------------------------------------------------- commands


def _cmd_demo(args: argparse.Namespace) -> int:
    from kbear.demo import run_demo  # lazily: the demo pulls in the embedded clusters

    return run_demo(messages=args.messages, config_dir=args.keep_config, metrics_port=args.metrics_port)


def _cmd_assignments(args: argparse.Namespace) -> int:
    router = load_router(args.config)
    if isinstance(router, int):
        return router
    try:
        return run_assignments(
            router.config, args.group, sys.stdout, sys.stderr, topic=args.registry_topic, timeout=args.timeout
        )
    finally:
        router.close()


def _cmd_serve(args: argparse.Namespace) -> int:
    try:
        from kbear.server.command import run  # lazily: the optional server extra
    except ImportError as exc:
        print(f"kbear serve needs the server extra: pip install 'kbear[server]' ({exc})", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
