"""A cluster lost for real behind MirrorMaker 2, for the failover tests (``kafka``
backend only): east is a cluster of the test's own (``C``: its broker process may be
killed while the session's clusters stay up), mirrored to the session's ``B`` (west)
by MirrorMaker 2 running the users' ``mm2.properties`` with the identity policy, and
declared in ``clusters.yaml`` as the failover guide says (``kbear.failover.to: west``,
``kbear.mirror: mm2``, ``kbear.mirror.replication.policy: identity``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from integration.backends import BackendUnavailable, Cluster
from integration.conftest import Harness
from integration.helpers import ConfigDir, global_rule, write_yaml_atomically
from integration.mirror import MirrorMaker2

__all__ = ["declare_failover", "mirror_to_west", "spare_east"]


def spare_east(it: Harness) -> Cluster:
    """East: a cluster of this test's own; skips the test off the ``kafka`` backend
    (MirrorMaker 2, a broker process to kill) or when it cannot start."""
    if it.backend.name != "kafka":
        pytest.skip(f"MirrorMaker 2 and a broker process to kill: the kafka backend only ({it.backend.name})")
    try:
        return it.spare_cluster("C")
    except BackendUnavailable as exc:
        pytest.skip(str(exc))


@contextlib.contextmanager
def mirror_to_west(
    it: Harness,
    east: Cluster,
    topics: Sequence[str],
    directory: Path,
    *,
    groups: str = ".*",
    partitions: int = 2,
) -> Iterator[MirrorMaker2]:
    """``topics`` created on east and west (``partitions`` each) and MirrorMaker 2
    mirroring them (and ``groups``' offsets) east -> west, its JVM killed on every
    way out (the test's end or failure, an exception or ^C, during set-up too; a run
    killed outright: :class:`MirrorMaker2` dies with its parent); skips the test when
    MirrorMaker 2 cannot run here."""
    for topic in topics:
        east.create_topic(topic, partitions)
        it.create_topic(topic, partitions, "B")
    mm2: MirrorMaker2 | None = None
    try:
        try:
            mm2 = MirrorMaker2(
                east, it.clusters["B"], directory, topics="|".join(topics), groups=groups, identity=True
            )
        except BackendUnavailable as exc:
            pytest.skip(str(exc))
        yield mm2
    finally:
        if mm2 is not None:
            mm2.close()


def declare_failover(it: Harness, east: Cluster, mirror: str = "mm2") -> ConfigDir:
    """A configuration routing every topic to east, east failing over to west (the
    session's ``B``) through MirrorMaker 2 under the identity policy (``mirror``:
    ``kbear.mirror``, ``identical`` for a standby declared a copy offset for offset)."""
    config = it.config([global_rule("east")], {"east": east.bootstrap_servers})
    east_meta = {
        "bootstrap.servers": east.bootstrap_servers,
        "kbear.failover.to": "west",
        "kbear.mirror": mirror,
    }
    if mirror == "mm2":
        east_meta["kbear.mirror.replication.policy"] = "identity"
    clusters = [
        {"id": "east", "meta": east_meta},
        {"id": "west", "meta": {"bootstrap.servers": it.bootstrap("B")}},
    ]
    write_yaml_atomically(config.path / "clusters.yaml", {"clusters": clusters})
    return config
