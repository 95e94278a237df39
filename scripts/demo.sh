#!/usr/bin/env bash
# Set up .venv and run the kbear demo on two embedded (in-process) Kafka clusters.
# Extra arguments go to `kbear demo` (e.g. --messages 5000).
set -euo pipefail
KBEAR_EXTRAS="" source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
exec .venv/bin/kbear demo "$@"
