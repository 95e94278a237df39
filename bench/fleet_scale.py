"""How long the fleet's reads take with a large fleet (no server: the functions behind the endpoints).

N clients, each with 5 producer lookups (5 N entries) of the 1,000-topic
configuration of ``bench/serve_load.py``, recorded; then a rule change moves
``orders.moving`` for every client, and the reads are timed: ``/fleet/moves``
for every topic (what the console shows: the entries of the topics the change
can have moved), for one topic (what ``kbear move`` asks), and ``/fleet`` for the
200 most recently seen clients (the console's table); then a global rule
changes and ``/fleet/moves`` reads the whole fleet.

    PYTHONPATH=. .venv/bin/python bench/fleet_scale.py 20000
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from serve_load import _CLUSTERS, _MOVING, _rules, _topics

from kbear.reload import replace_file
from kbear.server import ConfigHolder
from kbear.server.fleet import FleetRecorder
from kbear.server.fleet_api import fleet_json, moves_answer


def main(argv: list[str]) -> int:
    count = int(argv[0]) if argv else 20000
    with tempfile.TemporaryDirectory() as tmp:
        conf = Path(tmp) / "conf"
        conf.mkdir()
        (conf / "clusters.yaml").write_text(_CLUSTERS)
        (conf / "topics.yaml").write_text(_topics(1000))
        (conf / "route-rules.yaml").write_text(_rules("blue"))
        holder = ConfigHolder(conf, watch_interval_s=3600)
        fleet = FleetRecorder(Path(tmp) / "f.db", flush_interval_s=3600)
        digest = holder.served.config.digest
        for i in range(count):
            others = [f"topic.{(i * 7 + j) % 1000}" for j in range(4)]
            lookups = [(t, "", "blue", t) for t in (_MOVING, *others)]
            fleet.record(
                f"app-{i}", {"env": "PROD"}, f"10.0.{i // 250}.{i % 250}:4000", "producer", digest, lookups
            )
        fleet.flush()
        print("entries", fleet.stats().entries)
        replace_file(conf / "route-rules.yaml", _rules("green"))
        holder.check()
        holder.check()
        for label, read in (
            ("/fleet/moves", lambda: moves_answer(fleet, holder, None)),
            ("/fleet/moves?topic", lambda: moves_answer(fleet, holder, _MOVING)),
            (
                "/fleet?limit=200",
                lambda: fleet_json(fleet, holder, {"topic": None, "group": None, "cluster": None}, 200),
            ),
        ):
            start = time.perf_counter()
            read()
            print(f"{label}: {time.perf_counter() - start:.2f} s")
        # a change of a global rule: every topic may have moved, the whole fleet is read
        replace_file(
            conf / "route-rules.yaml", _rules("green").replace("use cluster blue", "use cluster green")
        )
        holder.check()
        holder.check()
        start = time.perf_counter()
        moves_answer(fleet, holder, None)
        print(f"/fleet/moves after a global rule change: {time.perf_counter() - start:.2f} s")
    print("loadavg", Path("/proc/loadavg").read_text().split()[:3])
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
