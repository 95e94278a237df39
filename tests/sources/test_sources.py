"""Configuration sources (issue #12, item 2): a directory, a fixed in-memory
configuration and a meta-service feed the same validation, router and watcher."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kbear import ConfigError, KBearConfig, Router
from kbear.meta import MetaServiceSource
from kbear.reload import ConfigWatcher
from kbear.sources import DirectorySource, MemorySource, is_url, open_source


def documents(cluster: str = "east", servers: str = "east:9092", **meta: str) -> dict[str, Any]:
    return {
        "clusters.yaml": {"clusters": [{"id": cluster, "meta": {"bootstrap.servers": servers, **meta}}]},
        "consumer-groups.yaml": {"consumer-groups": [{"groupName": "g", "topicId": "orders"}]},
        "route-rules.yaml": {
            "route-rules": [{"id": "r1", "meta": {"rule.isGlobal": "true"}, "rule": f"use cluster {cluster}"}]
        },
    }


def write_dir(directory: Path) -> Path:
    directory.mkdir()
    (directory / "clusters.yaml").write_text(
        "clusters:\n  - id: east\n    meta: {bootstrap.servers: 'east:9092'}\n"
    )
    (directory / "route-rules.yaml").write_text(
        "route-rules:\n  - id: r1\n    meta: {rule.isGlobal: true}\n    rule: use cluster east\n"
    )
    return directory


@pytest.mark.parametrize(
    ("location", "url"),
    [("http://meta:8080", True), ("HTTPS://meta", True), ("/etc/kbear", False), ("conf", False)],
)
def test_is_url(location: str, url: bool) -> None:
    assert is_url(location) is url


def test_open_source_picks_by_location(tmp_path: Path) -> None:
    assert isinstance(open_source(tmp_path), DirectorySource)
    meta = open_source("https://meta.example:8443/", cache_file=None)
    try:
        assert isinstance(meta, MetaServiceSource)
        assert meta.location == "https://meta.example:8443"
    finally:
        meta.close()
    memory = MemorySource(documents())
    assert open_source(memory) is memory
    with pytest.raises(TypeError, match="only apply to a meta-service"):
        open_source(tmp_path, timeout_s=1.0)


def test_directory_source_behaves_as_before(tmp_path: Path) -> None:
    conf = write_dir(tmp_path / "conf")
    by_source = Router.from_source(conf)
    by_path = Router.from_path(conf)
    assert by_source.route_producer("orders") == by_path.route_producer("orders")
    assert isinstance(by_source.source, DirectorySource)
    assert isinstance(by_path.source, DirectorySource)  # reload and watch as always
    assert by_source.config.digest == by_path.config.digest
    assert not by_source.reload()


def test_memory_source_routes_and_validates_like_files() -> None:
    router = Router.from_source(MemorySource(documents()))
    route = router.route_producer("orders")
    assert (route.cluster_id, route.bootstrap_servers) == ("east", "east:9092")
    assert router.config.location == "memory"
    assert set(router.config.consumer_groups) == {("g", "orders")}
    with pytest.raises(ConfigError) as info:
        MemorySource(documents(acks="banana")).load()
    (problem,) = info.value.problems
    assert (problem.file, problem.entry) == ("clusters.yaml", "cluster 'east'")
    assert "meta 'acks'" in problem.message
    bad = documents()
    del bad["clusters.yaml"]
    with pytest.raises(ConfigError, match=r"clusters.yaml: missing \(required\)"):
        MemorySource(bad).load()


def test_memory_source_reads_environment_for_placeholders() -> None:
    source = MemorySource(documents(servers="${EAST}"), environ={"EAST": "10.0.0.1:9092"})
    assert source.load().clusters["east"].bootstrap_servers == "10.0.0.1:9092"
    with pytest.raises(ConfigError, match="environment variable EAST is not set"):
        MemorySource(documents(servers="${EAST}"), environ={}).load()


def test_memory_source_change_reaches_listeners() -> None:
    source = MemorySource(documents())
    router = Router.from_source(source)
    seen: list[tuple[KBearConfig, KBearConfig]] = []
    router.subscribe(lambda old, new: seen.append((old, new)))
    assert not router.reload()
    source.replace(documents("west", "west:9092"))
    assert router.reload()
    assert router.route_producer("orders").cluster_id == "west"
    assert [new.clusters.keys() for _, new in seen] == [{"west": None}.keys()]


def test_watcher_applies_an_atomic_source_at_the_check_that_sees_it() -> None:
    source = MemorySource(documents())
    router = Router.from_source(source)
    watcher = ConfigWatcher(router, source, 60.0)  # not started: checks driven here
    assert not watcher.check()
    source.replace(documents("west", "west:9092"))
    assert watcher.check()  # no settle: a source changes atomically
    assert router.route_producer("orders").cluster_id == "west"


def test_watcher_keeps_last_good_memory_configuration(caplog: pytest.LogCaptureFixture) -> None:
    source = MemorySource(documents())
    router = Router.from_source(source)
    watcher = ConfigWatcher(router, source, 60.0)
    source.replace(documents(acks="banana"))
    assert not watcher.check()
    assert "refused" in caplog.text and "meta 'acks'" in caplog.text
    assert router.route_producer("orders").cluster_id == "east"


def test_router_without_source_cannot_reload() -> None:
    config = MemorySource(documents()).load()
    router = Router(config)
    assert router.source is None
    with pytest.raises(RuntimeError):
        router.reload()
