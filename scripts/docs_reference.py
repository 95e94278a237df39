"""The documentation's generated reference pages, written from the code.

Three pages of the site (``mkdocs.yml``, "Reference") are not written by hand:

- ``reference/settings.md``: every ``kbear.*`` key, from :class:`kbear.settings.KBearSettings`
  (key = the field's alias, default = the field's default, meaning = the field's entry
  in the class docstring's ``Attributes:`` section) and the client-balanced consumer's
  own keys;
- ``reference/cli.md``: every ``kbear`` subcommand and option, from
  :func:`kbear.cli.build_parser` (argparse);
- ``reference/metrics.md``: every Prometheus metric, from the collectors of
  :mod:`kbear.metrics` and of ``kbear serve`` (:mod:`kbear.server.metrics`);
- ``contributing/modules.md``: every module of ``kbear/`` with the first paragraph
  of its docstring (a module without a docstring fails).

``scripts/docs_pages.py`` (mkdocs-gen-files) writes them at build time, and
``tests/docs/test_docs_reference.py`` calls the same functions. A setting without its
docstring entry, an option without ``help`` or a metric without a description raises
:class:`UndocumentedError`, so ``mkdocs build`` and the test fail: nothing is added to
kbear without its line in the reference.
"""

from __future__ import annotations

import argparse
import re
import unicodedata
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

# The docs' own import of kbear: the generator runs inside ``mkdocs build``.
import kbear.settings as settings_module


class UndocumentedError(Exception):
    """Something of kbear's surface has no documentation to generate its page from."""


_CODE_SPAN = re.compile(r"(`[^`]*`)")


def _cell(text: str) -> str:
    """``text`` as one Markdown table cell: one line, ``|`` escaped outside code spans.

    Python-Markdown's tables keep a ``|`` inside backticks as it is, and would show the
    backslash of an escaped one (``DIR\\|URL``).
    """
    parts = _CODE_SPAN.split(" ".join(text.split()))
    return "".join(part if part.startswith("`") else part.replace("|", "\\|") for part in parts)


_ROLE = re.compile(r":(?:class|func|meth|data|mod|attr|exc|obj):`~?([^`]+)`")


ROOT = Path(__file__).resolve().parents[1]
#: a page of the site named by its path in a docstring: docs/concepts/failover.md,
#: in double backticks or not, with an optional #anchor
_PAGE_PATH = re.compile(r"(?P<q>``)?\bdocs/(?P<page>(?:[\w-]+/)*[\w-]+)\.md(?P<anchor>#[\w-]+)?(?(q)``)")
#: the generated pages (not under docs/ in the repository): path -> title
_GENERATED_TITLES = {
    "reference/settings": "Settings",
    "reference/cli": "The kbear command",
    "reference/metrics": "Metrics catalogue",
    "contributing/modules": "Module map",
}


def _slug(title: str) -> str:
    """The anchor Python-Markdown's toc extension gives a heading (its default slugify)."""
    text = re.sub(r"[^\w\s-]", "", unicodedata.normalize("NFKD", title)).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def page_links(text: str) -> str:
    """Paths of pages in a docstring (``docs/concepts/failover.md``) -> links to the page,
    by its title (``[Failover and mirrors][failover-and-mirrors]``): mkdocs-autorefs
    resolves the heading's anchor on whichever page the docstring is shown."""

    def link(match: re.Match[str]) -> str:
        page, anchor = match.group("page"), match.group("anchor")
        source = ROOT / "docs" / f"{page}.md"
        if page in _GENERATED_TITLES:
            title = _GENERATED_TITLES[page]
        elif source.is_file():
            title = source.read_text(encoding="utf-8").split("\n", 1)[0].lstrip("# ").strip()
        else:
            raise ValueError(f"a docstring names docs/{page}.md, which does not exist")
        target = anchor[1:] if anchor else _slug(title)
        return f"[{title.replace('`', '')}][{target}]"

    return _PAGE_PATH.sub(link, text)


def sphinx_roles_to_markdown(text: str) -> str:
    """``:class:`~kbear.Client``` -> ```Client``` (a code span of the name as Sphinx
    would show it: the last part after ``~``); double backticks become single ones;
    a page's path (``docs/guides/spark.md``) becomes a link to it."""
    text = page_links(text)

    def code(match: re.Match[str]) -> str:
        whole = match.group(0)
        name = match.group(1)
        if ":`~" in whole:
            name = name.rsplit(".", 1)[-1]
        return f"`{name}`"

    return re.sub(r"(?<!`)``(?!`)", "`", _ROLE.sub(code, text))


