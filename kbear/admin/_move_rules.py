"""The rule change of a topic move (private to ``kbear move``): route-rules.yaml's
new text, its diff, and the configuration it makes. No I/O but reading the
configuration directory's files and a temporary copy to validate the new text.

The move of topic ``T`` to cluster ``C`` is one topic rule, ``move-T``::

    - id: move-T
      priority: <1 + the highest priority of every rule taking part in T's lookups>
      meta:
        topic.id: T
      rule: use cluster C[, topic P]

unconditional and ahead of every rule of T's producer and consumer chains (a
consumer-group rule of equal priority would come first, hence the +1), so every
client and every group of ``T`` follows; ``, topic P`` keeps the physical name of
a remapped topic. A second move of ``T`` changes that rule's ``rule:`` line (and its
priority if another rule has overtaken it). The text is edited in place (comments
and layout of the rest of the file kept): the new rule is appended at the end; a
file whose layout the edit cannot follow (flow style, no block list) is written
back whole by PyYAML instead (comments lost), which the plan says.
"""

from __future__ import annotations

import difflib
import json
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kbear.config import KBearConfig, RuleKind, load_config

RULES_FILE = "route-rules.yaml"


@dataclass(frozen=True)
class RuleChange:
    """route-rules.yaml before and after a move.

    Attributes:
        rule_id: the id of the rule added or changed.
        added: True when the rule is new, False when an earlier move's rule changed.
        statement: its CRRL statement (``use cluster C[, topic P]``).
        priority: its priority.
        old_text, new_text: the file's text before and after.
        diff: a unified diff of the two (``route-rules.yaml`` before/after).
        rewritten: True when the file had to be written back whole by PyYAML
            (comments and layout lost).
        config: the configuration the new text makes (validated).
    """

    rule_id: str
    added: bool
    statement: str
    priority: int
    old_text: str
    new_text: str
    diff: str
    rewritten: bool
    config: KBearConfig


def _crrl_name(name: str) -> str:
    """A topic or cluster name as a CRRL token (quoted when not a plain word)."""
    if re.fullmatch(r"[A-Za-z0-9._\-]+", name) and name not in ("use", "cluster", "topic", "when", "and"):
        return name
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _priority_needed(config: KBearConfig, topic: str, own_id: str) -> int:
    """1 + the highest priority of the rules that take part in lookups of ``topic``
    (global, topic rules of it, consumer-group rules of any group on it), the move
    rule itself left out."""
    highest = 0
    for rule in config.rules:
        if rule.id == own_id:
            continue
        if (
            rule.kind is RuleKind.GLOBAL
            or (rule.kind is RuleKind.TOPIC and rule.meta.get("topic.id") == topic)
            or (rule.kind is RuleKind.CONSUMER_GROUP and rule.meta.get("consumerGroup.topicId") == topic)
        ):
            highest = max(highest, rule.priority)
    return highest + 1


def _q(value: str) -> str:
    return json.dumps(value)  # a JSON string is a YAML double-quoted scalar


def _append(text: str, block: list[str]) -> str | None:
    """``text`` with a rule entry appended to its block list, or None when the
    layout is not one this edit follows."""
    items = re.findall(r"^( *)- ", text, flags=re.MULTILINE)
    if not re.search(r"^route-rules:\s*$", text, flags=re.MULTILINE):
        return None
    indent = items[0] if items else "  "
    lines = [f"{indent}- {block[0]}", *(f"{indent}  {line}" for line in block[1:])]
    return text.rstrip("\n") + "\n" + "\n".join(lines) + "\n"


