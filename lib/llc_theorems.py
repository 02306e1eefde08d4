"""Chen & Murfet §7: SGLD for q and for its truncation q^(χ), coupled, and the bounds of
Theorems 7.3–7.4 in the form the book derives them (the paper's constants were lost in its
text's extraction, so the derivation follows the structure of the proofs of §7).

Setting: a conditional model p(y|x, w) on the finite support of a language
(:mod:`lib.conditional_models`), data (x_i, y_i) from q and (x_i, y'_i) from q^(χ) drawn with
common random numbers (:meth:`Support.coupled_sample`), and two SGLD chains (Chen & Murfet
§2.4, eq. 12) from the same w* with the same minibatch indices and the same injected noise
(:func:`lib.llc.coupled_chains`).

**Theorem 7.3, derived.** With Δ_t = w_t − w'_t, constant step ε and Δ_0 = 0,

    Δ_{t+1} = (1 − εγ/2) Δ_t − (εnβ/2) [ (∇L_B(w_t) − ∇L^(χ)_B(w_t)) + (∇L^(χ)_B(w_t) − ∇L^(χ)_B(w'_t)) ].

If the minibatch gradient difference at one point is at most δ (Lemma 7.1: the minibatch
version of Def 6.3) and ∇L^(χ)_B is M-Lipschitz on the region the chains visit, then
‖Δ_{t+1}‖ ≤ a‖Δ_t‖ + b with a = |1 − εγ/2| + εnβM/2 and b = εnβδ/2, hence

    ‖Δ_t‖ ≤ b (1 − a^t) / (1 − a)     (a ≠ 1),       ≤ b t  (a = 1).

When nβM < γ (and εγ < 2) a < 1 and the bound saturates at nβδ / (γ − nβM): the step-size
and localisation condition of the theorem. Before any constant is bounded, the triangle
inequality gives, at each step, ‖Δ_{t+1}‖ ≤ |1 − εγ/2| ‖Δ_t‖ + (εnβ/2)(δ_t + s_t) with
δ_t = ‖∇L_B(w_t) − ∇L^(χ)_B(w_t)‖ and s_t = ‖∇L^(χ)_B(w_t) − ∇L^(χ)_B(w'_t)‖; the sampler of
the resolution dial (:func:`grid_chains`) records δ_t and s_t at every step
(:func:`one_step_violations`, :func:`measure_constants`).

**Theorem 7.4, derived.** λ̂ = nβ (mean_t L_B(w_t) − L_n(w*)) and λ̂^(χ) likewise with q^(χ)
data. If L is K-Lipschitz on the region and |L_B − L^(χ)_B| ≤ ε at every point (log-probability
insensitivity, minibatch version), then

    |λ̂ − λ̂^(χ)| ≤ nβ ( K · mean_t ‖Δ_t‖ + 2ε ).

**What λ̂ measures under the theorem's hypothesis.** With the Taylor model
L_n(w* + u) ≈ L_n(w*) + gᵀu + ½uᵀHu, SGLD's iterates are Gaussian and λ̂ has a closed form
(:func:`lib.local_quadratic.quadratic_llc`); with h_i the eigenvalues of H, g̃ = g in its eigenbasis and
a_i = nβh_i + γ, its stationary continuous-time value is

    λ̂_quad = ½ Σ_i nβh_i / a_i  −  ½ (nβ)² Σ_i g̃_i² (nβh_i + 2γ) / a_i².

If nβM < γ, every a_i is dominated by γ: the first sum is a curvature trace ≈ nβ tr(H)/(2γ),
linear in nβ and below d/4, and the second a drift off a w* that is not a critical point of
the target's loss, growing like (nβ)². The chapter sets both beside the measured λ̂
(:class:`lib.llc_theorems_experiments.DialExperiment`).

What this module holds (mathematics only):

* the coupled data and losses: :func:`coupled_data`, :func:`weighted_pairs`, :func:`history_data`
  (the per-history loss itself is :func:`lib.conditional_models.history_nll`), :func:`population_data`;
* curvature and §8's critical points: :func:`curvature` (Theorem 7.4's M by Lanczos), :func:`curvature_trace`
  (the trace nβ tr(H)/(2γ) that λ̂ approaches when nβM < γ, by Hutchinson), :func:`critical_points`, all on
  Hessian-vector products (:mod:`lib.hessian`), never a dense Hessian;
* Theorems 7.3–7.4 as derived above: :func:`separation_bound`, :func:`contraction`,
  :func:`llc_difference_bound`, and their constants measured along a run
  (:func:`measure_constants`, :func:`one_step_violations`, :func:`lemma_ratios`);
* the resolution dial of §8: the coupled (χ, β) grid of SGLD chains (:func:`grid_chains`, stepped by
  :mod:`lib.sgld`'s Eq. 12, seed rule and noise), :func:`resolution_dial` and its :class:`Dial`, the
  decision rules (:func:`resolve`, :func:`chi_star_band`, :func:`monotone_verdict`), and its cost
  model (:func:`dial_cost`).

The chapter's studies on these (the dial as one experiment, the theorem checks, the verdicts, its
heavy steps) are in :mod:`lib.llc_theorems_experiments`; the quadratic model and its λ̂ in
:mod:`lib.local_quadratic`; §7.1's per-position LLCs of a causal language model in
:mod:`lib.position_llc`.
"""
from __future__ import annotations

import contextlib
import math
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from . import hessian, llc, sgld
from .book import cache
from .book.device import resolve_device, torch_threads
from .book.moved import forward_moved
from .book.parameters import integer_at_least
from .book.progress import progress as progress_bar
from .conditional_models import Support, history_nll
from .insensitivity import constants, effective
from .local_quadratic import flat_loss

# the chapter's studies moved to lib.llc_theorems_experiments; their old names here still answer
__getattr__ = forward_moved(__name__, {name: "lib.llc_theorems_experiments" for name in (
    "APrioriBound", "DialExperiment", "TheoremChecks", "a_priori_bounds", "dial_experiment", "dial_schedule",
    "dial_verdict", "heavy_steps", "insensitivity_settings", "theorem_checks")})


def nll(model: nn.Module, batch) -> torch.Tensor:
    """Per-sample losses −log p(y_i|x_i, w) of a conditional model; ``batch`` = (rows, cols)."""
    x, y = batch
    return -model(x).gather(1, y[:, None])[:, 0]


def coupled_data(support: Support, chi: int, n: int, seed: int):
    """((x, y), (x, y')) as tensors: n pairs from q and, with common random numbers, from q^(χ)
    (same histories, the x-marginal of q), for :func:`lib.llc.coupled_chains`."""
    rows, y, y_chi = support.coupled_sample(n, seed, effective(support.modes, chi))
    x = torch.as_tensor(rows)
    return (x, torch.as_tensor(y)), (x, torch.as_tensor(y_chi))


# ---------------------------------------------------------------------------
# Curvature: the Lipschitz constant M of ∇L (Hessian spectral norm) and K of L (gradient norm)
# ---------------------------------------------------------------------------

