"""``kbear serve``: the meta-service (``docs/reference/meta-service-protocol.md``) over a directory.

Needs the ``server`` extra (``pip install 'kbear[server]'``: Starlette, uvicorn,
prometheus_client). Modules, one concept each:

- :mod:`kbear.server.protocol`: the protocol's messages (pydantic, camelCase on the wire);
- :mod:`kbear.server.service`: the answers, request + configuration -> response, no I/O;
- :mod:`kbear.server.holder`: the configuration in force, the watched directory;
- :mod:`kbear.server.auth`: the bearer token;
- :mod:`kbear.server.metrics`: request counts and latency, Prometheus text;
- :mod:`kbear.server.fleet`: who got which route, recorded in SQLite (shared by the workers);
- :mod:`kbear.server.moves`: a move's progress from the fleet (no I/O);
- :mod:`kbear.server.fleet_api`: ``GET /fleet``, ``GET /fleet/moves``;
- :mod:`kbear.server.console`: the console page at ``/`` and its login;
- :mod:`kbear.server.app`: the Starlette application (endpoints, probes);
- :mod:`kbear.server.command`: ``kbear serve`` (arguments, TLS, uvicorn).
"""

from kbear.server.app import create_app
from kbear.server.fleet import FleetRecorder
from kbear.server.holder import ConfigHolder

__all__ = ["ConfigHolder", "FleetRecorder", "create_app"]
