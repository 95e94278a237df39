"""Type stub of the optional C extension built from kbear/_dispatch.c."""

from collections.abc import Callable
from typing import Any

class Dispatcher:
    """produce() over several clusters: ``table[topic](*args, **kwargs)``, else ``fallback``."""

    table: dict[str, Callable[..., None]]
    fallback: Callable[..., None]
    def __init__(self, table: dict[str, Callable[..., None]], fallback: Callable[..., None]) -> None: ...
    def __call__(self, *args: Any, **kwargs: Any) -> None: ...

class TurnTaker:
    """poll()/consume() taking turns over several clusters' clients (kbear.consumer._turns)."""

    methods: tuple[Callable[..., Any], ...]
    slow: Callable[..., Any]
    pure: Callable[..., Any]
    def __init__(
        self,
        kind: str,
        methods: tuple[Callable[..., Any], ...],
        slow: Callable[..., Any],
        pure: Callable[..., Any],
    ) -> None: ...
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...

class PlainCall:
    """produce() to ``target`` when the call is plain (at most topic, value, key by
    position or by name) and ``record`` is not set, else to ``fallback``."""

    target: Callable[..., None]
    fallback: Callable[..., None]
    record: bool
    def __init__(self, target: Callable[..., None], fallback: Callable[..., None]) -> None: ...
    def __call__(self, *args: Any, **kwargs: Any) -> None: ...

class Counted:
    """``target`` (a consumer's poll or consume), counting per topic in ``counts``
    the messages without error it returns (kbear.metrics._delivered)."""

    target: Callable[..., Any]
    counts: dict[str, int]
    def __init__(self, target: Callable[..., Any], counts: dict[str, int]) -> None: ...
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...