# --------------------------------------------------------------------------- settings


def _attribute_docs(cls: type) -> dict[str, str]:
    """field name -> description, from the ``Attributes:`` section of ``cls``'s
    Google-style docstring (griffe's parser, the one the API pages use)."""
    from griffe import Docstring, DocstringSectionKind

    sections = Docstring(cls.__doc__ or "", lineno=1).parse("google")
    out: dict[str, str] = {}
    for section in sections:
        if section.kind is DocstringSectionKind.attributes:
            for attribute in section.value:
                out[attribute.name] = attribute.description
    return out


def _default_text(default: Any) -> str:
    if default is None:
        return "none"
    if isinstance(default, bool):
        return f"`{str(default).lower()}`"
    return f"`{getattr(default, 'value', default)}`"


def settings_rows() -> list[tuple[str, str, str, str]]:
    """(key, default, readers, meaning) of every ``kbear.*`` key, in the model's order.

    Raises:
        UndocumentedError: a field of ``KBearSettings`` without an entry in the class
            docstring's ``Attributes:`` section (the entry is the key's documentation).
    """
    model = settings_module.KBearSettings
    docs = _attribute_docs(model)
    missing = [name for name in model.model_fields if name not in docs]
    if missing:
        raise UndocumentedError(
            f"kbear.settings.KBearSettings: field(s) {missing} have no entry in the class "
            "docstring's Attributes: section (write one: it is the setting's documentation)"
        )
    rows = []
    for name, field in model.model_fields.items():
        # the entry opens with the key itself: the table's first column says it
        meaning = re.sub(r"^`kbear\.[^`]+`\s*", "", sphinx_roles_to_markdown(docs[name]))
        if field.alias is None:  # the client: two keys
            rows.append(("kbear.client.id", "none", _readers("kbear.client.id"), meaning))
            rows.append(("kbear.client.meta.<k>", "none", _readers("kbear.client.meta.x"), meaning))
            continue
        key = str(field.alias)
        default = field.default
        if key == "kbear.switch.start":
            default_text = (
                f"{_default_text(default)} (Spark source: "
                f"{_default_text(settings_module.SPARK_SWITCH_START)})"
            )
        else:
            default_text = _default_text(default)
        rows.append((key, default_text, _readers(key), meaning))
    return rows


def _anchor(key: str) -> str:
    """The page anchor of a key: ``kbear.switch.mode`` -> ``kbear-switch-mode``."""
    return re.sub(r"[^a-z0-9]+", "-", key.lower()).strip("-")


def _readers(key: str) -> str:
    clients = key in settings_module.CLIENT_KEYS or key.startswith(settings_module.CLIENT_META_PREFIX)
    spark = key in settings_module.SPARK_SOURCE_KEYS or key.startswith(settings_module.CLIENT_META_PREFIX)
    return ", ".join(r for r, yes in (("clients", clients), ("Spark source", spark)) if yes)


def balanced_rows() -> list[tuple[str, str, str, str]]:
    """The keys only :class:`kbear.ClientBalancedConsumer` takes (kbear.balanced)."""
    from kbear.balanced import _consumer, _registry

    return [
        (
            _consumer.RECONCILE_KEY,
            f"`{_consumer.DEFAULT_RECONCILE_MS}`",
            "ClientBalancedConsumer",
            "(int, ms, >= 100) how often the partition layout is read again, the node's share "
            "reconciled and its ownership report sent.",
        ),
        (
            _consumer.REGISTRY_KEY,
            f"`{_registry.DEFAULT_REGISTRY_TOPIC}`",
            "ClientBalancedConsumer",
            "(str) the registry topic the ownership reports go to, on every cluster the node's "
            "topics route to; empty: no reports (`kbear assignments` then sees nothing).",
        ),
    ]


