"""``kbear move``: plan, prepare and apply the move of a topic to another cluster.

- :func:`plan_move`: where the topic routes now and after (producers and each
  group), the rule change (a diff of route-rules.yaml), whether the topic exists
  on the target with the source's partition count and configuration, each group's
  committed offsets and lag on both clusters, what ``kbear.switch.start`` will do;
  ready when nothing blocks the move.
- :func:`create_on_target`: create the topic on the target with the source's
  partition count and topic configuration, add missing partitions, set differing
  configuration values (through :class:`~kbear.admin.RoutedAdminClient`).
- :func:`apply_move`: write route-rules.yaml atomically, then watch the old
  cluster until producers and consumers have left it (``_move_watch``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

from kbear._identity import Client
from kbear._route import Route
from kbear.admin._facade import RoutedAdminClient
from kbear.admin._move_mirror import MirroredStart, mirrored_starts
from kbear.admin._move_rules import RULES_FILE, RuleChange, plan_rule_change
from kbear.admin._move_state import (
    CommittedOffsets,
    TopicState,
    config_differences,
    lag,
    read_topic,
    retried,
    watermarks,
)
from kbear.admin._move_watch import Watched, WatchResult, watch_switch
from kbear.reload import replace_file
from kbear.router import Router


@dataclass
class GroupPlan:
    """One consumer group of the moved topic.

    Attributes:
        group: the group id.
        now, after: its consumer route now and after the rule change.
        source_offsets, target_offsets: partition -> committed offset (None: none)
            on its current cluster and on the target.
        source_lag, target_lag: messages not yet committed by the group there.
        switch_start: what ``kbear.switch.start`` does on the target (text).
        mirror: the mirror from the current cluster to the target (text; empty: none).
        translated: with ``kbear.switch.start=translated``, the start per partition
            on the target and how far behind the mirror is (empty: no mirror).
    """

    group: str
    now: Route
    after: Route
    source_offsets: dict[int, int | None] = field(default_factory=dict)
    target_offsets: dict[int, int | None] = field(default_factory=dict)
    source_lag: int = 0
    target_lag: int = 0
    switch_start: str = ""
    mirror: str = ""
    translated: list[MirroredStart] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "mirror": self.mirror,
            "translated": [t.as_json() for t in self.translated],
            "group": self.group,
            "now": _route_json(self.now),
            "after": _route_json(self.after),
            "committed_source": {str(p): o for p, o in self.source_offsets.items()},
            "committed_target": {str(p): o for p, o in self.target_offsets.items()},
            "lag_source": self.source_lag,
            "lag_target": self.target_lag,
            "switch_start": self.switch_start,
        }


@dataclass
class MovePlan:
    """Everything ``kbear move`` found; ``ready`` when ``problems`` is empty.

    Attributes:
        topic: the topic (logical name); to: the target cluster id.
        directory: the configuration directory (route-rules.yaml is written there).
        now, after: the producer route now and after the change.
        change: the rule change; None when every route already names the target.
        source, target: the topic on its current cluster and on the target.
        differences: (config name, source value, target value) that differ.
        groups: one :class:`GroupPlan` per ``--group``.
        problems: what blocks the move (exit code 1); notes: what does not.
    """

    topic: str
    to: str
    directory: Path
    now: Route
    after: Route
    change: RuleChange | None
    source: TopicState
    target: TopicState
    differences: list[tuple[str, str | None, str | None]] = field(default_factory=list)
    groups: list[GroupPlan] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ready(self) -> bool:
        return not self.problems

    def as_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "to": self.to,
            "ready": self.ready,
            "producer": {"now": _route_json(self.now), "after": _route_json(self.after)},
            "rule_change": None
            if self.change is None
            else {
                "rule": self.change.rule_id,
                "added": self.change.added,
                "statement": self.change.statement,
                "priority": self.change.priority,
                "diff": self.change.diff,
                "rewritten": self.change.rewritten,
            },
            "source": self.source.as_json(),
            "target": self.target.as_json(),
            "config_differences": [{"name": n, "source": s, "target": t} for n, s, t in self.differences],
            "groups": [g.as_json() for g in self.groups],
            "problems": self.problems,
            "notes": self.notes,
        }


def _route_json(route: Route) -> dict[str, str]:
    return {"cluster": route.cluster_id, "topic": route.topic, "rule": route.rule_id}


def _switch_start(plan: MovePlan, group: GroupPlan) -> str:
    to = plan.to
    have = [p for p, o in group.target_offsets.items() if o is not None]
    held = plan.target.messages
    if plan.target.partitions is None:
        return f"the topic is not on {to} yet"
    if len(have) == plan.target.partitions:
        lagging = f"lag there: {group.target_lag}"
        return f"committed (default): starts at the group's committed offsets on {to} ({lagging})"
    where = (
        "no committed offsets"
        if not have
        else f"committed offsets for {len(have)} of {plan.target.partitions} partitions"
    )
    rest = "it starts" if not have else "the others start"
    return (
        f"committed (default): {where} on {to}: {rest} at "
        f"auto.offset.reset (earliest: the {held} message(s) already on {to} are read; "
        f"latest: what producers send before the group's switch is skipped); "
        f"earliest/latest/timestamp as configured"
    )


def plan_move(
    router: Router,
    admin: RoutedAdminClient,
    topic: str,
    to: str,
    groups: list[str],
    client: Client | None = None,
    timeout_s: float = 10.0,
) -> MovePlan:
    """Plan the move of ``topic`` to cluster ``to`` (nothing is changed).

    Args:
        router: the configuration in force (a directory).
        admin: reads the clusters (addressed by id).
        topic: the topic (logical name); groups: its consumer groups to check.
        client: the client the routes are looked up for (the move rule itself is
            unconditional: every client follows).
        timeout_s: per admin request, seconds.

    Raises:
        NoRouteError: the topic (or a group of it) has no route now.
        ValueError: ``to`` is not in clusters.yaml; the configuration has no directory.
        ConfigError: the changed route-rules.yaml would not validate.
        KafkaException: a cluster did not answer a metadata or offsets request.
    """
    client = client or Client()
    config = router.config
    now = router.route_producer(topic, client)
    group_now = {g: router.route_consumer(topic, g, client) for g in groups}
    moving = now.cluster_id != to or any(r.cluster_id != to for r in group_now.values())
    change = plan_rule_change(config, topic, to, now.topic if now.remapped else None) if moving else None
    after_router = Router(change.config) if change is not None else router
    after = after_router.route_producer(topic, client)
    source = read_topic(admin, now.cluster_id, now.topic, timeout_s)
    target = read_topic(admin, to, after.topic, timeout_s)
    assert config.directory is not None  # plan_rule_change checked it (when moving)
    plan = MovePlan(topic, to, Path(config.directory), now, after, change, source, target)
    if change is None:
        plan.notes.append(
            f"'{topic}' already routes to {to} for producers and every group given: nothing to move"
        )
    if change is not None and change.rewritten:
        plan.notes.append(f"{RULES_FILE} is written back whole by PyYAML (its comments and layout are lost)")
    if after.cluster_id != to:
        plan.problems.append(f"producers would still route to {after.cluster_id} (rule {after.rule_id})")
    if source.partitions is None:
        plan.problems.append(f"'{now.topic}' does not exist on {now.cluster_id}, where it routes now")
    if target.partitions is None:
        count = "" if source.partitions is None else f" with {source.partitions} partitions"
        plan.problems.append(
            f"'{after.topic}' does not exist on {to} "
            f"(--create creates it{count} and the source's configuration)"
        )
    elif source.partitions is not None and source.partitions != target.partitions:
        fix = (
            "--create adds the missing ones"
            if target.partitions < source.partitions
            else "cannot be fixed here"
        )
        plan.problems.append(
            f"partition count differs: {source.partitions} on {now.cluster_id}, "
            f"{target.partitions} on {to} ({fix})"
        )
    for state in (source, target):
        if state.partitions is not None and state.config_error is not None:
            plan.notes.append(f"topic configuration on {state.cluster} not compared: {state.config_error}")
    if source.partitions is not None and target.partitions is not None:
        plan.differences = config_differences(source, target)
        for name, value_s, value_t in plan.differences:
            plan.problems.append(
                f"configuration differs: {name}={value_s} on {now.cluster_id}, "
                f"{value_t} on {to} (--create sets it)"
            )
    with closing(CommittedOffsets(router)) as offsets:
        for group in groups:
            now_g = group_now[group]
            plan.groups.append(
                _plan_group(plan, after_router, admin, offsets, group, now_g, client, timeout_s)
            )
    return plan


def _plan_group(
    plan: MovePlan,
    after_router: Router,
    admin: RoutedAdminClient,
    offsets: CommittedOffsets,
    group: str,
    now: Route,
    client: Client,
    timeout_s: float,
) -> GroupPlan:
    after = after_router.route_consumer(plan.topic, group, client)
    entry = GroupPlan(group, now, after)
    if after.cluster_id != plan.to:
        plan.problems.append(
            f"group '{group}' would still route to {after.cluster_id} (rule {after.rule_id})"
        )
    source = (
        plan.source
        if now.cluster_id == plan.source.cluster
        else read_topic(admin, now.cluster_id, now.topic, timeout_s)
    )
    if source.partitions:
        entry.source_offsets = retried(
            timeout_s, offsets.read, now.cluster_id, group, now.topic, source.partitions, timeout_s
        )
        entry.source_lag = lag(entry.source_offsets, source)
    if plan.target.partitions:
        entry.target_offsets = retried(
            timeout_s, offsets.read, plan.to, group, after.topic, plan.target.partitions, timeout_s
        )
        entry.target_lag = lag(entry.target_offsets, plan.target)
    entry.switch_start = _switch_start(plan, entry)
    if source.partitions and plan.target.partitions:
        mirrored = mirrored_starts(
            after_router.config,
            now,
            plan.to,
            after.topic,
            group,
            entry.source_offsets,
            source,
            plan.target,
            timeout_s,
        )
        if mirrored is not None:
            entry.mirror, entry.translated = mirrored
    if entry.source_lag:
        plan.notes.append(
            f"group '{group}' has {entry.source_lag} message(s) not committed on {now.cluster_id}: "
            "kbear's drain reads them before the switch"
        )
    return entry


def create_on_target(admin: RoutedAdminClient, plan: MovePlan, timeout_s: float = 10.0) -> list[str]:
    """Make the target topic match the source: create it (source's partition count,
    its topic-level configuration, the broker's replication factor), add missing
    partitions, set configuration values that differ.

    Returns:
        One line per action done.

    Raises:
        KafkaException: a cluster refused (e.g. the mock cluster has no CreateTopics).
        ValueError: the source topic does not exist (nothing to copy).
    """
    source, target = plan.source, plan.target
    if source.partitions is None:
        raise ValueError(f"'{source.topic}' does not exist on {source.cluster}: nothing to copy")
    done: list[str] = []
    wait = timeout_s + 5
    if target.partitions is None:
        spec = NewTopic(target.topic, source.partitions, -1, config=dict(source.overrides or {}))
        kwargs = {"operation_timeout": timeout_s, "request_timeout": timeout_s}
        admin.create_topics([spec], cluster=plan.to, **kwargs)[target.topic].result(wait)
        overrides = ", ".join(f"{k}={v}" for k, v in sorted((source.overrides or {}).items())) or "none"
        done.append(
            f"created '{target.topic}' on {plan.to}: {source.partitions} partitions, "
            f"configuration: {overrides}"
        )
        return done
    if target.partitions < source.partitions:
        spec_p = NewPartitions(target.topic, source.partitions)
        futures = admin.create_partitions([spec_p], cluster=plan.to, request_timeout=timeout_s)
        futures[target.topic].result(wait)
        done.append(f"'{target.topic}' on {plan.to}: {target.partitions} -> {source.partitions} partitions")
    changes = [
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
        for name, value, _ in plan.differences
        if value is not None
    ]
    if changes:
        resource = ConfigResource(ResourceType.TOPIC, target.topic, incremental_configs=changes)
        altered = admin.incremental_alter_configs([resource], cluster=plan.to, request_timeout=timeout_s)
        altered[resource].result(wait)
        done.append(
            f"'{target.topic}' on {plan.to}: set " + ", ".join(f"{c.name}={c.value}" for c in changes)
        )
    return done


@dataclass
class ApplyResult:
    """What :func:`apply_move` did: the rule written and how the watch ended."""

    rule_file: Path
    watch: WatchResult


def apply_move(
    admin: RoutedAdminClient,
    plan: MovePlan,
    *,
    stable_s: float = 5.0,
    timeout_s: float = 300.0,
    interval_s: float = 0.5,
    request_timeout_s: float = 10.0,
    on_tick: Callable[[float, int, dict[str, int]], None] | None = None,
) -> ApplyResult:
    """Write the rule change atomically, then watch the old cluster(s).

    Raises:
        ValueError: the plan is not ready, has no change, or route-rules.yaml
            changed since the plan was made (nothing is written then).
        OSError: the file could not be written (it is unchanged then).
    """
    if not plan.ready:
        raise ValueError("the move is not ready: " + "; ".join(plan.problems))
    if plan.change is None:
        raise ValueError("nothing to move")
    path = plan.directory / RULES_FILE
    if path.read_text(encoding="utf-8") != plan.change.old_text:
        raise ValueError(f"{path} changed since the plan was made: plan again")
    source = plan.source
    if source.partitions:  # the watermarks at the write: "messages after the write" counts from them
        low, high = retried(
            request_timeout_s,
            watermarks,
            admin,
            source.cluster,
            source.topic,
            source.partitions,
            request_timeout_s,
        )
        source = replace(source, low=low, high=high)
    replace_file(path, plan.change.new_text)
    written_at = time.monotonic()
    groups = [
        Watched(g.group, g.now.cluster_id, g.now.topic) for g in plan.groups if g.now.cluster_id != plan.to
    ]
    with closing(CommittedOffsets(admin.router)) as offsets:
        watch = watch_switch(
            admin,
            source,
            groups,
            written_at=written_at,
            stable_s=stable_s,
            timeout_s=timeout_s,
            interval_s=interval_s,
            request_timeout_s=request_timeout_s,
            read_committed=offsets.read,
            on_tick=on_tick,
        )
    return ApplyResult(path, watch)
