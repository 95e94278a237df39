"""Java classpaths for the JVM processes of the tests: Apache Kafka, MirrorMaker 2, Spark's connector.

Each lives in a POM under ``jvm/<name>/pom.xml`` that declares dependencies only;
Maven resolves them from Maven Central into its local repository (``~/.m2``,
the cache) and :func:`classpath` returns the jars. Nothing is built and no jar is
kept in the repository: a fresh machine needs Java 17, Maven and the network to
Maven Central, once.

The answer is cached in ``jvm/<name>/target/`` keyed by the POM's text and the
properties given, so a second call costs a file read (a Maven start-up is ~2-5 s).
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

JVM_DIR = Path(__file__).resolve().parent.parent / "jvm"


class JvmUnavailable(Exception):
    """Java or Maven is missing, or Maven could not resolve the POM; the message says which."""


def java() -> str:
    """The ``java`` executable on PATH; :class:`JvmUnavailable` when there is none."""
    path = shutil.which("java")
    if path is None:
        raise JvmUnavailable("no java on PATH (Java 17 is needed for the JVM backends)")
    return path


def classpath(name: str, properties: Mapping[str, str] | None = None, timeout_s: float = 900.0) -> list[Path]:
    """The jars of ``jvm/<name>/pom.xml``'s runtime dependencies, resolved by Maven.

    ``properties``: ``-D`` properties for the POM (e.g. ``{"kafka.version": "4.3.1"}``).
    ``timeout_s``: bound on the Maven run in seconds (the first run downloads the jars).
    Raises :class:`JvmUnavailable` when Maven is missing or fails (its last output
    lines in the message).
    """
    pom = JVM_DIR / name / "pom.xml"
    props = dict(sorted((properties or {}).items()))
    key = hashlib.sha256((pom.read_text() + repr(props)).encode()).hexdigest()[:16]
    out = pom.parent / "target" / f"classpath-{key}.txt"
    if out.is_file():
        jars = [Path(p) for p in out.read_text().split(":") if p]
        if jars and all(j.is_file() for j in jars):
            return jars
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JvmUnavailable("no mvn on PATH (Maven resolves the JVM backends' jars)")
    out.parent.mkdir(parents=True, exist_ok=True)
    command = [
        mvn,
        "-q",
        "-B",
        "-f",
        str(pom),
        "dependency:build-classpath",
        "-Dmdep.includeScope=runtime",
        f"-Dmdep.outputFile={out}",
    ]
    command += [f"-D{k}={v}" for k, v in props.items()]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as exc:
        raise JvmUnavailable(f"mvn did not resolve {pom} within {timeout_s:.0f} s") from exc
    if done.returncode != 0 or not out.is_file():
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-8:])
        raise JvmUnavailable(f"mvn could not resolve {pom} (exit {done.returncode}):\n{tail}")
    return [Path(p) for p in out.read_text().split(":") if p]
