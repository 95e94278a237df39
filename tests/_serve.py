"""What the tests of ``kbear serve`` share (tests/server/): Starlette's test client,
and the ``kbear serve`` command run as a child process on a free local port.

Importing this module skips the importing test module when Starlette (the
``server`` extra) is missing, as ``pytest.importorskip("starlette")`` there did.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette")

import httpx

with warnings.catch_warnings():  # Starlette >= 1.x: "use httpx2" (httpx works)
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

__all__ = ["REPOSITORY", "Served", "TestClient", "free_port", "kbear_serve"]

#: The checkout's root: the child process imports kbear from there.
REPOSITORY = Path(__file__).resolve().parents[1]
#: Longest wait for a started ``kbear serve`` to answer ``/readyz``, seconds.
READY_WAIT_S = 30.0


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Served:
    """A running ``kbear serve`` child process.

    Attributes:
        proc: the process (its ``returncode`` is set once the ``with`` block left).
        port: the local port it listens on; base: ``scheme://127.0.0.1:port``.
        out, err: what it wrote on stdout and stderr, once the ``with`` block left.
    """

    proc: subprocess.Popen[str]
    port: int
    base: str
    out: str = field(default="")
    err: str = field(default="")


@contextmanager
def kbear_serve(
    conf: Path, *options: str, env: Mapping[str, str] | None = None, scheme: str = "http", verify: Any = True
) -> Iterator[Served]:
    """``python -m kbear.cli serve --config conf --port P *options`` on a free port, its
    ``/readyz`` awaited (at most :data:`READY_WAIT_S`; ``verify``: httpx's TLS
    verification of an ``https`` server); ``env`` is added to this process's
    environment. Leaving the block terminates it (SIGTERM) and collects its output.

    Raises:
        AssertionError: the process ended before it was ready (with its output).
    """
    port = free_port()
    command = [sys.executable, "-m", "kbear.cli", "serve", "--config", str(conf), "--port", str(port)]
    proc = subprocess.Popen(
        [*command, *options],
        env={**os.environ, **(env or {}), "PYTHONPATH": str(REPOSITORY)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    served = Served(proc, port, f"{scheme}://127.0.0.1:{port}")
    try:
        deadline = time.monotonic() + READY_WAIT_S
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{served.base}/readyz", verify=verify, timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, proc.communicate(timeout=5)
            time.sleep(0.1)
        yield served
    finally:
        proc.terminate()
        served.out, served.err = proc.communicate(timeout=20)
