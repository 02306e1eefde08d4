"""The studies of the chapter "Insensitivity" (Chen & Murfet §6), each a call returning its result.

The mathematics lives in :mod:`lib.insensitivity` (the log-probability map, its Jacobian, the constants
δ_χ and ε_χ, mode coordinates, learning curves, the plausibility quantities of §6.2, and the cost models
of training and of a Jacobian), :mod:`lib.conditional_models` (the models and their training) and
:mod:`lib.modes`. This module runs it the way the chapter does, so that each chapter cell is a call, a few
records and a table or a figure:

* :func:`tabular_check` — the tabular model's Jacobian and δ_χ against their closed forms;
* :func:`final_constants`, :func:`delta_along_training` — δ_χ and ε_χ at the trained models, three ways,
  and δ_χ along training;
* :func:`learning_order` — are modes learned in order of σ (with the pre-set verdict);
* :func:`plausibility_curve`, :func:`plausibility_checks` — §6.2's plausibility argument per cutoff;
* :func:`entropy_rate_comparison` — §6.2's typical-set estimate against the spectrum;
* :func:`heavy_steps` — what the chapter costs before it runs (``chapters/insensitivity.yml``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from . import conditional_models as cm
from .book.costs import HeavyStep
from .insensitivity import (DEFAULT_MAX_BYTES, constants, constants_all, difference_weights, jacobian,
                            jacobian_cost, learning_curves, learning_steps, log_prob_map, matmul_weights, pairings,
                            plausibility, rank_correlation, training_flops)
from .modes import Modes


# ---------------------------------------------------------------------------
# The chapter's experiments
# ---------------------------------------------------------------------------

@dataclass
class TabularCheck:
    """:func:`tabular_check`: for the fully expressive model p(·|x, θ) = softmax(θ_x), the largest
    difference between its Jacobian and the closed form 1[x = x'](1[y = y'] − p(y'|x)) and between
    δ_χ(θ) and ‖D_χ‖ = ‖q(x)(q(y|x) − q^(χ)(y|x))‖ over every χ and the initialisations tried;
    ``delta[χ]`` = ‖D_χ‖, the same at every θ (χ = 0..rank)."""

    jacobian_error: float
    delta_error: float
    delta: np.ndarray


def tabular_check(support, seeds, max_bytes: int = DEFAULT_MAX_BYTES) -> TabularCheck:
    """The Jacobian and δ_χ of the tabular model (:class:`lib.conditional_models.TabularModel`) at
    one random θ per seed, against their closed forms (Defs 6.2–6.3)."""
    modes = support.modes
    norms = np.array([np.linalg.norm(difference_weights(modes, chi)) for chi in range(modes.rank + 1)])
    jac_error, delta_error = 0.0, 0.0
    for s in seeds:
        tab = cm.build({"kind": "tabular"}, support, seed=s).double()
        J = jacobian(tab, modes, max_bytes=max_bytes).numpy()
        p = torch.softmax(tab.theta, -1).detach().numpy()
        nx, ny = modes.shape
        closed = np.zeros((nx, ny, support.n_rows, ny))
        for i, x in enumerate(modes.rows):
            closed[i, :, x, :] = np.eye(ny) - p[x][None, :]
        jac_error = max(jac_error, float(np.abs(J - closed.reshape(J.shape)).max()))
        every = constants_all(tab, modes, max_bytes=max_bytes)
        delta_error = max(delta_error, float(np.max(np.abs(np.array([c.delta for c in every]) - norms))))
    return TabularCheck(jac_error, delta_error, norms)


@dataclass
class FinalConstants:
    """:func:`final_constants`: per model, :class:`Constants` for χ = 0..rank at its parameters
    (``constants[name][χ]``), the largest disagreement of the three computations (through J_w,
    as vector–Jacobian products, directly) and the largest δ_χ/δ_0 or ε_χ/ε_0 at χ = rank."""

    constants: dict
    identity_error: float
    zero_at_rank: float

    def first_below(self, name: str, share: float, last: int) -> int | None:
        """The smallest χ ≤ ``last`` from which δ_χ stays at most ``share`` of δ_0 up to ``last`` (None if none)."""
        d = np.array([c.delta for c in self.constants[name][:last + 1]])
        ok = d <= share * d[0]
        return next((c for c in range(len(d)) if ok[c:].all()), None)

    def relative_delta(self, chi: int) -> dict:
        """δ_χ/δ_0 per model."""
        return {name: cs[chi].delta / cs[0].delta for name, cs in self.constants.items()}


def final_constants(models: dict, modes: Modes, max_bytes: int = DEFAULT_MAX_BYTES) -> FinalConstants:
    """δ_χ and ε_χ for every χ at each model's parameters, computed three ways (:func:`pairings`,
    :func:`constants_all`, :func:`constants`), with their largest disagreement."""
    out, identity, zero = {}, 0.0, 0.0
    for name, model in models.items():
        every = constants_all(model, modes, max_bytes=max_bytes)
        for c, pr in zip(every, pairings(model, modes, max_bytes=max_bytes)):
            direct = constants(model, modes, c.chi)
            identity = max(identity, float(np.abs(direct.grad_diff + pr.grad).max()), abs(direct.loss_diff + pr.value),
                           float(np.abs(direct.grad_diff - c.grad_diff).max()))
        zero = max(zero, every[-1].delta / every[0].delta, every[-1].eps / every[0].eps)
        out[name] = every
    return FinalConstants(out, identity, zero)


def delta_along_training(run, support, max_bytes: int = DEFAULT_MAX_BYTES) -> tuple[list, np.ndarray]:
    """δ_χ(w_t) for χ = 0..rank at every checkpoint of a :class:`lib.conditional_models.Training`:
    (steps, array (checkpoints, rank + 1))."""
    steps = sorted(run.checkpoints)
    return steps, np.array([[c.delta for c in constants_all(run.model(support, s), support.modes, max_bytes=max_bytes)]
                            for s in steps])


def learning_order(modes: Modes, run, level: float = 0.5, n_boot: int = 2000, seed: int = 0) -> dict:
    """Are modes learned in order of σ? Each mode's learning step (:func:`learning_steps` on the
    curves of :func:`learning_curves` along ``run``'s evaluations), Spearman's ρ between σ_α and
    the step over the modes carried at the end with its bootstrap interval
    (:func:`rank_correlation`), and the pre-set verdict: "agrees" if the 90% interval lies below
    zero, "disagrees" if above, else "inconclusive"."""
    curves = learning_curves(modes, run.conditionals)
    when, carried = learning_steps(run.eval_steps, curves, modes.sigma, level=level)
    rc = rank_correlation(modes.sigma[:len(when)][carried], when[carried], n_boot=n_boot, seed=seed)
    verdict = "agrees" if rc["high"] < 0 else "disagrees" if rc["low"] > 0 else "inconclusive"
    return {**rc, "verdict": verdict, "steps": when.tolist(), "carried": carried.tolist()}


def plausibility_curve(support, model: nn.Module) -> list[dict]:
    """:func:`plausibility` at χ = 0..the first exact cutoff, with the model's log-probabilities."""
    modes = support.modes
    logp = log_prob_map(model, modes).detach().numpy()
    return [plausibility(modes, chi, logp) for chi in range(modes.truncation_curve().first_exact() + 1)]


