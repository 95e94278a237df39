"""Shared fixtures: two in-process Kafka clusters, kbear configuration directories,
and helpers to read back what reached each cluster with plain confluent-kafka clients."""

from __future__ import annotations

import gc
import inspect
import itertools
import os
import re
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Consumer, Producer, TopicPartition
from hypothesis import settings as hypothesis_settings

from kbear import Router
from kbear.consumer._closing import close_consumer
from kbear.reload import replace_file
from kbear.testing import EmbeddedCluster

#: Property tests (hypothesis) draw the same examples on every run, so that a run
#: of the suite, CI's included, does not pass or fail by the draw; set
#: KBEAR_HYPOTHESIS_EXPLORE=1 to draw new ones (after changing what they test:
#: a random run found two documents the fast YAML reader took wrongly).
hypothesis_settings.register_profile("kbear-fixed", derandomize=True)
hypothesis_settings.register_profile("kbear-explore", derandomize=False)
hypothesis_settings.load_profile(
    "kbear-explore" if os.environ.get("KBEAR_HYPOTHESIS_EXPLORE") else "kbear-fixed"
)

#: Consumer settings that keep group joins fast on the mock cluster: with the
#: next-generation protocol a join takes ~0.1 s and a resubscribe is immediate
#: (the classic protocol waits ~session.timeout.ms on a resubscribe).
FAST_GROUP = {"group.protocol": "consumer", "auto.offset.reset": "earliest"}

#: A route-rules.yaml entry, as made by :func:`rule`.
Rule = Mapping[str, Any]


@pytest.fixture
def two_clusters() -> Iterator[tuple[EmbeddedCluster, EmbeddedCluster]]:
    """Clusters ``A`` and ``B``, closed after every client of the test (see ``closing``),
    after the clients only garbage still held (:func:`destroy_unreachable_clients`), and
    after the closes kbear left running in the background (:func:`background_closes_end`)."""
    a = EmbeddedCluster()
    b = EmbeddedCluster()
    earlier = set(background_closes())
    try:
        yield a, b
    finally:
        try:
            destroy_unreachable_clients()
            background_closes_end([t for t in background_closes() if t not in earlier], a, b)
        finally:
            b.close()
            a.close()


def destroy_unreachable_clients() -> None:
    """Collect the garbage the test left (``gc.collect()``), so that a confluent-kafka
    client it dropped but a reference cycle still held (its frame kept by an exception's
    traceback: a ``pytest.raises`` block, a retried call) is destroyed while its cluster
    still answers, not at some later test's collection: in between, its librdkafka
    threads print "Connection refused" lines into that test's stderr."""
    gc.collect()


#: Longest wait for kbear's background closes at a test's teardown, seconds.
BACKGROUND_CLOSE_WAIT_S = 20.0


def background_closes() -> list[threading.Thread]:
    """The closes RoutedConsumers left running in the background: their
    ``kbear-close-<cluster>`` threads (the client of a cluster held for lost)."""
    return [t for t in threading.enumerate() if t.name.startswith("kbear-close-")]


def background_closes_end(closes: Sequence[threading.Thread], *clusters: EmbeddedCluster) -> None:
    """Wait (at most :data:`BACKGROUND_CLOSE_WAIT_S`) for ``closes`` (threads of
    :func:`background_closes`), every broker of ``clusters`` up again first: librdkafka's close
    commits what was consumed and waits for the group coordinator to answer (45 s
    with ``group.protocol=consumer`` when it never does), so a cluster closed under
    it leaves a client retrying its connection every 50 ms for the rest of the run.
    Once the broker is back, such a close ends in about 0.6 s. A close still running
    after the wait is reported as a warning."""
    if not closes:
        return
    for cluster in clusters:
        if not cluster.closed:  # a test may have closed a cluster to lose it for good
            cluster.set_broker_up(-1)
    deadline = time.monotonic() + BACKGROUND_CLOSE_WAIT_S
    for thread in closes:
        thread.join(max(0.0, deadline - time.monotonic()))
    left = [t.name for t in closes if t.is_alive()]
    if left:
        warnings.warn(
            f"kbear's background closes {left} still running after {BACKGROUND_CLOSE_WAIT_S:.0f} s "
            "at teardown; their clusters close under them",
            RuntimeWarning,
            stacklevel=1,
        )