@dataclass
class Curvature:
    """The Hessian eigenvalue of largest magnitude of a loss at one point (Lanczos,
    ``scipy.sparse.linalg.eigsh`` on Hessian-vector products), optionally the smallest
    algebraic one (slower: Lanczos converges slowly at the bottom of a crowded spectrum), and
    the gradient norm."""

    extreme: float          # the eigenvalue of largest |·| (signed)
    spectral_norm: float    # |extreme|: a local Lipschitz constant of the gradient
    grad_norm: float        # ‖∇ loss‖: a local Lipschitz constant of the loss
    smallest: float | None = None


def curvature(model: nn.Module, loss_fn, data, w: torch.Tensor | None = None, tol: float = 1e-4,
              smallest: bool = False) -> Curvature:
    """Hessian extremes and gradient norm of mean ``loss_fn(model, data)`` at ``w`` (default the
    model's parameters; a flat vector in ``model.parameters()`` order), in the model's dtype.
    Hessian-vector products are forward-over-reverse (``torch.func.jvp`` of ``grad``), the extremes by Lanczos
    (:func:`lib.hessian.top_eigenvalues`, seed 0)."""
    f, w0 = flat_loss(model, loss_fn, data)
    w = w0 if w is None else w.to(w0)
    g = torch.func.grad(f)(w)
    loss, point = (lambda p: f(p["w"])), {"w": w.detach()}
    d = w.numel()
    if d <= 2:
        op = hessian.HessianOperator(loss, point)
        H = np.stack([op.matvec(e) for e in np.eye(d)])
        ev = np.linalg.eigvalsh(0.5 * (H + H.T))
        top, low = float(ev[np.argmax(np.abs(ev))]), float(ev[0])
    else:
        top = float(hessian.top_eigenvalues(loss, point, k=1, which="LM", seed=0, tol=tol)[0])
        low = float(hessian.top_eigenvalues(loss, point, k=1, which="SA", seed=0, tol=tol)[0]) if smallest else None
    return Curvature(top, abs(top), float(torch.linalg.norm(g)), low)


def curvature_trace(model: nn.Module, loss_fn, data, *, nbeta: float, gamma: float, samples: int = 64, seed: int = 0,
                    w: torch.Tensor | None = None) -> tuple[float, float]:
    """(nβ tr(H) / 2γ, its standard error) with H the Hessian of mean ``loss_fn(model, data)`` at ``w`` (default
    the model's parameters): the value λ̂'s first sum approaches when nβ‖H‖ < γ (module docstring, the
    curvature-trace regime), tr H by Hutchinson's estimator over ``samples`` Rademacher vectors from ``seed``
    (:func:`lib.hessian.hutchinson_trace`)."""
    for name, v in (("nbeta", nbeta), ("gamma", gamma)):
        if not (isinstance(v, (int, float)) and np.isfinite(v) and v > 0):
            raise ValueError(f"parameter '{name}' must be a positive number; got {v!r}")
    f, w0 = flat_loss(model, loss_fn, data)
    point = {"w": (w0 if w is None else w.to(w0)).detach()}
    trace, se = hessian.hutchinson_trace(lambda p: f(p["w"]), point, samples=samples, seed=seed)
    scale = nbeta / (2 * gamma)
    return scale * trace, scale * se


# ---------------------------------------------------------------------------
# §8: is w* nearer a critical point of a truncated potential than of L?
# ---------------------------------------------------------------------------

def population_data(support: Support, chi: int | None = None):
    """A population loss as one weighted full batch, for :func:`weighted_nll`: every pair
    (x, y) with q(x)·p(y|x) > 0, where p = q (``chi=None``) or q^(χ), weighted N·q(x)·p(y|x)
    over the N pairs, so that the batch mean is

        L^(χ)(w) = −Σ_{x,y} q(x) q^(χ)(y|x) log p(y|x, w)     (L^(rank) = L).

    Returns (rows, cols, weights) as tensors."""
    cond = support.full_conditional(None if chi is None else effective(support.modes, chi))
    q_x = support.joint.sum(axis=1)
    joint = (q_x / q_x.sum())[:, None] * cond
    x, y = np.nonzero(joint > 0)
    return torch.as_tensor(x), torch.as_tensor(y), torch.as_tensor(joint[x, y] * len(x))


@dataclass
class CriticalPoints:
    """:func:`critical_points`: at w*, per cutoff χ, ‖∇L^(χ)(w*)‖ and the smallest and the
    extreme Hessian eigenvalue of L^(χ); the same for L (``*_q``)."""

    chis: list
    grad_norm: np.ndarray
    smallest: np.ndarray
    extreme: np.ndarray
    grad_norm_q: float
    smallest_q: float
    extreme_q: float

    @property
    def best_ratio(self) -> float:
        """The smallest ‖∇L^(χ)(w*)‖ / ‖∇L(w*)‖ over the cutoffs below the largest (the rank)."""
        below = [i for i, c in enumerate(self.chis) if c < max(self.chis)]
        return float(np.min(self.grad_norm[below]) / self.grad_norm_q)

    def rows(self) -> list[dict]:
        """Per cutoff: ‖∇L^(χ)(w*)‖, its ratio to ‖∇L(w*)‖, and the smallest Hessian eigenvalue of L^(χ)."""
        return [{"χ": c, "‖∇L^(χ)(w*)‖": g, "ratio to L's": g / self.grad_norm_q, "smallest eigenvalue": low}
                for c, g, low in zip(self.chis, self.grad_norm, self.smallest)]


def critical_points(model: nn.Module, support: Support, chis) -> CriticalPoints:
    """§8's question, measured: is the trained w* closer to a critical point of a truncated
    population loss L^(χ) (the loss on the modes past χ removed) than of L itself? For each χ
    the gradient norm and the Hessian's smallest eigenvalue of L^(χ) at w* (Lanczos on
    Hessian-vector products, :func:`curvature`), one torch thread (models of a few thousand
    parameters)."""
    with torch_threads(1):
        ref = curvature(model, weighted_nll, population_data(support), smallest=True)
        per = [curvature(model, weighted_nll, population_data(support, chi), smallest=True) for chi in chis]
    return CriticalPoints(list(chis), np.array([c.grad_norm for c in per]), np.array([c.smallest for c in per]),
                          np.array([c.extreme for c in per]), ref.grad_norm, ref.smallest, ref.extreme)


# ---------------------------------------------------------------------------
# The derived bounds
# ---------------------------------------------------------------------------

def separation_bound(steps, *, eps: float, gamma: float, nbeta: float, M: float, delta: float) -> np.ndarray:
    """Theorem 7.3 as derived in the module docstring: the bound on ‖w_t − w'_t‖ at each step t
    (an array like ``steps``), for constant step ε, localisation γ, nβ, Lipschitz constant M of
    ∇L^(χ)_B and minibatch gradient insensitivity δ."""
    t = np.asarray(steps, dtype=np.float64)
    # a − 1 for a = |1 − εγ/2| + εnβM/2, formed without the cancellation of 1 + x − 1: near a = 1 the
    # closed form b (1 − aᵗ)/(1 − a) loses digits (rel. 1.5e-9 at a − 1 = −5e-11), while
    # Σ_{k<t} aᵏ = expm1(t log1p(a − 1)) / (a − 1) keeps them
    half_eg = eps * gamma / 2
    a_minus_1 = (-half_eg if half_eg <= 1 else half_eg - 2) + eps * nbeta * M / 2
    b = eps * nbeta * delta / 2
    if a_minus_1 == 0:
        return b * t
    return b * np.expm1(t * np.log1p(a_minus_1)) / a_minus_1


