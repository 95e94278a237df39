"""The key and value serdes of a routed asyncio serializing client, per cluster.

:class:`AsyncClusterSerdes` is :class:`kbear._serdes.SerdesCore` (the core the
blocking clients share) on the event loop, for
:class:`~kbear.aio.RoutedAsyncSerializingProducer` and
:class:`~kbear.aio.RoutedAsyncDeserializingConsumer`:

- confluent-kafka's asyncio serdes that resolve subject names through the Kafka
  cluster id (``set_async_cluster_id_resolver``) are told the id of the cluster
  of the message being handled (:attr:`AsyncClusterSerdes.current`, a context
  variable: each task its own); blocking serdes get no resolver, as with
  confluent-kafka's asyncio clients;
- a :class:`~kbear.schema_registry.PerCluster` factory is called once per cluster
  with that cluster's ``AsyncSchemaRegistryClient``
  (:func:`~kbear.schema_registry.async_registry_client`), and what it returns is
  awaited when awaitable (``AsyncAvroSerializer(...)`` is);
- builders (``*.serializer.builder``) may return their ``(serde, conf)`` pair
  through an awaitable, as confluent-kafka's asyncio registry builders do;
- :func:`asyncinit` makes a client class built with ``await Cls(conf)``.

Everything here runs on the event loop; the Kafka cluster id comes from
``kafka_id(cluster_id)``, a coroutine the client runs in an executor.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, ClassVar, TypeVar

from confluent_kafka.serialization import MessageField, SerializationContext, SerializationError

from kbear._base import weak_method
from kbear._identity import Client
from kbear._serdes import Built, CloseErrors, SerdesCore, client_meta, failed
from kbear.config import KBearConfig
from kbear.router import Router
from kbear.schema_registry import async_registry_client

__all__ = ["AsyncClusterSerdes", "async_close_serdes", "asyncinit", "maybe_await", "open_serdes"]

T = TypeVar("T")


async def maybe_await(result: Any) -> Any:
    """``result``, awaited when awaitable (the asyncio clients take both asyncio serdes,
    whose calls return coroutines, and blocking ones)."""
    if inspect.isawaitable(result):
        return await result
    return result


def asyncinit(cls: type[T]) -> type[T]:
    """Make ``cls(...)`` a coroutine that runs ``cls``'s ``async def __init__`` and returns
    the instance: ``obj = await cls(...)``, as confluent-kafka's asyncio serializing
    clients are built."""
    plain_new = cls.__new__

    async def init(obj: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        await obj.__init__(*args, **kwargs)
        return obj

    def new(klass: type[T], *args: Any, **kwargs: Any) -> Coroutine[Any, Any, T]:
        return init(plain_new(klass), args, kwargs)

    cls.__new__ = new  # type: ignore[assignment,method-assign]
    return cls


async def async_close_serdes(serdes: list[Any]) -> None:
    """Close each serde through its ``aclose()`` coroutine, else its ``close()`` (awaited
    when it returns an awaitable), as confluent-kafka's asyncio clients.

    Raises:
        BaseException: the first a close raised, after all were tried.
    """
    errors = CloseErrors()
    for serde in serdes:
        close = getattr(serde, "aclose", None)
        if not callable(close):
            close = getattr(serde, "close", None)
        if callable(close):
            with errors.closing(serde):
                await maybe_await(close())
    errors.raise_first()


async def open_serdes(
    conf: Any, kind: str, client: Any, kafka_id: Callable[[str], Awaitable[str]]
) -> tuple[AsyncClusterSerdes, Any]:
    """The serdes of an asyncio serializing client, and its configuration without them.

    Args:
        conf: the application's configuration (anything but a mapping is handed back
            as is: the routed client's own checks answer it).
        kind: ``"serializer"`` or ``"deserializer"`` (as :class:`~kbear._serdes.Built`);
            the ``.builder`` settings are run here (awaited).
        client: the routed client being built (:func:`~kbear._serdes.client_meta`).
        kafka_id: as :class:`AsyncClusterSerdes`.

    Raises:
        ValueError: a setting and its ``.builder`` are both given, or a builder
            returned something else than ``(serde, dict)`` (confluent-kafka's words);
            the serdes built before are closed.
    """
    built = Built(conf, kind)
    try:
        for spec, result in built.calls():
            built.add(spec, await maybe_await(result))
    except BaseException:
        await async_close_serdes(built.owned)
        raise
    return AsyncClusterSerdes(built, meta=client_meta(client), kafka_id=kafka_id), built.rest()


class AsyncClusterSerdes(SerdesCore):
    """:class:`~kbear._serdes.SerdesCore` on the event loop.

    Args:
        built, meta: as :class:`~kbear._serdes.SerdesCore` (a serde may be an
            asyncio one).
        kafka_id: ``await kafka_id(cluster_id)``: that cluster's Kafka cluster id.

    Attributes:
        current: the cluster of the message being (de)serialized in this task, set
            by the caller when ``tracks_cluster``.
    """

    RESOLVER_SETTER = "set_async_cluster_id_resolver"

    def __init__(
        self,
        built: Built,
        *,
        meta: Callable[[str], Mapping[str, str] | None],
        kafka_id: Callable[[str], Awaitable[str]],
    ) -> None:
        self._kafka_id = kafka_id
        self._lock = asyncio.Lock()
        self.current: contextvars.ContextVar[str | None] = contextvars.ContextVar("kbear_serde_cluster")
        super().__init__(built, meta)

    async def get(self, cluster_id: str) -> tuple[Any, Any]:
        """(key serde, value serde) of ``cluster_id``, built at its first use.

        Raises:
            Exception: what a ``per_cluster`` factory or confluent-kafka's registry
                client raised (the routed client wraps it as a (de)serialization error).
        """
        pair = self.pairs.get(cluster_id)
        if pair is not None:
            return pair
        async with self._lock:
            pair = self.pairs.get(cluster_id)
            if pair is not None:
                return pair
            generation, conf, plan = self._plan(cluster_id)
            made = []
            for serde, registry in plan:
                if registry is not None:
                    built = await maybe_await(serde.factory(async_registry_client(registry)))
                    serde = self._made(built, cluster_id)
                made.append(serde)
            return self._keep(cluster_id, generation, conf, (made[0], made[1]))

    async def apply(
        self, cluster_id: str, topic: str, headers: Any, key: Any, value: Any, message: Any = None
    ) -> tuple[Any, Any]:
        """(key, value) through the serdes of ``cluster_id`` (awaited when asyncio
        ones), as :meth:`kbear._serdes.ClusterSerdes.apply`."""
        key_serde, value_serde = self.pairs.get(cluster_id) or await self.get(cluster_id)
        token = self.current.set(cluster_id) if self.tracks_cluster else None
        try:
            ctx = SerializationContext(topic, MessageField.KEY, headers)
            try:
                if key_serde is not None:
                    key = await maybe_await(key_serde(key, ctx))
            except Exception as exc:
                raise failed(True, exc, message) from exc
            ctx.field = MessageField.VALUE
            try:
                if value_serde is not None:
                    value = await maybe_await(value_serde(value, ctx))
            except Exception as exc:
                raise failed(False, exc, message) from exc
        finally:
            if token is not None:
                self.current.reset(token)
        return key, value

    async def close(self) -> None:
        """Close the serdes the factories and the builders made, each once (registry
        clients are shared, see :func:`~kbear.schema_registry.async_registry_client`;
        serdes given ready-made stay the application's)."""
        built, owned = self._release()
        try:
            await async_close_serdes(built)
        finally:
            await async_close_serdes(owned)

    async def _current_id(self) -> str:
        cluster_id = self.current.get(None)
        if cluster_id is None:
            raise SerializationError("kbear: no message being handled in this task")
        return str(await self._kafka_id(cluster_id))


class Refreshing:
    """Mixed into the blocking routed client an asyncio serializing client drives
    (before its class): ``on_change()`` (the serdes' ``refresh``) is called after each
    reload, in the reloading thread, as a blocking serializing client refreshes its own."""

    def __init__(
        self, conf: Any, *, router: Router | None, client: Client | None, on_change: Callable[[], None]
    ) -> None:
        self._changed = on_change
        super().__init__(conf, router=router, client=client)  # type: ignore[call-arg]

    def _on_config_change(self, old: KBearConfig, new: KBearConfig) -> None:
        super()._on_config_change(old, new)  # type: ignore[misc]
        self._changed()


class SerdesClient:
    """Mixed into both asyncio serializing clients (before the asyncio client's
    class): their serdes (``_serdes``, :class:`AsyncClusterSerdes`) and the blocking
    routed client they drive (``_engine``, an :attr:`ENGINE`)."""

    #: the blocking routed client's class (a :class:`Refreshing` one)
    ENGINE: ClassVar[type[Any]]

    async def _open_serdes(self, conf: Any, kind: str, init: Callable[[Any], None]) -> None:
        """Build the serdes ``conf`` names (``kind`` as :func:`open_serdes`), then
        ``init(the rest of conf)`` (the asyncio client's constructor); the serdes are
        closed when it raises."""
        self._serdes, rest = await open_serdes(conf, kind, self, weak_method(self._kafka_id))
        try:
            init(rest)
        except BaseException:
            with contextlib.suppress(Exception):
                await self._serdes.close()
            raise

    def _open(self, conf: Any, router: Router | None, client: Client | None) -> Any:
        self._engine = self.ENGINE(conf, router=router, client=client, on_change=self._serdes.refresh)
        return self._engine

    async def _kafka_id(self, cluster_id: str) -> str:
        # In a thread of the loop's default executor, not of this client's: a thread of
        # this client's may be the one waiting for the loop (a batch serialized again)
        return await asyncio.to_thread(self._engine.kafka_cluster_id, cluster_id)
