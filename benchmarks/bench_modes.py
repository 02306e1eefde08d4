"""Benchmark lib.modes: dense modes + propensities, sparse top modes, the effective distribution.

    python benchmarks/bench_modes.py [--threads 1,2] [--repeats 3] [--quick] [--skip-svds] [--json PATH]

1. Dense: all modes and all propensities of an exact order-2 Markov chain on 16 tokens at
   (k, l) = (3, 2), i.e. a 4096 × 256 joint (256 modes; the propensity array 256 × 4096 × 256
   is computed in blocks of modes, checking Lemma 4.10 on the fly).
2. Sparse: the top 100 modes of a random 50,000 × 50,000 joint with 10^6 non-zeros, by
   Modes.top (Lanczos), plain scipy.sparse.linalg.svds on the same matrix M with the same v0
   (the ratio is the overhead of the Modes path), and Modes.top (randomized), with its error
   against Lanczos. Modes.top runs BLAS on one thread at every count (the library's policy,
   lib.book.threads.solver_threads); svds gets the count given.
3. Effective: q^(χ) for a 1000 × 50 joint with 30 % non-zeros (so the barrier is active),
   for several χ, with solver status, Newton steps and KKT residual.

Timing (benchmarks/harness.py): every part runs at each thread count of --threads (torch and
BLAS/OpenMP limited to it, reported separately); within a part the sides are interleaved
--repeats times and each side's best run is reported, with the 1-minute load average before
and after every run; a run whose load exceeded the cores by more than 0.5 is flagged (no timing
is gated here).
Exits 1 if Lemma 4.10 fails or a solve is not optimal. --quick: small sizes (a smoke test).
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # repo root, for `lib`

import numpy as np  # noqa: E402
import scipy  # noqa: E402
import scipy.sparse as sp  # noqa: E402
import scipy.sparse.linalg as spla  # noqa: E402

from benchmarks.harness import TIMING_GATE_RULE, add_arguments, interleave  # noqa: E402
from lib import languages as L  # noqa: E402
from lib.book.timing import machine_info  # noqa: E402
from lib.modes import Modes  # noqa: E402


def propensity_total(m, block):
    """Σ over modes of all propensities, computed in blocks of ``block`` modes (Lemma 4.10: = P(y|x))."""
    total = np.zeros_like(m.conditional)
    for start in range(0, m.n_modes, block):
        total += m.propensity(modes=range(start, min(start + block, m.n_modes))).sum(0)
    return total


def bench_dense(V, order, k, l, block, threads, repeats):
    J = L.random_markov_chain(V, order, rng=0).joint(k, l)
    m = Modes.from_joint(J)
    c = interleave({"modes": lambda: Modes.from_joint(J), "propensities": lambda: propensity_total(m, block)},
                   threads=threads, repeats=repeats)
    worst = float(np.abs(c.result("propensities") - m.conditional).max())
    return dict(shape=list(J.shape), n_modes=m.n_modes, rank=m.rank, modes_s=c.best("modes"),
                propensities_s=c.best("propensities"), propensity_entries=m.n_modes * J.shape[0] * J.shape[1],
                lemma_4_10_max_error=worst, sigma_top5=m.sigma[:5].tolist(), timing=c.as_dict()), c


def random_sparse_joint(n, nnz, seed):
    rng = np.random.default_rng(seed)
    J = sp.csr_matrix((rng.random(nnz), (rng.integers(0, n, nnz), rng.integers(0, n, nnz))), shape=(n, n))
    J.sum_duplicates()
    return J / J.sum()


def bench_sparse(n, nnz, r, skip_svds, threads, repeats):
    J = random_sparse_joint(n, nnz, seed=0)
    sides = {"lanczos": lambda: Modes.top(J, r, method="lanczos", seed=0, zero_rows="drop")}
    if not skip_svds:
        # the same operator and start vector that Modes.top hands to svds
        sqrt_q = np.sqrt(np.asarray(J.sum(axis=1)).ravel())
        keep = sqrt_q > 0
        M = (sp.diags(1 / sqrt_q[keep]) @ J[keep]).T.tocsr()
        v0 = np.random.default_rng(0).standard_normal(min(M.shape))
        sides["svds"] = lambda: spla.svds(M, k=r, v0=v0, solver="arpack")
    sides["randomized"] = lambda: Modes.top(J, r, method="randomized", seed=0, zero_rows="drop")
    c = interleave(sides, threads=threads, repeats=repeats)
    ml, mr = c.result("lanczos"), c.result("randomized")
    out = dict(shape=[n, n], nnz=int(J.nnz), r=r, modes_top_lanczos_s=c.best("lanczos"),
               sigma_1=float(ml.sigma[0]), sigma_r=float(ml.sigma[-1]))
    if not skip_svds:
        s = c.result("svds")[1]
        out.update(plain_svds_s=c.best("svds"), ratio_modes_top_to_svds=c.ratio("lanczos", "svds"),
                   ratio_svds_to_randomized=c.ratio("svds", "randomized"),
                   svds_max_sigma_diff=float(np.abs(np.sort(s)[::-1] - ml.sigma).max()))
    err = np.abs(mr.sigma - ml.sigma) / ml.sigma
    out.update(modes_top_randomized_s=c.best("randomized"), randomized_max_rel_sigma_error=float(err.max()),
               randomized_rel_error_sigma_1=float(err[0]), ratio_randomized_to_lanczos=c.ratio("randomized", "lanczos"),
               timing=c.as_dict())
    return out, c


def effective_joint(nx, ny):
    rng = np.random.default_rng(0)
    J = rng.random((nx, ny)) ** 3 * (rng.random((nx, ny)) < 0.3)
    J *= (1.0 / np.arange(1, nx + 1) ** 1.1)[:, None]            # Zipf-like history marginal
    J[np.arange(nx), rng.integers(0, ny, nx)] += 1e-6             # no empty history
    return J / J.sum()


def bench_effective(nx, ny, chis, threads, repeats):
    J = effective_joint(nx, ny)
    m = Modes.from_joint(J)
    c = interleave({f"chi={chi}": (lambda chi=chi: m.effective(chi, return_info=True)) for chi in chis},
                   threads=threads, repeats=repeats)
    rows = []
    for chi in chis:
        p, info = c.result(f"chi={chi}")
        rows.append(dict(chi=chi, seconds=c.best(f"chi={chi}"), status=info.status, kl=info.kl,
                         newton_steps=info.newton_steps, kkt_residual=info.kkt_residual,
                         duality_gap=info.duality_gap, max_row_sum_error=float(np.abs(p.sum(1) - 1).max())))
    return dict(shape=[nx, ny], zero_fraction=float((J == 0).mean()), rank=m.rank, runs=rows,
                timing=c.as_dict()), c


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(ap, repeats=3)
    ap.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    ap.add_argument("--skip-svds", action="store_true", help="skip the plain svds comparison")
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    args = ap.parse_args(argv)

    if args.quick:
        dense_cfg, sparse_cfg, eff_cfg = (4, 2, 3, 2, 8), (5000, 50_000, 20), (200, 20, [2, 10, 19])
    else:
        dense_cfg, sparse_cfg, eff_cfg = (16, 2, 3, 2, 32), (50_000, 1_000_000, 100), (1000, 50, [1, 5, 20, 40, 49])
    env = machine_info()
    print(f"numpy {np.__version__}, scipy {scipy.__version__}, python {platform.python_version()}, "
          f"{env['cpus']} CPUs; threads {args.threads}, best of {args.repeats} interleaved runs")

    runs, ok = [], True
    V, order, k, l, block = dense_cfg
    n, nnz, r = sparse_cfg
    nx, ny, chis = eff_cfg
    for t in args.threads:
        print(f"\n======== {t} thread{'s' if t > 1 else ''} (torch and BLAS/OpenMP) ========")
        d, cd = bench_dense(V, order, k, l, block, t, args.repeats)
        print(f"[dense] {d['shape'][0]} x {d['shape'][1]} joint (Markov order {order}, |Σ|={V}, k={k}, l={l}): "
              f"modes (SVD) {d['modes_s']:.2f} s, all propensities ({d['propensity_entries']:.2e} entries, "
              f"blocks of {block}) {d['propensities_s']:.2f} s, Lemma 4.10 max error {d['lemma_4_10_max_error']:.1e}")
        print(f"  {cd.summary()}")

        s, cs = bench_sparse(n, nnz, r, args.skip_svds, t, args.repeats)
        print(f"[sparse] {n} x {n}, {s['nnz']} non-zeros, top {r} modes")
        print(f"  {'method':<28}{'best s':>10}")
        print(f"  {'Modes.top lanczos':<28}{s['modes_top_lanczos_s']:>10.2f}   "
              f"(BLAS on one thread: the library's policy)")
        if "plain_svds_s" in s:
            print(f"  {'scipy svds (same M, v0)':<28}{s['plain_svds_s']:>10.2f}   ratio Modes.top/svds = "
                  f"{s['ratio_modes_top_to_svds']:.3f}, max |Δσ| = {s['svds_max_sigma_diff']:.1e}")
        print(f"  {'Modes.top randomized':<28}{s['modes_top_randomized_s']:>10.2f}   max rel σ error vs Lanczos "
              f"{s['randomized_max_rel_sigma_error']:.1e} (σ_1: {s['randomized_rel_error_sigma_1']:.1e})"
              + (f", svds/randomized = {s['ratio_svds_to_randomized']:.2f}" if "plain_svds_s" in s else ""))
        print(f"  {cs.summary()}")

        e, ce = bench_effective(nx, ny, chis, t, args.repeats)
        print(f"[effective] {nx} x {ny} joint, {100 * e['zero_fraction']:.0f} % zeros, rank {e['rank']}")
        print(f"  {'chi':>4}{'best s':>9}{'steps':>7}{'status':>10}{'KL(q||q^chi)':>15}{'KKT':>10}{'gap':>10}")
        for row in e["runs"]:
            print(f"  {row['chi']:>4}{row['seconds']:>9.2f}{row['newton_steps']:>7}{row['status']:>10}"
                  f"{row['kl']:>15.6e}{row['kkt_residual']:>10.1e}{row['duality_gap']:>10.1e}")
        print(f"  {ce.summary()}")
        ok &= d["lemma_4_10_max_error"] < 1e-10 and all(row["status"] == "optimal" for row in e["runs"])
        runs.append(dict(threads=t, loaded=cd.loaded or cs.loaded or ce.loaded, dense=d, sparse=s, effective=e))

    print("\nOK" if ok else "\nFAIL (Lemma 4.10 or a solve of q^(χ))")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(dict(env=env, repeats=args.repeats, ok=ok, gate_rule=TIMING_GATE_RULE,
                                             runs=runs), indent=1))
        print(f"wrote {args.json}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
