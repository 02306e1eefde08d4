"""Benchmark lib.llc_theorems.resolution_dial: the (χ, β) grid at once against loops over cells.

    python benchmarks/bench_llc_theorems.py [--models 32,2] [--repeats 3] [--draws N] [--quick]
                                            [--threads 1,2] [--min-ratio 5] [--tol 1e-8] [--no-gate]
                                            [--json PATH]

Setting: the chapter "LLC theorems" at its ``ci`` profile (chapters/llc_theorems.yml): the
mode ladder and the factored models (hidden 32 and 2, float64, at their last checkpoint) of
the chapter "Insensitivity" (read from its cache, trained here if absent), n = 4000 samples,
χ ∈ the preset's cutoffs ∪ {rank}, nβ = f · n/log n for the preset's factors f, γ, ε·nβ,
chains, draws (``--draws`` overrides; burn-in then a third), snapshots and seed as the preset
gives them, CPU. Every side uses the per-history loss and records the per-step measurements
of Theorem 7.3 (δ_t, the Lipschitz quotient's numerator, the gap), as the chapter does.

* grid   one ``resolution_dial`` call with every χ and every nβ, as the chapter makes it: every
         (nβ, target, chain) is a row of one state, stepped by one vmapped call per step;
* pairs  the issue's baseline: a Python loop over the cells (nβ, χ) and, within a cell, over
         the chains, each iteration one coupled chain pair (q and q^(χ), one chain each:
         ``grid_chains`` with ``chains=1``), with the noise the grid gives that chain
         (``chain_ids``), so the same total draws and, up to rounding, the same chains;
* cells  a stricter baseline: a loop over the cells only, each one ``resolution_dial`` call
         with ``chis=[χ]``, ``nbetas=[nβ]`` and all the chains (vectorised over chains).

Timing (benchmarks/harness.py): at each thread count of --threads every side runs with that
many torch and BLAS/OpenMP threads (``resolution_dial(threads=t)``; the chapter itself uses
one), reported separately; the sides are interleaved (grid, pairs, cells, grid, …) --repeats
times (``--reps`` is the same option) in one process, each side's best run is reported and
the ratios are of the bests, with the 1-minute load average before and after every run. The
per-chain λ̂(q) − λ̂(q^(χ)) of each loop must equal the grid's to ``--tol`` (absolute; λ̂
differences are of order 1–10). Exits 1 if a loop differs from the grid by more than
``--tol``, or, on a clean run (load average within the cores), the gated ratio (pairs / grid)
is below ``--min-ratio`` (the goal, 5×), unless ``--no-gate``; a loaded run is reported, not
gated.

--quick: only the model of hidden width 2, the first and last temperature, 60 draws, one
repetition: a smoke test of the script, not a measurement."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # repo root, for `lib`

import numpy as np  # noqa: E402
import torch  # noqa: E402

from benchmarks.harness import TIMING_GATE_RULE, add_arguments, interleave  # noqa: E402
from lib import conditional_models as cm  # noqa: E402
from lib import llc_theorems as th  # noqa: E402
from lib import llc_theorems_experiments as tx  # noqa: E402
from lib.book.chapters import REPO_ROOT, load_chapter  # noqa: E402
from lib.book.timing import machine_info  # noqa: E402


def setting(quick: bool, seed: int, draws: int | None) -> dict:
    cfg = load_chapter(REPO_ROOT / "chapters" / "llc_theorems.md").resolve({"profile": "ci", "seed": seed, "device": "cpu"})
    # the grid this benchmark has always timed: ε = 0.005/nβ, 300 draws (the chapter now sets one ε from the
    # models' curvature and the draws from the relaxation time; the comparison of layouts does not depend on it)
    cfg.update(eps_nbeta=0.005, draws=300, burn_in=100, gamma=cfg["gamma"])
    if quick:
        cfg.update(beta_factors=[cfg["beta_factors"][0], cfg["beta_factors"][-1]], draws=60, burn_in=20,
                   snapshots=6)
    if draws is not None:
        cfg.update(draws=draws, burn_in=draws // 3, snapshots=min(cfg["snapshots"], draws))
    return cfg


def load_model(ladder, ins_cfg, hidden: int, seed: int):
    run = cm.train(ladder, {"kind": "factored", "hidden": hidden}, n=ins_cfg["n_samples"],
                   steps=ins_cfg["train_steps"], lr=ins_cfg["lr"], seed=seed,
                   n_checkpoints=ins_cfg["n_checkpoints"], device="cpu", progress=False)
    return run.model(ladder, dtype=torch.float64)


def run_pairs(model, ladder, chis, nbetas, kw) -> np.ndarray:
    """The loop over (nβ, χ, chain), one coupled chain pair per iteration; returns diff (B, J, C)."""
    C = kw["chains"]
    out = np.full((len(nbetas), len(chis), C), np.nan)
    for b, nb in enumerate(nbetas):
        for j, chi in enumerate(chis):
            rows, W = th.history_data(ladder, [chi], kw["n"], kw["seed"])
            for c in range(C):
                r = th.grid_chains(model, rows, W, nbetas=[nb], eps=[kw["eps_nbeta"] / nb], gamma=kw["gamma"],
                                   chains=1, draws=kw["draws"], burn_in=kw["burn_in"], seed=kw["seed"],
                                   device="cpu", snapshots=kw["snapshots"], chain_ids=[c], noise_chains=C)
                if (r["first_bad"] < 0).all():
                    out[b, j, c] = r["per_chain"][0, 0, 0] - r["per_chain"][0, 1, 0]
    return out


def compare_layouts(model, ladder, chis, nbetas, kw, threads: int, reps: int):
    """The three sides at one thread count, interleaved: (a JSON-ready summary, the comparison)."""
    B, J, C, T = len(nbetas), len(chis), kw["chains"], kw["draws"]
    th.resolution_dial(model, ladder, chis=chis[:1], nbetas=nbetas[:1], threads=threads,
                       **{**kw, "draws": 3, "burn_in": 1, "snapshots": 0})   # warm-up

    def cells():
        runs = [[th.resolution_dial(model, ladder, chis=[chi], nbetas=[nb], device="cpu", threads=threads, **kw)
                 for chi in chis] for nb in nbetas]
        return np.array([[c.diff[0, 0] for c in row] for row in runs])

    c = interleave({"grid": lambda: th.resolution_dial(model, ladder, chis=chis, nbetas=nbetas, device="cpu",
                                                       threads=threads, **kw).diff,
                    "pairs": lambda: run_pairs(model, ladder, chis, nbetas, kw),
                    "cells": cells}, threads=threads, repeats=reps)
    diffs = {side: c.result(side) for side in ("grid", "pairs", "cells")}
    agree = {}
    for side in ("pairs", "cells"):
        both = np.isfinite(diffs["grid"]) & np.isfinite(diffs[side])
        agree[side] = {"max_abs_diff": float(np.max(np.abs(diffs["grid"] - diffs[side])[both])),
                       "same_divergent": bool(np.array_equal(np.isfinite(diffs["grid"]), np.isfinite(diffs[side]))),
                       "bit_identical": bool(np.array_equal(diffs["grid"], diffs[side], equal_nan=True))}
    best = {side: c.best(side) for side in diffs}
    steps = {"grid": B * (2 * J - 1) * C * T, "pairs": B * J * 3 * C * T, "cells": B * J * 3 * C * T}
    summary = {"best_s": best, "ratio_pairs_over_grid": c.ratio("pairs", "grid"),
               "ratio_cells_over_grid": c.ratio("cells", "grid"),
               "gradient_rows_per_step": {"grid": B * (2 * J - 1) * C, "pairs": 3, "cells": 3 * C},
               "vmapped_calls_per_step": {"grid": 1, "pairs": B * J * C, "cells": B * J},
               "cell_pair_steps_per_s": {k: B * J * C * T / v for k, v in best.items()},
               "gradient_row_steps": steps, "agreement": agree, "timing": c.as_dict()}
    return summary, c


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=None, help="hidden widths, comma-separated (default: the ci preset's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--draws", type=int, default=None)
    ap.add_argument("--min-ratio", type=float, default=5.0)
    ap.add_argument("--tol", type=float, default=1e-8)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-gate", action="store_true")
    add_arguments(ap, repeats=3, repeat_flags=("--repeats", "--reps"))
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)

    cfg = setting(args.quick, args.seed, args.draws)
    reps = 1 if args.quick else args.repeats
    ins_cfg = tx.insensitivity_settings("ci", args.seed, "cpu")
    ladder = cm.ladder_support(**{k: ins_cfg[k] for k in ("history_length", "ladder_bigrams", "ladder_top",
                                                           "ladder_ratio", "background_size")}, seed=args.seed)
    rank = ladder.modes.rank
    chis = sorted(set(cfg["chis"]) | {rank})
    n = ins_cfg["n_samples"]
    nbetas = [f * n / math.log(n) for f in cfg["beta_factors"]]
    widths = ([2] if args.quick else cfg["model_widths"]) if args.models is None else \
        [int(h) for h in args.models.split(",")]
    kw = dict(n=n, gamma=cfg["gamma"], eps_nbeta=cfg["eps_nbeta"], chains=cfg["chains"], draws=cfg["draws"],
              burn_in=cfg["burn_in"], seed=args.seed, snapshots=cfg["snapshots"])
    C, T = cfg["chains"], cfg["draws"]
    res = {"setting": {"support": ladder.describe(), "chis": chis, "beta_factors": cfg["beta_factors"],
                       "nbetas": nbetas, **kw, "device": "cpu", "reps": reps, "quick": args.quick},
           "machine": machine_info(), "threads": args.threads, "gate_rule": TIMING_GATE_RULE, "runs": []}
    print(f"{ladder.describe()}\nχ ∈ {chis}, nβ/nβ* ∈ {cfg['beta_factors']}, {C} chains × {T} draws "
          f"(burn-in {cfg['burn_in']}), {cfg['snapshots']} snapshots, γ = {cfg['gamma']:g}, "
          f"ε·nβ = {cfg['eps_nbeta']:g}, best of {reps} interleaved repetitions, torch {torch.__version__}, "
          f"threads {args.threads}")
    ok = True
    models = {h: load_model(ladder, ins_cfg, h, args.seed) for h in widths}
    for t in args.threads:
        run = {"threads": t, "models": {}}
        for h, model in models.items():
            r, c = compare_layouts(model, ladder, chis, nbetas, kw, t, reps)
            r["params"] = cm.n_params(model)
            run["models"][f"factored h={h}"] = r
            agree = r["agreement"]
            ok &= c.gate(r["ratio_pairs_over_grid"] >= args.min_ratio) and all(
                a["max_abs_diff"] <= args.tol and a["same_divergent"] for a in agree.values())
            print(f"\nfactored h={h} ({r['params']:,} parameters), {t} thread{'s' if t > 1 else ''}: "
                  f"best wall time of {reps} interleaved runs")
            for side in ("grid", "pairs", "cells"):
                times = c.sides[side].seconds
                ts = ", ".join(f"{v:.1f}" for v in times)
                ratio = "" if side == "grid" else f"  ratio {c.ratio(side, 'grid'):5.2f}x"
                print(f"  {side:5s} {c.best(side):8.1f} s  [{ts}]  {r['cell_pair_steps_per_s'][side]:9,.0f} "
                      f"cell-pair steps/s{ratio}")
            print(f"  {c.summary()}")
            for side, a in agree.items():
                print(f"  {side} vs grid: max |Δ(λ̂(q) − λ̂(q^χ))| per chain = {a['max_abs_diff']:.1e}, bit-identical: "
                      f"{a['bit_identical']}, same divergent set: {a['same_divergent']}")
        run["loaded"] = any(m["timing"]["loaded"] for m in run["models"].values())
        res["runs"].append(run)
    res["ok"] = bool(ok)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(res, indent=2))
    if not ok:
        print(f"FAIL: a pairs/grid ratio is below {args.min_ratio}x on a clean run, or a loop differs from the grid "
              f"by more than {args.tol:g}" + (" (not gated: --no-gate)" if args.no_gate else ""))
        return 0 if args.no_gate else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
