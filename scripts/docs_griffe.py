"""A griffe extension for the API pages (mkdocs.yml, mkdocstrings): kbear's docstrings
are Google style with reStructuredText inline markup (Sphinx roles, double
backticks, ``::`` literal blocks, simple tables); this turns that markup into the
Markdown mkdocstrings renders, without touching the docstrings in the code.

- ``:class:`~kbear.Client``` -> ```Client``` (``~``: the last part, as Sphinx shows it);
- a line ending in ``::`` ends in ``:`` (the indented block after it is a code block
  in Markdown too);
- a simple table (``====  ====`` borders) becomes a fenced ``text`` block, so its
  columns stay aligned.

:class:`Delegates` makes the methods a facade builds with
:func:`kbear._delegate.delegate` (``poll = delegate("_loop", PollLoop.poll)``) read as
the facade's own: each becomes an alias of the part's method, whose signature and
docstring it has at run time too; and the coroutine methods an asyncio client builds
with :func:`kbear.aio._notify.awaits` (``seek = awaits("AIOConsumer.seek")``) read as
its own ``async`` methods, with the docstring they have at run time.
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from pathlib import Path
from typing import Any

from griffe import (
    Alias,
    Attribute,
    Class,
    Docstring,
    ExprAttribute,
    ExprCall,
    Extension,
    Function,
    Module,
    Parameter,
    ParameterKind,
    Parameters,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))

from docs_reference import sphinx_roles_to_markdown

_BORDER = re.compile(r"^\s*=+( +=+)+\s*$")


def _tables_to_blocks(text: str) -> str:
    lines = text.splitlines()
    out: list[str] = []
    inside = False
    for i, line in enumerate(lines):
        border = bool(_BORDER.match(line))
        if border and not inside:
            indent = line[: len(line) - len(line.lstrip())]
            out.append(f"{indent}```text")
            inside = True
            out.append(line)
            continue
        out.append(line)
        if border and inside and (i + 1 == len(lines) or not lines[i + 1].strip()):
            out.append(f"{indent}```")
            inside = False
    if inside:
        out.append("```")
    return "\n".join(out)


def rst_to_markdown(text: str) -> str:
    """The Markdown of a docstring written with reStructuredText inline markup."""
    text = _tables_to_blocks(text)
    text = re.sub(r"(?m)(\S)::$", r"\1:", text)
    return sphinx_roles_to_markdown(text)


class SphinxMarkup(Extension):
    """Rewrites every docstring griffe loads (see the module docstring)."""

    def on_instance(self, **kwargs: Any) -> None:
        obj = kwargs["obj"]
        if obj.docstring is not None:
            obj.docstring.value = rst_to_markdown(obj.docstring.value)


class Delegates(Extension):
    """Class attributes ``name = delegate("_part", Part.method)`` become aliases of
    ``Part.method``, and ``name = awaits(...)`` ``async`` methods (see the module docstring)."""

    def on_package(self, **kwargs: Any) -> None:
        self._walk(kwargs["pkg"])

    def _walk(self, obj: Module | Class) -> None:
        for member in list(obj.members.values()):
            if isinstance(member, Alias):
                continue
            if isinstance(member, (Module, Class)):
                self._walk(member)
            elif isinstance(member, Attribute) and isinstance(obj, Class):
                target = _delegated(member)
                if target is not None:
                    obj.set_member(member.name, Alias(member.name, target, parent=obj))
                elif isinstance(member.value, ExprCall) and str(member.value.function) == "awaits":
                    obj.set_member(member.name, _awaiting(obj, member))


def _awaiting(cls: Class, attribute: Attribute) -> Function:
    """The ``async`` method ``name = awaits(...)`` makes, with its signature and docstring
    at run time (``(self, *args: Any, **kwargs: Any) -> Any``, or the blocking method's
    when ``awaits`` was given it)."""
    runtime = getattr(getattr(importlib.import_module(cls.module.path), cls.name), attribute.name)
    signature = inspect.signature(runtime)  # (follows __wrapped__)

    def text(annotation: Any) -> str | None:
        return None if annotation is inspect.Signature.empty else str(annotation)

    parameters = [
        Parameter(
            p.name,
            annotation=None if p.name == "self" else text(p.annotation),
            kind=ParameterKind(p.kind.description),
            default=None if p.default is inspect.Parameter.empty else repr(p.default),
        )
        for p in signature.parameters.values()
    ]
    function = Function(
        attribute.name,
        lineno=attribute.lineno,
        endlineno=attribute.endlineno,
        parameters=Parameters(*parameters),
        returns=text(signature.return_annotation),
    )
    function.labels.add("async")
    function.docstring = Docstring(rst_to_markdown(runtime.__doc__), parent=function)
    return function


def _delegated(attribute: Attribute) -> str | None:
    """The path of the method an attribute ``delegate("_part", Part.method)`` hands to."""
    value = attribute.value
    if not isinstance(value, ExprCall) or str(value.function) != "delegate" or len(value.arguments) != 2:
        return None
    method = value.arguments[1]
    return method.canonical_path if isinstance(method, ExprAttribute) else None
