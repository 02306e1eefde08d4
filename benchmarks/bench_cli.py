"""How long the runner takes to refuse a wrong value, before any kernel starts.

    python benchmarks/bench_cli.py [--threads 1,2] [--repeats R] [--limit-s S] [--json PATH]

Each invocation of BAD_INPUT below is run as a reader types it (``python -m lib run ...``), in a fresh
process. Timing (benchmarks/harness.py): at each thread count of --threads the processes start with
that many threads (torch, BLAS/OpenMP, polars: set in their environment), reported separately; the
invocations are interleaved --repeats times and the best wall time of each is reported, with the
1-minute load average before and after every run. The book promises a refusal in under --limit-s
seconds (default 5): the script exits with status 1 if an invocation is not refused (exit status 2),
or, on a clean run (load average within the cores), the slowest refusal's best time exceeds the limit;
a loaded run is reported, not gated.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # repo root, for `benchmarks` and `lib`

from benchmarks.harness import TIMING_GATE_RULE, add_arguments, interleave, thread_environment  # noqa: E402

BAD_INPUT = [
    ["hilbert", "-p", "seed", "99999999999999999999"],
    ["llc", "-p", "burn_in", "5000"],
    ["logit_rank", "-p", "compare_rank", "100000"],   # the rule 4 · compare_rank <= n_spans
    ["isan", "-p", "grid_T", "[30]"],
    ["intro", "-p", "model_sizes", "['p-smal']"],
    ["hilbert", "--timeout", "-5"],
]


def refusal_status(args: list[str], out: Path, threads: int) -> int:
    """Exit status of one invocation with ``threads`` threads; one not refused within 60 s is stopped (−1)."""
    try:
        proc = subprocess.run([sys.executable, "-m", "lib", "run", *args, "--out", str(out)], cwd=ROOT,
                              capture_output=True, text=True, timeout=60,
                              env={**os.environ, **thread_environment(threads)})
    except subprocess.TimeoutExpired:
        return -1
    return proc.returncode


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(ap, repeats=3)
    ap.add_argument("--limit-s", type=float, default=5.0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)

    runs, ok, counter = [], True, itertools.count()
    with tempfile.TemporaryDirectory() as tmp:
        for t in args.threads:
            codes = {" ".join(bad): set() for bad in BAD_INPUT}

            def invocation(bad: list[str], t: int = t):
                """One run of ``bad``, its exit status kept; every run gets its own output folder."""
                return lambda: codes[" ".join(bad)].add(refusal_status(bad, Path(tmp) / f"run{next(counter)}", t))

            c = interleave({" ".join(bad): invocation(bad) for bad in BAD_INPUT}, threads=t, repeats=args.repeats)
            rows = [{"invocation": name, "best_s": c.best(name), "exit": sorted(codes[name])} for name in codes]
            print(f"== {t} thread{'s' if t > 1 else ''}")
            for row in rows:
                print(f"{row['best_s']:6.2f} s  exit {row['exit']}  run {row['invocation']}")
            slowest = max(row["best_s"] for row in rows)
            refused_all = all(row["exit"] == [2] for row in rows)
            print(f"slowest refusal {slowest:.2f} s (limit {args.limit_s} s); {c.summary()}")
            ok &= refused_all and c.gate(slowest <= args.limit_s)
            runs.append({"threads": t, "rows": rows, "slowest_s": slowest, "refused_all": refused_all,
                         "loaded": c.loaded, "timing": c.as_dict()})
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"ok": ok, "limit_s": args.limit_s, "gate_rule": TIMING_GATE_RULE,
                                         "runs": runs}, indent=1))
    print("OK" if ok else "FAIL (an invocation was not refused, or a refusal was too slow on a clean run)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
