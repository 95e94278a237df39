#!/usr/bin/env bash
# Run confluent-kafka-python's own broker-less unit tests twice: against plain
# confluent-kafka (baseline) and with confluent_kafka.Producer/Consumer replaced
# by kbear's routed clients (scripts/compat/: a factory turning each test's
# bootstrap.servers into a one-cluster kbear configuration, loaded by a pytest
# plugin). The tests run in place in the given checkout; nothing is copied here.
#
#   bash scripts/compat.sh PATH_TO_CONFLUENT_KAFKA_PYTHON_CHECKOUT [extra pytest args]
#
# Environment: KBEAR_COMPAT_OUT (reports, default /tmp/kbear-compat-<repo>),
# KBEAR_COMPAT_VENV (the venv holding the tests' extra requirements, default
# /tmp/kbear-compat-venv-<repo>; <repo> names this checkout, so that two checkouts'
# runs never share a venv that points at the other's kbear), KBEAR_COMPAT_TIMEOUT (seconds per test, default 60),
# KBEAR_COMPAT_FILE_TIMEOUT (seconds per test file and run, default 180).
# Exit status: 0 when every test passing on the baseline passes through kbear.
set -euo pipefail

if [ $# -lt 1 ] || [ ! -d "$1/tests" ]; then
    echo "usage: $0 PATH_TO_CONFLUENT_KAFKA_PYTHON_CHECKOUT [pytest args...]" >&2
    echo "  (the directory holding confluent-kafka-python's tests/)" >&2
    exit 2
fi
CHECKOUT="$(cd "$1" && pwd)"
shift
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TAG="$(basename "$REPO")-$(printf '%s' "$REPO" | cksum | cut -d' ' -f1)"
OUT="${KBEAR_COMPAT_OUT:-${TMPDIR:-/tmp}/kbear-compat-$TAG}"
VENV="${KBEAR_COMPAT_VENV:-${TMPDIR:-/tmp}/kbear-compat-venv-$TAG}"
TIMEOUT="${KBEAR_COMPAT_TIMEOUT:-60}"
PROJECT_PY="$REPO/.venv/bin/python"
[ -x "$PROJECT_PY" ] || { echo "no $PROJECT_PY: run scripts/test.sh (or scripts/demo.sh) first" >&2; exit 2; }

# The tests' own requirements (avro, schema registry, asyncio) live in a venv of
# their own that sees the project's .venv (kbear, confluent-kafka, pytest) through
# a .pth file, so the project's environment is left as it is.
SITE="$("$PROJECT_PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
BASE_PY="$("$PROJECT_PY" -c 'import sys; print(sys._base_executable)')"
if [ ! -x "$VENV/bin/python" ]; then
    "$BASE_PY" -m venv "$VENV"
fi
VENV_SITE="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "import site; site.addsitedir('$SITE')" > "$VENV_SITE/kbear-project-venv.pth"
PY="$VENV/bin/python"
if ! "$PY" -c 'import confluent_kafka.avro, confluent_kafka.schema_registry, pytest_asyncio, requests_mock, respx, trivup, jsonschema, google.protobuf, google.type' 2>/dev/null; then
    echo "== installing the tests' requirements into $VENV"
    "$PY" -m pip install --quiet --disable-pip-version-check \
        "fastavro>=1.5.4,<2" "avro>=1.11.1,<2" requests attrs "cachetools>=5.5.0" "httpx2>=2.0" \
        "authlib>=1.8.0" pytest-asyncio async-timeout requests-mock respx pytest-timeout \
        trivup "jsonschema>=4.18.0" protobuf googleapis-common-protos
fi

INSTALLED="$("$PY" -c 'import confluent_kafka; print(confluent_kafka.__version__)')"
CHECKOUT_VERSION="$( (sed -n 's/^version *= *"\(.*\)"/\1/p' "$CHECKOUT/pyproject.toml" 2>/dev/null || true) | head -1)"
echo "== confluent-kafka installed: $INSTALLED; checkout: ${CHECKOUT_VERSION:-unknown (no pyproject.toml)}"
if [ -n "$CHECKOUT_VERSION" ] && [ "$CHECKOUT_VERSION" != "$INSTALLED" ]; then
    echo "   warning: the checkout's tests are for $CHECKOUT_VERSION; baseline failures may follow" >&2
fi

# Broker-less unit tests: every tests/test_*.py, plus tests/aio if the checkout has it
# (integration, schema_registry, avro, soak... need brokers or are not client tests;
# the serializing clients' tests run after them, on a mock cluster, see below).
cd "$CHECKOUT"
FILES=(tests/test_*.py)
[ -d tests/aio ] && FILES+=(tests/aio)
rm -rf "$OUT/baseline" "$OUT/routed"
mkdir -p "$OUT/baseline" "$OUT/routed"
# One pytest process per file and run, bounded: a test that hangs where pytest-timeout
# cannot interrupt it costs only its file's report (listed as such), not the run's.
FILE_TIMEOUT="${KBEAR_COMPAT_FILE_TIMEOUT:-180}"
COMMON=(-p no:cacheprovider --timeout="$TIMEOUT" -o junit_family=xunit1 -q -rN)

run() {  # run NAME [pytest args...]
    local name="$1"
    shift
    local start=$SECONDS file base rc
    for file in "${FILES[@]}"; do
        base="$(echo "$file" | tr / _)"
        set +e
        timeout -k 10 "$FILE_TIMEOUT" "$PY" "$REPO/scripts/compat/run_pytest.py" "$file" "${COMMON[@]}" \
            --junitxml="$OUT/$name/$base.xml" "$@" >"$OUT/$name/$base.log" 2>&1
        rc=$?
        set -e
        if [ "$rc" -ge 124 ]; then
            echo "   $name $file: no result (killed after ${FILE_TIMEOUT} s or crashed, exit $rc)"
            rm -f "$OUT/$name/$base.xml"
        fi
    done
    echo "== $name: $((SECONDS - start)) s (logs and reports in $OUT/$name)"
}

run baseline "$@"
PYTHONPATH="$REPO/scripts/compat${PYTHONPATH:+:$PYTHONPATH}" run routed -p kbear_compat_plugin "$@"

# The serializing clients with a Schema Registry: confluent-kafka's tests of
# SerializingProducer / DeserializingConsumer with its Avro, JSON Schema and
# Protobuf serdes, and with its string/number serializers. They need a broker
# and a registry: kbear_compat_brokers starts a mock cluster per pytest run and
# names it (BROKERS) with an in-memory registry (SR_URL=mock://...), on both sides.
FILES=()
for file in tests/integration/schema_registry/_sync/test_avro_serializers.py \
    tests/integration/schema_registry/_sync/test_json_serializers.py \
    tests/integration/schema_registry/_sync/test_proto_serializers.py \
    tests/integration/serialization/test_serializers.py \
    tests/integration/consumer/test_consumer_error.py::test_consume_error; do
    [ -f "${file%%::*}" ] && FILES+=("$file")
done
if [ ${#FILES[@]} -gt 0 ]; then
    PYTHONPATH="$REPO/scripts/compat${PYTHONPATH:+:$PYTHONPATH}" run baseline -p kbear_compat_brokers "$@"
    PYTHONPATH="$REPO/scripts/compat${PYTHONPATH:+:$PYTHONPATH}" \
        run routed -p kbear_compat_brokers -p kbear_compat_plugin "$@"
fi

echo
echo "== per file: tests passing on confluent-kafka (baseline) and through kbear (routed)"
"$PY" "$REPO/scripts/compat/report.py" "$OUT/baseline" "$OUT/routed" --markdown "$OUT/compat.md"
