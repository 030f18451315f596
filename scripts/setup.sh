#!/usr/bin/env bash
# Set up everything pylog-nb needs on a fresh machine: system packages, a virtualenv, the package.
# Usage: scripts/setup.sh [extras]   (extras default to "test,bench,notebook")
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS="${1:-test,bench,notebook}"
# command:Debian package (Spark needs a Java runtime, 17 or newer)
SYSTEM_PACKAGES=(kcat:kcat chromium:chromium java:default-jre-headless)

missing=()
for entry in "${SYSTEM_PACKAGES[@]}"; do
  command -v "${entry%%:*}" >/dev/null 2>&1 || missing+=("${entry#*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "setup: installing system packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

PYTHON="${PYTHON:-python3}"
"$PYTHON" -c 'import sys; assert sys.version_info >= (3, 11), "pylog-nb needs Python >= 3.11"'
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[${EXTRAS}]"
# JupyterLab saves the live view's state with the notebook (ipywidgets' "Save Widget State
# Automatically"), so a notebook saved while the view is open reopens showing its last picture.
if [ -d .venv/share/jupyter/lab ]; then
  mkdir -p .venv/share/jupyter/lab/settings
  printf '%s\n' '{"@jupyter-widgets/jupyterlab-manager:plugin": {"saveState": true}}' \
    > .venv/share/jupyter/lab/settings/overrides.json
fi
echo "setup: ready (.venv)"
