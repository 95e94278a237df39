"""``kbear move`` on the command line (private): arguments, the run, the report; the
move itself is :mod:`kbear.admin`'s (``plan_move``, ``create_on_target``,
``apply_move``, ``FleetWatch``).

Exit codes: 0 ready (plan), created and ready (``--create``), switched
(``--apply``); 1 not ready, a cluster refused or did not answer, or the watch
timed out; 2 configuration or usage error; 3 no route.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any, TextIO

from confluent_kafka import KafkaException

from kbear._cli_args import add_client_options, non_empty
from kbear._cli_config import EXIT_CONFIG_ERROR, EXIT_NO_ROUTE, EXIT_OK, client_of, load_router
from kbear._clients import current_factory, mount, quieted
from kbear._identity import Client
from kbear._route import NoRouteError, Route
from kbear.admin import (
    ApplyResult,
    FleetState,
    FleetWatch,
    MovePlan,
    RoutedAdminClient,
    apply_move,
    create_on_target,
    error_text,
    plan_move,
    service_directory,
    unanswered,
)
from kbear.config import ConfigError
from kbear.router import Router
from kbear.sources import is_url

#: not ready: a cluster refused or did not answer, or the watch timed out
EXIT_NOT_READY = 1


DESCRIPTION = (
    "Plan the move of a topic to another cluster: routes now and after, the rule change (a diff of "
    "route-rules.yaml), the topic and the groups' offsets on both clusters; exit 0 ready, 1 not ready. "
    "--create makes the target topic match the source; --apply writes the rule and waits until the old "
    "cluster is left, then reports the time it took."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``move`` subcommand's options but ``--config``."""
    parser.add_argument("--topic", required=True, type=non_empty, help="the topic to move (logical name)")
    parser.add_argument(
        "--group",
        action="append",
        default=[],
        type=non_empty,
        metavar="G",
        help="a consumer group of it (repeat)",
    )
    parser.add_argument(
        "--to", required=True, type=non_empty, metavar="CLUSTER", help="the target cluster id"
    )
    parser.add_argument(
        "--create",
        action="store_true",
        help="create the topic on the target (source's partition count and configuration) or fix it",
    )
    parser.add_argument(
        "--apply", action="store_true", help="write the rule change, then wait until the old cluster is left"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_client_options(
        parser,
        id_help="the client the routes are shown for (client.id)",
        meta_help="client meta (factors client.KEY) the routes are shown for",
    )
    parser.add_argument(
        "--stable", type=float, default=5.0, metavar="S", help="--apply: quiet time on the old cluster, s (5)"
    )
    parser.add_argument(
        "--timeout", type=float, default=300.0, metavar="S", help="--apply: longest wait, s (300)"
    )
    parser.add_argument(
        "--request-timeout", type=float, default=10.0, metavar="S", help="per admin request, s (10)"
    )
    parser.add_argument(
        "--meta-service",
        action="append",
        default=[],
        metavar="URL",
        help="--apply: a kbear serve answering the clients from DIR (repeat for replicas; token: "
        "KBEAR_META_TOKEN): also wait until every client that asked for the topic got the new route",
    )


def _route(route: Route) -> str:
    return f"{route.cluster_id}/{route.topic} (rule {route.rule_id})"


def _offsets(offsets: dict[int, int | None]) -> str:
    have = sum(1 for o in offsets.values() if o is not None)
    return f"{have}/{len(offsets)} partitions committed" if offsets else "no partitions"


def print_plan(plan: MovePlan, out: TextIO) -> None:
    """The plan as text."""
    w = partial(print, file=out)

    w(f"move '{plan.topic}' to {plan.to}")
    w(f"  producers: {_route(plan.now)} -> {_route(plan.after)}")
    for g in plan.groups:
        w(f"  group {g.group}: {_route(g.now)} -> {_route(g.after)}")
    if plan.change is not None:
        how = "added" if plan.change.added else "changed"
        w(
            f"rule change: rule '{plan.change.rule_id}' {how} "
            f"(priority {plan.change.priority}): {plan.change.statement}"
        )
        for line in plan.change.diff.splitlines():
            w(f"  {line}")
    for label, state in (("now", plan.source), ("target", plan.target)):
        if state.partitions is None:
            w(f"topic on {state.cluster} ({label}): '{state.topic}' does not exist")
            continue
        conf = (
            "not read"
            if state.overrides is None
            else (", ".join(f"{k}={v}" for k, v in sorted(state.overrides.items())) or "none set")
        )
        w(
            f"topic on {state.cluster} ({label}): '{state.topic}', {state.partitions} partitions, "
            f"{state.messages} messages, configuration: {conf}"
        )
    for g in plan.groups:
        w(
            f"group {g.group}: on {g.now.cluster_id} lag {g.source_lag} ({_offsets(g.source_offsets)}); "
            f"on {plan.to} lag {g.target_lag} ({_offsets(g.target_offsets)})"
        )
        w(f"  kbear.switch.start: {g.switch_start}")
        if g.mirror:
            w(f"  kbear.switch.start=translated ({g.mirror}):")
            for t in g.translated:
                w(f"    {t.describe()}")
    for title, lines in (("problems", plan.problems), ("notes", plan.notes)):
        if lines:
            w(f"{title}:")
            for line in lines:
                w(f"  - {line}")
    w(f"ready: {'yes' if plan.ready else 'no'}")


def run(args: argparse.Namespace) -> int:
    """Run ``kbear move`` with parsed ``args``. ``--config URL``: plan on the directory
    the ``kbear serve`` at URL answers from (read here) and wait for its fleet too."""
    if is_url(args.config):
        args.meta_service = [args.config, *args.meta_service]
        try:
            args.config = service_directory(args.config)
        except ValueError as exc:
            print(f"kbear: {exc}", file=sys.stderr)
            return EXIT_CONFIG_ERROR
    router = load_router(args.config)
    if isinstance(router, int):
        return router
    # a cluster that does not answer: one line naming it, none of librdkafka's
    with mount(quieted(current_factory())):
        return _run(args, router, client_of(args))


def _run(args: argparse.Namespace, router: Router, client: Client) -> int:
    out = io.StringIO() if args.json else sys.stdout  # --json: the text lines go nowhere
    report: dict[str, Any] = {}
    admin = RoutedAdminClient({"kbear.reload.interval.ms": 0}, router=router, client=client)
    try:
        plan = _plan(args, router, admin, client)
        if args.create and not plan.ready:
            try:
                report["created"] = created = create_on_target(admin, plan, args.request_timeout)
            except (KafkaException, ValueError) as exc:
                report["create_error"] = str(exc)
                return _finish(args, plan, report, EXIT_NOT_READY, f"--create failed: {exc}")
            for line in created:
                print(f"--create: {line}", file=out)
            plan = _plan(args, router, admin, client)
        if not args.apply or not plan.ready or plan.change is None:
            return _finish(args, plan, report, EXIT_OK if plan.ready else EXIT_NOT_READY)
        print_plan(plan, out)
        print(
            f"--apply: writing {plan.directory / 'route-rules.yaml'}, watching {plan.now.cluster_id}",
            file=out,
        )
        fleet = (
            FleetWatch(args.meta_service, plan.topic, plan.change.config.digest)
            if args.meta_service
            else None
        )
        try:
            result = apply_move(
                admin,
                plan,
                stable_s=args.stable,
                timeout_s=args.timeout,
                request_timeout_s=args.request_timeout,
                on_tick=_progress(out, fleet),
            )
            written_at = time.monotonic() - result.watch.waited_s
            fleet_done = True
            if fleet is not None:
                fleet_done = fleet.wait(written_at + args.timeout, _fleet_progress(out))
                report["fleet"] = {
                    **fleet.state.as_json(),
                    "done": fleet_done,
                    # seconds from the rule write to the first read that found every client moved
                    "done_s": None
                    if fleet.done_at is None
                    else round(max(0.0, fleet.done_at - written_at), 2),
                }
        finally:
            if fleet is not None:
                fleet.close()
        report["apply"] = _apply_json(result)
        code = EXIT_OK if result.watch.switched and fleet_done else EXIT_NOT_READY
        if args.json:
            return _finish(args, plan, report, code)
        print(_apply_line(plan, result), file=out)
        if fleet is not None:
            print(_fleet_line(plan, fleet), file=out)
        return code
    except NoRouteError as exc:
        print(f"kbear: {exc}", file=sys.stderr)
        return EXIT_NO_ROUTE
    except ValueError as exc:  # a ConfigError: of the changed route-rules.yaml
        what = "the changed route-rules.yaml would be invalid: " if isinstance(exc, ConfigError) else ""
        print(f"kbear: {what}{exc}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    except KafkaException as exc:
        print_unanswered(router, _involved(args, router, client), args.request_timeout, exc)
        return EXIT_NOT_READY
    finally:
        admin.close()


def _involved(args: argparse.Namespace, router: Router, client: Client) -> list[str]:
    """The clusters of the move: the target and those the topic's routes name now."""
    ids = [args.to]
    for group in [None, *args.group]:
        try:
            ids.append(router.route(args.topic, group, client).cluster_id)
        except (NoRouteError, ConfigError):
            continue
    return ids


def print_unanswered(router: Router, cluster_ids: list[str], timeout_s: float, exc: KafkaException) -> None:
    """After ``exc`` from a cluster: one line on stderr per cluster of ``cluster_ids``
    that does not answer now (asked again, each within ``timeout_s`` seconds), naming
    it and its bootstrap servers; ``exc``'s text when every one answers."""
    config = router.config
    down = unanswered(config, cluster_ids, timeout_s)
    for cluster_id, why in down.items():
        servers = config.clusters[cluster_id].bootstrap_servers
        print(
            f"kbear: cluster '{cluster_id}' ({servers}) did not answer within {timeout_s:g} s: {why}",
            file=sys.stderr,
        )
    if not down:
        print(f"kbear: a cluster did not answer: {error_text(exc)}", file=sys.stderr)


def _plan(args: argparse.Namespace, router: Router, admin: RoutedAdminClient, client: Client) -> MovePlan:
    return plan_move(router, admin, args.topic, args.to, list(args.group), client, args.request_timeout)


def _finish(
    args: argparse.Namespace, plan: MovePlan, report: dict[str, Any], code: int, error: str = ""
) -> int:
    if args.json:
        print(json.dumps({"plan": plan.as_json(), **report}, indent=2))
    else:
        print_plan(plan, sys.stdout)
        if error:
            print(error, file=sys.stderr)
    return code


def _apply_json(result: ApplyResult) -> dict[str, Any]:
    watch = result.watch
    return {
        "rule_file": str(result.rule_file),
        "switched": watch.switched,
        "switch_s": None if watch.switch_s is None else round(watch.switch_s, 2),
        "waited_s": round(watch.waited_s, 2),
        "old_cluster_messages_after_write": watch.produced_after_write,
        "lags": watch.lags,
    }


def _apply_line(plan: MovePlan, result: ApplyResult) -> str:
    watch = result.watch
    if watch.switched:
        return (
            f"switched: {plan.now.cluster_id} quiet and every group's lag 0 "
            f"from {watch.switch_s:.1f} s after the "
            f"rule write (held {watch.waited_s - (watch.switch_s or 0):.1f} s; {watch.produced_after_write} "
            "message(s) reached the old cluster after the write)"
        )
    return f"not switched after {watch.waited_s:.1f} s: lags on {plan.now.cluster_id} {watch.lags}"


def _every_2s(show: Callable[..., None]) -> Callable[..., None]:
    """``show``, called at most once per 2 s (the calls between are dropped)."""
    last = [0.0]

    def tick(*args: Any) -> None:
        if time.monotonic() - last[0] >= 2.0:
            last[0] = time.monotonic()
            show(*args)

    return tick


def _progress(out: TextIO, fleet: FleetWatch | None = None) -> Callable[[float, int, dict[str, int]], None]:
    def show(elapsed: float, produced: int, lags: dict[str, int]) -> None:
        clients = "" if fleet is None else f"; {fleet.state.line()}"
        print(
            f"  {elapsed:5.1f} s: {produced} message(s) on the old cluster since the write, "
            f"lag {lags}{clients}",
            file=out,
        )

    return _every_2s(show)


def _fleet_progress(out: TextIO) -> Callable[[FleetState], None]:
    return _every_2s(lambda state: print(f"  waiting for the clients: {state.line()}", file=out))


def _fleet_line(plan: MovePlan, fleet: FleetWatch) -> str:
    state = fleet.state
    if fleet.done_at is not None:
        gone = ""
        if state.not_seen_listed:
            listed = ", ".join(
                f"{cid or '(no id)'} ({address}, {seen})" for cid, address, seen in state.not_seen_listed[:20]
            )
            gone = f"; not seen since, not waited for: {listed}"
        return (
            f"fleet: every live client that asked for '{plan.topic}' got the new route "
            f"({state.moved}/{state.clients - state.not_seen} client(s) on it; reported by kbear serve){gone}"
        )
    listed = ", ".join(f"{cid or '(no id)'} ({address})" for cid, address in state.stragglers[:20])
    more = f" and {len(state.stragglers) - 20} more" if len(state.stragglers) > 20 else ""
    return f"not every client moved before the timeout ({state.line()}); stragglers: {listed or 'none'}{more}"
