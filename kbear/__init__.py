"""kbear: talk to many Kafka clusters as if there were one, routed by CRRL rules.

Public names only; everything is defined in its own module. The names are imported
on first use (PEP 562's module ``__getattr__``): ``import kbear`` alone imports no
client, configuration or Kafka library, and ``from kbear import RoutedProducer``
imports what the producer needs and no more.

To export a new name: add ``"Name": "kbear.module"`` to ``_EXPORTS`` and the same
import under ``if TYPE_CHECKING:`` (what mypy and editors read), and the name to
``__all__`` (tests/test_lazy_import.py checks the three agree).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kbear import schema_registry
    from kbear._cluster_id import WrongClusterError
    from kbear._compiled import dispatcher
    from kbear._identity import Client
    from kbear._modes import AckMode, SwitchMode, SwitchStart
    from kbear._route import Explanation, MetaServiceUnavailable, NoRouteError, Route, RuleVerdict
    from kbear.admin import RoutedAdminClient
    from kbear.aio import (
        RoutedAIOConsumer,
        RoutedAIOProducer,
        RoutedAsyncDeserializingConsumer,
        RoutedAsyncSerializingProducer,
    )
    from kbear.balanced import ClientBalancedConsumer
    from kbear.config import ConfigError, ConfigProblem, KBearConfig, load_config
    from kbear.consumer import RoutedConsumer, RoutedDeserializingConsumer
    from kbear.crrl import CrrlSyntaxError
    from kbear.producer import RoutedProducer, RoutedSerializingProducer
    from kbear.router import Router
    from kbear.share import RoutedDeserializingShareConsumer, RoutedShareConsumer
    from kbear.sources import ConfigSource, DirectorySource, MemorySource, open_source

__version__ = "0.1.0"

#: public name -> the module defining it (a module itself when the name is the module's)
_EXPORTS: dict[str, str] = {
    "AckMode": "kbear._modes",
    "Client": "kbear._identity",
    "ClientBalancedConsumer": "kbear.balanced",
    "ConfigError": "kbear.config",
    "ConfigProblem": "kbear.config",
    "ConfigSource": "kbear.sources",
    "CrrlSyntaxError": "kbear.crrl",
    "DirectorySource": "kbear.sources",
    "Explanation": "kbear._route",
    "KBearConfig": "kbear.config",
    "MemorySource": "kbear.sources",
    "MetaServiceUnavailable": "kbear._route",
    "NoRouteError": "kbear._route",
    "Route": "kbear._route",
    "RoutedAIOConsumer": "kbear.aio",
    "RoutedAIOProducer": "kbear.aio",
    "RoutedAdminClient": "kbear.admin",
    "RoutedAsyncDeserializingConsumer": "kbear.aio",
    "RoutedAsyncSerializingProducer": "kbear.aio",
    "RoutedConsumer": "kbear.consumer",
    "RoutedDeserializingConsumer": "kbear.consumer",
    "RoutedDeserializingShareConsumer": "kbear.share",
    "RoutedProducer": "kbear.producer",
    "RoutedSerializingProducer": "kbear.producer",
    "RoutedShareConsumer": "kbear.share",
    "Router": "kbear.router",
    "RuleVerdict": "kbear._route",
    "SwitchMode": "kbear._modes",
    "SwitchStart": "kbear._modes",
    "WrongClusterError": "kbear._cluster_id",
    "dispatcher": "kbear._compiled",
    "load_config": "kbear.config",
    "open_source": "kbear.sources",
    "schema_registry": "kbear.schema_registry",
}

__all__ = [
    "AckMode",
    "Client",
    "ClientBalancedConsumer",
    "ConfigError",
    "ConfigProblem",
    "ConfigSource",
    "CrrlSyntaxError",
    "DirectorySource",
    "Explanation",
    "KBearConfig",
    "MemorySource",
    "MetaServiceUnavailable",
    "NoRouteError",
    "Route",
    "RoutedAIOConsumer",
    "RoutedAIOProducer",
    "RoutedAdminClient",
    "RoutedAsyncDeserializingConsumer",
    "RoutedAsyncSerializingProducer",
    "RoutedConsumer",
    "RoutedDeserializingConsumer",
    "RoutedDeserializingShareConsumer",
    "RoutedProducer",
    "RoutedSerializingProducer",
    "RoutedShareConsumer",
    "Router",
    "RuleVerdict",
    "SwitchMode",
    "SwitchStart",
    "WrongClusterError",
    "__version__",
    "dispatcher",
    "load_config",
    "open_source",
    "schema_registry",
]


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
    return sorted({*globals(), *__all__})
