"""mkdocs-gen-files script (mkdocs.yml): writes the generated reference pages.

The pages and how they are made: ``scripts/docs_reference.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import mkdocs_gen_files

sys.path.insert(0, str(Path(__file__).resolve().parent))

from docs_reference import PAGES

for path, write in PAGES.items():
    with mkdocs_gen_files.open(path, "w") as page:
        page.write(write())
    mkdocs_gen_files.set_edit_path(path, "scripts/docs_reference.py")
