#!/usr/bin/env bash
# Set up .venv and run kbear's checks: ruff, mypy, the tests (tests/) and the
# integration tests (integration/, on the best broker backend available here).
# Extra arguments go to pytest.
set -euo pipefail
KBEAR_EXTRAS="dev,spark,integration,fast-yaml,meta,server,metrics" source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
echo "== ruff"; .venv/bin/ruff check kbear tests integration examples bench conftest.py scripts
echo "== mypy"; .venv/bin/mypy kbear
echo "== pytest"
# conftest.py's watchdog ends the process on a hang pytest-timeout cannot interrupt,
# writing every thread's traceback here: shown when pytest fails.
export KBEAR_TEST_WATCHDOG_LOG="${KBEAR_TEST_WATCHDOG_LOG:-${TMPDIR:-/tmp}/kbear-test-watchdog.$$.log}"
status=0
.venv/bin/python -m pytest tests integration "$@" || status=$?
if [ "$status" -ne 0 ] && grep -q "most recent call first" "$KBEAR_TEST_WATCHDOG_LOG" 2>/dev/null; then
    echo "== the watchdog ended pytest (a test hung): $KBEAR_TEST_WATCHDOG_LOG"
    tail -n 200 "$KBEAR_TEST_WATCHDOG_LOG"
fi
exit "$status"
