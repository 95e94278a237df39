"""What ``kbear route`` and ``kbear explain`` print: a route and an explanation of
the chain as text lines or JSON (private to :mod:`kbear.cli`; no I/O)."""

from __future__ import annotations

from typing import Any

from kbear._identity import Client
from kbear._route import Explanation, NoRouteError, Route, RuleVerdict


def lookup_name(topic: str, group: str | None, client: Client) -> str:
    """One line naming the lookup: producer or consumer, topic, group, client."""
    who = f"client id={client.id!r} meta={dict(client.meta)!r}"
    if group is None:
        return f"producer lookup: topic {topic!r}, {who}"
    return f"consumer lookup: topic {topic!r}, group {group!r}, {who}"


def route_json(route: Route) -> dict[str, str | None]:
    """``route --json``: cluster, (physical) topic, bootstrap servers, rule id."""
    return {
        "cluster": route.cluster_id,
        "topic": route.topic,
        "bootstrap_servers": route.bootstrap_servers,
        "rule": route.rule_id or None,
    }


def route_line(route: Route) -> str:
    """``route``: the route on one line (a remap shows the requested topic)."""
    topic = f"{route.topic} (remapped from {route.requested_topic})" if route.remapped else route.topic
    return (
        f"cluster={route.cluster_id} topic={topic} "
        f"bootstrap.servers={route.bootstrap_servers} rule={rule_name(route)}"
    )


def rule_name(route: Route) -> str:
    """The route's rule id, or that the meta-service which answered it does not say."""
    return route.rule_id or "unknown (the meta-service does not say which rule)"


def no_route_message(exc: NoRouteError) -> str:
    """The error text of a lookup no rule answers, with its kind."""
    kind = "producer lookup, no consumer group" if exc.group is None else "consumer lookup"
    return f"{exc} ({kind})"


def kind_name(verdict: RuleVerdict) -> str:
    """The kind of the verdict's rule: ``global``, ``topic`` or ``consumer-group``."""
    return verdict.rule.kind.name.lower().replace("_", "-")


def verdict_state(index: int, verdict: RuleVerdict, explanation: Explanation) -> str:
    """``match``, ``no match`` or ``not evaluated`` (after the first match)."""
    if index >= explanation.evaluated:
        return "not evaluated"
    return "match" if verdict.matched else "no match"


def verdict_text(index: int, verdict: RuleVerdict, explanation: Explanation) -> str:
    """One rule of the chain as ``explain`` prints it."""
    state = verdict_state(index, verdict, explanation)
    if state == "no match" and verdict.failed:
        return f"no match: {'; '.join(verdict.failed)}"
    if state == "match" and explanation.route is not None and explanation.route.rule_id == verdict.rule.id:
        return "match (winner)"
    return state


def explain_json(explanation: Explanation, topic: str, group: str | None, client: Client) -> dict[str, Any]:
    """``explain --json``: the lookup, the chain with each rule's verdict, the route;
    ``chain`` null and ``chain_unavailable`` saying why when the chain is unknown."""
    out: dict[str, Any] = {
        "lookup": "producer" if group is None else "consumer",
        "topic": topic,
        "group": group,
        "client": {"id": client.id, "meta": dict(client.meta)},
        "factors": dict(explanation.factors),
    }
    if explanation.chain_unknown is not None:
        out["chain"] = None
        out["chain_unavailable"] = explanation.chain_unknown
    else:
        out["chain"] = [
            {
                "rule": v.rule.id,
                "kind": kind_name(v),
                "priority": v.rule.priority,
                "statement": str(v.rule.statement),
                "verdict": verdict_state(i, v, explanation),
                "failed": list(v.failed),
            }
            for i, v in enumerate(explanation.verdicts)
        ]
    out["winner"] = None if explanation.route is None else route_json(explanation.route)
    return out


def explain_lines(explanation: Explanation, topic: str, group: str | None, client: Client) -> list[str]:
    """``explain``: the lookup, the chain with each rule's verdict, the route, as lines."""
    verdicts = explanation.verdicts
    lines = [f"{lookup_name(topic, group, client)}"]
    if explanation.chain_unknown is not None:
        lines.append(f"chain: unknown: {explanation.chain_unknown}")
        said = "none" if explanation.route is None else route_line(explanation.route)
        lines.append(f"the service's route: {said}")
        return lines
    if not verdicts:
        lines.append("chain: empty (no rule applies to this lookup)")
    else:
        lines.append(f"chain: {len(verdicts)} rule(s), first match wins")
        width_n = len(str(len(verdicts)))
        width_id = max(len(v.rule.id) for v in verdicts)
        width_kind = max(len(kind_name(v)) for v in verdicts)
        width_prio = max(len(f"priority {v.rule.priority}") for v in verdicts)
        for i, v in enumerate(verdicts):
            lines.append(
                f"  {i + 1:>{width_n}}. {v.rule.id:<{width_id}}  {kind_name(v):<{width_kind}}  "
                f"{f'priority {v.rule.priority}':<{width_prio}}  {v.rule.statement}  "
                f"-> {verdict_text(i, v, explanation)}"
            )
    route = explanation.route
    if route is None:
        lines.append("winner: none: no rule of the chain matches")
    else:
        lines.append(f"winner: {rule_name(route)}: {route_line(route)}")
    return lines
