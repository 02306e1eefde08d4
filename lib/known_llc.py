"""Models whose learning coefficient is known in closed form, and the formulas.

The learning coefficient λ of a model at a true parameter is the leading exponent of the
volume of near-optimal parameters, V(t) = vol{w : K(w) < t} ~ c t^λ (−log t)^(m−1) as
t → 0, with K(w) = L(w) − L(w*) the excess population loss and m the multiplicity
(Watanabe 2009, Thm 6.1; Chen & Murfet §2.3). Three families fix the estimator's accuracy:

* **Reduced-rank regression** y = B A x + noise, A ∈ R^{H×M}, B ∈ R^{N×H}, true product
  of rank r: :func:`rrr_llc` (Aoyagi & Watanabe 2005, Main Theorem; the formula devinterp
  tests its sampler against, there only for r = 0).
* **Normal crossings** y = x ∏_i w_i^{k_i} + noise at w* = 0: K(w) ∝ ∏ w_i^{2k_i}, so
  λ = min_i 1/(2 k_i) = 1/(2 max k) with multiplicity #{i : k_i = max k}
  (Watanabe 2009, Remark 6.x on normal crossings; Lau et al. 2024, §A).
* **Regular models**: a non-degenerate Hessian at w* gives λ = d/2, m = 1
  (Watanabe 2009, §1.4; linear regression y = w·x here).

Each formula returns a :class:`LearningCoefficient`, a ``float`` carrying ``multiplicity``
and the formula's ``case``. The modules and data makers realise each family so that
:func:`lib.llc.estimate_llc` can be checked against the truth, and two closed forms give the
exact value the estimator targets at finite nβ: :func:`normal_crossing_tempered_mean` (by
quadrature) and :func:`regular_sgld_mean` (the stationary law of SGLD's own Euler scheme).
The checks themselves, the studies of the chapter "Learning coefficients", are
:mod:`lib.llc_experiments`.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import torch
from torch import nn

from .book.moved import forward_moved
from .book.parameters import integer_at_least
from .llc import chain_steps  # noqa: F401  (the old name: the cost model of lib.llc.eps_limits moved there)


class LearningCoefficient(float):
    """A learning coefficient λ (a float) with its multiplicity m and the formula's case."""

    multiplicity: int
    case: str

    def __new__(cls, value: float, multiplicity: int = 1, case: str = ""):
        obj = super().__new__(cls, value)
        obj.multiplicity = int(multiplicity)
        obj.case = case
        return obj

    def __repr__(self) -> str:
        return f"LearningCoefficient({float(self)!r}, multiplicity={self.multiplicity}, case={self.case!r})"


def _dims(**dims) -> dict[str, int]:
    return {name: integer_at_least(name, value, 0 if name == "r" else 1) for name, value in dims.items()}


def rrr_llc(M: int, H: int, N: int, r: int = 0) -> LearningCoefficient:
    """λ of reduced-rank regression (Aoyagi & Watanabe 2005, Main Theorem).

    Model y = B A x with input dimension M, hidden (rank) H, output N; the true map B₀A₀
    has rank r ≤ min(M, H, N). Writing S = H + r:

    * Case 1, N + r ≤ M + H, M + r ≤ N + H and S ≤ M + N:
      λ = [2S(M + N) − (M − N)² − S²] / 8 with m = 1 if M + H + N + r is even;
      λ = [2S(M + N) − (M − N)² − S² + 1] / 8 with m = 2 if it is odd.
    * Case 2, M + H < N + r: λ = [HM − Hr + Nr] / 2, m = 1.
    * Case 3, N + H < M + r: λ = [HN − Hr + Mr] / 2, m = 1.
    * Case 4, M + N < H + r: λ = MN / 2, m = 1.

    With r = H the model is regular at the truth and every case gives H(M + N − H)/2, half
    the dimension of the manifold of rank-H matrices.
    """
    _dims(M=M, H=H, N=N, r=r)
    if r > min(M, H, N):
        raise ValueError(f"parameter 'r' (true rank) must be <= min(M, H, N) = {min(M, H, N)}; got {r}")
    if M + H < N + r:
        return LearningCoefficient((H * M - H * r + N * r) / 2, 1, "2")
    if N + H < M + r:
        return LearningCoefficient((H * N - H * r + M * r) / 2, 1, "3")
    if M + N < H + r:
        return LearningCoefficient(M * N / 2, 1, "4")
    S = H + r
    base = 2 * S * (M + N) - (M - N) ** 2 - S ** 2
    if (M + H + N + r) % 2 == 0:
        return LearningCoefficient(base / 8, 1, "1 even")
    return LearningCoefficient((base + 1) / 8, 2, "1 odd")