def contraction(*, eps: float, gamma: float, nbeta: float, M: float) -> dict:
    """The step-size hypotheses of Theorem 7.3 as numbers: a = |1 − εγ/2| + εnβM/2 (the bound
    saturates iff a < 1), nβM against γ, and εγ against 2."""
    a = abs(1 - eps * gamma / 2) + eps * nbeta * M / 2
    return {"a": a, "contracts": bool(a < 1), "nbeta_M": nbeta * M, "gamma": gamma,
            "nbeta_M_below_gamma": bool(nbeta * M < gamma), "eps_gamma": eps * gamma,
            "eps_gamma_below_2": bool(eps * gamma < 2)}


def llc_difference_bound(*, nbeta: float, K: float, mean_separation: float, eps_insensitivity: float) -> float:
    """Theorem 7.4 as derived in the module docstring: nβ (K · mean_t ‖Δ_t‖ + 2ε)."""
    return float(nbeta * (K * mean_separation + 2 * eps_insensitivity))


# ---------------------------------------------------------------------------
# §8: inverse temperature as a resolution dial
# ---------------------------------------------------------------------------

def weighted_pairs(support: Support, chis, n: int, seed: int):
    """The data of q and of every q^(χ) as one list of distinct pairs with per-target weights.

    The n pairs from q and their common-random-number twins from each q^(χ)
    (:meth:`Support.coupled_sample`) are collapsed to the union of the distinct (x, y) pairs
    that occur in any of them. Target j (0: q, then one per χ) gets weights c_j(x, y)·N/n
    (c_j its count, N the number of distinct pairs), so that the *mean* over the N pairs of
    w·(−log p) is the empirical loss L_n of that target: full-batch SGLD on N pairs instead
    of n. Returns (x, y, weights (1 + len(chis), N)) as tensors."""
    columns = []
    rows = None
    for chi in chis:
        r, y, y_chi = support.coupled_sample(n, seed, effective(support.modes, chi))
        if rows is None:
            rows, columns = r, [y]
        columns.append(y_chi)
    codes = np.stack([rows * support.n_cols + c for c in columns])          # (targets, n)
    distinct = np.unique(codes)
    N = len(distinct)
    weights = np.stack([np.bincount(np.searchsorted(distinct, c), minlength=N) for c in codes]) * (N / n)
    return (torch.as_tensor(distinct // support.n_cols), torch.as_tensor(distinct % support.n_cols),
            torch.as_tensor(weights))


def weighted_nll(model: nn.Module, batch) -> torch.Tensor:
    """w_i · (−log p(y_i|x_i, w)) for ``batch`` = (rows, cols, weights) (see :func:`weighted_pairs`)."""
    x, y, w = batch
    losses = nll(model, (x, y))
    return w.to(losses.dtype) * losses


def history_data(support: Support, chis, n: int, seed: int):
    """The data of q and of every q^(χ) as per-history weight matrices (the per-history loss).

    The n pairs from q and their common-random-number twins from each q^(χ)
    (:meth:`Support.coupled_sample`) share their histories x_i; let x_1..x_H be the H distinct
    ones. Target j (0: q, then one per χ) is the matrix W_j[h, y] = H·c_j(h, y)/n with c_j(h, y)
    the count of (x_h, y) in its sample, so that

        L_n^(j)(w) = −(1/n) Σ_i log p(y_i^(j)|x_i, w) = (1/H) Σ_h ( −Σ_y W_j[h, y] log p(y|x_h, w) ):

    the conditional model is evaluated once per distinct history (all continuations at once),
    and each target is a weighted sum of the same log-probabilities (:func:`history_nll`).
    Returns (rows (H,), weights (1 + len(chis), H, |Σ^l|)) as tensors."""
    columns, rows = [], None
    for chi in chis:
        r, y, y_chi = support.coupled_sample(n, seed, effective(support.modes, chi))
        if rows is None:
            rows, columns = r, [y]
        columns.append(y_chi)
    hist, inv = np.unique(rows, return_inverse=True)
    H = len(hist)
    weights = np.zeros((len(columns), H, support.n_cols))
    for j, col in enumerate(columns):
        np.add.at(weights[j], (inv, col), 1.0)
    return torch.as_tensor(hist), torch.as_tensor(weights * (H / n))


@dataclass
class Dial:
    """:func:`resolution_dial`: for each nβ (axis 0) and cutoff χ (axis 1), per chain c,
    ``diff[b, j, c]`` = λ̂_c(q) − λ̂_c(q^(χ_j)) of coupled chains (NaN where either diverged);
    ``per_chain[b, k, c]`` every target's per-chain λ̂ (k = 0: q, NaN where diverged),
    ``llc_q[b]``, ``llc_chi[b, j]`` their means over chains; ``separation[b, j]`` = ‖w_t − w'_t‖
    per chain and draw after burn-in; ``positions[b, k]`` target k's chains' parameters at
    ``snapshot_steps``; ``data`` the targets' per-history data (rows, W_k) (:func:`history_data`,
    q first; loss :func:`history_nll`); ``eps[b]`` the step at nβ_b; ``rhat[b, k]`` and
    ``ess[b, k, c]`` the mixing of each target's loss traces after burn-in. Measured at every
    step t = 0..draws−1 along the run (``steps``, arrays (B, J, C, draws)):

    * ``delta[b, j, c, t]`` = ‖∇L_n(w_t) − ∇L_n^(χ_j)(w_t)‖ at the q-chain's point w_t (Lemma 7.1's
      object; None when the dial ran without ``measure``);
    * ``lipschitz[b, j, c, t]`` = ‖∇L_n^(χ_j)(w_t) − ∇L_n^(χ_j)(w'_t)‖ (w'_t the q^(χ_j) chain; None
      likewise);
    * ``gap[b, j, c, t]`` = |L_n(w'_t) − L_n^(χ_j)(w'_t)| (the log-probability insensitivity at w'_t);
    * ``sep_all[b, j, c, t]`` = ‖w_t − w'_t‖ after t steps, t = 0..draws (0 at t = 0);
    * ``loss[b, k, c, t]`` = L_n^(k) at target k's own chain point, ``loss_q[b, k, c, t]`` = L_n (of q) at that
      point, and ``init_loss[k]`` = L_n^(k)(w*) in float64 (the terms of Theorem 7.3's identity for Δλ̂);
    * ``grad_q[b, c, t]`` = ‖∇L_n(w_t)‖ along the q-chains."""

    chis: list
    nbetas: list
    diff: np.ndarray
    llc_q: np.ndarray
    llc_chi: np.ndarray
    separation: np.ndarray
    positions: np.ndarray | None
    snapshot_steps: list
    divergent: np.ndarray
    settings: dict
    seconds: float
    data: list | None = None
    steps: dict | None = None
    per_chain: np.ndarray | None = None
    eps: list | None = None
    rhat: np.ndarray | None = None
    ess: np.ndarray | None = None

    @property
    def mean(self) -> np.ndarray:
        return np.nanmean(self.diff, axis=-1)

    @property
    def se(self) -> np.ndarray:
        return _se(self.diff)

    @property
    def z(self) -> np.ndarray:
        """(λ̂(q) − λ̂(q^(χ))) in units of its standard error (paired over coupled chains); 0
        where every chain pair agrees exactly (χ = rank: identical chains)."""
        return _z(self.diff)

    @property
    def llc_se(self) -> np.ndarray:
        """Standard error over chains of every target's λ̂, (B, K) (k = 0: q)."""
        return _se(self.per_chain)


def _se(values: np.ndarray) -> np.ndarray:
    """Standard error of the mean over the last axis (finite entries only; ddof 1)."""
    n = np.sum(np.isfinite(values), axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.nanstd(values, axis=-1, ddof=1) / np.sqrt(n)


def _z(diff: np.ndarray) -> np.ndarray:
    """The paired z of the chains' differences: mean / (sd / √n) over the last axis (ddof 1);
    0 where every difference is exactly 0."""
    mean = np.nanmean(diff, axis=-1)
    se = _se(diff)
    with np.errstate(invalid="ignore", divide="ignore"):
        z = mean / se
    return np.where((se == 0) & (mean == 0), 0.0, z)


# ---------------------------------------------------------------------------
# §8: when is q^(χ) indistinguishable from q? A fixed tolerance, decided in standard errors
# ---------------------------------------------------------------------------

INDISTINGUISHABLE, UNDECIDED, DISTINGUISHABLE = 0, 1, 2


def resolve(diff: np.ndarray, tolerance: float, z: float = 2.0) -> np.ndarray:
    """Per cell (all axes but the last, the chains): is λ̂(q) − λ̂(q^(χ)) within ``tolerance``?

    With D the mean over chains and s its paired standard error: INDISTINGUISHABLE if the
    whole interval D ± z·s lies inside [−tolerance, tolerance], DISTINGUISHABLE if it lies
    outside it, UNDECIDED otherwise. The tolerance is fixed, so more draws shrink s and
    settle every cell on the side of |D| it is on; they never turn a difference of fixed size
    into a distinguishable one (as a test of D = 0 at level z would)."""
    if not (np.isfinite(tolerance) and tolerance > 0):
        raise ValueError(f"parameter 'tolerance' must be a positive number; got {tolerance!r}")
    mean, se = np.nanmean(diff, axis=-1), _se(diff)
    se = np.where((se == 0) | np.isfinite(se), se, np.inf)
    out = np.full(mean.shape, UNDECIDED)
    out[np.abs(mean) + z * se <= tolerance] = INDISTINGUISHABLE
    out[np.abs(mean) - z * se > tolerance] = DISTINGUISHABLE
    return out


def chi_star(indistinguishable: np.ndarray, chis) -> list:
    """Per row (one nβ) of a boolean (B, J) array over the cutoffs ``chis`` (increasing): the
    smallest χ from which every larger cutoff is marked, i.e. the coarsest truncation that
    is not told from q at that temperature (None if not even the largest χ is marked)."""
    out = []
    for row in np.atleast_2d(indistinguishable):
        out.append(next((chis[j] for j in range(len(chis)) if row[j:].all()), None))
    return out


def chi_star_band(codes: np.ndarray, chis) -> list[tuple]:
    """The interval of χ*(β) that the classes of :func:`resolve` allow, per nβ: from χ* with
    every undecided cell counted indistinguishable to χ* with every undecided cell counted
    distinguishable (None, never indistinguishable, counts as above every cutoff)."""
    big = max(chis) + 1
    low = chi_star(codes != DISTINGUISHABLE, chis)
    high = chi_star(codes == INDISTINGUISHABLE, chis)
    return [(big if a is None else a, big if b is None else b) for a, b in zip(low, high)]


def monotone_verdict(bands) -> str:
    """The pre-set rule for §8's prediction "χ*(β) is non-decreasing in β" (``bands`` of
    :func:`chi_star_band`, β increasing): "contradicted" if some β < β' has the band of χ*(β)
    entirely above that of χ*(β'); "supported" if not, and some β < β' has it entirely below
    (disjoint bands: the dial moved by more than the run's uncertainty); else "inconclusive"."""
    pairs = [(i, j) for i in range(len(bands)) for j in range(i + 1, len(bands))]
    if any(bands[i][0] > bands[j][1] for i, j in pairs):
        return "contradicted"
    if any(bands[i][1] < bands[j][0] for i, j in pairs):
        return "supported"
    return "inconclusive"


def relaxation_steps(eps: float, gamma: float) -> float:
    """2/(εγ): the steps in which SGLD's mean forgets its start along a direction the loss does
    not curve (there the update contracts by 1 − εγ/2 per step)."""
    return 2.0 / (eps * gamma)


def resolution_dial(model: nn.Module, support: Support, *, chis, nbetas, n: int, gamma: float,
                    eps_nbeta: float | None = None, eps: float | None = None, chains: int, draws: int, burn_in: int,
                    seed: int, device="auto", snapshots: int = 0, progress: bool = False, threads: int | None = 1,
                    resume: bool = False, checkpoint_every: int = 50, measure: bool = True) -> Dial:
    """λ̂(q) − λ̂(q^(χ)) for every χ in ``chis`` and nβ in ``nbetas`` (Chen & Murfet §8).

    Every (nβ, target, chain) is one row of a single (rows, D) state, stepped by one vmapped
    gradient call per SGLD step (:func:`grid_chains`): ``chains`` chains for q and for every
    q^(χ), at every temperature, full batch on the per-history data of :func:`history_data`
    (n samples per target). All start at w* and share the injected noise ξ_t (one draw per
    chain and step, the stream of :func:`lib.llc.coupled_targets` with the same seed): every χ
    is coupled to q, and every temperature sees the same ξ_t. The step is ``eps``, the same at
    every temperature (so that the chains relax in the same number of steps, 2/(εγ), at every β),
    or, with ``eps_nbeta`` instead, ε = ``eps_nbeta``/nβ (the drift's scale the same at every β).
    ``measure``: record Theorem 7.3's δ_t and s_t at every step (:func:`grid_chains`).
    ``threads``: torch's intra-op threads while sampling (default 1: for models of a few
    thousand parameters more threads only add synchronisation, and on a busy machine their
    spin-waiting made a step 25 times slower; None keeps the current setting).
    ``resume``: keep the run in the book's cache (:mod:`lib.book.cache`), keyed by a hash of the
    model (architecture and parameters), the per-history data and every setting; while it runs,
    the sampler's whole state is saved every ``checkpoint_every`` steps, so an interrupted grid
    continues from its last checkpoint with a bit-identical result (:func:`grid_chains`)."""
    chis = [int(c) for c in chis]
    nbetas = [float(v) for v in nbetas]
    for name, v, lo in (("chains", chains, 2), ("draws", draws, 1), ("burn_in", burn_in, 0), ("snapshots", snapshots, 0)):
        integer_at_least(name, v, lo)
    if burn_in >= draws:
        raise ValueError(f"parameter 'burn_in' must be below 'draws' ({draws}); got {burn_in}")
    if not chis or any(not 1 <= c <= support.modes.rank for c in chis):
        raise ValueError(f"parameter 'chis' must hold integers in [1, {support.modes.rank}] (the rank); got {chis!r}")
    if not nbetas or any(not (np.isfinite(v) and v > 0) for v in nbetas):
        raise ValueError(f"parameter 'nbetas' must hold finite numbers > 0; got {nbetas!r}")
    if (eps is None) == (eps_nbeta is None):
        raise ValueError("give exactly one of 'eps' (one step for every nβ) and 'eps_nbeta' (ε = eps_nbeta / nβ)")
    step = eps if eps is not None else eps_nbeta
    if not (isinstance(step, (int, float)) and np.isfinite(step) and step > 0):
        raise ValueError(f"parameter '{'eps' if eps is not None else 'eps_nbeta'}' must be a positive number; "
                         f"got {step!r}")
    steps = [float(eps)] * len(nbetas) if eps is not None else [eps_nbeta / nb for nb in nbetas]
    with torch_threads(threads) if threads else contextlib.nullcontext():
        rows, W = history_data(support, chis, n, seed)
        kw = dict(nbetas=nbetas, gamma=gamma, eps=steps, chains=chains, draws=draws, burn_in=burn_in, seed=seed,
                  device=device, snapshots=snapshots, progress=progress, measure=measure)
        run = (_cached_grid(model, rows, W, checkpoint_every, **kw) if resume
               else grid_chains(model, rows, W, **kw))
    B, J, C = len(nbetas), len(chis), chains
    per = run["per_chain"]                                                   # (B, J + 1, C)
    bad = run["first_bad"] >= 0
    diff = per[:, :1] - per[:, 1:]
    diff[bad[:, :1] | bad[:, 1:]] = np.nan
    good = np.where(bad, np.nan, per)
    settings = dict(n=n, gamma=gamma, eps_nbeta=eps_nbeta, eps=steps, chains=chains, draws=draws, burn_in=burn_in,
                    seed=seed, histories=len(rows), loss="per-history", measure=measure)
    sep_all = run["sep_all"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)        # a target whose every chain diverged: NaN
        llc_q, llc_chi = np.nanmean(good[:, 0], axis=-1), np.nanmean(good[:, 1:], axis=-1)
    return Dial(chis, nbetas, diff, llc_q, llc_chi, sep_all[..., burn_in + 1:], run["positions"],
                run["snapshot_steps"], bad.sum(axis=-1), settings, run["seconds"],
                [(rows, W[k]) for k in range(J + 1)],
                {"delta": run["delta"], "lipschitz": run["lipschitz"], "gap": run["gap"],
                 "sep_all": sep_all, "grad_q": run["grad_q"], "loss": run["loss"], "loss_q": run["loss_q"],
                 "init_loss": np.asarray(run["init_loss"])}, good, steps, run["rhat"], run["ess"])


def _tensor_digest(*tensors) -> str:
    import hashlib

    h = hashlib.sha256()
    for t in tensors:
        t = t.detach().cpu().contiguous()
        h.update(str((tuple(t.shape), t.dtype)).encode())
        h.update(t.numpy().tobytes())
    return h.hexdigest()[:16]


def _cached_grid(model: nn.Module, rows, W, checkpoint_every: int, **kw) -> dict:
    """:func:`grid_chains` as a resumable entry of the book's cache (see :func:`resolution_dial`)."""
    import pickle

    params = {"model": repr(model), "weights": _tensor_digest(*model.state_dict().values()),
              "data": _tensor_digest(rows, W), "checkpoint_every": int(checkpoint_every),
              "device": resolve_device(kw["device"]).type,
              **{k: v for k, v in kw.items() if k not in ("device", "progress")}}

    def compute(workdir):
        run = grid_chains(model, rows, W, workdir=Path(workdir), checkpoint_every=checkpoint_every, **kw)
        (Path(workdir) / "run.pkl").write_bytes(pickle.dumps(run))
        (Path(workdir) / "resume.pt").unlink(missing_ok=True)

    entry = cache.cached("resolution-dial", params, compute, fmt="dir", sources=[grid_chains, sgld])
    return pickle.loads((Path(entry) / "run.pkl").read_bytes())


def grid_chains(model: nn.Module, rows: torch.Tensor, W: torch.Tensor, *, nbetas, gamma: float, eps, chains: int,
                draws: int, burn_in: int, seed: int, device="auto", snapshots: int = 0, progress: bool = False,
                chain_ids=None, noise_chains: int | None = None, workdir: Path | None = None,
                checkpoint_every: int = 50, measure: bool = True, chunk_chains: int | None = None,
                return_traces: bool = False) -> dict:
    """SGLD (Chen & Murfet §2.4, eq. 12) for K = W.shape[0] targets × B = len(nbetas) temperatures
    × ``chains`` chains at once, full batch, with the per-history loss of :func:`history_nll`
    (target 0 is q).

    Row (b, k, c) follows w ← w − (ε_b/2)(nβ_b ∇L^(k)(w) + γ(w − w*)) + √ε_b ξ_{t,c}: the noise
    ξ_{t,c} ~ N(0, I) is shared by every target and temperature (the generator and stream of
    :func:`lib.llc.coupled_targets`' first chunk for ``seed``), so each target's chains are
    coupled to q's. With ``measure`` (default), one extra row per (b, k ≥ 1, c) evaluates
    ∇L^(k) at q's point w_t^(b,0,c), in the same vmapped call, to record Theorem 7.3's
    ingredients δ_t and s_t at every step (see :class:`Dial`); without it those two are None
    and a step costs about half. Returns per-chain λ̂ (with L_n(w*) in float64), divergence steps
    (−1: none), separations from q's chains at every step (``sep_all[b, k−1, c, t]``,
    t = 0..draws), the per-step measurements (each row's own loss ``loss`` and q's loss at its point ``loss_q``,
    (B, K, C, draws), included), snapshots of positions, and the mixing of each
    chain's loss trace after burn-in: ``rhat[b, k]`` (split R̂ over the chains,
    :func:`lib.llc.split_rhat`) and ``ess[b, k, c]`` (:func:`lib.llc.effective_sample_size`).
    ``chain_ids`` (with ``noise_chains``, the number of chains of the run being reproduced)
    runs only those chains of a larger run: the noise is drawn for ``noise_chains`` chains, as
    that run draws it, and rows ``chain_ids`` used. ``workdir``: the whole state (positions,
    traces, measurements, the noise generator) is saved to ``workdir/resume.pt`` every
    ``checkpoint_every`` steps (written atomically), and a run that finds one continues from it;
    the result is bit-identical to an uninterrupted run (``resumed_from``: the step it continued
    from, 0 for a fresh start).
    ``chunk_chains``: run the chains in chunks of that many chain indices (each chunk every temperature and
    target of its chains, its noise the same stream sliced by ``chain_ids``), one after the other, and join
    them; None: as many as half the device's free memory holds by :func:`dial_cost` of one chain index
    (:func:`dial_chunk`), all at once where they fit. The chunks' chains equal the whole run's to float
    rounding. ``return_traces``: add each chain's loss trace after burn-in (``traces[b, k, c]``)."""
    from torch.func import functional_call, grad, vmap

    device = resolve_device(device)
    if chain_ids is None:
        n_chains = integer_at_least("chains", chains, 1)
        chunk = dial_chunk(n_betas=len(nbetas), n_targets=W.shape[0], chains=n_chains, draws=draws, snapshots=snapshots,
                           n_params=sum(p.numel() for p in model.parameters()), histories=W.shape[1],
                           n_cols=W.shape[2], measure=measure, device=device, requested=chunk_chains)
        if chunk < n_chains:
            return _grid_in_chunks(model, rows, W, chunk, nbetas=nbetas, gamma=gamma, eps=eps, chains=n_chains,
                                   draws=draws, burn_in=burn_in, seed=seed, device=str(device), snapshots=snapshots,
                                   progress=progress, workdir=workdir, checkpoint_every=checkpoint_every,
                                   measure=measure, return_traces=return_traces)
    nbetas = [float(v) for v in nbetas]
    eps = [float(v) for v in eps]
    integer_at_least("checkpoint_every", checkpoint_every, 1)
    K, H, V = W.shape
    B, C = len(nbetas), int(chains)
    J = K - 1
    pick = None
    if chain_ids is not None:
        pick = torch.as_tensor(list(chain_ids), dtype=torch.long)
        if len(pick) != C or noise_chains is None or int(pick.max()) >= noise_chains or int(pick.min()) < 0:
            raise ValueError(f"parameter 'chain_ids' must hold {C} (= chains) indices in [0, noise_chains = "
                             f"{noise_chains}); got {list(chain_ids)!r}")
    model = model.to(device)
    flat = sgld.FlatParameters(model)
    w0 = flat.w0.to(device)
    D = w0.numel()
    rows = rows.to(device)
    W = W.to(device=device, dtype=w0.dtype)
    wrapper = sgld.LossModule(model, lambda m, batch: m(batch[0]))
    Wq = W[0]

    def loss(parts, Wr):
        params = {name: part.view(shape) for name, part, shape in zip(flat.names, parts, flat.shapes)}
        logp = functional_call(wrapper, params, (rows,))
        value = -(Wr * logp).sum() / H
        return value, (value.detach(), (-(Wq * logp).sum() / H).detach())

    step = vmap(grad(loss, has_aux=True), in_dims=(0, 0))     # the parameters' parts: no split/cat in autograd
    # rows of the state: main rows (b, k, c), then (with ``measure``) probe rows (b, j, c), j = 1..J, holding
    # q's point (b, 0, c)
    R, P = B * K * C, (B * J * C if measure else 0)
    main_targets = np.repeat(np.arange(K), C)[None].repeat(B, 0).ravel()
    probe_targets = np.repeat(np.arange(1, K), C)[None].repeat(B, 0).ravel() if measure else np.zeros(0, int)
    target = torch.as_tensor(np.concatenate([main_targets, probe_targets]), device=device)
    Wrow = W[target]                                                        # (R + P, H, V)
    col = dict(dtype=w0.dtype, device=device)
    # Eq. 12 as lib.sgld writes it, one coefficient per temperature: w ← (1 − εγ/2) w − (ε nβ/2) ∇L + kick,
    # kick = (εγ/2) w* + √ε ξ shared by every target
    half_eps = torch.as_tensor([0.5 * e for e in eps], **col)
    shrink, pull, push = sgld.eq12_coefficients(half_eps, gamma, torch.as_tensor(nbetas, **col))
    shrink, push = shrink.view(B, 1, 1, 1), push.view(B, 1, 1, 1)
    anchor = pull.view(B, 1, 1) * w0                                        # (B, 1, D): (εγ/2) w*
    sqrt_eps = torch.as_tensor([math.sqrt(e) for e in eps], **col).view(B, 1, 1)
    _, noise_gen = sgld.chunk_generators(seed, 0, device)                   # the noise of lib.llc's chunk 0
    xi = torch.empty(C if pick is None else noise_chains, D, **col)

    with torch.no_grad():
        init = [float(history_nll(model, (rows, W[k])).double().mean()) for k in range(K)]
    steps_at = sorted({int(round(v)) for v in np.linspace(0, draws, snapshots + 1)[1:]}) if snapshots else []
    snap = {t: i for i, t in enumerate(steps_at)}
    positions = torch.empty(B, K, C, len(snap), D, **col) if snap else None
    keep = draws - burn_in
    trace = torch.empty(B, K, C, keep, dtype=torch.float64, device=device)
    first_bad = torch.full((B, K, C), -1, dtype=torch.long, device=device)
    measured = ("delta", "lipschitz", "gap") if measure else ("gap",)
    meas = {k: torch.empty(B, J, C, draws, dtype=torch.float64, device=device) for k in measured}
    grad_q = torch.empty(B, C, draws, dtype=torch.float64, device=device)
    losses = torch.empty(2, B, K, C, draws, dtype=torch.float64, device=device)  # L^(k)(w_t), L(w_t) per row
    sep_all = torch.zeros(B, J, C, draws + 1, dtype=torch.float64, device=device)
    state = w0.expand(R + P, -1).clone()
    w = state[:R].view(B, K, C, D)
    probe = state[R:].view(B, J, C, D) if measure else None
    parts = torch.split(state, flat.sizes, dim=1)
    gbuf = torch.empty_like(state)
    gm = gbuf[:R].view(B, K, C, D)
    gp = gbuf[R:].view(B, J, C, D) if measure else None
    work = torch.empty(B, J, C, D, **col)
    arrays = {"state": state, "trace": trace, "first_bad": first_bad, "grad_q": grad_q, "sep_all": sep_all,
              "losses": losses,
              **{"meas_" + k: v for k, v in meas.items()}, **({"positions": positions} if snap else {})}
    resume_path = Path(workdir) / "resume.pt" if workdir is not None else None
    t_start, elapsed = 0, 0.0
    if resume_path is not None and resume_path.exists():
        saved = torch.load(resume_path, map_location=device, weights_only=True)
        if set(saved["arrays"]) != set(arrays) or any(saved["arrays"][k].shape != v.shape for k, v in arrays.items()):
            raise ValueError(f"{resume_path} holds the state of another run; delete it to start afresh")
        for k, v in arrays.items():
            v.copy_(saved["arrays"][k])
        noise_gen.set_state(saved["noise_gen"].to(noise_gen.get_state().device))
        t_start, elapsed = int(saved["t"]), float(saved["seconds"])

    def save_state(t: int) -> None:
        tmp = resume_path.with_name(resume_path.name + ".tmp")
        torch.save({"t": t, "seconds": elapsed + time.perf_counter() - start, "noise_gen": noise_gen.get_state(),
                    "arrays": arrays}, tmp)
        os.replace(tmp, resume_path)

    bar = progress_bar(desc="coupled SGLD chain-steps", total=R * draws, initial=R * t_start) if progress else None
    start = time.perf_counter()
    for t in range(t_start, draws + 1):
        if resume_path is not None and t > t_start and t % checkpoint_every == 0 and t < draws:
            save_state(t)
        if t in snap:
            positions[:, :, :, snap[t]] = w
        if t == draws:
            break
        if measure:
            probe.copy_(w[:, :1].expand(B, J, C, D))
        grads, (value, value_q) = step(parts, Wrow)
        torch.cat(grads, dim=1, out=gbuf)
        if measure:
            meas["delta"][..., t] = torch.linalg.vector_norm(torch.sub(gm[:, :1], gp, out=work), dim=-1)
            meas["lipschitz"][..., t] = torch.linalg.vector_norm(torch.sub(gp, gm[:, 1:], out=work), dim=-1)
        v, vq = value[:R].view(B, K, C), value_q[:R].view(B, K, C)
        meas["gap"][..., t] = (vq[:, 1:] - v[:, 1:]).abs()
        losses[0, ..., t], losses[1, ..., t] = v, vq
        grad_q[..., t] = torch.linalg.vector_norm(gm[:, 0], dim=-1)
        bad = ~torch.isfinite(v) | ~torch.isfinite(torch.linalg.vector_norm(w, dim=-1))
        first_bad.copy_(torch.where((first_bad < 0) & bad, torch.full_like(first_bad, t), first_bad))
        if t >= burn_in:
            trace[..., t - burn_in] = v
        noise = sgld.draw_noise(xi, noise_gen)                              # ξ ~ N(0, I), every chain of the run
        if pick is not None:
            noise = noise[pick]
        sgld.kicked_update_(w, gm, sgld.kick(anchor, sqrt_eps, noise)[:, None], shrink, push)  # kick: (B, C, D)
        sep_all[..., t + 1] = torch.linalg.vector_norm(torch.sub(w[:, :1], w[:, 1:], out=work), dim=-1)
        if bar is not None:
            bar.update(R)
    if bar is not None:
        bar.close()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = elapsed + time.perf_counter() - start
    traces = trace.cpu().numpy()
    per_chain = np.asarray(nbetas)[:, None, None] * (traces.mean(axis=-1) - np.asarray(init)[None, :, None])
    rhat, ess = _mixing(traces)
    out = {k: v.cpu().numpy() for k, v in meas.items()}
    if not measure:
        out.update(delta=None, lipschitz=None)
    loss, loss_q = losses.cpu().numpy()
    return {"per_chain": per_chain, "first_bad": first_bad.cpu().numpy(), "init_loss": init, "loss": loss,
            "loss_q": loss_q,
            "sep_all": sep_all.cpu().numpy(), "grad_q": grad_q.cpu().numpy(), **out, "rhat": rhat, "ess": ess,
            "positions": positions.cpu().numpy() if snap else None,
            "snapshot_steps": steps_at, "seconds": seconds, "resumed_from": t_start,
            **({"traces": traces} if return_traces else {})}


def _mixing(traces: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rhat[b, k], ess[b, k, c]) of loss traces (B, K, C, T) (:func:`lib.llc.split_rhat` over the finite
    chains, :func:`lib.llc.effective_sample_size` per chain)."""
    B, K = traces.shape[:2]
    finite = np.isfinite(traces).all(axis=-1)                                # (B, K, C)
    rhat = np.array([[llc.split_rhat(traces[b, k][finite[b, k]]) if finite[b, k].sum() >= 2 else np.nan
                      for k in range(K)] for b in range(B)])
    ess = np.where(finite, np.array([[llc.effective_sample_size(np.nan_to_num(traces[b, k])) for k in range(K)]
                                     for b in range(B)]), np.nan)
    return rhat, ess


def dial_chunk(*, n_betas: int, n_targets: int, chains: int, draws: int, snapshots: int, n_params: int,
               histories: int, n_cols: int, measure: bool, device, requested: int | None = None) -> int:
    """Chain indices per chunk of :func:`grid_chains`: ``requested`` (at most ``chains``), or as many as half
    the free memory of ``device`` holds, one chain index costing :func:`dial_cost` with ``chains`` = 1 (all
    its n_betas × n_targets rows and, with ``measure``, its n_betas × (n_targets − 1) probes); at most
    ``chains``. Refused (``MemoryError``) where not even one chain index fits."""
    if requested is not None:
        return min(integer_at_least("chunk_chains", requested, 1), int(chains))
    per, _ = dial_cost(n_betas=n_betas, n_chis=n_targets - 1, chains=1, draws=draws, snapshots=snapshots,
                       n_params=n_params, weights=0, histories=histories, n_cols=n_cols, tokens=0, measure=measure)
    available = sgld.available_bytes(device)
    fit = int(0.5 * available // per)
    if fit < 1:
        raise MemoryError(f"one chain of the dial ({n_betas} temperatures × {n_targets} targets) needs about "
                          f"{per / 2**20:.1f} MiB but only {available / 2**20:.1f} MiB are free on {device}: "
                          "lower 'snapshots' or 'beta_factors'")
    return min(fit, int(chains))


def _grid_in_chunks(model: nn.Module, rows, W, chunk: int, *, chains: int, workdir, return_traces: bool, **kw) -> dict:
    """:func:`grid_chains` over chain indices 0..chains − 1 in chunks of ``chunk``, joined along the chain axis
    (each chunk its own resumable ``workdir/chunk<j>``, its finished run kept there as ``run.pkl``); R̂ over every
    chain, from the joined traces."""
    import pickle

    runs = []
    for j, a in enumerate(range(0, chains, chunk)):
        ids = list(range(a, min(chains, a + chunk)))
        wd = None
        if workdir is not None:
            wd = Path(workdir) / f"chunk{j}"
            wd.mkdir(parents=True, exist_ok=True)
            if (wd / "run.pkl").exists():
                runs.append(pickle.loads((wd / "run.pkl").read_bytes()))
                continue
        runs.append(grid_chains(model, rows, W, chains=len(ids), chain_ids=ids, noise_chains=chains, workdir=wd,
                                return_traces=True, **kw))
        if wd is not None:
            (wd / "run.pkl").write_bytes(pickle.dumps(runs[-1]))
            (wd / "resume.pt").unlink(missing_ok=True)
    axis = {"per_chain": 2, "first_bad": 2, "sep_all": 2, "grad_q": 1, "delta": 2, "lipschitz": 2, "gap": 2,
            "ess": 2, "positions": 2, "traces": 2}
    out = dict(runs[0])
    for key, ax in axis.items():
        if runs[0][key] is not None:
            out[key] = np.concatenate([r[key] for r in runs], axis=ax)
    out["rhat"], _ = _mixing(out["traces"])
    out["seconds"] = float(sum(r["seconds"] for r in runs))
    out["resumed_from"] = min(r["resumed_from"] for r in runs)
    if not return_traces:
        del out["traces"]
    return out


def cutoffs(chis, rank: int) -> list[int]:
    """The cutoffs to sample: ``chis`` with every χ >= rank read as the rank (q^(χ) keeps every mode there,
    so q^(χ) = q, Def 4.16), and the rank itself always included (the identity check), sorted."""
    return sorted({min(int(c), int(rank)) for c in chis} | {int(rank)})


def _target_losses(model: nn.Module, datas) -> list:
    """f_j(w) = L_n of target j as functions of the flat parameter vector (per-history data)."""
    return [flat_loss(model, history_nll, d)[0] for d in datas]


def measure_constants(model: nn.Module, dial: Dial) -> dict:
    """The constants of the derived Theorems 7.3–7.4 for a dial's run.

    Measured at every step of the run (:class:`Dial` ``steps``), hence the true maxima along it:

    * ``delta[b, j]`` = max_t,c ‖∇L_n(w_t) − ∇L_n^(χ_j)(w_t)‖ over the q-chains (``delta_chain[b, j, c]``
      per chain), the δ of Theorem 7.3;
    * ``eps[b, j]``   = max_t,c |L_n(w'_t) − L_n^(χ_j)(w'_t)| over the q^(χ_j)-chains (w'_0 = w*);
    * ``M_secant``    = max over (b, j, c, t ≥ 1) of ‖∇L_n^(χ)(w_t) − ∇L_n^(χ)(w'_t)‖ / ‖w_t − w'_t‖: the
      Lipschitz quotient the proof of Theorem 7.3 uses, on the pairs the run visited.

    Estimated at kept points (``dial.positions``, ``snapshots`` > 0) and at w*:

    * ``K`` = max ‖∇L_n(w)‖ over the q-chains' points at every step and the q^(χ)-chains' snapshots;
    * ``M_lanczos`` = max over targets of the Hessian norm of L_n^(χ) (Lanczos) at w* and at the
      last position of the first chain of each target, at the smallest and the largest nβ;
    * ``M`` = max(``M_lanczos``, ``M_secant``): both estimate from below the sup over the region
      that Theorem 7.3 assumes; with ``M`` ≥ ``M_secant`` the derived bound follows from the
      one-step inequality (:func:`one_step_violations`) by induction."""
    if dial.positions is None or dial.steps is None:
        raise ValueError("the dial kept no positions: run resolution_dial with snapshots > 0")
    if dial.steps["delta"] is None:
        raise ValueError("the dial did not record δ_t and s_t: run resolution_dial with measure=True")
    with torch_threads(1):       # small models (see resolution_dial)
        return _measure_constants(model, dial)


def _measure_constants(model: nn.Module, dial: Dial) -> dict:
    datas = dial.data
    fs = _target_losses(model, datas)
    w0 = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    grads = [torch.func.vmap(torch.func.grad(f)) for f in fs]
    st = dial.steps
    bad = dial.divergent.sum(axis=1) > 0
    delta_chain = np.nanmax(st["delta"], axis=-1)
    eps = np.nanmax(np.nanmax(st["gap"], axis=-1), axis=-1)
    sep = st["sep_all"][..., :-1]
    with np.errstate(invalid="ignore", divide="ignore"):
        quotient = np.where(sep > 0, st["lipschitz"] / sep, np.nan)
    M_secant = float(np.nanmax(quotient)) if np.isfinite(quotient).any() else 0.0
    K = float(np.nanmax(st["grad_q"]))
    B, J = len(dial.nbetas), len(dial.chis)
    for b in range(B):
        pos = torch.as_tensor(dial.positions[b], dtype=w0.dtype)              # (targets, C, S, D)
        for j in range(J):
            pts_j = pos[j + 1].reshape(-1, pos.shape[-1])
            K = max(K, float(grads[0](pts_j).norm(dim=1).max()))
    M = 0.0
    for j in range(J + 1):
        points = [w0] + [torch.as_tensor(dial.positions[b][j, 0, -1], dtype=w0.dtype) for b in {0, B - 1}]
        for w in points:
            M = max(M, curvature(model, history_nll, datas[j], w=w).spectral_norm)
    return {"delta": np.nanmax(delta_chain, axis=-1), "delta_chain": delta_chain, "eps": eps, "K": K,
            "M": max(M, M_secant), "M_lanczos": M, "M_secant": M_secant, "any_divergent": bool(bad.any())}


def one_step_violations(dial: Dial, rtol: float = 1e-9, atol: float = 1e-13) -> int:
    """The triangle inequality behind Theorem 7.3, at every step of the run with its own
    measurements: ‖Δ_{t+1}‖ ≤ |1 − ε γ/2| ‖Δ_t‖ + (ε nβ/2) (δ_t + s_t), s_t = ‖∇L^(χ)_n(w_t) − ∇L^(χ)_n(w'_t)‖,
    with the dial's own γ and step ε at each nβ. It holds exactly when the two chains of a pair
    share start and noise (the noise cancels in Δ); a count of the (b, j, c, t) where it fails
    beyond rounding (``rtol``; ``atol`` for separations of a few ulps of w, as at χ = rank)."""
    st = dial.steps
    if st is None or st["delta"] is None:
        raise ValueError("the dial did not record δ_t and s_t: run resolution_dial with measure=True")
    gamma = dial.settings["gamma"]
    count = 0
    for b, (nb, e) in enumerate(zip(dial.nbetas, dial.eps)):
        sep = st["sep_all"][b]
        rhs = abs(1 - e * gamma / 2) * sep[..., :-1] + e * nb / 2 * (st["delta"][b] + st["lipschitz"][b])
        lhs = sep[..., 1:]
        ok = np.isfinite(lhs) & np.isfinite(rhs)
        count += int(np.sum(lhs[ok] > rhs[ok] * (1 + rtol) + atol))
    return count


def lemma_ratios(model: nn.Module, support: Support, dial: Dial, max_chains: int = 4) -> np.ndarray:
    """Lemma 7.1 measured: at the last positions of the first ``max_chains`` q-chains, for every
    nβ and every χ below the rank, ‖∇L_n − ∇L_n^(χ)‖ / δ_χ(w) with δ_χ the population constant
    (:func:`lib.insensitivity.constants`). Near 1 when the sample is large."""
    with torch_threads(1):       # small models (see resolution_dial)
        return _lemma_ratios(model, support, dial, max_chains)


def _lemma_ratios(model: nn.Module, support: Support, dial: Dial, max_chains: int) -> np.ndarray:
    import copy

    from torch.nn.utils import vector_to_parameters

    fs = _target_losses(model, dial.data)
    probe = copy.deepcopy(model).to(torch.float64)
    out = []
    for b in range(len(dial.nbetas)):
        for c in range(min(max_chains, dial.positions.shape[2])):
            w = torch.as_tensor(dial.positions[b][0, c, -1], dtype=torch.float64)
            vector_to_parameters(w, probe.parameters())
            g0 = torch.func.grad(fs[0])(w)
            for j, chi in enumerate(dial.chis):
                if chi >= support.modes.rank:
                    continue
                sample = float((g0 - torch.func.grad(fs[j + 1])(w)).norm())
                out.append(sample / constants(probe, support.modes, chi).delta)
    return np.array(out)


# ----- what the chapter costs before it runs ---------------------------------------------------

def dial_cost(*, n_betas: int, n_chis: int, chains: int, draws: int, snapshots: int, n_params: int, weights: int,
              histories: int, n_cols: int, tokens: int, measure: bool = True) -> tuple[float, float]:
    """(peak bytes, floating-point operations) of one :func:`resolution_dial`: R = n_betas·(1 + n_chis)·chains
    chains and, with ``measure``, P = n_betas·n_chis·chains probes, each step one gradient of the per-history
    loss over ``histories`` histories (6 operations per matmul weight per token read). Peak: the kept
    positions (R × snapshots × d), the per-step measurements (3 × P × draws), the chains' state, gradient and
    work arrays (4 × (R + P) × d) and the batched log-probabilities with their gradient (3 × (R + P) × H × |Σ^l|),
    in float64. :func:`grid_chains` runs the chains in chunks that fit the device (:func:`dial_chunk`): a run's
    peak is its chunk's, at least ``chains`` = 1 (the kept positions are gathered on the host)."""
    R = n_betas * (1 + n_chis) * chains
    P = n_betas * n_chis * chains if measure else 0
    peak = 8.0 * (R * snapshots * n_params + 3 * P * draws + 4 * (R + P) * n_params + 3 * (R + P) * histories * n_cols)
    return peak, 6.0 * weights * histories * tokens * (R + P) * draws
