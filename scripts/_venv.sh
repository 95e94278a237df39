# Sourced by scripts/demo.sh and scripts/test.sh: creates .venv (once) and installs kbear
# into it with the extras given in KBEAR_EXTRAS.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip >/dev/null
# pip's output (setuptools' notice block about editable installs among it) is shown
# only when the install fails.
install_log="$(mktemp "${TMPDIR:-/tmp}/kbear-install.XXXXXX")"
if ! .venv/bin/python -m pip install --quiet --disable-pip-version-check \
    -e ".${KBEAR_EXTRAS:+[$KBEAR_EXTRAS]}" >"$install_log" 2>&1; then
    cat "$install_log" >&2
    rm -f "$install_log"
    echo "scripts/_venv.sh: pip could not install kbear into .venv (its output above)" >&2
    exit 1
fi
rm -f "$install_log"
