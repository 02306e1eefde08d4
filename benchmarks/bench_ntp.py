"""Benchmark the nuclear-norm NTP-SVM at the talk's size: cvxpy with Clarabel, with SCS, and lib.ntp's ADMM.

    python benchmarks/bench_ntp.py [--vocab 104] [--T 5] [--m 400] [--gap 1e-6] [--clarabel-limit 600]
                                   [--skip SOLVER] [--threads 1,2] [--repeats 3] [--json PATH]

Setting: the corpus contexts of the chapter "Geometry of next-token prediction" (word level, the
book's offline corpus, V − 1 most frequent words plus OTHER, the m most frequent contexts of length
T seen at least twice); its support matrix S (V × m) defines the SDP

    min ‖L‖_*  s.t.  L_{zj} = L_{z'j} (z, z' ∈ S_j),  L_{zj} − L_{vj} ≥ 1 (z ∈ S_j, v ∉ S_j).

Each solve runs in its own process, so that a solver killed by the operating system (Clarabel asks
for the memory of a dense factorisation at this size) is reported as failed instead of ending the
benchmark; a solver that failed is not run again at that thread count. The time compared is the
solve's own (the process's start and the data's extraction excluded). For each, the duality gap is
*certified* by lib.ntp.svm_dual_bound from the solver's own multipliers, and the constraint
violation is measured; a solver counts as reaching the stated gap when both are ≤ --gap.

Timing (benchmarks/harness.py): at each thread count t of --threads, every solver's process runs
with t threads (torch and BLAS/OpenMP, set in its environment and again at run time), reported
separately; the solvers are interleaved (Clarabel, SCS, ADMM, Clarabel, …) --repeats times and
each one's best solve is reported, with the 1-minute load average before and after every run (a
run whose load exceeded the cores by more than 0.5 is flagged). The book's ADMM runs BLAS on one
thread at every t (the library's policy, lib.book.threads.solver_threads). Reports seconds, ratios
to the fastest, and the relative difference of each optimum to the most accurate one (smallest certified gap).
Exits 1 if, at some thread count, the fastest solver that reaches the gap differs from the most
accurate by more than --gap (relative objective), or none reaches it (correctness: checked on
loaded runs too). Smoke check: --m 60 --skip CLARABEL --repeats 1.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # repo root, for `lib`

from benchmarks.harness import (TIMING_GATE_RULE, Comparison, add_arguments, compute_threads,  # noqa: E402
                                thread_environment)
from lib import ntp, substrate  # noqa: E402
from lib.book.timing import machine_info  # noqa: E402

SOLVERS = ("CLARABEL", "SCS", "ADMM")


class SolveFailed(RuntimeError):
    """A solver's process failed or reported an error: that run is not timed."""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vocab", type=int, default=104)
    ap.add_argument("--T", type=int, default=5)
    ap.add_argument("--m", type=int, default=400)
    ap.add_argument("--gap", type=float, default=1e-6)
    ap.add_argument("--clarabel-limit", type=float, default=600.0, help="Clarabel's time limit (s)")
    ap.add_argument("--skip", action="append", default=[], help="solver to skip (CLARABEL, SCS, ADMM)")
    add_arguments(ap, repeats=3)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--only", default=None, help=argparse.SUPPRESS)   # internal: one solver, in a child process
    args = ap.parse_args(argv)
    return parent(args) if args.only is None else child(args)


def child(args) -> int:
    """One solve of ``--only`` with ``--threads`` threads; writes its result (or error) to ``--json``."""
    text = substrate.load_text("default", 1000.0)
    streams, words = ntp.word_stream(text.documents)
    data = ntp.extract_contexts(streams, words, V=args.vocab, T=args.T, m=args.m)
    S = data.S
    plans = {
        "CLARABEL": lambda: ntp.solve_ntp_svm(S, "CLARABEL", time_limit=args.clarabel_limit),
        "SCS": lambda: ntp.solve_ntp_svm(S, "SCS", eps=args.gap * 1e-1, max_iters=1_000_000),
        "ADMM": lambda: ntp.ntp_svm_first_order(S, tol=args.gap, iters=200_000),
    }
    try:
        with compute_threads(args.threads[0]):
            res = plans[args.only]()
        run = {"seconds": res.seconds, "objective": res.objective, "certified_gap": res.gap,
               "violation": res.violation, "reaches_gap": max(res.gap, res.violation) <= args.gap}
    except (ntp.SolverError, ntp.NTPError) as err:
        run = {"error": str(err)}
    args.json.write_text(json.dumps({"run": run, "setting": {"V": data.V, "m": data.m, "n": data.n}}))
    return 0


