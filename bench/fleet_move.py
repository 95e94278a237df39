"""A move followed client by client: ``kbear move --apply`` against ``kbear serve --workers 2``.

Two embedded Kafka clusters (librdkafka's mock cluster, in this process) and
``kbear serve --workers W`` (a subprocess, 127.0.0.1) over a configuration
directory routing topic ``orders`` to cluster A. N routed clients run in this
process: kbear routers over the service's URL (``Router.from_source(url)``,
the meta-service source of ``kbear.config=http://...``), each refreshing every
``--interval`` seconds (``router.watch``) and asking for ``orders`` and one
other topic. After ``--before`` seconds ``kbear move --config URL --topic orders
--to B --apply --stable S`` runs (a subprocess): it writes route-rules.yaml and
waits for the old cluster to stay quiet and for every client to have the new
route (``GET /fleet/moves``).

Measured from the rule write (the file's change, polled every 10 ms):

- ``fleet_zero_s``: when ``/fleet/moves`` (polled every 50 ms) first shows the
  new configuration served and 0 clients of ``orders`` on the old route (none
  answered the old route since, none not asked since);
- ``clients_switched_max_s`` / ``p50``: when each client applied the new route
  (its router's change listener);
- ``move_returned_s``: when ``kbear move --apply`` returned (its exit code and
  the time its own report gives);
- ``workers_applied_s``: when each worker of ``kbear serve`` applied the change
  (its log line, ``--log-level info``), and ``clients_after_last_worker_max_s``:
  the last client's pickup after the last worker applied (at most the clients'
  refresh interval plus one request when no client is late for its own reasons).

Bounded: N clients, ``--before`` + at most ``--timeout`` seconds, loopback only.

    PYTHONPATH=. .venv/bin/python bench/fleet_move.py --clients 200 --workers 2

Appends its result to ``bench/results-fleet.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from kbear import Client, Router
from kbear.testing import EmbeddedCluster

TOPIC = "orders"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _write_config(directory: Path, a: EmbeddedCluster, b: EmbeddedCluster) -> None:
    (directory / "clusters.yaml").write_text(
        "clusters:\n"
        f"  - id: A\n    meta: {{bootstrap.servers: '{a.bootstrap_servers}'}}\n"
        f"  - id: B\n    meta: {{bootstrap.servers: '{b.bootstrap_servers}'}}\n"
    )
    (directory / "route-rules.yaml").write_text(
        "route-rules:\n  - id: default\n    meta: {rule.isGlobal: true}\n    rule: use cluster A\n"
    )


def _wait_ready(base: str, server: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and server.poll() is None:
        try:
            if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError("kbear serve did not start")


class _Clients:
    """N kbear routers over the service, each noting when it applied the move."""

    def __init__(self, url: str, count: int, interval_s: float) -> None:
        self.switched: dict[int, float] = {}
        self.routers: list[Router] = []
        for i in range(count):
            client = Client(f"app-{i}", {"env": "PROD", "idc": "sha"})
            router = Router.from_source(url, client=client, cache_file=None)
            router.route_producer(TOPIC, client)
            router.route_producer(f"other.{i % 20}", client)
            router.subscribe(self._listener(i, router, client))
            router.watch(interval_s)
            self.routers.append(router)

    def _listener(self, i: int, router: Router, client: Client) -> Any:
        def changed(old: Any, new: Any) -> None:
            if i not in self.switched and router.route_producer(TOPIC, client).cluster_id == "B":
                self.switched[i] = time.monotonic()

        return changed

    def close(self) -> None:
        for router in self.routers:
            router.close()


def _watch_file(path: Path, stop: threading.Event, seen: dict[str, float]) -> None:
    before = path.stat().st_mtime_ns
    while not stop.is_set():
        if path.stat().st_mtime_ns != before:
            seen["write"], seen["write_wall"] = time.monotonic(), time.time()
            return
        time.sleep(0.01)


def _watch_fleet(base: str, stop: threading.Event, seen: dict[str, Any]) -> None:
    first_digest = httpx.get(f"{base}/health").json()["config"]["digest"]
    with httpx.Client(base_url=base, timeout=5) as http:
        while not stop.is_set():
            answer = http.get("/fleet/moves", params={"topic": TOPIC}).json()
            if answer["digest"] != first_digest:
                moves = [m for m in answer["moves"] if m["topic"] == TOPIC]
                seen["last"] = moves[0] if moves else None
                if moves and moves[0]["remaining"] == 0:
                    seen["zero"] = time.monotonic()
                    seen["zero_move"] = moves[0]
                    # the server's own times: each entry's last answer, written when its route
                    # changed and not rewritten for 5 s (the fleet's last-seen resolution)
                    clients = http.get("/fleet", params={"topic": TOPIC, "limit": 100000}).json()["clients"]
                    seen["answered_new"] = [
                        datetime.fromisoformat(lookup["at"]).timestamp()
                        for c in clients
                        for lookup in c["lookups"]
                        if lookup["route"]["clusterId"] == "B"
                    ]
                    return
            time.sleep(0.05)


def _applied_times(log: str) -> list[float]:
    """When each worker applied a change (Unix time), from ``kbear serve``'s log lines
    ``2026-11-25 19:40:01,123 INFO kbear.server[pid]: kbear serve: configuration ... applied``."""
    times = []
    for line in log.splitlines():
        if "kbear serve: configuration" in line and " applied from " in line:
            stamp = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
            times.append(stamp.timestamp())
    return times


def run(args: argparse.Namespace) -> dict[str, Any]:
    loadavg_at_start = Path("/proc/loadavg").read_text().split()[:3]
    with (
        EmbeddedCluster() as a,
        EmbeddedCluster() as b,
        tempfile.TemporaryDirectory() as tmp,
        tempfile.TemporaryFile("w+") as server_log,
    ):
        a.create_topic(TOPIC, 3)
        b.create_topic(TOPIC, 3)
        directory = Path(tmp)
        _write_config(directory, a, b)
        port = _free_port()
        base = f"http://127.0.0.1:{port}"
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kbear.cli",
                "serve",
                "--watch-interval",
                str(args.watch_interval),
                "--config",
                tmp,
                "--port",
                str(port),
                "--workers",
                str(args.workers),
                "--log-level",
                "info",
            ],
            stdout=subprocess.DEVNULL,
            stderr=server_log,
        )
        clients: _Clients | None = None
        try:
            _wait_ready(base, server)
            clients = _Clients(base, args.clients, args.interval)
            time.sleep(args.before)
            before = httpx.get(f"{base}/fleet", params={"topic": TOPIC, "limit": 1}).json()["fleet"]
            stop = threading.Event()
            seen: dict[str, Any] = {}
            watchers = [
                threading.Thread(target=_watch_file, args=(directory / "route-rules.yaml", stop, seen)),
                threading.Thread(target=_watch_fleet, args=(base, stop, seen)),
            ]
            for thread in watchers:
                thread.start()
            command = [sys.executable, "-m", "kbear.cli", "move", "--config", base, "--topic", TOPIC]
            command += ["--to", "B", "--apply", "--stable", str(args.stable), "--timeout", str(args.timeout)]
            started = time.monotonic()
            process = subprocess.Popen(
                [*command, "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            assert process.stdout is not None
            lines = []
            for line in process.stdout:  # the report is printed before the clients are closed
                lines.append(line)
                if line.startswith("}"):
                    seen["printed"] = time.monotonic()
            process.wait(args.timeout + 60)
            returned = time.monotonic()
            stdout = "".join(lines)
            time.sleep(0.5)
            stop.set()
            for thread in watchers:
                thread.join(10)
        finally:
            if clients is not None:
                clients.close()
            server.terminate()
            server.wait(timeout=30)
        server_log.seek(0)
        applied = _applied_times(server_log.read())
    try:
        report = json.loads(stdout)
    except json.JSONDecodeError:
        report = {"stdout": stdout[-2000:]}
    write = seen.get("write", started)
    delays = sorted(t - write for t in clients.switched.values()) if clients else []
    workers_applied = (
        sorted(round(t - seen["write_wall"], 2) for t in applied) if "write_wall" in seen else []
    )
    return {
        "clients": args.clients,
        "server_workers": args.workers,
        "interval_s": args.interval,
        "stable_s": args.stable,
        "serve_watch_interval_s": args.watch_interval,
        "fleet_before_move": before,
        "move_exit_code": process.returncode,
        "fleet_zero_s": None if "zero" not in seen else round(seen["zero"] - write, 2),
        "fleet_zero_counts": seen.get("zero_move", seen.get("last")),
        # when kbear serve answered the last client's first request with the new route
        "last_client_answered_new_s": round(max(seen["answered_new"]) - seen["write_wall"], 2)
        if seen.get("answered_new") and "write_wall" in seen
        else None,
        "move_returned_s": round(returned - write, 2),
        "move_printed_report_s": round(seen["printed"] - write, 2) if "printed" in seen else None,
        "move_fleet_done_s_own": report.get("fleet", {}).get("done_s"),
        "move_fleet": {k: v for k, v in report.get("fleet", {}).items() if k != "stragglers"},
        "move_apply": {
            k: v for k, v in report.get("apply", {}).items() if k in ("switched", "switch_s", "waited_s")
        },
        "clients_switched": len(delays),
        "clients_switched_p50_s": round(statistics.median(delays), 2) if delays else None,
        "clients_switched_max_s": round(delays[-1], 2) if delays else None,
        "workers_applied_s": workers_applied,
        "clients_after_last_worker_max_s": round(delays[-1] - workers_applied[-1], 2)
        if delays and workers_applied
        else None,
        "target_s": args.interval + 1.0,
        "loadavg_at_start": loadavg_at_start,
        "loadavg_at_end": Path("/proc/loadavg").read_text().split()[:3],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--workers", type=int, default=2, help="kbear serve --workers (default: 2)")
    parser.add_argument("--interval", type=float, default=1.0, help="the clients' refresh interval, s")
    parser.add_argument("--before", type=float, default=5.0, help="seconds of clients before the move")
    parser.add_argument("--stable", type=float, default=1.0, help="kbear move --stable, s")
    parser.add_argument(
        "--watch-interval", type=float, default=0.5, help="kbear serve --watch-interval, s (default: 0.5)"
    )
    parser.add_argument("--timeout", type=float, default=60.0, help="kbear move --timeout, s")
    args = parser.parse_args(argv)
    result = run(args)
    print(json.dumps(result, indent=2))
    with open(Path(__file__).with_name("results-fleet.jsonl"), "a", encoding="utf-8") as out:
        out.write(json.dumps({"fleet_move": result}) + "\n")
    return 0 if result["move_exit_code"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
