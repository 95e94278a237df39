"""The fleet of ``kbear serve`` (issue #30): every answered route request recorded
(secrets hidden, bounded), ``GET /fleet`` and its filters, ``GET /fleet/moves``
across a configuration change, one fleet for the processes sharing a file,
tokens and error bodies as the other endpoints."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _serve import TestClient

pytest.importorskip("uvicorn")

from kbear.reload import replace_file
from kbear.server import ConfigHolder, create_app
from kbear.server.fleet import FleetRecorder

pytestmark = pytest.mark.filterwarnings("ignore:.*httpx2")

CLUSTERS = """\
clusters:
  - id: blue
    meta: {bootstrap.servers: "blue:9092"}
  - id: green
    meta: {bootstrap.servers: "green:9092"}
  - id: uat
    meta: {bootstrap.servers: "uat:9092"}
"""


def rules(orders_on: str) -> str:
    return f"""\
route-rules:
  - id: r-uat
    priority: 1
    meta: {{rule.isGlobal: true}}
    rule: use cluster uat when client.env=UAT
  - id: r-orders
    meta: {{topic.id: orders}}
    rule: use cluster {orders_on}
  - id: r-group
    meta: {{consumerGroup.groupName: billing, consumerGroup.topicId: orders}}
    rule: use cluster green
  - id: r-default
    meta: {{rule.isGlobal: true}}
    rule: use cluster blue
