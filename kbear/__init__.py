"""kbear: talk to many Kafka clusters as if there were one, routed by CRRL rules.

Public names only; everything is defined in its own module. The asyncio clients
(:mod:`kbear.aio`) are imported at their first use (``kbear.RoutedAIOProducer``...),
not by ``import kbear``.
"""

from typing import TYPE_CHECKING, Any

from kbear import schema_registry
from kbear._cluster_id import WrongClusterError
from kbear._compiled import dispatcher
from kbear._identity import Client
from kbear._modes import AckMode, SwitchMode, SwitchStart
from kbear._route import Explanation, MetaServiceUnavailable, NoRouteError, Route, RuleVerdict
from kbear.admin import RoutedAdminClient
from kbear.balanced import ClientBalancedConsumer
from kbear.config import ConfigError, ConfigProblem, KBearConfig, load_config
from kbear.consumer import RoutedConsumer, RoutedDeserializingConsumer
from kbear.crrl import CrrlSyntaxError
from kbear.producer import RoutedProducer, RoutedSerializingProducer
from kbear.router import Router
from kbear.share import RoutedDeserializingShareConsumer, RoutedShareConsumer
from kbear.sources import ConfigSource, DirectorySource, MemorySource, open_source

if TYPE_CHECKING:
    from kbear.aio import (
        RoutedAIOConsumer,
        RoutedAIOProducer,
        RoutedAsyncDeserializingConsumer,
        RoutedAsyncSerializingProducer,
    )

#: Names re-exported from kbear.aio at their first use (PEP 562).
_AIO = frozenset(
    (
        "RoutedAIOConsumer",
        "RoutedAIOProducer",
        "RoutedAsyncDeserializingConsumer",
        "RoutedAsyncSerializingProducer",
    )
)


def __getattr__(name: str) -> Any:
    if name in _AIO:
        import kbear.aio

        value = getattr(kbear.aio, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'kbear' has no attribute {name!r}")


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

__version__ = "0.1.0"
