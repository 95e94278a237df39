"""The meta-service protocol's messages as pydantic models (``docs/reference/meta-service-protocol.md``).

Field names on the wire are camelCase (``topicIds``, ``clusterId``); the Python
attributes are snake_case. Requests follow the reference server's JSON parser
(protobuf ``JsonFormat`` ignoring unknown fields): unknown fields are ignored,
an absent or ``null`` field means empty, and a value of the wrong JSON type
(a number where a string is expected) is a bad request. Responses always
carry every field (empty lists and maps included); ``status.error`` is left
out on success, as the reference prints it.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic.alias_generators import to_camel

__all__ = [
    "Ack",
    "ClientMessage",
    "ClusterMessage",
    "ClustersRequest",
    "ClustersResponse",
    "ConsumerGroupIdMessage",
    "ConsumerGroupIdRoute",
    "ConsumerGroupMessage",
    "ConsumerGroupsRequest",
    "ConsumerGroupsResponse",
    "ConsumerRouteRequest",
    "ConsumerRouteResponse",
    "ErrorCode",
    "ProducerRouteRequest",
    "ProducerRouteResponse",
    "ResponseError",
    "ResponseStatus",
    "RouteMessage",
    "RouteRuleInfo",
    "RouteRulesRequest",
    "RouteRulesResponse",
    "StatusResponse",
    "TopicMessage",
    "TopicsRequest",
    "TopicsResponse",
]


class Ack(StrEnum):
    """``ResponseStatus.ack``: every item answered, some, or none (bad request, server error)."""

    SUCCESS = "success"
    PARTIAL_FAIL = "partial_fail"
    FAIL = "fail"


class ErrorCode(StrEnum):
    """``ResponseError.code``. The first two are the reference server's; the others are kbear's."""

    BAD_REQUEST = "bad_request"
    SERVICE_EXCEPTION = "service_exception"
    #: partial_fail of a route request: the items without a route are named in the message.
    NO_ROUTE = "no_route"
    #: partial_fail of a meta or rules request: the ids not found are named in the message.
    NOT_FOUND = "not_found"
    UNAUTHORIZED = "unauthorized"


def _none_as_empty_list(value: Any) -> Any:
    return [] if value is None else value


def _none_as_empty_dict(value: Any) -> Any:
    return {} if value is None else value


def _none_as_empty_str(value: Any) -> Any:
    return "" if value is None else value


_Str = Annotated[str, BeforeValidator(_none_as_empty_str)]
_StrMap = Annotated[dict[str, str], BeforeValidator(_none_as_empty_dict)]


class _Message(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True, strict=True
    )


# --------------------------------------------------------------------------- shared messages


class ClientMessage(_Message):
    """``Client {id, meta}``: who asks. An empty ``id`` means no ``client.id`` factor."""

    id: _Str = ""
    meta: _StrMap = Field(default_factory=dict)


class ClusterMessage(_Message):
    """``Cluster {id, meta}``; meta as written in clusters.yaml, ``${NAME}`` unresolved."""

    id: str
    meta: dict[str, str]


class TopicMessage(_Message):
    """``Topic {id, meta}``; meta from topics.yaml, empty for a topic it does not list."""

    id: str
    meta: dict[str, str]


class ConsumerGroupIdMessage(_Message):
    """``ConsumerGroupId {groupName, topicId}``."""

    group_name: _Str = ""
    topic_id: _Str = ""


class ConsumerGroupMessage(_Message):
    """``ConsumerGroup {id, meta}``; meta from consumer-groups.yaml, empty when not listed there."""

    id: ConsumerGroupIdMessage
    meta: dict[str, str]


class RouteMessage(_Message):
    """``Route {clusterId, topicId, ruleId}``; ``topicId`` is the physical topic (a remap's
    target); ``ruleId`` (a kbear field the reference does not send) the rule that won."""

    cluster_id: str
    topic_id: str
    rule_id: str = ""


class RouteRuleInfo(_Message):
    """``RouteRuleInfo {id, priority, meta}``; like the reference, ``meta['rule']`` holds
    the CRRL statement (kbear writes it in canonical form, see ``crrl.Statement.__str__``)."""

    id: str
    priority: int
    meta: dict[str, str]


class ResponseError(_Message):
    """``ResponseError {code, message}``."""

    code: ErrorCode
    message: str


class ResponseStatus(_Message):
    """``ResponseStatus {ack, error}``; ``error`` is None (left out) on success."""

    ack: Ack
    error: ResponseError | None = None


# --------------------------------------------------------------------------- requests

_Ids = Annotated[list[_Str], BeforeValidator(_none_as_empty_list)]
_GroupIds = Annotated[list[ConsumerGroupIdMessage], BeforeValidator(_none_as_empty_list)]


class ProducerRouteRequest(_Message):
    """``/route/producer``: ``{client, topicIds}``."""

    client: ClientMessage = Field(default_factory=ClientMessage)
    topic_ids: _Ids = Field(default_factory=list)


class ConsumerRouteRequest(_Message):
    """``/route/consumer``: ``{client, consumerGroupIds}``."""

    client: ClientMessage = Field(default_factory=ClientMessage)
    consumer_group_ids: _GroupIds = Field(default_factory=list)


class RouteRulesRequest(_Message):
    """``/route/rules``: ``{routeRuleIds}``; empty asks for every rule."""

    route_rule_ids: _Ids = Field(default_factory=list)


class ClustersRequest(_Message):
    """``/meta/clusters``: ``{clusterIds}``; empty asks for every cluster."""

    cluster_ids: _Ids = Field(default_factory=list)


class TopicsRequest(_Message):
    """``/meta/topics``: ``{topicIds}``; empty asks for every topic."""

    topic_ids: _Ids = Field(default_factory=list)


class ConsumerGroupsRequest(_Message):
    """``/meta/consumer-groups``: ``{consumerGroupIds}``; empty asks for every group."""

    consumer_group_ids: _GroupIds = Field(default_factory=list)


# --------------------------------------------------------------------------- responses


class StatusResponse(_Message):
    """What every response has: ``status``."""

    status: ResponseStatus


class ProducerRouteResponse(StatusResponse):
    """``{status, topicIdRoutes, clusters, topics}``; ``topicIdRoutes`` is keyed by the
    **requested** topic id (the reference's remap defect fixed), ``topics`` by the
    physical topic of each route."""

    status: ResponseStatus
    topic_id_routes: dict[str, RouteMessage] = Field(default_factory=dict)
    clusters: dict[str, ClusterMessage] = Field(default_factory=dict)
    topics: dict[str, TopicMessage] = Field(default_factory=dict)


class ConsumerGroupIdRoute(_Message):
    """``{consumerGroupId, route}``: one answered item of a consumer route request."""

    consumer_group_id: ConsumerGroupIdMessage
    route: RouteMessage


class ConsumerRouteResponse(StatusResponse):
    """``{status, consumerGroupIdRoutes, clusters, topics, consumerGroups}``."""

    status: ResponseStatus
    consumer_group_id_routes: list[ConsumerGroupIdRoute] = Field(default_factory=list)
    clusters: dict[str, ClusterMessage] = Field(default_factory=dict)
    topics: dict[str, TopicMessage] = Field(default_factory=dict)
    consumer_groups: list[ConsumerGroupMessage] = Field(default_factory=list)


class RouteRulesResponse(StatusResponse):
    """``{status, routeRules}``."""

    status: ResponseStatus
    route_rules: list[RouteRuleInfo] = Field(default_factory=list)


class ClustersResponse(StatusResponse):
    """``{status, clusters}``."""

    status: ResponseStatus
    clusters: list[ClusterMessage] = Field(default_factory=list)


class TopicsResponse(StatusResponse):
    """``{status, topics}``."""

    status: ResponseStatus
    topics: list[TopicMessage] = Field(default_factory=list)


class ConsumerGroupsResponse(StatusResponse):
    """``{status, consumerGroups}``."""

    status: ResponseStatus
    consumer_groups: list[ConsumerGroupMessage] = Field(default_factory=list)
