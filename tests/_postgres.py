"""A real PostgreSQL server for the tests of what stores state in it (Debian's
``postgresql`` package: ``initdb`` and ``pg_ctl`` in a temporary directory, on a free
port of 127.0.0.1, as the unprivileged ``postgres`` user when the tests run as root,
as CI does). :func:`postgres_server` skips, naming what is missing, where PostgreSQL
or psycopg is absent; ``scripts/test.sh`` installs Debian's ``postgresql`` as root."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest


def _bin() -> str | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if found:
        return os.path.dirname(found[-1])
    pg_ctl = shutil.which("pg_ctl")
    return None if pg_ctl is None else os.path.dirname(pg_ctl)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """A running server: its ``url``; :meth:`stop` and :meth:`start` it again (same data)."""

    def __init__(self, bindir: str, data: str, options: str, log: str, as_user: list[str], url: str) -> None:
        self._ctl = [*as_user, f"{bindir}/pg_ctl", "-D", data]
        self._options, self._log, self.url = options, log, url

    def start(self) -> None:
        subprocess.run(
            [*self._ctl, "-o", self._options, "-l", self._log, "-w", "start"],
            check=True,
            capture_output=True,
            timeout=120,
        )

    def stop(self) -> None:
        subprocess.run([*self._ctl, "-m", "immediate", "-w", "stop"], capture_output=True, timeout=60)


@contextmanager
def postgres_server() -> Iterator[PostgresServer]:
    """Start a PostgreSQL server (its URL: ``server.url``); stopped after."""
    pytest.importorskip("psycopg", reason="the PostgreSQL fleet store needs psycopg (the server extra)")
    bindir = _bin()
    if bindir is None:
        pytest.skip("PostgreSQL tests skipped: no initdb/pg_ctl (apt-get install postgresql)")
    as_user: list[str] = []
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root
        if shutil.which("runuser") is None:
            pytest.skip("PostgreSQL tests skipped: running as root without runuser")
        as_user = ["runuser", "-u", "postgres", "--"]
    directory = tempfile.mkdtemp(prefix="kbear-pg-")
    if as_user:
        shutil.chown(directory, "postgres")
    data, port = os.path.join(directory, "data"), _free_port()
    options = f"-p {port} -k {directory} -c listen_addresses=127.0.0.1 -c fsync=off"
    server = PostgresServer(
        bindir,
        data,
        options,
        os.path.join(directory, "log"),
        as_user,
        f"postgresql://kbear@127.0.0.1:{port}/postgres",
    )
    try:
        subprocess.run(
            [*as_user, f"{bindir}/initdb", "-D", data, "-U", "kbear", "--auth=trust", "-E", "UTF8"],
            check=True,
            capture_output=True,
            timeout=120,
        )
        server.start()
        import psycopg

        deadline = time.monotonic() + 30
        while True:
            try:
                psycopg.connect(server.url, connect_timeout=2).close()
                break
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        yield server
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)
