# Sourced by scripts/demo.sh and scripts/test.sh: creates .venv (once) and installs kbear
# into it with the extras given in KBEAR_EXTRAS.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip >/dev/null
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".${KBEAR_EXTRAS:+[$KBEAR_EXTRAS]}"
