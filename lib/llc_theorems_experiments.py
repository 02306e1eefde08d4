"""The chapter "LLC theorems": its studies, verdicts and costs, on the mathematics of :mod:`lib.llc_theorems`.

* the resolution dial as one experiment (:func:`dial_experiment`, :class:`DialExperiment`): the
  quadratic model of every target at w* (:func:`lib.local_quadratic.local_quadratics`), the
  schedule it sets (:func:`dial_schedule`: one step ε for every temperature, the run's length in
  relaxation times), the coupled chains (:func:`lib.llc_theorems.resolution_dial`), the quadratic
  prediction of each λ̂, and the verdict on χ*(β) (:func:`dial_verdict` over several dials);
* Theorems 7.3–7.4 checked on a dial's run (:func:`theorem_checks`, :class:`TheoremChecks`; the exact identity
  for Δλ̂ in the proof of 7.4: :func:`difference_identity`) and
  evaluated before sampling (:func:`a_priori_bounds`, :class:`APrioriBound`);
* the parameters the chapter reads from the chapter "Insensitivity" (:func:`insensitivity_settings`)
  and what the chapter costs before it runs (:func:`heavy_steps`, the declaration's ``costs:``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from torch import nn

from . import conditional_models as cm, substrate
from .book.chapters import REPO_ROOT, load_chapter
from .book.costs import HeavyStep
from .book.device import torch_threads
from .conditional_models import Support
from .insensitivity import constants_all, matmul_weights
from .llc import lm_sgld_cost
from .llc_experiments import suite_config
from .llc_theorems import (Dial, chi_star_band, contraction, curvature, cutoffs, dial_cost, history_data,
                           llc_difference_bound, measure_constants, monotone_verdict, one_step_violations,
                           population_data, relaxation_steps, resolution_dial, resolve, separation_bound,
                           weighted_nll)
from .local_quadratic import (DENSE_LIMIT, LocalQuadratic, TaylorQuadratic, local_quadratics_cost, quadratic_model,
                              taylor_quadratics_cost)


def insensitivity_settings(profile: str = "ci", seed: int = 0, device="auto", smoke: bool = False) -> dict:
    """The chapter "Insensitivity"'s parameters at ``profile``: the ladder and the models sampled here.
    ``smoke`` (profile ``paper``): with its ``smoke`` presets on top, the sizes a smoke run of it trains."""
    return load_chapter(REPO_ROOT / "chapters" / "insensitivity.md").settings(profile, seed, device, smoke)


# ---------------------------------------------------------------------------
# The dial as one experiment: schedule, sampling, quadratic prediction, verdict
# ---------------------------------------------------------------------------

def dial_schedule(curvature: float, nbetas, gamma: float, *, step_scale: float, burn_in_relaxations: float,
                  relaxations: float, max_steps: int = 200_000) -> dict:
    """One step ε for every nβ, and the run's length in relaxation times.

    ε = ``step_scale`` / (max nβ · ``curvature`` + γ): ε times the largest curvature of the
    localised potential nβL_n + (γ/2)‖w − w*‖² is ``step_scale`` at the coldest temperature (and
    less at the others), so the step resolves the stiffest direction everywhere. The flat
    directions relax in τ = 2/(εγ) steps (:func:`lib.llc_theorems.relaxation_steps`); the chains discard
    ``burn_in_relaxations``·τ steps and average the loss over the next ``relaxations``·τ. A run
    longer than ``max_steps`` is refused before any sampling."""
    nbetas = [float(v) for v in nbetas]
    for name, v in (("step_scale", step_scale), ("relaxations", relaxations), ("gamma", gamma),
                    ("curvature", curvature)):
        if not (np.isfinite(v) and v > 0):
            raise ValueError(f"parameter '{name}' must be a positive number; got {v!r}")
    if not (np.isfinite(burn_in_relaxations) and burn_in_relaxations >= 0):
        raise ValueError(f"parameter 'burn_in_relaxations' must be a number >= 0; got {burn_in_relaxations!r}")
    eps = step_scale / (max(nbetas) * curvature + gamma)
    tau = relaxation_steps(eps, gamma)
    burn_in = int(math.ceil(burn_in_relaxations * tau))
    draws = burn_in + int(math.ceil(relaxations * tau))
    if draws > max_steps:
        raise ValueError(f"the dial at γ = {gamma:g} needs {draws} steps (relaxation time 2/(εγ) = {tau:.0f} steps at "
                         f"ε = {eps:.3g}, set by parameter 'step_scale' and the largest curvature {curvature:.3g}); "
                         f"more than {max_steps}: raise 'gamma', 'step_scale' or lower 'relaxations'")
    return {"eps": eps, "relaxation": tau, "burn_in": burn_in, "draws": draws, "step_scale": step_scale,
            "curvature": float(curvature)}


@dataclass
class DialExperiment:
    """:func:`dial_experiment`: one resolution dial (Chen & Murfet §8) with its ``schedule``
    (:func:`dial_schedule`), the sampled ``dial``, the ``quadratic`` model of every target at w*
    and its prediction ``predicted[b, k]`` of each target's λ̂ at the run's own ε, burn-in and
    length, the classes ``codes[b, j]`` of :func:`lib.llc_theorems.resolve` at ``tolerance`` and ``z``, the bands of
    χ*(β) (:func:`lib.llc_theorems.chi_star_band`) and the verdict of :func:`lib.llc_theorems.monotone_verdict`."""

    name: str
    gamma: float
    beta_factors: list
    schedule: dict
    dial: Dial
    quadratic: LocalQuadratic | TaylorQuadratic
    predicted: np.ndarray
    codes: np.ndarray
    bands: list
    verdict: str
    tolerance: float
    z: float

    @property
    def rank_index(self) -> int:
        return len(self.dial.chis) - 1 if self.dial.chis[-1] == max(self.dial.chis) else self.dial.chis.index(
            max(self.dial.chis))

    def prediction_z(self) -> np.ndarray:
        """(λ̂ − its quadratic prediction) / s.e. per (nβ, target), targets whose chains are all finite."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return (np.nanmean(self.dial.per_chain, axis=-1) - self.predicted) / self.dial.llc_se

    def prediction_holds(self, z: float = 3.0, relative: float = 0.1) -> np.ndarray:
        """Per (nβ, target): is the measured λ̂ within z standard errors plus ``relative`` of the
        prediction's size of its quadratic prediction? (the relative part allows for the Taylor
        remainder over the region the chains visit; False where either is not finite)."""
        measured = np.nanmean(self.dial.per_chain, axis=-1)
        with np.errstate(invalid="ignore"):
            ok = np.abs(measured - self.predicted) <= z * self.dial.llc_se + relative * np.abs(self.predicted)
        return ok & np.isfinite(measured) & np.isfinite(self.predicted)

    def prediction_ratio(self) -> np.ndarray:
        """λ̂(q) / its quadratic prediction per nβ."""
        return self.dial.llc_q / self.predicted[:, 0]

    def llc_slope(self) -> float:
        """The least-squares slope of log λ̂(q) against log nβ: 1 where λ̂ is a curvature trace
        (linear in nβ), 0 where it is a learning coefficient (independent of nβ)."""
        y = np.log(self.dial.llc_q)
        ok = np.isfinite(y)
        return float(np.polyfit(np.log(np.asarray(self.dial.nbetas))[ok], y[ok], 1)[0]) if ok.sum() >= 2 else float("nan")

    def saturated(self) -> list[int]:
        """Per temperature, the directions of q's Hessian at w* with nβh > γ: those the data, not
        the localisation, confine (each adds about ½ to λ̂). Without a dense Hessian
        (:class:`lib.local_quadratic.TaylorQuadratic`) the count among the Lanczos eigenvalues it holds: exact
        while below their number, else a lower bound."""
        h = self.quadratic.eigenvalues[0]
        return [int(np.sum(nb * h > self.gamma)) for nb in self.dial.nbetas]

    def rows(self) -> list[dict]:
        """The table of the dial: per temperature, λ̂(q) with its standard error and mixing (split
        R̂ over chains, smallest ESS), its quadratic prediction, the most negative λ̂(q^(χ)) and
        its cutoff, d/2, and the band of χ*(β)."""
        d = self.quadratic.dimension
        se = self.dial.llc_se
        out = []
        for b, f in enumerate(self.beta_factors):
            chi_vals = self.dial.llc_chi[b][:-1]
            j = int(np.nanargmin(chi_vals)) if np.isfinite(chi_vals).any() else 0
            lo, hi = self.bands[b]
            out.append({"nβ/nβ*": f, "λ̂(q)": self.dial.llc_q[b], "s.e.": se[b, 0],
                        "quadratic": self.predicted[b, 0], "R̂": self.dial.rhat[b, 0],
                        "min ESS": float(np.nanmin(self.dial.ess[b, 0])),
                        "smallest λ̂(q^(χ))": chi_vals[j], "at χ": self.dial.chis[j], "d/2": d / 2,
                        "χ* band": f"{lo}" if lo == hi else f"{lo}–{hi}"})
        return out


