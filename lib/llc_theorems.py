"""Chen & Murfet §7: SGLD for q and for its truncation q^(χ), coupled, and the bounds of
Theorems 7.3–7.4 in the form the book derives them (the paper's constants were lost in its
text's extraction; MATH.md §7).

Setting: a conditional model p(y|x, w) on the finite support of a language
(:mod:`lib.conditional_models`), data (x_i, y_i) from q and (x_i, y'_i) from q^(χ) drawn with
common random numbers (:meth:`Support.coupled_sample`), and two SGLD chains (MATH.md §6)
from the same w* with the same minibatch indices and the same injected noise
(:func:`lib.llc.coupled_chains`).

**Theorem 7.3, derived.** With Δ_t = w_t − w'_t, constant step ε and Δ_0 = 0,

    Δ_{t+1} = (1 − εγ/2) Δ_t − (εnβ/2) [ (∇L_B(w_t) − ∇L^(χ)_B(w_t)) + (∇L^(χ)_B(w_t) − ∇L^(χ)_B(w'_t)) ].

If the minibatch gradient difference at one point is at most δ (Lemma 7.1: the minibatch
version of Def 6.3) and ∇L^(χ)_B is M-Lipschitz on the region the chains visit, then
‖Δ_{t+1}‖ ≤ a‖Δ_t‖ + b with a = |1 − εγ/2| + εnβM/2 and b = εnβδ/2, hence

    ‖Δ_t‖ ≤ b (1 − a^t) / (1 − a)     (a ≠ 1),       ≤ b t  (a = 1).

When nβM < γ (and εγ < 2) a < 1 and the bound saturates at nβδ / (γ − nβM): the step-size
and localisation condition of the theorem.

**Theorem 7.4, derived.** λ̂ = nβ (mean_t L_B(w_t) − L_n(w*)) and λ̂^(χ) likewise with q^(χ)
data. If L is K-Lipschitz on the region and |L_B − L^(χ)_B| ≤ ε at every point (log-probability
insensitivity, minibatch version), then

    |λ̂ − λ̂^(χ)| ≤ nβ ( K · mean_t ‖Δ_t‖ + 2ε ).

**§7.1.** A causal language model is a sequence of models p(y_t | y_<t, w), one per position,
sharing w: :func:`per_position_llc` estimates the LLC of each position's loss L_t.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from . import llc
from .book.device import torch_threads
from .conditional_models import Support
from .insensitivity import effective


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

def _flat_loss(model: nn.Module, loss_fn, data):
    """(f, w0): the mean loss as a function of the flat parameter vector (the sampler's own
    flattening, :class:`lib.llc._Flat`), and the model's own parameters."""
    from torch.func import functional_call

    wrapper, flat = llc._LossModule(model, loss_fn), llc._Flat(model)

    def f(w: torch.Tensor) -> torch.Tensor:
        return functional_call(wrapper, flat.unflatten(w), tuple(data)).mean()

    return f, flat.w0


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
    Hessian-vector products are forward-over-reverse (``torch.func.jvp`` of ``grad``)."""
    from scipy.sparse.linalg import LinearOperator, eigsh

    f, w0 = _flat_loss(model, loss_fn, data)
    w = w0 if w is None else w.to(w0)
    g = torch.func.grad(f)(w)
    grad_f = torch.func.grad(f)

    def hvp(v):
        t = torch.as_tensor(np.asarray(v).ravel(), dtype=w.dtype)
        return torch.func.jvp(grad_f, (w,), (t,))[1].detach().numpy().astype(np.float64)

    d = w.numel()
    v0 = np.random.default_rng(0).standard_normal(d)
    if d <= 2:
        H = np.stack([hvp(e) for e in np.eye(d)])
        ev = np.linalg.eigvalsh(0.5 * (H + H.T))
        top, low = float(ev[np.argmax(np.abs(ev))]), float(ev[0])
    else:
        op = LinearOperator((d, d), matvec=hvp, dtype=np.float64)
        top = float(eigsh(op, k=1, which="LM", v0=v0, tol=tol, return_eigenvectors=False)[0])
        low = float(eigsh(op, k=1, which="SA", v0=v0, tol=tol, return_eigenvectors=False)[0]) if smallest else None
    return Curvature(top, abs(top), float(torch.linalg.norm(g)), low)


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
    a = abs(1 - eps * gamma / 2) + eps * nbeta * M / 2
    b = eps * nbeta * delta / 2
    if np.isclose(a, 1.0, rtol=0, atol=1e-15):
        return b * t
    return b * (1 - a ** t) / (1 - a)


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


@dataclass
class Dial:
    """:func:`resolution_dial`: for each nβ (axis 0) and cutoff χ (axis 1), per chain c,
    ``diff[b, j, c]`` = λ̂_c(q) − λ̂_c(q^(χ_j)) of coupled chains (NaN where either diverged);
    ``llc_q[b]``, ``llc_chi[b, j]`` the estimates; ``separation[b, j]`` = ‖w_t − w'_t‖ per chain
    and draw after burn-in; ``positions[b, k]`` target k's chains' parameters at
    ``snapshot_steps``; ``data`` the targets' data the chains ran on."""

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
    data: list | None = None      # each target's full-batch data (rows, cols, weights), q first

    @property
    def mean(self) -> np.ndarray:
        return np.nanmean(self.diff, axis=-1)

    @property
    def se(self) -> np.ndarray:
        n = np.sum(np.isfinite(self.diff), axis=-1)
        return np.nanstd(self.diff, axis=-1, ddof=1) / np.sqrt(n)

    @property
    def z(self) -> np.ndarray:
        """(λ̂(q) − λ̂(q^(χ))) in units of its standard error (paired over coupled chains); 0
        where every chain pair agrees exactly (χ = rank: identical chains)."""
        return _z(self.diff)


