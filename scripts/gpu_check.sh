#!/usr/bin/env bash
# The sampler's GPU check in one call of at most 10 minutes: benchmarks/bench_llc_device.py with every arm
# (ours eager and compiled, vmap and loop; canonical-interp compiled; the bare steps) on the transformer, p-small
# and p-70m, 8 chains and batch 32 throughout, under a wall-clock budget and a hard timeout.
#
#   OUT=DIR scripts/gpu_check.sh [bench_llc_device.py arguments]      (OUT defaults to _build/gpu_check)
#
# Writes DIR/bench_llc_device.json (after every arm, so a timeout keeps what was measured) and
# DIR/bench_llc_device.log; the log ends with the ratios, each arm's share of the fp32 peak and the proposed
# lib.sgld entries (COMPILE_SAVING and its companions) for the device. Environment:
#   PYTHON             the interpreter (default: .venv/bin/python if present, else python3)
#   CANONICAL_PATH     a folder holding the canonical_interp package, put on PYTHONPATH (default
#                      .venv-canonical-target, made with `pip install --no-deps --target .venv-canonical-target
#                      canonical-interp==0.1.5`; without it the canonical arm says it is skipped)
#   GPU_CHECK_BUDGET_S the benchmark's own budget (default 520: arms that would not fit are skipped, and said so)
#   GPU_CHECK_TIMEOUT_S the hard limit (default 585, under a 600 s device call)
# A CPU smoke test of the same path: scripts/gpu_check.sh --device cpu --quick --vocab 512 --context 32
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-_build/gpu_check}
mkdir -p "$OUT"
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
CANON=${CANONICAL_PATH:-.venv-canonical-target}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if [ -d "$CANON/canonical_interp" ]; then
  export PYTHONPATH="$PYTHONPATH:$(cd "$CANON" && pwd)"
else
  echo "gpu_check: no canonical_interp under $CANON: the canonical arm will be skipped" >&2
fi
# a fresh inductor cache per check, so that the compiles timed are cold (as COMPILE_SECONDS_COLD means)
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-$(mktemp -d /tmp/gpu_check_inductor.XXXXXX)}
export BOOK_CACHE_DIR=${BOOK_CACHE_DIR:-$(mktemp -d /tmp/gpu_check_cache.XXXXXX)}
{
  date -u +"%Y-%m-%dT%H:%M:%SZ"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,power.limit --format=csv
  "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available())"
  uptime
} 2>&1 | tee "$OUT/bench_llc_device.log"
timeout --signal=TERM --kill-after=15 "${GPU_CHECK_TIMEOUT_S:-585}" \
  "$PY" benchmarks/bench_llc_device.py --budget-s "${GPU_CHECK_BUDGET_S:-520}" --json "$OUT/bench_llc_device.json" "$@" \
  2>&1 | tee -a "$OUT/bench_llc_device.log"
rc=${PIPESTATUS[0]}
[ "$rc" = 124 ] && echo "gpu_check: stopped at the ${GPU_CHECK_TIMEOUT_S:-585} s limit; $OUT/bench_llc_device.json has the arms done" >&2
exit "$rc"
