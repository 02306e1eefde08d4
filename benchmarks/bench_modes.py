"""Benchmark lib.modes: dense modes + propensities, sparse top modes, the effective distribution.

    python benchmarks/bench_modes.py [--threads T] [--quick] [--json PATH]

1. Dense: all modes and all propensities of an exact order-2 Markov chain on 16 tokens at
   (k, l) = (3, 2), i.e. a 4096 × 256 joint (256 modes; the propensity array 256 × 4096 × 256
   is computed in blocks of modes, checking Lemma 4.10 on the fly).
2. Sparse: the top 100 modes of a random 50,000 × 50,000 joint with 10^6 non-zeros, by
   Modes.top (Lanczos), plain scipy.sparse.linalg.svds on the same matrix M with the same v0
   (one run each, side by side: the ratio is the overhead of the Modes path), and
   Modes.top (randomized), with its error against Lanczos.
3. Effective: q^(χ) for a 1000 × 50 joint with 30 % non-zeros (so the barrier is active),
   for several χ, with solver status, Newton steps and KKT residual.

--threads sets OPENBLAS/OMP/MKL_NUM_THREADS before numpy loads (on a busy shared machine
multithreaded BLAS can be many times slower than one thread). Timings are one run each.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # repo root, for `lib`

from lib.book.timing import best_of  # noqa: E402


def timed(fn):
    return best_of(fn, 1)


def bench_dense(np, L, Modes, V, order, k, l, block):
    t_joint, J = timed(lambda: L.random_markov_chain(V, order, rng=0).joint(k, l))
    t_svd, m = timed(lambda: Modes.from_joint(J))
    cond, worst, t_prop = m.conditional, 0.0, 0.0
    total = np.zeros_like(cond)
    for start in range(0, m.n_modes, block):
        t, rho = timed(lambda: m.propensity(modes=range(start, min(start + block, m.n_modes))))
        t_prop += t
        total += rho.sum(0)
        del rho
    worst = float(np.abs(total - cond).max())
    return dict(shape=list(J.shape), n_modes=m.n_modes, rank=m.rank, joint_s=t_joint, modes_s=t_svd,
                propensities_s=t_prop, propensity_entries=m.n_modes * J.shape[0] * J.shape[1],
                lemma_4_10_max_error=worst, sigma_top5=m.sigma[:5].tolist())


def random_sparse_joint(np, sp, n, nnz, seed):
    rng = np.random.default_rng(seed)
    J = sp.csr_matrix((rng.random(nnz), (rng.integers(0, n, nnz), rng.integers(0, n, nnz))), shape=(n, n))
    J.sum_duplicates()
    return J / J.sum()


def bench_sparse(np, sp, spla, Modes, n, nnz, r, skip_svds):
    J = random_sparse_joint(np, sp, n, nnz, seed=0)
    out = dict(shape=[n, n], nnz=int(J.nnz), r=r)
    t_l, ml = timed(lambda: Modes.top(J, r, method="lanczos", seed=0, zero_rows="drop"))
    out.update(modes_top_lanczos_s=t_l, sigma_1=float(ml.sigma[0]), sigma_r=float(ml.sigma[-1]))
    if not skip_svds:
        # the same operator and start vector that Modes.top hands to svds
        sqrt_q = np.sqrt(np.asarray(J.sum(axis=1)).ravel())
        keep = sqrt_q > 0
        M = (sp.diags(1 / sqrt_q[keep]) @ J[keep]).T.tocsr()
        v0 = np.random.default_rng(0).standard_normal(min(M.shape))
        t_s, (_, s, _) = timed(lambda: spla.svds(M, k=r, v0=v0, solver="arpack"))
        out.update(plain_svds_s=t_s, ratio_modes_top_to_svds=t_l / t_s,
                   svds_max_sigma_diff=float(np.abs(np.sort(s)[::-1] - ml.sigma).max()))
    t_r, mr = timed(lambda: Modes.top(J, r, method="randomized", seed=0, zero_rows="drop"))
    err = np.abs(mr.sigma - ml.sigma) / ml.sigma
    out.update(modes_top_randomized_s=t_r, randomized_max_rel_sigma_error=float(err.max()),
               randomized_rel_error_sigma_1=float(err[0]), ratio_randomized_to_lanczos=t_r / t_l)
    return out


def bench_effective(np, Modes, nx, ny, chis):
    rng = np.random.default_rng(0)
    J = rng.random((nx, ny)) ** 3 * (rng.random((nx, ny)) < 0.3)
    J *= (1.0 / np.arange(1, nx + 1) ** 1.1)[:, None]            # Zipf-like history marginal
    J[np.arange(nx), rng.integers(0, ny, nx)] += 1e-6             # no empty history
    J /= J.sum()
    t_svd, m = timed(lambda: Modes.from_joint(J))
    rows = []
    for chi in chis:
        t, (p, info) = timed(lambda: m.effective(chi, return_info=True))
        rows.append(dict(chi=chi, seconds=t, status=info.status, kl=info.kl, newton_steps=info.newton_steps,
                         kkt_residual=info.kkt_residual, duality_gap=info.duality_gap,
                         max_row_sum_error=float(np.abs(p.sum(1) - 1).max())))
    return dict(shape=[nx, ny], zero_fraction=float((J == 0).mean()), modes_s=t_svd, rank=m.rank, runs=rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=None, help="BLAS threads (set before numpy loads)")
    ap.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    ap.add_argument("--skip-svds", action="store_true", help="skip the plain svds comparison")
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    args = ap.parse_args(argv)
    if args.threads:
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = str(args.threads)

    import numpy as np
    import scipy
    import scipy.sparse as sp
    import scipy.sparse.linalg as spla

    from lib import languages as L
    from lib.modes import Modes

    if args.quick:
        dense_cfg, sparse_cfg, eff_cfg = (4, 2, 3, 2, 8), (5000, 50_000, 20), (200, 20, [2, 10, 19])
    else:
        dense_cfg, sparse_cfg, eff_cfg = (16, 2, 3, 2, 32), (50_000, 1_000_000, 100), (1000, 50, [1, 5, 20, 40, 49])
    env = dict(numpy=np.__version__, scipy=scipy.__version__, python=platform.python_version(),
               cpus=os.cpu_count(), blas_threads=os.environ.get("OPENBLAS_NUM_THREADS", "default"),
               load_average=os.getloadavg())
    print(f"numpy {env['numpy']}, scipy {env['scipy']}, python {env['python']}, {env['cpus']} CPUs, "
          f"BLAS threads {env['blas_threads']}, load {env['load_average'][0]:.1f}")

    V, order, k, l, block = dense_cfg
    d = bench_dense(np, L, Modes, V, order, k, l, block)
    print(f"\n[dense] {d['shape'][0]} x {d['shape'][1]} joint (Markov order {order}, |Σ|={V}, k={k}, l={l}): "
          f"joint {d['joint_s']:.2f} s, modes (SVD) {d['modes_s']:.2f} s, all propensities "
          f"({d['propensity_entries']:.2e} entries, blocks of {block}) {d['propensities_s']:.2f} s, "
          f"Lemma 4.10 max error {d['lemma_4_10_max_error']:.1e}")

    n, nnz, r = sparse_cfg
    s = bench_sparse(np, sp, spla, Modes, n, nnz, r, args.skip_svds)
    print(f"\n[sparse] {n} x {n}, {s['nnz']} non-zeros, top {r} modes (one run each)")
    print(f"  {'method':<28}{'seconds':>10}")
    print(f"  {'Modes.top lanczos':<28}{s['modes_top_lanczos_s']:>10.2f}")
    if "plain_svds_s" in s:
        print(f"  {'scipy svds (same M, v0)':<28}{s['plain_svds_s']:>10.2f}   ratio Modes.top/svds = "
              f"{s['ratio_modes_top_to_svds']:.3f}, max |Δσ| = {s['svds_max_sigma_diff']:.1e}")
    print(f"  {'Modes.top randomized':<28}{s['modes_top_randomized_s']:>10.2f}   max rel σ error vs Lanczos "
          f"{s['randomized_max_rel_sigma_error']:.1e} (σ_1: {s['randomized_rel_error_sigma_1']:.1e})")

    nx, ny, chis = eff_cfg
    e = bench_effective(np, Modes, nx, ny, chis)
    print(f"\n[effective] {nx} x {ny} joint, {100 * e['zero_fraction']:.0f} % zeros, rank {e['rank']}")
    print(f"  {'chi':>4}{'seconds':>9}{'steps':>7}{'status':>10}{'KL(q||q^chi)':>15}{'KKT':>10}{'gap':>10}")
    for row in e["runs"]:
        print(f"  {row['chi']:>4}{row['seconds']:>9.2f}{row['newton_steps']:>7}{row['status']:>10}"
              f"{row['kl']:>15.6e}{row['kkt_residual']:>10.1e}{row['duality_gap']:>10.1e}")

    if args.json:
        args.json.write_text(json.dumps(dict(env=env, dense=d, sparse=s, effective=e), indent=1))
        print(f"\nwrote {args.json}")
    ok = d["lemma_4_10_max_error"] < 1e-10 and all(row["status"] == "optimal" for row in e["runs"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
