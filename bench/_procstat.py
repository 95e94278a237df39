"""What a process tree spends, from ``/proc`` (Linux): CPU time per process and per
thread, time waiting for a CPU, wake-ups (``bench/serve_load.py``'s server accounting)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (the worker processes of ``--workers N``)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
    tree = [pid]
    for parent in tree:
        tree += [child for child, its_parent in parents.items() if its_parent == parent]
    return tree


def cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime + stime
    return total / os.sysconf("SC_CLK_TCK")


def run_queue_wait_s(pids: list[int]) -> float:
    """Seconds the process's threads spent runnable but waiting for a CPU (``/proc/<pid>/task/*/schedstat``):
    what a machine shared with other work takes from it."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{pid}/task").iterdir():
                with contextlib.suppress(OSError, IndexError, ValueError):  # a thread that just ended
                    total += int((task / "schedstat").read_text().split()[1])
    return total / 1e9


def thread_cpu(pids: list[int]) -> dict[tuple[int, int], tuple[float, int]]:
    """Per thread of ``pids`` ((pid, thread id) -> CPU seconds, voluntary context
    switches: how often it went to sleep, i.e. woke up again), from ``/proc/<pid>/task``
    (``schedstat``: nanoseconds, not clock ticks)."""
    threads: dict[tuple[int, int], tuple[float, int]] = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{pid}/task").iterdir():
                with contextlib.suppress(OSError, IndexError, ValueError):  # a thread that just ended
                    ran_ns = int((task / "schedstat").read_text().split()[0])
                    status = (task / "status").read_text()
                    switches = int(status.split("\nvoluntary_ctxt_switches:", 1)[1].split()[0])
                    threads[(pid, int(task.name))] = (ran_ns / 1e9, switches)
    return threads


def by_thread(
    before: dict[tuple[int, int], tuple[float, int]],
    after: dict[tuple[int, int], tuple[float, int]],
    supervisor: int | None,
    requests: int,
    wall: float,
) -> dict[str, float]:
    """The server's CPU per request split by thread: the workers' main threads (the
    event loop: every request's own work), their other threads (the configuration
    watcher, the fleet's writer), the supervisor of ``--workers N``; and how often the
    workers' other threads woke up (per second)."""
    cpu = {"main": 0.0, "other": 0.0, "supervisor": 0.0}
    wakeups = 0
    for key, (seconds, switches) in after.items():
        seconds0, switches0 = before.get(key, (0.0, 0))
        pid, tid = key
        kind = "supervisor" if pid == supervisor else "main" if tid == pid else "other"
        cpu[kind] += seconds - seconds0
        if kind == "other":
            wakeups += switches - switches0
    per = 1000 / max(1, requests)
    return {
        "server_cpu_ms_per_request_workers_main_threads": round(cpu["main"] * per, 3),
        "server_cpu_ms_per_request_workers_other_threads": round(cpu["other"] * per, 3),
        "server_cpu_ms_per_request_supervisor": round(cpu["supervisor"] * per, 3),
        "server_other_threads_wakeups_per_s": round(wakeups / wall, 1),
    }