"""


TOKEN = "fleet-test-token"


@pytest.fixture
def conf(tmp_path: Path) -> Path:
    directory = tmp_path / "conf"
    directory.mkdir()
    (directory / "clusters.yaml").write_text(CLUSTERS)
    (directory / "route-rules.yaml").write_text(rules("blue"))
    return directory


@pytest.fixture
def holder(conf: Path) -> ConfigHolder:
    return ConfigHolder(conf, watch_interval_s=3600)


@pytest.fixture
def fleet(tmp_path: Path) -> FleetRecorder:
    # every request's time written: the move's states to the request
    return FleetRecorder(tmp_path / "fleet.db", flush_interval_s=3600, seen_resolution_s=0)


@pytest.fixture
def client(holder: ConfigHolder, fleet: FleetRecorder) -> Iterator[TestClient]:
    app = create_app(holder, watch=False, fleet=fleet, tokens=(TOKEN,))
    with TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"}) as test_client:
        yield test_client


def produce(client: TestClient, cid: str, meta: dict[str, str], *topics: str) -> None:
    body = {"client": {"id": cid, "meta": meta}, "topicIds": list(topics)}
    assert client.post("/route/producer", json=body).status_code == 200


def consume(client: TestClient, cid: str, group: str, topic: str) -> None:
    body = {"client": {"id": cid}, "consumerGroupIds": [{"groupName": group, "topicId": topic}]}
    assert client.post("/route/consumer", json=body).status_code == 200


def get(client: TestClient, path: str) -> dict[str, Any]:
    response = client.get(path)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def change_rules(holder: ConfigHolder, text: str) -> None:
    replace_file(holder.directory / "route-rules.yaml", text)
    assert [holder.check(), holder.check()] == [False, True]


def test_answered_requests_are_recorded_with_secrets_hidden(
    client: TestClient, fleet: FleetRecorder, holder: ConfigHolder
) -> None:
    produce(client, "app-1", {"env": "PROD", "sasl.password": "hunter2", "api.token": "t0k"}, "orders", "x")
    consume(client, "app-2", "billing", "orders")
    fleet.flush()
    answer = get(client, "/fleet")
    assert "hunter2" not in str(answer) and "t0k" not in str(answer)
    by_id = {c["id"]: c for c in answer["clients"]}
    assert by_id["app-1"]["meta"] == {"env": "PROD", "sasl.password": "***", "api.token": "***"}
    assert by_id["app-1"]["address"].startswith("testclient:")
    assert {(lk["topic"], lk["route"]["clusterId"]) for lk in by_id["app-1"]["lookups"]} == {
        ("orders", "blue"),
        ("x", "blue"),
    }
    [lookup] = by_id["app-2"]["lookups"]
    assert (lookup["kind"], lookup["group"], lookup["route"]["clusterId"]) == ("consumer", "billing", "green")
    assert lookup["digest"] == holder.served.config.digest == answer["digest"]
    assert answer["fleet"]["clients"] == 2 and answer["fleet"]["entries"] == 3


def test_unanswered_items_and_bad_requests_are_not_recorded(client: TestClient, fleet: FleetRecorder) -> None:
    body = {"client": {"id": "app-3"}, "topicIds": []}
    assert client.post("/route/producer", json=body).json()["status"]["ack"] == "fail"
    assert client.post("/route/producer", content=b"{not json").status_code == 400
    fleet.flush()
    assert get(client, "/fleet")["clients"] == []


def test_fleet_filters_and_their_errors(client: TestClient, fleet: FleetRecorder) -> None:
    produce(client, "p-blue", {}, "x")
    produce(client, "p-uat", {"env": "UAT"}, "orders")
    consume(client, "c-green", "billing", "orders")
    fleet.flush()

    def ids(query: str) -> list[str]:
        return sorted(c["id"] for c in get(client, "/fleet" + query)["clients"])

    assert ids("") == ["c-green", "p-blue", "p-uat"]
    assert ids("?topic=orders") == ["c-green", "p-uat"]
    assert ids("?group=billing") == ["c-green"]
    assert ids("?cluster=uat") == ["p-uat"]
    assert ids("?topic=orders&cluster=blue") == []
    limited = get(client, "/fleet?limit=1")
    assert len(limited["clients"]) == 1 and limited["truncated"] is True
    bad = client.get("/fleet?limit=lots")
    assert bad.status_code == 400
    assert bad.json()["status"]["ack"] == "fail" and bad.json()["status"]["error"]["code"] == "bad_request"


def test_the_fleet_needs_the_token(holder: ConfigHolder, fleet: FleetRecorder) -> None:
    with TestClient(create_app(holder, watch=False, fleet=fleet, tokens=(TOKEN,))) as anonymous:
        for path in ("/fleet", "/fleet/moves"):
            response = anonymous.get(path)
            assert response.status_code == 401
            assert response.json()["status"]["error"]["code"] == "unauthorized"


def test_fleet_off_answers_404_not_found(holder: ConfigHolder) -> None:
    with TestClient(create_app(holder, watch=False)) as client:
        assert client.post("/route/producer", json={"topicIds": ["x"]}).status_code == 200
        for path in ("/fleet", "/fleet/moves"):
            response = client.get(path)
            assert response.status_code == 404
            assert response.json()["status"] == {
                "ack": "fail",
                "error": {
                    "code": "not_found",
                    "message": "the fleet is not recorded (kbear serve --fleet off)",
                },
            }


def test_a_move_is_followed_client_by_client(
    client: TestClient, fleet: FleetRecorder, holder: ConfigHolder
) -> None:
    for i in range(3):
        produce(client, f"app-{i}", {}, "orders", "x")
    produce(client, "uat-app", {"env": "UAT"}, "orders")  # routed by r-uat: not moved
    consume(client, "reader", "billing", "orders")  # the group rule: not moved
    fleet.flush()
    assert get(client, "/fleet/moves")["moves"] == []  # no change yet
    old_digest = holder.served.config.digest
    change_rules(holder, rules("green"))

    [move] = get(client, "/fleet/moves")["moves"]
    assert move["topic"] == "orders"
    assert (move["clients"], move["onNewRoute"], move["notAskedSince"], move["remaining"]) == (3, 0, 3, 3)
    assert move["routes"] == [
        {
            "from": {"clusterId": "blue", "topicId": "orders"},
            "to": {"clusterId": "green", "topicId": "orders"},
            "entries": 3,
        }
    ]
    assert {s["id"] for s in move["stragglers"]} == {"app-0", "app-1", "app-2"}

    produce(client, "app-0", {}, "orders", "x")
    # app-1 asks a worker that has not applied the change yet: asked since, still old
    fleet.record("app-1", {}, "testclient:50000", "producer", old_digest, [("orders", "", "blue", "orders")])
    fleet.flush()
    [move] = get(client, "/fleet/moves")["moves"]
    assert (move["onNewRoute"], move["onOldRoute"], move["notAskedSince"]) == (1, 1, 1)
    assert move["progress"] == pytest.approx(1 / 3, abs=1e-3)
    assert [(s["id"], s["state"]) for s in move["stragglers"]] == [
        ("app-2", "notAskedSince"),
        ("app-1", "onOldRoute"),
    ]

    produce(client, "app-1", {}, "orders")
    produce(client, "app-2", {}, "orders")
    fleet.flush()
    answer = get(client, "/fleet/moves?topic=orders")
    [move] = answer["moves"]
    assert (move["onNewRoute"], move["remaining"], move["progress"], move["stragglers"]) == (3, 0, 1.0, [])
    assert (answer["previousDigest"], answer["digest"]) == (old_digest, holder.served.config.digest)


def test_bounds_expire_and_evict_and_count(tmp_path: Path) -> None:
    fleet = FleetRecorder(tmp_path / "f.db", ttl_s=60, max_entries=3)
    for i in range(5):
        fleet.record(f"c{i}", {}, f"10.0.0.{i}:1", "producer", "d", [("t", "", "blue", "t")], at=1000.0 + i)
    fleet.flush(now=1010.0)
    stats = fleet.stats()
    assert (stats.entries, stats.evicted, stats.expired) == (3, 2, 0)
    assert sorted(e.client_id for e in fleet.entries()) == ["c2", "c3", "c4"]  # the least recently seen went
    fleet.record("c4", {}, "10.0.0.4:1", "producer", "d", [("t", "", "blue", "t")], at=1100.0)
    fleet.flush(now=1100.0)
    assert [e.client_id for e in fleet.entries()] == ["c4"]
    assert fleet.stats().expired == 2


def test_an_unchanged_entry_is_rewritten_once_per_seen_resolution(tmp_path: Path) -> None:
    fleet = FleetRecorder(tmp_path / "f.db", seen_resolution_s=5)
    lookup = [("t", "", "blue", "t")]
    t0 = time.time()

    def seen() -> float:
        [entry] = fleet.entries()
        return entry.seen

    fleet.record("c", {}, "h:1", "producer", "d", lookup, at=t0)
    assert fleet.flush() == 1 and seen() == t0
    fleet.record("c", {}, "h:1", "producer", "d", lookup, at=t0 + 3)
    assert fleet.flush() == 0 and seen() == t0
    fleet.record("c", {}, "h:1", "producer", "d", lookup, at=t0 + 6)
    assert fleet.flush() == 1 and seen() == t0 + 6
    fleet.record(
        "c", {}, "h:1", "producer", "d2", [("t", "", "green", "t")], at=t0 + 6.5
    )  # a new route: at once
    assert fleet.flush() == 1 and (seen(), fleet.entries()[0].cluster) == (t0 + 6.5, "green")


def test_the_writer_writes_news_at_once_and_last_seen_times_with_the_bounds(tmp_path: Path) -> None:
    """#30: the writer thread (``flush(news_only=True)`` when woken) writes a new
    entry or a changed route at once, and an unchanged entry's new last-seen time
    only with the bounds (once a second): a steady fleet costs one transaction a
    second."""
    fleet = FleetRecorder(tmp_path / "f.db", flush_interval_s=3600, seen_resolution_s=0)
    t0 = time.time()
    fleet.record("c", {}, "h:1", "producer", "d", [("t", "", "blue", "t")], at=t0)
    assert fleet.flush() == 1
    fleet._maintained_at = t0 + 3600  # the bounds not due during the test
    fleet.record("c", {}, "h:1", "producer", "d", [("t", "", "blue", "t")], at=t0 + 1)
    assert fleet.flush(news_only=True) == 0 and fleet.entries()[0].seen == t0  # staged only
    fleet.record("c", {}, "h:1", "producer", "d2", [("t", "", "green", "t")], at=t0 + 2)
    assert fleet.flush(news_only=True) == 1
    assert [(e.cluster, e.seen) for e in fleet.entries()] == [("green", t0 + 2)]
    fleet.record("c", {}, "h:1", "producer", "d2", [("t", "", "green", "t")], at=t0 + 3)
    fleet.record("new", {}, "h:2", "producer", "d2", [("t", "", "green", "t")], at=t0 + 3)
    assert fleet.flush(news_only=True) == 2  # a new client: news, written with what was staged
    fleet._maintained_at = 0.0  # the bounds due: what is staged goes with them
    fleet.record("c", {}, "h:1", "producer", "d2", [("t", "", "green", "t")], at=t0 + 4)
    assert fleet.flush(news_only=True) == 1 and max(e.seen for e in fleet.entries()) == t0 + 4


def test_the_writer_thread_is_woken_by_a_request_answered_for_the_first_time(
    holder: ConfigHolder, tmp_path: Path
) -> None:
    """#30: the writer sleeps until the bounds are due (once a second) unless the
    request path notes a request its connection did not send before (maybe news):
    a new client is in the file within ``flush_interval_s``, not at the next bounds."""
    fleet = FleetRecorder(tmp_path / "f.db", flush_interval_s=0.01)
    fleet._maintained_at = time.time() + 3600  # the bounds not due during the test
    with TestClient(create_app(holder, watch=False, fleet=fleet)) as client:
        produce(client, "app", {}, "orders")
        deadline = time.monotonic() + 10
        while not fleet.entries() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert [e.client_id for e in fleet.entries()] == ["app"]


def test_a_repeated_request_is_noted_once_per_seen_resolution(holder: ConfigHolder, tmp_path: Path) -> None:
    fleet = FleetRecorder(tmp_path / "f.db", flush_interval_s=3600, seen_resolution_s=60)
    with TestClient(create_app(holder, watch=False, fleet=fleet)) as client:
        produce(client, "app", {}, "orders", "x")
        assert fleet.flush() == 2
        produce(client, "app", {}, "orders", "x")  # the same request: same answer
        assert fleet.flush() == 0
        produce(client, "app", {}, "orders")  # another request: noted
        assert fleet.flush() == 0  # ... but its one entry was written with the same route just now
        produce(client, "app", {"env": "UAT"}, "orders")  # another client (meta): its own entry
        assert fleet.flush() == 1


def test_pending_notes_are_bounded_and_drops_counted(tmp_path: Path) -> None:
    fleet = FleetRecorder(tmp_path / "f.db", max_pending=2)
    for i in range(5):
        fleet.record(f"c{i}", {}, "h:1", "producer", "d", [("t", "", "blue", "t")])
    assert fleet.stats().dropped == 3
    assert fleet.flush() == 2
    assert fleet.stats().dropped == 3  # kept in the file's counters


def test_processes_sharing_the_file_see_one_fleet(tmp_path: Path) -> None:
    first, second = FleetRecorder(tmp_path / "f.db"), FleetRecorder(tmp_path / "f.db")
    first.record("a", {}, "h:1", "producer", "d", [("t", "", "blue", "t")])
    second.record("b", {}, "h:2", "producer", "d", [("t", "", "green", "t")])
    first.flush()
    second.flush()
    for recorder in (first, second):
        assert sorted(e.client_id for e in recorder.entries()) == ["a", "b"]
        assert recorder.stats().clients == 2


def test_a_last_seen_refresh_restores_an_entry_gone_or_answered_otherwise_since(tmp_path: Path) -> None:
    """#30: a last-seen refresh (an unchanged answer) is a one-column update; the
    entry as this process answered it is written again when another process deleted
    it (its bounds) or recorded another answer for it since (the same client on
    another connection: its last answer wins)."""
    first = FleetRecorder(tmp_path / "f.db", seen_resolution_s=5)
    second = FleetRecorder(tmp_path / "f.db", ttl_s=60)
    lookup = [("t", "", "blue", "t")]
    t0 = time.time()
    first.record("c", {}, "h:1", "producer", "d", lookup, at=t0)
    assert first.flush() == 1
    second.flush(now=t0 + 100)  # its bounds: the entry expired
    assert first.entries() == []
    first.record("c", {}, "h:1", "producer", "d", lookup, at=t0 + 101)
    assert first.flush() == 1
    assert [(e.address, e.seen) for e in first.entries()] == [("h:1", t0 + 101)]
    second.record("c", {}, "h:2", "producer", "d", lookup, at=t0 + 102)  # the client's other connection
    assert second.flush() == 1 and first.entries()[0].address == "h:2"
    first.record("c", {}, "h:1", "producer", "d", lookup, at=t0 + 107)
    assert first.flush() == 1
    assert [(e.address, e.seen) for e in first.entries()] == [("h:1", t0 + 107)]
    first.record("c", {}, "h:1", "producer", "d", lookup, at=t0 + 113)  # a plain refresh
    assert first.flush() == 1
    assert [(e.address, e.seen) for e in first.entries()] == [("h:1", t0 + 113)]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"ttl_s": 0}, "ttl_s"),
        ({"max_entries": 0}, "max_entries"),
        ({"flush_interval_s": -1}, "flush_interval_s"),
    ],
)
def test_bounds_must_be_positive(tmp_path: Path, kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        FleetRecorder(tmp_path / "f.db", **kwargs)  # type: ignore[arg-type]


def test_moves_without_a_topic_read_only_the_topics_the_change_can_move(
    client: TestClient, fleet: FleetRecorder, holder: ConfigHolder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#30: ``/fleet/moves`` (the console polls it) reads the entries of the topics a
    change can have moved, by the topic index, not the whole fleet; the whole
    fleet only when the global rules changed."""
    for i in range(3):
        produce(client, f"app-{i}", {}, "orders", "x", "y")
    fleet.flush()
    asked: list[Any] = []
    progress = fleet.move_progress

    def spy(query: Any) -> Any:
        asked.append(query.topics)
        return progress(query)

    monkeypatch.setattr(fleet, "move_progress", spy)
    change_rules(holder, rules("green"))
    [move] = get(client, "/fleet/moves")["moves"]
    assert (move["topic"], move["clients"], move["notAskedSince"]) == ("orders", 3, 3)
    assert asked == [{"orders"}]
    asked.clear()
    change_rules(holder, rules("green").replace("rule: use cluster blue", "rule: use cluster uat"))
    moved = get(client, "/fleet/moves")["moves"]
    assert [(m["topic"], m["clients"]) for m in moved] == [("x", 3), ("y", 3)]
    assert asked == [None]  # a global rule changed: every topic may have moved