def _edit(text: str, rule_id: str, statement: str, priority: int) -> str | None:
    """``text`` with the entry ``rule_id`` (written by an earlier move) given a new
    statement and priority, or None when the entry is not found as written."""
    pattern = re.compile(
        rf"^(?P<indent> *)- id: {re.escape(_q(rule_id))}\n(?P<body>(?:(?P=indent)  .*\n?)*)", re.MULTILINE
    )
    found = pattern.search(text)
    if found is None:
        return None
    values = {"rule": _q(statement), "priority": str(priority)}
    line = re.compile(r"^( *)(rule|priority): .*$", flags=re.M)
    body, n = line.subn(lambda m: f"{m.group(1)}{m.group(2)}: {values[m.group(2)]}", found.group("body"))
    if n != 2:  # one line each
        return None
    return text[: found.start("body")] + body + text[found.end("body") :]


def _rewrite(document: Any, rule_id: str, entry: dict[str, Any]) -> str:
    rules = [r for r in (document or {}).get("route-rules") or [] if r.get("id") != rule_id]
    return yaml.safe_dump({"route-rules": [*rules, entry]}, sort_keys=False)


def _entries(text: str) -> list[Any]:
    document = yaml.safe_load(text) or {}
    return list(document.get("route-rules") or [])


def plan_rule_change(config: KBearConfig, topic: str, cluster: str, physical: str | None) -> RuleChange:
    """The rule change that moves ``topic`` to ``cluster``.

    Args:
        config: the configuration in force (read from a directory).
        topic: the topic (logical name).
        cluster: the target cluster id (must be in clusters.yaml).
        physical: the physical name on the target for a remapped topic, or None.

    Raises:
        ValueError: the configuration was not read from a directory, or ``cluster``
            is unknown.
        ConfigError: the new route-rules.yaml does not validate (names the problem).
    """
    if config.directory is None:
        raise ValueError("kbear move needs a configuration directory (route-rules.yaml is rewritten)")
    if cluster not in config.clusters:
        raise ValueError(f"unknown cluster {cluster!r} (clusters.yaml has: {', '.join(config.clusters)})")
    directory = Path(config.directory)
    old_text = (directory / RULES_FILE).read_text(encoding="utf-8")
    rule_id = f"move-{topic}"  # the rule kbear move writes for the topic
    statement = f"use cluster {_crrl_name(cluster)}"
    if physical is not None and physical != topic:
        statement += f", topic {_crrl_name(physical)}"
    priority = _priority_needed(config, topic, rule_id)
    added = all(rule.id != rule_id for rule in config.rules)
    entry = {"id": rule_id, "priority": priority, "meta": {"topic.id": topic}, "rule": statement}
    if added:
        block = [f"id: {_q(rule_id)}", f"priority: {priority}", "meta:", f"  topic.id: {_q(topic)}"]
        new_text = _append(old_text, [*block, f"rule: {_q(statement)}"])
    else:
        new_text = _edit(old_text, rule_id, statement, priority)
    expected = [r for r in _entries(old_text) if r.get("id") != rule_id] + [entry]
    rewritten = False
    if new_text is None or sorted(map(repr, _entries(new_text))) != sorted(map(repr, expected)):
        new_text = _rewrite(yaml.safe_load(old_text), rule_id, entry)
        rewritten = True
    diff = text_diff(old_text, new_text, f"{RULES_FILE} (now)", f"{RULES_FILE} (after the move)")
    config = load_changed(directory, RULES_FILE, new_text)
    return RuleChange(rule_id, added, statement, priority, old_text, new_text, diff, rewritten, config)


def text_diff(old: str, new: str, before: str, after: str) -> str:
    """The unified diff of ``old`` to ``new``, its two sides labelled ``before`` and ``after``."""
    return "".join(
        difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True), before, after)
    )


def load_changed(
    directory: Path,
    name: str,
    new_text: str,
    load: Callable[[Path], KBearConfig] = load_config,
    prefix: str = "kbear-move-",
) -> KBearConfig:
    """The configuration of ``directory`` with its file ``name`` replaced by ``new_text``,
    loaded (``load``) from a temporary copy (the directory itself is not touched).

    Raises:
        ConfigError: the changed configuration does not load.
    """
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        copy = Path(tmp) / "config"
        shutil.copytree(directory, copy)
        (copy / name).write_text(new_text, encoding="utf-8")
        return load(copy)
