"""The console page of ``kbear serve`` over HTTP (issue #30): the token protects it
(login form, session cookie HttpOnly + SameSite=Strict, or the bearer token),
everything printed is escaped, no external asset, the explain form answers
without JavaScript, a refused change shows its banner. The browser tests are in
``test_server_console_browser.py``."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from _serve import TestClient

pytest.importorskip("jinja2")

from kbear.reload import replace_file
from kbear.server import ConfigHolder, create_app
from kbear.server.auth import SESSION_COOKIE, session_cookie, session_valid
from kbear.server.console import parse_meta
from kbear.server.fleet import FleetRecorder

pytestmark = pytest.mark.filterwarnings("ignore:.*httpx2")

TOKEN = "console-test-token"
EVIL = "<script>alert('x')</script>"
CLUSTERS = """\
clusters:
  - id: blue
    meta: {bootstrap.servers: "blue:9092", sasl.password: "pw-PLANTED"}
  - id: green
    meta: {bootstrap.servers: "green:9092"}
"""
RULES = """\
route-rules:
  - id: r-env
    meta: {rule.isGlobal: true}
    rule: use cluster green when client.env=UAT
  - id: r-default
    meta: {rule.isGlobal: true}
    rule: use cluster blue
"""


@pytest.fixture
def holder(tmp_path: Path) -> ConfigHolder:
    directory = tmp_path / "conf"
    directory.mkdir()
    (directory / "clusters.yaml").write_text(CLUSTERS)
    (directory / "route-rules.yaml").write_text(RULES)
    return ConfigHolder(directory, watch_interval_s=3600)


@pytest.fixture
def fleet(tmp_path: Path) -> FleetRecorder:
    return FleetRecorder(tmp_path / "fleet.db", flush_interval_s=3600)


@pytest.fixture
def anonymous(holder: ConfigHolder, fleet: FleetRecorder) -> Iterator[TestClient]:
    app = create_app(holder, watch=False, fleet=fleet, tokens=(TOKEN,))
    with TestClient(app, follow_redirects=False) as client:
        yield client


def test_without_a_token_the_page_sends_to_the_login_form(anonymous: TestClient) -> None:
    response = anonymous.get("/")
    assert (response.status_code, response.headers["location"]) == (303, "/login")
    form = anonymous.get("/login")
    assert form.status_code == 200 and 'name="token"' in form.text
    assert anonymous.get("/console/static/console.css").status_code == 200  # no data in it


def test_a_wrong_token_is_refused_and_sets_no_cookie(anonymous: TestClient) -> None:
    response = anonymous.post("/login", data={"token": "nope"})
    assert response.status_code == 401
    assert "not accepted" in response.text
    assert "set-cookie" not in response.headers


def test_failed_logins_are_rate_limited_per_peer(holder: ConfigHolder, fleet: FleetRecorder) -> None:
    """#30: after LOGIN_FAILURES_ALLOWED (5 a minute) failed sign-ins, the peer's next
    attempt is 429 with Retry-After, even with the right token; another peer signs in."""
    from kbear.server.console import LOGIN_FAILURES_ALLOWED

    assert LOGIN_FAILURES_ALLOWED == "5/minute"
    app = create_app(holder, watch=False, fleet=fleet, tokens=(TOKEN,))
    with (
        TestClient(app, follow_redirects=False, client=("10.0.0.1", 5000)) as guesser,
        TestClient(app, follow_redirects=False, client=("10.0.0.2", 5000)) as other,
    ):
        assert [guesser.post("/login", data={"token": f"guess-{i}"}).status_code for i in range(5)] == [
            401
        ] * 5
        refused = guesser.post("/login", data={"token": TOKEN})
        assert refused.status_code == 429 and "set-cookie" not in refused.headers
        assert 1 <= int(refused.headers["retry-after"]) <= 60
        assert "Too many failed sign-ins" in refused.text
        assert other.post("/login", data={"token": TOKEN}).status_code == 303


def test_failed_logins_are_counted_across_the_processes_sharing_the_file(
    holder: ConfigHolder, tmp_path: Path
) -> None:
    """#30: the workers of ``kbear serve --workers N`` count a peer's failed sign-ins
    together (one SQLite file): 3 failures on one, 2 on another, and the next
    attempt is refused on both."""
    logins = tmp_path / "logins.db"
    apps = [create_app(holder, watch=False, tokens=(TOKEN,), login_failures_db=logins) for _ in range(2)]
    peer = ("10.0.0.9", 5000)
    with (
        TestClient(apps[0], follow_redirects=False, client=peer) as first,
        TestClient(apps[1], follow_redirects=False, client=peer) as second,
    ):
        failed = [w.post("/login", data={"token": "guess"}).status_code for w in (first,) * 3 + (second,) * 2]
        assert failed == [401] * 5
        for worker in (first, second):
            refused = worker.post("/login", data={"token": TOKEN})
            assert refused.status_code == 429 and 1 <= int(refused.headers["retry-after"]) <= 60


def test_the_sqlite_storage_keeps_the_moving_window_and_counters(tmp_path: Path) -> None:
    from limits import parse
    from limits.storage import storage_from_string
    from limits.strategies import FixedWindowRateLimiter, MovingWindowRateLimiter

    storage = storage_from_string(f"kbear+sqlite://{tmp_path / 'l.db'}")
    assert storage.check()
    moving, fixed, limit = (
        MovingWindowRateLimiter(storage),
        FixedWindowRateLimiter(storage),
        parse("2/minute"),
    )
    assert [moving.hit(limit, "a") for _ in range(3)] == [True, True, False]
    assert moving.hit(limit, "b") and moving.get_window_stats(limit, "a").remaining == 0
    assert [fixed.hit(limit, "c") for _ in range(3)] == [True, True, False]
    storage.clear(limit.key_for("a"))
    assert moving.test(limit, "a")
    assert storage.reset() and moving.test(limit, "b") and fixed.test(limit, "c")


def test_login_sets_a_strict_httponly_session_that_opens_the_page_and_the_api(anonymous: TestClient) -> None:
    response = anonymous.post("/login", data={"token": TOKEN})
    assert (response.status_code, response.headers["location"]) == (303, "/")
    cookie = response.headers["set-cookie"]
    assert cookie.startswith(f"{SESSION_COOKIE}=")
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    assert TOKEN not in cookie
    assert anonymous.get("/").status_code == 200
    assert anonymous.get("/fleet").status_code == 200
    out = anonymous.post("/logout")
    assert out.status_code == 303 and 'kbear_session=""' in out.headers["set-cookie"]
    anonymous.cookies.clear()
    assert anonymous.get("/").status_code == 303


def test_the_bearer_token_opens_the_page(anonymous: TestClient) -> None:
    assert anonymous.get("/", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200


def test_sessions_expire_and_are_bound_to_the_token() -> None:
    value = session_cookie(TOKEN, now=1000.0)
    assert session_valid(value, [TOKEN.encode()], now=1001.0)
    assert not session_valid(value, [b"another-token"], now=1001.0)
    assert not session_valid(value, [TOKEN.encode()], now=1000.0 + 13 * 3600)
    expires, _, mac = value.partition(".")
    assert not session_valid(
        f"{int(expires) + 3600}.{mac}", [TOKEN.encode()], now=1001.0
    )  # extended: refused
    assert not session_valid("garbage", [TOKEN.encode()])


@pytest.fixture
def client(holder: ConfigHolder, fleet: FleetRecorder) -> Iterator[TestClient]:
    app = create_app(holder, watch=False, fleet=fleet, tokens=(TOKEN,))
    with TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"}) as test_client:
        yield test_client


def test_everything_printed_is_escaped_and_no_secret_or_external_asset(
    client: TestClient, fleet: FleetRecorder
) -> None:
    body = {"client": {"id": EVIL, "meta": {"note": EVIL, "db.password": "pw-CLIENT"}}, "topicIds": [EVIL]}
    assert client.post("/route/producer", json=body).status_code == 200
    fleet.flush()
    page = client.get("/", params={"topic": EVIL, "client_id": EVIL, "client_meta": f"k={EVIL}"})
    assert page.status_code == 200
    assert EVIL not in page.text
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in page.text
    assert "pw-PLANTED" not in page.text and "pw-CLIENT" not in page.text
    sources = re.findall(r'(?:src|href)="([^"]*)"', page.text)
    assert sources and all(s.startswith("/") for s in sources), sources
    csp = page.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert page.headers["cache-control"] == "no-store"


def test_the_explain_form_answers_without_javascript(client: TestClient) -> None:
    page = client.get("/", params={"topic": "orders", "client_id": "app", "client_meta": "env=UAT\nidc=sha"})
    chain = page.text.split('class="chain"', 1)[1]
    assert re.search(r"r-env</td>.*match \(winner\)", chain, re.S)
    assert re.search(r"r-default</td>.*not evaluated", chain, re.S)
    assert ">green/orders</strong>" in page.text
    page = client.get("/", params={"topic": "orders", "client_meta": "env=PROD"})
    assert "no match: client.env=UAT (actual: PROD)" in page.text.replace("&#39;", "'")
    assert ">blue/orders</strong>" in page.text
    bad = client.get("/", params={"topic": "orders", "client_meta": "novalue"})
    assert "expected KEY=VALUE" in bad.text


def test_a_refused_change_shows_its_banner(client: TestClient, holder: ConfigHolder) -> None:
    assert 'class="banner"' not in client.get("/").text
    replace_file(
        holder.directory / "route-rules.yaml", RULES.replace("use cluster blue", "use cluster nowhere")
    )
    assert [holder.check(), holder.check()] == [False, False]  # refused
    page = client.get("/").text
    assert 'class="banner"' in page and "A configuration change was refused" in page
    assert "nowhere" in page


def test_parse_meta() -> None:
    assert parse_meta("a=1, b = 2\n\nc=x=y") == {"a": "1", "b": "2", "c": "x=y"}
    with pytest.raises(ValueError, match="'=v'"):
        parse_meta("=v")
