"""Benchmark lib.local_quadratic: the dense quadratic model against the Hessian-vector path, and where they cross.

    python benchmarks/bench_local_quadratic.py [--widths 8,32,64,96] [--chains 8] [--betas 5] [--draws 1000]
                                               [--targets 2] [--json PATH]

Setting: the mode ladder of the chapter "Insensitivity" at its smoke sizes of the paper profile (34 histories
× 34 continuations), a factored model of each hidden width in --widths (float64, at its initialisation:
the cost does not depend on the weights), n = 4000, --targets targets (q and the coarsest cutoffs), one thread.

* dense   :func:`lib.local_quadratic.local_quadratics`: the dense Hessians (reverse over reverse) and their
          eigendecompositions; the predictions then cost nothing (closed form);
* hvp     :func:`lib.local_quadratic.taylor_quadratics` (gradients, 8 Lanczos extremes per target) and
          :meth:`TaylorQuadratic.predict` at the chapter's ci load: --betas temperatures × --chains chains ×
          --draws steps per target.

Prints, per width, d and both times (the 1-minute load average before and after), and the crossover: the
smallest d at which hvp is faster (the chapter's ``DENSE_LIMIT`` should sit near it). Also checks the two
paths' curvature (largest |eigenvalue|) agree to 1e-6; exits 1 if not."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--widths", default="8,32,64,96")
    ap.add_argument("--chains", type=int, default=8)
    ap.add_argument("--betas", type=int, default=5)
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--targets", type=int, default=2)
    ap.add_argument("--json")
    args = ap.parse_args()

    import numpy as np
    import torch

    from lib import conditional_models as cm, llc_theorems as th, local_quadratic as lq
    from lib.llc_theorems_experiments import insensitivity_settings

    torch.set_num_threads(1)
    ins = insensitivity_settings("paper", 0, "cpu", smoke=True)
    ladder = cm.ladder_support(**{k: ins[k] for k in ("history_length", "ladder_bigrams", "ladder_top",
                                                      "ladder_ratio", "background_size")}, seed=0)
    chis = th.cutoffs([1, 2, 3, 4], ladder.modes.rank)[:args.targets - 1]
    rows, W = th.history_data(ladder, chis, 4000, seed=0)
    datas = [(rows, W[k]) for k in range(W.shape[0])]
    nbetas = list(np.geomspace(50.0, 800.0, args.betas))
    out, ok = [], True
    for h in [int(x) for x in args.widths.split(",")]:
        model = cm.build({"kind": "factored", "hidden": h}, ladder, 0).double()
        d = cm.n_params(model)
        load0 = os.getloadavg()[0]
        t0 = time.perf_counter()
        dense = lq.local_quadratics(model, datas, max_dimension=10 ** 6)
        t_dense = time.perf_counter() - t0
        t0 = time.perf_counter()
        taylor = lq.taylor_quadratics(model, datas)
        eps = 0.25 / (max(nbetas) * taylor.curvature + 1e4)
        taylor.predict(nbetas=nbetas, gamma=1e4, eps=eps, burn_in=args.draws // 5, draws=args.draws,
                       chains=args.chains, seed=0)
        t_hvp = time.perf_counter() - t0
        load1 = os.getloadavg()[0]
        agree = abs(taylor.curvature - dense.curvature) <= 1e-6 * dense.curvature
        ok &= agree
        row = {"width": h, "d": d, "dense_s": t_dense, "hvp_s": t_hvp, "load": [load0, load1], "curvature_agrees": agree}
        out.append(row)
        print(f"h = {h:4d}  d = {d:6d}  dense {t_dense:8.2f} s  hvp {t_hvp:8.2f} s  ratio dense/hvp {t_dense / t_hvp:6.2f}"
              f"  load {load0:.1f}→{load1:.1f}  curvature agrees: {agree}", flush=True)
    faster = [r["d"] for r in out if r["hvp_s"] < r["dense_s"]]
    print(f"crossover: hvp faster from d = {min(faster) if faster else 'none measured'} "
          f"({args.betas} β × {args.chains} chains × {args.draws} steps × {W.shape[0]} targets)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": out, "settings": vars(args)}, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
