"""Load on ``kbear serve``: N simulated clients refreshing their routes every interval.

Starts ``kbear serve`` as a subprocess on a free 127.0.0.1 port over a generated
configuration directory, then runs N clients in this process (asyncio, one
keep-alive connection each: a minimal HTTP/1.1 client over asyncio streams by
default, ``--client httpx`` for one ``httpx.AsyncClient`` each, which costs this
process several times more CPU per request). Each client posts one
batched ``/route/producer`` request (its ``--topics`` topics) every ``--interval``
seconds, at a fixed rate, its first refresh at a random point of the first
interval. Halfway through, the rule of one topic every client asks for is edited
(``replace_file``: atomic), moving it to another cluster; each client notes when
its first answer with the new cluster arrives.

Reported: requests answered, their rate against the N / interval asked for,
errors (transport errors, non-200 answers, ``ack`` other than success), latency
p50 / p99 / max (from the scheduled send to the answer, so a client that falls
behind counts its lag), the server's CPU (``/proc/<pid>/stat``, in % of one core)
and this process's, and the rule change: how many clients saw it and the largest
delay from the edit to a client's first answer with the new route.

    PYTHONPATH=. python bench/serve_load.py --clients 1000 --duration 30

``--compare-fleet N`` runs the server N times with the fleet recorded off and
N times on (``kbear serve --fleet off|on``), alternately, in one invocation, and
prints each run, the ratio on/off of the medians of p50, mean, p99 and the
server's CPU per request and the median of the ratios of each pair (issue #30: recording must cost under 5 %), that CPU
also split between the workers' main threads (the event loop: each request's
own work) and their other threads (the configuration watcher, the fleet's
writer): the split is exact per thread, where the total varies by 10 % from
run to run on a shared machine. With ``--side-by-side`` each off run runs at the
same time as an on run (two servers, two load generators, twice the load): the
machine's changing load falls on both alike.

``--compare-store URL --runs N`` runs the server N times with the fleet in its
SQLite file (the default) and N times in the PostgreSQL database ``URL``
(``kbear serve --fleet-store``, a fresh database of that server per run),
alternately, and prints the medians and the ratio PostgreSQL / SQLite of p50,
mean, p99 and the server's CPU per request (results-fleet-store.jsonl): what
the shared store costs per lookup (issue #37: p99 within 10 %).

Needs the server extra (``pip install 'kbear[server]'``) and Linux (``/proc``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from _procstat import by_thread, cpu_seconds, process_tree, run_queue_wait_s, thread_cpu

from kbear.reload import replace_file

_CLUSTERS = """\
clusters:
  - id: blue
    meta:
      bootstrap.servers: blue-1:9092,blue-2:9092
      security.protocol: SASL_SSL
      sasl.password: ${KAFKA_PASSWORD}
  - id: green
    meta:
      bootstrap.servers: green-1:9092,green-2:9092
  - id: uat
    meta:
      bootstrap.servers: uat-1:9092
"""

_MOVING = "orders.moving"


def _rules(moving_to: str) -> str:
    return f"""\
route-rules:
  - id: r-uat
    priority: 1
    meta: {{rule.isGlobal: true}}
    rule: use cluster uat when client.env=UAT
  - id: r-moving
    meta: {{topic.id: {_MOVING}}}
    rule: use cluster {moving_to}
  - id: r-hotel
    meta: {{rule.isGlobal: true}}
    rule: use cluster green when topic.bu=hotel
  - id: r-default
    meta: {{rule.isGlobal: true}}
    rule: use cluster blue
