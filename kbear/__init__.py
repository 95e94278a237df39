"""kbear: talk to many Kafka clusters as if there were one, routed by CRRL rules.

Public names only; everything is defined in its own module.
"""

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
    "RoutedAdminClient",
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
