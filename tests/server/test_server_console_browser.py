"""The console of ``kbear serve`` in a real browser (issue #30): headless Chromium
(Debian's ``chromium``) driven by Playwright for Python with the system browser
(``executable_path``; Playwright's own browser download is not used).

Routed clients (kbear routers over the meta-service URL, refreshing every
0.3 s) run against an in-process ``kbear serve``; the page is driven as an
operator would: sign in, explain a lookup, watch the fleet table fill, apply a
move and watch its bar reach 100 %, break the rules and see the banner, and
read the page with JavaScript off. Screenshots go to ``$KBEAR_ARTIFACTS/console``
(default ``$TMPDIR/kbear-artifacts/console``) for review.

Skipped, with the reason, when Playwright or a Chromium binary is missing
(``scripts/test.sh`` installs Debian's ``chromium`` when it runs as root).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("uvicorn", reason="kbear serve needs the server extra")
pytest.importorskip("playwright.sync_api", reason="browser tests need Playwright (the dev extra)")

from playwright import sync_api

from kbear.reload import replace_file
from kbear.router import Client, Router
from kbear.server.embedded import EmbeddedMetaService

TOKEN = "browser-test-token"
CLIENTS = 6
REFRESH_S = 0.3
CLUSTERS = """\
clusters:
  - id: blue
    meta: {bootstrap.servers: "blue-1:9092,blue-2:9092", sasl.password: "pw-PLANTED"}
  - id: green
    meta: {bootstrap.servers: "green-1:9092"}
  - id: uat
    meta: {bootstrap.servers: "uat-1:9092"}
"""
TOPICS = "topics:\n  - id: orders\n    meta: {bu: hotel}\n  - id: payments\n    meta: {bu: flight}\n"


def rules(orders_on: str, broken: bool = False) -> str:
    return f"""\
route-rules:
  - id: r-uat
    priority: 1
    meta: {{rule.isGlobal: true}}
    rule: use cluster uat when client.env=UAT
  - id: r-orders
    meta: {{topic.id: orders}}
    rule: use cluster {"nowhere" if broken else orders_on}
  - id: r-hotel
    meta: {{rule.isGlobal: true}}
    rule: use cluster green when topic.bu=hotel
  - id: r-default
    meta: {{rule.isGlobal: true}}
    rule: use cluster blue