def dial_verdict(experiments) -> tuple[str | None, str | None]:
    """The prediction over several dials: ("supported", None) if every dial's verdict is
    "supported", ("contradicted", None) if any is "contradicted", else (None, the reason it
    is undecided: the dials whose bands of χ*(β) overlap at every pair of temperatures)."""
    verdicts = {f"{e.name}, γ = {e.gamma:g}": e.verdict for e in experiments}
    if any(v == "contradicted" for v in verdicts.values()):
        return "contradicted", None
    if all(v == "supported" for v in verdicts.values()):
        return "supported", None
    open_ = [k for k, v in verdicts.items() if v == "inconclusive"]
    return None, "the bands of χ*(β) overlap at every pair of temperatures for " + "; ".join(open_)


def dial_experiment(name: str, model: nn.Module, support: Support, *, chis, beta_factors, nbeta_star: float, n: int,
                    gamma: float, step_scale: float, burn_in_relaxations: float, relaxations: float, chains: int,
                    seed: int, tolerance: float, z: float = 2.0, snapshots: int = 0, measure: bool = True,
                    device="auto", resume: bool = False, progress: bool = False,
                    quadratic: LocalQuadratic | TaylorQuadratic | None = None,
                    dense_limit: int = DENSE_LIMIT) -> DialExperiment:
    """The resolution dial at one γ, as the chapter "LLC theorems" runs it: the quadratic model of
    every target at w* (:func:`lib.local_quadratic.local_quadratics`), whose largest curvature sets one step ε for
    every temperature and the run's length in relaxation times (:func:`dial_schedule`); the
    coupled chains (:func:`lib.llc_theorems.resolution_dial`, nβ = factor · ``nbeta_star``); each target's
    λ̂ predicted from the quadratic model at the same ε, burn-in and length
    (:func:`lib.local_quadratic.quadratic_llc`); and the verdict on χ*(β) at the fixed ``tolerance``
    (:func:`lib.llc_theorems.resolve`, :func:`lib.llc_theorems.chi_star_band`, :func:`lib.llc_theorems.monotone_verdict`). ``quadratic``: the
    :class:`lib.local_quadratic.LocalQuadratic` of the same model, cutoffs, n and seed, if already computed (another
    dial's ``quadratic``). Above ``dense_limit`` parameters the quadratic model has no dense Hessian
    (:func:`lib.local_quadratic.quadratic_model`): its predictions are SGLD chains on the Taylor model, coupled
    to the dial's own noise."""
    chis = sorted({int(c) for c in chis})
    factors = [float(f) for f in beta_factors]
    if not factors or any(not (np.isfinite(f) and f > 0) for f in factors) or factors != sorted(factors):
        raise ValueError(f"parameter 'beta_factors' must be increasing positive numbers; got {beta_factors!r}")
    nbetas = [f * nbeta_star for f in factors]
    rows, W = history_data(support, chis, n, seed)
    quad = quadratic or quadratic_model(model, [(rows, W[k]) for k in range(W.shape[0])], dense_limit, seed=seed)
    if quad.eigenvalues.shape[0] != W.shape[0]:
        raise ValueError(f"parameter 'quadratic' holds {quad.eigenvalues.shape[0]} targets; the dial has {W.shape[0]}")
    sched = dial_schedule(quad.curvature, nbetas, gamma, step_scale=step_scale,
                          burn_in_relaxations=burn_in_relaxations, relaxations=relaxations)
    dial = resolution_dial(model, support, chis=chis, nbetas=nbetas, n=n, gamma=gamma, eps=sched["eps"],
                           chains=chains, draws=sched["draws"], burn_in=sched["burn_in"], seed=seed, device=device,
                           snapshots=snapshots, progress=progress, resume=resume, measure=measure)
    predicted = quad.predict(nbetas=nbetas, gamma=gamma, eps=sched["eps"], burn_in=sched["burn_in"],
                             draws=sched["draws"], chains=chains, seed=seed)
    codes = resolve(dial.diff, tolerance, z)
    bands = chi_star_band(codes, chis)
    return DialExperiment(name, float(gamma), factors, sched, dial, quad, predicted, codes, bands,
                          monotone_verdict(bands), float(tolerance), float(z))


