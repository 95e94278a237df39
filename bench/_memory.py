"""bench/run.py's memory benchmark (memory): resident set size of a routed producer
and consumer next to plain ones, each measured in a fresh child process."""

from __future__ import annotations

import statistics
import subprocess
import sys
from typing import Any

_RSS_CHILD = """
import resource, sys, gc
from kbear.testing import EmbeddedCluster
import confluent_kafka, kbear
c = EmbeddedCluster(); c.create_topic("t", 4)
import os, pathlib, tempfile
d = pathlib.Path(tempfile.mkdtemp())
(d / "clusters.yaml").write_text(f"clusters:\\n  - id: A\\n    meta: {{bootstrap.servers: '{c.bootstrap_servers}'}}\\n")
(d / "route-rules.yaml").write_text("route-rules:\\n  - id: g\\n    meta: {rule.isGlobal: true}\\n    rule: use cluster A\\n")
def rss():
    return int(open('/proc/self/statm').read().split()[1]) * os.sysconf('SC_PAGE_SIZE')
gc.collect(); before = rss()
if sys.argv[1] == 'raw':
    p = confluent_kafka.Producer({'bootstrap.servers': c.bootstrap_servers})
    k = confluent_kafka.Consumer({'bootstrap.servers': c.bootstrap_servers, 'group.id': 'g'})
else:
    p = kbear.RoutedProducer({'kbear.config': str(d), 'kbear.reload.interval.ms': 0}, topics=['t'])
    k = kbear.RoutedConsumer({'kbear.config': str(d), 'group.id': 'g', 'kbear.reload.interval.ms': 0})
k.subscribe(['t'])
for i in range(20000):
    p.produce('t', b'x' * 100, key=str(i))
p.flush()
got = 0
import time
end = time.time() + 20
while got < 20000 and time.time() < end:
    got += len(k.consume(1000, 0.5))
gc.collect()
print(rss() - before, rss())
k.close()
"""


def bench_memory(runs: int) -> dict[str, Any]:
    out: dict[str, list[int]] = {"raw": [], "routed": []}
    for i in range(runs):
        for kind in ("raw", "routed") if i % 2 == 0 else ("routed", "raw"):
            res = subprocess.run(
                [sys.executable, "-c", _RSS_CHILD, kind],
                capture_output=True,
                text=True,
                timeout=120,
                check=True,
            )
            out[kind].append(int(res.stdout.split()[1]))
    raw, routed = statistics.median(out["raw"]), statistics.median(out["routed"])
    return {"raw_rss_bytes": raw, "routed_rss_bytes": routed, "ratio": routed / raw}
