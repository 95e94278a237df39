"""produce() over several clusters with each dispatcher: the compiled one (kbear._cdispatch)
and the pure-Python fallback (KBEAR_PURE_PYTHON=1): same deliveries, same errors, same
route-change guarantees."""

from __future__ import annotations

import gc
import importlib.util
import inspect
import os
import shutil
import subprocess
import sys
import sysconfig
import time
import types
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from conftest import FAST_GROUP, plain_producer, read_all, rewrite_rules, rule
from kbear import NoRouteError, RoutedConsumer, RoutedProducer, Router, _compiled
from kbear import dispatcher as active_dispatcher
from kbear.consumer import _turns
from kbear.consumer._polling import PollLoop
from kbear.producer import _dispatch
from kbear.testing import EmbeddedCluster

NO_WATCH = {"kbear.reload.interval.ms": 0}
ROOT = Path(__file__).resolve().parents[2]

Clusters = tuple[EmbeddedCluster, EmbeddedCluster]
Topics = tuple[str, str, str, str]


def _can_compile() -> bool:
    """A C compiler and Python's headers are here: an install must have built the extension."""
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    include = sysconfig.get_paths()["include"]
    return shutil.which(cc) is not None and (Path(include) / "Python.h").exists()


@pytest.fixture(params=["compiled", "pure-python"])
def dispatcher(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The dispatcher the producers built in the test use."""
    if request.param == "compiled":
        if _dispatch._Dispatcher is None or _turns._TurnTaker is None:
            pytest.skip("compiled dispatcher not active (not built, or KBEAR_PURE_PYTHON set)")
    else:
        monkeypatch.setattr(_dispatch, "_Dispatcher", None)
        monkeypatch.setattr(_turns, "_TurnTaker", None)
    return str(request.param)


@pytest.fixture
def topics(two_clusters: Clusters, unique: Callable[[str], str]) -> Topics:
    """(on_a, on_b, remapped, physical): on A, on B, and a topic sent as ``physical`` on B."""
    a, b = two_clusters
    on_a, on_b, remapped, physical = (unique(n) for n in ("on-a", "on-b", "logical", "physical"))
    a.create_topic(on_a, 3)
    b.create_topic(on_b, 3)
    b.create_topic(physical, 2)
    return on_a, on_b, remapped, physical


@pytest.fixture
def router(make_router: Callable[..., Router], topics: Topics) -> Router:
    _on_a, on_b, remapped, physical = topics
    return make_router(
        [
            rule("global", "use cluster A", isGlobal=True),
            rule("to-b", "use cluster B", topic=on_b),
            rule("remap", f"use cluster B, topic {physical}", topic=remapped),
        ]
    )


def error_of(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[type[BaseException], str]:
    try:
        fn(*args, **kwargs)
    except Exception as exc:
        return type(exc), str(exc)
    raise AssertionError(f"no error for {args!r} {kwargs!r}")


# --------------------------------------------------------------------------- which one


def test_the_compiled_dispatcher_is_active_where_it_can_be_built() -> None:
    if os.environ.get(_compiled.PURE_PYTHON_ENV, "") not in ("", "0"):
        assert active_dispatcher() == "pure-python"
    elif _dispatch._Dispatcher is not None:
        assert active_dispatcher() == "compiled"
    else:
        assert active_dispatcher() == "pure-python"
        assert not _can_compile(), (
            "a C compiler and Python.h are here but kbear._cdispatch is not built: "
            "`pip install -e .` (or `python setup.py build_ext --inplace`) builds it"
        )


@pytest.mark.parametrize("value", ["1", "0"])
def test_the_environment_variable_forces_the_pure_python_dispatcher(value: str) -> None:
    env = {**os.environ, _compiled.PURE_PYTHON_ENV: value, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", "import kbear; print(kbear.dispatcher())"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.strip()
    if value == "1":
        assert out == "pure-python"
    else:  # "0" is as unset
        built = importlib.util.find_spec("kbear._cdispatch") is not None
        assert out == ("compiled" if built else "pure-python")


def test_produce_is_the_chosen_dispatcher(
    dispatcher: str, router: Router, closing: Callable[[Any], Any]
) -> None:
    p = closing(RoutedProducer(NO_WATCH, router=router))
    if dispatcher == "compiled":
        assert type(p.produce).__name__ == "Dispatcher"
    else:
        assert isinstance(p.produce, types.FunctionType)
    assert p.produce.__doc__ == RoutedProducer.produce.__doc__


def test_produce_is_looked_up_as_a_method_when_compiled(
    router: Router, closing: Callable[[Any], Any]
) -> None:
    """``routed.produce(t, v)`` as people write it looks ``produce`` up on every call:
    with the extension built, ``produce`` is a method descriptor of the class (no
    instance attribute over it, no ``__getattr__`` on the class), which the
    interpreter looks up as fast as a plain method (bench/run.py --only dispatch)."""
    if _compiled.EXTENSION is None:
        pytest.skip("compiled dispatcher not active (not built, or KBEAR_PURE_PYTHON set)")
    p = closing(RoutedProducer(NO_WATCH, router=router))
    assert type(vars(RoutedProducer)["produce"]).__name__ == "FastMethod"
    assert not any("__getattr__" in vars(c) for c in type(p).__mro__)
    assert "produce" not in vars(p)
    assert type(p.produce).__name__ == "Dispatcher"  # hoisting still gets the dispatcher


# --------------------------------------------------------------------------- behaviour under both


def test_arguments_reach_the_cluster_untouched(
    dispatcher: str,
    router: Router,
    closing: Callable[[Any], Any],
    two_clusters: Clusters,
    topics: Topics,
) -> None:
    a, b = two_clusters
    on_a, on_b, remapped, physical = topics
    reports: list[tuple[Any, str, bytes]] = []

    def report(err: Any, msg: Any) -> None:
        reports.append((err, msg.topic(), msg.value()))

    p = closing(RoutedProducer(NO_WATCH, router=router))
    for topic in (on_a, on_b, remapped):
        p.produce(
            topic,
            b"pos-" + topic.encode(),
            b"k1",
            1,
            report,
            timestamp=1_700_000_000_000,
            headers=[("h", b"1")],
        )
        p.produce(
            topic=topic,
            value=b"kw-" + topic.encode(),
            key=b"k2",
            partition=0,
            on_delivery=report,
            timestamp=1_700_000_000_001,
            headers={"h": b"2"},
        )
        p.produce(topic, b"mixed-" + topic.encode(), key=b"k3", callback=report)
    assert p.flush(10) == 0
    assert sorted(reports) == sorted(
        (None, t, f"{kind}-{t}".encode()) for t in (on_a, on_b, remapped) for kind in ("pos", "kw", "mixed")
    )
    for cluster, topic, name in ((a, on_a, on_a), (b, on_b, on_b), (b, physical, remapped)):
        got = {m.key(): m for m in read_all(cluster, topic)}
        assert sorted(got) == [b"k1", b"k2", b"k3"]
        assert got[b"k1"].value() == b"pos-" + name.encode()
        assert (got[b"k1"].partition(), got[b"k1"].timestamp()[1], got[b"k1"].headers()) == (
            1,
            1_700_000_000_000,
            [("h", b"1")],
        )
        assert (got[b"k2"].partition(), got[b"k2"].timestamp()[1], got[b"k2"].headers()) == (
            0,
            1_700_000_000_001,
            [("h", b"2")],
        )
        assert got[b"k3"].value() == b"mixed-" + name.encode()


def test_errors_are_those_of_the_pure_python_dispatcher(
    dispatcher: str,
    make_router: Callable[..., Router],
    closing: Callable[[Any], Any],
    topics: Topics,
    unique: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    on_a, on_b, _remapped, _physical = topics
    lost = unique("lost")
    router = make_router(
        [rule("to-a", "use cluster A", topic=on_a), rule("to-b", "use cluster B", topic=on_b)]
    )
    p = closing(RoutedProducer(NO_WATCH, router=router, topics=[on_a, on_b]))
    with monkeypatch.context() as m:
        m.setattr(_dispatch, "_Dispatcher", None)
        reference = closing(RoutedProducer(NO_WATCH, router=router, topics=[on_a, on_b]))
    assert isinstance(reference.produce, types.FunctionType)
    calls: list[tuple[tuple[Any, ...], dict[str, Any], type[BaseException]]] = [
        ((), {}, TypeError),
        ((on_a, b"v"), {"topic": on_a}, TypeError),
        ((), {"topic": on_a, "nosuch": 1}, TypeError),
        ((on_b, b"v", b"k", "not-a-partition"), {}, TypeError),
        ((on_a, b"v"), {"nosuch": 1}, TypeError),
        ((on_b,), {"value": b"v", "headers": 5}, TypeError),
        ((on_b, "v"), {"timestamp": "now"}, TypeError),
        ((lost, b"v"), {}, NoRouteError),
        ((), {"topic": lost, "value": b"v"}, NoRouteError),
        (([on_a], b"v"), {}, TypeError),
    ]
    for args, kwargs, kind in calls:
        expected = error_of(reference.produce, *args, **kwargs)
        assert expected[0] is kind or issubclass(expected[0], kind), (args, kwargs, expected)
        assert error_of(p.produce, *args, **kwargs) == expected, (args, kwargs)
    assert len(p) == len(reference) == 0
    stale, stale_reference = p.produce, reference.produce
    p.close()
    reference.close()
    assert error_of(stale, on_a, b"v") == error_of(stale_reference, on_a, b"v")
    assert error_of(stale, on_a, b"v")[0] is RuntimeError


def test_a_move_drains_and_stale_references_still_deliver(
    dispatcher: str,
    two_clusters: Clusters,
    make_config: Callable[..., Path],
    unique: Callable[[str], str],
) -> None:
    """A topic moves from A to B while produce() is the dispatcher: the messages sent
    before the reload, and those sent through a reference read before it (before the
    producer applied the change), are delivered on A before anything goes to B."""
    a, b = two_clusters
    moving, on_b = unique("moving"), unique("on-b")
    for cluster in two_clusters:
        cluster.create_topic(moving, 2)
    b.create_topic(on_b, 1)

    def rules(cluster: str) -> list[dict[str, Any]]:
        return [
            rule("move", f"use cluster {cluster}", topic=moving),
            rule("to-b", "use cluster B", topic=on_b),
            rule("global", "use cluster A", isGlobal=True),
        ]

    conf_dir = make_config(rules("A"))
    router = Router.from_path(conf_dir)
    reports: list[tuple[Any, bytes]] = []
    p = RoutedProducer(
        {**NO_WATCH, "linger.ms": 1000, "on_delivery": lambda e, m: reports.append((e, m.value()))},
        router=router,
    )
    try:
        stale = p.produce
        if dispatcher == "compiled":
            assert type(stale).__name__ == "Dispatcher"
        before = [f"A-{i}".encode() for i in range(20)]
        for v in before:
            stale(moving, v)
        assert len(p) == len(before)  # kept in flight by linger.ms
        rewrite_rules(conf_dir, rules("B"))
        assert router.reload() is True
        # unbound: the next call takes the method's own path and applies the change
        assert getattr(p.produce, "__func__", None) is RoutedProducer.produce
        stale(moving, b"stale-before-apply")  # not applied yet: still A's client
        p.produce(moving, b"B-0")  # applies: A drained, then B
        stale(moving, b"stale-after-apply")  # the table the stale reference reads says B
        p.produce(on_b, b"other")
        assert p.flush(10) == 0
    finally:
        p.close(10)
        router.close()
    assert all(err is None for err, _ in reports)
    values = [v for _, v in reports]
    on_a = [*before, b"stale-before-apply"]
    assert sorted(values[: len(on_a)]) == sorted(on_a)  # A drained before B was used
    assert sorted(m.value() for m in read_all(a, moving)) == sorted(on_a)
    assert sorted(m.value() for m in read_all(b, moving)) == [b"B-0", b"stale-after-apply"]


def test_an_unclosed_producer_is_collected(dispatcher: str, router: Router, topics: Topics) -> None:
    """The dispatcher holds the producer (through its fallback) and the producer holds
    the dispatcher: the collector must still free an unclosed producer."""
    p: RoutedProducer | None = RoutedProducer(NO_WATCH, router=router, topics=list(topics[:2]))
    assert p is not None
    ref = weakref.ref(p)
    p.produce(topics[1], b"v")
    p.flush(10)
    p = None
    for _ in range(3):
        gc.collect()
    assert ref() is None


# --------------------------------------------------------------------------- consumer: poll/consume


@pytest.fixture
def filled(two_clusters: Clusters, topics: Topics) -> dict[str, list[bytes]]:
    """12 messages in each of on_a (cluster A, 3 partitions) and on_b (cluster B)."""
    a, b = two_clusters
    on_a, on_b, _remapped, _physical = topics
    sent: dict[str, list[bytes]] = {}
    for cluster, topic in ((a, on_a), (b, on_b)):
        p = plain_producer(cluster)
        sent[topic] = [f"{topic}-{i}".encode() for i in range(12)]
        for i, v in enumerate(sent[topic]):
            p.produce(topic, v, partition=i % 3)
        assert p.flush(10) == 0
    return sent


def two_cluster_consumer(
    router: Router, closing: Callable[[Any], Any], unique: Callable[[str], str], topics: list[str]
) -> RoutedConsumer:
    c = closing(RoutedConsumer({"group.id": unique("g"), **FAST_GROUP, **NO_WATCH}, router=router))
    c.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t in topics for p in range(3)])
    return c


def is_bound(c: RoutedConsumer) -> bool:
    """A fast path is bound: ``c.poll`` is not the class method bound to ``c``."""
    return not isinstance(c.poll, types.MethodType)


def test_poll_and_consume_are_looked_up_as_methods_when_compiled(
    router: Router,
    closing: Callable[[Any], Any],
    unique: Callable[[str], str],
    filled: dict[str, list[bytes]],
) -> None:
    """``consumer.poll(0)`` / ``consumer.consume(100, 0)`` as people write them look the
    method up on every call: with the extension built, both are method descriptors of
    the class and a bound fast path lives in a slot, never in the instance's
    dictionary (which the interpreter would look in first, at every call:
    bench/run.py --only turns)."""
    if _compiled.EXTENSION is None:
        pytest.skip("compiled dispatcher not active (not built, or KBEAR_PURE_PYTHON set)")
    c = two_cluster_consumer(router, closing, unique, list(filled))
    for name in ("poll", "consume"):
        assert type(vars(RoutedConsumer)[name]).__name__ == "FastMethod"
    assert not any("__getattr__" in vars(k) for k in type(c).__mro__)
    deadline = time.monotonic() + 10
    while not is_bound(c) and time.monotonic() < deadline:
        c.poll(0.05)
    assert is_bound(c)
    assert "poll" not in vars(c) and "consume" not in vars(c)
    assert type(c.poll).__name__ == type(c.consume).__name__ == "TurnTaker"  # hoisting gets the turn taker
    assert RoutedConsumer.poll.__doc__ == PollLoop.poll.__doc__
    assert inspect.signature(RoutedConsumer.consume) == inspect.signature(PollLoop.consume)


def test_poll_and_consume_take_turns_over_the_clusters(
    dispatcher: str,
    router: Router,
    closing: Callable[[Any], Any],
    unique: Callable[[str], str],
    filled: dict[str, list[bytes]],
) -> None:
    """Every call shape of poll()/consume() returns the messages of both clusters."""
    c = two_cluster_consumer(router, closing, unique, list(filled))
    calls: list[Callable[[], list[Any]]] = [
        lambda: [m for m in [c.poll(0.2)] if m is not None],
        lambda: [m for m in [c.poll()] if m is not None] if got else [],  # after the first: no wait
        lambda: [m for m in [c.poll(timeout=0.2)] if m is not None],
        lambda: c.consume(),
        lambda: c.consume(3),
        lambda: c.consume(3, 0.2),
        lambda: c.consume(num_messages=2, timeout=0.2),
        lambda: c.consume(timeout=0.2),
        lambda: c.consume(2, timeout=0.2),
    ]
    got: list[Any] = []
    kinds: set[str] = set()
    deadline = time.monotonic() + 20
    i = 0
    while len(got) < 24 and time.monotonic() < deadline:
        got += [m for m in calls[i % len(calls)]() if m.error() is None]
        kinds.add(type(c.poll).__name__)
        i += 1
    assert sorted(m.value() for m in got) == sorted(v for vs in filled.values() for v in vs)
    # the bound path was in use (not only the class methods)
    assert ("TurnTaker" if dispatcher == "compiled" else "function") in kinds


def test_poll_and_consume_errors_are_those_of_the_pure_python_turn_taking(
    dispatcher: str,
    router: Router,
    closing: Callable[[Any], Any],
    unique: Callable[[str], str],
    filled: dict[str, list[bytes]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def bind(consumer: RoutedConsumer) -> None:  # until it is on the bound (turn-taking) path
        deadline = time.monotonic() + 10
        while not is_bound(consumer) and time.monotonic() < deadline:
            consumer.poll(0.05)
        assert is_bound(consumer)

    c = two_cluster_consumer(router, closing, unique, list(filled))
    bind(c)
    with monkeypatch.context() as m:
        # the fast paths are bound in the poll loop (a call before the first poll
        # unbinds them): the reference is polled until bound with the extension off
        m.setattr(_turns, "_TurnTaker", None)
        reference = two_cluster_consumer(router, closing, unique, list(filled))
        bind(reference)
    assert isinstance(reference.poll, types.FunctionType)
    bad: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
        ("poll", (0.1, 2), {}),
        ("poll", (), {"nosuch": 1}),
        ("poll", (0.1,), {"timeout": 0.1}),
        ("consume", (-1,), {}),
        ("consume", (1_000_001, 0.1), {}),
        ("consume", ("x",), {}),
        ("consume", (1, 0.1, 3), {}),
        ("consume", (1,), {"num_messages": 1}),
        ("consume", (), {"nosuch": 1}),
        ("consume", (10**30,), {}),
    ]
    for name, args, kwargs in bad:
        expected = error_of(getattr(reference, name), *args, **kwargs)
        assert error_of(getattr(c, name), *args, **kwargs) == expected, (name, args, kwargs)
    assert c.poll.__doc__ == RoutedConsumer.poll.__doc__
    assert c.consume.__doc__ == RoutedConsumer.consume.__doc__


def test_an_unclosed_consumer_is_collected(
    dispatcher: str, router: Router, unique: Callable[[str], str], filled: dict[str, list[bytes]]
) -> None:
    c: RoutedConsumer | None = RoutedConsumer(
        {"group.id": unique("g"), **FAST_GROUP, **NO_WATCH}, router=router
    )
    assert c is not None
    c.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t in filled for p in range(3)])
    deadline = time.monotonic() + 10
    while not is_bound(c) and time.monotonic() < deadline:
        c.poll(0.05)
    assert is_bound(c)
    ref = weakref.ref(c)
    c.close()  # closing does not unbind what the collector must free
    c = None
    for _ in range(3):
        gc.collect()
    assert ref() is None