@pytest.fixture
def native_clusters(
    two_clusters: tuple[EmbeddedCluster, EmbeddedCluster],
) -> tuple[EmbeddedCluster, EmbeddedCluster]:
    """``two_clusters``, named for the tests that take their brokers down and up."""
    return two_clusters


@pytest.fixture
def kbear_events() -> Iterator[list[Any]]:
    """Every kbear event (``kbear._events``) emitted during the test, in order."""
    from kbear import _events

    seen: list[Any] = []
    _events.subscribe(seen.append)
    try:
        yield seen
    finally:
        _events.unsubscribe(seen.append)


@pytest.fixture
def closing(two_clusters: tuple[EmbeddedCluster, EmbeddedCluster]) -> Iterator[Callable[[Any], Any]]:
    """Register a client (anything with ``close()``) to close at teardown.

    Depends on ``two_clusters`` so that the clients are closed before the
    clusters: a consumer whose cluster is gone blocks in ``close()`` for
    ``session.timeout.ms``. Closing twice is harmless for kbear clients; plain
    confluent-kafka consumers raise on a second close, which is ignored here.
    """
    clients: list[Any] = []

    def register(client: Any) -> Any:
        clients.append(client)
        return client

    yield register
    for client in reversed(clients):
        _bounded_close(client)


#: Longest wait for one client's close() at teardown, seconds (see _bounded_close).
CLOSE_WAIT_S = 60.0


def _bounded_close(client: Any) -> None:
    """``client.close()``, waited for at most :data:`CLOSE_WAIT_S` seconds.

    A plain confluent-kafka ``Consumer`` leaves its group first, as kbear's own
    clients do (``kbear.consumer._closing``): librdkafka's close can otherwise hang
    for good, holding the GIL, when an assignment arrives while it closes (a member
    that subscribed and closed before its first poll; confluentinc/librdkafka#4041,
    #4884). The wait bounds any other hang that lets Python run: the close runs in
    a daemon thread, and one still running after the wait is reported as a warning
    and left behind.
    """
    errors: list[BaseException] = []

    def close() -> None:
        try:
            if type(client) is Consumer:
                close_consumer(client)
            else:
                client.close()
        except RuntimeError:  # closed twice (plain confluent-kafka consumers)
            pass
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=close, name=f"close-{type(client).__name__}", daemon=True)
    thread.start()
    thread.join(CLOSE_WAIT_S)
    if thread.is_alive():
        warnings.warn(
            f"{type(client).__name__}.close() still running after {CLOSE_WAIT_S:.0f} s at teardown "
            "(librdkafka close hang, confluentinc/librdkafka#4527); left behind",
            RuntimeWarning,
            stacklevel=1,
        )
        return
    if errors:
        raise errors[0]


_counter = itertools.count()


