#!/usr/bin/env bash
# Create the baseline venvs of benchmarks/bench_llc.py: .venv-devinterp2 (devinterp 2.0.1),
# .venv-devinterp1 (devinterp 1.3.2) and .venv-canonical (canonical-interp 0.1.5), as named by the
# "# venv: DIR REQUIREMENT..." lines of requirements-bench.txt, with every other line of that file
# as pip constraints; threadpoolctl (the benchmark workers' thread limits) goes into each.
# Idempotent: a venv whose stamp matches requirements-bench.txt and this script is left alone.
set -euo pipefail
cd "$(dirname "$0")/.."
REQ=requirements-bench.txt
PYTHON=${PYTHON:-}
if [ -z "$PYTHON" ]; then
  for candidate in python3.11 python3.12 python3.10 python3; do
    if command -v "$candidate" >/dev/null 2>&1; then PYTHON=$candidate; break; fi
  done
fi
[ -n "$PYTHON" ] || { echo "setup_bench: no python3 found; install Python 3.10-3.12" >&2; exit 1; }
want=$(cat "$REQ" "$0" | sha256sum | cut -d' ' -f1)
pip_q=(-m pip install -q --disable-pip-version-check)
version_of() { "$1/bin/python" -c "import importlib.metadata as m; print(m.version('$2'))"; }
grep -E '^# venv: ' "$REQ" | while read -r _ _ venv requirements; do
  stamp="$venv/.installed"
  if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    touch "$stamp"; echo "setup_bench: $venv up to date ($requirements)"
    continue
  fi
  if [ ! -x "$venv/bin/python" ]; then
    echo "setup_bench: creating $venv with $("$PYTHON" --version)"
    "$PYTHON" -m venv "$venv"
  fi
  # torch first, alone and pinned: never let an open range pull a CUDA build.
  "$venv/bin/python" "${pip_q[@]}" -c "$REQ" "torch==2.13.0"
  torch_first=$(version_of "$venv" torch)
  # shellcheck disable=SC2086  # one word per requirement
  "$venv/bin/python" "${pip_q[@]}" -c "$REQ" "torch==2.13.0" threadpoolctl $requirements
  torch_now=$(version_of "$venv" torch)
  if [ "$torch_now" != "$torch_first" ]; then
    echo "setup_bench: installing '$requirements' replaced torch $torch_first by $torch_now in $venv" >&2
    exit 1
  fi
  echo "$want" > "$stamp"
  echo "setup_bench: ready ($venv; $requirements, torch $torch_now)"
done
