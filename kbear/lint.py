"""``kbear lint``: warnings about a configuration that loads but probably does not do what
its author meant.

A valid configuration (:func:`kbear.load_config` accepts it) can still hold rules that
never take effect, rules whose effect depends on their order in the file, topics or
consumer groups that some clients cannot reach, or clusters nothing routes to. Every
warning is *provable*: it holds for every client the applications could present, so a
warning is never a guess. What cannot be decided from the configuration alone (the
client's id and meta are only known at lookup time) never produces a warning.

Checks (``code`` of :class:`LintWarning`):

``ignored-rule``
    A rule of no kind (no ``rule.isGlobal: true``, no ``topic.id``, not both
    consumer-group keys, e.g. a misspelt ``topic.idXX``): it takes part in no lookup
    (CRRL spec, "Kinds of rule"); it loads and is ignored, as in the reference system.
``never-matches``
    A rule whose conditions are false in every lookup it takes part in: a factor that
    does not exist (``when env=prod`` instead of ``client.env=prod``), a topic rule
    testing another ``topic.id`` or a ``topic.<key>`` value that topics.yaml does not
    give its topic, a key tested twice with two values.
``shadowed``
    A rule that can never win: in every chain it takes part in, a rule that comes before
    it always matches (no condition, or only conditions that hold for that chain, such
    as ``topic.id=<its topic>``). A higher-priority global rule without ``when`` shadows
    every rule after it.
``order-dependent``
    Two rules of the same priority, kind and scope (the same topic, the same
    (group, topic), or both global) that route to different places and that one lookup
    can match both: which one wins depends only on their order in route-rules.yaml.
    A rule that always matches after conditional ones (a default written last) is
    the usual idiom and is not reported; written first, it shadows them.
``no-route``
    A topic of topics.yaml for which some producer has no route, or a consumer group of
    consumer-groups.yaml for which some consumer has no route: no rule of the chain
    always matches, so a client without id and meta gets :class:`kbear.NoRouteError`.
``unused-cluster``
    A cluster of clusters.yaml that no rule names (nor another cluster as its
    standby, ``kbear.failover.to``).
``meta-only``
    A cluster meta key that librdkafka does not take as a client property
    (``zookeeper.connect``, a misspelt ``sasl.pasword``, a Java-only
    ``sasl.jaas.config``): it is kept as meta and never reaches a client (kbear's
    own cluster keys, ``kbear.failover.to``, ``kbear.mirror*``, ``kbear.cluster.id``,
    are meta only by design and not reported). A key
    close to a librdkafka property or a ``kbear.*`` setting names it ("did you
    mean 'sasl.password'?", by difflib's closest match).

Example::

    >>> from kbear import load_config
    >>> from kbear.lint import lint
    >>> for warning in lint(load_config("conf")):  # doctest: +SKIP
    ...     print(warning)
    route-rules.yaml: rule 'r2': can never win: rule 'r1' comes before it and always matches [shadowed]
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kbear._chain import index_rules, lookup_factors
from kbear.config import (
    CLUSTERS_FILE,
    CONSUMER_GROUPS_FILE,
    FAILOVER_KEYS,
    ROUTE_RULES_FILE,
    TOPICS_FILE,
    KBearConfig,
    RouteRule,
    RuleKind,
    property_kind,
)
from kbear.crrl import Statement
from kbear.settings import CLIENT_META_PREFIX, DEFAULTS, KBEAR_PREFIX, did_you_mean

__all__ = ["LintWarning", "lint"]


@dataclass(frozen=True, slots=True)
class LintWarning:
    """One warning of :func:`lint`.

    Attributes:
        code: ``ignored-rule``, ``never-matches``, ``shadowed``, ``order-dependent``,
            ``no-route``, ``unused-cluster`` or ``meta-only``.
        file: the file the subject is written in (``route-rules.yaml``, ...).
        subject: what the warning is about: ``rule 'r2'``, ``rules 'r3' and 'r4'``,
            ``topic 'orders'``, ``consumer group 'billing' on topic 'orders'``,
            ``cluster 'dr'``.
        message: why, naming the other rules involved.
    """

    code: str
    file: str
    subject: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.subject}: {self.message} [{self.code}]"


# --------------------------------------------------------------------------- chains


@dataclass
class _Context:
    """One kind of lookup: which rules form its chain and what its factors are.

    ``known`` factors have one value for every lookup of this context; ``free`` factors
    can take any value except the listed ones (those have contexts of their own);
    ``client.*`` factors can take any value or be absent; every other factor is absent.
    """

    name: str
    chain: list[RouteRule]
    known: dict[str, str]
    free: dict[str, frozenset[str]] = field(default_factory=dict)


def _holds(key: str, value: str, ctx: _Context) -> bool | None:
    """Whether ``key=value`` holds in every lookup of ``ctx`` (True), in none (False),
    or depends on the lookup (None)."""
    if key in ctx.known:
        return ctx.known[key] == value
    if key in ctx.free:
        return False if value in ctx.free[key] else None
    if key.startswith("client.") and key != "client.":
        return None
    return False


def _verdict(statement: Statement, ctx: _Context) -> bool | None:
    values: dict[str, str] = {}
    unknown = False
    for cond in statement.conditions:
        if values.setdefault(cond.key, cond.value) != cond.value:
            return False  # the same factor cannot equal two values
        held = _holds(cond.key, cond.value, ctx)
        if held is False:
            return False
        unknown = unknown or held is None
    return None if unknown else True


def _compatible(a: Statement, b: Statement) -> bool:
    """Whether nothing stops one lookup from satisfying both ``a`` and ``b`` (given
    that each is satisfiable on its own)."""
    values = {c.key: c.value for c in a.conditions}
    return all(values.get(c.key, c.value) == c.value for c in b.conditions)


def _contexts(config: KBearConfig) -> list[_Context]:
    """Every kind of lookup the configuration distinguishes.

    For each topic it names (topics.yaml, topic rules, consumer groups): producer
    lookups, consumer lookups by a group it does not name, and consumer lookups by
    each (group, topic) it names. Plus producer and consumer lookups of any other
    topic, where only global rules apply.
    """
    globals_, by_topic, by_group = index_rules(config.rules)
    pairs = set(by_group) | set(config.consumer_groups)
    topics = set(config.topics) | set(by_topic) | {t for _, t in pairs}
    groups_of: defaultdict[str, set[str]] = defaultdict(set)
    for g, t in pairs:
        groups_of[t].add(g)

    def chain(*parts: Iterable[RouteRule]) -> list[RouteRule]:
        return sorted((r for part in parts for r in part), key=lambda r: r.sort_key)

    no_topic = frozenset(topics)
    out = [
        _Context(
            "producer lookups of a topic the configuration does not name",
            chain(globals_),
            {},
            {"topic.id": no_topic},
        ),
        _Context(
            "consumer lookups of a topic the configuration does not name",
            chain(globals_),
            {},
            {"topic.id": no_topic, "consumerGroup.topicId": no_topic, "consumerGroup.groupName": frozenset()},
        ),
    ]
    for topic in sorted(topics):
        factors = lookup_factors(config, topic, None)
        topic_rules = by_topic.get(topic, [])
        named = frozenset(groups_of.get(topic, ()))
        out.append(_Context(f"producer lookups of topic '{topic}'", chain(topic_rules, globals_), factors))
        out.append(
            _Context(
                f"consumer lookups of topic '{topic}' by a group the configuration does not name",
                chain(topic_rules, globals_),
                {**factors, "consumerGroup.topicId": topic},
                {"consumerGroup.groupName": named},
            )
        )
        for group in sorted(named):
            out.append(
                _Context(
                    f"consumer lookups of topic '{topic}' by group '{group}'",
                    chain(by_group.get((group, topic), []), topic_rules, globals_),
                    lookup_factors(config, topic, group),
                )
            )
    return out


# --------------------------------------------------------------------------- checks


def _target(rule: RouteRule) -> tuple[str, str | None]:
    return (rule.statement.cluster, rule.statement.topic)


def _describe_target(rule: RouteRule) -> str:
    cluster, topic = _target(rule)
    return f"cluster '{cluster}'" + (f", topic '{topic}'" if topic is not None else "")


def _rule_checks(config: KBearConfig, contexts: list[_Context]) -> list[LintWarning]:
    #: rule id -> (verdict, the rule always matching before it) in each context it takes part in
    seen: dict[str, list[tuple[bool | None, RouteRule | None]]] = {rule.id: [] for rule in config.rules}
    order_pairs: dict[tuple[str, str], tuple[RouteRule, RouteRule]] = {}
    for ctx in contexts:
        first_true: RouteRule | None = None
        # (priority, kind) -> rules of that tier that may still win in this context
        tiers: dict[tuple[int, int], list[RouteRule]] = {}
        for rule in ctx.chain:
            verdict = _verdict(rule.statement, ctx)
            seen[rule.id].append((verdict, first_true))
            if verdict is False:
                continue
            # Earlier rules of the same tier that may still win here: swapping one of
            # them with this rule would change some lookup's route.
            tier = tiers.setdefault((rule.priority, rule.kind.value), [])
            # A catch-all after conditional rules is the ordinary "specific first,
            # default last" idiom, not a warning (the reverse order is: shadowed).
            for earlier in () if verdict is True else tier:
                pair = (earlier.id, rule.id)
                if (
                    pair not in order_pairs
                    and _target(earlier) != _target(rule)
                    and _compatible(earlier.statement, rule.statement)
                ):
                    order_pairs[pair] = (earlier, rule)
                    break
            if first_true is None:
                tier.append(rule)
                if verdict is True:
                    first_true = rule

    warnings: list[LintWarning] = []
    flagged: set[str] = set()

    def warn(code: str, subject: str, message: str) -> None:
        warnings.append(LintWarning(code, ROUTE_RULES_FILE, subject, message))

    for rule in config.rules:
        met = seen[rule.id]
        subject = f"rule '{rule.id}'"
        if all(verdict is False for verdict, _ in met):
            flagged.add(rule.id)
            warn(
                "never-matches",
                subject,
                f"never matches: its conditions ({' and '.join(map(str, rule.statement.conditions))}) "
                "are false in every lookup it takes part in",
            )
        elif all(shadower is not None for _, shadower in met):
            flagged.add(rule.id)
            shadowers = list(dict.fromkeys(s.id for _, s in met if s is not None))
            names = " and ".join(f"'{s}'" for s in shadowers)
            which = f"rule {names} comes" if len(shadowers) == 1 else f"rules {names} come"
            warn(
                "shadowed",
                subject,
                f"can never win: {which} before it and always match"
                f"{'es' if len(shadowers) == 1 else ''} in every chain it takes part in",
            )
    for earlier, later in order_pairs.values():
        if earlier.id in flagged or later.id in flagged:
            continue
        if earlier.kind is RuleKind.GLOBAL:
            scope = "global"
        elif earlier.kind is RuleKind.TOPIC:
            scope = f"topic '{earlier.topic_id}'"
        else:
            scope = f"consumer group '{earlier.group_name}' on topic '{earlier.topic_id}'"
        warn(
            "order-dependent",
            f"rules '{earlier.id}' and '{later.id}'",
            f"same priority {earlier.priority} and scope ({scope}), one lookup can match both, and "
            f"they pick {_describe_target(earlier)} and {_describe_target(later)}: "
            f"only their order in {ROUTE_RULES_FILE} decides ('{earlier.id}' wins)",
        )
    return warnings


def _reach_checks(config: KBearConfig, contexts: Mapping[str, _Context]) -> list[LintWarning]:
    lookups = [
        (TOPICS_FILE, f"topic '{topic}'", contexts[f"producer lookups of topic '{topic}'"], "producers")
        for topic in config.topics
    ] + [
        (
            CONSUMER_GROUPS_FILE,
            f"consumer group '{g}' on topic '{t}'",
            contexts[f"consumer lookups of topic '{t}' by group '{g}'"],
            "consumers",
        )
        for g, t in config.consumer_groups
    ]
    used = {rule.statement.cluster for rule in config.rules}
    used |= {s for c in config.clusters.values() if (s := c.failover.standby) is not None}
    return [
        LintWarning(
            "no-route",
            file,
            subject,
            f"some {who} have no route: none of the {len(ctx.chain)} rule(s) of its chain "
            "always matches (a client without id and meta gets NoRouteError)",
        )
        for file, subject, ctx, who in lookups
        # every client gets a route when a rule of the chain holds whatever the client
        if not any(_verdict(rule.statement, ctx) is True for rule in ctx.chain)
    ] + [
        LintWarning("unused-cluster", CLUSTERS_FILE, f"cluster '{cluster}'", "no rule routes to it")
        for cluster in config.clusters
        if cluster not in used
    ]


def lint(config: KBearConfig) -> list[LintWarning]:
    """Every warning about ``config`` (see the module docstring for the checks).

    Args:
        config: a loaded configuration (:func:`kbear.load_config`).

    Returns:
        The warnings: rule checks in route-rules.yaml order, then order-dependent
        pairs, topics, consumer groups, clusters and meta-only cluster keys;
        empty when there is nothing to say.
    """
    contexts = _contexts(config)
    by_name = {ctx.name: ctx for ctx in contexts}
    ignored = [
        LintWarning("ignored-rule", ROUTE_RULES_FILE, entry, f"takes part in no lookup ({reason}); ignored")
        for entry, reason in config.ignored_rules
    ]
    return (
        ignored + _rule_checks(config, contexts) + _reach_checks(config, by_name) + _meta_only_checks(config)
    )


def nearest_key(key: str) -> str:
    """`` (did you mean 'x'?)`` for an unknown cluster meta key: a ``kbear.`` key among
    kbear's settings (:data:`kbear.settings.DEFAULTS`), any other among librdkafka's
    properties; ``""`` when nothing is close."""
    if key.lower().startswith(KBEAR_PREFIX):
        return "" if key.startswith(CLIENT_META_PREFIX) else did_you_mean(key, [*DEFAULTS, "kbear.client.id"])
    from kbear._mock import librdkafka_properties  # loads librdkafka: only when asked

    return did_you_mean(key, librdkafka_properties())


def _meta_only_checks(config: KBearConfig) -> list[LintWarning]:
    out = []
    for cluster in config.clusters.values():
        for key in cluster.meta_only_keys:
            if key in FAILOVER_KEYS:
                continue
            why = (
                "librdkafka does not support it (a Java client property)"
                if property_kind(key) == "unsupported"
                else f"not a librdkafka client property{nearest_key(key)}"
            )
            out.append(
                LintWarning(
                    "meta-only",
                    CLUSTERS_FILE,
                    f"cluster '{cluster.id}'",
                    f"meta '{key}': {why}; kept as meta, never passed to clients",
                )
            )
    return out