def _z(diff: np.ndarray) -> np.ndarray:
    mean = np.nanmean(diff, axis=-1)
    se = np.nanstd(diff, axis=-1, ddof=1) / np.sqrt(np.sum(np.isfinite(diff), axis=-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        z = mean / se
    return np.where((se == 0) & (mean == 0), 0.0, z)


def chi_star(z: np.ndarray, chis, threshold: float = 2.0) -> list:
    """Per row of z (one nβ), the smallest χ from which every larger cutoff has |z| ≤ threshold:
    the coarsest truncation SGLD cannot tell from q at that temperature (None if even the
    largest χ is distinguishable)."""
    out = []
    for row in np.atleast_2d(z):
        ok = np.abs(row) <= threshold
        out.append(next((chis[j] for j in range(len(chis)) if ok[j:].all()), None))
    return out


def chi_star_interval(dial: Dial, threshold: float = 2.0, n_boot: int = 1000, seed: int = 0,
                      level: float = 0.9) -> list[tuple]:
    """Percentile bootstrap interval of χ*(β) per nβ, resampling the coupled chains (the same
    resample for every χ, since a chain's draws are shared across the cutoffs)."""
    rng = np.random.default_rng(seed)
    C = dial.diff.shape[-1]
    big = max(dial.chis) + 1                    # "None" (never indistinguishable) counts as above every χ
    draws = []
    for _ in range(n_boot):
        idx = rng.integers(0, C, C)
        z = _z(dial.diff[..., idx])
        draws.append([big if c is None else c for c in chi_star(z, dial.chis, threshold)])
    lo, hi = np.quantile(np.array(draws), [(1 - level) / 2, (1 + level) / 2], axis=0)
    return [(float(a), float(b)) for a, b in zip(lo, hi)]


def resolution_dial(model: nn.Module, support: Support, *, chis, nbetas, n: int, gamma: float, eps_nbeta: float,
                    chains: int, draws: int, burn_in: int, seed: int, device="auto", snapshots: int = 0,
                    progress: bool = False, threads: int | None = 1) -> Dial:
    """λ̂(q) − λ̂(q^(χ)) for every χ in ``chis`` and nβ in ``nbetas`` (Chen & Murfet §8).

    For each nβ, one call of :func:`lib.llc.coupled_targets` runs ``chains`` chains for q and
    for every q^(χ) at once (vmapped; full batch on the distinct pairs of :func:`weighted_pairs`,
    n samples per target), all from w* with the same noise: every χ is coupled to q. The step
    is ε = ``eps_nbeta``/nβ, so that the drift's scale is the same at every temperature.
    ``threads``: torch's intra-op threads while sampling (default 1: for models of a few
    thousand parameters more threads only add synchronisation, and on a busy machine their
    spin-waiting made a step 25 times slower; None keeps the current setting)."""
    with torch_threads(threads) if threads else contextlib.nullcontext():
        return _resolution_dial(model, support, chis=chis, nbetas=nbetas, n=n, gamma=gamma, eps_nbeta=eps_nbeta,
                                chains=chains, draws=draws, burn_in=burn_in, seed=seed, device=device,
                                snapshots=snapshots, progress=progress)


def _resolution_dial(model, support, *, chis, nbetas, n, gamma, eps_nbeta, chains, draws, burn_in, seed, device,
                     snapshots, progress) -> Dial:

    chis = [int(c) for c in chis]
    x, y, weights = weighted_pairs(support, chis, n, seed)
    datas = [(x, y, weights[j]) for j in range(len(chis) + 1)]
    C = chains
    diff = np.full((len(nbetas), len(chis), C), np.nan)
    llc_q, llc_chi = np.zeros(len(nbetas)), np.zeros((len(nbetas), len(chis)))
    seps, positions, divergent = [], [], np.zeros((len(nbetas), len(chis) + 1), dtype=int)
    steps = []
    t0 = time.perf_counter()
    for b, nb in enumerate(nbetas):
        res = llc.coupled_targets(model, weighted_nll, datas, nbeta=float(nb), gamma=gamma, eps=eps_nbeta / nb,
                                  chains=C, draws=draws, burn_in=burn_in, batch_size=len(x), seed=seed,
                                  device=device, progress=progress, snapshots=snapshots)
        per = [r.per_chain for r in res.results]
        bad = [np.array([d["chain"] for d in r.diagnostics["divergent"]], dtype=int) for r in res.results]
        divergent[b] = [len(v) for v in bad]
        llc_q[b] = res.results[0].llc
        for j in range(len(chis)):
            d = per[0] - per[j + 1]
            d[np.union1d(bad[0], bad[j + 1])] = np.nan
            diff[b, j] = d
            llc_chi[b, j] = res.results[j + 1].llc
        seps.append(res.separation)
        if snapshots:
            positions.append(res.positions)
            steps = res.snapshot_steps
    settings = dict(n=n, gamma=gamma, eps_nbeta=eps_nbeta, chains=chains, draws=draws, burn_in=burn_in, seed=seed,
                    distinct_pairs=len(x))
    return Dial(chis, [float(v) for v in nbetas], diff, llc_q, llc_chi, np.stack(seps),
                np.stack(positions) if snapshots else None, list(steps), divergent, settings,
                time.perf_counter() - t0, datas)


def monotone_verdict(chi_stars, intervals) -> str:
    """The pre-set rule for §8's prediction "χ*(β) is non-decreasing in β" (β in increasing
    order): "contradicted" if some β < β' has the interval of χ*(β) entirely above that of
    χ*(β'); "supported" if not, the point estimates are non-decreasing and they move (a
    constant χ* says nothing about the dial); else "inconclusive". None (never
    indistinguishable) counts as above every cutoff."""
    big = float("inf")
    pts = [big if c is None else c for c in chi_stars]
    for i in range(len(intervals)):
        for j in range(i + 1, len(intervals)):
            if intervals[i][0] > intervals[j][1]:
                return "contradicted"
    moves = len(set(pts)) > 1
    return "supported" if moves and all(a <= b for a, b in zip(pts, pts[1:])) else "inconclusive"


def insensitivity_settings(profile: str = "ci", seed: int = 0, device="auto") -> dict:
    """The chapter "Insensitivity"'s parameters at ``profile``: the ladder and the models sampled here."""
    from .book.chapters import get_chapter

    return get_chapter("insensitivity").resolve({"profile": profile, "seed": seed, "device": device})


def _target_losses(model: nn.Module, datas) -> list:
    """f_j(w) = L_n of target j as functions of the flat parameter vector."""
    return [_flat_loss(model, weighted_nll, d)[0] for d in datas]


def measure_constants(model: nn.Module, dial: Dial) -> dict:
    """The constants of the derived Theorems 7.3–7.4, measured where the chains went
    (``dial.positions``, kept with ``snapshots`` > 0) and at w*:

    * ``delta[b, j]`` = max ‖∇L_n(w) − ∇L_n^(χ_j)(w)‖ over the q-chains' points (Lemma 7.1's object);
    * ``eps[b, j]``   = max |L_n(w) − L_n^(χ_j)(w)| over the q^(χ_j)-chains' points and w*;
    * ``K``           = max ‖∇L_n(w)‖ over every point;
    * ``M``           = max over χ of the Hessian norm of L_n^(χ) at w* and at the last
      position of the first chain of each target, at the smallest and the largest nβ."""
    if dial.positions is None:
        raise ValueError("the dial kept no positions: run resolution_dial with snapshots > 0")
    with torch_threads(1):       # small models (see resolution_dial)
        return _measure_constants(model, dial)


def _measure_constants(model: nn.Module, dial: Dial) -> dict:
    datas = dial.data
    fs = _target_losses(model, datas)
    w0 = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    grads = [torch.func.vmap(torch.func.grad_and_value(f)) for f in fs]
    B, J = len(dial.nbetas), len(dial.chis)
    delta, eps = np.zeros((B, J)), np.zeros((B, J))
    K = 0.0
    for b in range(B):
        pos = torch.as_tensor(dial.positions[b], dtype=w0.dtype)              # (targets, C, S, D)
        pts_q = torch.cat([w0[None], pos[0].reshape(-1, pos.shape[-1])])
        g0, l0 = grads[0](pts_q)
        K = max(K, float(g0.norm(dim=1).max()))
        for j in range(J):
            gj, _ = grads[j + 1](pts_q)
            delta[b, j] = float((g0 - gj).norm(dim=1).max())
            pts_j = torch.cat([w0[None], pos[j + 1].reshape(-1, pos.shape[-1])])
            gq, lq = grads[0](pts_j)
            _, lj = grads[j + 1](pts_j)
            eps[b, j] = float((lq - lj).abs().max())
            K = max(K, float(gq.norm(dim=1).max()))
    M = 0.0
    for j in range(J + 1):
        points = [w0] + [torch.as_tensor(dial.positions[b][j, 0, -1], dtype=w0.dtype) for b in {0, B - 1}]
        for w in points:
            M = max(M, curvature(model, weighted_nll, datas[j], w=w).spectral_norm)
    return {"delta": delta, "eps": eps, "K": K, "M": M}


def lemma_ratios(model: nn.Module, support: Support, dial: Dial, max_chains: int = 4) -> np.ndarray:
    """Lemma 7.1 measured: at the last positions of the first ``max_chains`` q-chains, for every
    nβ and every χ below the rank, ‖∇L_n − ∇L_n^(χ)‖ / δ_χ(w) with δ_χ the population constant
    (:func:`lib.insensitivity.constants`). Near 1 when the sample is large."""
    with torch_threads(1):       # small models (see resolution_dial)
        return _lemma_ratios(model, support, dial, max_chains)


def _lemma_ratios(model: nn.Module, support: Support, dial: Dial, max_chains: int) -> np.ndarray:
    import copy

    from torch.nn.utils import vector_to_parameters

    from .insensitivity import constants

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


# ---------------------------------------------------------------------------
# §7.1: a transformer as a sequence of models, one per position
# ---------------------------------------------------------------------------

@dataclass
class PerPositionLLC:
    """:func:`per_position_llc`: for each position t (``positions[i]``), ``llc[i]`` = λ̂_t,
    ``se[i]`` its standard error over chains, ``init_loss[i]`` = L_t(w*), and ``results[i]``
    the full :class:`lib.llc.LLCResult` (traces, per-chain λ̂, diagnostics: ESS, split R̂,
    MALA acceptance, divergent chains); ``settings`` the SGLD setting shared by every
    position; ``seconds`` the wall time of all positions."""

    positions: list
    llc: np.ndarray
    se: np.ndarray
    init_loss: np.ndarray
    results: list
    settings: dict
    seconds: float

    def diagnostics(self) -> list[dict]:
        """Per position: R̂, smallest ESS, mean MALA acceptance, number of divergent chains."""
        return [{"position": t, "rhat": float(r.diagnostics["rhat"]), "min_ess": float(np.min(r.diagnostics["ess"])),
                 "mala_acceptance": float(np.nanmean(r.diagnostics["mala_acceptance"])),
                 "divergent": len(r.diagnostics["divergent"])} for t, r in zip(self.positions, self.results)]


def _causal_logits(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """(B, T, V) logits of a causal LM: a ``transformers`` model (called with ``input_ids`` and
    no key/value cache) or any module mapping ids to logits (a tensor or an output with ``.logits``)."""
    config = getattr(model, "config", None)
    out = model(input_ids=ids, use_cache=False) if config is not None and hasattr(config, "vocab_size") else model(ids)
    return getattr(out, "logits", out)


def last_token_loss(model: nn.Module, batch) -> torch.Tensor:
    """Per-window −log p(ids[:, −1] | ids[:, :−1], w): the loss of the last token of each
    (truncated) window, shape (B,). With windows truncated to ids[:, :t+1] this is the
    per-position loss ℓ_t of :func:`per_position_llc`."""
    (ids,) = batch
    logits = _causal_logits(model, ids[:, :-1])[:, -1]
    return torch.nn.functional.cross_entropy(logits.float() if logits.dtype in (torch.float16, torch.bfloat16)
                                             else logits, ids[:, -1], reduction="none")


def _check_positions(positions, T: int) -> list[int]:
    msg = (f"parameter 'positions' must be a non-empty list of distinct integers t in [1, {T - 1}] "
           f"(the predicted token's index in windows of length T = {T}; t = 0 has no history); got {positions!r}")
    if isinstance(positions, (int, np.integer)) or not isinstance(positions, (list, tuple, np.ndarray, range)):
        raise llc.LLCInputError(msg)
    out = list(positions)
    if not out or len(set(out)) != len(out) or any(
            isinstance(t, bool) or not isinstance(t, (int, np.integer)) or not 1 <= t <= T - 1 for t in out):
        raise llc.LLCInputError(msg)
    return [int(t) for t in out]


def per_position_llc(model: nn.Module, data, positions, **sgld) -> PerPositionLLC:
    """The LLC of each position's model of a causal language model (Chen & Murfet §7.1).

    A causal LM with parameter w is a sequence of conditional models, one per position: for
    windows y = (y_0, …, y_{T−1}), position t ∈ [1, T−1] is the model p(y_t | y_<t, w) of the
    t-th token given the t tokens before it, all sharing w. Its empirical loss on the n windows
    of ``data`` (a (n, T) token tensor, or the 1-tuple ``(ids,)`` of :func:`lib.llc.estimate_llc`) is

        L_t(w) = −(1/n) Σ_i log p(y_t^(i) | y_<t^(i), w),

    and the whole-window loss of ``lib.models.causal_lm.sequence_loss`` is their mean over
    t = 1..T−1. For each t in ``positions`` this estimates λ̂_t = nβ (E[L_t] − L_t(w*)) with
    :func:`lib.llc.estimate_llc` at the model's parameters w*: the data of position t are the
    windows truncated to y_0..y_t (a causal model's prediction of y_t reads no later token) and
    the loss is :func:`last_token_loss`.

    ``sgld``: the keyword arguments of :func:`lib.llc.estimate_llc` (``gamma``, ``eps``,
    ``chains``, ``draws``, ``burn_in``, ``batch_size``, ``seed``; optional ``nbeta``, default
    n/log n with n the number of windows, ``device``, ``progress``, …), one setting for every
    position: the same n, nβ, γ, ε, chains, draws and seed, hence the same minibatch indices
    and the same injected noise at every position, so the positions differ only in their loss.
    ``positions`` is checked before any sampling (:class:`lib.llc.LLCInputError`). A
    ``transformers`` model should use eager attention under ``vmap``
    (``model.config._attn_implementation = "eager"``, as the chapter "LLC" does).
    """
    ids = data[0] if isinstance(data, (tuple, list)) and len(data) == 1 else data
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.dtype.is_floating_point or ids.shape[1] < 2:
        shape = tuple(ids.shape) if isinstance(ids, torch.Tensor) else type(ids).__name__
        raise llc.LLCInputError(f"parameter 'data' must be an integer token tensor of shape (n, T), T >= 2, or the "
                                f"tuple (ids,); got {shape}")
    positions = _check_positions(positions, ids.shape[1])
    if "loss_fn" in sgld or "data" in sgld:
        raise llc.LLCInputError("per_position_llc sets 'loss_fn' and 'data' itself; pass only SGLD settings")
    sgld = {"progress": False, **sgld}
    t0 = time.perf_counter()
    results = [llc.estimate_llc(model, last_token_loss, (ids[:, :t + 1].contiguous(),), **sgld) for t in positions]
    return PerPositionLLC(positions, np.array([r.llc for r in results]), np.array([r.se for r in results]),
                          np.array([r.init_loss for r in results]), results, dict(results[0].settings),
                          time.perf_counter() - t0)
