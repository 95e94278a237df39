"""Private backends for :class:`kbear.testing.EmbeddedCluster`.

librdkafka's in-process mock Kafka cluster (librdkafka ``src/rdkafka_mock.h``; an
experimental API with no ABI stability guarantee): :class:`NativeMockCluster` calls
the mock-cluster C API through :mod:`ctypes` in the librdkafka shared library
bundled with the confluent-kafka wheel
(``site-packages/confluent_kafka.libs/librdkafka-*.so*``). It gives exact
partition counts, ``group.initial.rebalance.delay.ms`` and brokers up/down.

All ctypes access lives in this module. The library and every symbol are
checked once, at import; :data:`NATIVE_API` is ``None`` (and
:data:`NATIVE_UNAVAILABLE_REASON` says why) when the C API cannot be used.
"""

from __future__ import annotations

import ctypes
import re
import tempfile
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any, Final

import confluent_kafka
from confluent_kafka import KafkaError, KafkaException

__all__ = [
    "MOCK_DEFAULT_GROUP_INITIAL_REBALANCE_DELAY_MS",
    "NATIVE_API",
    "NATIVE_UNAVAILABLE_REASON",
    "NativeApi",
    "NativeHandles",
    "check_broker_id",
    "librdkafka_properties",
    "open_cluster",
]

#: The mock cluster's default ``group.initial.rebalance.delay.ms``.
MOCK_DEFAULT_GROUP_INITIAL_REBALANCE_DELAY_MS: Final = 3000

_RD_KAFKA_PRODUCER: Final = 0  # rd_kafka_type_t
_RD_KAFKA_CONF_OK: Final = 0  # rd_kafka_conf_res_t
_ERRSTR_SIZE: Final = 512

_P = ctypes.c_void_p  # every opaque librdkafka pointer
_S = ctypes.c_char_p
_I = ctypes.c_int
_I32 = ctypes.c_int32

# name -> (restype, argtypes), as declared in rdkafka.h / rdkafka_mock.h.
_REQUIRED: Final[dict[str, tuple[Any, list[Any]]]] = {
    "rd_kafka_version_str": (_S, []),
    "rd_kafka_conf_new": (_P, []),
    "rd_kafka_conf_set": (_I, [_P, _S, _S, _S, ctypes.c_size_t]),
    "rd_kafka_conf_destroy": (None, [_P]),
    "rd_kafka_new": (_P, [_I, _P, _S, ctypes.c_size_t]),
    "rd_kafka_destroy": (None, [_P]),
    "rd_kafka_mock_cluster_new": (_P, [_P, _I]),
    "rd_kafka_mock_cluster_destroy": (None, [_P]),
    "rd_kafka_mock_cluster_bootstraps": (_S, [_P]),
    "rd_kafka_mock_topic_create": (_I, [_P, _S, _I, _I]),
    "rd_kafka_mock_broker_set_down": (_I, [_P, _I32]),
    "rd_kafka_mock_broker_set_up": (_I, [_P, _I32]),
    "rd_kafka_mock_broker_set_rtt": (_I, [_P, _I32, _I]),
}
#: the share-group settings of the mock cluster (EmbeddedCluster.set_share_group):
#: keyword -> the setter's name suffix (``rd_kafka_mock_sharegroup_set_<suffix>``)
SHARE_GROUP_SETTERS: Final = {
    "auto_offset_reset": "auto_offset_reset",
    "record_lock_duration_ms": "record_lock_duration",
    "max_delivery_attempts": "max_delivery_attempts",
    "session_timeout_ms": "session_timeout",
    "heartbeat_interval_ms": "heartbeat_interval",
}


