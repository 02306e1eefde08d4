"""The local learning coefficient (LLC) estimated by SGLD over many chains at once.

Chen & Murfet §2.3–2.4, after Lau et al. (2024). With data (x_i, y_i), i = 1..n, and
per-sample loss ℓ_i(w), L_n(w) = (1/n) Σ_i ℓ_i(w). The localised tempered posterior at w* is

    p(w) ∝ exp( −nβ L_n(w) − (γ/2) ‖w − w*‖² ),                  (Chen & Murfet Eq. 10)

and the estimator is λ̂(w*) = nβ ( E_p[L_n(w)] − L_n(w*) ) (Eq. 11), with β = β* = 1/log n
by default (so nβ = n / log n; Watanabe 2013). E_p is approximated by SGLD,

    w_{t+1} = w_t − (ε/2) ( nβ ∇L_{B_t}(w_t) + γ (w_t − w*) ) + N(0, ε I),   (Eq. 12)

with B_t a minibatch of m indices drawn uniformly for each chain, and the loss trace L_{B_t}(w_t)
averaged over chains and over the draws after burn-in (Eq. 13).

How the sampler is built (the engine is :mod:`lib.sgld`):

* **All chains in one tensor.** A chain's parameters are one flat vector, the chains a
  (C, D) tensor; by default (``batching="vmap"``) the model is called on each chain with
  ``torch.func.functional_call`` under ``torch.func.vmap`` of ``torch.func.grad``, so one
  step is one batched forward + backward and one update, with no Python loop over chains or
  over parameter tensors. Chains are processed in chunks that fit in memory (checked before
  sampling; :class:`LLCMemoryError` if even one chain cannot fit).
* **Large models.** ``batching="loop"`` replaces the ``vmap`` by one plain autograd
  forward + backward per chain, faster when one chain's minibatch already fills the cores,
  with the update fused into three passes over the state (its chains equal vmap's up to float
  rounding); ``compile`` may ``torch.compile`` that per-chain step where the run repays it.
* **Small models, many chains.** ``compile=True`` with ``vmap`` compiles the whole vmapped
  gradient; on the CPU its tiny per-chain GEMMs (reduced-rank regression's 32 × 5 @ 5 × 3 on
  minibatches of 32 rows) become fused loops (:func:`lib.batched_gemm.small_products_pass`). On
  reduced-rank regression's full batch of 1000 rows, 128 chains per thread, the compiled step ran at
  3.05× the eager one (benchmarks/HISTORY.md, 2026-11-28).
* **Seeds.** Chunk j draws its minibatches and noise from ``torch.Generator`` seeded with
  ``(seed, j)``: the same seed and ``chunk_size`` give bit-identical results on the CPU,
  whether the chunks run in one process or are split over ``torchrun`` processes.
* **Distributed.** Launched with ``torchrun``, each rank runs chunks rank, rank + W, …
  and the per-chain traces are gathered, so every rank returns the whole result.
* **Divergence.** A chain whose loss becomes non-finite is flagged with the step and the
  ε that caused it, reported, and left out of λ̂ (:attr:`LLCResult.divergent_fraction`
  says how many: leaving chains out is a selection).
* **Diagnostics.** Per-chain effective sample size and split R-hat of the loss trace
  (Vehtari et al. 2021), and the mean Metropolis-adjusted Langevin (MALA) acceptance
  probability of the SGLD proposals, a step-size diagnostic (exact with full batches; by
  default computed only there, ``mala=True`` asks for it with minibatches). An estimate that
  should not be read as λ(w*) — λ̂ < 0, split R̂ above :data:`RHAT_WARN`, λ̂ far above d/2 —
  says so: :attr:`LLCResult.warnings`, its summary, and an :class:`LLCWarning` from
  :func:`estimate_llc` (:func:`estimate_warnings`).
* **Defaults.** :func:`estimate_llc` runs at the settings the chapter "Learning coefficients"
  validated on models with known λ where no setting is given: γ = 1, ε·nβ = 0.1, 64 chains,
  three relaxation times 1/γ of Langevin time with the first third burn-in, full batches,
  seed 0 (:data:`DEFAULT_GAMMA` … :data:`DEFAULT_CHAINS`; the reasons are in its docstring).

Removing the estimator's biases: SGLD's step-size bias by a line in ε through runs of equal
Langevin time ε·draws (:func:`extrapolate_eps`, :func:`eps_limits`; the runs at several ε
share their chains, so the line is drawn chain by chain), and the finite-nβ bias of the
tempered mean by the asymptotic form set by the zeta function's poles
(:func:`extrapolate_nbeta`).

:func:`coupled_chains` runs two losses (data from q and from q^(χ)) from the same point
with the same minibatch indices and the same injected noise, for the Insensitivity and
LLC theorems chapters; :func:`sweep` and :func:`plot_sweep` make calibration a call;
:func:`chain_steps` and :func:`lm_sgld_cost` say what a run costs. The chapter "Learning
coefficients"'s studies (among them λ̂ across a language model's checkpoints) are
:mod:`lib.llc_experiments`.
"""
from __future__ import annotations

import contextlib
import functools
import math
import time
import warnings
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch
from torch import nn

from .book.device import resolve_device
from .book.moved import forward_moved
from .book.parameters import integer_at_least
from .book.progress import log_stream
from .models.causal_lm import estimate_param_count, estimate_training_bytes
from .sgld import (BATCHING, FlatParameters, LLCInputError, LLCMemoryError, LossModule, SamplerSettings,
                   compile_pays, sample, step_flops)

from .sgld import LossFn  # noqa: E402  (loss_fn(model, batch) -> per-sample losses)
from .text import tokenization

# The old name of the twin that moved to lib.text.tokenization, with this module's old behaviour: a hub or
# folder tokenizer is looked up in the local Hugging Face cache.
tokenizer_vocab_size = functools.partial(tokenization.tokenizer_vocab_size, look_up_local=True)


class LLCDivergenceError(RuntimeError):
    """Every chain diverged: no finite estimate exists at these settings."""


class LLCWarning(RuntimeWarning):
    """An estimate that should not be read as the learning coefficient at w*: λ̂ < 0, chains that have not
    mixed (split R̂ above :data:`RHAT_WARN`), or λ̂ far above d/2; :attr:`LLCResult.warnings` says which and
    what to change (:func:`estimate_warnings`)."""


# The defaults of estimate_llc: the settings the chapter "Learning coefficients" (chapters/llc.yml, preset ci)
# validated on models whose λ is known (regular, reduced-rank regression, normal crossings, noisy labels).
DEFAULT_GAMMA = 1.0      # γ of every known-λ run of the chapter
DEFAULT_EPS_NBETA = 0.1  # ε·nβ: the smaller of the chapter's two step sizes ε·nβ ∈ {0.2, 0.1}
DEFAULT_RELAX = 3.0      # run length in relaxation times 1/γ of Langevin time (the chapter's `relax`)
DEFAULT_BURN_IN_FRACTION = 1 / 3  # the first third of each run is burn-in (as lib.llc.eps_limits)
DEFAULT_CHAINS = 64      # chains per run (the chapter's ci `chains`)
DEFAULT_SEED = 0
RHAT_WARN = 1.05         # split R̂ above this: not mixed (the chapter's MIXED_RHAT: its claims ask every run below it)