def plausibility_checks(curves: dict) -> dict:
    """Over the curves of :func:`plausibility_curve` (one per case): the largest Parseval error, the
    largest split-(58) violation (|split error| or |value| − bound), and per case how many of the
    intermediate cutoffs (1..first exact − 1) have the family term's distance ‖Π_χ q − q^(χ)‖ above
    the tail's norm, out of how many."""
    parseval = max(abs(r["parseval_tail"] - r["parseval_direct"]) for rows in curves.values() for r in rows)
    split = max(max(abs(r["value"] - r["term_tail"] - r["term_family"]), abs(r["value"]) - r["bound"])
                for rows in curves.values() for r in rows)
    dominates = {label: (int(sum(r["projection_gap"] > np.sqrt(r["parseval_tail"]) for r in rows[1:-1])),
                         len(rows) - 2) for label, rows in curves.items()}
    return {"parseval": float(parseval), "split": float(split), "family_dominates": dominates}


def entropy_rate_comparison(modes: Modes, k: int, h_lm: float) -> dict:
    """§6.2's typical-set estimate σ_α² ≈ e^{−kh} against the spectrum: the chain's own entropy
    rate h (its conditional entropy), the typical history probabilities e^{−kh} for it and for
    ``h_lm`` (a language model's loss in nats per token), the median σ_α² over the lower half of
    the spectrum, and how many orders of magnitude it lies from each estimate (log10 ratio)."""
    h_chain = modes.conditional_entropy()
    r = modes.rank
    median_tail = float(np.median(modes.sigma[r // 2:r] ** 2))
    typical = {"chain": float(np.exp(-k * h_chain)), "lm": float(np.exp(-k * h_lm))}
    return {"h_chain": float(h_chain), "h_lm": float(h_lm), "k": int(k), "typical_q_chain": typical["chain"],
            "typical_q_lm": typical["lm"], "median_tail_sigma2": median_tail,
            "orders": {src: float(np.log10(median_tail / v)) for src, v in typical.items()}}


# ---------------------------------------------------------------------------
# What the chapter costs before it runs
# ---------------------------------------------------------------------------

def model_specs(values: dict) -> dict:
    """The chapter's models by name: a factored model per ``factored_hidden`` width and a GPT-NeoX per
    ``transformer_hidden`` size (``transformer_layers`` layers)."""
    specs = {f"factored h={h}": {"kind": "factored", "hidden": h} for h in values["factored_hidden"]}
    specs |= {f"transformer d={h}": {"kind": "transformer", "hidden": h, "layers": values["transformer_layers"]}
              for h in values["transformer_hidden"]}
    return specs


def heavy_steps(values: dict) -> list:
    """The heavy steps of the chapter "Insensitivity" at the resolved parameter ``values``: training each
    model (full-batch Adam on the ladder's histories) and forming its Jacobian at each checkpoint
    (δ_χ along training, Defs 6.2–6.3), sized on the mode ladder the values build."""
    support = cm.ladder_support(history_length=values["history_length"], ladder_bigrams=values["ladder_bigrams"],
                                ladder_top=values["ladder_top"], ladder_ratio=values["ladder_ratio"],
                                background_size=values["background_size"], seed=values["seed"])
    n_x, n_y = support.modes.shape
    steps = []
    for name, spec in model_specs(values).items():
        model = cm.build(spec, support, values["seed"])
        d, weights = cm.n_params(model), matmul_weights(model)
        tokens = support.k if spec["kind"] == "transformer" else 1
        train = training_flops(weights, n_x, tokens, values["train_steps"])
        # parameters, gradients and Adam's two moments (float32), and the logits of every history
        steps.append(HeavyStep(f"training {name}", f"d = {d}, {n_x} histories, {values['train_steps']} steps",
                               peak_bytes=16.0 * d + 3 * 4.0 * support.n_rows * n_y, flops=train,
                               shrink="train_steps"))
        peak, _ = jacobian_cost(d, n_x, n_y, tokens, values["jacobian_mb"] * 2 ** 20)
        _, flops = jacobian_cost(weights, n_x, n_y, tokens, values["jacobian_mb"] * 2 ** 20)
        steps.append(HeavyStep(f"Jacobians of {name}", f"d = {d}, {n_x} × {n_y} outputs, {values['n_checkpoints']} "
                               f"checkpoints", peak_bytes=peak, flops=flops * (values["n_checkpoints"] + 1),
                               shrink="jacobian_mb or n_checkpoints"))
    return steps