@pytest.fixture
def unique(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """``unique("orders")`` -> a topic / group name no other test uses."""
    base = re.sub(r"[^A-Za-z0-9]+", "-", request.node.name)[:60].strip("-")

    def make(name: str) -> str:
        return f"{name}.{base}.{next(_counter)}"

    return make


def rule(rule_id: str, statement: str, *, priority: int = 0, **meta: Any) -> dict[str, Any]:
    """A route-rules.yaml entry.

    ``rule("r1", "use cluster A", isGlobal=True)``: a global rule (meta
    ``rule.isGlobal: true``); ``topic=T``: a topic rule (``topic.id: T``);
    ``group=G, group_topic=T``: a consumer-group rule (``consumerGroup.groupName: G``,
    ``consumerGroup.topicId: T``).
    """
    out_meta: dict[str, Any] = {}
    for key, value in meta.items():
        if key == "isGlobal":
            out_meta["rule.isGlobal"] = value
        elif key == "topic":
            out_meta["topic.id"] = value
        elif key == "group":
            out_meta["consumerGroup.groupName"] = value
        elif key == "group_topic":
            out_meta["consumerGroup.topicId"] = value
        else:
            raise TypeError(f"unknown rule meta {key}")
    return {"id": rule_id, "priority": priority, "meta": out_meta, "rule": statement}


def _atomic_write(path: Path, data: Any) -> None:
    replace_file(path, yaml.safe_dump(data, sort_keys=False))


def write_config(
    directory: Path, clusters: Mapping[str, EmbeddedCluster | str], rules: Sequence[Rule]
) -> Path:
    """Write ``clusters.yaml`` and ``route-rules.yaml`` into ``directory``; return it."""
    directory.mkdir(parents=True, exist_ok=True)
    entries = [
        {"id": cid, "meta": {"bootstrap.servers": c if isinstance(c, str) else c.bootstrap_servers}}
        for cid, c in clusters.items()
    ]
    _atomic_write(directory / "clusters.yaml", {"clusters": entries})
    rewrite_rules(directory, rules)
    return directory


def write_standby_config(
    directory: Path, clusters: tuple[EmbeddedCluster, EmbeddedCluster], rules: Sequence[Rule]
) -> Path:
    """Write clusters ``A`` (standby: ``B``, ``kbear.failover.to``) and ``B``, and
    ``rules``, into ``directory`` (comments in clusters.yaml, kept by ``kbear
    failover``'s edit); return it."""
    a, b = clusters
    directory.mkdir(parents=True, exist_ok=True)
    replace_file(
        directory / "clusters.yaml",
        "# the two clusters of the test\n"
        "clusters:\n"
        "  - id: A\n"
        "    meta:\n"
        f"      bootstrap.servers: {a.bootstrap_servers}\n"
        "      kbear.failover.to: B  # the standby\n"
        "  - id: B\n"
        "    meta:\n"
        f"      bootstrap.servers: {b.bootstrap_servers}\n",
    )
    rewrite_rules(directory, rules)
    return directory


def write_mirror_config(
    directory: Path, east: EmbeddedCluster, west: EmbeddedCluster, mirror: str, policy: str = "identity"
) -> Path:
    """Write ``east`` (standby ``west``, mirrored by ``mirror``: ``mm2`` with MirrorMaker
    2's replication ``policy``, ``identity`` unless said, ``identical``, ``none``) and
    ``west``, every topic routed to east, into ``directory``; return it."""
    directory.mkdir(parents=True, exist_ok=True)
    meta = {"bootstrap.servers": east.bootstrap_servers, "kbear.failover.to": "west", "kbear.mirror": mirror}
    if mirror == "mm2":
        meta["kbear.mirror.replication.policy"] = policy
    clusters = [
        {"id": "east", "meta": meta},
        {"id": "west", "meta": {"bootstrap.servers": west.bootstrap_servers}},
    ]
    (directory / "clusters.yaml").write_text(yaml.safe_dump({"clusters": clusters}))
    rewrite_rules(directory, [rule("all", "use cluster east", isGlobal=True)])
    return directory


def rewrite_rules(directory: Path, rules: Sequence[Rule]) -> None:
    """Replace ``route-rules.yaml`` atomically (temporary file + ``os.replace``)."""
    _atomic_write(directory / "route-rules.yaml", {"route-rules": [dict(r) for r in rules]})


@pytest.fixture
def make_config(
    tmp_path: Path, two_clusters: tuple[EmbeddedCluster, EmbeddedCluster]
) -> Callable[[Sequence[Rule]], Path]:
    """``make_config(rules)`` writes a configuration for clusters A and B; returns its directory."""
    a, b = two_clusters
    made = itertools.count()

    def make(rules: Sequence[Rule]) -> Path:
        return write_config(tmp_path / f"conf{next(made)}", {"A": a, "B": b}, rules)

    return make


@pytest.fixture
def make_router(
    make_config: Callable[[Sequence[Rule]], Path],
) -> Iterator[Callable[[Sequence[Rule]], Router]]:
    """``make_router(rules)`` -> a Router over a fresh configuration (closed at teardown)."""
    routers: list[Router] = []

    def make(rules: Sequence[Rule]) -> Router:
        router = Router.from_path(make_config(rules))
        routers.append(router)
        return router

    yield make
    for router in routers:
        router.close()


@pytest.fixture
def share_clusters(
    two_clusters: tuple[EmbeddedCluster, EmbeddedCluster],
) -> tuple[EmbeddedCluster, EmbeddedCluster]:
    """Clusters A and B whose share groups start at the earliest record (the mock's
    default is the latest)."""
    for cluster in two_clusters:
        cluster.set_share_group(auto_offset_reset="earliest")
    return two_clusters


@pytest.fixture
def share_router(
    share_clusters: tuple[EmbeddedCluster, EmbeddedCluster], make_router: Callable[[Sequence[Rule]], Router]
) -> Callable[[Sequence[Rule]], Router]:
    return make_router


# --------------------------------------------------------------------------- plain clients


def plain_producer(cluster: EmbeddedCluster) -> Producer:
    return Producer({"bootstrap.servers": cluster.bootstrap_servers})


def partitions_of(cluster: EmbeddedCluster, topic: str) -> list[int]:
    """Partition ids of ``topic`` on ``cluster`` (empty when it does not exist)."""
    with Producer({"bootstrap.servers": cluster.bootstrap_servers, "allow.auto.create.topics": False}) as p:
        md = p.list_topics(topic, timeout=5).topics.get(topic)
    if md is None or md.error is not None:
        return []
    return sorted(md.partitions)


def watermarks(cluster: EmbeddedCluster, topic: str) -> dict[int, tuple[int, int]]:
    """Partition -> (low, high) watermarks of ``topic`` on ``cluster``."""
    c = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "kbear-tests-watermarks"})
    try:
        return {
            p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=5)
            for p in partitions_of(cluster, topic)
        }
    finally:
        c.close()


