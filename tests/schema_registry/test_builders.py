"""Serde builders (``key.serializer.builder``...) in the routed serializing clients follow
confluent-kafka's rules, checked side by side with confluent-kafka's own clients: kbear
runs builders through confluent-kafka's public builder protocol only, so these tests are
what tells a confluent-kafka release that changed those rules."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import DeserializingConsumer, SerializingProducer
from confluent_kafka.aio import AsyncSerializingProducer

from conftest import NOWHERE
from kbear import RoutedDeserializingConsumer, RoutedSerializingProducer, Router
from kbear.aio import RoutedAsyncSerializingProducer

QUIET = {"kbear.reload.interval.ms": 0, "log_level": 0}


class Serde:
    """A serializer (deserializer) that records whether it was closed."""

    def __init__(self, log: list[str], name: str) -> None:
        self.log = log
        self.name = name

    def __call__(self, obj: Any, ctx: Any = None) -> Any:
        return obj

    def close(self) -> None:
        self.log.append(f"closed {self.name}")


class Builder:
    """Builds a :class:`Serde`, consuming ``consumes`` from the configuration it is given;
    ``result`` replaces what ``build`` returns, ``fails`` makes it raise."""

    def __init__(
        self, log: list[str], name: str, consumes: str = "", result: Any = None, fails: bool = False
    ):
        self.log, self.name, self.consumes, self.result, self.fails = log, name, consumes, result, fails

    def build(self, conf: dict[str, Any], is_key: bool) -> Any:
        self.log.append(
            f"built {self.name} is_key={is_key} saw={sorted(k for k in conf if k.startswith('app.'))}"
        )
        if self.fails:
            raise RuntimeError(f"{self.name} cannot be built")
        if self.result is not None:
            return self.result
        conf.pop(self.consumes, None)
        return Serde(self.log, self.name), conf


class AsyncBuilder(Builder):
    """A builder whose ``build`` returns a coroutine (as confluent-kafka's asyncio ones)."""

    def build(self, conf: dict[str, Any], is_key: bool) -> Any:
        result = super().build(conf, is_key)

        async def built() -> Any:
            return result

        return built()


def _outcome(make: Callable[[], Any]) -> tuple[str, Any]:
    try:
        client = make()
    except Exception as e:
        return "raised", (type(e), str(e))
    return "built", client


@pytest.fixture
def router(dead_cluster: Router) -> Router:
    return dead_cluster


def test_builders_get_the_whole_configuration_and_the_client_what_every_builder_left(router: Router) -> None:
    # "app.key.only" / "app.value.only" are not librdkafka properties: the client would
    # refuse one a builder did not consume. Each builder sees both (the whole configuration).
    def conf(log: list[str]) -> dict[str, Any]:
        return {
            "app.key.only": "1",
            "app.value.only": "2",
            "key.serializer.builder": Builder(log, "key", consumes="app.key.only"),
            "value.serializer.builder": Builder(log, "value", consumes="app.value.only"),
        }

    theirs: list[str] = []
    SerializingProducer({"bootstrap.servers": NOWHERE, **conf(theirs)}).close()
    ours: list[str] = []
    RoutedSerializingProducer({**QUIET, **conf(ours)}, router=router).close(0)
    assert (
        ours
        == theirs
        == [
            "built key is_key=True saw=['app.key.only', 'app.value.only']",
            "built value is_key=False saw=['app.key.only', 'app.value.only']",
            "closed key",
            "closed value",
        ]
    )


@pytest.mark.parametrize(
    "result",
    [("not", "a", "pair"), "no", (object(), ["not", "a", "dict"])],
    ids=["three", "not-a-tuple", "leftover-not-a-dict"],
)
def test_a_builder_returning_something_else_gets_confluent_kafkas_error(router: Router, result: Any) -> None:
    def conf(log: list[str]) -> dict[str, Any]:
        return {
            "key.serializer.builder": Builder(log, "key"),
            "value.serializer.builder": Builder(log, "bad", result=result),
        }

    theirs: list[str] = []
    their_outcome = _outcome(lambda: SerializingProducer({"bootstrap.servers": NOWHERE, **conf(theirs)}))
    ours: list[str] = []
    our_outcome = _outcome(lambda: RoutedSerializingProducer({**QUIET, **conf(ours)}, router=router))
    assert their_outcome[0] == our_outcome[0] == "raised"
    assert our_outcome[1] == their_outcome[1]
    assert our_outcome[1][0] is ValueError and "value.serializer.builder" in our_outcome[1][1]
    assert ours == theirs  # the key's serializer, built first, closed
    assert ours[-1] == "closed key"


def test_a_failing_builder_closes_those_built_before_it(router: Router) -> None:
    def conf(log: list[str]) -> dict[str, Any]:
        return {
            "group.id": "builders",
            "key.deserializer.builder": Builder(log, "key"),
            "value.deserializer.builder": Builder(log, "value", fails=True),
        }

    theirs: list[str] = []
    their_outcome = _outcome(lambda: DeserializingConsumer({"bootstrap.servers": NOWHERE, **conf(theirs)}))
    ours: list[str] = []
    our_outcome = _outcome(lambda: RoutedDeserializingConsumer({**QUIET, **conf(ours)}, router=router))
    assert our_outcome[1] == their_outcome[1] == (RuntimeError, "value cannot be built")
    assert ours == theirs
    assert ours[-1] == "closed key"


def test_a_serde_and_its_builder_both_given_is_refused_in_confluent_kafkas_words(router: Router) -> None:
    def conf(log: list[str]) -> dict[str, Any]:
        return {"value.serializer": Serde(log, "given"), "value.serializer.builder": Builder(log, "value")}

    their_outcome = _outcome(lambda: SerializingProducer({"bootstrap.servers": NOWHERE, **conf([])}))
    our_outcome = _outcome(lambda: RoutedSerializingProducer({**QUIET, **conf([])}, router=router))
    assert our_outcome[1] == their_outcome[1]
    assert our_outcome[1][0] is ValueError


@pytest.mark.asyncio
async def test_asyncio_builders_are_awaited_and_closed_as_confluent_kafkas(router: Router) -> None:
    def conf(log: list[str]) -> dict[str, Any]:
        return {
            "app.key.only": "1",
            "key.serializer.builder": AsyncBuilder(log, "key", consumes="app.key.only"),
            "value.serializer.builder": Builder(log, "value"),
        }

    theirs: list[str] = []
    their_producer = await AsyncSerializingProducer({"bootstrap.servers": NOWHERE, **conf(theirs)})
    await their_producer.close()
    ours: list[str] = []
    our_producer = await RoutedAsyncSerializingProducer({**QUIET, **conf(ours)}, router=router)
    await our_producer.close()
    assert ours == theirs
    assert ours[-2:] == ["closed key", "closed value"]

    def failing(log: list[str]) -> dict[str, Any]:
        return {
            "key.serializer.builder": AsyncBuilder(log, "key"),
            "value.serializer.builder": AsyncBuilder(log, "bad", result=("not", "a", "pair")),
        }

    theirs, ours = [], []
    with pytest.raises(ValueError) as their_error:
        await AsyncSerializingProducer({"bootstrap.servers": NOWHERE, **failing(theirs)})
    with pytest.raises(ValueError) as our_error:
        await RoutedAsyncSerializingProducer({**QUIET, **failing(ours)}, router=router)
    assert str(our_error.value) == str(their_error.value)
    assert ours == theirs
    assert ours[-1] == "closed key"
