"""kbear: talk to many Kafka clusters as if there were one, routed by CRRL rules.

Public names only; everything is defined in its own module. The names are imported
on first use (PEP 562's module ``__getattr__``): ``import kbear`` alone imports no
client, configuration or Kafka library, and ``from kbear import RoutedProducer``
imports what the producer needs and no more.

To export a new name: add it to its module's entry of ``_MODULES`` (what resolves at
run time, and ``__all__``) and the same import, written ``Name as Name`` (an explicit
re-export), under ``if TYPE_CHECKING:`` (what mypy and editors read);
tests/test_lazy_import.py checks that the two agree.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kbear import schema_registry as schema_registry
    from kbear._cluster_id import WrongClusterError as WrongClusterError
    from kbear._compiled import dispatcher as dispatcher
    from kbear._identity import Client as Client
    from kbear._modes import AckMode as AckMode
    from kbear._modes import SwitchMode as SwitchMode
    from kbear._modes import SwitchStart as SwitchStart
    from kbear._route import Explanation as Explanation
    from kbear._route import MetaServiceUnavailable as MetaServiceUnavailable
    from kbear._route import NoRouteError as NoRouteError
    from kbear._route import Route as Route
    from kbear._route import RuleVerdict as RuleVerdict
    from kbear.admin import RoutedAdminClient as RoutedAdminClient
    from kbear.aio import RoutedAIOConsumer as RoutedAIOConsumer
    from kbear.aio import RoutedAIOProducer as RoutedAIOProducer
    from kbear.aio import RoutedAsyncDeserializingConsumer as RoutedAsyncDeserializingConsumer
    from kbear.aio import RoutedAsyncSerializingProducer as RoutedAsyncSerializingProducer
    from kbear.balanced import ClientBalancedConsumer as ClientBalancedConsumer
    from kbear.config import ConfigError as ConfigError
    from kbear.config import ConfigProblem as ConfigProblem
    from kbear.config import KBearConfig as KBearConfig
    from kbear.config import load_config as load_config
    from kbear.consumer import RoutedConsumer as RoutedConsumer
    from kbear.consumer import RoutedDeserializingConsumer as RoutedDeserializingConsumer
    from kbear.crrl import CrrlSyntaxError as CrrlSyntaxError
    from kbear.producer import RoutedProducer as RoutedProducer
    from kbear.producer import RoutedSerializingProducer as RoutedSerializingProducer
    from kbear.router import Router as Router
    from kbear.share import RoutedDeserializingShareConsumer as RoutedDeserializingShareConsumer
    from kbear.share import RoutedShareConsumer as RoutedShareConsumer
    from kbear.sources import ConfigSource as ConfigSource
    from kbear.sources import DirectorySource as DirectorySource
    from kbear.sources import MemorySource as MemorySource
    from kbear.sources import open_source as open_source

__version__ = "0.1.0"

#: module -> the public names it defines (the name of a module itself: that module)
_MODULES: dict[str, tuple[str, ...]] = {
    "kbear._modes": ("AckMode", "SwitchMode", "SwitchStart"),
    "kbear._identity": ("Client",),
    "kbear.balanced": ("ClientBalancedConsumer",),
    "kbear.config": ("ConfigError", "ConfigProblem", "KBearConfig", "load_config"),
    "kbear.sources": ("ConfigSource", "DirectorySource", "MemorySource", "open_source"),
    "kbear.crrl": ("CrrlSyntaxError",),
    "kbear._route": ("Explanation", "MetaServiceUnavailable", "NoRouteError", "Route", "RuleVerdict"),
    "kbear.aio": (
        "RoutedAIOConsumer",
        "RoutedAIOProducer",
        "RoutedAsyncDeserializingConsumer",
        "RoutedAsyncSerializingProducer",
    ),
    "kbear.admin": ("RoutedAdminClient",),
    "kbear.consumer": ("RoutedConsumer", "RoutedDeserializingConsumer"),
    "kbear.share": ("RoutedDeserializingShareConsumer", "RoutedShareConsumer"),
    "kbear.producer": ("RoutedProducer", "RoutedSerializingProducer"),
    "kbear.router": ("Router",),
    "kbear._cluster_id": ("WrongClusterError",),
    "kbear._compiled": ("dispatcher",),
    "kbear.schema_registry": ("schema_registry",),
}
#: public name -> its module
_EXPORTS = {name: module for module, names in _MODULES.items() for name in names}

if not TYPE_CHECKING:  # mypy reads the explicit re-exports above; ``import *`` reads this
    __all__ = [*_EXPORTS, "__version__"]


def __getattr__(name: str) -> Any:
    """A public name, imported from its module at first use (then kept here)."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kbear' has no attribute {name!r}")
    imported = importlib.import_module(module)
    value = imported if module == f"kbear.{name}" else getattr(imported, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
