"""``kbear init`` (a configuration directory to start from) and ``kbear dev`` (local
clusters for it until Ctrl+C), as a user runs them: the written files load, say
what they are, and a routed producer and consumer work over what ``kbear dev``
started, from another process."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from kbear import RoutedConsumer, RoutedProducer
from kbear.cli import main
from kbear.config import ConfigError, load_config

FILES = ("clusters.yaml", "topics.yaml", "consumer-groups.yaml", "route-rules.yaml")


def test_init_writes_four_commented_files_with_placeholders(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "routing"
    assert main(["init", str(target)]) == 0
    for name in FILES:
        path = target / name
        assert path.is_file() and not path.is_symlink()
        assert path.read_text().startswith("#"), f"{name} says what it holds"
    out = capsys.readouterr().out
    assert "export KBEAR_EAST_BOOTSTRAP_SERVERS=HOST:PORT" in out
    assert f"kbear dev --config {target}" in out
    config = load_config(
        target,
        environ={"KBEAR_EAST_BOOTSTRAP_SERVERS": "e:9092", "KBEAR_WEST_BOOTSTRAP_SERVERS": "w:9092"},
    )
    assert config.clusters["east"].bootstrap_servers == "e:9092"
    assert [r.id for r in config.rules] == ["default", "uat-on-west"]


def test_validate_of_init_explains_the_unset_placeholder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KBEAR_EAST_BOOTSTRAP_SERVERS", raising=False)
    monkeypatch.delenv("KBEAR_WEST_BOOTSTRAP_SERVERS", raising=False)
    main(["init", str(tmp_path / "r")])
    capsys.readouterr()
    assert main(["validate", "--config", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert (
        "clusters.yaml: cluster 'east': key 'bootstrap.servers': environment variable "
        "KBEAR_EAST_BOOTSTRAP_SERVERS is not set (export KBEAR_EAST_BOOTSTRAP_SERVERS=HOST:PORT"
    ) in err
    assert "kbear dev --config DIR" in err


def test_init_with_addresses_validates_and_lints_clean(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "r"
    assert main(["init", str(target), "--cluster", "main=k1:9092,k2:9092", "--cluster", "dr=k3:9092"]) == 0
    assert main(["validate", "--config", str(target)]) == 0
    assert main(["lint", "--config", str(target)]) == 0, capsys.readouterr().out
    assert main(["route", "--config", str(target), "--topic", "orders", "--client-meta", "env=uat"]) == 0
    assert "dr" in capsys.readouterr().out.splitlines()[-1]


def test_init_refuses_to_overwrite_and_force_replaces_a_link(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "r"
    target.mkdir()
    (target / "clusters.yaml").write_text("mine\n")
    assert main(["init", str(target)]) == 2
    assert "already holds clusters.yaml (--force overwrites)" in capsys.readouterr().err
    assert (target / "clusters.yaml").read_text() == "mine\n"
    elsewhere = tmp_path / "elsewhere.yaml"
    elsewhere.write_text("kept\n")
    (target / "clusters.yaml").unlink()
    (target / "clusters.yaml").symlink_to(elsewhere)
    assert main(["init", str(target), "--force"]) == 0
    assert not (target / "clusters.yaml").is_symlink()
    assert elsewhere.read_text() == "kept\n"


@pytest.mark.parametrize("bad", ["", "a b", "x="])
def test_init_cluster_option_errors_name_the_value(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["init", "r", "--cluster", bad]) == 2
    assert repr(bad) in capsys.readouterr().err


def test_copy_of_examples_demo_config_is_a_directory(tmp_path: Path) -> None:
    """``cp -r examples/demo-config routing`` copies files, not a link that dangles."""
    root = Path(__file__).resolve().parents[2]
    subprocess.run(
        ["cp", "-r", str(root / "examples" / "demo-config"), str(tmp_path / "routing")], check=True
    )
    assert (tmp_path / "routing").is_dir() and not (tmp_path / "routing").is_symlink()
    with pytest.raises(ConfigError, match="KBEAR_DEMO_EAST is not set"):
        load_config(tmp_path / "routing", environ={})


def _start_dev(args: list[str], cwd: Path) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_BOOTSTRAP_SERVERS")}
    return subprocess.Popen(
        [sys.executable, "-m", "kbear.cli", "dev", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _wait_for(path: Path, child: subprocess.Popen[str], seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        if child.poll() is not None or time.monotonic() > deadline:
            child.kill()
            raise AssertionError(f"kbear dev ended or did not write {path}: {child.communicate()[0]}")
        time.sleep(0.1)


def test_dev_starts_clusters_a_routed_client_of_another_process_uses(tmp_path: Path) -> None:
    """``kbear dev --config routing`` writes routing/ (kbear init), starts a cluster for
    each placeholder, writes the exports; clients here route over them; Ctrl+C ends it,
    exit 0, the export file removed."""
    child = _start_dev(["--config", "routing", "--env-file", "dev.env"], tmp_path)
    env_file = tmp_path / "dev.env"
    try:
        _wait_for(env_file, child)
        exports = dict(
            line.removeprefix("export ").split("=", 1) for line in env_file.read_text().splitlines()
        )
        assert set(exports) == {"KBEAR_EAST_BOOTSTRAP_SERVERS", "KBEAR_WEST_BOOTSTRAP_SERVERS"}
        assert all(v.startswith("127.0.0.1:") for v in exports.values())
        os.environ.update(exports)
        conf = {
            "kbear.config": str(tmp_path / "routing"),
            "kbear.client.id": "t",
            "kbear.client.meta.env": "uat",
        }
        with RoutedProducer(conf) as producer:
            producer.produce("orders", key=b"k", value=b"paid")
            assert producer.flush(10) == 0
            assert producer.route("orders").cluster_id == "west"
        consumer = RoutedConsumer({**conf, "group.id": "g", "auto.offset.reset": "earliest"})
        consumer.subscribe(["orders"])
        got = None
        for _ in range(30):
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                got = msg.value()
                break
        consumer.close()
        assert got == b"paid"
    finally:
        for name in ("KBEAR_EAST_BOOTSTRAP_SERVERS", "KBEAR_WEST_BOOTSTRAP_SERVERS"):
            os.environ.pop(name, None)
        child.send_signal(signal.SIGINT)
        out = child.communicate(timeout=30)[0]
    assert child.returncode == 0, out
    assert "export KBEAR_EAST_BOOTSTRAP_SERVERS=127.0.0.1:" in out
    assert "stopped" in out
    assert not env_file.exists()
    assert (tmp_path / "routing" / "route-rules.yaml").is_file()


def test_dev_keeps_clusters_with_addresses_and_refuses_when_nothing_to_start(tmp_path: Path) -> None:
    main(["init", str(tmp_path / "r"), "--cluster", "a=h:9092"])
    child = _start_dev(["--config", str(tmp_path / "r")], tmp_path)
    out = child.communicate(timeout=60)[0]
    assert child.returncode == 2
    assert "nothing to start" in out and "clusters.yaml" in out


def test_dev_starts_only_the_unset_placeholders(tmp_path: Path) -> None:
    target = tmp_path / "r"
    main(["init", str(target), "--cluster", "a=h:9092", "--cluster", "b"])
    doc = yaml.safe_load((target / "clusters.yaml").read_text())
    assert doc["clusters"][1]["meta"]["bootstrap.servers"] == "${KBEAR_B_BOOTSTRAP_SERVERS}"
    child = _start_dev(["--config", str(target), "--env-file", "e"], tmp_path)
    try:
        _wait_for(tmp_path / "e", child)
        assert (tmp_path / "e").read_text().startswith("export KBEAR_B_BOOTSTRAP_SERVERS=127.0.0.1:")
        assert len((tmp_path / "e").read_text().splitlines()) == 1
    finally:
        child.terminate()  # SIGTERM ends it as Ctrl+C does
        out = child.communicate(timeout=30)[0]
    assert child.returncode == 0, out


def test_dev_serve_answers_route_requests_over_the_directory(tmp_path: Path) -> None:
    """``kbear dev --serve``: kbear serve over the directory, in an environment holding
    the started clusters' addresses; Ctrl+C stops both."""
    pytest.importorskip("starlette", reason="the server extra")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    child = _start_dev(["--config", "r", "--env-file", "e", "--serve", "--port", str(port)], tmp_path)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_for(tmp_path / "e", child)
        with urllib.request.urlopen(f"{url}/health", timeout=10) as answer:
            health = json.load(answer)
        assert health["status"] == "ok" and health["config"]["routeRules"] == 2
        exports = dict(
            line.removeprefix("export ").split("=", 1) for line in (tmp_path / "e").read_text().splitlines()
        )
        request = json.dumps({"client": {"meta": {"env": "uat"}}, "topicIds": ["orders"]}).encode()
        post = urllib.request.Request(f"{url}/route/producer", request, {"Content-Type": "application/json"})
        with urllib.request.urlopen(post, timeout=10) as answer:
            routes = json.load(answer)
        west = routes["clusters"][routes["topicIdRoutes"]["orders"]["clusterId"]]
        assert west["id"] == "west"
        # a client that is not kbear's gets the address from kbear serve's environment: kbear dev's
        assert west["meta"]["bootstrap.servers"] == exports["KBEAR_WEST_BOOTSTRAP_SERVERS"]
    finally:
        child.send_signal(signal.SIGINT)
        out = child.communicate(timeout=30)[0]
    assert child.returncode == 0, out
    assert f"kbear.config={url}" in out
    with pytest.raises(OSError):
        urllib.request.urlopen(f"{url}/health", timeout=2)
