"""docs/reference/meta-service-protocol.md against what ``kbear serve`` serves: every
path of the application is documented, and the page's request / answer examples
are what the server answers over examples/demo-config."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="the server extra: pip install -e '.[server]'")

from starlette.routing import Route
from starlette.testclient import TestClient

from kbear.server import ConfigHolder, create_app

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "reference" / "meta-service-protocol.md"


@pytest.fixture
def client(tmp_path: Path) -> TestClient:
    shutil.copytree(ROOT / "examples" / "demo-config", tmp_path / "conf")
    return TestClient(create_app(ConfigHolder(tmp_path / "conf"), watch=False))


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    following = text.find("\n### ", start + len(heading))
    ends = [e for e in (end, following) if e != -1]
    return text[start : min(ends) if ends else len(text)]


def test_every_path_the_server_serves_is_documented(client: TestClient) -> None:
    text = "\n".join(page.read_text() for page in (ROOT / "docs").rglob("*.md"))
    served = [
        (method, route.path)
        for route in client.app.routes  # type: ignore[attr-defined]
        if isinstance(route, Route)
        for method in sorted(route.methods or ())
        if method != "HEAD"
    ]
    assert len(served) >= 14
    for method, path in served:
        assert f"`{method} {path}`" in text, (method, path)


@pytest.mark.parametrize("endpoint", ["/route/producer", "/route/consumer"])
def test_the_pages_examples_are_the_servers_answers(client: TestClient, endpoint: str) -> None:
    section = _section(PAGE.read_text(), f"### `POST {endpoint}`")
    blocks = re.findall(r"```json\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 2, "a request and its answer"
    request, answer = (json.loads(block) for block in blocks)
    response = client.post(endpoint, json=request)
    assert response.status_code == 200
    assert response.json() == answer


def test_the_java_client_example_is_the_servers_answer(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KBEAR_DEMO_EAST", "localhost:9092")
    section = _section(PAGE.read_text(), "## Clients that are not kbear's")
    blocks = re.findall(r"```json\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 2, "a request and its answer"
    request, answer = (json.loads(block) for block in blocks)
    assert "kbear.client" not in request["client"]["meta"]
    response = client.post("/route/producer", json=request)
    assert response.status_code == 200
    assert response.json() == answer


@pytest.mark.parametrize(
    ("request_kwargs", "status"),
    [
        ({"content": b"{"}, 400),
        ({"json": {"topicIds": [1]}}, 400),
        ({"content": b"x", "headers": {"content-type": "application/x-protobuf"}}, 415),
        ({"json": {"topicIds": []}}, 200),
    ],
)
def test_the_status_codes_table(client: TestClient, request_kwargs: dict[str, object], status: int) -> None:
    table = _section(PAGE.read_text(), "### HTTP status codes")
    assert f"| {status} |" in table
    response = client.post("/route/producer", **request_kwargs)  # type: ignore[arg-type]
    assert response.status_code == status
    assert response.json()["status"]["ack"] == "fail"


@pytest.mark.parametrize(
    ("method", "path", "status"), [("GET", "/route/producer", 405), ("GET", "/nope", 404)]
)
def test_unknown_paths_and_methods_in_the_table(
    client: TestClient, method: str, path: str, status: int
) -> None:
    table = _section(PAGE.read_text(), "### HTTP status codes")
    assert f"| {status} |" in table
    response = client.request(method, path)
    assert response.status_code == status
    error = response.json()["status"]
    assert error["ack"] == "fail" and error["error"]["code"] == "bad_request"