def estimate_warnings(llc: float, rhat: float | None, se: float | None = None,
                      n_params: int | None = None) -> list[str]:
    """What an estimate's own numbers say against reading it as λ(w*), each with what to change.

    * λ̂ < 0: the chains' mean loss lies below L_n(w*), which near a local minimum w* (where
      L_n(w) ≥ L_n(w*)) cannot happen: the chains left w*'s basin, or w* is not a local minimum.
    * split R̂ > :data:`RHAT_WARN` (1.05, the bound the chapter "Learning coefficients" holds every run
      to): the chains' halves disagree, they have not mixed (or not yet forgotten their start at w*).
      A NaN R̂ (fewer than 4 kept draws) says nothing and gives no warning.
    * with ``n_params`` = d (the sampled parameters) and ``se``: λ̂ − 3 s.e. > (4/3)·d/2. Every model
      with d parameters has λ ≤ d/2 (Watanabe 2009; equality for a regular model), and SGLD's step
      inflates a direction's contribution by 1/(1 − εa/4) (:func:`lib.known_llc.regular_sgld_mean`), at
      most 4/3 while εa ≤ 1 (a = nβh + γ, h the curvature of L_n): beyond that, the step is too large
      for the loss's curvature, or the chains wander far from w* where the loss is no longer local.

    An empty list where none holds. The numbers themselves are not changed."""
    out = []
    if llc < 0:
        out.append(f"λ̂ = {llc:.4g} < 0: the chains' mean loss lies below L_n(w*), so they left w*'s basin or w* is "
                   "not a local minimum; train w* to a minimum (more steps, a smaller final learning rate), raise "
                   "gamma (localise more) or lower eps")
    if rhat is not None and not math.isnan(rhat) and rhat > RHAT_WARN:
        out.append(f"split R̂ = {rhat:.3f} > {RHAT_WARN:g}: the chains have not mixed; run longer (more draws and "
                   "burn_in: a longer Langevin time ε·draws) or take a smaller eps")
    if n_params and se is not None and math.isfinite(se) and llc - 3 * se > 4 / 3 * n_params / 2:
        out.append(f"λ̂ = {llc:.4g} ± {se:.2g} exceeds d/2 = {n_params / 2:g} (d = {n_params} parameters) by more "
                   "than the step's bias and three standard errors, while every model has λ ≤ d/2: the step is too "
                   "large for the loss's curvature (lower eps) or the chains wander far from w* (raise gamma)")
    return out


# ----- results ------------------------------------------------------------------------------

@dataclass(repr=False)
class LLCResult:
    """An LLC estimate λ̂ = nβ (mean loss after burn-in − L_n(w*)) and its traces.

    ``per_chain[c] = nβ (mean_t loss[c, t] − init_loss)``; ``llc`` is their mean over the
    chains that stayed finite and ``se`` their standard deviation / √C (chains are
    independent). ``loss`` holds the minibatch losses L_{B_t}(w_t) after burn-in
    (chains × draws); burn-in draws are never stored. ``warnings`` (read off ``llc``, ``se``,
    ``diagnostics["rhat"]`` and ``["n_params"]`` by :func:`estimate_warnings`) lists why the estimate
    should not be read as λ(w*), if anything does; the summary and the repr show them.
    """

    llc: float
    se: float
    per_chain: np.ndarray
    loss: np.ndarray
    init_loss: float
    nbeta: float
    diagnostics: dict
    settings: dict
    seconds: float = 0.0

    @property
    def chain_steps_per_s(self) -> float:
        steps = self.settings["chains"] * (self.settings["draws"])
        return steps / self.seconds if self.seconds > 0 else float("nan")

    @property
    def divergent_fraction(self) -> float:
        """The fraction of chains left out of λ̂ because their loss became non-finite."""
        return len(self.diagnostics["divergent"]) / len(self.per_chain)

    @property
    def warnings(self) -> list[str]:
        """Why this estimate should not be read as λ(w*): λ̂ < 0, split R̂ > :data:`RHAT_WARN`, or λ̂ well above
        d/2, each with what to change (:func:`estimate_warnings`); empty when none holds."""
        return estimate_warnings(self.llc, self.diagnostics.get("rhat"), self.se, self.diagnostics.get("n_params"))

    def warn(self, stacklevel: int = 2) -> None:
        """Each of :attr:`warnings` as an :class:`LLCWarning` (``warnings.warn``)."""
        for message in self.warnings:
            warnings.warn(message, LLCWarning, stacklevel=stacklevel + 1)

    def summary(self, width: int = 80) -> str:
        """λ̂ ± s.e. on the first line, the diagnostics on the second, then each warning, wrapped to ``width``."""
        import textwrap

        d = self.diagnostics
        kept = len(self.per_chain) - len(d.get("divergent", []))
        parts = []
        if "ess" in d:
            parts.append(f"min ESS {np.min(d['ess']):.0f}")
        if "rhat" in d:
            parts.append(f"split R̂ {d['rhat']:.3f}")
        if "mala_acceptance" in d:
            with warnings.catch_warnings():  # an all-NaN acceptance (not computed) is reported as nan
                warnings.simplefilter("ignore", RuntimeWarning)
                parts.append(f"MALA acceptance {np.nanmean(d['mala_acceptance']):.3f}")
        lines = [f"λ̂ = {self.llc:.4g} ± {self.se:.2g} (s.e., {kept} chains)"] + ([", ".join(parts)] if parts else [])
        for w in self.warnings:
            lines += textwrap.wrap(w, width, initial_indent="warning: ", subsequent_indent="  ")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"LLCResult({self.summary()})"


@dataclass
class CoupledResult:
    """Two SGLD runs sharing start, minibatch indices and noise (:func:`coupled_chains`).

    ``a`` and ``b`` are the two :class:`LLCResult`; ``separation[c, t] = ‖w_t^a − w_t^b‖``
    for the draws after burn-in; ``max_separation`` over the whole run, burn-in included.
    """

    a: LLCResult
    b: LLCResult
    separation: np.ndarray
    max_separation: np.ndarray


# ----- MCMC diagnostics ---------------------------------------------------------------------

