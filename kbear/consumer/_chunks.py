"""Chunking on the consumer: the parts of a chunked value joined into one message.

Responsible for: collecting the chunks (headers of :mod:`kbear._chunk_headers`)
of each chunked value until all are read, the joined message, and the bound on
what is held: an incomplete chunked message older than ``kbear.chunking.expire.ms``
or beyond ``kbear.chunking.max.pending`` (the oldest first) is dropped. Pure
logic: the clock is passed in; no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from kbear._chunk_headers import CHUNK_COUNT, CHUNK_INDEX, CHUNK_NOKEY, CHUNK_UUID

T = TypeVar("T")

_CHUNK_HEADERS = frozenset({CHUNK_UUID, CHUNK_INDEX, CHUNK_COUNT, CHUNK_NOKEY})


def chunk_of(headers: list[tuple[str, Any]] | None) -> tuple[str, int, int] | None:
    """(uuid, index, count) of a chunk's headers, or None for a message that is no chunk."""
    found: dict[str, bytes] = {k: v for k, v in headers or () if k in _CHUNK_HEADERS and isinstance(v, bytes)}
    if CHUNK_UUID not in found:
        return None
    try:
        index, count = int(found[CHUNK_INDEX]), int(found[CHUNK_COUNT])
    except (KeyError, ValueError):
        return None
    if count < 1 or not 0 <= index < count:
        return None
    return found[CHUNK_UUID].decode(errors="replace"), index, count


@dataclass
class _Pending(Generic[T]):
    count: int
    started: float
    parts: dict[int, tuple[Any, T]] = field(default_factory=dict)  # index -> (message, item)


class ChunkAssembler(Generic[T]):
    """Chunks in, joined messages out.

    Args:
        expire_s: an incomplete chunked message older than this is dropped, seconds.
        max_pending: most incomplete chunked messages held at once.
        clock: seconds (monotonic).

    Each chunk comes with an opaque ``item`` (the consumer's record of it); the
    joined message comes out with the items of all its chunks, and a dropped one's
    items are returned by :meth:`expired` / :meth:`add` so the caller can
    acknowledge them.
    """

    def __init__(self, expire_s: float, max_pending: int, clock: Callable[[], float]) -> None:
        self.expire_s = expire_s
        self.max_pending = max_pending
        self._clock = clock
        self._pending: dict[str, _Pending[T]] = {}  # insertion order: oldest first

    def add(self, message: Any, item: T, chunk: tuple[str, int, int]) -> tuple[Any, list[T], list[list[T]]]:
        """Add a chunk (``chunk``: :func:`chunk_of` of its headers).

        Returns:
            (the joined message or None while parts are missing, the items of its
            chunks, the items of incomplete chunked messages dropped to make room).
        """
        ident, index, count = chunk
        pending = self._pending.get(ident)
        dropped: list[list[T]] = []
        if pending is None:
            while len(self._pending) >= self.max_pending:
                oldest = next(iter(self._pending))
                dropped.append([it for _, it in self._pending.pop(oldest).parts.values()])
            pending = self._pending[ident] = _Pending(count, self._clock())
        if index in pending.parts:  # the same chunk again (a producer retry): keep the first
            return None, [item], dropped
        pending.parts[index] = (message, item)
        if len(pending.parts) < pending.count:
            return None, [], dropped
        del self._pending[ident]
        ordered = [pending.parts[i] for i in range(pending.count)]
        last = ordered[-1][0]
        headers = last.headers() or []
        nokey = any(k == CHUNK_NOKEY for k, _ in headers)
        last.set_value(b"".join(m.value() or b"" for m, _ in ordered))
        last.set_headers([(k, v) for k, v in headers if k not in _CHUNK_HEADERS])
        if nokey:
            last.set_key(None)
        return last, [it for _, it in ordered], dropped

    def expired(self) -> list[list[T]]:
        """The items of each incomplete chunked message older than ``expire_s``, dropped."""
        if not self._pending:
            return []
        limit = self._clock() - self.expire_s
        out: list[list[T]] = []
        for ident, pending in list(self._pending.items()):
            if pending.started <= limit:
                del self._pending[ident]
                out.append([it for _, it in pending.parts.values()])
        return out

    def next_expiry(self) -> float | None:
        """When the oldest incomplete chunked message expires, or None."""
        if not self._pending:
            return None
        return min(p.started for p in self._pending.values()) + self.expire_s

    def forget(self, keep: Callable[[T], bool]) -> None:
        """Drop every held chunk whose item ``keep`` refuses (its partition left)."""
        for ident, pending in list(self._pending.items()):
            pending.parts = {i: mi for i, mi in pending.parts.items() if keep(mi[1])}
            if not pending.parts:
                del self._pending[ident]