"""


def _topics(count: int) -> str:
    lines = ["topics:"]
    for i in range(count):
        lines += [f"  - id: topic.{i}", "    meta:", f"      bu: {'hotel' if i % 3 == 0 else 'flight'}"]
    return "\n".join(lines) + "\n"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class _Stats:
    latencies: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    seen_change: dict[int, float] = field(default_factory=dict)

    def error(self, kind: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1


class _RawHttp:
    """A minimal HTTP/1.1 keep-alive client over asyncio streams: POST JSON, read a
    Content-Length answer. The load generator's own cost per request is a fraction of
    httpx's, so that one process can play 1,000 clients on a small machine."""

    def __init__(self, host: str, port: int, timeout: float) -> None:
        self._host, self._port, self._timeout = host, port, timeout
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        try:
            return await asyncio.wait_for(self._post(path, body), self._timeout)
        except BaseException:
            await self.close()  # a half-read answer leaves the connection unusable
            raise

    async def _post(self, path: str, body: bytes) -> tuple[int, bytes]:
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(self._host, self._port)
        assert self._reader is not None
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {self._host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        self._writer.write(head.encode() + body)
        raw = await self._reader.readuntil(b"\r\n\r\n")
        lines = raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.lower() == "content-length":
                length = int(value)
        return status, await self._reader.readexactly(length)

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


async def _client(
    index: int,
    base: str,
    args: argparse.Namespace,
    start: float,
    stop: float,
    change: dict[str, float],
    stats: _Stats,
    tls: ssl.SSLContext,
) -> None:
    rng = random.Random(index)
    topics = [_MOVING, *(f"topic.{rng.randrange(args.topic_count)}" for _ in range(args.topics - 1))]
    env = "UAT" if index % 10 == 0 else "PROD"
    body = {
        "client": {"id": f"app-{index}", "meta": {"env": env, "idc": "sha", "kbear.client": "python/bench"}},
        "topicIds": topics,
    }
    target = "uat" if env == "UAT" else args.move_to
    payload = json.dumps(body).encode()
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    raw = _RawHttp("127.0.0.1", int(base.rsplit(":", 1)[1]), args.timeout)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=args.timeout, verify=tls) as http:
        due = start + rng.random() * args.interval
        while due < stop:
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            try:
                if args.client == "raw":
                    code, content = await raw.post("/route/producer", payload)
                else:
                    response = await http.post("/route/producer", content=payload)
                    code, content = response.status_code, response.content
                now = time.perf_counter()
                if code != 200:
                    stats.error(f"http {code}")
                else:
                    answer = json.loads(content)
                    if answer["status"]["ack"] != "success":
                        stats.error(f"ack {answer['status']['ack']}")
                    elif (
                        "at" in change
                        and index not in stats.seen_change
                        and answer["topicIdRoutes"][_MOVING]["clusterId"] == target
                    ):
                        stats.seen_change[index] = now
                stats.latencies.append(now - due)
            except (TimeoutError, httpx.HTTPError, OSError, asyncio.IncompleteReadError) as exc:
                stats.error(type(exc).__name__)
            due += args.interval
            while due < time.perf_counter() - args.interval:  # more than one interval behind: skip
                stats.error("skipped (client behind)")
                due += args.interval
    await raw.close()


async def _run(args: argparse.Namespace, base: str, directory: Path, server_pid: int) -> dict[str, object]:
    loadavg_at_start = Path("/proc/loadavg").read_text().split()[:3]
    stats = _Stats()
    change: dict[str, float] = {}
    tls = ssl.create_default_context()  # shared: one context for every client, not one each
    start = time.perf_counter() + 2.0  # the clients connect meanwhile
    stop = start + args.duration
    tasks = [
        asyncio.create_task(_client(i, base, args, start, stop, change, stats, tls))
        for i in range(args.clients)
    ]
    await asyncio.sleep(max(0.0, start - time.perf_counter()) + args.warmup)
    stats.latencies.clear()  # measured after the warm-up
    stats.errors.clear()
    server = process_tree(server_pid)
    cpu_server, cpu_self, wall = cpu_seconds(server), time.process_time(), time.perf_counter()
    waited_server, waited_self = run_queue_wait_s(server), run_queue_wait_s([os.getpid()])
    threads = thread_cpu(server)
    await asyncio.sleep(max(0.0, (args.duration - args.warmup) / 2))
    replace_file(directory / "route-rules.yaml", _rules(args.move_to))
    change["at"] = time.perf_counter()
    await asyncio.gather(*tasks)
    wall = time.perf_counter() - wall
    cpu_server = cpu_seconds(server) - cpu_server
    split = by_thread(
        threads, thread_cpu(server), server_pid if args.workers > 1 else None, len(stats.latencies), wall
    )
    cpu_self = time.process_time() - cpu_self
    waited_server = run_queue_wait_s(server) - waited_server
    waited_self = run_queue_wait_s([os.getpid()]) - waited_self
    lat = sorted(stats.latencies)
    routed = [i for i in range(args.clients) if (i % 10 != 0)]  # the UAT clients stay on uat
    delays = [stats.seen_change[i] - change["at"] for i in routed if i in stats.seen_change]

    def pct(p: float) -> float:
        return lat[min(len(lat) - 1, int(p * len(lat)))] * 1000 if lat else float("nan")

    return {
        "clients": args.clients,
        "client": args.client,
        "server_workers": args.workers,
        "fleet": args.fleet,
        "interval_s": args.interval,
        "topics_per_request": args.topics,
        "measured_s": round(wall, 1),
        "requests": len(lat),
        "rate_per_s": round(len(lat) / wall, 1),
        "rate_asked_per_s": round(args.clients / args.interval, 1),
        "errors": sum(stats.errors.values()),
        "error_kinds": stats.errors,
        "p50_ms": round(pct(0.50), 2),
        "p99_ms": round(pct(0.99), 2),
        "max_ms": round(lat[-1] * 1000, 2) if lat else None,
        "mean_ms": round(statistics.fmean(lat) * 1000, 2) if lat else None,
        "server_processes": len(server),
        "server_cpu_pct_of_one_core": round(100 * cpu_server / wall, 1),
        "server_cpu_ms_per_request": round(1000 * cpu_server / len(lat), 3) if lat else None,
        **split,
        "load_generator_cpu_pct_of_one_core": round(100 * cpu_self / wall, 1),
        # time runnable but waiting for a CPU taken by other processes, in % of the run
        "server_cpu_wait_pct": round(100 * waited_server / wall, 1),
        "load_generator_cpu_wait_pct": round(100 * waited_self / wall, 1),
        "change_seen_by": f"{len(delays)}/{len(routed)}",
        "change_max_delay_s": round(max(delays), 2) if delays else None,
        "change_p50_delay_s": round(statistics.median(delays), 2) if delays else None,
        "loadavg_at_start": loadavg_at_start,
        "loadavg_at_end": Path("/proc/loadavg").read_text().split()[:3],
    }