def settings_page() -> str:
    """The Markdown of ``reference/settings.md``."""
    lines = [
        "# Settings",
        "",
        "<!-- generated by scripts/docs_reference.py from kbear.settings: do not edit -->",
        "",
        "kbear's own configuration keys. They go into the same dictionary as "
        "confluent-kafka's properties and are taken out before that dictionary reaches "
        "confluent-kafka (`RoutedProducer`, `RoutedConsumer`, `RoutedAdminClient`, the "
        "asyncio clients), or are options of the Spark `kbear` source. A key a reader does "
        "not take is refused (`ValueError` naming it), so a key meant for the other reader "
        "is never silently ignored; a bad value is a `ValueError` naming the key.",
        "",
        "The keys, their defaults and their enums (`SwitchMode`, `SwitchStart`, `AckMode`) "
        "are one pydantic model, "
        "[`kbear.settings.KBearSettings`](api/config.md#kbear.settings.KBearSettings). "
        "This page is generated from it at build time.",
        "",
        "| key | default | read by |",
        "|---|---|---|",
    ]
    rows = settings_rows() + balanced_rows()
    for key, default, readers, _meaning in rows:
        lines.append(f"| [`{key}`](#{_anchor(key)}) | {default} | {readers} |")
    lines.append("")
    for key, default, readers, meaning in rows:
        lines += [
            f"## `{key}` {{#{_anchor(key)}}}",
            "",
            f"Default: {default}. Read by: {readers}.",
            "",
            " ".join(meaning.split()),
            "",
        ]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- CLI


def _subcommands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser, str]]:
    """(name, parser, one-line help) of each subcommand, in the parser's order."""
    for action in parser._actions:  # argparse has no public accessor for them
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, sub in action.choices.items():
                yield name, sub, helps.get(name, "")


def _option_rows(parser: argparse.ArgumentParser, where: str) -> Iterator[tuple[str, str, str]]:
    """(option, default, help) of each option of ``parser`` but ``--help``."""
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        flags = ", ".join(action.option_strings) or action.dest
        if action.metavar is not None:
            flags += f" {action.metavar}"
        elif action.option_strings and action.nargs != 0 and action.choices:
            flags += " {" + ",".join(map(str, action.choices)) + "}"
        elif action.option_strings and action.nargs != 0:
            flags += f" {action.dest.upper()}"
        if not action.help:
            raise UndocumentedError(f"kbear {where}: option {flags!r} has no help text")
        if action.required:
            default = "required"
        elif action.nargs == 0 or action.default in (None, {}, [], argparse.SUPPRESS):
            default = ""
        else:
            default = f"`{action.default}`"
        yield flags, default, action.help


def cli_page() -> str:
    """The Markdown of ``reference/cli.md``."""
    from kbear.cli import build_parser

    parser = build_parser()
    parser.prog = "kbear"
    lines = [
        "# The `kbear` command",
        "",
        "<!-- generated by scripts/docs_reference.py from kbear.cli.build_parser(): do not edit -->",
        "",
        f"{parser.description}",
        "",
        "```text",
        parser.format_usage().strip(),
        "```",
        "",
    ]
    if parser.epilog:
        lines += [f"{parser.epilog[:1].upper()}{parser.epilog[1:]}.", ""]
    subs = list(_subcommands(parser))
    lines += ["| command | what it does |", "|---|---|"]
    lines += [f"| [`{name}`](#kbear-{name}) | {_cell(help_)} |" for name, _sub, help_ in subs]
    lines.append("")
    for name, sub, help_ in subs:
        if not (help_ or sub.description):
            raise UndocumentedError(f"kbear {name}: the subcommand has neither help nor description")
        lines += [
            f"## kbear {name} {{#kbear-{name}}}",
            "",
            _cell(sub.description or help_),
            "",
            "```text",
            sub.format_usage().strip().removeprefix("usage: "),
            "```",
            "",
            "| option | default | meaning |",
            "|---|---|---|",
        ]
        for flags, default, text in _option_rows(sub, name):
            lines.append(f"| {_cell('`' + flags + '`')} | {default} | {_cell(text)} |")
        lines.append("")
    return "\n".join(lines)


# --------------------------------------------------------------------------- metrics


def _label_names(collector: Any) -> tuple[str, ...]:
    # prometheus_client keeps a metric's label names in ``_labelnames`` (metric objects
    # and metric families alike); there is no public accessor for an empty family.
    return tuple(getattr(collector, "_labelnames", ()) or ())


def _families(registry: Any) -> Iterable[tuple[str, str, str, tuple[str, ...]]]:
    """(name, type, help, labels) of every metric family ``registry`` collects."""
    seen: set[str] = set()
    for collector in list(registry._collector_to_names):  # every collector registered
        for family in collector.collect():
            if family.name in seen:
                continue
            seen.add(family.name)
            labels = _label_names(collector) or _label_names(family)
            if not labels:
                labels = tuple(dict.fromkeys(k for s in family.samples for k in s.labels if k not in ("le",)))
            yield family.name, family.type, family.documentation, labels