def test_changed_topics_are_those_whose_chain_or_factors_differ(conf: Path) -> None:
    from kbear.config import load_config
    from kbear.server.moves import changed_topics

    def config(rules_text: str, topics: str = "topics: []\n", groups: str = "consumer-groups: []\n") -> Any:
        replace_file(conf / "route-rules.yaml", rules_text)
        replace_file(conf / "topics.yaml", topics)
        replace_file(conf / "consumer-groups.yaml", groups)
        return load_config(conf)

    base = config(rules("blue"))
    assert changed_topics(base, config(rules("blue"))) == set()
    assert changed_topics(base, config(rules("green"))) == {"orders"}
    group_moved = rules("blue").replace("rule: use cluster green", "rule: use cluster uat")
    assert changed_topics(base, config(group_moved)) == {"orders"}
    assert (
        changed_topics(base, config(rules("blue").replace("when client.env=UAT", "when client.env=QA")))
        is None
    )
    # two global rules of one priority swapped: the chain's order differs
    swapped = rules("blue").replace("    priority: 1\n", "")
    first, default = swapped.index("  - id: r-uat"), swapped.index("  - id: r-default")
    reordered = swapped[:first] + swapped[default:] + swapped[first:default]
    assert changed_topics(config(swapped), config(reordered)) is None
    meta = "topics:\n  - id: t1\n    meta: {bu: a}\n"
    assert changed_topics(config(rules("blue"), meta), config(rules("blue"), meta.replace("a}", "b}"))) == {
        "t1"
    }
    group = "consumer-groups:\n  - id: {groupName: g, topicId: t2}\n    meta: {job: a}\n"
    assert changed_topics(
        config(rules("blue"), groups=group), config(rules("blue"), groups=group.replace("a}", "b}"))
    ) == {"t2"}


