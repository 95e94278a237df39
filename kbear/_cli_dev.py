"""``kbear dev``: local Kafka clusters for a configuration directory, until Ctrl+C
(private to :mod:`kbear.cli`).

For each cluster of ``DIR/clusters.yaml`` whose ``bootstrap.servers`` is a
``${NAME}`` placeholder not set in the environment (what ``kbear init`` writes),
it starts an embedded cluster (:class:`kbear.testing.EmbeddedCluster`: librdkafka's
mock cluster, listening on 127.0.0.1) and prints ``export NAME=127.0.0.1:PORT``;
``--env-file FILE`` also writes those lines to FILE (removed at exit) for a shell
to ``source``. A directory that does not exist, or holds no ``clusters.yaml``, is
first written by ``kbear init`` (clusters ``east`` and ``west``). The topics of
``topics.yaml`` are created on every started cluster (4 partitions); others are
created when a producer first asks for them.

``--serve`` also runs ``kbear serve`` over the directory (a child process, the
``server`` extra), so applications can use ``kbear.config=http://127.0.0.1:PORT``.

The clusters live in this process: they stop, and lose their messages, when it
ends (Ctrl+C, or SIGTERM).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from kbear._cli_config import EXIT_CONFIG_ERROR, EXIT_OK, print_config_error
from kbear._cli_init import DEFAULT_CLUSTERS, placeholder, write_config
from kbear.config import CLUSTERS_FILE, ConfigError, ConfigProblem, KBearConfig, load_config

__all__ = ["add_dev_arguments", "cmd_dev", "placeholders"]

_ONLY_PLACEHOLDER = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")
_PARTITIONS = 4


def add_dev_arguments(parser: argparse.ArgumentParser) -> None:
    """``kbear dev``'s arguments."""
    parser.add_argument(
        "--config",
        default="kbear-dev",
        metavar="DIR",
        help="the configuration directory; written by kbear init when missing (default: kbear-dev)",
    )
    parser.add_argument(
        "--env-file",
        metavar="FILE",
        help="also write the export lines to FILE once the clusters are up (removed at exit)",
    )
    parser.add_argument(
        "--serve", action="store_true", help="also run kbear serve over DIR (the server extra)"
    )
    parser.add_argument("--port", type=int, default=8080, help="--serve: the port (default: 8080)")
    parser.add_argument(
        "--brokers", type=int, default=1, metavar="N", help="brokers per cluster (default: 1)"
    )


def placeholders(config: KBearConfig, environ: dict[str, str] | os._Environ[str]) -> dict[str, str]:
    """Cluster id -> the unset environment variable its ``bootstrap.servers`` is
    (``${NAME}`` alone), in the order of ``clusters.yaml``; ``config`` loaded with
    ``${NAME}`` kept as written (``load_config(..., resolve_env=False)``).

    Raises:
        ConfigError: a cluster's ``bootstrap.servers`` mixes an unset ``${NAME}``
            with other text (no single address to put there).
    """
    found: dict[str, str] = {}
    for cluster in config.clusters.values():
        servers = cluster.bootstrap_servers
        match = _ONLY_PLACEHOLDER.match(servers.strip())
        if match is not None and match.group(1) not in environ:
            found[cluster.id] = match.group(1)
        elif any(n not in environ for n in re.findall(r"\$\{(\w+)\}", servers)):
            raise ConfigError(
                [
                    ConfigProblem(
                        CLUSTERS_FILE,
                        f"cluster '{cluster.id}'",
                        f"bootstrap.servers {servers!r} mixes an unset ${{NAME}} with other text; kbear dev "
                        "starts a cluster for a bootstrap.servers that is one ${NAME} alone",
                    )
                ]
            )
    return found


def _write_env_file(path: Path, exports: list[str]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(f"{line}\n" for line in exports), encoding="utf-8")
    os.replace(tmp, path)  # whole or absent: a shell waiting for it never reads half