def metric_rows() -> dict[str, list[tuple[str, str, str, tuple[str, ...]]]]:
    """section -> (exposed name, type, help, labels) of every metric kbear exposes.

    Raises:
        UndocumentedError: a metric without a help text.
    """
    from prometheus_client import CollectorRegistry

    from kbear.metrics import KBearMetrics
    from kbear.server.metrics import ServerMetrics

    client_registry = CollectorRegistry()
    client = KBearMetrics(client_registry, 5000)
    try:
        client_rows = list(_families(client_registry))
    finally:
        client.close()
    server = ServerMetrics(["/"], lambda: False, lambda: 0.0)
    server_rows = list(_families(server.registry))
    out: dict[str, list[tuple[str, str, str, tuple[str, ...]]]] = {}
    for section, rows in (("clients", client_rows), ("server", server_rows)):
        exposed = []
        for name, type_, help_, labels in rows:
            if not help_.strip():
                raise UndocumentedError(f"metric {name!r} has no help text")
            shown = f"{name}_total" if type_ == "counter" else name
            exposed.append((shown, type_, help_, labels))
        out[section] = exposed
    return out


def metrics_page() -> str:
    """The Markdown of ``reference/metrics.md``."""
    rows = metric_rows()
    lines = [
        "# Metrics catalogue",
        "",
        "<!-- generated by scripts/docs_reference.py from kbear.metrics and kbear.server.metrics: "
        "do not edit -->",
        "",
        "Every Prometheus metric kbear exposes, generated from the collectors at build time. "
        "How to turn them on, what they cost and their limits: "
        "[Metrics, events and the dashboard](../guides/metrics.md).",
        "",
        "## Routed clients (`kbear.metrics`)",
        "",
        "Exposed once `kbear.metrics.instrument()` ran (or a client had "
        "`kbear.metrics.enable: true`). Labels: `client` is the confluent-kafka `client.id`, "
        "`topic` the logical name, `physical_topic` the name on the cluster.",
        "",
        "| metric | type | labels | meaning |",
        "|---|---|---|---|",
    ]
    for name, type_, help_, labels in rows["clients"]:
        lines.append(f"| `{name}` | {type_} | {', '.join(labels)} | {_cell(help_)} |")
    lines += [
        "",
        "## The meta-service (`kbear serve`)",
        "",
        "Served on `GET /metrics` of [`kbear serve`](../guides/serve.md).",
        "",
        "| metric | type | labels | meaning |",
        "|---|---|---|---|",
    ]
    for name, type_, help_, labels in rows["server"]:
        lines.append(f"| `{name}` | {type_} | {', '.join(labels)} | {_cell(help_)} |")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- module map


def module_rows() -> list[tuple[str, str]]:
    """(module path, first paragraph of its docstring) of every module of kbear/.

    Raises:
        UndocumentedError: a module without a docstring.
    """
    import ast
    from pathlib import Path

    package = Path(settings_module.__file__).resolve().parent
    rows = []
    for path in sorted(package.rglob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
        relative = path.relative_to(package.parent).as_posix()
        if not doc:
            raise UndocumentedError(f"{relative} has no module docstring (what it is responsible for)")
        rows.append((relative, sphinx_roles_to_markdown(doc.split("\n\n", 1)[0])))
    return rows


def modules_page() -> str:
    """The Markdown of ``contributing/modules.md``."""
    lines = [
        "# Module map",
        "",
        "<!-- generated by scripts/docs_reference.py from the modules' docstrings: do not edit -->",
        "",
        "Every module of `kbear/` and what it is responsible for: the first paragraph of its "
        "docstring, read when the site is built. How the parts fit together: "
        "[Architecture](architecture.md); which may import which: "
        "[Import layers](layers.md).",
        "",
        "| module | responsible for |",
        "|---|---|",
    ]
    lines += [f"| `{path}` | {_cell(text)} |" for path, text in module_rows()]
    return "\n".join(lines) + "\n"


#: page path under docs/ -> the function writing it
PAGES = {
    "reference/settings.md": settings_page,
    "reference/cli.md": cli_page,
    "reference/metrics.md": metrics_page,
    "contributing/modules.md": modules_page,
}
