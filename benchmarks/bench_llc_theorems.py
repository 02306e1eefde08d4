"""Benchmark lib.llc_theorems.resolution_dial: the (χ, β) grid at once against a loop over cells.

    python benchmarks/bench_llc_theorems.py [--models 32,2] [--quick] [--min-ratio 5]
                                            [--tol 1e-8] [--no-gate] [--json PATH]

Setting: the chapter "LLC theorems" at its ``ci`` profile (chapters/llc_theorems.yml): the
mode ladder and the factored models (hidden 32 and 2, float64, at their last checkpoint) of
the chapter "Insensitivity" (read from its cache, trained here if absent), n = 4000 samples,
χ ∈ the preset's cutoffs ∪ {rank}, nβ = f · n/log n for the preset's factors f, γ, ε·nβ,
chains, draws, burn-in, snapshots and seed as the preset gives them, one torch thread
(resolution_dial's default). Both sides sample on the CPU.

* grid      one ``resolution_dial`` call with every χ and every nβ, as the chapter makes it:
            per nβ, one ``lib.llc.coupled_targets`` run of q and every q^(χ) together
            (vmapped over chains; q's chains are shared by all χ);
* baseline  a Python loop over every cell (nβ, χ), each one ``resolution_dial`` call with
            ``chis=[χ]`` and ``nbetas=[nβ]``: the same library path for one cell (q against
            q^(χ), the same chains, draws, burn-in, snapshots and seed, so each cell gets as
            many chain pairs and draws as in the grid).

One timed run per side (each is minutes long), grid first, in the same process. Reported
per model: wall time, executed chain-steps/s (grid: B·(J+1)·C·draws steps; loop:
B·J·2·C·draws), cell-pair steps/s (B·J·C·draws, the same work unit on both sides), the
ratio loop/grid, and the largest difference of the per-chain λ̂(q) − λ̂(q^(χ)) between
the sides. They are not bit-identical: the grid's full batch is the union of the distinct
pairs of q and of every q^(χ), a cell's only of q and its q^(χ), so the sums that make L_n
run over different lists (same value in exact arithmetic, same noise); the tolerance
--tol (absolute, on λ̂ differences of order 1–10) covers that rounding. The 1-minute load
average is recorded before and after each side (the machine is shared). Exits 1 if a
ratio is below --min-ratio (the goal, 5×) or the sides differ by more than --tol, unless
--no-gate.

--quick: only the model of hidden width 2, the first and last temperature, 100 draws
(burn-in 30, 10 snapshots): a smoke test of the script, not a measurement.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # repo root, for `lib`

import numpy as np  # noqa: E402
import torch  # noqa: E402

from lib import conditional_models as cm  # noqa: E402
from lib import llc_theorems as th  # noqa: E402
from lib.book.chapters import get_chapter  # noqa: E402
from lib.book.timing import machine_info  # noqa: E402


def setting(quick: bool, seed: int) -> dict:
    cfg = get_chapter("llc_theorems").resolve({"profile": "ci", "seed": seed, "device": "cpu"})
    if quick:
        cfg.update(beta_factors=[cfg["beta_factors"][0], cfg["beta_factors"][-1]], draws=100, burn_in=30,
                   snapshots=10)
    return cfg


def load_model(ladder, ins_cfg, hidden: int, seed: int):
    run = cm.train(ladder, {"kind": "factored", "hidden": hidden}, n=ins_cfg["n_samples"],
                   steps=ins_cfg["train_steps"], lr=ins_cfg["lr"], seed=seed,
                   n_checkpoints=ins_cfg["n_checkpoints"], device="cpu", progress=False)
    return run.model(ladder, dtype=torch.float64)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=None, help="hidden widths, comma-separated (default: the ci preset's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--min-ratio", type=float, default=5.0)
    ap.add_argument("--tol", type=float, default=1e-8)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-gate", action="store_true")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)

    cfg = setting(args.quick, args.seed)
    ins_cfg = th.insensitivity_settings("ci", args.seed, "cpu")
    ladder = cm.ladder_support(**{k: ins_cfg[k] for k in ("history_length", "ladder_bigrams", "ladder_top",
                                                           "ladder_ratio", "background_size")}, seed=args.seed)
    rank = ladder.modes.rank
    chis = sorted(set(cfg["chis"]) | {rank})
    n = ins_cfg["n_samples"]
    nbetas = [f * n / math.log(n) for f in cfg["beta_factors"]]
    widths = ([2] if args.quick else cfg["model_widths"]) if args.models is None else \
        [int(h) for h in args.models.split(",")]
    kw = dict(n=n, gamma=cfg["gamma"], eps_nbeta=cfg["eps_nbeta"], chains=cfg["chains"], draws=cfg["draws"],
              burn_in=cfg["burn_in"], seed=args.seed, device="cpu", snapshots=cfg["snapshots"], progress=False)
    B, J, C, T = len(nbetas), len(chis), cfg["chains"], cfg["draws"]
    res = {"setting": {"support": ladder.describe(), "chis": chis, "beta_factors": cfg["beta_factors"],
                       "nbetas": nbetas, **{k: v for k, v in kw.items() if k != "progress"}, "quick": args.quick},
           "machine": machine_info(), "models": {}}
    print(f"{ladder.describe()}\nχ ∈ {chis}, nβ/nβ* ∈ {cfg['beta_factors']}, {C} chains × {T} draws "
          f"(burn-in {cfg['burn_in']}), {cfg['snapshots']} snapshots, γ = {cfg['gamma']:g}, "
          f"ε·nβ = {cfg['eps_nbeta']:g}, torch {torch.__version__}, one thread per side")
    ok = True
    rows = []
    for h in widths:
        model = load_model(ladder, ins_cfg, h, args.seed)
        load0 = os.getloadavg()[0]
        t0 = time.perf_counter()
        grid = th.resolution_dial(model, ladder, chis=chis, nbetas=nbetas, **kw)
        grid_s = time.perf_counter() - t0
        load1 = os.getloadavg()[0]
        t0 = time.perf_counter()
        cells = [[th.resolution_dial(model, ladder, chis=[chi], nbetas=[nb], **kw) for chi in chis] for nb in nbetas]
        loop_s = time.perf_counter() - t0
        load2 = os.getloadavg()[0]
        loop_diff = np.array([[c.diff[0, 0] for c in row] for row in cells])          # (B, J, C)
        loop_chi = np.array([[c.llc_chi[0, 0] for c in row] for row in cells])
        loop_q = np.array([[c.llc_q[0] for c in row] for row in cells])
        both = np.isfinite(grid.diff) & np.isfinite(loop_diff)
        same_nan = bool(np.array_equal(np.isfinite(grid.diff), np.isfinite(loop_diff)))
        max_diff = float(np.max(np.abs(grid.diff - loop_diff)[both])) if both.any() else float("nan")
        max_llc = float(max(np.max(np.abs(grid.llc_chi - loop_chi)), np.max(np.abs(grid.llc_q[:, None] - loop_q))))
        identical = bool(np.array_equal(grid.diff, loop_diff, equal_nan=True))
        steps_grid, steps_loop, cell_steps = B * (J + 1) * C * T, B * J * 2 * C * T, B * J * C * T
        r = {"params": cm.n_params(model), "grid_s": grid_s, "loop_s": loop_s, "ratio": loop_s / grid_s,
             "chain_steps_grid": steps_grid, "chain_steps_loop": steps_loop, "cell_pair_steps": cell_steps,
             "grid_chain_steps_per_s": steps_grid / grid_s, "loop_chain_steps_per_s": steps_loop / loop_s,
             "grid_cell_pair_steps_per_s": cell_steps / grid_s, "loop_cell_pair_steps_per_s": cell_steps / loop_s,
             "max_abs_diff_llc_difference": max_diff, "max_abs_diff_llc": max_llc, "bit_identical": identical,
             "same_divergent_chains": same_nan, "divergent_chains_grid": int(grid.divergent.sum()),
             "distinct_pairs_grid": grid.settings["distinct_pairs"],
             "load_average_1min": {"grid": [load0, load1], "loop": [load1, load2]}}
        res["models"][f"factored h={h}"] = r
        rows.append((f"factored h={h}", r))
        ok &= r["ratio"] >= args.min_ratio and (max_diff <= args.tol) and same_nan

    print(f"\n{'model':16s} {'side':5s} {'wall (s)':>9s} {'chain-steps':>12s} {'chain-steps/s':>14s} "
          f"{'cell-pair steps/s':>18s} {'ratio':>6s} {'load 1-min':>12s}")
    for name, r in rows:
        print(f"{name:16s} {'grid':5s} {r['grid_s']:9.1f} {r['chain_steps_grid']:12,d} "
              f"{r['grid_chain_steps_per_s']:14,.0f} {r['grid_cell_pair_steps_per_s']:18,.0f} {'':>6s} "
              f"{r['load_average_1min']['grid'][0]:5.2f}→{r['load_average_1min']['grid'][1]:5.2f}")
        print(f"{'':16s} {'loop':5s} {r['loop_s']:9.1f} {r['chain_steps_loop']:12,d} "
              f"{r['loop_chain_steps_per_s']:14,.0f} {r['loop_cell_pair_steps_per_s']:18,.0f} {r['ratio']:5.2f}x "
              f"{r['load_average_1min']['loop'][0]:5.2f}→{r['load_average_1min']['loop'][1]:5.2f}")
        print(f"{'':16s} max |Δ(λ̂(q) − λ̂(q^χ))| per chain = {r['max_abs_diff_llc_difference']:.1e}, "
              f"max |Δλ̂| = {r['max_abs_diff_llc']:.1e}, bit-identical: {r['bit_identical']}, "
              f"divergent chains (grid): {r['divergent_chains_grid']}, same divergent set: "
              f"{r['same_divergent_chains']}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(res, indent=2))
    if not ok:
        print(f"FAIL: a ratio is below {args.min_ratio}x or the sides differ by more than {args.tol:g}"
              + (" (not gated: --no-gate)" if args.no_gate else ""))
        return 0 if args.no_gate else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
