"""Fuzzing the meta-service client (issue #31): after a good answer, the fake
service (tests/_meta_fake.py) answers with random JSON, truncated answers, raw
bytes and random HTTP statuses. Every refresh either applies a valid answer or
is refused with a ConfigError saying why, and the last good configuration stays
in force; a new lookup meanwhile gets a route, NoRouteError (or its
MetaServiceUnavailable) or the ConfigError, nothing else."""

from __future__ import annotations

import json
from typing import Any

import pytest
from _fuzz import NAMES, VALUES, examples
from _meta_fake import FakeService
from hypothesis import given
from hypothesis import strategies as st

from kbear import ConfigError, NoRouteError, Router
from kbear.meta import MetaServiceSource

pytest.importorskip("httpx")

TOPIC = "orders"
GOOD_CLUSTERS = {"east": {"id": "east", "meta": {"bootstrap.servers": "east:9092"}}}


def good(path: str, body: Any) -> tuple[int, Any]:
    topics = body.get("topicIds", []) if isinstance(body, dict) else []
    return 200, {
        "status": {"ack": "success"},
        "topicIdRoutes": {t: {"clusterId": "east", "topicId": t} for t in topics},
        "clusters": GOOD_CLUSTERS,
    }


_good_bytes = st.builds(
    lambda topics: json.dumps(good("/route/producer", {"topicIds": topics})[1]).encode(), st.just([TOPIC])
)
_route = st.fixed_dictionaries({"clusterId": NAMES | VALUES, "topicId": NAMES | VALUES})
_shaped = st.fixed_dictionaries(
    {
        "status": st.fixed_dictionaries(
            {"ack": st.sampled_from(["success", "partial_fail", "fail", "x"]) | VALUES}
        )
    },
    optional={
        "topicIdRoutes": st.dictionaries(NAMES, _route | VALUES, max_size=3) | VALUES,
        "clusters": st.dictionaries(
            NAMES,
            st.fixed_dictionaries({"id": NAMES, "meta": st.dictionaries(NAMES, NAMES | VALUES, max_size=3)})
            | VALUES,
            max_size=2,
        )
        | VALUES,
        "topics": VALUES,
    },
)
_answers = st.one_of(
    st.tuples(
        st.sampled_from([200, 200, 200, 204, 301, 400, 401, 404, 429, 500, 503]),
        _shaped.map(lambda d: json.dumps(d, default=str).encode() if _str_keys(d) else b"{}"),
    ),
    st.tuples(st.just(200), st.binary(max_size=40)),
    st.tuples(st.just(200), st.tuples(_good_bytes, st.integers(0, 200)).map(lambda t: t[0][: t[1]])),
    st.tuples(
        st.just(200), VALUES.map(lambda v: json.dumps(v, default=str).encode() if _str_keys(v) else b"[]")
    ),
)


def _str_keys(value: Any) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str) for k in value) and all(_str_keys(v) for v in value.values())
    if isinstance(value, list):
        return all(_str_keys(v) for v in value)
    return True


def route_of(router: Router, topic: str) -> tuple[str, str] | None:
    try:
        route = router.route_producer(topic)
    except (NoRouteError, ConfigError):
        return None
    return (route.cluster_id, route.topic)


@examples(150)
@given(answers=st.lists(_answers, min_size=1, max_size=4), new_topic=NAMES)
def test_random_answers_are_refused_clearly_and_the_last_good_configuration_stays(
    answers: list[tuple[int, bytes]], new_topic: str
) -> None:
    service = FakeService(None)  # type: ignore[arg-type]  # every answer is the override's
    service.override = good
    source = MetaServiceSource(
        "http://meta.test", cache_file=None, transport=service.transport(), attempts=1, timeout_s=2.0
    )
    router = Router.from_source(source)
    try:
        assert router.route_producer(TOPIC).cluster_id == "east"
        for status, body in answers:
            service.override = lambda path, req, status=status, body=body: (status, body)
            before, routed = router.config, route_of(router, TOPIC)
            try:
                router.reload()
            except ConfigError as exc:
                assert exc.problems and all(p.message for p in exc.problems)
                assert router.config is before  # refused: the last good one stays in force
                assert route_of(router, TOPIC) == routed
            try:
                route = router.route_producer(new_topic)
            except (NoRouteError, ConfigError):
                pass
            else:
                assert route.cluster_id in router.config.clusters
    finally:
        router.close()
