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
import importlib.util
import re
import threading
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from confluent_kafka import KafkaError, KafkaException

__all__ = [
    "MOCK_DEFAULT_GROUP_INITIAL_REBALANCE_DELAY_MS",
    "MOCK_DEFAULT_PARTITIONS",
    "NATIVE_API",
    "NATIVE_UNAVAILABLE_REASON",
    "NativeApi",
    "NativeMockCluster",
    "check_broker_id",
    "check_topic_args",
]

#: Partitions of a topic auto-created by the mock cluster (librdkafka
#: ``rdkafka_mock.c``: ``defaults.partition_cnt``).
MOCK_DEFAULT_PARTITIONS: Final = 4
#: The mock cluster's default ``group.initial.rebalance.delay.ms``.
MOCK_DEFAULT_GROUP_INITIAL_REBALANCE_DELAY_MS: Final = 3000

_RD_KAFKA_PRODUCER: Final = 0  # rd_kafka_type_t
_RD_KAFKA_CONF_OK: Final = 0  # rd_kafka_conf_res_t
_ERRSTR_SIZE: Final = 512
_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")

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
    # share groups (KIP-932), librdkafka >= 2.15; each void (mcluster, int), applying
    # to the share groups of the cluster and to those created later
    **{f"rd_kafka_mock_sharegroup_set_{name}": (None, [_P, _I]) for name in SHARE_GROUP_SETTERS.values()},
    # void (mcluster, int16_t ApiKey, size_t cnt, const rd_kafka_resp_err_t *errors)
    "rd_kafka_mock_push_request_errors_array": (
        None,
        [_P, ctypes.c_int16, ctypes.c_size_t, ctypes.POINTER(_I)],
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
    spec = importlib.util.find_spec("confluent_kafka")
    if spec is None or spec.origin is None:
        return []
    pkg = Path(spec.origin).parent
    site = pkg.parent
    found: list[Path] = []
    for directory, pattern in (
        (site / "confluent_kafka.libs", "librdkafka-*.so*"),  # manylinux (auditwheel)
        (pkg / ".dylibs", "librdkafka*.dylib"),  # macOS (delocate)
    ):
        if directory.is_dir():
            found.extend(sorted(directory.glob(pattern)))
    return found


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


def check_topic_args(name: str, num_partitions: int, replication_factor: int, brokers: int) -> None:
    """Validate ``create_topic`` arguments the way a real broker would; raise ``ValueError``."""
    if not isinstance(name, str) or not _TOPIC_NAME.fullmatch(name) or name in {".", ".."}:
        raise ValueError(
            f"invalid topic name {name!r}: use 1-249 characters from [A-Za-z0-9._-], not '.' or '..'"
        )
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be >= 1, got {num_partitions}")
    if not 1 <= replication_factor <= brokers:
        raise ValueError(
            f"replication_factor must be between 1 and the number of brokers ({brokers}), "
            f"got {replication_factor}"
        )


def check_broker_id(broker_id: int, brokers: int) -> None:
    """Raise ``ValueError`` unless ``broker_id`` is ``-1`` (all) or in ``1..brokers``."""
    if broker_id != -1 and not 1 <= broker_id <= brokers:
        raise ValueError(f"broker_id must be -1 (all brokers) or 1..{brokers}, got {broker_id}")


def check_request_errors(api_key: int, errors: Sequence[int]) -> None:
    if not 0 <= api_key <= 0x7FFF:
        raise ValueError(f"api_key must be a Kafka API key (0..32767), got {api_key}")
    if not errors:
        raise ValueError("errors must name at least one error code")


def _raise_for(err: int | None) -> None:
    if err:
        raise KafkaException(KafkaError(err))


class _NativeHandles:
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


def _new_owner(api: NativeApi) -> int:
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
    return int(rk)


class NativeMockCluster:
    """A mock cluster created with ``rd_kafka_mock_cluster_new()`` through ctypes."""

    def __init__(self, num_brokers: int, group_initial_rebalance_delay_ms: int) -> None:
        api = NATIVE_API
        if api is None:
            raise RuntimeError(
                f"librdkafka mock C API unavailable: {NATIVE_UNAVAILABLE_REASON or 'disabled'}"
            )
        self.num_brokers = num_brokers
        lib = api.lib
        rk = _new_owner(api)
        mcluster = lib.rd_kafka_mock_cluster_new(rk, num_brokers)
        if not mcluster:
            lib.rd_kafka_destroy(rk)
            raise RuntimeError(f"rd_kafka_mock_cluster_new(rk, {num_brokers}) returned NULL")
        self._h = _NativeHandles(api, rk, int(mcluster))
        self._finalizer = weakref.finalize(self, self._h.destroy)
        self._bootstrap: str = lib.rd_kafka_mock_cluster_bootstraps(mcluster).decode()
        if api.has_rebalance_delay:
            lib.rd_kafka_mock_group_initial_rebalance_delay_ms(mcluster, group_initial_rebalance_delay_ms)
            self.group_initial_rebalance_delay_ms = group_initial_rebalance_delay_ms
        else:
            self.group_initial_rebalance_delay_ms = MOCK_DEFAULT_GROUP_INITIAL_REBALANCE_DELAY_MS

    @property
    def bootstrap_servers(self) -> str:
        return self._bootstrap

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def _call(self, function: str, *args: Any) -> None:
        """``function(mcluster, *args)`` of the library; raises for an error it returns."""
        h = self._h
        with h.lock:  # close() cannot free the cluster during the call
            if h.mcluster is None:
                raise RuntimeError("EmbeddedCluster is closed")
            _raise_for(getattr(h.api.lib, function)(h.mcluster, *args))

    def create_topic(self, name: str, num_partitions: int, replication_factor: int) -> None:
        check_topic_args(name, num_partitions, replication_factor, self.num_brokers)
        self._call("rd_kafka_mock_topic_create", name.encode(), num_partitions, replication_factor)

    def set_share_group(self, settings: dict[str, int]) -> None:
        api = self._h.api
        for key, value in settings.items():
            name = f"rd_kafka_mock_sharegroup_set_{SHARE_GROUP_SETTERS[key]}"
            if not hasattr(api.lib, name):
                raise NotImplementedError(f"{name} is not in {api.path} (librdkafka {api.version})")
            self._call(name, value)

    def set_broker_down(self, broker_id: int) -> None:
        check_broker_id(broker_id, self.num_brokers)
        self._call("rd_kafka_mock_broker_set_down", broker_id)

    def set_broker_up(self, broker_id: int) -> None:
        check_broker_id(broker_id, self.num_brokers)
        self._call("rd_kafka_mock_broker_set_up", broker_id)

    def set_broker_rtt(self, broker_id: int, rtt_ms: int) -> None:
        check_broker_id(broker_id, self.num_brokers)
        if rtt_ms < 0:
            raise ValueError(f"rtt_ms must be >= 0, got {rtt_ms}")
        self._call("rd_kafka_mock_broker_set_rtt", broker_id, rtt_ms)

    def push_request_errors(self, api_key: int, errors: Sequence[int]) -> None:
        check_request_errors(api_key, errors)
        if not hasattr(self._h.api.lib, "rd_kafka_mock_push_request_errors_array"):
            raise NotImplementedError(
                "this librdkafka does not export rd_kafka_mock_push_request_errors_array"
            )
        codes = (_I * len(errors))(*errors)
        self._call("rd_kafka_mock_push_request_errors_array", api_key, len(errors), codes)

    def close(self) -> None:
        self._finalizer()  # runs at most once
