""" "Did you mean ...?" for a key nobody knows (private; imports nothing of kbear).

:func:`did_you_mean` names difflib's closest candidate (``get_close_matches``,
cutoff :data:`CUTOFF`); :func:`librdkafka_properties` lists the configuration
properties of a loaded librdkafka (``rd_kafka_conf_properties_show``, the table
of librdkafka's ``CONFIGURATION.md``, written to a temporary file and read back).
``kbear lint`` suggests among librdkafka's properties and kbear's settings, the
clients among kbear's settings.
"""

from __future__ import annotations

import ctypes
import difflib
import os
import re
import tempfile
from collections.abc import Iterable

__all__ = ["CUTOFF", "did_you_mean", "librdkafka_properties"]

#: difflib's similarity ratio a candidate must reach (``linger.mss`` -> ``linger.ms``: 0.95)
CUTOFF = 0.8
_PROPERTY = re.compile(r"^([a-z][a-z0-9_.]*[a-z0-9])\s*\|")


def librdkafka_properties(lib: ctypes.CDLL) -> frozenset[str]:
    """Every configuration property name of the librdkafka ``lib`` (global and topic
    level, aliases included)."""
    libc = ctypes.CDLL(None)
    libc.fopen.restype = ctypes.c_void_p
    libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    libc.fclose.argtypes = [ctypes.c_void_p]
    show = lib.rd_kafka_conf_properties_show
    show.restype = None
    show.argtypes = [ctypes.c_void_p]
    fd, path = tempfile.mkstemp(prefix="kbear-props-", suffix=".md")
    os.close(fd)
    try:
        handle = libc.fopen(path.encode(), b"w")
        if not handle:
            return frozenset()
        try:
            show(handle)
        finally:
            libc.fclose(handle)
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    finally:
        os.unlink(path)
    return frozenset(m.group(1) for line in text.splitlines() if (m := _PROPERTY.match(line)))


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` naming the candidate closest to ``word``, or ``""``."""
    known = set(candidates)
    if word in known:
        return ""
    found = difflib.get_close_matches(word, sorted(known), n=1, cutoff=CUTOFF)
    return f" (did you mean '{found[0]}'?)" if found else ""