# Exported by librdkafka >= 2.0 (void, takes int32_t delay_ms). Note the name:
# there is no "rd_kafka_mock_set_group_initial_rebalance_delay_ms".
_OPTIONAL: Final[dict[str, tuple[Any, list[Any]]]] = {
    "rd_kafka_mock_group_initial_rebalance_delay_ms": (None, [_P, _I32]),
    "rd_kafka_conf_properties_show": (None, [_P]),  # takes a FILE * (kbear lint's suggestions)
    # share groups (KIP-932), librdkafka >= 2.15; each void (mcluster, int), applying
    # to the share groups of the cluster and to those created later
    **{f"rd_kafka_mock_sharegroup_set_{name}": (None, [_P, _I]) for name in SHARE_GROUP_SETTERS.values()},
    # void (mcluster, int16_t ApiKey, size_t cnt, const rd_kafka_resp_err_t *errors)
    "rd_kafka_mock_push_request_errors_array": (
        None,
        [_P, ctypes.c_int16, ctypes.c_size_t, ctypes.POINTER(_I)],
    ),
    # rd_kafka_resp_err_t (mcluster, int32_t broker_id, int16_t ApiKey, size_t cnt, ...):
    # cnt pairs (rd_kafka_resp_err_t err, int rtt_ms) follow, variadic
    "rd_kafka_mock_broker_push_request_error_rtts": (
        _I,
        [_P, _I32, ctypes.c_int16, ctypes.c_size_t],
    ),
}


class NativeApi:
    """The loaded librdkafka library with ``restype``/``argtypes`` set on every function."""

    def __init__(self, lib: ctypes.CDLL, path: str) -> None:
        self.lib = lib
        self.path = path
        self.version: str = lib.rd_kafka_version_str().decode()
        self.has_rebalance_delay = hasattr(lib, "rd_kafka_mock_group_initial_rebalance_delay_ms")


def _library_candidates() -> list[Path]:
    pkg = Path(confluent_kafka.__file__).parent
    return [
        *sorted((pkg.parent / "confluent_kafka.libs").glob("librdkafka-*.so*")),  # manylinux (auditwheel)
        *sorted((pkg / ".dylibs").glob("librdkafka*.dylib")),  # macOS (delocate)
    ]


def _load_native() -> tuple[NativeApi | None, str | None]:
    candidates = _library_candidates()
    if not candidates:
        return None, "no librdkafka shared library found next to the confluent_kafka package"
    problems: list[str] = []
    for path in candidates:
        try:
            lib = ctypes.CDLL(str(path))
        except OSError as exc:
            problems.append(f"{path}: {exc}")
            continue
        missing = [name for name in _REQUIRED if not hasattr(lib, name)]
        if missing:
            problems.append(f"{path}: missing symbols {', '.join(missing)}")
            continue
        for name, (restype, argtypes) in (_REQUIRED | _OPTIONAL).items():
            if hasattr(lib, name):
                func = getattr(lib, name)
                func.restype = restype
                func.argtypes = argtypes
        return NativeApi(lib, str(path)), None
    return None, "; ".join(problems)


#: The librdkafka mock-cluster C API, or ``None`` when it cannot be used.
NATIVE_API: NativeApi | None
#: Why :data:`NATIVE_API` is ``None`` (``None`` when it is available).
NATIVE_UNAVAILABLE_REASON: str | None
NATIVE_API, NATIVE_UNAVAILABLE_REASON = _load_native()


def check_broker_id(broker_id: int, brokers: int) -> None:
    """Raise ``ValueError`` unless ``broker_id`` is ``-1`` (all) or in ``1..brokers``."""
    if broker_id != -1 and not 1 <= broker_id <= brokers:
        raise ValueError(f"broker_id must be -1 (all brokers) or 1..{brokers}, got {broker_id}")


class NativeHandles:
    """Owns ``rd_kafka_t`` + ``rd_kafka_mock_cluster_t``; destroys them once, in order.

    Held by a :func:`weakref.finalize`, so the cluster is also destroyed when its
    owner is garbage-collected or at interpreter exit (atexit), while the library
    is still loaded.
    """

    def __init__(self, api: NativeApi, rk: int, mcluster: int) -> None:
        self.api = api
        self.lock = threading.Lock()
        self.rk: int | None = rk
        self.mcluster: int | None = mcluster

    def destroy(self) -> None:
        with self.lock:
            mcluster, rk = self.mcluster, self.rk
            self.mcluster = self.rk = None
            # rdkafka_mock.h: destroy the mock cluster before its rd_kafka_t.
            if mcluster is not None:
                self.api.lib.rd_kafka_mock_cluster_destroy(mcluster)
            if rk is not None:
                self.api.lib.rd_kafka_destroy(rk)

    def call(self, function: str, *args: Any) -> None:
        """``function(mcluster, *args)`` of the library; raises ``KafkaException`` for an
        error it returns, ``NotImplementedError`` when the library does not export it
        (an optional function), ``RuntimeError`` once the cluster is destroyed."""
        func = getattr(self.api.lib, function, None)
        if func is None:
            raise NotImplementedError(f"{function} is not in {self.api.path} (librdkafka {self.api.version})")
        with self.lock:  # destroy() cannot free the cluster during the call
            if self.mcluster is None:
                raise RuntimeError("EmbeddedCluster is closed")
            err = func(self.mcluster, *args)
        if err:
            raise KafkaException(KafkaError(err))