# ---------------------------------------------------------------------------
# Theorems 7.3–7.4 on a dial's run, and a priori
# ---------------------------------------------------------------------------

@dataclass
class TheoremChecks:
    """:func:`theorem_checks`: the derived Theorems 7.3–7.4 on one dial's run (cutoffs below the rank).

    ``constants`` from :func:`lib.llc_theorems.measure_constants`; ``hypotheses[b]`` the step-size conditions of
    Theorem 7.3 (:func:`lib.llc_theorems.contraction`) at nβ_b with that M; ``one_step_violations`` the count of
    :func:`lib.llc_theorems.one_step_violations`; ``separation_ratio`` the largest ‖w_t − w'_t‖ / bound over chains,
    steps and cells with the run's constants (at most 1 by induction from the one-step inequality,
    since δ and M are the run's maxima); ``separation_violations_lanczos`` the points above the
    bound with the Lanczos M alone; ``llc_ratio[b, j, c]`` Theorem 7.4's bound over the measured
    |λ̂_c(q) − λ̂_c(q^(χ_j))| per chain (NaN where a chain diverged), and ``gap_share[b, j, c]`` the
    share of that bound that its 2nβε term makes up."""

    constants: dict
    hypotheses: list
    one_step_violations: int
    separation_points: int
    separation_ratio: float
    separation_violations_lanczos: int
    llc_ratio: np.ndarray
    gap_share: np.ndarray

    @property
    def llc_violations(self) -> int:
        return int(np.sum(self.llc_ratio[np.isfinite(self.llc_ratio)] < 1))


