"""The quickstart (docs/quickstart.md) and the README's Install and Example sections run
as written, in a fresh copy of the repository, as a user's terminal runs them.

The fenced blocks are read from the Markdown itself (not a copy of them) and run in
order, in ONE bash session started at the root of a fresh copy of the repository
(the files ``git clone`` would give: tracked and new unignored files, as they are in
the working tree; in CI's clean checkout that is the clone):

- a ``bash`` block runs in that session (``source``), so its exports and ``cd``
  carry over to the next blocks; a failing command fails the run (``set -e``);
- a ``bash`` block whose first line is a comment saying "in another terminal"
  runs in the background, in a shell of its own started with the environment a new
  terminal has (not the session's exports); when the last block is done it gets
  Ctrl+C (SIGINT to its process group) and must then exit 0;
- a ``python`` block runs with ``.venv/bin/python``, the interpreter the page's own
  first steps made, in the session's directory and environment;
- other blocks (``text``: what the reader will see; ``yaml``) are not run.

Every block must exit 0, and the whole run must end within five minutes (the
quickstart's promise, on a loaded 2-core machine). pip's cache is used.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: the quickstart's promise: from nothing to a routed message in under five minutes
LIMIT_S = 300
_FENCE = re.compile(r"^(`{3,})\s*([\w-]*)")
_ANOTHER_TERMINAL = re.compile(r"^#.*\bin another terminal\b", re.I)
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*$")
#: what a clone does not hold (built or installed here), when the tree is not a git checkout
_NOT_CLONED = (
    ".git",
    ".venv",
    "__pycache__",
    "build",
    "dist",
    "site",
    "target",
    "*.so",
    "*.egg-info",
    ".*_cache",
)
#: what a new terminal starts with (the session's own exports are not in it)
_TERMINAL_ENV = ("HOME", "PATH", "USER", "LANG", "LC_ALL", "TMPDIR", "PIP_CACHE_DIR", "XDG_CACHE_HOME")


@dataclass(frozen=True)
class Block:
    """A fenced block to run: its language, code, and where it is (``file:line``)."""

    language: str
    code: str
    where: str

    @property
    def background(self) -> bool:
        first = self.code.lstrip().splitlines()[0] if self.code.strip() else ""
        return self.language == "bash" and bool(_ANOTHER_TERMINAL.match(first))


def blocks_of(path: Path, sections: tuple[str, ...] = ()) -> list[Block]:
    """The ``bash`` and ``python`` blocks of ``path`` in order; with ``sections``, only
    those under a level-2 heading of one of these titles."""
    found: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    section, fence, language, start, code = "", "", "", 0, []
    for number, line in enumerate(lines, 1):
        if fence:
            if line.strip() == fence:
                if language in ("bash", "python") and (not sections or section in sections):
                    rel = path.relative_to(ROOT).as_posix()
                    found.append(Block(language, "\n".join(code) + "\n", f"{rel}:{start}"))
                fence = ""
            else:
                code.append(line)
            continue
        opening = _FENCE.match(line)
        if opening:
            fence, language, start, code = opening.group(1), opening.group(2).lower(), number, []
            continue
        heading = _HEADING.match(line)
        if heading and len(heading.group(1)) == 2:
            section = heading.group(2)
    return found


def fresh_copy(target: Path) -> Path:
    """The repository's files as a clone has them (tracked and new unignored files,
    links kept as links), from the working tree, in ``target``."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
    )
    if listed.returncode != 0:  # not a git checkout (an unpacked archive): the files but what is built
        shutil.copytree(ROOT, target, symlinks=True, ignore=shutil.ignore_patterns(*_NOT_CLONED))
        return target
    for name in sorted(set(filter(None, listed.stdout.decode().split("\0")))):
        source, dest = ROOT / name, target / name
        if not source.exists() and not source.is_symlink():
            continue  # deleted in the working tree
        dest.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            dest.symlink_to(os.readlink(source))
        else:
            shutil.copy2(source, dest)
    return target


