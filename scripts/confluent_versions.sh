#!/usr/bin/env bash
# Run by scripts/test.sh after .venv is set up: kbear against the oldest confluent-kafka it
# supports (pyproject.toml's lower bound) and the newest release on PyPI, where they differ
# from the one in .venv (the newest the bounds allow, which the whole suite tests).
#
# Each other version is installed with its own dependencies into a directory of its own
# (pip --target, put first on PYTHONPATH over .venv), then runs the tests that meet
# confluent-kafka's API: the unit tests, the Schema Registry and asyncio serde tests, and
# the API fidelity tests. Cost: one `pip index` look-up when the versions agree (as on
# 2026-11-28: 2.16.1 is both); ~1-3 min per version that differs.
#
# Fails when the oldest fails, or the newest fails although the bounds allow it. A newest
# release beyond the upper bound only warns (users cannot install it with kbear), and a
# pass there says the bound may be raised. KBEAR_CONFLUENT_VERSIONS="2.15.1 ..." tests
# those versions instead (to try one before moving a bound).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
read -r oldest upper < <(.venv/bin/python - <<'EOF'
import re, tomllib
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
spec = next(d for d in deps if d.startswith("confluent-kafka"))
print(re.search(r">=([\d.]+)", spec)[1], re.search(r"<([\d.]+)", spec)[1])
EOF
)
installed=$(.venv/bin/python -c "import importlib.metadata as m; print(m.version('confluent-kafka'))")
if [ -n "${KBEAR_CONFLUENT_VERSIONS:-}" ]; then
    versions="$KBEAR_CONFLUENT_VERSIONS"
else
    newest=$(.venv/bin/python -m pip index versions --disable-pip-version-check confluent-kafka 2>/dev/null \
        | sed -n 's/^confluent-kafka (\(.*\))$/\1/p' || true)
    if [ -z "$newest" ]; then
        echo "WARNING: PyPI did not say which confluent-kafka is the newest: only the oldest is tested"
    fi
    versions=$(printf '%s\n' "$oldest" $newest | sort -u | tr '\n' ' ')
fi
echo "confluent-kafka: .venv has $installed; bounds >=$oldest,<$upper; testing: $versions(each unless it is .venv's)"
below_upper() {  # is version $1 below the upper bound?
    .venv/bin/python -c "import sys; v = lambda s: tuple(map(int, s.split('.'))); sys.exit(v('$1') >= v('$upper'))"
}
status=0
for version in $versions; do
    [ "$version" = "$installed" ] && continue
    target="${TMPDIR:-/tmp}/kbear-confluent-$version"
    started=$SECONDS
    .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade --target "$target" \
        "confluent-kafka[avro,schemaregistry]==$version" 2>&1 | grep -v "dependency resolver\|but you have" || true
    result=0
    PYTHONPATH="$target" .venv/bin/python -c \
        "import confluent_kafka as c; print('testing confluent-kafka', c.version(), 'librdkafka', c.libversion(), 'from', c.__file__)"
    PYTHONPATH="$target" .venv/bin/python -m pytest -q -p no:cacheprovider -m unit tests || result=$?
    PYTHONPATH="$target" .venv/bin/python -m pytest -q -p no:cacheprovider -m "not unit" \
        tests/schema_registry tests/aio/test_aio_serde.py tests/test_api_fidelity.py || result=$?
    echo "confluent-kafka $version: $([ $result = 0 ] && echo passed || echo FAILED) in $((SECONDS - started)) s"
    if [ $result != 0 ]; then
        if [ "$version" = "$oldest" ] || below_upper "$version"; then
            status=1
        else
            echo "WARNING: confluent-kafka $version (beyond the upper bound <$upper) fails kbear's tests"
        fi
    elif ! below_upper "$version"; then
        echo "NOTE: confluent-kafka $version passes: the upper bound <$upper may be raised past it"
    fi
done
exit "$status"
