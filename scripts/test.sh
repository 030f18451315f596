#!/usr/bin/env bash
# Set up (idempotent), lint, and run the whole test suite against real broker processes and
# clients.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh test
.venv/bin/ruff check pylog_nb tests bench
.venv/bin/mypy
exec .venv/bin/python -m pytest -q --durations=25 "$@"
