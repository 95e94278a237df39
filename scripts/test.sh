#!/usr/bin/env bash
# Set up .venv and run kbear's checks: ruff, mypy, the tests (tests/) and the
# integration tests (integration/, on the best broker backend available here),
# and builds the documentation site strictly (mkdocs.yml: no broken link, no page outside the nav).
# Extra arguments go to pytest.
set -euo pipefail
KBEAR_EXTRAS="dev,spark,integration,fast-yaml,meta,server,metrics,docs,schema-registry" source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
echo "== ruff"; .venv/bin/ruff check kbear tests integration examples bench conftest.py scripts
.venv/bin/ruff format --check kbear tests integration examples bench conftest.py scripts
echo "== mypy"; .venv/bin/mypy kbear
echo "== import layers"; .venv/bin/lint-imports  # pyproject.toml [tool.importlinter]
echo "== docs"
# mkdocs-material and mkdocs print notices about MkDocs 2.0 on every build: not ours.
# Not --quiet: it hides the warnings from --strict, which then passes a broken link
# (mkdocs counts the warnings it logs); the INFO lines are left out instead.
NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true .venv/bin/mkdocs build --strict \
    --site-dir "${TMPDIR:-/tmp}/kbear-site.$$" 2>&1 | { grep -v '^INFO' || true; }
rm -rf "${TMPDIR:-/tmp}/kbear-site.$$"
echo "== docs extra alone (scripts/docs_alone.sh: a fresh venv with pip install -e '.[docs]' only, mkdocs build --strict; ~1 min)"
bash scripts/docs_alone.sh
echo "== wheel (scripts/wheel.sh: sdist and wheel built, the wheel installed outside the tree, kbear demo there)"
bash scripts/wheel.sh
echo "== browser (tests/server/test_server_console_browser.py: the kbear serve console in headless Chromium)"
if [ -n "${KBEAR_CHROMIUM:-}" ] || command -v chromium >/dev/null 2>&1; then
    echo "Chromium: ${KBEAR_CHROMIUM:-$(command -v chromium)}"
elif [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing Debian's chromium (apt-get, as root)"
    if ! (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null); then
        echo "WARNING: apt-get could not install chromium: the browser tests will be SKIPPED"
    fi
else
    echo "WARNING: no chromium and no apt-get as root here: the browser tests will be SKIPPED" \
        "(install chromium, or set KBEAR_CHROMIUM to a Chromium binary)"
fi
echo "== PostgreSQL (tests/server/test_server_fleet_postgres.py: kbear serve --fleet-store postgresql://)"
# Debian's postgresql (initdb/pg_ctl, run by the tests as the postgres user in a temporary
# directory; no service started). Measured on this machine: apt-get install ~40 s, the
# tests ~15 s.
if ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || command -v pg_ctl >/dev/null 2>&1; then
    echo "PostgreSQL: $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | tail -1)"
elif [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing Debian's postgresql (apt-get, as root)"
    if ! (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null); then
        echo "WARNING: apt-get could not install postgresql: the PostgreSQL tests will be SKIPPED"
    fi
else
    echo "WARNING: no PostgreSQL and no apt-get as root here: the PostgreSQL tests will be SKIPPED"
fi
export KBEAR_ARTIFACTS="${KBEAR_ARTIFACTS:-${TMPDIR:-/tmp}/kbear-artifacts}"
echo "console screenshots go to $KBEAR_ARTIFACTS/console"
echo "== integration backend (KBEAR_IT_BACKEND=${KBEAR_IT_BACKEND:-auto})"
# auto runs the integration suite on Apache Kafka (the kafka backend, integration/kafka.py)
# when Java 17 and Maven are here: Maven resolves the broker's, MirrorMaker 2's and Spark's
# connector's jars first (~/.m2 is the cache: a fresh machine downloads them once). Without
# them auto falls back to librdkafka's mock clusters (the mock backend: no Java; the tests
# that need what only a real broker does skip, saying why). The run's summary
# ("kbear integration backend") names the backend and version that ran.
case "${KBEAR_IT_BACKEND:-auto}" in
auto|kafka)
    if ! .venv/bin/python -m integration.kafka resolve; then
        echo "WARNING: the integration suite will NOT run on Apache Kafka here (above: why);" \
            "auto falls back to librdkafka's mock clusters (tests needing a real broker skip)"
    fi
    ;;
*) echo "the integration suite runs on ${KBEAR_IT_BACKEND} (asked for by name)" ;;
esac
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
echo "== confluent-kafka: the oldest supported and the newest release (scripts/confluent_versions.sh)"
# ~2 s (a PyPI look-up) while both are .venv's version; ~1-3 min for each that is not.
bash scripts/confluent_versions.sh || status=1
exit "$status"