def theorem_checks(model: nn.Module, experiment: DialExperiment) -> TheoremChecks:
    """Theorems 7.3–7.4 as derived in the docstring of :mod:`lib.llc_theorems`, chain by chain, on
    ``experiment``'s run (which must have kept positions and measured δ_t, s_t), with K, M, δ and ε measured where the
    chains went (:func:`lib.llc_theorems.measure_constants`)."""
    dial = experiment.dial
    cst = measure_constants(model, dial)
    gamma, burn_in, draws = dial.settings["gamma"], dial.settings["burn_in"], dial.settings["draws"]
    steps = np.arange(burn_in + 1, draws + 1)
    below = [j for j, chi in enumerate(dial.chis) if chi < max(dial.chis)]
    hyp, ratio, points, lanczos = [], 0.0, 0, 0
    llc_ratio = np.full((len(dial.nbetas), len(below), dial.diff.shape[-1]), np.nan)
    gap_share = np.full_like(llc_ratio, np.nan)
    for b, (nb, e) in enumerate(zip(dial.nbetas, dial.eps)):
        hyp.append(contraction(eps=e, gamma=gamma, nbeta=nb, M=cst["M"]))
        for i, j in enumerate(below):
            for c in range(dial.diff.shape[-1]):
                sep = dial.separation[b, j, c]
                ok = np.isfinite(sep)
                bound = separation_bound(steps, eps=e, gamma=gamma, nbeta=nb, M=cst["M"], delta=cst["delta_chain"][b, j, c])
                only = separation_bound(steps, eps=e, gamma=gamma, nbeta=nb, M=cst["M_lanczos"],
                                        delta=cst["delta_chain"][b, j, c])
                points += int(ok.sum())
                lanczos += int(np.sum(sep[ok] > only[ok]))
                with np.errstate(invalid="ignore", divide="ignore"):
                    ratio = max(ratio, float(np.nanmax(np.where(bound[ok] > 0, sep[ok] / bound[ok], 0.0), initial=0.0)))
                measured = abs(dial.diff[b, j, c])
                if np.isfinite(measured) and ok.all():
                    theorem = llc_difference_bound(nbeta=nb, K=cst["K"], mean_separation=float(sep.mean()),
                                                   eps_insensitivity=cst["eps"][b, j])
                    llc_ratio[b, i, c] = theorem / measured if measured > 0 else np.inf
                    gap_share[b, i, c] = 2 * nb * cst["eps"][b, j] / theorem if theorem > 0 else np.nan
    return TheoremChecks(cst, hyp, one_step_violations(dial), points, ratio, lanczos, llc_ratio, gap_share)


IDENTITY_RTOL = 1e-10
"""The largest |Δλ̂ − identity| / (nβ · loss scale) that rounding explains: each side is a mean of at most ~10⁵
float64 losses of size ≤ the scale (error ≲ draws · 2⁻⁵³ ≈ 10⁻¹¹ of the scale); a sign error, a mis-paired chain
or a different averaging window moves it by |Δλ̂| / (nβ · scale) (above 10⁻⁶ on the tests' small dial)."""


@dataclass
class DifferenceIdentity:
    """:func:`difference_identity`: per (nβ, χ, chain), the measured Δλ̂_c = λ̂_c(q) − λ̂_c(q^(χ)) and the
    right side of the identity from the losses recorded along the run, with its three terms: ``moved`` =
    nβ·mean_t (L_n(w_t) − L_n(w'_t)), ``gap_mean`` = nβ·mean_t g_t, ``gap_0`` = nβ·g_0. ``scale[b]`` = nβ_b times the
    largest |L_n| entering the means (what rounding is relative to)."""

    chis: list
    delta_llc: np.ndarray      # (B, J, C)
    moved: np.ndarray
    gap_mean: np.ndarray
    gap_0: np.ndarray
    scale: np.ndarray          # (B,)

    @property
    def rhs(self) -> np.ndarray:
        return self.moved + self.gap_mean - self.gap_0

    @property
    def rel_error(self) -> np.ndarray:
        """|Δλ̂ − right side| / scale per (b, j, c); NaN where a chain diverged."""
        return np.abs(self.delta_llc - self.rhs) / self.scale[:, None, None]

    @property
    def max_rel_error(self) -> float:
        err = self.rel_error
        return float(np.max(err[np.isfinite(err)], initial=0.0))


def difference_identity(dial: Dial) -> DifferenceIdentity:
    """The exact identity in the proof of Theorem 7.4 (Chen & Murfet §7, as the book derives it in
    :mod:`lib.llc_theorems`), chain pair by chain pair, for every cutoff (at χ = rank both sides are 0):

        Δλ̂ = λ̂(q) − λ̂(q^(χ)) = nβ [ mean_t (L_n(w_t) − L_n(w'_t)) + mean_t g_t − g_0 ],

    with w_t the q-chain, w'_t the coupled q^(χ)-chain, g_t = L_n(w'_t) − L_n^(χ)(w'_t) the signed gap at the
    q^(χ)-chain's point (its absolute value is the log-probability insensitivity the bound charges), g_0 the same
    at w'_0 = w*, and the means over the draws after burn-in (λ̂ = nβ(mean_t L_n(w_t) − L_n(w*)), Chen & Murfet
    Eq. 13). Δλ̂ is the dial's ``diff``; the right side is built from the losses the sampler recorded at every step
    (``loss``, ``loss_q``) and L_n^(k)(w*) in float64. The two agree to rounding whatever the chains do: the
    identity checks the estimate's bookkeeping (sign, pairing, averaging window), not the sampler."""
    st = dial.steps
    if st is None or "loss" not in st:
        raise ValueError("the dial recorded no per-step losses (run it with lib.llc_theorems.resolution_dial)")
    burn_in = dial.settings["burn_in"]
    nb = np.asarray(dial.nbetas, dtype=np.float64)[:, None, None]
    loss, loss_q, init = st["loss"][..., burn_in:], st["loss_q"][..., burn_in:], np.asarray(st["init_loss"])
    on_q = loss[:, :1]                               # L_n(w_t), (B, 1, C, T)
    on_chi_q = loss_q[:, 1:]                         # L_n(w'_t), (B, J, C, T)
    on_chi = loss[:, 1:]                             # L_n^(χ)(w'_t)
    moved = nb * np.mean(on_q - on_chi_q, axis=-1)
    gap_mean = nb * np.mean(on_chi_q - on_chi, axis=-1)
    gap_0 = nb * (init[0] - init[1:])[None, :, None] * np.ones_like(moved)
    finite = np.abs(loss[np.isfinite(loss)])
    scale = np.asarray(dial.nbetas) * max(float(np.max(finite, initial=0.0)), float(np.max(np.abs(init))))
    return DifferenceIdentity(list(dial.chis), dial.diff, moved, gap_mean, gap_0, scale)


