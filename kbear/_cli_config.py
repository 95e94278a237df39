"""``kbear route``, ``explain``, ``validate`` and ``lint``: the commands that read a
configuration directory or a meta-service URL (private to :mod:`kbear.cli`).

Over a meta-service URL:

- ``route`` asks the service for the lookup's route (one request);
- ``explain`` asks the same, then explains the chain of the rules the service
  serves (:meth:`kbear.Router.explain_consumer`: ``GET /route/rules/all``, each
  rule's statement in its meta ``rule``); a service that does not serve its
  rules' statements is said to be so, with the service's route, never an
  invented chain;
- ``validate`` and ``lint`` check everything the service holds, its rules
  when it serves them (otherwise the cluster checks only, said on stderr).

An unreachable meta-service exits with :data:`EXIT_META_UNAVAILABLE`, a
configuration problem (an unset ``${NAME}`` included) with
:data:`EXIT_CONFIG_ERROR` whatever the source.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from kbear._cli_format import explain_json, explain_lines, no_route_message, route_json, route_line
from kbear._identity import Client
from kbear._route import Explanation, MetaServiceUnavailable, NoRouteError, Route
from kbear._standby import topics_note
from kbear.config import ConfigError, KBearConfig, load_config
from kbear.router import Router
from kbear.sources import check_location, is_url

EXIT_OK = 0
#: ``lint``: the configuration is valid but has warnings.
EXIT_LINT_WARNINGS = 1
#: A configuration error. argparse uses the same code for usage errors.
EXIT_CONFIG_ERROR = 2
#: No rule of the chain routes the lookup.
EXIT_NO_ROUTE = 3
#: The meta-service of ``--config URL`` cannot be reached (and has not answered the lookup).
EXIT_META_UNAVAILABLE = 4
EXIT_INTERRUPTED = 130


def print_config_error(exc: ConfigError, location: str) -> int:
    """Print every problem of ``exc`` on stderr; the exit code (unreachable service or
    configuration error)."""
    from kbear._meta_http import ServiceUnreachableError

    unreachable = is_url(location) and isinstance(exc, ServiceUnreachableError)
    if unreachable:
        print(f"kbear: meta-service unavailable: {location}", file=sys.stderr)
    else:
        print(f"kbear: invalid configuration in {location}: {len(exc.problems)} problem(s)", file=sys.stderr)
    for problem in exc.problems:
        print(f"  {problem}", file=sys.stderr)
    return EXIT_META_UNAVAILABLE if unreachable else EXIT_CONFIG_ERROR


def load(location: str, client: Client | None = None) -> Router | int:
    """The router of ``location`` (a directory, or a meta-service URL asked on behalf
    of ``client``), or the exit code after printing every problem on stderr."""
    try:
        check_location(location)
        if is_url(location):
            return Router.from_source(location, client=client, cache_file=None)
        return Router.from_path(location)
    except ConfigError as exc:
        return print_config_error(exc, location)


def load_config_of(location: str) -> tuple[KBearConfig, str | None] | int:
    """validate / lint: the configuration of a directory or of everything a service
    holds, and why rules are missing (None: they are checked); or the exit code."""
    try:
        check_location(location)
        if not is_url(location):
            return load_config(location), None
        from kbear._meta_http import fetch_everything

        got = fetch_everything(location)
    except ConfigError as exc:
        return print_config_error(exc, location)
    return got.config, got.rules_missing


def load_router(location: str) -> Router | int:
    """assignments / move: the router of a directory, or of everything a meta-service
    holds; or the exit code after printing every problem on stderr."""
    got = load_config_of(location)
    return got if isinstance(got, int) else Router(got[0])


def client_of(args: argparse.Namespace) -> Client:
    """The lookup's client: ``--client-id`` and ``--client-meta``."""
    return Client(args.client_id, args.client_meta)


def _failed(exc: MetaServiceUnavailable | NoRouteError | ConfigError, location: str) -> int:
    """The exit code of a lookup's ``exc``, after printing it on stderr."""
    if isinstance(exc, MetaServiceUnavailable):
        print(f"kbear: meta-service unavailable: {exc}", file=sys.stderr)
        return EXIT_META_UNAVAILABLE
    if isinstance(exc, NoRouteError):
        print(f"kbear: no route: {no_route_message(exc)}", file=sys.stderr)
        return EXIT_NO_ROUTE
    return print_config_error(exc, location)


def _lookup(router: Router, args: argparse.Namespace, client: Client) -> Route | int:
    """The route of the lookup, or the exit code after printing why there is none."""
    try:
        return router.route(args.topic, args.group, client)
    except (MetaServiceUnavailable, NoRouteError, ConfigError) as exc:
        return _failed(exc, args.config)


