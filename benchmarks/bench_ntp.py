"""Benchmark the nuclear-norm NTP-SVM at the talk's size: cvxpy with Clarabel, with SCS, and lib.ntp's ADMM.

    python benchmarks/bench_ntp.py [--vocab 104] [--T 5] [--m 400] [--gap 1e-6] [--clarabel-limit 600] [--json PATH]

Setting: the corpus contexts of the chapter "Geometry of next-token prediction" (word level, the
book's offline corpus, V − 1 most frequent words plus OTHER, the m most frequent contexts of length
T seen at least twice); its support matrix S (V × m) defines the SDP

    min ‖L‖_*  s.t.  L_{zj} = L_{z'j} (z, z' ∈ S_j),  L_{zj} − L_{vj} ≥ 1 (z ∈ S_j, v ∉ S_j).

Each solver runs once, in its own process (one run; the machine is shared, so timings are
noisy), so that a solver killed by the operating system (Clarabel asks for the memory of a dense
factorisation at this size) is reported as failed instead of ending the benchmark. For each, the
duality gap is *certified* by lib.ntp.svm_dual_bound from the solver's own multipliers, and the
constraint violation is measured; a solver counts as reaching the stated gap when both are ≤ --gap.
Reports seconds, ratios to the fastest, and the relative difference of each optimum to the most
accurate one (smallest certified gap). Exits 1 if the fastest solver that reaches the gap differs
from the most accurate by more than --gap (relative objective), or none reaches it.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # repo root, for `lib`

from lib import ntp, substrate  # noqa: E402
from lib.book.timing import machine_info  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vocab", type=int, default=104)
    ap.add_argument("--T", type=int, default=5)
    ap.add_argument("--m", type=int, default=400)
    ap.add_argument("--gap", type=float, default=1e-6)
    ap.add_argument("--clarabel-limit", type=float, default=600.0, help="Clarabel's time limit (s)")
    ap.add_argument("--skip", action="append", default=[], help="solver to skip (CLARABEL, SCS, ADMM)")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--only", default=None, help=argparse.SUPPRESS)   # internal: one solver, in a child process
    args = ap.parse_args(argv)
    if args.only is None:
        return parent(args)

    text = substrate.load_text("default", 1000.0)
    streams, words = ntp.word_stream(text.documents)
    data = ntp.extract_contexts(streams, words, V=args.vocab, T=args.T, m=args.m)
    S = data.S
    runs = {}
    plans = {
        "CLARABEL": lambda: ntp.solve_ntp_svm(S, "CLARABEL", time_limit=args.clarabel_limit),
        "SCS": lambda: ntp.solve_ntp_svm(S, "SCS", eps=args.gap * 1e-1, max_iters=1_000_000),
        "ADMM": lambda: ntp.ntp_svm_first_order(S, tol=args.gap, iters=200_000),
    }
    for name, solve in plans.items():
        if name != args.only:
            continue
        try:
            res = solve()
        except (ntp.SolverError, ntp.NTPError) as err:
            runs[name] = {"error": str(err)}
            print(f"{name:9s} failed: {err}", flush=True)
            continue
        runs[name] = {"seconds": res.seconds, "objective": res.objective, "certified_gap": res.gap,
                      "violation": res.violation, "reaches_gap": max(res.gap, res.violation) <= args.gap}
        print(f"{name:9s} {res.seconds:8.2f} s  ‖L‖_* = {res.objective:.10f}  certified gap {res.gap:.1e}  "
              f"violation {res.violation:.1e}", flush=True)
    args.json.write_text(json.dumps({"runs": runs, "setting": {"V": data.V, "m": data.m, "n": data.n}}))
    return 0


def parent(args) -> int:
    import subprocess
    import tempfile

    runs, setting = {}, {}
    for name in ("CLARABEL", "SCS", "ADMM"):
        if name in args.skip:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "run.json"
            child = ["--vocab", str(args.vocab), "--T", str(args.T), "--m", str(args.m), "--gap", str(args.gap),
                     "--clarabel-limit", str(args.clarabel_limit)]
            proc = subprocess.run([sys.executable, __file__, *child, "--only", name, "--json", str(out)],
                                  capture_output=True, text=True)
            sys.stdout.write(proc.stdout)
            if proc.returncode != 0 or not out.exists():
                tail = (proc.stderr.strip().splitlines() or ["(no message)"])[-1]
                runs[name] = {"error": f"process exited with status {proc.returncode}: {tail}"}
                print(f"{name:9s} failed: {runs[name]['error']}", flush=True)
                continue
            part = json.loads(out.read_text())
            runs.update(part["runs"])
            setting = part["setting"]
    ok = {k: v for k, v in runs.items() if "error" not in v}
    if not ok:
        print("no solver finished")
        return 1
    accurate = min(ok, key=lambda k: max(ok[k]["certified_gap"], ok[k]["violation"]))
    for v in ok.values():
        v["objective_diff_to_most_accurate"] = abs(v["objective"] - ok[accurate]["objective"]) / ok[accurate]["objective"]
    reaching = {k: v for k, v in ok.items() if v["reaches_gap"]}
    fastest = min(reaching, key=lambda k: reaching[k]["seconds"]) if reaching else None
    for v in ok.values():
        if fastest:
            v["time_ratio_to_fastest"] = v["seconds"] / reaching[fastest]["seconds"]
    agree = fastest is not None and ok[fastest]["objective_diff_to_most_accurate"] <= args.gap
    result = {"setting": {**setting, "T": args.T, "gap": args.gap,
                          "clarabel_time_limit_s": args.clarabel_limit},
              "machine": machine_info(), "runs": runs, "most_accurate": accurate, "fastest_reaching_gap": fastest,
              "fastest_agrees_with_most_accurate": agree}
    print(f"most accurate: {accurate}; fastest reaching gap {args.gap:g}: {fastest}; agree: {agree}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