@dataclass
class APrioriBound:
    """:func:`a_priori_bounds`: Theorem 7.4's bound evaluated before sampling, per (nβ, χ < rank),
    with the constants at w* of the population losses: δ_χ(w*), ε_χ(w*) (Defs 6.3–6.4,
    :func:`lib.insensitivity.constants_all`), M_χ = ‖∇²L^(χ)(w*)‖ (Lanczos) and K = ‖∇L(w*)‖, and
    the run's ε, γ, burn-in and length. Each constant is at most the supremum over the region
    that the theorem assumes, so ``bound`` is at most the theorem's own: where even it exceeds
    what a practitioner can resolve, the theorem cannot certify that q^(χ) is indistinguishable."""

    chis: list
    beta_factors: list
    bound: np.ndarray          # (B, J)
    contracts: np.ndarray      # (B, J): nβM_χ < γ (the bound saturates)
    se_q: np.ndarray           # (B,): λ̂(q)'s standard error at the run's effort
    measured: np.ndarray       # (B, J): |mean λ̂(q) − λ̂(q^(χ))|
    tolerance: float

    @property
    def resolving(self) -> np.ndarray:
        """Cells where the a-priori bound is within the tolerance: the theorem could certify them."""
        return self.bound <= self.tolerance

    def rows(self) -> list[dict]:
        out = []
        for b, f in enumerate(self.beta_factors):
            for j, chi in enumerate(self.chis):
                out.append({"nβ/nβ*": f, "χ": chi, "bound": self.bound[b, j], "bound / s.e.": self.bound[b, j] / self.se_q[b],
                            "measured |Δλ̂|": self.measured[b, j], "nβM < γ": bool(self.contracts[b, j])})
        return out


def a_priori_bounds(model: nn.Module, support: Support, experiment: DialExperiment) -> APrioriBound:
    """:class:`APrioriBound` for ``experiment``'s cutoffs below the rank and its run settings."""
    dial = experiment.dial
    chis = [c for c in dial.chis if c < support.modes.rank]
    gamma, burn_in, draws = dial.settings["gamma"], dial.settings["burn_in"], dial.settings["draws"]
    steps = np.arange(burn_in + 1, draws + 1)
    with torch_threads(1):
        pop = {c.chi: c for c in constants_all(model, support.modes, chis)}
        K = curvature(model, weighted_nll, population_data(support)).grad_norm
        M = {chi: curvature(model, weighted_nll, population_data(support, chi)).spectral_norm for chi in chis}
    B, J = len(dial.nbetas), len(chis)
    bound, contracts = np.zeros((B, J)), np.zeros((B, J), dtype=bool)
    for b, (nb, e) in enumerate(zip(dial.nbetas, dial.eps)):
        for j, chi in enumerate(chis):
            sep = separation_bound(steps, eps=e, gamma=gamma, nbeta=nb, M=M[chi], delta=pop[chi].delta)
            bound[b, j] = llc_difference_bound(nbeta=nb, K=K, mean_separation=float(sep.mean()),
                                               eps_insensitivity=pop[chi].eps)
            contracts[b, j] = nb * M[chi] < gamma
    idx = [dial.chis.index(c) for c in chis]
    return APrioriBound(chis, list(experiment.beta_factors), bound, contracts, dial.llc_se[:, 0],
                        np.abs(dial.mean[:, idx]), experiment.tolerance)


# ----- what the chapter costs before it runs ---------------------------------------------------