def end_offsets(cluster: EmbeddedCluster, topic: str) -> dict[int, int]:
    """Partition -> high watermark of ``topic`` on ``cluster``."""
    return {p: high for p, (_low, high) in watermarks(cluster, topic).items()}


def message_count(cluster: EmbeddedCluster, topic: str) -> int:
    """How many messages ``topic`` holds on ``cluster``."""
    return sum(high - low for low, high in watermarks(cluster, topic).values())


def read_all(cluster: EmbeddedCluster, topic: str, timeout: float = 10.0) -> list[Any]:
    """Every message of ``topic`` on ``cluster``, read with a plain Consumer by
    assignment (no group join) from the low to the high watermarks."""
    marks = watermarks(cluster, topic)
    wanted = sum(high - low for low, high in marks.values())
    out: list[Any] = []
    if not wanted:
        return out
    c = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": "kbear-tests-reader",
            "enable.auto.commit": False,
        }
    )
    try:
        # explicit offsets: OFFSET_BEGINNING costs an offset lookup (~0.4 s on the mock)
        c.assign([TopicPartition(topic, p, low) for p, (low, high) in marks.items() if high > low])
        deadline = time.monotonic() + timeout
        while len(out) < wanted and time.monotonic() < deadline:
            out.extend(m for m in c.consume(wanted - len(out), 0.2) if m.error() is None)
    finally:
        c.close()
    return out


def committed_offsets(cluster: EmbeddedCluster, group: str, topic: str) -> dict[int, int]:
    """Partition -> committed offset of ``group`` on ``topic`` as a plain Consumer sees it."""
    c = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group})
    try:
        parts = [TopicPartition(topic, p) for p in partitions_of(cluster, topic)]
        return {tp.partition: tp.offset for tp in c.committed(parts, timeout=5)}
    finally:
        c.close()


def consume_until(consumer: Any, count: int, *, timeout: float = 15.0, batch: int | None = None) -> list[Any]:
    """Poll (or ``consume(batch)``) ``consumer`` until ``count`` messages or ``timeout``.

    Error events are skipped (not counted); returns the messages received, in order.
    """
    out: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(out) < count and time.monotonic() < deadline:
        if batch is None:
            msg = consumer.poll(0.1)
            got = [] if msg is None else [msg]
        else:
            got = consumer.consume(num_messages=batch, timeout=0.1)
        out.extend(m for m in got if m.error() is None)
    return out


