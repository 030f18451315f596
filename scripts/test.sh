#!/usr/bin/env bash
# Set up (idempotent) and run the whole test suite against real broker processes and clients.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh test
exec .venv/bin/python -m pytest -q "$@"
