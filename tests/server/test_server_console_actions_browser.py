"""The console's actions, clusters and history in headless Chromium (Playwright with
Debian's ``chromium``, as ``test_server_console_browser.py``): an operator signs in,
sees the clusters reachable, plans a move of a topic between two embedded clusters,
reads the plan, applies it, and finds the action and the configuration change in the
history; a read token's session is offered no action. Screenshots go to
``$KBEAR_ARTIFACTS/console`` next to the other console pages'."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import rule

pytest.importorskip("uvicorn", reason="kbear serve needs the server extra")
pytest.importorskip("playwright.sync_api", reason="browser tests need Playwright (the dev extra)")

from playwright import sync_api
from test_server_console_browser import artifacts, browser  # noqa: F401  (fixtures)

from kbear.server.embedded import EmbeddedMetaService
from kbear.testing import EmbeddedCluster

READ, OPERATOR = "browser-read-token", "browser-operator-token"


@pytest.fixture
def served(
    two_clusters: tuple[EmbeddedCluster, EmbeddedCluster],
    make_config: Callable[..., Path],
    unique: Callable[[str], str],
) -> Iterator[tuple[Path, EmbeddedMetaService, str]]:
    a, b = two_clusters
    topic = unique("orders")
    a.create_topic(topic, 2)
    b.create_topic(topic, 2)
    conf = make_config([rule("all", "use cluster A", isGlobal=True)])
    with EmbeddedMetaService(conf, watch_interval_s=0.1, token=READ, operator_token=OPERATOR) as service:
        yield conf, service, topic


def signed_in(browser: Any, url: str, token: str) -> Any:  # noqa: F811
    context = browser.new_context(viewport={"width": 1280, "height": 1000}, base_url=url)
    page = context.new_page()
    page.set_default_timeout(120_000)  # a plan runs kbear move in a child process: slow on a loaded machine
    page.goto("/")
    page.fill("input[name=token]", token)
    page.click("button[type=submit]")
    page.wait_for_url("**/")
    return page


def test_an_operator_plans_applies_and_reads_the_history(
    browser: Any,  # noqa: F811
    served: tuple[Path, EmbeddedMetaService, str],
    artifacts: Path,  # noqa: F811
) -> None:
    conf, service, topic = served
    page = signed_in(browser, service.url, OPERATOR)
    try:
        clusters = page.locator("table.clusters")
        sync_api.expect(clusters.locator("tr[data-cluster=A]")).to_contain_text("reachable", timeout=20_000)
        page.screenshot(path=str(artifacts / "actions.png"), full_page=True)
        page.fill("#move-form input[name=topic]", topic)
        page.select_option("#move-form select[name=to]", "B")
        page.click("#move-form button[type=submit]", no_wait_after=True)
        plan = page.locator("pre.plan")
        sync_api.expect(plan).to_contain_text(
            f"producers: A/{topic} (rule all) -> B/{topic}", timeout=120_000
        )
        sync_api.expect(plan).to_contain_text("ready: yes")
        page.screenshot(path=str(artifacts / "move-plan.png"), full_page=True)
        assert "move-" not in (conf / "route-rules.yaml").read_text()
        page.click("#apply", no_wait_after=True)
        sync_api.expect(page.locator("#action")).to_contain_text("applying", timeout=120_000)
        page.click("text=history")
        row = page.locator("table.history tr", has_text=f"move {topic}")
        for _ in range(120):  # the apply waits until A is quiet: reload until its outcome is written
            if "applied" in row.first.inner_text():
                break
            page.wait_for_timeout(500)
            page.reload()
        sync_api.expect(row.first.locator(".outcome")).to_have_text("applied")
        sync_api.expect(row.first).to_contain_text("session:")  # signed in: the session's fingerprint
        change = page.locator("table.history tr", has_text="configuration")
        sync_api.expect(change.first).to_contain_text("applied", timeout=20_000)
        change.first.locator("summary").click()
        sync_api.expect(change.first.locator("pre.plan")).to_contain_text(f"move-{topic}")
        page.screenshot(path=str(artifacts / "history.png"), full_page=True)
    finally:
        page.context.close()


def test_a_read_session_is_offered_no_action(
    browser: Any,  # noqa: F811
    served: tuple[Path, EmbeddedMetaService, str],
) -> None:
    _, service, _ = served
    page = signed_in(browser, service.url, READ)
    try:
        sync_api.expect(page.locator("#actions")).to_contain_text("Sign in with an operator token")
        assert page.locator("#move-form").count() == 0
    finally:
        page.context.close()
