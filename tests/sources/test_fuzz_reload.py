"""Fuzzing the reload path (issue #31): random sequences of valid and invalid edits
of a configuration directory (and of in-memory documents), each followed by a
reload. A valid edit is in force after its reload; an invalid one is refused
with a ConfigError and the last good configuration stays in force, routing as
before."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import yaml
from _fuzz import VALUES, examples
from hypothesis import given
from hypothesis import strategies as st

from kbear import ConfigError, MemorySource, NoRouteError, Router
from kbear.config import load_config

CLUSTERS = {"clusters": [{"id": c, "meta": {"bootstrap.servers": f"{c}:9092"}} for c in ("east", "west")]}
TOPICS = ["orders", "audit", "other"]


def rules(default: str, orders: str | None) -> dict[str, Any]:
    out = [{"id": "default", "meta": {"rule.isGlobal": True}, "rule": f"use cluster {default}"}]
    if orders is not None:
        out.insert(
            0,
            {"id": "orders", "priority": 1, "meta": {"topic.id": "orders"}, "rule": f"use cluster {orders}"},
        )
    return {"route-rules": out}


_valid = st.builds(
    lambda d, o: ("valid", {"clusters.yaml": CLUSTERS, "route-rules.yaml": rules(d, o)}),
    st.sampled_from(["east", "west"]),
    st.none() | st.sampled_from(["east", "west"]),
)
_invalid = st.one_of(
    st.builds(lambda: ("invalid", {"clusters.yaml": CLUSTERS, "route-rules.yaml": rules("nowhere", None)})),
    st.builds(
        lambda: (
            "invalid",
            {"clusters.yaml": CLUSTERS, "route-rules.yaml": {"route-rules": [{"id": "x", "rule": "use"}]}},
        )
    ),
    st.builds(
        lambda v: ("invalid", {"clusters.yaml": {"clusters": [v]}, "route-rules.yaml": rules("east", None)}),
        VALUES,
    ),
    st.builds(lambda: ("invalid", {"clusters.yaml": "clusters: [", "route-rules.yaml": rules("east", None)})),
    st.builds(lambda: ("invalid", {"route-rules.yaml": rules("east", None)})),  # clusters.yaml removed
)
_edits = st.lists(_valid | _invalid, min_size=1, max_size=6)


def routes(router: Router) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for topic in TOPICS:
        try:
            out[topic] = router.route_producer(topic).cluster_id
        except NoRouteError:
            out[topic] = None
    return out


def expected(documents: dict[str, Any]) -> dict[str, str | None]:
    chain = documents["route-rules.yaml"]["route-rules"]
    default = chain[-1]["rule"].split()[-1]
    orders = chain[0]["rule"].split()[-1] if len(chain) == 2 else default
    return {"orders": orders, "audit": default, "other": default}


def write(directory: Path, documents: dict[str, Any]) -> None:
    for name in ("clusters.yaml", "route-rules.yaml"):
        path = directory / name
        if name not in documents:
            path.unlink(missing_ok=True)
        elif isinstance(documents[name], str):
            path.write_text(documents[name])
        else:
            path.write_text(yaml.safe_dump(documents[name]))


def apply_edits(router: Router, edit: Any, edits: list[tuple[str, dict[str, Any]]]) -> None:
    good = expected({"route-rules.yaml": rules("east", None)})
    for kind, documents in edits:
        before = router.config
        edit(documents)
        try:
            router.reload()
        except ConfigError as exc:
            assert kind == "invalid", exc
            assert exc.problems
            assert router.config is before
        else:
            assert kind == "valid" or router.config is before, documents
            if kind == "valid":
                good = expected(documents)
        assert routes(router) == good


@examples(60)
@given(edits=_edits)
def test_directory_edits_keep_the_last_good_configuration(edits: list[tuple[str, dict[str, Any]]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        write(directory, {"clusters.yaml": CLUSTERS, "route-rules.yaml": rules("east", None)})
        router = Router(load_config(directory))
        apply_edits(router, lambda documents: write(directory, documents), edits)


@examples(100)
@given(edits=_edits)
def test_in_memory_edits_keep_the_last_good_configuration(edits: list[tuple[str, dict[str, Any]]]) -> None:
    source = MemorySource({"clusters.yaml": CLUSTERS, "route-rules.yaml": rules("east", None)})
    router = Router.from_source(source)

    apply_edits(router, source.replace, edits)  # a text document is refused as not a mapping