def _event_loop_run(coroutine: Any) -> Any:
    try:
        import uvloop  # the load generator's loop: uvloop when installed (uvicorn's too)
    except ImportError:
        return asyncio.run(coroutine)
    return uvloop.run(coroutine)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between a client's refreshes")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds of load (warm-up included)")
    parser.add_argument("--warmup", type=float, default=5.0, help="first seconds not measured")
    parser.add_argument("--topics", type=int, default=5, help="topics per request (one is the moving topic)")
    parser.add_argument("--topic-count", type=int, default=1000, help="topics in topics.yaml")
    parser.add_argument("--timeout", type=float, default=10.0, help="a request's timeout (seconds)")
    parser.add_argument("--move-to", default="green", help="cluster the moving topic goes to")
    parser.add_argument("--workers", type=int, default=1, help="kbear serve --workers (default: 1)")
    parser.add_argument(
        "--client",
        choices=["raw", "httpx"],
        default="raw",
        help="HTTP client of the simulated clients: raw asyncio streams (cheap) or httpx (default: raw)",
    )
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object only")
    parser.add_argument(
        "--fleet", choices=["on", "off"], default="on", help="kbear serve --fleet (default: on)"
    )
    parser.add_argument(
        "--compare-fleet",
        type=int,
        default=0,
        metavar="N",
        help="N runs with the fleet off and N on, alternately; prints the ratios (results-fleet.jsonl)",
    )
    parser.add_argument(
        "--side-by-side",
        action="store_true",
        help="with --compare-fleet: each off run at the same time as an on run (two servers, two "
        "load generators: what the machine does to one it does to the other)",
    )
    parser.add_argument("--fleet-store", default=None, metavar="URL", help="kbear serve --fleet-store")
    parser.add_argument(
        "--compare-store",
        default=None,
        metavar="URL",
        help="a PostgreSQL server's URL: --runs runs on SQLite and on it, alternately (results-fleet-store.jsonl)",
    )
    parser.add_argument("--runs", type=int, default=3, help="with --compare-store: runs of each store")
    args = parser.parse_args(argv)
    if args.compare_store:
        return _compare_store(args)
    if args.compare_fleet:
        return _compare_fleet(args)
    result = _serve_and_load(args)
    if result is None:
        return 1
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>36}: {value}")
    return 0


def _side_by_side(args: argparse.Namespace) -> dict[str, dict[str, Any]] | None:
    """One run with the fleet off and one on at the same time, each its own server and
    load generator (this script as a child process)."""
    argv = [sys.executable, __file__, "--json"]
    for name in ("clients", "interval", "duration", "warmup", "topics", "topic_count", "timeout"):
        argv += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    argv += ["--move-to", args.move_to, "--workers", str(args.workers), "--client", args.client]
    children = {
        fleet: subprocess.Popen([*argv, "--fleet", fleet], stdout=subprocess.PIPE, text=True)
        for fleet in ("off", "on")
    }
    outputs = {fleet: child.communicate()[0] for fleet, child in children.items()}
    if any(child.returncode for child in children.values()):
        return None
    return {fleet: json.loads(output) for fleet, output in outputs.items()}