def cmd_route(args: argparse.Namespace) -> int:
    """``kbear route``."""
    client = client_of(args)
    router = load(args.config, client)
    if isinstance(router, int):
        return router
    route = _lookup(router, args, client)
    router.close()
    if isinstance(route, int):
        return route
    print(json.dumps(route_json(route)) if args.json else route_line(route))
    return EXIT_OK


def _explain(router: Router, args: argparse.Namespace, client: Client) -> Explanation:
    if args.group is None:
        return router.explain_producer(args.topic, client)
    return router.explain_consumer(args.topic, args.group, client)


def cmd_explain(args: argparse.Namespace) -> int:
    """``kbear explain``. Over a meta-service: the service's route, then the chain of
    the rules it serves (:meth:`Router.explain_consumer`), or a plain statement that
    it serves none to explain with."""
    client = client_of(args)
    service = is_url(args.config)
    router = load(args.config, client)
    if isinstance(router, int):
        return router
    try:
        route = _lookup(router, args, client) if service else None
        if isinstance(route, int) and route != EXIT_NO_ROUTE:
            return route  # unreachable, or its answer refused: nothing to explain
        explanation = _explain(router, args, client)
    except (MetaServiceUnavailable, ConfigError) as exc:
        return _failed(exc, args.config)
    finally:
        router.close()
    if args.json:
        print(json.dumps(explain_json(explanation, args.topic, args.group, client)))
    else:
        print("\n".join(explain_lines(explanation, args.topic, args.group, client)))
    code = EXIT_OK
    if explanation.route is None:
        code = _failed(NoRouteError(client, args.topic, args.group), args.config)
    answered = route if isinstance(route, Route) else None
    if service and explanation.chain_unknown is None and _target(explanation.route) != _target(answered):
        said = "no route" if answered is None else route_line(answered)
        print(
            f"kbear: note: the service answered the lookup with {said}; the rules it serves "
            "give the winner above (they changed between the two requests?)",
            file=sys.stderr,
        )
    return code


def _target(route: Route | None) -> tuple[str, str] | None:
    return None if route is None else (route.cluster_id, route.topic)


def summary(config: KBearConfig, rules_missing: str | None = None) -> str:
    """``validate``'s line: what was loaded."""
    rules = "rules not checked" if rules_missing is not None else f"{len(config.rules)} rules"
    return (
        f"OK: {len(config.clusters)} clusters, {len(config.topics)} topics, "
        f"{len(config.consumer_groups)} consumer groups, {rules}"
    )


def cmd_validate(args: argparse.Namespace) -> int:
    """``kbear validate``."""
    got = load_config_of(args.config)
    if isinstance(got, int):
        return got
    config, missing = got
    if missing is not None:
        print(f"kbear: {args.config}: {missing}: rules not checked", file=sys.stderr)
    print(summary(config, missing))
    for line in failover_lines(config):
        print(line)
    return EXIT_OK


def failover_lines(config: KBearConfig) -> list[str]:
    """``validate``'s lines on failovers: for each cluster with a standby
    (``kbear.failover.to``), where its topics go once failed over and what producers
    do there (:func:`kbear._standby.topics_note`)."""
    return [
        f"  failover {c.id} -> {c.failover.standby} (kbear.mirror: {c.failover.mirror.value}): "
        + topics_note(c, back=False)
        for c in config.clusters.values()
        if c.failover.standby is not None
    ]


def cmd_lint(args: argparse.Namespace) -> int:
    """``kbear lint``: one line per warning, or one JSON object with ``--json``."""
    from kbear.lint import lint

    got = load_config_of(args.config)
    if isinstance(got, int):
        return got
    config, missing = got
    warnings = lint(config)
    if missing is not None:
        # Without the rules' statements only the checks of clusters apply.
        warnings = [w for w in warnings if w.code == "meta-only"]
        print(f"kbear: {args.config}: {missing}: rule checks skipped", file=sys.stderr)
    if args.json:
        found = [dataclasses.asdict(w) for w in warnings]
        print(json.dumps({"location": args.config, "rules_checked": missing is None, "warnings": found}))
    elif not warnings:
        print(f"OK: no warnings ({summary(config, missing).removeprefix('OK: ')})")
    else:
        for warning in warnings:
            print(warning)
    if not warnings:
        return EXIT_OK
    if not args.json:
        print(f"kbear: {len(warnings)} warning(s) in {args.config}", file=sys.stderr)
    return EXIT_LINT_WARNINGS
