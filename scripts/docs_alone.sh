#!/usr/bin/env bash
# The docs extra alone builds the site: a fresh virtual environment with nothing but
# `pip install -e '.[docs]'` (what README and docs/contributing/docs.md tell a writer to
# run), then `mkdocs build --strict`. A generated page that imports a package the extra
# does not install fails here, not in the writer's hands. scripts/test.sh runs it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
work="$(mktemp -d "${TMPDIR:-/tmp}/kbear-docs-alone.XXXXXX")"
trap 'rm -rf "$work"' EXIT
"${PYTHON:-python3}" -m venv "$work/venv"
if ! "$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check -e '.[docs]' \
    >"$work/pip.log" 2>&1; then
    cat "$work/pip.log" >&2
    echo "scripts/docs_alone.sh: pip install -e '.[docs]' failed (its output above)" >&2
    exit 1
fi
# not --quiet: it hides the warnings --strict counts (a broken link would pass)
NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true \
    "$work/venv/bin/mkdocs" build --strict --site-dir "$work/site" 2>&1 | { grep -v '^INFO' || true; }
echo "the docs extra alone builds the site"
