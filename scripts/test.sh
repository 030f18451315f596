#!/usr/bin/env bash
# Set up (idempotent), lint, and run the whole test suite against real broker processes and
# clients.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh test
.venv/bin/ruff check pylog_nb tests bench
.venv/bin/mypy
# Two workers, each given whole test files (a file's fixtures and fixed paths stay in one
# process): most tests wait on brokers, sockets and timers, not on the CPU.
exec .venv/bin/python -m pytest -q --durations=25 -n 2 --dist loadfile "$@"
