"""What the serializing clients' tests (tests/schema_registry, tests/aio/test_aio_serde.py,
issue #28) share: the Avro schemas, the schema id of confluent's wire format, and a
two-cluster configuration whose clusters name their Schema Registry."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from conftest import rule
from kbear.reload import replace_file
from kbear.testing import EmbeddedCluster

Clusters = tuple[EmbeddedCluster, EmbeddedCluster]

VALUE_SCHEMA = """{"type": "record", "name": "Reading", "namespace": "kbear.test", "fields": [
  {"name": "seq", "type": "long"}, {"name": "key", "type": "string"}, {"name": "note", "type": "string"}]}"""
KEY_SCHEMA = '"string"'
#: registered first in one registry, so that the schemas above get other ids there
OTHER_SCHEMA = """{"type": "record", "name": "Other", "fields": [{"name": "x", "type": "int"}]}"""


def schema_id(data: bytes) -> int:
    """The schema id of confluent's wire format (magic byte 0, 4-byte big-endian id)."""
    assert data[0] == 0, data[:5]
    return int.from_bytes(data[1:5], "big")


def write_clusters(directory: Path, clusters: Clusters, metas: tuple[dict[str, str], dict[str, str]]) -> None:
    """``clusters.yaml`` with clusters ``A`` and ``B``, each meta extended by ``metas``."""
    entries = [
        {"id": cid, "meta": {"bootstrap.servers": c.bootstrap_servers, **meta}}
        for cid, c, meta in zip(("A", "B"), clusters, metas, strict=True)
    ]
    replace_file(directory / "clusters.yaml", yaml.safe_dump({"clusters": entries}, sort_keys=False))


def on(cluster: str, topic: str, physical: str | None = None) -> list[dict[str, Any]]:
    """Rules sending ``topic`` to ``cluster`` (as ``physical`` if given), the rest to A."""
    statement = f"use cluster {cluster}" + (f", topic {physical}" if physical else "")
    return [rule("move", statement, topic=topic), rule("global", "use cluster A", isGlobal=True)]
