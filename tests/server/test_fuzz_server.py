"""Fuzzing ``kbear serve`` (issue #31): random methods, paths, headers, tokens and
bodies (JSON of any shape, near-valid messages, raw bytes). Never a 5xx; every
4xx carries the protocol's ``fail`` body; nothing but the open paths answers
without the token."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _fuzz import NAMES, VALUES, examples
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("starlette")
from starlette.testclient import TestClient

from kbear.server import ConfigHolder, create_app
from kbear.server.app import OPEN_PATHS
from kbear.server.console import PAGE_PATHS, STATIC_PREFIX

pytestmark = pytest.mark.filterwarnings("ignore:.*httpx")

TOKEN = "fuzz-t0ken"
DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo-config"
PROTOCOL = [
    "/route/producer",
    "/route/consumer",
    "/route/rules",
    "/meta/clusters",
    "/meta/topics",
    "/meta/consumer-groups",
]
PATHS = [
    *PROTOCOL,
    *(p + "/all" for p in PROTOCOL[2:]),
    "/health",
    "/metrics",
    "/healthz",
    "/readyz",
    "/fleet",
    "/nope",
    "/route",
    "/route/producer/x",
]
#: answered without the token: health, and the console's login form and pages (a form, no data)
OPEN = {*OPEN_PATHS, *PAGE_PATHS, "/login", "/logout"}


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    holder = ConfigHolder(DEMO, watch_interval_s=3600)
    with TestClient(create_app(holder, tokens=[TOKEN], watch=False, max_body_bytes=4096)) as test_client:
        yield test_client


_client_message = st.fixed_dictionaries({"id": NAMES | VALUES, "meta": VALUES})
_near_valid = st.one_of(
    st.fixed_dictionaries(
        {"client": _client_message | VALUES, "topicIds": st.lists(NAMES | VALUES, max_size=3)}
    ),
    st.fixed_dictionaries(
        {
            "client": _client_message,
            "consumerGroupIds": st.lists(
                st.fixed_dictionaries({"groupName": NAMES | VALUES, "topicId": NAMES}) | VALUES, max_size=3
            ),
        }
    ),
    st.fixed_dictionaries({"routeRuleIds": st.lists(NAMES | VALUES, max_size=3)}),
    st.fixed_dictionaries({"clusterIds": st.lists(NAMES, max_size=3)}),
)
_bodies = st.one_of(
    st.none(),
    _near_valid.map(lambda d: json.dumps(d).encode()),
    VALUES.map(lambda v: json.dumps(v, default=str).encode() if not _mixed_keys(v) else b"{}"),
    st.binary(max_size=64),
    st.just(b"x" * 5000),  # over max_body_bytes
    _near_valid.map(lambda d: json.dumps(d).encode()[: len(json.dumps(d)) // 2]),  # truncated
)
_headers = st.fixed_dictionaries(
    {},
    optional={
        "Authorization": st.sampled_from(
            [
                f"Bearer {TOKEN}",
                "Bearer wrong",
                f"Basic {TOKEN}",
                "Bearer",
                f"bearer {TOKEN}",
                f"Bearer {TOKEN} x",
                "",
            ]
        ),
        "Content-Type": st.sampled_from(
            ["application/json", "application/protobuf", "text/plain", "application/x+json", "", "json; x=1"]
        ),
        "Content-Length": st.sampled_from(["0", "999999999", "-1", "abc"]),
        "Accept": st.sampled_from(["text/html", "*/*"]),
    },
)


def _mixed_keys(value: Any) -> bool:
    if isinstance(value, dict):
        return any(not isinstance(k, str) for k in value) or any(_mixed_keys(v) for v in value.values())
    if isinstance(value, list):
        return any(_mixed_keys(v) for v in value)
    return False


@examples(300)
@given(
    method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"]),
    path=st.sampled_from(PATHS) | st.text(alphabet="/abcdefgh-_.%", max_size=12).map(lambda p: "/" + p),
    headers=_headers,
    body=_bodies,
)
def test_any_request_is_answered_without_5xx_and_without_data_for_strangers(
    client: TestClient, method: str, path: str, headers: dict[str, str], body: bytes | None
) -> None:
    if "Content-Length" in headers and body is None:
        headers = {k: v for k, v in headers.items() if k != "Content-Length"}
    if "Content-Length" in headers:
        headers = {k: v for k, v in headers.items() if k != "Content-Length"}  # httpx sets the real one
    answer = client.request(method, path, headers=headers, content=body)
    if path != "/readyz":  # 503 while the directory is not watched (here: never), documented
        assert answer.status_code < 500, (method, path, answer.status_code, answer.text[:200])
    scheme, _, token = headers.get("Authorization", "").partition(" ")
    authorized = scheme.lower() == "bearer" and token == TOKEN  # the scheme is case-insensitive
    if not authorized:
        login_form = answer.status_code == 200 and "text/html" in answer.headers.get("content-type", "")
        if path not in OPEN and not path.startswith(STATIC_PREFIX) and not login_form:
            assert answer.status_code == 401, (method, path, answer.status_code)
        for data in ("east-1", "KBEAR_DEMO_EAST", "topicIdRoutes", "uat-audit-on-east"):
            assert data not in answer.text, (method, path, answer.text[:200])
    if 400 <= answer.status_code < 500 and method != "HEAD":
        data = answer.json()
        assert data["status"]["ack"] == "fail", (path, data)
        assert data["status"]["error"]["code"], (path, data)


@pytest.mark.parametrize(
    ("method", "path", "status"), [("GET", "/nope", 404), ("PUT", "/route/producer", 405)]
)
def test_unknown_path_or_method_answers_the_protocol_fail_body(
    client: TestClient, method: str, path: str, status: int
) -> None:
    """Found by the fuzz test above: Starlette's own 404/405 answered plain text."""
    answer = client.request(method, path, headers={"Authorization": f"Bearer {TOKEN}"})
    assert answer.status_code == status
    assert answer.headers["content-type"] == "application/json"
    assert answer.json()["status"]["ack"] == "fail"