def solve_in_child(args, name: str, threads: int) -> dict:
    """One solve of ``name`` in a fresh process with ``threads`` threads: its result, or SolveFailed."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run.json"
        cmd = [sys.executable, __file__, "--vocab", str(args.vocab), "--T", str(args.T), "--m", str(args.m),
               "--gap", str(args.gap), "--clarabel-limit", str(args.clarabel_limit), "--threads", str(threads),
               "--only", name, "--json", str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **thread_environment(threads)})
        if proc.returncode != 0 or not out.exists():
            tail = (proc.stderr.strip().splitlines() or ["(no message)"])[-1]
            raise SolveFailed(f"process exited with status {proc.returncode}: {tail}")
        part = json.loads(out.read_text())
    if "error" in part["run"]:
        raise SolveFailed(part["run"]["error"])
    return part


def compare_at(args, threads: int) -> dict:
    """Every solver at one thread count, interleaved; the summary of that count."""
    solvers = [name for name in SOLVERS if name not in args.skip]
    c, errors, setting = Comparison(threads=threads, repeats=args.repeats), {}, {}
    with compute_threads(threads):
        for rep in range(args.repeats):
            for name in solvers:
                if name in errors:
                    continue                                   # failed before: not run again
                try:
                    part = c.time(name, lambda: solve_in_child(args, name, threads),
                                  seconds_of=lambda part: part["run"]["seconds"])
                except SolveFailed as err:
                    errors[name] = str(err)
                    print(f"  {threads} thr, round {rep}: {name:9s} failed: {err}", flush=True)
                    continue
                setting, r = part["setting"], part["run"]
                print(f"  {threads} thr, round {rep}: {name:9s} {r['seconds']:8.2f} s  ‖L‖_* = {r['objective']:.10f}  "
                      f"certified gap {r['certified_gap']:.1e}  violation {r['violation']:.1e}  "
                      f"load {c.load[-1][0]:.2f}→{c.load[-1][1]:.2f}", flush=True)
    runs = {name: {"error": errors[name]} for name in errors if name not in c.sides}
    for name, times in c.sides.items():
        runs[name] = {**times.result["run"], "seconds": times.best, "all_seconds": times.seconds}
    ok = {k: v for k, v in runs.items() if "error" not in v}
    summary = {"threads": threads, "setting": setting, "runs": runs, "timing": c.as_dict(), "loaded": c.loaded}
    if not ok:
        print(f"  {threads} thread(s): no solver finished")
        return {**summary, "agree": False}
    accurate = min(ok, key=lambda k: max(ok[k]["certified_gap"], ok[k]["violation"]))
    for v in ok.values():
        best = ok[accurate]["objective"]
        v["objective_diff_to_most_accurate"] = abs(v["objective"] - best) / best
    reaching = {k: v for k, v in ok.items() if v["reaches_gap"]}
    fastest = min(reaching, key=lambda k: reaching[k]["seconds"]) if reaching else None
    for v in ok.values():
        if fastest:
            v["time_ratio_to_fastest"] = v["seconds"] / reaching[fastest]["seconds"]
    agree = fastest is not None and ok[fastest]["objective_diff_to_most_accurate"] <= args.gap
    print(f"  {c.summary()}")
    ratios = ", ".join(f"{k} {v['time_ratio_to_fastest']:.2f}×" for k, v in ok.items() if "time_ratio_to_fastest" in v)
    print(f"  most accurate: {accurate}; fastest reaching gap {args.gap:g}: {fastest} (time / fastest: {ratios}); "
          f"agree: {agree}")
    return {**summary, "most_accurate": accurate, "fastest_reaching_gap": fastest,
            "fastest_agrees_with_most_accurate": agree, "agree": agree}


def parent(args) -> int:
    results = []
    for t in args.threads:
        print(f"== {t} thread{'s' if t > 1 else ''}, best of {args.repeats} interleaved solves", flush=True)
        results.append(compare_at(args, t))
    ok = all(r["agree"] for r in results)
    result = {"setting": {"T": args.T, "gap": args.gap, "clarabel_time_limit_s": args.clarabel_limit,
                          "repeats": args.repeats},
              "machine": machine_info(), "gate_rule": TIMING_GATE_RULE, "runs": results, "ok": ok}
    print("OK" if ok else "FAIL (at some thread count no solver reached the gap, or the fastest disagrees)")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
