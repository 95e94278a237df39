"""pytest plugin of the compatibility harness (``-p kbear_compat_plugin``).

Loaded before the test modules are imported, it replaces
``confluent_kafka.Producer``, ``Consumer``, ``SerializingProducer``,
``DeserializingConsumer``, ``ShareConsumer`` and ``DeserializingShareConsumer``
with the factory's classes (:mod:`kbear_compat_factory`), so ``from
confluent_kafka import Producer`` in a test module, ``confluent_kafka.Consumer(...)`` and subclasses
defined by the tests all build kbear's routed clients. ``AdminClient`` is
replaced in the test modules that import it (``from confluent_kafka.admin import
AdminClient``), once collected: confluent-kafka's own class refers to itself by
that module name.

confluent-kafka's ``aio`` tests are unit tests of its own asyncio wiring: they
patch its internals (the ``Consumer`` its ``AIOConsumer`` builds, ``_common``),
so they cannot exercise kbear's asyncio clients (``kbear.aio``, compared in
tests/aio/test_aio_fidelity.py instead). They are skipped here with the reason
:data:`AIO_REASON` (the harness runs them on the baseline only).
"""

from __future__ import annotations

import inspect
from typing import Any

import confluent_kafka
import confluent_kafka.admin
import kbear_compat_factory
import pytest

AIO_REASON = "kbear-compat: unit tests of confluent-kafka's aio wiring: baseline only"

ORIGINAL = {
    "Producer": confluent_kafka.Producer,
    "Consumer": confluent_kafka.Consumer,
    "SerializingProducer": confluent_kafka.SerializingProducer,
    "DeserializingConsumer": confluent_kafka.DeserializingConsumer,
    "ShareConsumer": confluent_kafka.ShareConsumer,
    "DeserializingShareConsumer": confluent_kafka.DeserializingShareConsumer,
}
confluent_kafka.Producer = kbear_compat_factory.Producer
confluent_kafka.Consumer = kbear_compat_factory.Consumer
confluent_kafka.SerializingProducer = kbear_compat_factory.SerializingProducer
confluent_kafka.DeserializingConsumer = kbear_compat_factory.DeserializingConsumer
confluent_kafka.ShareConsumer = kbear_compat_factory.ShareConsumer
confluent_kafka.DeserializingShareConsumer = kbear_compat_factory.DeserializingShareConsumer
# confluent_kafka.admin.AdminClient stays: its own methods name it (super(AdminClient,
# self), AdminClient._make_futures); test modules' imported name is replaced instead
ORIGINAL["AdminClient"] = confluent_kafka.admin.AdminClient


def _aio_names(module: Any) -> set[str]:
    """Names in ``module`` bound to confluent-kafka's ``aio`` package or its contents."""
    names = set()
    for name, value in vars(module).items():
        origin = getattr(value, "__module__", None) or getattr(value, "__name__", "")
        if isinstance(origin, str) and origin.startswith("confluent_kafka.aio"):
            names.add(name)
    return names


def _is_aio(item: pytest.Item) -> bool:
    """An asyncio test, or a test (its unittest class, if any) using what its module
    imports from ``confluent_kafka.aio``."""
    function: Any = getattr(item, "obj", None)
    if inspect.iscoroutinefunction(function) or item.get_closest_marker("asyncio") is not None:
        return True
    module = getattr(item, "module", None)
    names = _aio_names(module) if module is not None else set()
    if not names:
        return False
    scope = getattr(item, "cls", None) or function
    try:
        source = inspect.getsource(scope)
    except (OSError, TypeError):
        return True
    return any(name in source for name in names)


def _route_admin(module: Any) -> None:
    """A test module's ``AdminClient`` (imported from confluent_kafka.admin) becomes the factory's."""
    for name, value in list(vars(module).items()):
        if value is ORIGINAL["AdminClient"]:
            setattr(module, name, kbear_compat_factory.AdminClient)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason=AIO_REASON)
    for module in {getattr(item, "module", None) for item in items} - {None}:
        _route_admin(module)
    for item in items:
        if _is_aio(item):
            item.add_marker(skip)


def pytest_report_header(config: pytest.Config) -> str:
    import kbear

    return (
        "kbear-compat: confluent_kafka.Producer/Consumer/SerializingProducer/DeserializingConsumer/"
        "ShareConsumer/DeserializingShareConsumer/"
        "admin.AdminClient are the routed clients of "
        f"{kbear.__file__}"
    )
