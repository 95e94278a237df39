#!/usr/bin/env bash
# Set up .venv and run kbear's checks: ruff, mypy, the tests (tests/) and the
# integration tests (integration/, on the best broker backend available here).
# Extra arguments go to pytest.
set -euo pipefail
KBEAR_EXTRAS="dev,spark,integration,fast-yaml" source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
echo "== ruff"; .venv/bin/ruff check kbear tests integration examples bench
echo "== mypy"; .venv/bin/mypy kbear
echo "== pytest"; .venv/bin/python -m pytest tests integration "$@"