def effective_sample_size(trace) -> np.ndarray:
    """Per-chain ESS of a (chains, draws) trace: draws / (1 + 2 Σ_k ρ_k).

    The autocorrelations ρ_k come from the FFT; the sum is Geyer's initial positive
    sequence (pairs ρ_{2j} + ρ_{2j+1} summed while positive; Geyer 1992).
    """
    x = np.atleast_2d(np.asarray(trace, dtype=np.float64))
    n = x.shape[1]
    if n < 4:
        return np.full(x.shape[0], float(n))
    x = x - x.mean(axis=1, keepdims=True)
    size = 1 << (2 * n - 1).bit_length()
    f = np.fft.rfft(x, size, axis=1)
    acov = np.fft.irfft(f * np.conj(f), size, axis=1)[:, :n] / n
    out = np.empty(x.shape[0])
    for c in range(x.shape[0]):  # per chain: the truncation point differs
        if acov[c, 0] <= 0:
            out[c] = float(n)
            continue
        rho = acov[c] / acov[c, 0]
        pairs = rho[: n - n % 2].reshape(-1, 2).sum(axis=1)
        stop = np.argmax(pairs <= 0) if np.any(pairs <= 0) else len(pairs)
        tau = -1.0 + 2.0 * pairs[:stop].sum()
        out[c] = n / max(tau, 1.0 / math.log10(max(n, 10)))
    return out


def split_rhat(trace) -> float:
    """Split R̂ of a (chains, draws) trace (Gelman et al. 2013, §11.4; Vehtari et al. 2021).

    Each chain is cut into halves; with W the mean within-half variance and B/n the
    variance of the half means, R̂ = sqrt( ((n−1)/n · W + B/n) / W ). Near 1 when the chains
    agree; above ~1.01 they have not mixed.
    """
    x = np.atleast_2d(np.asarray(trace, dtype=np.float64))
    half = x.shape[1] // 2
    if half < 2:
        return float("nan")
    halves = np.concatenate([x[:, :half], x[:, -half:]], axis=0)
    within = halves.var(axis=1, ddof=1).mean()
    between_over_n = halves.mean(axis=1).var(ddof=1)
    if within == 0:
        return 1.0 if between_over_n == 0 else float("inf")
    return float(math.sqrt(((half - 1) / half * within + between_over_n) / within))


# ----- validation ---------------------------------------------------------------------------

def _check_int(name: str, value, minimum: int) -> int:
    return integer_at_least(name, value, minimum, LLCInputError)


def _check_positive(name: str, value, allow_zero: bool = False) -> float:
    ok = isinstance(value, (int, float, np.floating, np.integer)) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        what = "a finite number >= 0" if allow_zero else "a finite number > 0"
        raise LLCInputError(f"parameter '{name}' must be {what}; got {value!r}")
    return float(value)


def _check_data(data, name: str = "data") -> tuple[torch.Tensor, ...]:
    if isinstance(data, torch.Tensor):
        data = (data,)
    if not isinstance(data, (tuple, list)) or not data or not all(isinstance(t, torch.Tensor) for t in data):
        raise LLCInputError(f"parameter '{name}' must be a tuple of tensors indexed on dim 0; got {type(data).__name__}")
    lengths = [t.shape[0] if t.dim() else None for t in data]
    if None in lengths or len(set(lengths)) != 1:
        raise LLCInputError(f"parameter '{name}' must hold tensors of one length on dim 0; got lengths {lengths}")
    if lengths[0] < 2:
        raise LLCInputError(f"parameter '{name}' must hold at least 2 samples; got {lengths[0]}")
    return tuple(data)


def _check_batching(value) -> str:
    if not isinstance(value, str) or value not in BATCHING:
        raise LLCInputError(f"parameter 'batching' must be one of {list(BATCHING)}; got {value!r}")
    return value


def _check_mala(value, batch_size: int, n: int) -> bool:
    """``mala``: None (the default) computes the MALA acceptance with full batches only, where it is exact."""
    if value is None:
        return batch_size == n
    if not isinstance(value, bool):
        raise LLCInputError(f"parameter 'mala' must be True, False or None (full batches only); got {value!r}")
    return value


def default_draws(gamma: float, eps: float, relax: float = DEFAULT_RELAX) -> int:
    """SGLD steps of a run lasting ``relax`` relaxation times 1/γ of Langevin time: ceil(relax / (γ ε)).

    A flat direction of a singular model relaxes in Langevin time ~1/γ, the localisation being its only
    restoring force (the chapter "Learning coefficients"); ε·draws is the run's Langevin time. γ = 0 has no
    relaxation time: the number of draws must then be given."""
    gamma, eps = _check_positive("gamma", gamma, allow_zero=True), _check_positive("eps", eps)
    if gamma == 0:
        raise LLCInputError("parameter 'draws' has no default at gamma = 0 (without localisation no relaxation time "
                            "1/γ sets the run's length); give draws and burn_in, or a gamma > 0")
    return max(2, math.ceil(relax / (gamma * eps)))


def _settings(data, *, nbeta, gamma, eps, chains, draws, burn_in, batch_size, seed) -> SamplerSettings:
    """The validated settings, with :func:`estimate_llc`'s defaults where a setting is None: nβ = n / log n,
    ε = :data:`DEFAULT_EPS_NBETA` / nβ, draws = :func:`default_draws`, burn-in the first third, m = n."""
    n = data[0].shape[0]
    chains = _check_int("chains", chains, 1)
    if nbeta is None:
        nbeta = n / math.log(n)
    nbeta = _check_positive("nbeta", nbeta)
    gamma = _check_positive("gamma", gamma, allow_zero=True)
    eps = DEFAULT_EPS_NBETA / nbeta if eps is None else _check_positive("eps", eps)
    if draws is None:
        draws = default_draws(gamma, eps)
    draws = _check_int("draws", draws, 1)
    burn_in = int(draws * DEFAULT_BURN_IN_FRACTION) if burn_in is None else _check_int("burn_in", burn_in, 0)
    if draws <= burn_in:
        raise LLCInputError(f"parameter 'draws' ({draws}) must exceed 'burn_in' ({burn_in}): "
                            f"only the draws after burn-in enter the estimate")
    batch_size = n if batch_size is None else _check_int("batch_size", batch_size, 1)
    if batch_size > n:
        raise LLCInputError(f"parameter 'batch_size' must be <= the number of samples n = {n}; got {batch_size}")
    return SamplerSettings(nbeta=nbeta, gamma=gamma, eps=eps, chains=chains, draws=draws, burn_in=burn_in,
                           batch_size=batch_size, seed=_check_int("seed", seed, 0), n=n)


def _full_loss(model: nn.Module, loss_fn: LossFn, data, batch_size: int) -> float:
    """L_n(w*) = (1/n) Σ_i ℓ_i(w*), in minibatches, in float64."""
    total, n = 0.0, data[0].shape[0]
    with torch.no_grad():
        for start in range(0, n, batch_size):
            total += loss_fn(model, tuple(t[start:start + batch_size] for t in data)).double().sum().item()
    return total / n


def _n_params(model: nn.Module) -> int:
    """d: the number of parameters SGLD moves (the trainable ones, tied weights once)."""
    return int(sum(p.numel() for p in model.parameters() if p.requires_grad))


