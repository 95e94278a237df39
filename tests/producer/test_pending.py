"""The record a RoutedProducer keeps of a message for the take-back (#27 item 3):
the compiled recording send and Pending (kbear/_pending.c) and the pure-Python ones
(the fallback, KBEAR_PURE_PYTHON=1) forward the same produce() call and route the
same delivery reports."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import KafkaError

from kbear.producer import _pending
from kbear.producer._pending import Rescue, plain_call


@pytest.fixture(params=["compiled", "pure-python"])
def recording(request: pytest.FixtureRequest) -> Callable[[Any, Rescue], Any]:
    """``recording_send(produce, rescue)`` of one implementation."""
    if request.param == "pure-python":
        return _pending._python_send
    compiled = _pending._RecordingSend
    if compiled is None:
        pytest.skip("compiled extension not active (not built, or KBEAR_PURE_PYTHON set)")

    def make(produce: Any, rescue: Rescue) -> Any:
        return compiled(produce, rescue, _pending._python_send(produce, rescue))

    return make


def _confluent_produce(
    topic: str,
    value: Any = None,
    key: Any = None,
    partition: int = -1,
    callback: Any = None,
    on_delivery: Any = None,
    timestamp: int = 0,
    headers: Any = None,
) -> dict[str, Any]:
    """What confluent-kafka's produce() reads of a call (its parameters, in its order)."""
    return dict(locals())


