"""The configuration: the four YAML files of a kbear configuration directory, validated.

A configuration directory holds (``docs/reference/crrl-spec.md``, "The configuration files"):

``clusters.yaml`` (required)::

    clusters:
      - id: prod
        meta:
          bootstrap.servers: kafka-prod-1:9092,kafka-prod-2:9092
          security.protocol: SASL_SSL
          sasl.mechanism: PLAIN
          sasl.username: app
          sasl.password: ${PROD_KAFKA_PASSWORD}

``topics.yaml`` (optional)::

    topics:
      - id: orders
        meta:
          bu: hotel

``consumer-groups.yaml`` (optional)::

    consumer-groups:
      - id:
          groupName: billing
          topicId: orders
        meta:
          jobType: batch

``route-rules.yaml`` (required)::

    route-rules:
      - id: r1
        priority: 0
        meta:
          rule.isGlobal: true
        rule: use cluster prod

Each file has one top-level key holding a list. Meta keys are flat dotted
strings; scalar meta values become strings (YAML ``true`` becomes ``"true"``,
``3`` becomes ``"3"``; a number or a date keeps the text written, so ``1.10``
becomes ``"1.10"``, not ``"1.1"``). In ``clusters.yaml``, ``bootstrap.servers`` is required
and every other meta key is a librdkafka client property applied to every
client of that cluster; ``${NAME}`` in a cluster meta value is replaced by the
environment variable ``NAME`` (``$${`` writes a literal ``${``).

:func:`load_config` validates everything and raises one :class:`ConfigError`
listing every problem, each naming the file, the entry and the reason.

The package's modules (private; their public names are re-exported here):
``_errors`` (:class:`ConfigError`, :class:`ConfigProblem`), ``_models`` (the
validated models, :class:`KBearConfig`), ``_documents`` (reading the files:
YAML and JSON readers, their errors, the lists of entries, the content digests), ``_fastyaml`` (the optional
rapidyaml reader), ``_failover`` (a cluster's standby and mirror keys),
``_librdkafka`` (librdkafka's verdict on cluster
properties), ``_loading`` (:func:`load_config`, :func:`load_documents`).
Nothing here imports anything of kbear above the configuration (the layers
are written down in ``pyproject.toml``, ``[tool.importlinter]``).
"""

from kbear.config._documents import CLUSTERS_FILE as CLUSTERS_FILE
from kbear.config._documents import CONFIG_FILES as CONFIG_FILES
from kbear.config._documents import CONSUMER_GROUPS_FILE as CONSUMER_GROUPS_FILE
from kbear.config._documents import ROUTE_RULES_FILE as ROUTE_RULES_FILE
from kbear.config._documents import TOPICS_FILE as TOPICS_FILE
from kbear.config._documents import config_digest as config_digest
from kbear.config._documents import documents_digest as documents_digest
from kbear.config._documents import replace_file as replace_file
from kbear.config._errors import ConfigError as ConfigError
from kbear.config._errors import ConfigProblem as ConfigProblem
from kbear.config._failover import FAILOVER_ACTIVE as FAILOVER_ACTIVE
from kbear.config._failover import FAILOVER_DECIDED as FAILOVER_DECIDED
from kbear.config._failover import FAILOVER_KEYS as FAILOVER_KEYS
from kbear.config._failover import Failover as Failover
from kbear.config._failover import MirrorKind as MirrorKind
from kbear.config._failover import ReplicationPolicy as ReplicationPolicy
from kbear.config._librdkafka import property_kind as property_kind
from kbear.config._loading import UnsetVariableError as UnsetVariableError
from kbear.config._loading import load_config as load_config
from kbear.config._loading import load_documents as load_documents
from kbear.config._loading import resolve_placeholders as resolve_placeholders
from kbear.config._models import SERVED_RULE_ID as SERVED_RULE_ID
from kbear.config._models import ClusterConfig as ClusterConfig
from kbear.config._models import ConsumerGroupConfig as ConsumerGroupConfig
from kbear.config._models import ConsumerGroupId as ConsumerGroupId
from kbear.config._models import KBearConfig as KBearConfig
from kbear.config._models import RouteRule as RouteRule
from kbear.config._models import RuleKind as RuleKind
from kbear.config._models import TopicConfig as TopicConfig