def open_cluster(num_brokers: int, group_initial_rebalance_delay_ms: int) -> tuple[NativeHandles, str, int]:
    """A mock cluster made with ``rd_kafka_mock_cluster_new()``: its handles, its
    bootstrap servers and the ``group.initial.rebalance.delay.ms`` in effect (the
    mock's default when the library cannot set it).

    Raises:
        RuntimeError: the C API is unavailable, or librdkafka failed.
    """
    api = NATIVE_API
    if api is None:
        raise RuntimeError(f"librdkafka mock C API unavailable: {NATIVE_UNAVAILABLE_REASON or 'disabled'}")
    lib = api.lib
    errstr = ctypes.create_string_buffer(_ERRSTR_SIZE)
    conf = lib.rd_kafka_conf_new()
    if not conf:
        raise RuntimeError("rd_kafka_conf_new() returned NULL")
    # log_level 4 hides the NOTICE "No `bootstrap.servers` configured" (expected
    # here: this handle only owns the cluster and never connects).
    for key, value in (("client.id", "kbear-embedded-cluster"), ("log_level", "4")):
        if lib.rd_kafka_conf_set(conf, key.encode(), value.encode(), errstr, _ERRSTR_SIZE):
            lib.rd_kafka_conf_destroy(conf)
            raise RuntimeError(f"rd_kafka_conf_set({key}): {errstr.value.decode(errors='replace')}")
    rk = lib.rd_kafka_new(_RD_KAFKA_PRODUCER, conf, errstr, _ERRSTR_SIZE)
    if not rk:  # on failure the conf is still ours
        lib.rd_kafka_conf_destroy(conf)
        raise RuntimeError(f"rd_kafka_new(): {errstr.value.decode(errors='replace')}")
    mcluster = lib.rd_kafka_mock_cluster_new(rk, num_brokers)
    if not mcluster:
        lib.rd_kafka_destroy(rk)
        raise RuntimeError(f"rd_kafka_mock_cluster_new(rk, {num_brokers}) returned NULL")
    handles = NativeHandles(api, rk, int(mcluster))
    bootstrap: str = lib.rd_kafka_mock_cluster_bootstraps(mcluster).decode()
    if not api.has_rebalance_delay:
        return handles, bootstrap, MOCK_DEFAULT_GROUP_INITIAL_REBALANCE_DELAY_MS
    lib.rd_kafka_mock_group_initial_rebalance_delay_ms(mcluster, group_initial_rebalance_delay_ms)
    return handles, bootstrap, group_initial_rebalance_delay_ms


_PROPERTY = re.compile(r"^([a-z][a-z0-9_.]*[a-z0-9])\s*\|")


@lru_cache(maxsize=1)
def librdkafka_properties() -> frozenset[str]:
    """Every configuration property name of the bundled librdkafka (global and topic
    level, aliases included: ``rd_kafka_conf_properties_show``, the table of
    librdkafka's ``CONFIGURATION.md``, written to a temporary file and read back);
    empty when it cannot be loaded. ``kbear lint`` suggests among them."""
    if NATIVE_API is None:
        return frozenset()
    libc = ctypes.CDLL(None)
    libc.fopen.restype = ctypes.c_void_p
    libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    libc.fclose.argtypes = [ctypes.c_void_p]
    with tempfile.NamedTemporaryFile(prefix="kbear-props-", suffix=".md") as tmp:
        handle = libc.fopen(tmp.name.encode(), b"w")
        if not handle:
            return frozenset()
        NATIVE_API.lib.rd_kafka_conf_properties_show(handle)
        libc.fclose(handle)
        text = Path(tmp.name).read_text(encoding="utf-8", errors="replace")
    return frozenset(m.group(1) for line in text.splitlines() if (m := _PROPERTY.match(line)))