def _result(parts: list[dict], k: int, init_loss: float, s: SamplerSettings, seconds: float,
            compile_seconds: float = 0.0, n_params: int | None = None) -> LLCResult:
    trace = np.concatenate([p["trace"][k] for p in parts], axis=0)
    first_bad = np.concatenate([p["first_bad"][k] for p in parts])
    accept = np.concatenate([p["accept"][k] for p in parts])
    per_chain = s.nbeta * (trace.mean(axis=1) - init_loss)
    divergent = [{"chain": int(c), "step": int(first_bad[c]), "eps": s.eps} for c in np.flatnonzero(first_bad >= 0)]
    good = first_bad < 0
    if not good.any():
        raise LLCDivergenceError(f"every one of the {s.chains} chains diverged (first at step "
                                 f"{int(first_bad.min())}) with eps = {s.eps:g}, nbeta = {s.nbeta:g}, "
                                 f"gamma = {s.gamma:g}: lower 'eps' or raise 'gamma'")
    if divergent:
        shown = ", ".join(f"chain {d['chain']} at step {d['step']}" for d in divergent[:5])
        warnings.warn(f"{len(divergent)} of {s.chains} SGLD chains diverged with eps = {s.eps:g} ({shown}"
                      f"{', …' if len(divergent) > 5 else ''}); they are left out of the estimate", RuntimeWarning,
                      stacklevel=3)
    kept = per_chain[good]
    se = float(kept.std(ddof=1) / math.sqrt(len(kept))) if len(kept) > 1 else float("nan")
    good_trace = trace[good]
    diagnostics = {"ess": effective_sample_size(good_trace), "rhat": split_rhat(good_trace),
                   "mala_acceptance": accept, "divergent": divergent,
                   "mala_exact": s.batch_size == s.n, "compile_seconds": compile_seconds, "n_params": n_params}
    return LLCResult(llc=float(kept.mean()), se=se, per_chain=per_chain, loss=trace, init_loss=init_loss,
                     nbeta=s.nbeta, diagnostics=diagnostics, settings=s.as_dict(), seconds=seconds)


def estimate_llc(model: nn.Module, loss_fn: LossFn, data, *, nbeta=None, gamma=DEFAULT_GAMMA, eps=None,
                 chains=DEFAULT_CHAINS, draws=None, burn_in=None, batch_size=None, seed=DEFAULT_SEED, device="auto",
                 chunk_size=None, progress=True, batching="vmap", mala=None, compile="auto") -> LLCResult:
    """λ̂(w*) = nβ ( E[L_n(w)] − L_n(w*) ) by SGLD (Chen & Murfet Eqs. 11–13), ``chains`` chains at once.

    ``model``: a ``torch.nn.Module`` at w* (its trainable parameters are sampled; buffers
    stay). ``loss_fn(model, batch)``: per-sample losses, shape (B,), for ``batch`` a tuple
    of tensors (rows of ``data``); it must call the model it is given. ``data``: a tuple of
    tensors indexed on dim 0 (n samples). ``draws`` SGLD steps per chain, of which the first
    ``burn_in`` are discarded.

    Defaults, the settings the chapter "Learning coefficients" validated against known λ
    (``chapters/llc.yml``, preset ``ci``), each for a reason:

    * ``nbeta`` = nβ = n / log n (β* = 1/log n, Watanabe 2013).
    * ``gamma`` = γ = 1, the localisation strength of every known-λ run of the chapter. Raise it
      where chains leave w*'s basin (the chapter's language model needed γ = 300).
    * ``eps`` = ε: no step size is safe for every loss, since the right one depends on the
      loss's curvature at w*. The default follows the chapter's rule in units of nβ: ε·nβ = 0.1
      (the smaller of its two step sizes ε·nβ = 0.2 and 0.1, so ε = 0.1 / nβ). Along a direction
      where L_n has curvature h, SGLD's stationary variance is too large by the factor
      1/(1 − εa/4), a = nβh + γ (:func:`lib.known_llc.regular_sgld_mean`): at ε·nβ = 0.1 a bias of
      about 2.5 % · h, small where the Hessian's eigenvalues at w* are of order one, as in the
      chapter's regressions on unit-variance inputs. For a loss of larger curvature h_max take
      ε ≈ 0.1 / (nβ h_max); chains with εa ≥ 4 diverge (flagged and left out). The chapter's
      language model ran at ε = 1e-4 with γ = 300, n = 1024 windows (ε·nβ ≈ 0.015). A low MALA
      acceptance (``diagnostics["mala_acceptance"]``) says the step is too large.
    * ``draws`` = ceil(3 / (γ ε)): three relaxation times 1/γ of Langevin time (:func:`default_draws`;
      the chapter's ``relax`` = 3), since a flat direction of a singular model relaxes only through
      the localisation; at the default ε that is 30·nβ/γ steps. No default at γ = 0.
      ``burn_in`` = the first third of the draws (int(draws / 3)), as the chapter's runs.
    * ``chains`` = 64 (the chapter's ``ci`` chains): enough for a standard error of a few per cent.
    * ``batch_size`` = m = n, full-batch gradients (None gives n): exact, and the MALA
      acceptance is exact too. Minibatches (m < n) add gradient noise; the chapter's noisy case
      used m = n/10.
    * ``seed`` = 0.

    These defaults suit small models (an MLP, a regression); a large model at 30·nβ/γ steps of 64
    chains is costly, and a language model needs its own settings (those of the chapter
    "Learning coefficients"'s ``lm_*`` parameters). Every setting given is used as given.

    Warnings (:class:`LLCWarning`, and in :attr:`LLCResult.warnings`, its summary and repr): λ̂ < 0 (the
    chains left w*'s basin or w* is not a local minimum: train w* to a minimum, raise ``gamma``, lower
    ``eps``), split R̂ > 1.05 (not mixed: more ``draws`` and ``burn_in``, a smaller ``eps``; at small nβ
    the defaults' three relaxation times can leave a model's slow directions short of it) and λ̂ well
    above d/2, which no model reaches (lower ``eps``, raise ``gamma``); :func:`estimate_warnings`. They
    change no number.

    ``batching``: ``"vmap"`` (default)
    computes the gradients of a chunk's chains in one ``vmap``-ed forward + backward;
    ``"loop"`` runs one plain autograd forward + backward per chain, faster for models
    large enough that one chain's minibatch keeps the cores busy (e.g. a transformer on a
    CPU, where ``vmap``'s batched kernels and the ``torch.func`` transforms cost 20–30 %); the
    two give the same chains up to float rounding. ``mala``: compute the MALA acceptance
    (``diagnostics["mala_acceptance"]``, NaN when not computed); None (default) with full
    batches only, where it is exact. ``compile``: True runs a ``torch.compile``d step (the
    per-chain loss with ``"loop"``, the whole vmapped gradient with ``"vmap"``, where on the
    CPU the tiny per-chain GEMMs are summed in fused loops; building the step and its first
    call at each chunk's shape, on every rank before any samples, are timed apart in
    ``diagnostics["compile_seconds"]``; Inductor's cache lives under the book's cache), False
    never, ``"auto"`` with ``"loop"`` where :func:`lib.sgld.compile_pays` predicts the run
    repays a cold compile (the vmapped step, whose speed-up depends on the model's shapes
    rather than its FLOPs, is compiled only when asked). Compiled and eager chains agree up to
    float rounding. Everything is checked before sampling; see :class:`LLCResult` for what is
    returned.
    """
    batching = _check_batching(batching)
    if compile not in (True, False, "auto"):
        raise LLCInputError(f"parameter 'compile' must be True, False or 'auto'; got {compile!r}")
    data = _check_data(data)
    if not isinstance(model, nn.Module):
        raise LLCInputError(f"parameter 'model' must be a torch.nn.Module; got {type(model).__name__}")
    if not callable(loss_fn):
        raise LLCInputError("parameter 'loss_fn' must be callable as loss_fn(model, batch)")
    s = _settings(data, nbeta=nbeta, gamma=gamma, eps=eps, chains=chains, draws=draws, burn_in=burn_in,
                  batch_size=batch_size, seed=seed)
    device = resolve_device(device)
    init_loss = _full_loss(model, loss_fn, data, s.batch_size)
    compiled = compile is True or (compile == "auto" and batching == "loop" and compile_pays(
        lambda: step_flops(model, loss_fn, data, s.batch_size), s.chains * s.draws, device))
    parts, seconds, compile_seconds = sample(model, [(loss_fn, data)], s, device=device, chunk_size=chunk_size,
                                             progress=progress, desc="SGLD chain-steps", batching=batching,
                                             mala=_check_mala(mala, s.batch_size, s.n), compiled=compiled)
    result = _result(parts, 0, init_loss, s, seconds, compile_seconds, n_params=_n_params(model))
    result.warn(stacklevel=2)
    return result


