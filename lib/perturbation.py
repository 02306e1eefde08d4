"""First- and second-order perturbation theory of singular values and vectors.

For a smooth family M(η) = M₀ + η M₁ + ½η² M₂ + O(η³) (m × n) with SVD M₀ = Σ_β σ_β u_β v_βᵀ,
extend {u_β} and {v_β} to orthonormal bases of R^m and R^n (σ_β = 0 beyond min(m, n)) and write
P[β, γ] = u_βᵀ M₁ v_γ. For a *simple* non-zero singular value σ_α (all other σ_β ≠ σ_α),
differentiating M v_α = σ_α u_α and Mᵀ u_α = σ_α v_α and projecting on the bases gives

    σ_α'  = P[α, α],
    u_α'  = Σ_{β≠α} a_β u_β,   a_β = (σ_α P[β, α] + σ_β P[α, β]) / (σ_α² − σ_β²),
    v_α'  = Σ_{β≠α} b_β v_β,   b_β = (σ_β P[β, α] + σ_α P[α, β]) / (σ_α² − σ_β²),

(gauge: u_α' ⊥ u_α, v_α' ⊥ v_α; P[α, β] = 0 for β ≥ n and P[β, α] = 0 for β ≥ m), and

    σ_α'' = u_αᵀ M₂ v_α + Σ_{β≠α} [(P[β, α]² + P[α, β]²) σ_α + 2 σ_β P[β, α] P[α, β]] / (σ_α² − σ_β²).

So σ_α(η) − (σ_α + η σ_α') = O(η²) and σ_α(η) − (σ_α + η σ_α' + ½η² σ_α'') = O(η³), and the
first-order vectors are off by O(η²). The expansion is useful while η ‖M₁‖ is small against the
gap min_β |σ_α − σ_β| (the coefficients have σ_α² − σ_β² in their denominators).

``taylor_coefficients`` gets M₀, M₁, M₂ of a family given as a function, by one-sided finite
differences on the grid η = 0, h, 2h, … (exact for polynomials of the grid's degree).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .book.moved import forward_moved

# The Examples chapter's noise studies moved to lib.examples_experiments: their old names here still answer
# (lib.book.moved), without an import upwards.
__getattr__ = forward_moved(__name__, dict.fromkeys(("NoisyMode", "planted_noise_study", "NoiseOrders",
                                                    "noise_order_study"), "lib.examples_experiments"))


def _fd_weights(n_points: int, derivative: int) -> np.ndarray:
    """Weights w with Σ_j w_j f(j) = f^{(d)}(0) for every polynomial f of degree < n_points."""
    t = np.arange(n_points, dtype=np.float64)
    A = np.vander(t, n_points, increasing=True).T          # A[p, j] = j^p
    rhs = np.zeros(n_points)
    rhs[derivative] = math.factorial(derivative)
    return np.linalg.solve(A, rhs)


def taylor_coefficients(family, h: float = 1e-3, n_points: int = 5):
    """(M(0), M'(0), M''(0)) of ``family(η)`` (a function returning equal-shape arrays), from
    M(0), M(h), …, M((n_points−1)h): one-sided differences, error O(h^{n_points−1}) in M' and
    O(h^{n_points−2}) in M'' (plus rounding ~ eps/h and eps/h²)."""
    if n_points < 3:
        raise ValueError("n_points must be at least 3 (M'' needs three points)")
    if not h > 0:
        raise ValueError(f"h must be positive, got {h}")
    vals = [np.asarray(family(j * h), dtype=np.float64) for j in range(n_points)]
    w1, w2 = _fd_weights(n_points, 1), _fd_weights(n_points, 2)
    d1 = sum(w * v for w, v in zip(w1, vals)) / h
    d2 = sum(w * v for w, v in zip(w2, vals)) / h ** 2
    return vals[0], d1, d2


@dataclass
class SVDPerturbation:
    """Derivatives at η = 0 of the singular triples of M(η) (module docstring).

    sigma (p,), U (m, m), V (n, n): full SVD of M₀ (p = min(m, n));
    dsigma, d2sigma (p,): σ', σ'' (NaN where σ_α is zero or not simple);
    du (m, p), dv (n, p): u', v' (NaN columns likewise); gap (p,): min_{β≠α} |σ_α − σ_β| with
    σ_β = 0 for the padded directions."""

    sigma: np.ndarray
    U: np.ndarray
    V: np.ndarray
    dsigma: np.ndarray
    d2sigma: np.ndarray
    du: np.ndarray
    dv: np.ndarray
    gap: np.ndarray

    def sigma_first(self, alpha: int, eta) -> np.ndarray:
        return self.sigma[alpha] + np.asarray(eta) * self.dsigma[alpha]

    def sigma_second(self, alpha: int, eta) -> np.ndarray:
        eta = np.asarray(eta)
        return self.sigma[alpha] + eta * self.dsigma[alpha] + 0.5 * eta ** 2 * self.d2sigma[alpha]

    def vectors_first(self, alpha: int, eta: float) -> tuple[np.ndarray, np.ndarray]:
        """Unit vectors u_α + η u_α', v_α + η v_α' (normalised; the normalisation is O(η²))."""
        u = self.U[:, alpha] + eta * self.du[:, alpha]
        v = self.V[:, alpha] + eta * self.dv[:, alpha]
        return u / np.linalg.norm(u), v / np.linalg.norm(v)

    def overlap_first(self, alpha: int, eta) -> np.ndarray:
        """First-order prediction of |⟨u_α(η), u_α(0)⟩|: 1/√(1 + η²‖u_α'‖²) (u_α' ⊥ u_α)."""
        return 1.0 / np.sqrt(1.0 + (np.asarray(eta) * np.linalg.norm(self.du[:, alpha])) ** 2)


def svd_perturbation(M0, M1, M2=None, rtol: float = 1e-9) -> SVDPerturbation:
    """First-order (and, with M₂, second-order in σ) perturbation of every simple non-zero singular
    triple of the dense matrix M₀ in the direction M₁ (module docstring). σ_α counts as simple
    when min_{β≠α} |σ_α − σ_β| > rtol · σ_max."""
    M0, M1 = np.asarray(M0, dtype=np.float64), np.asarray(M1, dtype=np.float64)
    if M0.ndim != 2 or M0.shape != M1.shape:
        raise ValueError(f"M0 and M1 must be 2-D of the same shape, got {M0.shape} and {M1.shape}")
    if M2 is not None:
        M2 = np.asarray(M2, dtype=np.float64)
        if M2.shape != M0.shape:
            raise ValueError(f"M2 must have shape {M0.shape}, got {M2.shape}")
    m, n = M0.shape
    p = min(m, n)
    U, s, Vt = np.linalg.svd(M0, full_matrices=True)
    V = Vt.T
    N = max(m, n)
    Ptil = np.zeros((N, N))
    Ptil[:m, :n] = U.T @ M1 @ V                         # P[β, γ] = u_βᵀ M₁ v_γ, zero-padded
    sig = np.zeros(N)
    sig[:p] = s
    dsigma = np.full(p, np.nan)
    d2sigma = np.full(p, np.nan)
    du = np.full((m, p), np.nan)
    dv = np.full((n, p), np.nan)
    gap = np.empty(p)
    for a in range(p):
        others = np.delete(np.arange(N), a)
        gap[a] = np.min(np.abs(sig[a] - sig[others])) if len(others) else np.inf
        if sig[a] <= rtol * max(s[0], 1e-300) or gap[a] <= rtol * s[0]:
            continue
        den = sig[a] ** 2 - sig ** 2
        den[a] = np.inf                                   # β = α contributes nothing
        Pba, Pab = Ptil[:, a], Ptil[a, :]
        coef_a = (sig[a] * Pba + sig * Pab) / den
        coef_b = (sig * Pba + sig[a] * Pab) / den
        dsigma[a] = Ptil[a, a]
        du[:, a] = U @ coef_a[:m]
        dv[:, a] = V @ coef_b[:n]
        second = np.sum(((Pba ** 2 + Pab ** 2) * sig[a] + 2 * sig * Pba * Pab) / den)
        d2sigma[a] = second + (U[:, a] @ M2 @ V[:, a] if M2 is not None else 0.0)
    return SVDPerturbation(s, U, V, dsigma, d2sigma, du, dv, gap)


def match_mode(U, V, u_ref, v_ref) -> tuple[int, float]:
    """The column α of (U, V) best aligned with (u_ref, v_ref): argmax |⟨u_α, u_ref⟩|·|⟨v_α, v_ref⟩|,
    and that product (1 for the same mode up to sign)."""
    score = np.abs(np.asarray(U).T @ u_ref) * np.abs(np.asarray(V).T @ v_ref)
    a = int(np.argmax(score))
    return a, float(score[a])


def loglog_slope(x, y) -> float:
    """Least-squares slope of log y against log x (the order of an error term)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    keep = (x > 0) & (y > 0)
    if keep.sum() < 2:
        raise ValueError("need at least two positive points")
    return float(np.polyfit(np.log(x[keep]), np.log(y[keep]), 1)[0])


def wedin_bound(M0, sigma0, alpha: int, sigma_t: float, u_t, v_t) -> tuple[float, float]:
    """Wedin's sin θ theorem (Stewart & Sun 1990, Thm V.4.4) for one singular triple.

    (σ̃, ũ, ṽ) is a singular triple of the perturbed matrix, compared with mode ``alpha`` of M₀
    (singular values ``sigma0``). With residuals R = M₀ṽ − σ̃ũ, S = M₀ᵀũ − σ̃ṽ and
    δ = min(min_{β≠α} |σ̃ − σ_β|, σ̃), if δ > 0:

        √(sin²θ_u + sin²θ_v) ≤ √(‖R‖² + ‖S‖²) / δ.

    Returns (measured √(sin²θ_u + sin²θ_v) against (u_α, v_α) of M₀'s SVD, the bound; inf if δ = 0)."""
    M0 = np.asarray(M0, dtype=np.float64)
    U, s, Vt = np.linalg.svd(M0, full_matrices=False)
    u_t, v_t = np.asarray(u_t, dtype=np.float64), np.asarray(v_t, dtype=np.float64)
    R = M0 @ v_t - sigma_t * u_t
    S = M0.T @ u_t - sigma_t * v_t
    others = np.delete(np.asarray(sigma0, dtype=np.float64), alpha)
    delta = min(np.min(np.abs(sigma_t - others)) if len(others) else np.inf, sigma_t)
    cu, cv = min(1.0, abs(U[:, alpha] @ u_t)), min(1.0, abs(Vt[alpha] @ v_t))
    measured = math.sqrt(max(0.0, 1 - cu ** 2) + max(0.0, 1 - cv ** 2))
    bound = math.sqrt(R @ R + S @ S) / delta if delta > 0 else math.inf
    return measured, bound


def first_crossing(pert: SVDPerturbation, alpha: int) -> float:
    """Smallest η > 0 where the first-order line σ_α + η σ_α' meets another σ_β + η σ_β'
    (inf if none): where first-order theory expects mode α to run into another mode."""
    s, ds = pert.sigma, pert.dsigma
    with np.errstate(divide="ignore", invalid="ignore"):
        eta = (s[alpha] - s) / (ds - ds[alpha])
    eta[alpha] = np.inf
    eta = eta[np.isfinite(eta) & (eta > 0)]
    return float(eta.min()) if eta.size else math.inf


# ---------------------------------------------------------------------------
# The weighted operator of a dense joint (for families M(η) of joints)
# ---------------------------------------------------------------------------

def weighted_matrix_of(joint) -> np.ndarray:
    """M[y, x] = q(xy)/√q(x) of a dense joint (rows x), zero columns where q(x) = 0."""
    J = np.asarray(joint, dtype=np.float64)
    q = J.sum(axis=1)
    d = np.divide(1.0, np.sqrt(q), out=np.zeros_like(q), where=q > 0)
    return (J * d[:, None]).T