#: the session's start: job control (a background block gets its own process group, as
#: in a terminal), and Ctrl+C to the background blocks at the end or on a failure
_PRELUDE = """\
set -eo pipefail
set -m
pids=()
stopped=""
stop_background() {
  stopped=1
  for pid in "${pids[@]}"; do kill -INT -- "-$pid" 2>/dev/null || true; done
  status=0
  for pid in "${pids[@]}"; do
    wait "$pid" || { echo "::background $pid exited $?"; status=1; }
  done
  return $status
}
on_exit() {
  code=$?
  if [ "$code" -ne 0 ]; then
    echo "::failed with $code"
    [ -n "$stopped" ] || stop_background || true
  fi
}
trap on_exit EXIT"""


def session_script(blocks: list[Block], scratch: Path) -> str:
    """The bash session that runs ``blocks`` as described in the module docstring."""
    keep = " ".join(f"{name}={shlex.quote(os.environ[name])}" for name in _TERMINAL_ENV if name in os.environ)
    lines = [_PRELUDE]
    for index, block in enumerate(blocks):
        file = scratch / f"block{index}.{'py' if block.language == 'python' else 'sh'}"
        file.write_text(block.code, encoding="utf-8")
        lines.append(f"echo {shlex.quote(f'::block {index} {block.where}')}")
        if block.language == "python":
            lines.append(f".venv/bin/python {shlex.quote(str(file))}")
        elif block.background:
            log = scratch / f"block{index}.log"
            lines.append(f"env -i {keep} bash {shlex.quote(str(file))} >{shlex.quote(str(log))} 2>&1 &")
            lines.append("pids+=($!)")
        else:
            lines.append(f"source {shlex.quote(str(file))}")
    lines += ["echo '::stopping the background blocks (Ctrl+C)'", "stop_background", "echo '::done'"]
    return "\n".join(lines) + "\n"


def run_as_written(blocks: list[Block], tmp_path: Path) -> tuple[str, float]:
    """Run ``blocks`` in a fresh copy; the session's output and its duration, s."""
    clone = fresh_copy(tmp_path / "kbear")
    scratch = tmp_path / "blocks"
    scratch.mkdir()
    script = scratch / "session.sh"
    script.write_text(session_script(blocks, scratch), encoding="utf-8")
    started = time.monotonic()
    child = subprocess.Popen(
        ["bash", str(script)],
        cwd=clone,
        env={name: os.environ[name] for name in _TERMINAL_ENV if name in os.environ},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out = child.communicate(timeout=LIMIT_S)[0]
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        out = child.communicate()[0]
        pytest.fail(f"not done within {LIMIT_S} s:\n{out}{_logs(scratch)}")
    elapsed = time.monotonic() - started
    if child.returncode != 0 or "::done" not in out:
        pytest.fail(f"exit {child.returncode} after {elapsed:.0f} s:\n{out}{_logs(scratch)}")
    return out, elapsed


def _logs(scratch: Path) -> str:
    logs = sorted(scratch.glob("*.log"))
    return "".join(f"\n--- {log.name} (a background block)\n{log.read_text()}" for log in logs)


def test_blocks_are_found_as_the_reader_sees_them() -> None:
    quickstart = blocks_of(ROOT / "docs" / "quickstart.md")
    assert quickstart[0].code.startswith("python3 -m venv .venv")
    assert [b.background for b in quickstart].count(True) == 1
    assert any(b.language == "python" for b in quickstart)
    readme = blocks_of(ROOT / "README.md", ("Install", "Example"))
    assert readme[0].code.startswith("python3 -m venv .venv")
    assert any(b.background for b in readme) and any(b.language == "python" for b in readme)


# pytest-timeout (pyproject.toml: 300 s, its thread method ends the whole run) must not fire
# before the run's own limit does, which fails this test alone and shows the session's output.
@pytest.mark.timeout(LIMIT_S + 180)
def test_quickstart_runs_as_written(tmp_path: Path) -> None:
    out, elapsed = run_as_written(blocks_of(ROOT / "docs" / "quickstart.md"), tmp_path)
    assert "received b'paid' from orders" in out
    print(f"docs/quickstart.md ran as written in {elapsed:.0f} s")


@pytest.mark.timeout(LIMIT_S + 180)
def test_readme_install_and_example_run_as_written(tmp_path: Path) -> None:
    out, elapsed = run_as_written(blocks_of(ROOT / "README.md", ("Install", "Example")), tmp_path)
    assert "orders b'paid'" in out
    print(f"README.md's Install and Example ran as written in {elapsed:.0f} s")