def coupled_chains(model: nn.Module, loss_fn: LossFn, data_a, data_b, *, loss_fn_b: LossFn | None = None,
                   nbeta=None, gamma, eps, chains, draws, burn_in, batch_size, seed, device="auto",
                   chunk_size=None, progress=True, batching="vmap", mala=None) -> CoupledResult:
    """Two SGLD samplers from the same w* with the same minibatch indices and the same noise.

    Target a is (``loss_fn``, ``data_a``), target b is (``loss_fn_b`` or ``loss_fn``,
    ``data_b``), e.g. samples from q and from q^(χ) (Chen & Murfet §7, Thms 7.3–7.4). Both data sets must have the same n so that one index stream serves both;
    nβ defaults to n / log n for both; ``batching`` and ``mala`` as in :func:`estimate_llc`. Returns both
    estimates and the chains' separations. Each estimate's :attr:`LLCResult.warnings` are recorded but not
    raised: w* is a minimum of target a only, by design.
    """
    batching = _check_batching(batching)
    data_a, data_b = _check_data(data_a, "data_a"), _check_data(data_b, "data_b")
    if data_a[0].shape[0] != data_b[0].shape[0]:
        raise LLCInputError(f"parameters 'data_a' and 'data_b' must have the same number of samples; got "
                            f"{data_a[0].shape[0]} and {data_b[0].shape[0]}")
    loss_fn_b = loss_fn if loss_fn_b is None else loss_fn_b
    s = _settings(data_a, nbeta=nbeta, gamma=gamma, eps=eps, chains=chains, draws=draws, burn_in=burn_in,
                  batch_size=batch_size, seed=seed)
    device = resolve_device(device)
    init = [_full_loss(model, fn, d, s.batch_size) for fn, d in ((loss_fn, data_a), (loss_fn_b, data_b))]
    parts, seconds, _ = sample(model, [(loss_fn, data_a), (loss_fn_b, data_b)], s, device=device,
                               chunk_size=chunk_size, progress=progress, desc="coupled SGLD chain-steps",
                               batching=batching, mala=_check_mala(mala, s.batch_size, s.n))
    a, b = (_result(parts, k, init[k], s, seconds, n_params=_n_params(model)) for k in range(2))
    return CoupledResult(a=a, b=b, separation=np.concatenate([p["sep"][0] for p in parts]),
                         max_separation=np.concatenate([p["max_sep"][0] for p in parts]))


@dataclass
class CoupledTargets:
    """K SGLD runs sharing start, minibatch indices and noise (:func:`coupled_targets`).

    ``results[k]`` is target k's :class:`LLCResult`; ``separation[k − 1, c, t] = ‖w_t^0 − w_t^k‖``
    for the draws after burn-in; ``max_separation[k − 1, c]`` over the whole run;
    ``positions[k, c, i]`` the parameters (flat, ``model.parameters()`` order) of target k's
    chain c after ``snapshot_steps[i]`` steps (None without snapshots)."""

    results: list
    separation: np.ndarray
    max_separation: np.ndarray
    positions: np.ndarray | None
    snapshot_steps: list


def coupled_targets(model: nn.Module, loss_fn: LossFn, datas, *, nbeta=None, gamma, eps, chains, draws, burn_in,
                    batch_size, seed, device="auto", chunk_size=None, progress=True, batching="vmap",
                    snapshots: int = 0, mala=None) -> CoupledTargets:
    """:func:`coupled_chains` for any number K ≥ 2 of data sets (e.g. q and q^(χ) for several χ):
    every target's chains start at w* and share the minibatch indices and the noise.

    ``datas``: a list of data tuples, all with the same n; ``mala`` as in :func:`estimate_llc`; ``snapshots`` > 0 keeps every
    chain's position at that many evenly spaced steps (the last one the final state)."""
    batching = _check_batching(batching)
    if not isinstance(datas, (list, tuple)) or len(datas) < 2:
        raise LLCInputError("parameter 'datas' must be a list of at least two data tuples")
    datas = [_check_data(d, f"datas[{i}]") for i, d in enumerate(datas)]
    sizes = {d[0].shape[0] for d in datas}
    if len(sizes) != 1:
        raise LLCInputError(f"every data set in 'datas' must have the same number of samples; got {sorted(sizes)}")
    s = _settings(datas[0], nbeta=nbeta, gamma=gamma, eps=eps, chains=chains, draws=draws, burn_in=burn_in,
                  batch_size=batch_size, seed=seed)
    snapshots = _check_int("snapshots", snapshots, 0)
    steps = sorted({int(round(v)) for v in np.linspace(0, s.draws, snapshots + 1)[1:]}) if snapshots else []
    device = resolve_device(device)
    init = [_full_loss(model, loss_fn, d, s.batch_size) for d in datas]
    parts, seconds, _ = sample(model, [(loss_fn, d) for d in datas], s, device=device, chunk_size=chunk_size,
                               progress=progress, desc="coupled SGLD chain-steps", batching=batching,
                               snapshot_steps=steps, mala=_check_mala(mala, s.batch_size, s.n))
    results = [_result(parts, k, init[k], s, seconds, n_params=_n_params(model)) for k in range(len(datas))]
    return CoupledTargets(results, np.concatenate([p["sep"] for p in parts], axis=1),
                          np.concatenate([p["max_sep"] for p in parts], axis=1),
                          np.concatenate([p["positions"] for p in parts], axis=1) if steps else None, steps)


