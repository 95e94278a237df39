"""Drop-in fidelity of the asyncio clients (issue #14): every public method of
``confluent_kafka.aio.AIOProducer`` / ``AIOConsumer`` exists on the routed twin,
is a coroutine function exactly when confluent-kafka's is, and accepts the same
named parameters with the same defaults; the constructors take the same
arguments. The same for ``AsyncSerializingProducer`` / ``AsyncDeserializingConsumer``
(issue #28), whose constructors are awaited. Behaviour is compared in tests/aio/test_aio.py."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from confluent_kafka.aio import AIOConsumer, AIOProducer, AsyncDeserializingConsumer, AsyncSerializingProducer

from kbear.aio import (
    RoutedAIOConsumer,
    RoutedAIOProducer,
    RoutedAsyncDeserializingConsumer,
    RoutedAsyncSerializingProducer,
)

PAIRS = [
    (AIOProducer, RoutedAIOProducer),
    (AIOConsumer, RoutedAIOConsumer),
    (AsyncSerializingProducer, RoutedAsyncSerializingProducer),
    (AsyncDeserializingConsumer, RoutedAsyncDeserializingConsumer),
]
IDS = ["producer", "consumer", "serializing-producer", "deserializing-consumer"]
DUNDERS = ("__init__", "__aenter__", "__aexit__", "__len__")


def public_methods(cls: type) -> list[str]:
    return sorted(
        name
        for name, _member in inspect.getmembers(cls, callable)
        if not name.startswith("_") or name in DUNDERS
    )


def named_parameters(fn: Any) -> list[inspect.Parameter]:
    return [
        p
        for p in inspect.signature(fn).parameters.values()
        if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]


@pytest.mark.parametrize(("theirs", "ours"), PAIRS, ids=IDS)
def test_every_method_is_there_and_awaitable_alike(theirs: type, ours: type) -> None:
    missing = [m for m in public_methods(theirs) if not hasattr(ours, m)]
    assert not missing, f"{ours.__name__} lacks {missing}"
    for name in public_methods(theirs):
        mine, original = getattr(ours, name), getattr(theirs, name)
        assert inspect.iscoroutinefunction(mine) == inspect.iscoroutinefunction(original), name


@pytest.mark.parametrize(("theirs", "ours"), PAIRS, ids=IDS)
def test_named_parameters_match(theirs: type, ours: type) -> None:
    for name in public_methods(theirs):
        original = named_parameters(getattr(theirs, name))
        mine = {p.name: p for p in named_parameters(getattr(ours, name))}
        for i, p in enumerate(original):
            assert p.name in mine, f"{name}: parameter {p.name!r} missing"
            q = mine[p.name]
            # A required argument may get a default (the configuration, so that
            # router= alone is enough, as for the blocking clients); a default stays.
            if p.default is not p.empty:
                assert q.default == p.default, f"{name}({p.name}=...) default differs"
            if p.kind is p.POSITIONAL_OR_KEYWORD:
                positional = [x for x in mine.values() if x.kind is x.POSITIONAL_OR_KEYWORD]
                assert positional[i].name == p.name, f"{name}: {p.name!r} is not at position {i}"
        # Our extra parameters are keyword-only (kbear's router= / client=): a
        # positional call written for confluent-kafka cannot land in them.
        extra = [q for n, q in mine.items() if n not in {p.name for p in original}]
        assert all(q.kind is q.KEYWORD_ONLY for q in extra), f"{name}: {extra}"


def test_routed_additions_are_documented() -> None:
    for cls in (
        RoutedAIOProducer,
        RoutedAIOConsumer,
        RoutedAsyncSerializingProducer,
        RoutedAsyncDeserializingConsumer,
    ):
        for name in ("routes", "route", "on_route_change", "router", "client", "routed"):
            member = getattr(cls, name, None)
            if member is not None:
                assert (member.__doc__ or "").strip(), f"{cls.__name__}.{name} has no docstring"
    assert hasattr(RoutedAIOConsumer, "routes") and hasattr(RoutedAIOProducer, "route")
