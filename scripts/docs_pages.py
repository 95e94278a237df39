"""mkdocs-gen-files script (mkdocs.yml): the pages the site has without their being
written under docs/.

- the generated reference pages (``scripts/docs_reference.py``);
- repository files the pages link to, published under ``repo/`` as they are in the
  repository: Markdown files become pages (each is in the nav of mkdocs.yml), the
  others (examples, configurations) are served as plain files. A file listed here
  that does not exist fails the build.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import mkdocs_gen_files

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from docs_reference import PAGES  # noqa: E402  (the path is set just above)

#: repository files (or directories: every file in them) published under repo/
REPOSITORY_FILES = (
    "SECURITY.md",
    "bench/RESULTS.md",
    "bench/RESULTS-aio.md",
    "bench/RESULTS-close-hang.md",
    "bench/RESULTS-kafka.md",
    "integration/BACKENDS.md",
    "examples",
    "docker",
)

for path, write in PAGES.items():
    with mkdocs_gen_files.open(path, "w") as page:
        page.write(write())
    mkdocs_gen_files.set_edit_path(path, "scripts/docs_reference.py")

for name in REPOSITORY_FILES:
    source = ROOT / name
    if not source.exists():
        raise FileNotFoundError(f"scripts/docs_pages.py publishes {name}, which does not exist")
    if source.is_file():
        files = [source]
    else:  # a directory (kbear/_demo_config is a link to examples/demo-config: followed)
        files = sorted(Path(d) / f for d, _dirs, names in os.walk(source, followlinks=True) for f in names)
    for file in files:
        relative = file.relative_to(ROOT).as_posix()
        if "__pycache__" in relative:
            continue
        with mkdocs_gen_files.open(f"repo/{relative}", "wb") as out:
            out.write(file.read_bytes())
