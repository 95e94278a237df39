"""``kbear move`` and ``kbear failover`` with a cluster down say so in one line per
cluster that does not answer, naming it and its servers, and print none of
librdkafka's own log lines (a ``FAIL`` line every few tens of milliseconds before)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from kbear.cli import main
from kbear.testing import ClientKind, EmbeddedCluster, confluent_client, mount_clients

#: nothing listens there (port 1 needs root to bind)
DOWN = "127.0.0.1:1"
_LIBRDKAFKA_LINE = re.compile(r"^%\d\|", re.M)
_ADDRESS = re.compile(r"127\.0\.0\.1:\d+")


def _own(err: str, *servers: str) -> str:
    """``err`` without librdkafka's lines about brokers none of ``servers`` (the
    test's ``bootstrap.servers``, every broker listed) names: such lines come from a
    client another test left to the garbage collector after its cluster closed, not
    from this test's clients. Every other line is kept."""
    ours = {a for s in servers for a in _ADDRESS.findall(s)}

    def foreign(line: str) -> bool:
        named = set(_ADDRESS.findall(line))
        return bool(_LIBRDKAFKA_LINE.match(line) and named and not named & ours)

    return "".join(line for line in err.splitlines(keepends=True) if not foreign(line))


def _move(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], east: str, west: str, timeout: str
) -> tuple[int, str]:
    """``kbear move`` of orders to west over a directory of ``kbear init``; exit code, stderr
    (:func:`_own`: about ``east`` and ``west``)."""
    main(["init", str(tmp_path / "r"), "--cluster", f"east={east}", "--cluster", f"west={west}"])
    capfd.readouterr()
    config = str(tmp_path / "r")
    code = main(
        ["move", "--config", config, "--topic", "orders", "--to", "west", "--request-timeout", timeout]
    )
    return code, _own(capfd.readouterr().err, east, west)


def test_move_names_the_cluster_that_does_not_answer(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    with EmbeddedCluster() as east:
        east.create_topic("orders")
        code, err = _move(tmp_path, capfd, east.bootstrap_servers, DOWN, "2")
    assert code == 1
    assert err.splitlines() == [
        f"kbear: cluster 'west' ({DOWN}) did not answer within 2 s: "
        "Failed to get metadata: Local: Broker transport failure"
    ]


def test_move_names_each_cluster_down(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    code, err = _move(tmp_path, capfd, DOWN, "127.0.0.1:2", "1")
    assert code == 1
    assert not _LIBRDKAFKA_LINE.search(err), err
    lines = err.splitlines()
    assert len(lines) == 2 and {line.split("'")[1] for line in lines} == {"east", "west"}


def test_failover_with_its_clusters_down_prints_no_librdkafka_lines(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "r"
    main(["init", str(target), "--cluster", f"east={DOWN}", "--cluster", "west=127.0.0.1:2"])
    clusters = target / "clusters.yaml"
    standby = f"bootstrap.servers: {DOWN}\n      kbear.failover.to: west\n"
    clusters.write_text(clusters.read_text().replace(f"bootstrap.servers: {DOWN}\n", standby))
    capfd.readouterr()
    code = main(["failover", "--config", str(target), "--cluster", "east", "--timeout", "1"])
    captured = capfd.readouterr()
    assert code == 1
    assert _own(captured.err, DOWN, "127.0.0.1:2") == ""
    assert "  east: does not answer: Failed to get metadata: Local: Broker transport failure" in captured.out
    assert "not ready: cluster 'west' does not answer: Failed to get metadata" in captured.out


def test_move_keeps_the_mounted_client_factory(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """``kbear.cli.main`` run inside an application's ``mount_clients`` still builds its
    clients with that factory; only librdkafka's log lines are redirected."""
    built: list[tuple[str, bool]] = []

    def factory(kind: ClientKind, cluster_id: str, config: dict[str, Any]) -> Any:
        built.append((cluster_id, "logger" in config))
        return confluent_client(kind, cluster_id, config)

    with mount_clients(factory):
        code, err = _move(tmp_path, capfd, DOWN, "127.0.0.1:2", "1")
    assert code == 1 and "did not answer" in err
    assert built and all(has_logger for _, has_logger in built)
