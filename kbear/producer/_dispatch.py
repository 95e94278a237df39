"""Which dispatcher ``RoutedProducer.produce()`` uses over several clusters.

Responsible for: building a producer's dispatcher: the compiled one
(``kbear._cdispatch.Dispatcher``, see kbear._compiled) in front of the
pure-Python one, or the pure-Python one alone.

The compiled dispatcher looks the topic up in a table of the clusters' bound
``produce`` methods and forwards the call untouched; whatever that table does not
serve goes to the pure-Python dispatcher, which stays the reference of the
behaviour (errors included).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kbear._compiled import EXTENSION

__all__ = ["make_dispatcher"]

#: The compiled dispatcher's type, or None (not built, or KBEAR_PURE_PYTHON set).
_Dispatcher: Any = None if EXTENSION is None else EXTENSION.Dispatcher


def make_dispatcher(direct: dict[str, Callable[..., None]], pure: Callable[..., None]) -> Callable[..., None]:
    """A producer's produce() over several clusters.

    Args:
        direct: topic -> the bound ``produce`` of its cluster's client, for the
            topics sent under their own name (read at every call, without a lock).
        pure: the pure-Python dispatcher (every topic, first use, errors).

    Returns:
        The compiled dispatcher over ``direct`` falling back to ``pure``, or ``pure``
        itself when the compiled one is not available.
    """
    if _Dispatcher is None:
        return pure
    dispatcher: Callable[..., None] = _Dispatcher(direct, pure)
    return dispatcher