class Client:
    """A client's produce(): keeps each call as confluent-kafka would read it."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def produce(self, *args: Any, **kwargs: Any) -> None:
        seen = _confluent_produce(*args, **kwargs)
        assert seen.pop("on_delivery") is None  # (the record is given as the callback, by position)
        seen["on_delivery"] = seen.pop("callback")
        self.calls.append(seen)


def _rescue() -> Rescue:
    rescue = Rescue()
    rescue.call = plain_call(lambda *a, **k: None, lambda *a, **k: None)
    return rescue


def _reports() -> tuple[list[tuple[Any, Any]], Callable[[Any, Any], None]]:
    got: list[tuple[Any, Any]] = []
    return got, lambda err, msg: got.append((err, msg))


def test_the_call_reaches_the_client_with_a_record_as_its_callback(recording: Any) -> None:
    client, rescue = Client(), _rescue()
    send = recording(client.produce, rescue)
    _, own = _reports()
    send("t", b"v", callback=own)
    send("t", value=b"w", key=b"k", headers=[("h", b"1")], partition=2, timestamp=1234)
    send("t", b"x", b"k", 1, own, None, 99)  # confluent-kafka's order
    first, second, third = client.calls
    assert {k: first[k] for k in ("topic", "value", "key", "partition", "timestamp", "headers")} == {
        "topic": "t",
        "value": b"v",
        "key": None,
        "partition": -1,
        "timestamp": 0,
        "headers": None,
    }
    pending = first["on_delivery"]
    assert pending.own is own and pending.headers is None and pending.partition == -1
    assert pending.timestamp == 0  # a callback alone: its shared record, no CreateTime
    assert pending.rescue is rescue
    assert second["value"] == b"w" and second["key"] == b"k" and second["partition"] == 2
    assert second["timestamp"] == 1234 and second["headers"] == [("h", b"1")]
    kept = second["on_delivery"]
    assert kept.own is None and list(kept.headers) == [("h", b"1")]
    assert kept.partition == 2 and kept.timestamp == 1234
    assert third["key"] == b"k" and third["partition"] == 1 and third["timestamp"] == 99
    assert third["on_delivery"].own is own


def test_a_callback_alone_shares_a_record_unless_the_cluster_is_suspect(recording: Any) -> None:
    client, rescue = Client(), _rescue()
    send = recording(client.produce, rescue)
    _, own = _reports()
    send("t", b"1", callback=own)
    send("t", b"2", on_delivery=own)
    rescue.suspect(True)
    before = int(time.time() * 1000)
    send("t", b"3", callback=own)
    after = int(time.time() * 1000)
    first, second, third = (c["on_delivery"] for c in client.calls)
    assert first is second and first.own is own
    assert third is not first and third.own is own
    assert before <= third.timestamp <= after  # its CreateTime kept


def test_callback_wins_over_on_delivery_as_in_confluent_kafka(recording: Any) -> None:
    client = Client()
    _, first = _reports()
    _, second = _reports()
    recording(client.produce, _rescue())("t", b"v", on_delivery=first, callback=second)
    recording(client.produce, _rescue())("t", b"v", on_delivery=first)
    assert client.calls[0]["on_delivery"].own is second
    assert client.calls[1]["on_delivery"].own is first


@pytest.mark.parametrize(
    "args, kwargs",
    [((), {"value": b"v"}), (("t",), {"topic": "t"}), (("t",), {"colour": 1}), (("t",) * 9, {})],
    ids=["no topic", "topic twice", "unknown keyword", "too many"],
)
def test_a_call_produce_cannot_take_is_refused_with_a_type_error(
    recording: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    client = Client()
    with pytest.raises(TypeError):
        recording(client.produce, _rescue())(*args, **kwargs)
    assert client.calls == []


def _pending_of(recording: Any, rescue: Rescue, own: Any) -> Any:
    client = Client()
    recording(client.produce, rescue)("t", b"v", callback=own)
    return client.calls[0]["on_delivery"]


def test_a_delivery_reaches_the_own_callback_and_ends_the_suspicion(recording: Any) -> None:
    rescue = _rescue()
    got, own = _reports()
    pending = _pending_of(recording, rescue, own)
    rescue.suspect(True)
    assert pending(None, "msg") is None
    assert got == [(None, "msg")]
    assert not rescue.suspected


def test_without_an_own_callback_the_report_goes_to_the_configured_one(recording: Any) -> None:
    rescue = _rescue()
    got, report = _reports()
    rescue.report = report
    pending = _pending_of(recording, rescue, None)
    err = KafkaError(KafkaError._MSG_TIMED_OUT)
    pending(err, "msg")
    assert got == [(err, "msg")]


@pytest.mark.parametrize("code", [KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT])
def test_a_purge_is_offered_to_the_take_back_first(recording: Any, code: int) -> None:
    rescue = _rescue()
    got, own = _reports()
    pending = _pending_of(recording, rescue, own)
    offered: list[tuple[Any, Any, Any]] = []
    answer = [True]

    def resend(err: Any, msg: Any, record: Any) -> bool:
        offered.append((err, msg, record))
        return answer[0]

    err = KafkaError(code)
    pending(err, "msg")  # no take-back under way: the callback sees the purge
    assert got == [(err, "msg")] and offered == []
    rescue.resend = resend
    pending(err, "msg")  # re-sent: its one report will be that of its final delivery
    assert offered == [(err, "msg", pending)] and got == [(err, "msg")]
    answer[0] = False
    pending(err, "msg")  # not re-sent: reported failed
    assert got == [(err, "msg"), (err, "msg")]
    other = KafkaError(KafkaError._MSG_TIMED_OUT)
    pending(other, "msg")  # not a purge: not offered
    assert len(offered) == 2 and got[-1] == (other, "msg")


def test_what_a_callback_raises_reaches_the_caller(recording: Any) -> None:
    def own(err: Any, msg: Any) -> None:
        raise ZeroDivisionError

    pending = _pending_of(recording, _rescue(), own)
    with pytest.raises(ZeroDivisionError):
        pending(None, "msg")


@pytest.fixture(params=["compiled", "pure-python"])
def plain(request: pytest.FixtureRequest) -> Any:
    """``PlainCall(target, fallback, reported)`` of one implementation."""
    if request.param == "pure-python":
        return _pending._PurePlainCall
    if _pending._PlainCall is None:
        pytest.skip("compiled extension not active (not built, or KBEAR_PURE_PYTHON set)")
    return _pending._PlainCall


def _cb(err: Any, msg: Any) -> None:
    """A delivery callback."""


#: (args, kwargs) of a produce() call -> recorded without / with a configured on_delivery
CALLS: list[tuple[tuple[Any, ...], dict[str, Any], bool, bool]] = [
    (("t", b"v", b"k"), {}, False, False),
    (("t",), {"value": b"v", "key": b"k"}, False, False),
    ((), {"topic": "t", "value": b"v"}, False, False),
    (("t", b"v"), {"callback": _cb}, True, True),
    (("t", b"v"), {"on_delivery": _cb}, True, True),
    (("t", b"v"), {"callback": None}, False, False),
    (("t", b"v", None, -1, _cb), {}, True, True),
    (("t", b"v", None, -1, None, _cb), {}, True, True),
    (("t", b"v", None, 2), {}, False, True),
    (("t", b"v"), {"partition": 2}, False, True),
    (("t", b"v"), {"timestamp": 5}, False, True),
    (("t", b"v"), {"headers": [("h", b"1")]}, False, True),
    (("t", b"v"), {"headers": [("h", b"1")], "callback": _cb}, True, True),
    (("t", b"v"), {"colour": 1}, True, True),
    (("t",) * 9, {}, True, True),
]


@pytest.mark.parametrize("reported", [False, True], ids=["no on_delivery", "on_delivery configured"])
@pytest.mark.parametrize("args, kwargs, bare, configured", CALLS)
def test_which_calls_are_recorded(
    plain: Any, reported: bool, args: tuple[Any, ...], kwargs: dict[str, Any], bare: bool, configured: bool
) -> None:
    """A call is recorded when it has a callback of its own, or (with an on_delivery
    configured) a partition, timestamp or headers; every call while suspect."""
    seen: list[str] = []
    call = plain(lambda *a, **k: seen.append("client"), lambda *a, **k: seen.append("record"), reported)
    call(*args, **kwargs)
    assert seen == ["record" if (configured if reported else bare) else "client"]
    call.record = True  # suspect
    call(*args, **kwargs)
    assert seen[-1] == "record"


@pytest.mark.parametrize(
    "args, kwargs",
    [
        (("t",), {"value": b"v", "key": b"k"}),
        ((), {"topic": "t", "key": b"k"}),
        (("t", b"v"), {"headers": [("h", b"1")]}),
        (("t",), {"value": b"v", "key": b"k", "partition": 2, "timestamp": 5, "headers": [("h", b"1")]}),
        (("t", b"v"), {"callback": None, "on_delivery": None, "timestamp": 7}),
        (("t", b"v", b"k", 3), {}),
    ],
)
def test_a_call_not_recorded_reaches_the_client_with_the_same_arguments(
    plain: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    """Forwarded to the client as given, or (compiled) by position: what
    confluent-kafka reads of it is the same."""
    got: list[dict[str, Any]] = []
    call = plain(lambda *a, **k: got.append(_confluent_produce(*a, **k)), lambda *a, **k: None, False)
    call(*args, **kwargs)
    assert got == [_confluent_produce(*args, **kwargs)]


def test_a_recorded_call_reaches_the_client_with_the_same_arguments(recording: Any) -> None:
    """Every argument reaches the client as confluent-kafka would read it, the
    callback replaced by the record."""
    calls = [
        (("t", b"v"), {"callback": _cb}),
        (("t",), {"value": b"v", "key": b"k", "on_delivery": _cb, "headers": [("h", b"1")]}),
        (("t", b"v", b"k", 2, None, _cb, 9), {}),
        (("t",), {"key": b"k", "timestamp": 4, "callback": _cb}),
    ]
    for args, kwargs in calls:
        got: list[dict[str, Any]] = []
        send = recording(lambda *a, **k: got.append(_confluent_produce(*a, **k)), _rescue())  # noqa: B023
        send(*args, **kwargs)
        (seen,) = got
        record = seen.pop("callback")
        assert record.own is _cb and seen.pop("on_delivery") is None
        want = _confluent_produce(*args, **kwargs)
        del want["callback"], want["on_delivery"]
        assert seen == want


class _Msg:
    """A delivered message: its topic, renamed by set_topic()."""

    def __init__(self, topic: str) -> None:
        self.name = topic

    def topic(self) -> str:
        return self.name

    def set_topic(self, name: str) -> None:
        self.name = name


def test_the_configured_report_gets_the_logical_name_of_a_remapped_topic(recording: Any) -> None:
    """Without a callback of its own, a recorded message's report goes to the
    configuration's on_delivery, under the logical name once its topic is remapped
    (the compiled record calls on_delivery directly while nothing is remapped)."""
    rescue = _rescue()
    seen: list[tuple[Any, str]] = []
    logical: dict[str, str] = {}
    _pending.delivery_callback(lambda err, msg: seen.append((err, msg.topic())), logical, rescue)
    pending = _pending_of(recording, rescue, None)
    pending(None, _Msg("t"))
    logical["t-physical"] = "t"
    pending(None, _Msg("t-physical"))
    pending(None, _Msg("other"))
    assert seen == [(None, "t"), (None, "t"), (None, "other")]


def test_the_configured_on_delivery_ends_the_suspicion_and_offers_a_purge_first() -> None:
    """A message kbear keeps no record of reports through the configuration's
    on_delivery: a delivery there ends the cluster's suspicion (it is reachable), a
    purge is offered to the take-back first."""
    rescue = _rescue()
    got, user = _reports()
    deliver = _pending.delivery_callback(user, {}, rescue)
    rescue.suspect(True)
    deliver(None, "msg")
    assert not rescue.suspected and got == [(None, "msg")]
    offered: list[Any] = []
    rescue.resend = lambda err, msg, record: offered.append(record) or True
    purge = KafkaError(KafkaError._PURGE_QUEUE)
    deliver(purge, "queued")
    (record,) = offered  # (a record of no message: nothing kept but the rescue)
    assert record.own is None and record.headers is None and record.partition == -1 and record.timestamp == 0
    assert len(got) == 1  # re-sent: its one report comes later