"""


def _chromium() -> str | None:
    configured = os.environ.get("KBEAR_CHROMIUM")
    if configured:
        return configured
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture(scope="module")
def artifacts() -> Path:
    base = os.environ.get("KBEAR_ARTIFACTS") or os.path.join(tempfile.gettempdir(), "kbear-artifacts")
    directory = Path(base) / "console"
    directory.mkdir(parents=True, exist_ok=True)
    return directory


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    executable = _chromium()
    if executable is None:
        pytest.skip(
            "browser tests skipped: no Chromium binary (apt-get install chromium, or set KBEAR_CHROMIUM)"
        )
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=executable, headless=True, args=["--no-sandbox", "--disable-dev-shm-usage"]
        )
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, EmbeddedMetaService]]:
    directory = tmp_path / "conf"
    directory.mkdir()
    (directory / "clusters.yaml").write_text(CLUSTERS)
    (directory / "topics.yaml").write_text(TOPICS)
    (directory / "route-rules.yaml").write_text(rules("blue"))
    with EmbeddedMetaService(directory, watch_interval_s=0.1, token=TOKEN) as service:
        yield directory, service


@pytest.fixture
def page(browser: Any, served: tuple[Path, EmbeddedMetaService]) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900}, base_url=served[1].url)
    opened = context.new_page()
    opened.set_default_timeout(15_000)
    try:
        yield opened
    finally:
        context.close()


def sign_in(page: Any) -> None:
    page.goto("/")
    assert page.url.endswith("/login")
    page.fill("input[name=token]", TOKEN)
    page.click("button[type=submit]")
    page.wait_for_url("**/")


class Fleet:
    """Routed clients: kbear routers over the meta-service URL, refreshing on their own."""

    def __init__(self, url: str) -> None:
        self.routers: list[Router] = []
        for i in range(CLIENTS):
            client = Client(f"app-{i}", {"env": "UAT" if i == 0 else "PROD", "idc": "sha"})
            router = Router.from_source(url, client=client, cache_file=None, token=TOKEN)
            router.route_producer("orders", client)
            router.route_producer("payments", client)
            router.watch(REFRESH_S)
            self.routers.append(router)

    def close(self) -> None:
        for router in self.routers:
            router.close()


@pytest.fixture
def running(served: tuple[Path, EmbeddedMetaService]) -> Callable[[], Fleet]:
    started: list[Fleet] = []

    def start() -> Fleet:
        started.append(Fleet(served[1].url))
        return started[-1]

    yield start  # type: ignore[misc]
    for fleet in started:
        fleet.close()


def test_the_explain_form_answers(page: Any, artifacts: Path) -> None:
    sign_in(page)
    page.fill("input[name=client_id]", "app-7")
    page.fill("textarea[name=client_meta]", "env=PROD\nidc=sha")
    page.fill("#explain input[name=topic]", "orders")
    page.click("#explain button[type=submit]")
    winner = page.locator("table.chain tr.winner")
    sync_api.expect(winner).to_contain_text("r-orders")
    sync_api.expect(winner).to_contain_text("match (winner)")
    sync_api.expect(page.locator("table.chain")).to_contain_text("no match: client.env=UAT (actual: PROD)")
    sync_api.expect(page.locator(".explanation strong.winner")).to_have_text("blue/orders")
    assert "pw-PLANTED" not in page.content()
    page.screenshot(path=str(artifacts / "explain.png"), full_page=True)


def test_the_fleet_table_fills_while_clients_run(
    page: Any, running: Callable[[], Fleet], artifacts: Path
) -> None:
    sign_in(page)
    sync_api.expect(page.locator("table.fleet")).to_contain_text("No client recorded")
    running()
    # no reload: the page's script refreshes the table in place
    sync_api.expect(page.locator("table.fleet tbody tr")).to_have_count(CLIENTS)
    sync_api.expect(page.locator("#live")).to_contain_text("live")
    rows = page.locator("table.fleet tbody tr")
    sync_api.expect(rows.filter(has_text="app-0")).to_contain_text("uat")
    sync_api.expect(rows.filter(has_text="app-3")).to_contain_text("blue")
    page.screenshot(path=str(artifacts / "fleet.png"), full_page=True)


def test_a_moves_progress_reaches_100_percent(
    page: Any, running: Callable[[], Fleet], served: tuple[Path, EmbeddedMetaService], artifacts: Path
) -> None:
    directory, service = served
    sign_in(page)
    running()
    sync_api.expect(page.locator("table.fleet tbody tr")).to_have_count(CLIENTS)
    assert service.fleet is not None
    replace_file(directory / "route-rules.yaml", rules("green"))
    move = page.locator(".move[data-topic=orders]")
    sync_api.expect(move).to_be_visible()
    bar = move.locator(".bar")
    sync_api.expect(bar).to_have_attribute("aria-valuenow", "100", timeout=20_000)
    sync_api.expect(move).to_contain_text(f"{CLIENTS - 1} of {CLIENTS - 1} client(s) on the new route")
    sync_api.expect(move.locator(".route")).to_contain_text("blue/orders → green/orders")
    page.screenshot(path=str(artifacts / "move.png"), full_page=True)


def test_a_refused_change_shows_its_banner(
    page: Any, served: tuple[Path, EmbeddedMetaService], artifacts: Path
) -> None:
    directory, _service = served
    sign_in(page)
    sync_api.expect(page.locator(".banner")).to_have_count(0)
    replace_file(directory / "route-rules.yaml", rules("blue", broken=True))
    banner = page.locator(".banner")
    sync_api.expect(banner).to_contain_text("A configuration change was refused", timeout=20_000)
    sync_api.expect(banner).to_contain_text("nowhere")
    page.screenshot(path=str(artifacts / "refused.png"), full_page=True)
    replace_file(directory / "route-rules.yaml", rules("blue"))
    sync_api.expect(banner).to_have_count(0, timeout=20_000)


def test_the_page_works_with_javascript_off(
    browser: Any, served: tuple[Path, EmbeddedMetaService], running: Callable[[], Fleet], artifacts: Path
) -> None:
    context = browser.new_context(java_script_enabled=False, base_url=served[1].url)
    try:
        page = context.new_page()
        sign_in(page)
        running()
        deadline = time.monotonic() + 15
        while page.locator("table.fleet tbody tr").count() < CLIENTS and time.monotonic() < deadline:
            time.sleep(0.5)
            page.reload()
        assert page.locator("table.fleet tbody tr").count() == CLIENTS
        assert page.locator("#live").is_hidden()
        page.fill("#explain input[name=topic]", "payments")
        page.fill("textarea[name=client_meta]", "env=UAT")
        page.click("#explain button[type=submit]")
        sync_api.expect(page.locator(".explanation strong.winner")).to_have_text("uat/payments")
        page.fill("input[name=fleet_cluster]", "uat")
        page.click(".filters button[type=submit]")
        sync_api.expect(page.locator("table.fleet tbody tr")).to_have_count(1)
        page.screenshot(path=str(artifacts / "no-javascript.png"), full_page=True)
    finally:
        context.close()