def test_a_client_counts_once_per_topic_by_its_least_advanced_lookup(
    client: TestClient, fleet: FleetRecorder, holder: ConfigHolder
) -> None:
    """#30: the move's counts are made in SQL per client and topic: a client with
    two consumer groups on the moved topic, one asked since the change, is still
    'not asked since' by the other; its straggler entry is that other one."""
    consume(client, "reader", "g1", "orders")
    consume(client, "reader", "g2", "orders")
    produce(client, "writer", {}, "orders")
    fleet.flush()
    change_rules(holder, rules("green"))
    consume(client, "reader", "g1", "orders")  # g1 moved, g2 not asked since
    produce(client, "writer", {}, "orders")
    fleet.flush()
    [move] = get(client, "/fleet/moves")["moves"]
    assert (move["clients"], move["onNewRoute"], move["notAskedSince"], move["remaining"]) == (2, 1, 1, 1)
    assert [(s["id"], s["group"], s["state"]) for s in move["stragglers"]] == [
        ("reader", "g2", "notAskedSince")
    ]
    assert sum(r["entries"] for r in move["routes"]) == 3


def test_moves_by_client_id_when_a_rule_tests_it(
    client: TestClient, fleet: FleetRecorder, holder: ConfigHolder
) -> None:
    """A rule on ``client.id`` moves some clients of a topic and not others with the
    same meta: lookups are told apart by client id then."""
    for i in range(3):
        produce(client, f"app-{i}", {}, "orders")
    fleet.flush()
    by_id = rules("blue").replace(
        "  - id: r-orders\n",
        "  - id: r-app1\n    priority: 2\n    meta: {topic.id: orders}\n"
        "    rule: use cluster green when client.id=app-1\n  - id: r-orders\n",
    )
    change_rules(holder, by_id)
    [move] = get(client, "/fleet/moves")["moves"]
    assert (move["clients"], move["notAskedSince"], [s["id"] for s in move["stragglers"]]) == (
        1,
        1,
        ["app-1"],
    )