def heavy_steps(values: dict) -> list:
    """The heavy steps of the chapter "LLC theorems" at the resolved parameter ``values``: the two dials of
    every model (:func:`dial_experiment`) and the per-position LLCs (:func:`lib.position_llc.per_position_llc`).

    A dial's length depends on the trained model's largest curvature h, unknown before training:
    ε = step_scale/(nβ_max·h + γ) and 2/(εγ) steps per relaxation time, so the steps counted here, at h = 0
    (2/step_scale per relaxation time), are a lower bound, reached when nβ_max·h ≪ γ (the first dial's regime)."""
    ins = insensitivity_settings(values["profile"], values["seed"], values["device"], values["smoke_upstream"])
    ladder = cm.ladder_support(**{k: ins[k] for k in ("history_length", "ladder_bigrams", "ladder_top",
                                                      "ladder_ratio", "background_size")}, seed=values["seed"])
    n_chis = len(cutoffs(values["chis"], ladder.modes.rank))
    tau = 2.0 / values["step_scale"]  # relaxation_steps at h = 0: ε = step_scale/γ
    draws = math.ceil(values["burn_in_relaxations"] * tau) + math.ceil(values["relaxations"] * tau)
    histories = min(ladder.modes.shape[0], ins["n_samples"])
    specs = {f"factored h={h}": ({"kind": "factored", "hidden": h}, True) for h in values["model_widths"]}
    specs |= {f"transformer d={h}": ({"kind": "transformer", "hidden": h, "layers": ins["transformer_layers"]}, False)
              for h in values["transformer_widths"]}
    steps = []
    for name, (spec, both) in specs.items():
        model = cm.build(spec, ladder, values["seed"])
        d, weights = cm.n_params(model), matmul_weights(model)
        tokens = ladder.k if spec["kind"] == "transformer" else 1
        if d <= DENSE_LIMIT:
            peak, flops = local_quadratics_cost(d, weights, histories, tokens, n_chis + 1)
            steps.append(HeavyStep(f"local quadratics of {name}", f"{n_chis + 1} dense {d} × {d} Hessians",
                                   peak_bytes=peak, flops=flops, shrink="model_widths"))
        else:
            peak, flops = taylor_quadratics_cost(d, weights, histories, tokens, ladder.n_cols, n_chis + 1,
                                                 n_betas=len(values["beta_factors"]), chains=values["chains"], draws=draws)
            steps.append(HeavyStep(f"local quadratics of {name}", f"{n_chis + 1} Taylor models by Hessian-vector "
                                   f"products (d = {d}): {len(values['beta_factors'])} β × {values['chains']} chains "
                                   f"× ≥ {draws} steps each", peak_bytes=peak, flops=flops, shrink="chains"))
        dials = [("the first dial", len(values["beta_factors"]), values["snapshots"], True)]
        if both:
            dials.append(("the second dial", len(values["lc_beta_factors"]), 0, False))
        for dial, n_betas, snaps, measure in dials:
            cost = dict(n_betas=n_betas, n_chis=n_chis, draws=draws, snapshots=snaps, n_params=d, weights=weights,
                        histories=histories, n_cols=ladder.n_cols, tokens=tokens, measure=measure)
            _, flops = dial_cost(chains=values["chains"], **cost)
            peak, _ = dial_cost(chains=1, **cost)                  # the chains run in chunks that fit (dial_chunk)
            steps.append(HeavyStep(f"{dial} on {name}", f"d = {d}, {n_betas} β × {n_chis} χ × {values['chains']} "
                                   f"chains × ≥ {draws} steps" + (f", {snaps} snapshots" if snaps else "")
                                   + ", in chunks of chains that fit",
                                   peak_bytes=peak, flops=flops,
                                   shrink="chains or snapshots" if snaps else "chains"))
    intro = substrate.intro_settings(values["profile"], values["seed"], "cpu", values["smoke_upstream"])
    config, _ = suite_config(values["profile"], values["seed"], intro["model_sizes"][0], values["smoke_upstream"])
    peak, flops = lm_sgld_cost(config, chains=values["position_chains"], steps=values["position_draws"],
                               batch_size=8, windows=values["position_windows"])
    positions = len(values["positions"])
    steps.append(HeavyStep(f"per-position SGLD on mini-Pythia {intro['model_sizes'][0]}",
                           f"{positions} positions × {values['position_chains']} chains × {values['position_draws']} "
                           f"steps × 8 windows of {config.max_position_embeddings} tokens",
                           peak_bytes=peak, flops=flops * positions, shrink="position_chains"))
    return steps + real_hessian_steps(values)


# ---------------------------------------------------------------------------
# A model no one here trained: the Hessian of one part, and Theorem 7.4's hypotheses (Remark 7.5)
# ---------------------------------------------------------------------------

def llc_settings(profile: str = "ci", seed: int = 0, device="auto", smoke: bool = False) -> dict:
    """The chapter "Learning coefficients"'s parameters at ``profile``: the SGLD settings (ε, γ, windows) its
    released-model section runs at, whose hypotheses this chapter checks. ``smoke`` (profile ``paper``): its smoke
    presets on top."""
    return load_chapter(REPO_ROOT / "chapters" / "llc.md").settings(profile, seed, device, smoke)


class SampleHessian:
    """H = ∇²_u L_n(u*, v*), the Hessian of the sample loss in the part's weights u, as a linear map of flat
    float64 vectors: the sum over chunks of windows of :func:`lib.hessian.hessian_vector_product` (double
    backward) of each chunk's share Σ_{i ∈ chunk} ℓ_i / n, so that no product holds more than one chunk's
    activations. ``problem`` is a :class:`lib.llc_experiments.real_model.RestrictedProblem` (or anything with
    ``stack`` and ``data``); ``loss_fn(stack, batch)`` gives per-window losses."""

    def __init__(self, stack: nn.Module, data, loss_fn, chunk: int = 8):
        import torch
        from torch.func import functional_call

        self.params = {k: p.detach() for k, p in stack.named_parameters() if p.requires_grad}
        self.sizes = [p.numel() for p in self.params.values()]
        self.dimension = int(sum(self.sizes))
        n = data[0].shape[0]
        self.products = 0

        def chunk_loss(batch):
            return lambda p: loss_fn(lambda *xs: functional_call(stack, p, xs, strict=False), batch).sum() / n

        self.losses = [chunk_loss(tuple(t[s:s + chunk] for t in data)) for s in range(0, n, chunk)]

    def matvec(self, v) -> np.ndarray:
        import torch

        from .hessian import hessian_vector_product

        flat = torch.as_tensor(np.asarray(v, dtype=np.float64).ravel())
        parts = {k: piece.view(p.shape).to(p.dtype) for (k, p), piece in zip(self.params.items(),
                                                                             torch.split(flat, self.sizes))}
        out = np.zeros(self.dimension)
        for loss in self.losses:
            hv = hessian_vector_product(loss, self.params, parts, method="reverse")
            out += torch.cat([hv[k].reshape(-1) for k in self.params]).double().numpy()
        self.products += 1
        return out

    def linear_operator(self):
        from scipy.sparse.linalg import LinearOperator

        d = self.dimension
        return LinearOperator((d, d), matvec=self.matvec, rmatvec=self.matvec, dtype=np.float64)


