"""KBear's own files (tests/data/kbear/, copied unchanged from ctripcorp/kbear: see
its README), for the tests that load them: the configuration tests and the
meta-service client's."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

KBEAR_DATA = Path(__file__).parent / "data" / "kbear"
#: a topic KBear's files route
HELLO = "fx.kafka.demo.hello.run"


def kbear_copy(tmp_path: Path, *, servers: str | None = None) -> Path:
    """KBear's files, unchanged (when ``servers`` is given, every cluster's
    bootstrap.servers pointed there)."""
    target = tmp_path / "kbear"
    shutil.copytree(KBEAR_DATA, target)
    if servers is not None:
        clusters = yaml.safe_load((KBEAR_DATA / "clusters.yaml").read_text())
        for entry in clusters["clusters"]:
            entry["meta"]["bootstrap.servers"] = servers
        (target / "clusters.yaml").write_text(yaml.safe_dump(clusters, sort_keys=False))
    return target
