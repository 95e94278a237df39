"""What recording the fleet costs a ``/route/producer`` answer, in-process (no sockets).

The ``kbear serve`` application (:func:`kbear.server.create_app`, its middleware
included) is called through ASGI directly, with the fleet off and on
(the SQLite writer thread running, flushing every 0.1 s), in alternating rounds
of the same requests: N clients, each asking for 5 topics of a 1,000-topic
configuration (``bench/serve_load.py``'s), every client once per round, peer
addresses fixed per client as keep-alive connections are. Reported per request:
the process's CPU time (``time.process_time``: the writer thread included) and
the wall time, medians over the rounds, and on/off in %. Because a shared
machine makes two runs of the same thing differ by several %, the fleet's own
share is also measured directly: the time spent in
``FleetRecorder.record_answer`` (the request path, ``time.thread_time``: it
includes that clock's own cost, about 0.5 us) and the writer thread's CPU
time (``time.thread_time`` around each flush), per request.

    PYTHONPATH=. .venv/bin/python bench/fleet_overhead.py --clients 500 --rounds 40
    PYTHONPATH=. .venv/bin/python bench/fleet_overhead.py --clients 200 --rounds 40 --seen-resolution 0

The whole server also spends uvicorn's share on each request (about 0.45 ms of
CPU in total, README): the in-process figure is the upper bound of the share.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from serve_load import _CLUSTERS, _MOVING, _rules, _topics

from kbear.server import ConfigHolder, create_app
from kbear.server.fleet import FleetRecorder


async def _call(app: Any, body: bytes, client: tuple[str, int]) -> int:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/route/producer",
        "raw_path": b"/route/producer",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        "client": client,
        "server": ("127.0.0.1", 8080),
    }
    sent = False
    status = 0

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            await asyncio.sleep(3600)
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    await app(scope, receive, send)
    return status


async def _round(app: Any, bodies: list[bytes]) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    for i, body in enumerate(bodies):
        if await _call(app, body, ("127.0.0.1", 40000 + i)) != 200:
            raise RuntimeError("a request failed")
    return time.process_time() - cpu, time.perf_counter() - wall


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=40, help="rounds per setting (each: every client once)")
    parser.add_argument(
        "--seen-resolution",
        type=float,
        default=5.0,
        help="FleetRecorder seen_resolution_s (default 5, kbear serve's); 0 notes and writes every "
        "request (the rounds come faster than 5 s, so with 5 only the first round is noted)",
    )
    args = parser.parse_args(argv)
    rng = random.Random(7)
    bodies = []
    for i in range(args.clients):
        topics = [_MOVING, *(f"topic.{rng.randrange(1000)}" for _ in range(4))]
        client = {"id": f"app-{i}", "meta": {"env": "PROD", "idc": "sha"}}
        bodies.append(json.dumps({"client": client, "topicIds": topics}).encode())
    with tempfile.TemporaryDirectory() as tmp:
        conf = Path(tmp) / "conf"
        conf.mkdir()
        (conf / "clusters.yaml").write_text(_CLUSTERS)
        (conf / "topics.yaml").write_text(_topics(1000))
        (conf / "route-rules.yaml").write_text(_rules("blue"))
        holder = ConfigHolder(conf, watch_interval_s=3600)
        fleet = FleetRecorder(Path(tmp) / "fleet.db", seen_resolution_s=args.seen_resolution)
        spent = {"record_s": 0.0, "writer_cpu_s": 0.0}
        record_answer, flush = fleet.record_answer, fleet.flush

        def timed_record(*a: Any) -> None:
            start = time.thread_time()  # CPU time: a shared machine preempts, wall time would count it
            record_answer(*a)
            spent["record_s"] += time.thread_time() - start

        def timed_flush(now: float | None = None) -> int:
            start = time.thread_time()
            try:
                return flush(now)
            finally:
                spent["writer_cpu_s"] += time.thread_time() - start

        fleet.record_answer = timed_record  # type: ignore[method-assign]
        fleet.flush = timed_flush  # type: ignore[method-assign]
        apps = {"off": create_app(holder, watch=False), "on": create_app(holder, watch=False, fleet=fleet)}
        fleet.start()
        results: dict[str, list[tuple[float, float]]] = {"off": [], "on": []}

        async def run() -> None:
            for name in ("off", "on"):  # warm-up: caches, first writes
                for _ in range(3):
                    await _round(apps[name], bodies)
            spent["record_s"] = spent["writer_cpu_s"] = 0.0
            for _ in range(args.rounds):
                for name in ("off", "on"):
                    results[name].append(await _round(apps[name], bodies))

        asyncio.run(run())
        fleet.stop()
        entries = fleet.stats().entries
    n = args.clients
    summary: dict[str, Any] = {
        "clients": n,
        "rounds": args.rounds,
        "seen_resolution_s": args.seen_resolution,
        "fleet_entries": entries,
        "loadavg": Path("/proc/loadavg").read_text().split()[:3],
    }
    for i, what in ((0, "cpu_us_per_request"), (1, "wall_us_per_request")):
        off = statistics.median(r[i] for r in results["off"]) / n * 1e6
        on = statistics.median(r[i] for r in results["on"]) / n * 1e6
        summary[what] = {
            "off": round(off, 1),
            "on": round(on, 1),
            "on_vs_off_pct": round(100 * (on / off - 1), 1),
        }
    requests = n * args.rounds
    summary["record_answer_us_per_request"] = round(spent["record_s"] / requests * 1e6, 2)
    summary["writer_cpu_us_per_request"] = round(spent["writer_cpu_s"] / requests * 1e6, 2)
    off_cpu = summary["cpu_us_per_request"]["off"]
    share = summary["record_answer_us_per_request"] + summary["writer_cpu_us_per_request"]
    summary["fleet_share_of_off_cpu_pct"] = round(100 * share / off_cpu, 1)
    print(json.dumps(summary))
    with open(Path(__file__).with_name("results-fleet.jsonl"), "a", encoding="utf-8") as out:
        out.write(json.dumps({"fleet_overhead": summary}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
