"""What every configuration source is: :class:`ConfigSource` (public as :class:`kbear.sources.ConfigSource`).

Defined apart from :mod:`kbear.sources` so that the sources themselves
(:mod:`kbear.sources`, :mod:`kbear.meta`) and :mod:`kbear.reload` build on it
without importing one another.

A source never drives a router. A source that learns what it must answer from
lookups (a meta-service) registers them in :meth:`ConfigSource.prepare` and
tells whoever listens that its state changed (:meth:`ConfigSource.notify_changed`);
the router, listening, reloads.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

from kbear._route import NoRouteError

if TYPE_CHECKING:
    from kbear._identity import Client
    from kbear.config import KBearConfig

__all__ = ["ChangeListener", "ConfigSource"]

#: Called, without arguments, when a source's state changed (see :meth:`ConfigSource.notify_changed`).
ChangeListener = Callable[[], None]


class ConfigSource(ABC):
    """Where a configuration comes from (see :mod:`kbear.sources`).

    Attributes:
        settle: whether a new state must be seen twice, one settle time apart,
            before it is loaded (files being written in place); False for
            sources whose state changes atomically.
        on_demand: whether :meth:`prepare` must be called before each lookup
            (a meta-service learns which topics a client needs from its lookups).
    """

    settle: ClassVar[bool] = False
    on_demand: ClassVar[bool] = False

    # Swapped whole (never mutated), so notifying needs no lock and a source
    # needs no __init__ of its own.
    _change_listeners: tuple[ChangeListener, ...] = ()

    @property
    @abstractmethod
    def location(self) -> str:
        """The directory or URL, for messages and logs."""

    @abstractmethod
    def digest(self) -> str:
        """A fingerprint (hex string) of the source's current state: equal to the
        ``digest`` of the :class:`~kbear.KBearConfig` that :meth:`load` would return
        now. May do I/O (read files, ask a service).

        Raises:
            ConfigError: the state cannot be read at all (a service unreachable).
        """

    @abstractmethod
    def load(self) -> KBearConfig:
        """Read and validate the current state.

        Raises:
            ConfigError: every problem found; the caller keeps what it had.
        """

    def prepare(self, topic: str, group: str | None, client: Client) -> None:  # noqa: B027 (optional hook)
        """Called by a router before each lookup when :attr:`on_demand` is True.

        A source that learns from lookups registers the lookup here and, when
        that changed its state, calls :meth:`notify_changed` (the router then
        reloads before answering). The default does nothing.

        Args:
            topic: the topic looked up.
            group: the consumer group, None for a producer lookup.
            client: who asks.

        Raises:
            ValueError: the source cannot answer lookups for ``client`` (a
                meta-service asks on behalf of one client).
        """

    def answers(self, topic: str, group: str | None, digest: str) -> bool:
        """Whether the configuration with ``digest``, loaded from this source, has an
        answer for the lookup (a meta-service answers only what it was asked);
        True by default. Called after :meth:`prepare` when :attr:`on_demand`; a
        False answer makes the router raise :class:`~kbear.NoRouteError`."""
        return True

    def unanswered(self, topic: str, group: str | None, client: Client) -> Exception:
        """What a router raises for a lookup :meth:`answers` said no to: a
        :class:`~kbear.NoRouteError` by default; a meta-service tells an unreachable
        service (:class:`~kbear.MetaServiceUnavailable`) and an answer refused as
        invalid (its :class:`~kbear.ConfigError`) apart."""
        return NoRouteError(client, topic, group)

    def chain_config(self) -> tuple[KBearConfig | None, str | None]:
        """The configuration holding the rules lookups are evaluated against, for
        explaining a lookup, when it is not the one :meth:`load` returns (a
        meta-service evaluates the chain itself and answers routes only).

        Returns:
            ``(None, None)`` (the default): :meth:`load`'s configuration holds the
            rules. ``(config, None)``: the rules are in ``config``. ``(None, why)``:
            the rules cannot be read (the service does not serve them with their
            statements); ``why`` says so.

        Raises:
            ConfigError: the source cannot be read, or what it holds is invalid.
        """
        return None, None

    def add_change_listener(self, listener: ChangeListener) -> None:
        """Call ``listener()`` whenever :meth:`notify_changed` is called."""
        self._change_listeners = (*self._change_listeners, listener)

    def remove_change_listener(self, listener: ChangeListener) -> None:
        """Stop calling ``listener``; an unknown listener is ignored."""
        self._change_listeners = tuple(known for known in self._change_listeners if known != listener)

    def notify_changed(self) -> None:
        """Tell every listener that this source's state changed (new lookups to ask for).

        Listeners run in the calling thread; what they raise (a router's
        :class:`~kbear.ConfigError` when the new state is refused) reaches the
        caller, after the listeners before it ran.
        """
        for listener in self._change_listeners:
            listener()

    def close(self) -> None:  # noqa: B027 (optional hook, nothing to release by default)
        """Release what the source holds (connections); the default does nothing."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.location!r})"