@dataclass
class PartHessian:
    """:func:`part_hessian`: the largest eigenvalue λ_max of H = ∇²_u L_n at u* (Lanczos), how many Hessian-vector
    products it took, the relative residual ‖Hv − λ_max v‖/|λ_max| of its unit Ritz vector v (one more product; a
    residual r puts an eigenvalue of H within r|λ_max| of λ_max), Hutchinson's tr H ± s.e. (NaN without probes),
    and d."""

    part: str
    d: int
    lambda_max: float
    products: int
    residual: float
    trace: float
    trace_se: float
    probes: int


def part_hessian(stack: nn.Module, data, loss_fn, *, part: str = "", ncv: int = 8, tol: float = 1e-3, probes: int = 0,
                 seed: int = 0, chunk: int = 8) -> PartHessian:
    """λ_max of H = ∇²_u L_n(u*, v*) by implicitly restarted Lanczos (ARPACK ``eigsh``, ``which="LA"``, a basis of
    ``ncv`` vectors, relative accuracy ``tol``, started from a normal vector drawn from ``seed``) on
    :class:`SampleHessian` products, never a dense d × d matrix; and, with ``probes`` > 0, tr H by Hutchinson's
    estimator (the mean of zᵀHz over Rademacher z drawn from ``seed`` + 1, with its standard error)."""
    from scipy.sparse.linalg import eigsh

    op = SampleHessian(stack, data, loss_fn, chunk)
    v0 = np.random.default_rng(seed).standard_normal(op.dimension)
    values, vectors = eigsh(op.linear_operator(), k=1, which="LA", v0=v0, ncv=min(ncv, op.dimension - 1), tol=tol)
    top, ritz = float(values[0]), vectors[:, 0] / np.linalg.norm(vectors[:, 0])
    products = op.products
    residual = float(np.linalg.norm(op.matvec(ritz) - top * ritz) / abs(top)) if top != 0 else float("inf")
    trace = trace_se = float("nan")
    if probes > 0:
        rng = np.random.default_rng(seed + 1)
        q = np.array([z @ op.matvec(z) for z in (rng.integers(0, 2, op.dimension) * 2.0 - 1.0 for _ in range(probes))])
        trace = float(q.mean())
        trace_se = float(q.std(ddof=1) / math.sqrt(probes)) if probes > 1 else float("nan")
    return PartHessian(part, op.dimension, top, products, residual, trace, trace_se, int(probes))


def theorem_hypotheses(*, lambda_max: float, nbeta: float, gamma: float, eps: float) -> dict:
    """Theorem 7.4's hypotheses on the step and the localisation (through Theorem 7.3) at one run's constants,
    with M taken as the largest Hessian eigenvalue λ_max at w* (a value from below of the Lipschitz constant of
    ∇L_n over the region the chains visit, so a hypothesis that fails at w* fails for the theorem, and one that
    holds at w* holds only there):

    * ``nbeta_M_below_gamma``: nβM < γ, the contraction condition of the derived Theorem 7.3 (with εγ < 2 it is
      a < 1 for a = |1 − εγ/2| + εnβM/2, :func:`lib.llc_theorems.contraction`);
    * ``in_paper_interval``: Mnβ ∈ (γ − 2/ε, γ), the interval of Chen & Murfet's Remark 7.5;
    * ``stable``: ε(nβλ_max + γ) < 4, beyond which SGLD diverges along the stiffest direction
      (:func:`lib.known_llc.regular_sgld_mean`: the variance factor 1/(1 − εa/4));
    * ``accurate``: ε(nβλ_max + γ) ≤ :data:`lib.llc.DEFAULT_EPS_NBETA`, the step the chapter "Learning
      coefficients" validated (ε·nβ = 0.1 at unit curvature: a bias 1/(1 − εa/4) − 1 ≤ 2.6% in every direction)."""
    from .llc import DEFAULT_EPS_NBETA

    out = contraction(eps=eps, gamma=gamma, nbeta=nbeta, M=lambda_max)
    a_max = nbeta * lambda_max + gamma
    out.update({"lambda_max": lambda_max, "nbeta": nbeta, "eps": eps, "eps_a_max": eps * a_max,
                "in_paper_interval": bool(gamma - 2 / eps < nbeta * lambda_max < gamma),
                "stable": bool(eps * a_max < 4), "accurate": bool(eps * a_max <= DEFAULT_EPS_NBETA),
                "stiffest_bias": 1 / (1 - eps * a_max / 4) - 1 if eps * a_max < 4 else float("inf")})
    return out


