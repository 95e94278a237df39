"""The meta-service protocol's messages as pydantic models (``docs/reference/meta-service-protocol.md``).

One set for both sides: these are the models :mod:`kbear.meta`'s client reads
answers with, defined in ``kbear._meta_protocol`` and named here for the
server's modules and for users of :mod:`kbear.server`. Field names on the wire
are camelCase (``topicIds``, ``clusterId``); the Python attributes are
snake_case. Requests are read as the reference server's JSON parser reads them
(protobuf ``JsonFormat`` ignoring unknown fields): unknown fields are ignored,
an absent or ``null`` field means empty, and a value of the wrong JSON type (a
number where a string is expected) is a bad request. Responses always carry
every field (empty lists and maps included); ``status.error`` is left out on
success, as the reference prints it.
"""

from kbear._meta_protocol import *  # noqa: F403  (its __all__: the messages, nothing else)
from kbear._meta_protocol import __all__ as __all__