# ----- calibration --------------------------------------------------------------------------

def sweep(model: nn.Module, loss_fn: LossFn, data, *, grid: dict[str, Sequence], progress=False,
          **settings) -> list[tuple[dict, LLCResult | None]]:
    """Run :func:`estimate_llc` at every point of ``grid`` (e.g. ``{"eps": [...], "gamma": [...]}``).

    ``settings`` are the fixed keyword arguments of :func:`estimate_llc`. Returns
    (point, result) pairs; a point where every chain diverged gives ``None`` (and a
    warning) instead of stopping the sweep.
    """
    allowed = {"eps", "gamma", "nbeta", "batch_size", "chains", "draws", "burn_in"}
    unknown = set(grid) - allowed
    if unknown:
        raise LLCInputError(f"parameter 'grid' may vary {sorted(allowed)}; got {sorted(unknown)}")
    points = [{}]
    for name, values in grid.items():
        points = [{**p, name: v} for p in points for v in values]
    out = []
    for point in points:
        try:
            out.append((point, estimate_llc(model, loss_fn, data, progress=progress, **{**settings, **point})))
        except LLCDivergenceError as err:
            warnings.warn(f"sweep point {point}: {err}", RuntimeWarning, stacklevel=2)
            out.append((point, None))
    return out


def plot_sweep(results, *, vary: str, ax_traces=None, ax_llc=None, truth=None, chosen=None, max_chains: int = 4):
    """Loss traces per setting of ``vary`` (top) and λ̂ ± 2 s.e. against it (bottom); on given axes if any.

    The figure made here is sized for a page (6.2 in wide, text at matplotlib's default 10 pt)."""
    import matplotlib.pyplot as plt

    if ax_traces is None or ax_llc is None:
        _, (ax_traces, ax_llc) = plt.subplots(2, 1, figsize=(6.2, 7.0), layout="constrained")
    colors = plt.cm.viridis(np.linspace(0, 0.9, max(len(results), 1)))
    xs, ys, es = [], [], []
    for color, (point, res) in zip(colors, results):
        if res is None:
            continue
        lam = res.nbeta * (res.loss[:max_chains] - res.init_loss)
        for c, row in enumerate(lam):
            ax_traces.plot(np.arange(res.settings["burn_in"], res.settings["draws"]), row, color=color, lw=0.7,
                           alpha=0.8, label=f"{vary} = {point[vary]:.3g}" if c == 0 else None)
        xs.append(point[vary]); ys.append(res.llc); es.append(2 * res.se)
    ax_traces.set_xlabel("SGLD step")
    ax_traces.set_ylabel("nβ (L_B(w_t) − L_n(w*))")
    ax_traces.legend()
    ax_llc.errorbar(xs, ys, yerr=es, marker="o", capsize=3, label="λ̂ ± 2 s.e.")
    if truth is not None:
        ax_llc.axhline(truth, color="k", ls="--", lw=1, label=f"λ = {truth:g}")
    if chosen is not None:
        ax_llc.axvline(chosen, color="tab:red", ls=":", lw=1.2, label=f"chosen {vary} = {chosen:g}")
    ax_llc.set_xscale("log")
    ax_llc.set_xlabel(vary)
    ax_llc.set_ylabel("λ̂")
    ax_llc.legend()
    return ax_traces, ax_llc


# ----- what a run costs, and where its warnings go -------------------------------------------------------

def chain_steps(nbetas, eps_nbeta, langevin_time: float, chains: int) -> int:
    """SGLD chain-steps of :func:`eps_limits`: at each nβ, one run per step size ε = f/nβ of
    ceil(``langevin_time`` · nβ / f) steps, each ``chains`` chains."""
    return int(sum(chains * max(2, math.ceil(langevin_time * nb / f)) for nb in nbetas for f in eps_nbeta))


def lm_sgld_cost(config, *, chains: int, steps: int, batch_size: int, windows: int, evaluations: int = 1):
    """(peak bytes, floating-point operations) of :func:`estimate_llc` on a causal LM with
    ``lib.models.causal_lm.sequence_loss``: ``chains`` chains in one ``vmap``, each of ``steps`` steps a
    forward and backward pass on ``batch_size`` windows of T = ``config.max_position_embeddings`` tokens
    (6 operations per parameter per token, Kaplan et al. 2020), plus ``evaluations`` forward passes over
    all ``windows`` for L_n(w*) (2 per parameter per token). Peak: the sampler runs the chains in chunks that
    fit the device (:func:`estimate_llc`), so what must fit is one chain's step, the model's training memory
    (``lib.models.causal_lm.estimate_training_bytes``) for ``batch_size`` windows, beside every chain's
    position, gradient and noise (3 float32 values per parameter per chain)."""
    d, T = estimate_param_count(config), int(config.max_position_embeddings)
    flops = 6.0 * d * chains * steps * batch_size * T + 2.0 * d * windows * T * evaluations
    return float(estimate_training_bytes(config, batch_size, T) + 12.0 * d * chains), flops


@contextlib.contextmanager
def warnings_to_terminal(category: type[Warning] | None = None):
    """Within the block, warnings (e.g. of divergent chains) go to the terminal that runs the book
    (:func:`lib.book.progress.log_stream`) instead of a notebook cell's output; the results say what the
    warnings said (:attr:`LLCResult.divergent_fraction`, :attr:`LLCResult.warnings`). With ``category``
    (e.g. :class:`LLCWarning`) only warnings of that category go there; the others are warned again as
    they came."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeWarning)
        yield
    for w in caught:
        if category is None or issubclass(w.category, category):
            print(f"[lib.llc] {w.category.__name__}: {w.message}", file=log_stream())
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)


# ----- removing the estimator's biases -------------------------------------------------------

class LLCFitError(ValueError):
    """An extrapolation's form does not determine its limit from these values."""


def independent_seed(seed: int, *keys: int) -> int:
    """A seed for the sub-run named by ``keys`` whose streams are independent of ``seed``'s and of every other
    sub-run's (NumPy's ``SeedSequence`` hashing; deterministic)."""
    seed = _check_int("seed", seed, 0)
    return int(np.random.SeedSequence([seed, *(int(k) for k in keys)]).generate_state(1, dtype=np.uint32)[0])


