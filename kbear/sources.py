"""Configuration sources: where a router's configuration comes from.

A source hands the same four documents (clusters, topics, consumer groups,
route rules: ``docs/reference/crrl-spec.md``, "The configuration files") to the same
validation, whatever it reads them from:

- :class:`DirectorySource`: a configuration directory (the four YAML files);
- :class:`MemorySource`: documents given in memory (tests, generated setups);
- :class:`kbear.meta.MetaServiceSource`: a meta-service (``meta-service.md``)
  that evaluates the chain for this client and answers with routes (the
  ``meta`` extra: ``pip install kbear[meta]``).

:func:`open_source` picks one from a string: an ``http://`` or ``https://`` URL
is a meta-service, anything else a directory. A :class:`~kbear.Router` keeps its
source: :meth:`Router.reload` and the watcher (:meth:`Router.watch`) ask it for
its current state, and a change is applied (listeners notified, clients switch)
exactly as a change of files is.

Writing a source: subclass :class:`ConfigSource` and implement
:attr:`~ConfigSource.location`, :meth:`~ConfigSource.digest` and
:meth:`~ConfigSource.load`. A source that learns from lookups sets
:attr:`~ConfigSource.on_demand` and implements :meth:`~ConfigSource.prepare` and
:meth:`~ConfigSource.answers`; it tells the router that its state changed with
:meth:`~ConfigSource.notify_changed`, and the router reloads.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import urlsplit

from kbear._source import ConfigSource
from kbear.config import (
    ConfigError,
    ConfigProblem,
    KBearConfig,
    config_digest,
    documents_digest,
    load_config,
    load_documents,
)

if TYPE_CHECKING:
    from kbear._identity import Client

__all__ = [
    "SUPPORTED_LOCATIONS",
    "ConfigSource",
    "DirectorySource",
    "MemorySource",
    "check_location",
    "is_url",
    "open_source",
]

#: What a configuration location may be, as messages name it.
SUPPORTED_LOCATIONS = "a directory, an http:// or an https:// URL (a meta-service)"
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


class DirectorySource(ConfigSource):
    """A configuration directory: ``clusters.yaml``, ``route-rules.yaml`` and
    optionally ``topics.yaml`` and ``consumer-groups.yaml``.

    Args:
        path: the directory.
        environ: where ``${NAME}`` is read; ``os.environ`` (at each load) when None.
        resolve_env: False keeps ``${NAME}`` (and ``$${``) in cluster meta as written
            (``kbear serve``: secrets are resolved by each client, never by the server).

    Its digest is the SHA-256 of the files' names and bytes
    (:func:`kbear.config.config_digest`); a new digest is loaded only once the
    files held still (``settle``), as the watcher always did.
    """

    settle: ClassVar[bool] = True

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        environ: Mapping[str, str] | None = None,
        resolve_env: bool = True,
    ) -> None:
        self.directory = Path(path)
        self._environ = environ
        self._resolve_env = resolve_env

    @property
    def location(self) -> str:
        return str(self.directory)

    def digest(self) -> str:
        return config_digest(self.directory)

    def load(self) -> KBearConfig:
        """:func:`kbear.load_config` of the directory."""
        return load_config(self.directory, environ=self._environ, resolve_env=self._resolve_env)


class MemorySource(ConfigSource):
    """A configuration given as documents in memory, validated like files.

    Args:
        documents: file name -> document as the file would hold it, e.g.
            ``{"clusters.yaml": {"clusters": [...]}, "route-rules.yaml":
            {"route-rules": [...]}}``; ``topics.yaml`` and
            ``consumer-groups.yaml`` are optional.
        environ: where ``${NAME}`` is read; ``os.environ`` when None.
        name: the location shown in messages (default ``memory``).

    :meth:`replace` puts other documents in place; a watching router then applies
    them as it would a change of files.
    """

    def __init__(
        self,
        documents: Mapping[str, Any],
        *,
        environ: Mapping[str, str] | None = None,
        name: str = "memory",
    ) -> None:
        self._documents = dict(documents)
        self._environ = environ
        self._name = name

    @property
    def location(self) -> str:
        return self._name

    def replace(self, documents: Mapping[str, Any]) -> None:
        """Use ``documents`` from now on (not validated until the next load)."""
        self._documents = dict(documents)

    def digest(self) -> str:
        return documents_digest(self._documents)

    def load(self) -> KBearConfig:
        return load_documents(self._documents, origin=self._name, environ=self._environ)


def is_url(location: str | os.PathLike[str]) -> bool:
    """Whether ``location`` is an ``http://`` or ``https://`` URL (a meta-service)."""
    return isinstance(location, str) and location.lower().startswith(("http://", "https://"))


def check_location(location: str | os.PathLike[str]) -> None:
    """Refuse a URL of a scheme kbear cannot read (``ftp://x``), naming the scheme and
    the locations supported (:data:`SUPPORTED_LOCATIONS`).

    Raises:
        ConfigError: ``location`` starts with ``<scheme>://`` and the scheme is not
            ``http`` or ``https``, an ``http(s)://`` URL without a host or with a
            port that is not a number, or a NUL character (no path holds one).
    """
    text = str(location)
    problem = None
    match = _SCHEME.match(location) if isinstance(location, str) else None
    if "\x00" in text:
        text, problem = repr(text), "contains a NUL character"
    elif is_url(location):
        try:
            parts = urlsplit(text)
            parts.port  # noqa: B018 (raises ValueError for a port that is not a number)
            problem = None if parts.hostname else "not a valid URL: no host"
        except ValueError as exc:
            problem = f"not a valid URL: {exc}"
    elif match is not None:
        problem = f"unsupported scheme '{match.group(1)}://'; supported: {SUPPORTED_LOCATIONS}"
    if problem is not None:
        raise ConfigError([ConfigProblem(text, None, problem)])


def open_source(
    location: str | os.PathLike[str] | ConfigSource, *, client: Client | None = None, **options: Any
) -> ConfigSource:
    """The source of ``location``: a meta-service for an ``http(s)://`` URL, else a directory.

    Args:
        location: a directory, a URL, or a source (returned as is).
        client: who asks the meta-service (its ``Client`` message); ignored for
            a directory.
        options: keyword arguments of :class:`kbear.meta.MetaServiceSource`
            (``cache_file``, ``timeout_s``, ``transport``, ...); refused for a
            directory.

    Raises:
        ConfigError: a URL of another scheme (``ftp://``), see :func:`check_location`.
        ImportError: a URL, and the ``meta`` extra (httpx) is not installed.
        TypeError: ``options`` given for a directory.
    """
    if isinstance(location, ConfigSource):
        return location
    check_location(location)
    if is_url(location):
        try:
            from kbear.meta import MetaServiceSource
        except ImportError as exc:  # pragma: no cover - depends on the installed extras
            raise ImportError(
                f"kbear: a meta-service URL needs httpx: pip install 'kbear[meta]' ({exc})"
            ) from exc
        return MetaServiceSource(str(location), client, **options)
    if options:
        raise TypeError(f"options {sorted(options)} only apply to a meta-service URL, not to a directory")
    return DirectorySource(location)