def _compare_fleet(args: argparse.Namespace) -> int:
    runs: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
    for _ in range(args.compare_fleet):
        if args.side_by_side:
            pair = _side_by_side(args)
            if pair is None:
                return 1
            for fleet, result in pair.items():
                runs[fleet].append(result)
                print(json.dumps(result), flush=True)
            continue
        for fleet in ("off", "on"):
            args.fleet = fleet
            result = _serve_and_load(args)
            if result is None:
                return 1
            runs[fleet].append(result)
            print(json.dumps(result), flush=True)

    def median(fleet: str, key: str) -> float:
        return statistics.median(float(r[key]) for r in runs[fleet])

    summary: dict[str, Any] = {
        "compare_fleet_runs_each": args.compare_fleet,
        "side_by_side": args.side_by_side,
        "clients": args.clients,
    }
    for key in (
        "p50_ms",
        "mean_ms",
        "p99_ms",
        "server_cpu_ms_per_request",
        "server_cpu_ms_per_request_workers_main_threads",
        "server_cpu_ms_per_request_workers_other_threads",
    ):
        off, on = median("off", key), median("on", key)
        pairs = [float(b[key]) / float(a[key]) for a, b in zip(runs["off"], runs["on"], strict=True)]
        summary[key] = {
            "off": round(off, 3),
            "on": round(on, 3),
            "on_vs_off_pct": round(100 * (on / off - 1), 1),
            # each on run against the off run of its pair (side by side: the same time)
            "paired_on_vs_off_pct": round(100 * (statistics.median(pairs) - 1), 1),
        }
    print(json.dumps(summary))
    with open(Path(__file__).with_name("results-fleet.jsonl"), "a", encoding="utf-8") as out:
        out.write(json.dumps({"summary": summary, "runs": runs}) + "\n")
    return 0


def _fresh_database(url: str, run: int) -> str:
    """A new database of the PostgreSQL server of ``url``: its URL."""
    import psycopg

    name = f"kbear_bench_{os.getpid()}_{run}"
    with psycopg.connect(url, autocommit=True) as db:
        db.execute(f"DROP DATABASE IF EXISTS {name}")
        db.execute(f"CREATE DATABASE {name}")
    return url.rsplit("/", 1)[0] + "/" + name


def _compare_store(args: argparse.Namespace) -> int:
    runs: dict[str, list[dict[str, Any]]] = {"sqlite": [], "postgresql": []}
    for run in range(args.runs):
        for store in ("sqlite", "postgresql"):
            args.fleet_store = None if store == "sqlite" else _fresh_database(args.compare_store, run)
            result = _serve_and_load(args)
            if result is None:
                return 1
            runs[store].append({**result, "store": store})
            print(json.dumps(runs[store][-1]), flush=True)
    summary: dict[str, Any] = {"compare_store_runs_each": args.runs, "clients": args.clients}
    for key in ("p50_ms", "mean_ms", "p99_ms", "server_cpu_ms_per_request"):
        sqlite_ = statistics.median(float(r[key]) for r in runs["sqlite"])
        pg = statistics.median(float(r[key]) for r in runs["postgresql"])
        pairs = [
            float(b[key]) / float(a[key]) for a, b in zip(runs["sqlite"], runs["postgresql"], strict=True)
        ]
        summary[key] = {
            "sqlite": round(sqlite_, 3),
            "postgresql": round(pg, 3),
            "postgresql_vs_sqlite_pct": round(100 * (pg / sqlite_ - 1), 1),
            "paired_pct": round(100 * (statistics.median(pairs) - 1), 1),
        }
    print(json.dumps(summary))
    with open(Path(__file__).with_name("results-fleet-store.jsonl"), "a", encoding="utf-8") as out:
        out.write(json.dumps({"summary": summary, "runs": runs}) + "\n")
    return 0


def _serve_and_load(args: argparse.Namespace) -> dict[str, Any] | None:
    with tempfile.TemporaryDirectory(prefix="kbear-serve-load-") as tmp:
        directory = Path(tmp)
        (directory / "clusters.yaml").write_text(_CLUSTERS)
        (directory / "topics.yaml").write_text(_topics(args.topic_count))
        (directory / "route-rules.yaml").write_text(_rules("blue"))
        port = _free_port()
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kbear.cli",
                "serve",
                "--config",
                tmp,
                "--port",
                str(port),
                "--log-level",
                "warning",
                "--workers",
                str(args.workers),
                "--fleet",
                args.fleet,
                *(["--fleet-store", args.fleet_store] if args.fleet_store else []),
            ],
            stdout=subprocess.DEVNULL,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if server.poll() is not None or time.monotonic() > deadline:
                    print("kbear serve did not start", file=sys.stderr)
                    return None
                time.sleep(0.1)
            result: dict[str, Any] = _event_loop_run(_run(args, base, directory, server.pid))
        finally:
            server.terminate()
            server.wait(timeout=30)
    return result


if __name__ == "__main__":
    raise SystemExit(main())