def _weighted_least_squares(X: np.ndarray, y: np.ndarray, ses: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Coefficients and their covariance for y ≈ X c with weights 1/ses² (ses taken as absolute)."""
    w = 1.0 / np.maximum(ses, 1e-300) ** 2
    cov = np.linalg.inv(X.T @ (w[:, None] * X))
    return cov @ X.T @ (w * y), cov


def _is_paired(results: Sequence[LLCResult]) -> bool:
    """Runs of one seed and chain count: chain c of each is driven by the same noise stream."""
    return (len({r.settings["seed"] for r in results}) == 1 and len({r.settings["chains"] for r in results}) == 1
            and len({len(r.per_chain) for r in results}) == 1)


def extrapolate_eps(results: Sequence[LLCResult], *, paired: bool | None = None) -> tuple[float, float]:
    """λ̂ at ε → 0 from estimates at several step sizes ε: the line λ̂(ε) = λ̂₀ + bε, weighted.

    SGLD's discretisation bias is O(ε) to first order (Euler–Maruyama), so a line in ε
    through two or more step sizes removes it (Richardson extrapolation). With the design
    X = [1, ε_j] and weights W = diag(1/s.e._j²), the intercept is a fixed combination of the
    estimates, λ̂₀ = Σ_j c_j λ̂(ε_j) with c = e₀ᵀ (XᵀWX)⁻¹ XᵀW. Its standard error:

    * independent runs: sqrt( ((XᵀWX)⁻¹)₀₀ );
    * paired runs (the same seed and chains at every ε, so chain c of each run sees the same
      noise and the estimates are correlated; ``paired=None`` decides from the settings): the
      combination is formed chain by chain, z_c = Σ_j c_j λ̂_c(ε_j), over the chains finite in
      every run, and λ̂₀ ± s.e. is the mean of z_c ± their standard deviation / √C. Treating
      paired runs as independent would misstate the s.e. (here about twice too large).

    Returns (λ̂₀, its standard error).
    """
    if len(results) < 2:
        raise LLCInputError(f"parameter 'results' must hold estimates at >= 2 step sizes; got {len(results)}")
    eps = np.array([r.settings["eps"] for r in results], dtype=np.float64)
    if len(set(eps.tolist())) < 2:
        raise LLCInputError("parameter 'results' must hold estimates at >= 2 different step sizes eps")
    X = np.stack([np.ones_like(eps), eps], axis=1)
    w = 1.0 / np.maximum(np.array([r.se for r in results], dtype=np.float64), 1e-300) ** 2
    cov = np.linalg.inv(X.T @ (w[:, None] * X))
    combination = (cov @ X.T * w)[0]  # λ̂₀ = combination · (λ̂(ε_j))_j
    if paired is None:
        paired = _is_paired(results)
    if not paired:
        return float(combination @ np.array([r.llc for r in results])), float(math.sqrt(cov[0, 0]))
    if not _is_paired(results):
        raise LLCInputError("paired extrapolation needs runs with one seed and one number of chains")
    per_chain = combination @ np.stack([r.per_chain for r in results])
    per_chain = per_chain[np.isfinite(per_chain)]
    if len(per_chain) < 2:
        raise LLCDivergenceError("fewer than two chains stayed finite at every step size")
    return float(per_chain.mean()), float(per_chain.std(ddof=1) / math.sqrt(len(per_chain)))


@dataclass
class EpsLimit:
    """λ̂ at ε → 0 at one nβ (:func:`eps_limits`): ``llc`` ± ``se`` by :func:`extrapolate_eps` of ``runs``,
    one run per step size, all of the same Langevin time ε·draws and paired."""

    nbeta: float
    llc: float
    se: float
    runs: list

    @property
    def divergent_fraction(self) -> float:
        """The fraction of chains left out: non-finite at one step size or more."""
        bad = np.zeros(len(self.runs[0].per_chain), dtype=bool)
        for r in self.runs:
            bad |= ~np.isfinite(r.per_chain)
        return float(bad.mean())

    @property
    def max_rhat(self) -> float:
        """The largest split R̂ of the runs' loss traces."""
        return float(max(r.diagnostics["rhat"] for r in self.runs))

    @property
    def min_total_ess(self) -> float:
        """The smallest, over the runs, of the loss trace's ESS summed over chains."""
        return float(min(np.sum(r.diagnostics["ess"]) for r in self.runs))


def eps_limits(model: nn.Module, loss_fn: LossFn, data, *, nbetas: Sequence[float], eps_nbeta: Sequence[float],
               langevin_time: float, burn_in_fraction: float = 1 / 3, **settings) -> list[EpsLimit]:
    """λ̂ extrapolated to ε → 0 (:func:`extrapolate_eps`) at each nβ of ``nbetas``.

    At each nβ, one :func:`estimate_llc` run per step size ε = f / nβ (f in ``eps_nbeta``), each
    of ceil(``langevin_time`` / ε) steps: every run covers the same Langevin time ε·draws, so
    the smaller step runs proportionally longer and the line through the step sizes removes
    the discretisation bias only, not a mixing deficit that grows as ε shrinks (a flat
    direction relaxes in Langevin time ~1/γ). The first ``burn_in_fraction`` of each run is
    burn-in. The runs at one nβ share their seed (paired chains); each nβ has its own
    (:func:`independent_seed`), so the points handed to :func:`extrapolate_nbeta` are
    independent. ``settings`` are the other keyword arguments of :func:`estimate_llc`
    (nbeta, eps, draws and burn_in are set here). Returns one :class:`EpsLimit` per nβ.
    """
    langevin_time = _check_positive("langevin_time", langevin_time)
    if not 0 <= burn_in_fraction < 1:
        raise LLCInputError(f"parameter 'burn_in_fraction' must be in [0, 1); got {burn_in_fraction!r}")
    factors = [_check_positive("eps_nbeta", f) for f in eps_nbeta]
    if len(set(factors)) < 2:
        raise LLCInputError(f"parameter 'eps_nbeta' must hold >= 2 different step sizes; got {list(eps_nbeta)}")
    settings = {k: v for k, v in settings.items() if k not in ("nbeta", "eps", "draws", "burn_in")}
    seed = settings.pop("seed", DEFAULT_SEED)
    points = []
    for i, nb in enumerate(nbetas):
        nb = _check_positive("nbetas", nb)
        runs = []
        for f in factors:
            steps = max(2, math.ceil(langevin_time * nb / f))
            runs.append(estimate_llc(model, loss_fn, data, nbeta=nb, eps=f / nb, draws=steps,
                                     burn_in=int(steps * burn_in_fraction), seed=independent_seed(seed, i), **settings))
        value, se = extrapolate_eps(runs, paired=True)
        points.append(EpsLimit(nb, value, se, runs))
    return points


@dataclass
class NbetaExtrapolation:
    """λ̂ at nβ → ∞ from estimates at several nβ (:func:`extrapolate_nbeta`).

    ``llc`` ± ``se`` is the fitted limit λ̂₀; ``curve(nbeta)`` the fitted E[nβ K] at any nβ;
    ``form`` the fitted expression in words; ``params`` every fitted coefficient; ``chi2`` the
    weighted residual Σ ((value − curve)/s.e.)² with ``dof`` degrees of freedom (values − coefficients)."""

    llc: float
    se: float
    form: str
    params: np.ndarray
    curve: Callable[[np.ndarray], np.ndarray]
    chi2: float = float("nan")
    dof: int = 0


def extrapolate_nbeta(nbetas, values, ses=None, *, multiplicity: int = 1, gap: float | None = None,
                      gap_multiplicity: int = 1) -> NbetaExtrapolation:
    """λ̂ at nβ → ∞ by fitting the asymptotic form of the tempered mean E[nβ K] in nβ.

    With Z(s) = ∫ e^{−sK} φ(w) dw and s = nβ, E[sK] = −s d log Z / ds. Z has an expansion
    Σ_j Σ_{l ≤ m_j} c_{jl} s^{−λ_j} (log s)^{l−1} over the poles λ_1 = λ < λ_2 < … of the
    zeta function ∫ K^z φ (Watanabe 2009, Thm 6.1 and §6.2), hence

    * multiplicity 1: E[sK] = λ + s^{−δ} (c₀ + c₁ log s + … + c_{m₂−1} (log s)^{m₂−1}) + …,
      with δ = λ₂ − λ the ``gap`` to the next pole and m₂ its order (``gap_multiplicity``);
    * multiplicity 2: Z ≈ s^{−λ} (c log s + c′), so E[sK] = λ − 1/(log s + a) + O(s^{−δ}):
      the slow, logarithmic approach that makes multiplicity visible at any reachable nβ.
      The O(s^{−δ}) terms are left out (the next pole is not known for every model), so the
      form's own error at the fitted nβ must be measured on a case with exact values.

    The first form is linear in its coefficients (weighted least squares); the second is
    fitted by ``scipy.optimize.curve_fit``. Weights are 1/``ses``² (all 1 without them);
    the standard error of λ̂₀ comes from the fit's covariance with the given s.e. taken as
    absolute. Needs at least as many distinct nβ as coefficients. A multiplicity-two fit
    whose curve changes across the fitted nβ by less than the smallest s.e. is refused
    (:class:`LLCFitError`): there λ and a trade off freely (a runs away to large values
    and the s.e. of λ̂₀ with it), so the values do not determine a limit.
    """
    from scipy.optimize import curve_fit

    x = np.asarray(nbetas, dtype=np.float64)
    y = np.asarray(values, dtype=np.float64)
    sig = np.ones_like(y) if ses is None else np.maximum(np.asarray(ses, dtype=np.float64), 1e-300)
    if x.shape != y.shape or sig.shape != y.shape or x.ndim != 1:
        raise LLCInputError(f"parameters 'nbetas', 'values' and 'ses' must be 1-d of one length; got "
                            f"{x.shape}, {y.shape}, {sig.shape}")
    if not np.all(np.isfinite(x)) or np.any(x <= 1) or not np.all(np.isfinite(y)):
        raise LLCInputError("parameters 'nbetas' must be finite and > 1, and 'values' finite")
    multiplicity = _check_int("multiplicity", multiplicity, 1)
    if multiplicity > 2:
        raise LLCInputError(f"parameter 'multiplicity' must be 1 or 2 (the forms fitted here); got {multiplicity}")
    log_x = np.log(x)
    if multiplicity == 1:
        if gap is None:
            raise LLCInputError("parameter 'gap' (λ₂ − λ, the distance to the next pole) is needed at multiplicity 1")
        gap = _check_positive("gap", gap)
        gap_multiplicity = _check_int("gap_multiplicity", gap_multiplicity, 1)
        n_coef = 1 + gap_multiplicity

        def design(s):
            s = np.asarray(s, dtype=np.float64)
            return np.stack([np.ones_like(s)] + [s ** -gap * np.log(s) ** j for j in range(gap_multiplicity)], axis=-1)

        form = "λ + nβ^(−δ)·(" + " + ".join(["c₀"] + [f"c{j}·log^{j} nβ" for j in range(1, gap_multiplicity)]) + \
            f"), δ = {gap:.4g}"
    else:
        n_coef = 2
        form = "λ − 1/(log nβ + a)"
    if len(set(x.tolist())) < n_coef:
        raise LLCInputError(f"parameter 'nbetas' must hold at least {n_coef} different values for the form {form}; "
                            f"got {sorted(set(x.tolist()))}")

    def residual(curve):
        return float(np.sum(((y - curve(x)) / sig) ** 2)), len(x) - n_coef

    if multiplicity == 1:
        coef, cov = _weighted_least_squares(design(x), y, sig)

        def curve(s):
            return design(s) @ coef

        return NbetaExtrapolation(float(coef[0]), float(math.sqrt(max(cov[0, 0], 0.0))), form, coef, curve,
                                  *residual(curve))

    def log_form(s, lam, a):
        return lam - 1.0 / (np.log(s) + a)

    start = [float(y[np.argmax(x)]) + 1.0 / float(log_x.max()), 0.0]  # a = 0: λ ≈ the last value + 1/log nβ
    try:
        coef, cov = curve_fit(log_form, x, y, p0=start, sigma=sig, absolute_sigma=ses is not None, maxfev=20000)
    except RuntimeError as err:  # no convergence
        raise LLCFitError(f"the form {form} does not fit these values: {err}") from None
    if not np.all(np.isfinite(coef)) or np.any(log_x + coef[1] <= 0):
        raise LLCFitError(f"the form {form} does not fit these values (log nβ + a must stay > 0): {coef}")
    change = abs(1.0 / (log_x.min() + coef[1]) - 1.0 / (log_x.max() + coef[1]))
    if ses is not None and change < sig.min():
        raise LLCFitError(f"the form {form} is not determined by these values: the fitted curve changes by "
                          f"{change:.3g} across nβ = {x.min():g}..{x.max():g}, less than the smallest s.e. "
                          f"{sig.min():.3g} (a = {coef[1]:.3g} runs away)")
    se = float(math.sqrt(cov[0, 0])) if np.all(np.isfinite(cov)) else float("nan")

    def curve(s):
        return log_form(np.asarray(s, dtype=np.float64), *coef)

    return NbetaExtrapolation(float(coef[0]), se, form, coef, curve, *residual(curve))


# The chapter's studies moved to lib.llc_experiments; their old names here answer from there, on first use.
__getattr__ = forward_moved(__name__, {name: "lib.llc_experiments"
                                       for name in ("heavy_steps", "llc_over_training", "suite_config")})

__all__ = ["CoupledResult", "CoupledTargets", "EpsLimit", "FlatParameters", "LLCDivergenceError", "LLCFitError",
           "LLCInputError", "LLCMemoryError", "LLCResult", "LLCWarning", "LossModule", "NbetaExtrapolation", "chain_steps",
           "coupled_chains", "coupled_targets", "effective_sample_size", "eps_limits", "estimate_llc",
           "extrapolate_eps", "extrapolate_nbeta", "independent_seed", "lm_sgld_cost", "plot_sweep", "split_rhat",
           "sweep", "warnings_to_terminal", "estimate_warnings", "default_draws", "DEFAULT_GAMMA",
           "DEFAULT_EPS_NBETA", "DEFAULT_RELAX", "DEFAULT_BURN_IN_FRACTION", "DEFAULT_CHAINS", "DEFAULT_SEED", "RHAT_WARN"]