def _start_serve(directory: Path, port: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "kbear.cli", "serve", "--config", str(directory), "--port", str(port)]
    child = subprocess.Popen(command, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and child.poll() is None:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=1):
                break
        except OSError:
            time.sleep(0.2)
    print(f"kbear serve: {url} (kbear.config={url}; the console: {url}/)")
    return child


def cmd_dev(args: argparse.Namespace) -> int:
    """``kbear dev``: 0 after Ctrl+C (or SIGTERM), 2 a configuration error."""
    from kbear.testing import EmbeddedCluster  # lazily: loads librdkafka's mock cluster API

    directory = Path(args.config)
    if not (directory / CLUSTERS_FILE).exists() and not directory.is_symlink():
        try:
            write_config(directory, dict.fromkeys(DEFAULT_CLUSTERS))
        except (ValueError, OSError) as exc:
            print(f"kbear: dev: {exc}", file=sys.stderr)
            return EXIT_CONFIG_ERROR
        print(f"wrote {directory} (kbear init: clusters {', '.join(DEFAULT_CLUSTERS)})")
    try:
        written = load_config(directory, resolve_env=False)  # ${NAME} as written
        wanted = placeholders(written, os.environ)
    except ConfigError as exc:
        return print_config_error(exc, str(directory))
    if not wanted:
        print(
            f"kbear: dev: no cluster of {directory / CLUSTERS_FILE} has an unset ${{NAME}} as its "
            f"bootstrap.servers: nothing to start (kbear init writes {placeholder('east')}-style ones)",
            file=sys.stderr,
        )
        return EXIT_CONFIG_ERROR
    stop = threading.Event()
    env = dict(os.environ)
    env_file = Path(args.env_file) if args.env_file else None
    serve: subprocess.Popen[bytes] | None = None
    # undone in reverse order at the end: kbear serve ended, clusters closed, the export
    # file removed, SIGTERM's handler restored; Ctrl+C ends the run
    with contextlib.ExitStack() as stack:
        stack.enter_context(contextlib.suppress(KeyboardInterrupt))
        stack.callback(signal.signal, signal.SIGTERM, signal.signal(signal.SIGTERM, lambda *_: stop.set()))
        if env_file is not None:
            env_file.unlink(missing_ok=True)  # never the addresses of an earlier run
            stack.callback(env_file.unlink, missing_ok=True)
        exports = []
        for cluster_id, name in wanted.items():
            cluster = stack.enter_context(EmbeddedCluster(args.brokers))
            for topic in written.topics:
                cluster.create_topic(topic, _PARTITIONS)
            env[name] = cluster.bootstrap_servers
            exports.append(f"export {name}={cluster.bootstrap_servers}")
            print(f"cluster {cluster_id}: {cluster.bootstrap_servers} (embedded)")
        try:
            config = load_config(directory, environ=env)
        except ConfigError as exc:
            return print_config_error(exc, str(directory))
        if args.serve:
            serve = _start_serve(directory, args.port, env)
            stack.callback(serve.wait, 10)  # after terminate() (a callback runs after those added later)
            stack.callback(serve.terminate)  # nothing once it has ended
        print(
            f"configuration: {directory} ({len(config.clusters)} clusters, {len(config.rules)} rules)",
        )
        print("in the shell of your applications (and of kbear route, kbear move...):")
        for line in exports:
            print(f"  {line}")
        if env_file is not None:
            _write_env_file(env_file, exports)
            shown = str(env_file) if os.sep in str(env_file) else f".{os.sep}{env_file}"
            print(f"  (or: source {shown})")
        print("running until Ctrl+C", flush=True)
        while not stop.wait(1.0):
            if serve is not None and serve.poll() is not None:
                print(f"kbear: dev: kbear serve ended (exit {serve.returncode})", file=sys.stderr)
                return EXIT_CONFIG_ERROR
    print("stopped: the clusters are gone")
    return EXIT_OK
