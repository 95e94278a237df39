"""``kbear serve``'s refusals before it listens: token, TLS options, directory, interval."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from kbear.cli import main
from kbear.server.auth import TOKEN_ENV, read_tokens

CLUSTERS = "clusters:\n  - id: a\n    meta: {bootstrap.servers: a:9092}\n"
RULES = "route-rules:\n  - id: r\n    meta: {rule.isGlobal: true}\n    rule: use cluster a\n"


@pytest.fixture
def conf(tmp_path: Path) -> Path:
    (tmp_path / "clusters.yaml").write_text(CLUSTERS)
    (tmp_path / "route-rules.yaml").write_text(RULES)
    return tmp_path


def test_read_tokens(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("# old one first\n  old-token \n\nnew-token\n")
    assert read_tokens(tokens, {TOKEN_ENV: "ignored"}) == ("old-token", "new-token")
    assert read_tokens(None, {TOKEN_ENV: " env-token\n"}) == ("env-token",)
    assert read_tokens(None, {}) == ()
    tokens.write_text("# nothing\n\n")
    with pytest.raises(ValueError, match="holds no token"):
        read_tokens(tokens, {})
    with pytest.raises(ValueError, match="blank"):
        read_tokens(None, {TOKEN_ENV: "  "})
    with pytest.raises(OSError):
        read_tokens(tmp_path / "missing", {})


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--token-file", "/nonexistent/token"], "cannot read the token"),
        (["--ssl-certfile", "cert.pem"], "--ssl-certfile and --ssl-keyfile go together"),
        (["--ssl-keyfile", "key.pem"], "--ssl-certfile and --ssl-keyfile go together"),
        (["--ssl-ca-certs", "ca.pem"], "--ssl-ca-certs needs --ssl-certfile"),
        (["--watch-interval", "0"], "watch_interval_s must be > 0"),
    ],
)
def test_refused_options_exit_2(
    conf: Path, extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "--config", str(conf), *extra]) == 2
    assert message in capsys.readouterr().err


def test_a_bad_directory_exits_2_with_every_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "route-rules.yaml").write_text(RULES.replace("use cluster a", "use cluster"))
    assert main(["serve", "--config", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "2 problem(s)" in err
    assert "clusters.yaml: missing" in err
    assert "route-rules.yaml: rule 'r'" in err
