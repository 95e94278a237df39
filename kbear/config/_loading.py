"""Loading a configuration into a validated KBearConfig (private).

:func:`load_config` reads the four files of a directory (:mod:`kbear.config._documents`);
:func:`load_documents` takes the same four documents already parsed (a
meta-service answer, an in-memory configuration). Both validate every entry
against the models of :mod:`kbear.config`, interpolate ``${NAME}`` in cluster
meta values, ask librdkafka about every cluster's client properties
(:mod:`kbear.config._librdkafka`), check the rules across documents (kinds, clusters
named, CRRL syntax) and raise one ConfigError listing every problem.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from kbear import crrl
from kbear._gcpause import collector_paused
from kbear.config._documents import (
    CLUSTERS_FILE,
    CONSUMER_GROUPS_FILE,
    REQUIRED_FILES,
    ROUTE_RULES_FILE,
    TOPICS_FILE,
    _digest_update,
    documents_digest,
    entries_of,
    parse_document,
)
from kbear.config._errors import ConfigError, ConfigProblem
from kbear.config._failover import failover_problems
from kbear.config._librdkafka import refused_value
from kbear.config._models import (
    ClusterConfig,
    ConsumerGroupConfig,
    KBearConfig,
    RouteRule,
    RuleKind,
    TopicConfig,
    _meta,
    _Model,
    _plain_topic_meta,
    _RawRule,
    _scalar_to_str,
    _TopicTable,
)

#: What an unset ``${NAME}`` in ``bootstrap.servers`` (a placeholder of ``kbear init``) asks for.
_BOOTSTRAP_HINT = (
    " (export {name}=HOST:PORT[,HOST:PORT...] or write the brokers' addresses in clusters.yaml; "
    "for local clusters: kbear dev --config DIR)"
)
_ENV_REF = re.compile(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)\}")

log = logging.getLogger("kbear.config")


class UnsetVariableError(KeyError):
    """A ``${NAME}`` placeholder whose environment variable is not set.

    Attributes:
        name: the variable's name.
    """

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name

    def __str__(self) -> str:
        return f"environment variable {self.name} is not set"


def resolve_placeholders(value: str, environ: Mapping[str, str]) -> str:
    """``value`` with each ``${NAME}`` replaced by ``environ[NAME]`` and ``$${`` by a
    literal ``${`` (the rule of cluster meta in ``clusters.yaml``).

    Raises:
        UnsetVariableError: a placeholder names a variable ``environ`` does not hold
            (the first one); nothing is ever half resolved.
    """

    def sub(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None:
            return "${"
        if name not in environ:
            raise UnsetVariableError(name)
        return environ[name]

    return _ENV_REF.sub(sub, value)


def _entry_id(item: Mapping[str, Any]) -> str | None:
    """The entry's ``id`` as the loader will read it, when it is a non-empty scalar."""
    value = _scalar_to_str(item.get("id"))
    return value if isinstance(value, str) and value else None


@dataclass(eq=False)
class _Loader:
    # Either a directory whose files are read, or the parsed documents by file name.
    directory: Path | None
    environ: Mapping[str, str] | None  # None: ``${NAME}`` and ``$${`` kept as written
    documents: Mapping[str, Any] | None = None
    problems: list[ConfigProblem] = field(default_factory=list)
    hash: Any = field(default_factory=hashlib.sha256)
    # Every cluster id written in clusters.yaml (valid entries or not), and
    # whether that file could be read as a list at all: rules are checked
    # against these ids, so an empty cluster list refuses every rule.
    cluster_ids: set[str] = field(default_factory=set)
    clusters_listed: bool = False
    #: (entry, reason) of rules of no kind: they take part in no lookup
    ignored: list[tuple[str, str]] = field(default_factory=list)

    def problem(self, file: str, entry: str | None, message: str) -> None:
        self.problems.append(ConfigProblem(file, entry, message))

    def read_entries(self, name: str) -> list[tuple[str, Any]]:
        """The entries of document ``name`` (:func:`~kbear.config._documents.entries_of`),
        or [] after reporting why it cannot be read."""
        if self.documents is not None:
            if name not in self.documents:
                if name in REQUIRED_FILES:
                    self.problem(name, None, "missing (required)")
                return []
            return entries_of(name, self.documents[name], self.problem)
        assert self.directory is not None
        try:
            data = (self.directory / name).read_bytes()
        except FileNotFoundError:
            if name in REQUIRED_FILES:
                self.problem(name, None, f"missing (required in {self.directory})")
            return []
        except OSError as exc:
            self.problem(name, None, f"cannot read: {exc.strerror or exc}")
            return []
        _digest_update(self.hash, name, data)
        doc, why = parse_document(data)
        if why is not None:
            self.problem(name, None, why)
            return []
        return entries_of(name, doc, self.problem)

    def validate(self, file: str, label: str, model: type[_Model], item: Any) -> tuple[Any, set[str]]:
        """The model, or None after reporting every field error; and the names of
        the top-level fields that failed (so the caller can still check the others)."""
        try:
            return model.model_validate(item), set()
        except ValidationError as exc:
            failed: set[str] = set()
            for err in exc.errors():
                loc = ".".join(str(p) for p in err["loc"])
                if err["loc"]:
                    failed.add(str(err["loc"][0]))
                msg = err["msg"].removeprefix("Value error, ")
                self.problem(file, label, f"key '{loc}': {msg}" if loc else msg)
            return None, failed

    def interpolate(self, label: str, key: str, value: str) -> str:
        if self.environ is None:
            return value
        try:
            return resolve_placeholders(value, self.environ)
        except UnsetVariableError as exc:
            hint = _BOOTSTRAP_HINT.format(name=exc.name) if key == "bootstrap.servers" else ""
            self.problem(CLUSTERS_FILE, label, f"key '{key}': {exc}{hint}")
            return ""

    def clusters(self) -> dict[str, ClusterConfig]:
        out: dict[str, ClusterConfig] = {}
        seen: set[str] = set()
        before = len(self.problems)
        entries = self.read_entries(CLUSTERS_FILE)
        self.clusters_listed = len(self.problems) == before
        self.cluster_ids = {cid for _, item in entries if (cid := _entry_id(item)) is not None}
        for label, item in entries:
            cluster_id = _entry_id(item)
            entry = f"cluster '{cluster_id}'" if cluster_id is not None else label
            before = len(self.problems)
            cluster, failed = self.validate(CLUSTERS_FILE, entry, ClusterConfig, item)
            if cluster_id is not None:
                if cluster_id in seen:
                    self.problem(CLUSTERS_FILE, entry, "duplicate cluster id")
                    continue
                seen.add(cluster_id)
            if "meta" in failed:
                continue
            meta: dict[str, str] = _meta(item.get("meta"))
            if not meta.get("bootstrap.servers", "").strip():
                self.problem(CLUSTERS_FILE, entry, "meta 'bootstrap.servers' is required")
                continue
            meta = {k: self.interpolate(entry, k, v) for k, v in meta.items()}
            if len(self.problems) > before or cluster is None:
                continue
            if not meta["bootstrap.servers"].strip():
                self.problem(
                    CLUSTERS_FILE, entry, "meta 'bootstrap.servers' is empty once read from the environment"
                )
                continue
            for key, value in meta.items():
                if self.environ is None and "${" in value:
                    continue  # a placeholder kept for the client to resolve: checked there
                reason = refused_value(key, value)
                if reason is not None:
                    self.problem(CLUSTERS_FILE, entry, f"meta '{key}': librdkafka refuses it: {reason}")
            if len(self.problems) > before:
                continue
            out[cluster.id] = ClusterConfig(id=cluster.id, meta=meta)
        metas = {c.id: c.meta for c in out.values()}
        for cluster_id, problems in failover_problems(metas, self.cluster_ids).items():
            for message in problems:
                self.problem(CLUSTERS_FILE, f"cluster '{cluster_id}'", message)
        return out

    def topics(self) -> Mapping[str, TopicConfig]:
        out: dict[str, TopicConfig | tuple[tuple[str, str], ...]] = {}
        for label, item in self.read_entries(TOPICS_FILE):
            plain = _plain_topic_meta(item)
            if plain is not None and plain[0] not in out:
                out[plain[0]] = tuple(plain[1].items())
                continue
            topic_id = _entry_id(item)
            entry = f"topic '{topic_id}'" if topic_id is not None else label
            topic, _ = self.validate(TOPICS_FILE, entry, TopicConfig, item)
            if topic is None:
                continue
            if topic.id in out:
                self.problem(TOPICS_FILE, entry, "duplicate topic id")
                continue
            out[topic.id] = topic
        return _TopicTable(out)

    def consumer_groups(self) -> dict[tuple[str, str], ConsumerGroupConfig]:
        out: dict[tuple[str, str], ConsumerGroupConfig] = {}
        for label, item in self.read_entries(CONSUMER_GROUPS_FILE):
            group, _ = self.validate(CONSUMER_GROUPS_FILE, label, ConsumerGroupConfig, item)
            if group is None:
                continue
            key = (group.group_name, group.topic_id)
            if key in out:
                self.problem(
                    CONSUMER_GROUPS_FILE,
                    f"consumer group '{key[0]}' on topic '{key[1]}'",
                    "duplicate (groupName, topicId)",
                )
                continue
            out[key] = group
        return out

    def rules(self) -> tuple[RouteRule, ...]:
        # Every problem of a rule is reported at once: a field that fails its
        # type check (``priority: -1``) does not hide the CRRL syntax, the
        # unknown cluster or the kind of the same rule.
        out: list[RouteRule] = []
        seen: set[str] = set()
        # Generated rule files repeat a few statements many times: each distinct
        # text is parsed once, and its (immutable) Statement shared.
        statements: dict[str, crrl.Statement] = {}
        for position, (label, item) in enumerate(self.read_entries(ROUTE_RULES_FILE)):
            rule_id = _entry_id(item)
            entry = f"rule '{rule_id}'" if rule_id is not None else label
            raw, failed = self.validate(ROUTE_RULES_FILE, entry, _RawRule, item)
            ok = raw is not None
            if rule_id is not None:
                if rule_id in seen:
                    self.problem(ROUTE_RULES_FILE, entry, "duplicate rule id")
                    ok = False
                seen.add(rule_id)
            kind = None if "meta" in failed else self.rule_kind(entry, _meta(item.get("meta")))
            if "rule" in failed:
                continue
            text = _scalar_to_str(item["rule"])
            try:
                statement = statements.get(text) if isinstance(text, str) else None
                if statement is None:
                    statement = statements[text] = crrl.parse(text)
            except crrl.CrrlSyntaxError as exc:
                self.problem(ROUTE_RULES_FILE, entry, f"key 'rule': {exc} in {text!r}")
                continue
            if self.clusters_listed and statement.cluster not in self.cluster_ids:
                known = ", ".join(sorted(self.cluster_ids)) or "none"
                self.problem(
                    ROUTE_RULES_FILE,
                    entry,
                    f"uses cluster '{statement.cluster}', which is not in {CLUSTERS_FILE} (known: {known})",
                )
                ok = False
            if raw is not None and kind is not None and ok:
                out.append(RouteRule(raw.id, raw.priority, raw.meta, statement, kind, position))
        return tuple(out)

    def ignore(self, entry: str, reason: str) -> None:
        """A rule that takes part in no lookup (CRRL spec, "Kinds of rule"): left out
        with a warning, as the reference system does, not refused."""
        self.ignored.append((entry, reason))
        log.warning("kbear: %s %s takes part in no lookup, ignored: %s", ROUTE_RULES_FILE, entry, reason)

    def rule_kind(self, entry: str, meta: Mapping[str, str]) -> RuleKind | None:
        kinds = []
        is_global = meta.get("rule.isGlobal")
        if is_global is not None and is_global not in ("true", "false"):
            self.problem(
                ROUTE_RULES_FILE,
                entry,
                f"meta 'rule.isGlobal' must be true or false, got {is_global!r}",
            )
            return None
        if is_global == "true":
            kinds.append(RuleKind.GLOBAL)
        if "topic.id" in meta:
            kinds.append(RuleKind.TOPIC)
        missing = [k for k in ("consumerGroup.groupName", "consumerGroup.topicId") if k not in meta]
        if not missing:
            kinds.append(RuleKind.CONSUMER_GROUP)
        elif len(missing) == 1:
            why = (
                f"a consumer-group rule needs both consumerGroup.groupName and "
                f"consumerGroup.topicId in meta; missing {missing[0]}"
            )
            if kinds:  # a global or topic rule with half a consumer group: ambiguous
                self.problem(ROUTE_RULES_FILE, entry, why)
            else:
                self.ignore(entry, why)
            return None
        if not kinds:
            self.ignore(
                entry,
                "rule of no kind: meta needs 'rule.isGlobal: true', 'topic.id', or both "
                "'consumerGroup.groupName' and 'consumerGroup.topicId'",
            )
            return None
        if len(kinds) > 1:
            names = " and ".join(k.name.lower().replace("_", "-") for k in kinds)
            self.problem(ROUTE_RULES_FILE, entry, f"rule of more than one kind ({names})")
            return None
        return kinds[0]


def load_config(
    path: str | os.PathLike[str], *, environ: Mapping[str, str] | None = None, resolve_env: bool = True
) -> KBearConfig:
    """Read and validate a kbear configuration directory.

    Args:
        path: the directory holding ``clusters.yaml``, ``route-rules.yaml`` and
            optionally ``topics.yaml`` and ``consumer-groups.yaml``.
        environ: where ``${NAME}`` references are read; ``os.environ`` by default.
        resolve_env: False keeps ``${NAME}`` (and ``$${``) in cluster meta values as
            written, unresolved: what ``kbear serve`` does, so that secrets are read
            from each client's environment, never from the server's (``environ``
            is then ignored).

    Returns:
        The validated :class:`KBearConfig`.

    Raises:
        ConfigError: with every problem found: a missing directory or required
            file, YAML syntax (with line and column), duplicate YAML keys, a
            wrong shape or type, duplicate ids, a rule of no kind or of several
            kinds, CRRL syntax (with column), a rule naming a cluster absent
            from ``clusters.yaml`` (an empty cluster list included), a negative
            or non-integer priority, an unset ``${NAME}``, a ``bootstrap.servers``
            missing or empty once ``${NAME}`` is read.
    """
    directory = Path(path)
    if not directory.is_dir():
        raise ConfigError([ConfigProblem(str(directory), None, _why_not_a_directory(directory))])
    with collector_paused():
        environ = None if not resolve_env else os.environ if environ is None else environ
        return _finish(_Loader(directory, environ), str(directory), None)


def _why_not_a_directory(path: Path) -> str:
    """What is at ``path`` instead of a configuration directory, in words a user can act on."""
    if path.is_symlink():
        target = os.readlink(path)
        return (
            f"a symbolic link to '{target}', which does not exist (a copy of a link? copy the "
            "files, e.g. cp -rL, or run kbear init DIR to write a new configuration directory)"
        )
    if path.exists():
        return "a file, not a directory (a configuration directory holds clusters.yaml, route-rules.yaml...)"
    return "no such directory (kbear init DIR writes a configuration directory to start from)"


def _finish(loader: _Loader, location: str, origin: str | None, digest: str | None = None) -> KBearConfig:
    clusters = loader.clusters()
    topics = loader.topics()
    groups = loader.consumer_groups()
    rules = loader.rules()
    if loader.problems:
        raise ConfigError(loader.problems, location)
    return KBearConfig(
        directory=loader.directory,
        clusters=clusters,
        topics=topics,
        consumer_groups=groups,
        rules=rules,
        digest=digest or loader.hash.hexdigest(),
        origin=origin,
        ignored_rules=tuple(loader.ignored),
    )


def load_documents(
    documents: Mapping[str, Any], *, origin: str = "memory", environ: Mapping[str, str] | None = None
) -> KBearConfig:
    """Validate the four documents of a configuration given already parsed.

    Args:
        documents: file name (``clusters.yaml``, ``topics.yaml``,
            ``consumer-groups.yaml``, ``route-rules.yaml``) -> the document as
            the file would hold it (``{"clusters": [...]}``); ``clusters.yaml``
            and ``route-rules.yaml`` are required.
        origin: where the documents come from, for messages (a URL, ``memory``).
        environ: where ``${NAME}`` is read; ``os.environ`` by default.

    Returns:
        The :class:`KBearConfig` (``directory`` None, ``origin`` set, ``digest``
        of :func:`documents_digest`).

    Raises:
        ConfigError: every problem, as :func:`load_config` reports them.
    """
    loader = _Loader(None, os.environ if environ is None else environ, documents)
    with collector_paused():
        return _finish(loader, origin, origin, documents_digest(documents))
