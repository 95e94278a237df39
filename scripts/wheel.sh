#!/usr/bin/env bash
# Build kbear's sdist and wheel (python -m build), install the wheel (not editable)
# into a fresh virtual environment in a temporary directory outside the source tree,
# and from there run `kbear demo` and scripts/check_installed.py (every module
# imports, every package data file of the tree is installed, the compiled dispatcher
# is there when a C compiler is); then builds a wheel from the sdist without a C
# compiler (CC=false): one line must say so, and the wheel holds no compiled module.
# scripts/test.sh runs it; it needs .venv with the dev extra (the `build` package).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/kbear-wheel.XXXXXX")"
trap 'rm -rf "$work"' EXIT
case "$work" in "$ROOT"/*) echo "scripts/wheel.sh: $work is inside the source tree" >&2; exit 1 ;; esac
if ! "$ROOT/.venv/bin/python" -m build --outdir "$work/dist" "$ROOT" >"$work/build.log" 2>&1; then
    cat "$work/build.log" >&2
    exit 1
fi
grep '^kbear: ' "$work/build.log" || true  # the one line said when the C extension is not built
ls "$work/dist"
"${PYTHON:-python3}" -m venv "$work/venv"
wheel="$(ls "$work"/dist/kbear-*.whl)"
# with the extras of kbear serve and of routes from a meta-service: their modules import too
"$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check "$wheel[server,metrics,meta]"
cd "$work"
compiler=0
command -v "${CC:-cc}" >/dev/null 2>&1 && compiler=1
"$work/venv/bin/python" -I "$ROOT/scripts/check_installed.py" "$ROOT" "$compiler"
"$work/venv/bin/kbear" demo --messages 200
# The sdist on a machine without a C compiler: a wheel of pure Python, said in one line.
mkdir "$work/sdist"
tar xzf "$work"/dist/kbear-*.tar.gz -C "$work/sdist"
if ! CC=false "$ROOT/.venv/bin/python" -m build --wheel --outdir "$work/nocc" "$work"/sdist/kbear-* \
    >"$work/nocc.log" 2>&1; then
    cat "$work/nocc.log" >&2
    exit 1
fi
said="$(grep -c '^kbear: the compiled dispatcher was not built' "$work/nocc.log" || true)"
if [ "$said" != 1 ] || "$work/venv/bin/python" -m zipfile -l "$work"/nocc/kbear-*.whl | grep -q '_cdispatch.*\.so'; then
    echo "scripts/wheel.sh: the sdist built without a compiler said so $said time(s) (1 expected), or kept an .so" >&2
    exit 1
fi
case "$(ls "$work"/nocc/)" in
    *-py3-none-any.whl) ;;
    *) echo "scripts/wheel.sh: the wheel built without a compiler is not tagged pure Python: $(ls "$work"/nocc/)" >&2; exit 1 ;;
esac
echo "the sdist without a C compiler: $(grep '^kbear: ' "$work/nocc.log"); $(ls "$work"/nocc/)"
