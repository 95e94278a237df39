"""The cyclic garbage collector paused while a block makes many objects that are no
garbage before it ends (private).

Reading a configuration allocates about ten objects per topic, none of them garbage
until the load ends: every full collection on the way walks all of them again,
about a quarter of the load time of 100,000 topics (:mod:`kbear.config._loading`).
A Spark read of a range (:mod:`kbear.spark._read`) makes thousands of messages that
live until the batch is built: full collections of the Python worker's whole heap
doubled the CPU time of a read (``bench/spark_read.py``).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_pause_lock = threading.Lock()
_pauses = 0
_collector_was_enabled = False


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for the block (see the module).

    Reference counting still frees everything as usual; the collector is turned
    back on (if it was on) when the last of the blocks running at once in the
    process ends, even on an error.
    """
    global _pauses, _collector_was_enabled
    with _pause_lock:
        if _pauses == 0:
            _collector_was_enabled = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _pause_lock:
            _pauses -= 1
            if _pauses == 0 and _collector_was_enabled:
                gc.enable()
