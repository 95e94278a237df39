"""kbear: talk to many Kafka clusters as if there were one, routed by CRRL rules.

Public names only; everything is defined in its own module.
"""

from kbear.config import ConfigError, ConfigProblem, KBearConfig, load_config
from kbear.consumer import RoutedConsumer
from kbear.crrl import CrrlSyntaxError
from kbear.producer import RoutedProducer
from kbear.router import Client, Explanation, NoRouteError, Route, Router, RuleVerdict
from kbear.settings import AckMode, SwitchMode, SwitchStart

__all__ = [
    "AckMode",
    "Client",
    "ConfigError",
    "ConfigProblem",
    "CrrlSyntaxError",
    "Explanation",
    "KBearConfig",
    "NoRouteError",
    "Route",
    "RoutedConsumer",
    "RoutedProducer",
    "Router",
    "RuleVerdict",
    "SwitchMode",
    "SwitchStart",
    "__version__",
    "load_config",
]

__version__ = "0.1.0"