def normal_crossing_llc(k) -> LearningCoefficient:
    """λ of y = x ∏ w_i^{k_i} at w* = 0: 1/(2 max k), multiplicity #{i : k_i = max k}.

    K(w) = E[x²] ∏ w_i^{2k_i} / 2 is already in normal-crossing form, so its real log
    canonical threshold is min_i (h_i + 1)/(2k_i) with h_i = 0 (Watanabe 2009, Def. 6.x,
    Thm 6.1), attained by every i with the largest k_i.
    """
    k = list(k)
    if not k or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in k):
        raise ValueError(f"parameter 'k' must be a non-empty list of integers >= 1; got {k!r}")
    top = max(k)
    return LearningCoefficient(1 / (2 * top), k.count(top), "normal crossing")


def normal_crossing_poles(k, count: int = 2) -> list[tuple[float, int]]:
    """The first ``count`` poles (value, order) of the zeta function of K = ∏ w_i^{2k_i} with a smooth even prior.

    ζ(z) = ∫ K(w)^z φ(w) dw factorises over the coordinates; with φ smooth and even in each
    w_i only the even Taylor terms w_i^{2h} survive, and ∫₀ w^{2k z + 2h} dw has its pole at
    z = −(2h + 1)/(2k) (Watanabe 2009, Remark 6.x on normal crossings). Written as positive
    values: the poles are (2h + 1)/(2k_i), h = 0, 1, 2, …, and a value's order is the number of
    coordinates i with a pole there. The first is (λ, m) of :func:`normal_crossing_llc`; the
    second gives the rate at which the tempered mean E[nβ K] reaches λ
    (:func:`lib.llc.extrapolate_nbeta`).
    """
    k = list(k)
    normal_crossing_llc(k)
    count = integer_at_least("count", count, 1)
    order: dict = {}
    for ki in k:  # each coordinate's first `count` poles suffice: later ones of it are larger
        for h in range(count):
            value = Fraction(2 * h + 1, 2 * ki)
            order[value] = order.get(value, 0) + 1
    return [(float(v), order[v]) for v in sorted(order)[:count]]


def regular_llc(d: int) -> LearningCoefficient:
    """λ = d/2 of a regular model with d parameters (non-degenerate Fisher information)."""
    _dims(d=d)
    return LearningCoefficient(d / 2, 1, "regular")


# ----- the models that realise each family ------------------------------------------------

