"""How long the runner takes to refuse a wrong value, before any kernel starts.

    python benchmarks/bench_cli.py [--repeats R] [--limit-s S] [--json PATH]

Each invocation of BAD_INPUT below is run as a reader types it (``python -m lib run ...``), in a fresh
process, --repeats times; the best wall time of each is reported with the load average. The book promises
a refusal in under --limit-s seconds (default 5): the script exits with status 1 if the slowest refusal's
best time exceeds it on a machine whose load average is below its core count (a loaded machine is
reported, not gated).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

BAD_INPUT = [
    ["hilbert", "-p", "seed", "99999999999999999999"],
    ["llc", "-p", "burn_in", "5000"],
    ["logit_rank", "-p", "compare_rank", "3"],
    ["isan", "-p", "grid_T", "[30]"],
    ["intro", "-p", "model_sizes", "['p-smal']"],
    ["hilbert", "--timeout", "-5"],
]


def refusal_seconds(args: list[str], out: Path) -> tuple[float, int]:
    """Wall seconds and exit status of one invocation; one not refused within 60 s is stopped (exit None)."""
    start = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-m", "lib", "run", *args, "--out", str(out)], cwd=ROOT,
                              capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return time.perf_counter() - start, None
    return time.perf_counter() - start, proc.returncode


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--limit-s", type=float, default=5.0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    import tempfile

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for bad in BAD_INPUT:
            times, codes = [], set()
            for r in range(args.repeats):
                t, rc = refusal_seconds(bad, Path(tmp) / f"out{len(rows)}-{r}")
                times.append(t)
                codes.add(-1 if rc is None else rc)
            rows.append({"invocation": " ".join(bad), "best_s": min(times), "exit": sorted(codes)})
            print(f"{min(times):6.2f} s  exit {sorted(codes)}  run {' '.join(bad)}")
    load, cores = os.getloadavg()[0], os.cpu_count() or 1
    slowest = max(r["best_s"] for r in rows)
    loaded = load > cores
    print(f"slowest refusal {slowest:.2f} s (limit {args.limit_s} s); load average {load:.2f} on {cores} cores"
          + (" (loaded: reported, not gated)" if loaded else ""))
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "load_average": load, "cores": cores}, indent=1))
    refused_all = all(r["exit"] == [2] for r in rows)
    return 0 if refused_all and (loaded or slowest <= args.limit_s) else 1


if __name__ == "__main__":
    sys.exit(main())
