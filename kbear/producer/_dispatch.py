"""Which dispatcher ``RoutedProducer.produce()`` uses over several clusters.

Responsible for: choosing, once at import, between the compiled dispatcher
(``kbear._cdispatch``, built from kbear/_dispatch.c when kbear is installed with a
C compiler) and the pure-Python one, and building a producer's dispatcher.

The compiled dispatcher looks the topic up in a table of the clusters' bound
``produce`` methods and forwards the call untouched; whatever that table does not
serve goes to the pure-Python dispatcher, which stays the reference of the
behaviour (errors included). ``KBEAR_PURE_PYTHON=1`` in the environment when
kbear is imported forces the pure-Python dispatcher.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

__all__ = ["PURE_PYTHON_ENV", "make_dispatcher", "produce_dispatcher"]

#: Environment variable that, set to anything but "" or "0" when kbear is
#: imported, makes produce() use the pure-Python dispatcher even if the compiled
#: one is built.
PURE_PYTHON_ENV = "KBEAR_PURE_PYTHON"


def _compiled() -> Any:
    """The compiled dispatcher's type, or None (not built, or not wanted)."""
    if os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0"):
        return None
    try:
        from kbear._cdispatch import Dispatcher
    except ImportError:  # not built (no compiler at install): the pure-Python dispatcher
        return None
    return Dispatcher


_Dispatcher: Any = _compiled()


def produce_dispatcher() -> str:
    """The dispatcher ``RoutedProducer.produce()`` uses over several clusters.

    Returns:
        ``"compiled"`` when the C extension ``kbear._cdispatch`` was built at install
        and ``KBEAR_PURE_PYTHON`` was unset (or "0") when kbear was imported,
        else ``"pure-python"``. (With one cluster, produce() is that cluster's own
        ``confluent_kafka.Producer.produce`` either way.)
    """
    return "compiled" if _Dispatcher is not None else "pure-python"


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