@dataclass
class RealHessianStudy:
    """:func:`real_hessian_study`: per (revision, part) the :class:`PartHessian`, ‖∇L_n(u*)‖ (K at u*) and the
    hypotheses at the run constants of the chapter "Learning coefficients"."""

    name: str
    nbeta: float
    gamma: float
    eps: float
    rows: list
    seconds: float

    def table(self) -> list[dict]:
        return [{"model": r["revision"], "part": r["part"], "d": r["d"], "λ_max": r["lambda_max"],
                 "HVPs": r["products"], "residual": r["residual"], "tr H": r["trace"], "± s.e.": r["trace_se"], "‖∇L_n‖": r["grad_norm"],
                 "nβλ_max": r["nbeta_M"], "γ": r["gamma"], "nβM < γ": r["nbeta_M_below_gamma"],
                 "ε(nβλ_max+γ)": r["eps_a_max"], "stable": r["stable"], "≤ 0.1": r["accurate"]} for r in self.rows]


def real_hessian_study(name: str, *, parts, revisions, llc: dict, ncv: int, tol: float, probes: int, seed: int,
                       device="cpu") -> RealHessianStudy:
    """The Hessian of each part in ``parts`` (of block ``llc["real_layer_from_top"]`` below the top) of the model
    ``name`` at each revision of ``revisions``, on the windows and with the constants (nβ = n/log n, ε, γ) of the
    chapter "Learning coefficients"'s released-model section (``llc``: its resolved parameters); one torch thread.
    """
    with torch_threads(1):  # as the chapter "Learning coefficients" runs it: on a shared CPU more threads spin
        return _real_hessian_study(name, parts=parts, revisions=revisions, llc=llc, ncv=ncv, tol=tol, probes=probes,
                                   seed=seed, device=device)


def _real_hessian_study(name, *, parts, revisions, llc, ncv, tol, probes, seed, device) -> RealHessianStudy:
    import time

    from .llc_experiments import real_model as rm

    start = time.perf_counter()
    n = llc["real_windows"]
    nbeta = n / math.log(n)
    model, tokenizer = rm.load_real_model(name, "final", seed, device)
    ids = rm.text_windows(tokenizer, n, llc["real_context"], seed)
    rows = []
    for revision in revisions:
        if revision != "final":
            del model
            model, _ = rm.load_real_model(name, revision, seed, device)
        for part in parts:
            problem = rm.restricted_problem(name, revision, part=part, from_top=llc["real_layer_from_top"],
                                            windows=ids, seed=seed, model=model)
            h = part_hessian(problem.stack, problem.data, rm.restricted_loss, part=part, ncv=ncv, tol=tol,
                             probes=probes, seed=seed)
            row = {"revision": revision, "part": f"{part} of block {problem.layer}", "d": h.d,
                   "lambda_max": h.lambda_max, "products": h.products, "residual": h.residual, "trace": h.trace, "trace_se": h.trace_se,
                   "grad_norm": rm.gradient_norm(problem.stack, problem.data)}
            row.update(theorem_hypotheses(lambda_max=h.lambda_max, nbeta=nbeta, gamma=llc["real_gamma"],
                                          eps=llc["real_eps"]))
            rows.append(row)
    return RealHessianStudy(name, nbeta, llc["real_gamma"], llc["real_eps"], rows, time.perf_counter() - start)


def real_hessian_steps(values: dict) -> list:
    """The heavy step of the released model's Hessian (:func:`real_hessian_study`) at ``values``: about
    ``real_ncv`` + ``real_probes`` Hessian-vector products per (revision, part), each about twice a gradient of
    L_n over every window (none when ``real_model`` is ``none``). ARPACK may restart: the count is a typical one."""
    if values.get("real_model", "none") == "none":  # values of a declaration before this section: none
        return []
    from .llc_experiments import real_model as rm

    llc = llc_settings(values["profile"], values["seed"], values["device"], values["smoke_upstream"])
    shape = rm.model_shape(values["real_model"])
    steps = []
    for part in values["real_parts"]:
        d = rm.shape_part_size(shape, part)
        hvps = 2 * values["real_ncv"] + values["real_probes"]
        # one HVP ≈ 2 gradients ≈ 2 × (3 forward passes) of the upper blocks over every window, in chunks of 8
        # windows (SampleHessian's), whose double backward holds about twice a gradient's activations: priced as
        # 2 × hvps "chains" of ceil(n/16) "steps" of 16 windows
        windows = llc["real_windows"]
        peak, flops = rm.real_model_cost(shape, part_d=d, from_top=llc["real_layer_from_top"], windows=windows,
                                         context=llc["real_context"], chains=2 * hvps, draws=math.ceil(windows / 16),
                                         batch_size=min(16, windows), models=len(values["real_revisions"]))
        steps.append(HeavyStep(f"Lanczos on the Hessian of {part} of {values['real_model']}",
                               f"d = {d}, ~{hvps} Hessian-vector products over {llc['real_windows']} windows of "
                               f"{llc['real_context']} tokens, {len(values['real_revisions'])} revision(s)",
                               peak_bytes=peak + 8 * (values["real_ncv"] + 4) * d, flops=flops,
                               shrink="real_ncv or real_probes"))
    return steps