class ReducedRankRegression(nn.Module):
    """y = B A x: two bias-free linear maps M → H → N (devinterp's ``ReducedRankRegressor``)."""

    def __init__(self, M: int, H: int, N: int):
        super().__init__()
        _dims(M=M, H=H, N=N)
        self.A = nn.Linear(M, H, bias=False)
        self.B = nn.Linear(H, N, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.B(self.A(x))


class NormalCrossing(nn.Module):
    """y = x ∏_i w_i^{k_i}, parameters w ∈ R^d (initialised at the true parameter 0)."""

    def __init__(self, k):
        super().__init__()
        normal_crossing_llc(k)
        self.register_buffer("k", torch.tensor(list(k), dtype=torch.float32))
        self.w = nn.Parameter(torch.zeros(len(k)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.prod(self.w ** self.k)


class LinearRegression(nn.Module):
    """y = w·x with w ∈ R^d: a regular model (λ = d/2)."""

    def __init__(self, d: int):
        super().__init__()
        _dims(d=d)
        self.w = nn.Parameter(torch.zeros(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x @ self.w).unsqueeze(-1)


def squared_error(model: nn.Module, batch) -> torch.Tensor:
    """Per-sample loss ½‖model(x) − y‖², the negative log-likelihood of N(model(x), I) up to a constant."""
    x, y = batch
    return 0.5 * ((model(x) - y) ** 2).sum(dim=-1)


@dataclass
class RegressionProblem:
    """Data (x, y), the model at its true parameter w*, and the known λ."""

    model: nn.Module
    data: tuple[torch.Tensor, torch.Tensor]
    truth: LearningCoefficient
    name: str


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(int(seed))


def rrr_problem(M: int, H: int, N: int, r: int = 0, *, n: int = 1000, noise: float = 0.0,
                seed: int = 0) -> RegressionProblem:
    """Reduced-rank regression at a true parameter of rank r, with n samples x ~ N(0, I_M).

    The model is placed *at* the truth: A = [A₀; 0], B = [B₀, 0] with B₀A₀ a random rank-r
    matrix with unit singular values (r = 0: A = B = 0), and y = B₀A₀x + noise·ε. With the
    default noise = 0, L_n(w) − L_n(w*) = ½ tr(Δ Σ̂ Δᵀ), Δ = BA − B₀A₀, is the population
    excess loss under the sample covariance Σ̂: λ is then the exact target at every n and nβ
    is a free scale (the finite-sample fluctuation of a noisy L_n is studied separately). Sitting at w* (rather than at the
    minimiser of the sample loss, as devinterp's test does after 5000 Adam steps) leaves the
    estimator nothing to find and makes the known λ the exact target at every n.
    """
    truth = rrr_llc(M, H, N, r)
    g = _generator(seed)
    model = ReducedRankRegression(M, H, N)
    with torch.no_grad():
        model.A.weight.zero_()
        model.B.weight.zero_()
        if r:  # B₀A₀ = U Vᵀ with orthonormal U (N×r), V (M×r): singular values 1, balanced factors
            model.A.weight[:r] = torch.linalg.qr(torch.randn(M, r, generator=g)).Q.T
            model.B.weight[:, :r] = torch.linalg.qr(torch.randn(N, r, generator=g)).Q
    x = torch.randn(n, M, generator=g)
    with torch.no_grad():
        y = model(x) + noise * torch.randn(n, N, generator=g)
    return RegressionProblem(model, (x, y), truth, f"RRR (M,H,N)=({M},{H},{N}), r={r}")


def normal_crossing_problem(k, *, n: int = 1000, noise: float = 0.0, seed: int = 0) -> RegressionProblem:
    """y = x ∏ w_i^{k_i} at w* = 0 with n samples x ~ N(0, 1), y = noise·ε."""
    truth = normal_crossing_llc(k)
    g = _generator(seed)
    x = torch.randn(n, 1, generator=g)
    y = noise * torch.randn(n, 1, generator=g)
    return RegressionProblem(NormalCrossing(k), (x, y), truth, f"normal crossing k={tuple(k)}")


def regular_problem(d: int, *, n: int = 1000, noise: float = 0.0, seed: int = 0) -> RegressionProblem:
    """Linear regression y = w₀·x + noise with a random w₀ and the model at w₀."""
    truth = regular_llc(d)
    g = _generator(seed)
    model = LinearRegression(d)
    with torch.no_grad():
        model.w.copy_(torch.randn(d, generator=g))
        x = torch.randn(n, d, generator=g)
        y = model(x) + noise * torch.randn(n, 1, generator=g)
    return RegressionProblem(model, (x, y), truth, f"regular d={d}")


def normal_crossing_tempered_mean(k, nbeta: float, gamma: float, scale: float = 1.0, points: int = 2001) -> float:
    """E[nβ K(w)] under p(w) ∝ exp(−nβ K(w) − γ‖w‖²/2), K = (scale/2) ∏ w_i^{2k_i}, by quadrature.

    The exact value the SGLD estimator targets at finite nβ and γ for a normal crossing
    with at most two variables (Chen & Murfet Eqs. 10–11 with w* = 0); it tends to λ = 1/(2 max k) as
    nβ/γ^{max k} → ∞. The integrand is even in each w_i, so one orthant suffices; the
    substitution w_i = e^{s_i} resolves the mass piled up near the axes.
    """
    k = list(k)
    normal_crossing_llc(k)
    if len(k) > 2:
        raise ValueError(f"parameter 'k' must have at most 2 entries for quadrature; got {len(k)}")
    s = np.linspace(-40.0, 4.0, points)
    grids = np.meshgrid(*([s] * len(k)), indexing="ij")
    log_k = np.log(nbeta * scale / 2) + sum(2 * ki * g for ki, g in zip(k, grids))
    energy = np.exp(log_k)                                   # nβ K(w)
    log_weight = -energy - 0.5 * gamma * sum(np.exp(2 * g) for g in grids) + sum(grids)
    log_weight -= log_weight.max()
    weight = np.exp(log_weight)
    return float((weight * energy).sum() / weight.sum())


def regular_sgld_mean(sigma_hat, nbeta: float, gamma: float, eps: float) -> float:
    """E[nβ K(w)] under the stationary law of full-batch SGLD for K = ½ (w − w₀)ᵀ Σ̂ (w − w₀).

    The exact target of the estimator for the (noise-free) regular problem at finite nβ, γ
    and ε: the update w ← w − (ε/2) A (w − w₀) + N(0, εI) with A = nβ Σ̂ + γ I is a Gaussian
    autoregression whose stationary covariance along an eigenvector of Σ̂ (eigenvalue σ)
    is 1 / (a (1 − ε a/4)), a = nβ σ + γ. Hence E[nβ K] = (nβ/2) Σ_σ σ / (a (1 − εa/4)),
    which tends to d/2 = λ as ε → 0 and γ/nβ → 0; finite only while ε a < 4 for every a.
    """
    sig = np.linalg.eigvalsh(np.asarray(sigma_hat, dtype=np.float64))
    a = nbeta * sig + gamma
    if np.any(eps * a >= 4):
        return float("inf")
    return float(0.5 * nbeta * np.sum(sig / (a * (1 - eps * a / 4))))


# ----- noisy labels: the empirical minimiser in closed form ---------------------------------------------------

def rrr_minimiser_problem(M: int, H: int, N: int, r: int = 0, *, n: int = 1000, noise: float = 1.0,
                          seed: int = 0) -> RegressionProblem:
    """Reduced-rank regression with noisy labels y = B₀A₀x + noise·ε, and the model at the empirical minimiser ŵ.

    The truth B₀A₀ is :func:`rrr_problem`'s (rank r, unit singular values). The minimiser of Σ_i ‖y_i − W x_i‖²
    over rank(W) ≤ H is the least-squares W_ols = YᵀX(XᵀX)⁻¹ projected onto the top H principal directions of its
    fitted values X W_olsᵀ (reduced-rank regression, Izenman 1975; Reinsel & Velu 1998, Thm 2.2), factored as
    B = U_H S_H^{1/2}, A = S_H^{1/2} V_Hᵀ from W's SVD. With noise = 1 the loss ½‖y − BAx‖² is the negative
    log-likelihood up to a constant, so nβ = n/log n is Watanabe's β* (as in Lau et al. 2024 and devinterp's test,
    which train to the minimiser with Adam instead of solving for it). ``truth`` is λ of the true parameter.
    """
    truth = rrr_llc(M, H, N, r)
    clean = rrr_problem(M, H, N, r, n=n, seed=seed)
    g = _generator(seed + 7919)
    x = clean.data[0].double()
    y = clean.data[1].double() + noise * torch.randn(n, N, generator=g, dtype=torch.float64)
    w_ols = torch.linalg.lstsq(x, y).solution.T                      # N × M
    fitted = x @ w_ols.T                                              # n × N
    top = torch.linalg.eigh(fitted.T @ fitted).eigenvectors[:, -H:]   # N × H, the top H directions
    w_hat = top @ top.T @ w_ols
    u, s, vt = torch.linalg.svd(w_hat, full_matrices=False)
    model = ReducedRankRegression(M, H, N)
    with torch.no_grad():
        model.B.weight.zero_()
        model.A.weight.zero_()
        h = min(H, len(s))
        model.B.weight[:, :h] = (u[:, :h] * s[:h].sqrt()).float()
        model.A.weight[:h] = (s[:h].sqrt()[:, None] * vt[:h]).float()
    return RegressionProblem(model, (x.float(), y.float()), truth,
                             f"RRR (M,H,N)=({M},{H},{N}), r={r}, noise {noise:g}, n={n}, at the minimiser")


# The chapter's studies on these models moved to lib.llc_experiments.known_cases (heavy_steps there is this
# module's old one: the known-λ problems' costs); their old names here answer from there, on first use.
__getattr__ = forward_moved(__name__, {name: "lib.llc_experiments.known_cases" for name in (
    "CrossingLimit", "KnownCaseEstimate", "MIXED_ESS", "MIXED_RHAT", "NbetaLimit", "RRRValidation", "RegularCheck",
    "beyond_tolerance_z", "check_crossing_cases", "check_rrr_cases", "crossing_cases_problem", "heavy_steps",
    "log_form_check", "noisy_rrr", "normal_crossing_limits", "regular_check", "rrr_case_problem",
    "rrr_cases_problem", "validate_rrr")})

__all__ = ["LearningCoefficient", "LinearRegression", "NormalCrossing", "ReducedRankRegression", "RegressionProblem",
           "chain_steps", "normal_crossing_llc", "normal_crossing_poles", "normal_crossing_problem",
           "normal_crossing_tempered_mean", "regular_llc", "regular_problem", "regular_sgld_mean", "rrr_llc",
           "rrr_minimiser_problem", "rrr_problem", "squared_error"]
