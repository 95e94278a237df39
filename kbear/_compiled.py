"""kbear's optional C extension, ``kbear._cdispatch``, and whether it is in use.

Responsible for: importing the extension once (built from kbear/_dispatch.c when
kbear is installed with a C compiler; absent otherwise), unless
``KBEAR_PURE_PYTHON`` forces the pure-Python code, and saying which is active.
The extension holds the compiled ``RoutedProducer.produce()`` over several
clusters (``Dispatcher``, used by kbear.producer._dispatch) and the compiled
``RoutedConsumer.poll()``/``consume()`` over several clusters (``TurnTaker``,
used by kbear.consumer._turns), and the per-message record of the producer's
take-back (``PlainCall``, ``RecordingSend``, ``Pending``, used by
kbear.producer._pending).
"""

from __future__ import annotations

import os
from types import ModuleType

__all__ = ["EXTENSION", "PURE_PYTHON_ENV", "dispatcher"]

#: Environment variable that, set to anything but "" or "0" when kbear is
#: imported, makes kbear use its pure-Python dispatchers even if the compiled
#: ones are built.
PURE_PYTHON_ENV = "KBEAR_PURE_PYTHON"


def _load() -> ModuleType | None:
    if os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0"):
        return None
    try:
        from kbear import _cdispatch
    except ImportError:  # not built (no compiler at install): the pure-Python code
        return None
    return _cdispatch


#: The extension module, or None when it is not built or not wanted.
EXTENSION: ModuleType | None = _load()


def dispatcher() -> str:
    """Which dispatch the routed clients use over several clusters.

    Returns:
        ``"compiled"`` when the C extension ``kbear._cdispatch`` was built at install
        and ``KBEAR_PURE_PYTHON`` was unset (or "0") when kbear was imported: then
        ``RoutedProducer.produce`` and ``RoutedConsumer.poll``/``consume`` over
        several clusters are compiled; else ``"pure-python"``. (With one cluster
        they are that cluster's own confluent-kafka methods either way.)
    """
    return "compiled" if EXTENSION is not None else "pure-python"
