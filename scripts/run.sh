#!/usr/bin/env bash
# Set up (idempotent) and open JupyterLab on the tutorial notebooks (each starts its own local
# cluster on 127.0.0.1). Ctrl+C stops JupyterLab and, with its kernels, every broker.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh test,notebook
extra=()
[ "$(id -u)" -ne 0 ] || extra+=(--allow-root)  # containers and CI machines often run as root
exec .venv/bin/jupyter lab --ip 127.0.0.1 --no-browser --notebook-dir notebooks "${extra[@]}" "$@"
