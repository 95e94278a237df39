"""How often librdkafka's Consumer.close() hangs when a member closes while its
first assignment arrives, with and without kbear's leave-before-close
(kbear/consumer/_closing.py).

Each run is a child process doing ``--cycles`` subscribe/close cycles with plain
confluent-kafka consumers on one embedded cluster (``group.protocol=consumer``),
closing at 0-190 ms after ``subscribe()``. A hung close holds the GIL, so the
parent counts a child that stops printing for ``--stall`` seconds as hung (and
kills it). Prints one JSON line per mode.

    PYTHONPATH=. python bench/close_hang.py --runs 8 --cycles 200
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time

_CHILD = """
import sys, time
from confluent_kafka import Consumer, Producer
from kbear.consumer._closing import close_consumer
from kbear.testing import EmbeddedCluster

mode, cycles = sys.argv[1], int(sys.argv[2])
cluster = EmbeddedCluster()
p = Producer({"bootstrap.servers": cluster.bootstrap_servers})
for i in range(cycles):
    topic = f"t{i}"
    p.produce(topic, b"x")
    p.flush(5)
    c = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": f"g{i}",
                  "group.protocol": "consumer", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    time.sleep((i % 20) * 0.01)
    t0 = time.perf_counter()
    close_consumer(c) if mode == "leave" else c.close()
    print(f"{time.perf_counter() - t0:.6f}", flush=True)
"""


def run(mode: str, cycles: int, stall: float) -> tuple[bool, list[float]]:
    """One child: (hung?, the durations of the closes that returned, seconds)."""
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, mode, str(cycles)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    durations: list[float] = []

    def read() -> None:
        assert child.stdout is not None
        for line in child.stdout:
            durations.append(float(line))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    seen, last = 0, time.monotonic()
    while reader.is_alive():
        reader.join(0.5)
        if len(durations) != seen:
            seen, last = len(durations), time.monotonic()
        elif time.monotonic() - last > stall:
            child.kill()
            child.wait()
            return True, durations
    child.wait()
    return False, durations


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=8, help="child processes per mode")
    ap.add_argument("--cycles", type=int, default=200, help="subscribe/close cycles per child")
    ap.add_argument("--stall", type=float, default=15.0, help="seconds without a close returning = hung")
    ap.add_argument("--modes", nargs="+", default=["plain", "leave"], choices=["plain", "leave"])
    args = ap.parse_args()
    for mode in args.modes:
        closes = hangs = 0
        durations: list[float] = []
        for _ in range(args.runs):
            hung, d = run(mode, args.cycles, args.stall)
            closes += len(d)
            hangs += hung
            durations += d
        durations.sort()
        p50 = durations[len(durations) // 2] * 1000 if durations else None
        p99 = durations[int(len(durations) * 0.99)] * 1000 if durations else None
        print(
            json.dumps(
                {
                    "mode": mode,
                    "runs": args.runs,
                    "closes_returned": closes,
                    "hangs": hangs,
                    "close_ms_p50": p50,
                    "close_ms_p99": p99,
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
