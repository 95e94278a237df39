"""Check an installed (not editable) kbear against the source tree it was built from.

    python -I scripts/check_installed.py SOURCE_ROOT COMPILER

Run by scripts/wheel.sh from a directory outside the tree, with the interpreter of
the virtual environment the wheel went into. Fails (exit 1, naming what) when kbear
is imported from the tree instead of the install, a module of the tree is not
installed or does not import (those that need an extra not installed are listed,
not failed), a package data file of the tree (every file under kbear/ that is not
Python or C source) is not installed, or COMPILER is 1 and the compiled dispatcher
is not active.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

#: the top-level packages the extras bring: a module needing one is skipped when it is absent
EXTRAS = {"pyspark", "pyarrow", "starlette", "uvicorn", "httpx", "prometheus_client", "fastavro", "jinja2"}


def main(root: Path, compiler: bool) -> int:
    import kbear

    installed = Path(kbear.__file__).resolve().parent
    problems: list[str] = []
    if installed.is_relative_to(root):
        problems.append(f"kbear was imported from the source tree ({installed}), not the install")
    source = root / "kbear"
    skipped = []
    files = (Path(d) / f for d, _dirs, names in os.walk(source, followlinks=True) for f in names)
    for path in sorted(files):  # followlinks: kbear/_demo_config links to examples/demo-config
        relative = path.relative_to(source)
        if "__pycache__" in relative.parts or path.suffix in {".so", ".pyd"}:
            continue
        if path.suffix == ".c":
            continue
        if not (installed / relative).is_file():
            problems.append(f"not installed: kbear/{relative.as_posix()}")
            continue
        if path.suffix != ".py":
            continue
        name = ".".join(("kbear", *relative.with_suffix("").parts)).removesuffix(".__init__")
        try:
            importlib.import_module(name)
        except ImportError as exc:
            if (exc.name or "").split(".")[0] in EXTRAS or "install the extra" in str(exc):
                skipped.append(f"{name} ({exc.name})")
            else:
                problems.append(f"{name} does not import: {exc!r}")
    active = kbear.dispatcher()
    if compiler and active != "compiled":
        problems.append(f"a C compiler is here but the installed dispatcher is {active!r}")
    for problem in problems:
        print(f"check_installed: {problem}", file=sys.stderr)
    print(
        f"check_installed: kbear {kbear.__version__} at {installed}: dispatcher {active}; "
        f"{len(skipped)} module(s) need an extra not installed: {', '.join(skipped) or 'none'}"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1]).resolve(), sys.argv[2] == "1"))
