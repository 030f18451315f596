#!/usr/bin/env bash
# A Jepsen-style check against real broker processes on 127.0.0.1: idempotent acks=all producers
# under a seeded nemesis, a full read, the anomalies. Exits 1 when it finds any.
# Usage: scripts/check.sh [--seconds 60] [--seed 7] [--faults kill,pause,long-pause,isolate,controller-restart]
#        [--workload records|txn|share|spark] [--group-protocol classic|consumer]
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || scripts/setup.sh test
exec .venv/bin/python -m pylog_nb.check "$@"
