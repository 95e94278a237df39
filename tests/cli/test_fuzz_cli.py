"""Fuzzing the command line (issue #31): random argument lists for ``route``,
``explain``, ``validate``, ``lint`` and the top level, over a valid directory, a
broken one, a missing one, another scheme, an unreachable meta-service and
random text. ``main`` returns one of the documented exit codes and never lets a
traceback out."""

from __future__ import annotations

import contextlib
import io
import socket
from collections.abc import Iterator

import pytest
import yaml
from _fuzz import examples
from hypothesis import given
from hypothesis import strategies as st

from kbear.cli import (
    EXIT_CONFIG_ERROR,
    EXIT_LINT_WARNINGS,
    EXIT_META_UNAVAILABLE,
    EXIT_NO_ROUTE,
    EXIT_OK,
    main,
)

DOCUMENTED = {EXIT_OK, EXIT_LINT_WARNINGS, EXIT_CONFIG_ERROR, EXIT_NO_ROUTE, EXIT_META_UNAVAILABLE}


@pytest.fixture(scope="module")
def locations(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    good = tmp_path_factory.mktemp("good")
    (good / "clusters.yaml").write_text(
        yaml.safe_dump({"clusters": [{"id": "east", "meta": {"bootstrap.servers": "east:9092"}}]})
    )
    (good / "route-rules.yaml").write_text(
        yaml.safe_dump(
            {
                "route-rules": [
                    {
                        "id": "r1",
                        "meta": {"topic.id": "orders"},
                        "rule": "use cluster east when client.env=uat",
                    }
                ]
            }
        )
    )
    bad = tmp_path_factory.mktemp("bad")
    (bad / "clusters.yaml").write_text("clusters: [1, {id: }]\n")
    (bad / "route-rules.yaml").write_text("route-rules:\n  - rule: use cluster\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    yield [str(good), str(bad), str(good / "missing"), "ftp://x", closed, "", "http://", "http://[::1"]


_words = st.sampled_from(
    [
        "orders",
        "audit",
        "g1",
        "env=uat",
        "=x",
        "k=",
        "x",
        "",
        "--",
        "-",
        "--json",
        "http://:x",
        "\u00e9\u00e8",
    ]
) | st.text(max_size=6)
_options = st.sampled_from(
    ["--config", "--topic", "--group", "--client-id", "--client-meta", "--json", "--help", "--version", "-h"]
)


@examples(120)
@given(
    command=st.sampled_from(["route", "explain", "validate", "lint", "nope", "--version", ""]),
    where=st.integers(0, 7) | st.just(7),
    rest=st.lists(_options | _words, max_size=7),
    data=st.data(),
)
def test_random_arguments_give_a_documented_exit_code_and_no_traceback(
    locations: list[str], command: str, where: int, rest: list[str], data: st.DataObject
) -> None:
    argv = [command] if command else []
    if data.draw(st.booleans()):
        argv += ["--config", locations[where]]
    if data.draw(st.booleans()):
        argv += ["--topic", data.draw(_words)]
    argv += rest
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    assert code in DOCUMENTED, (argv, code, err.getvalue()[-500:])
    assert "Traceback" not in out.getvalue() + err.getvalue(), argv