def test_stragglers_are_listed_100_per_topic_and_1000_in_all(tmp_path: Path, conf: Path) -> None:
    many = "".join(
        f"  - id: r-t{t}\n    meta: {{topic.id: t{t}}}\n    rule: use cluster blue\n" for t in range(12)
    )
    (conf / "route-rules.yaml").write_text("route-rules:\n" + many)
    holder = ConfigHolder(conf, watch_interval_s=3600)
    fleet = FleetRecorder(tmp_path / "many.db", flush_interval_s=3600)
    digest, now = holder.served.config.digest, time.time()
    for t in range(12):  # topic t0's entries the least recently seen, then t1's...
        for i in range(120):
            at = now - 60 + 4 * t + 0.02 * i  # asked once, less than 75 s ago: waited for
            fleet.record(
                f"app-{i}", {}, f"10.0.0.{i}:1", "producer", digest, [(f"t{t}", "", "blue", f"t{t}")], at=at
            )
    fleet.flush()
    change_rules(holder, "route-rules:\n" + many.replace("blue", "green"))
    from kbear.server.fleet_api import moves_answer

    moves = {m["topic"]: m for m in moves_answer(fleet, holder, None)["moves"]}
    assert {(m["clients"], m["notAskedSince"]) for m in moves.values()} == {(120, 120)} and len(moves) == 12
    listed = {topic: len(m["stragglers"]) for topic, m in moves.items()}
    assert listed == {f"t{t}": 100 if t < 10 else 0 for t in range(12)}  # the 1,000 least recently seen
    assert [s["id"] for s in moves["t0"]["stragglers"][:2]] == ["app-0", "app-1"]  # oldest first
    assert len(moves_answer(fleet, holder, "t11")["moves"][0]["stragglers"]) == 100


def test_a_fleet_file_of_an_older_schema_is_started_afresh(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE fleet (key TEXT PRIMARY KEY, client_id TEXT)")
        db.execute("INSERT INTO fleet VALUES ('k', 'c')")
    fleet = FleetRecorder(path)
    assert fleet.entries() == []
    fleet.record("c", {}, "h:1", "producer", "d", [("t", "", "blue", "t")])
    fleet.flush()
    assert [e.client_id for e in FleetRecorder(path).entries()] == ["c"]  # reopened: kept