def drain_more(consumer: Any, seconds: float = 0.5) -> list[Any]:
    """Messages that still arrive within ``seconds`` (should be none after a full read)."""
    return consume_until(consumer, 10**9, timeout=seconds)


def keyed(n: int, prefix: str = "k", start: int = 0) -> list[tuple[bytes, bytes]]:
    """``n`` (key, value) pairs with distinct keys, so they spread over partitions."""
    return [(f"{prefix}{i}".encode(), f"v{i}".encode()) for i in range(start, start + n)]


#: Nothing listens there: every broker request fails, as with no broker at all.
NOWHERE = "127.0.0.1:1"


@pytest.fixture
def dead_cluster(tmp_path: Path) -> Iterator[Router]:
    """A router whose every route goes to one cluster A where no broker answers."""
    router = Router.from_path(
        write_config(tmp_path, {"A": NOWHERE}, [rule("all", "use cluster A", isGlobal=True)])
    )
    yield router
    router.close()


@pytest.fixture
def dead_clusters(tmp_path: Path) -> Iterator[Router]:
    """A router sending topic ``b`` to cluster B and every other topic to A (no broker answers)."""
    rules = [rule("all", "use cluster A", isGlobal=True), rule("b", "use cluster B", topic="b")]
    router = Router.from_path(write_config(tmp_path, {"A": NOWHERE, "B": "127.0.0.1:2"}, rules))
    yield router
    router.close()


#: What makes a test more than a unit test (``pytest -m unit``, seconds in all): a
#: fixture that starts a Kafka cluster, Spark or a server, directly or through
#: another fixture ...
_CLUSTER_FIXTURES = frozenset({"two_clusters", "dead_cluster", "dead_clusters", "spark", "spark_session"})
#: ... or, in the test's source or in one of its fixtures', an embedded cluster, a
#: child process, the demo, a server or a wait.
_BEYOND_UNIT = ("EmbeddedCluster(", "subprocess", "sys.executable", "run_demo(", "serve(", "time.sleep(")
_TESTS = Path(__file__).resolve().parent
#: ... or a test that reads megabytes (measured at over a second each on its own).
_LARGE = (
    "test_config.py::test_one_megabyte_of_rules_loads",
    "test_config.py::test_catalogue_of_bad_configuration[pyyaml-nesting too deep]",
    "test_config.py::test_catalogue_of_bad_configuration[rapidyaml-nesting too deep]",
    "test_fastyaml.py::test_a_large_configuration_loads_the_same_as_block_yaml_json_and_through_pyyaml",
    "test_fastyaml.py::test_a_generated_block_style_file_is_read_by_rapidyaml_as_pyyaml_reads_it",
    "test_fastyaml.py::test_a_duplicate_key_in_a_large_file_gets_pyyamls_error",
    "test_input_errors.py::test_no_message_points_outside_the_repository",
)


def _beyond_unit(function: Any) -> bool:
    try:
        source = inspect.getsource(function)
    except (OSError, TypeError):
        return True
    return any(mark in source for mark in _BEYOND_UNIT)


def _is_unit(item: pytest.Item) -> bool:
    if _TESTS not in item.path.parents or not isinstance(item, pytest.Function):
        return False
    if set(item.fixturenames) & _CLUSTER_FIXTURES:
        return False
    if getattr(item.function, "is_hypothesis_test", False):  # property tests draw many examples
        return False
    if any(large in item.nodeid for large in _LARGE):
        return False
    defs = item._fixtureinfo.name2fixturedefs
    functions = [item.function, *(d.func for name in item.fixturenames for d in defs.get(name, ()))]
    return not any(_beyond_unit(f) for f in functions if _TESTS in Path(inspect.getfile(f)).resolve().parents)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``unit`` the tests of tests/ that need no cluster, no Spark, no server, no
    child process and draw no property examples: ``pytest -m unit`` runs in seconds."""
    for item in items:
        if _is_unit(item):
            item.add_marker(pytest.mark.unit)
