"""Next-token prediction as sparse soft-label classification, and the geometry it implies.

The objects follow Thrampoulidis, *Implicit Bias of Next-token Prediction* (NeurIPS 2024;
"NeurIPS'24" below) and Zhao, Behnia, Vakilian & Thrampoulidis, *Implicit Geometry of
Next-token Prediction* (COLM 2024; "COLM'24"), as summarised in the talk *Implicit Geometry
of Next-token Prediction* (seed 004; slide titles are cited in quotes).

Data ("NTP training is sparse soft-label classification"). A token stream gives m distinct
contexts x_j of length T with frequencies π̂_j and next-token distributions p̂_j ∈ Δ^V with
supports S_j. We store P = [p̂_1, …, p̂_m] ∈ R^{V×m} and the support matrix
S ∈ {0,1}^{V×m}, S_{zj} = 1[z ∈ S_j]. The training loss of logits L = [l_1, …, l_m] is

    CE(L) = − Σ_j π̂_j Σ_{z∈S_j} p̂_{j,z} log softmax_z(l_j),

bounded below by the empirical entropy ("Entropy lower-bound")

    H = − Σ_j π̂_j Σ_{z∈S_j} p̂_{j,z} log p̂_{j,z},   CE(L) = H + Σ_j π̂_j KL(p̂_j ‖ softmax(l_j)).

Linear model (fixed embeddings h_j ∈ R^d, columns of Hf ∈ R^{d×m}; logits L = W Hf), the
slides "When is the lower bound reached?" and "Implicit bias":

* NTP_H-compatibility: ∃ W with ⟨W, (e_z − e_z')h_jᵀ⟩ = log(p̂_{j,z}/p̂_{j,z'}) for z, z' ∈ S_j;
* NTP-separability: ∃ W with ⟨W, (e_z − e_z')h_jᵀ⟩ = 0 (z, z' ∈ S_j) and
  ⟨W, (e_z − e_v)h_jᵀ⟩ ≥ 1 (z ∈ S_j, v ∉ S_j);
* F = span{(e_z − e_z')h_jᵀ}; W* ∈ F the unique solution of the compatibility equations;
  W^mm ∈ F^⊥ the NTP-SVM: min ‖W‖_F under the separability constraints;
* GD with step η ≤ 2/L_s gives CE(W_k) → H, P_F(W_k) → W*, ‖P_⊥(W_k)‖ → ∞ and
  W_k/‖W_k‖ → W^mm/‖W^mm‖ (NeurIPS'24, Thm 2).

Unconstrained features (UFM, slides "NTP-UFM" to "NTP max-margin logits"): W ∈ R^{V×d},
H ∈ R^{d×m} free, ridge λ(‖W‖_F² + ‖H‖_F²). Since min_{WH=L}(‖W‖_F² + ‖H‖_F²) = 2‖L‖_*, the
problem is the logit-space problem min_{rank L ≤ d} CE(L) + 2λ‖L‖_* (the slide writes λ for
2λ). CE is unchanged by adding a constant to a column and centring the columns never raises
‖L‖_*, so the minimiser is column-centred, of rank ≤ V − 1: the rank constraint is void and
the problem convex when d ≥ V − 1 (the theorem's assumption; the slide "Large embedding
space" writes d ≥ V). Its path satisfies L_λ ≈ L* + ρ(λ)L^mm with

* L* ∈ F = span{(e_z − e_z')e_jᵀ : z, z' ∈ S_j}: L*_{zj} = log p̂_{j,z} − mean_{z'∈S_j} log p̂_{j,z'}
  on S_j and 0 off it;
* L^mm: the nuclear-norm NTP-SVM, min ‖L‖_* s.t. L_{zj} = L_{z'j} (z, z' ∈ S_j),
  L_{zj} − L_{vj} ≥ 1 (z ∈ S_j, v ∉ S_j), which depends on S only.

The data side (P, S, π̂, the entropy H, contexts from text, synthetic supports) is
:mod:`lib.ntp_data`; its names are importable from here too.

Every convex problem here is solved with cvxpy (the separability LP with HiGHS through SciPy)
and its status is checked: anything but ``optimal`` raises :class:`SolverError` naming the
problem. NTP-SVM solutions carry a duality gap certified independently of the solver
(:func:`svm_dual_bound`); :func:`ntp_svm_first_order` (ADMM) solves the same problem at sizes
where the SDP is slow or does not fit in memory.

Bounds that hold for every input (tested on random inputs): CE(L) ≥ H; the dual bound of the
NTP-SVM never exceeds its optimum (:func:`svm_dual_bound`); gradient descent's excess loss and
the regularisation path's excess loss stay below explicit bounds from a comparison point on the
ray W* + ρW^mm (:func:`gd_excess_bound`, :func:`path_excess_bound`).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import scipy.special

from .book.device import torch_threads
from .book.threads import solver_threads
from .ntp_data import (NTPData, NTPError, check_distribution, check_support, dirichlet_entropy_moments,
                       entropy_lower_bound, extract_contexts, k_subsets, random_supports, support_matrix,
                       synthetic_data, word_stream)

__all__ = [
    "NTPError", "SolverError", "check_settings", "NTPData", "check_distribution", "support_matrix", "word_stream",
    "extract_contexts", "random_supports", "k_subsets", "synthetic_data", "entropy_lower_bound",
    "cross_entropy", "kl_terms", "log_softmax", "softmax", "l_star", "project_F", "ntp_svm",
    "solve_ntp_svm", "SVMResult", "svm_dual_bound", "svm_violation", "certified_gap", "ntp_svm_first_order",
    "project_svm_constraints",
    "linear_constraints", "dirichlet_entropy_moments", "ray_excess", "gd_excess_bound", "path_excess_bound", "RAY",
    "linear_geometry", "LinearGeometry", "separability", "linear_w_mm", "smoothness", "gd_linear", "ufm_logits",
    "ufm_objective", "ufm_path", "ufm_factors", "ufm_train", "cosine_matrix", "offdiag_corr", "permutation_null",
]


class SolverError(RuntimeError):
    """A convex solver did not report ``optimal``: the result is not used."""


# --------------------------------------------------------------------------------------
# The chapter's list settings
# --------------------------------------------------------------------------------------

def check_settings(*, vocab: int, d_scan, small_d, lambdas) -> list[float]:
    """Check the chapter's list parameters before any work; returns the λ path as floats.

    ``d_scan`` and ``small_d``: non-empty lists of positive integers, ``small_d`` below V
    (the open question is d < V); ``lambdas``: at least three positive, strictly decreasing
    ridge strengths that include 100 × the smallest (the path's claims compare the two).
    Raises :class:`NTPError` naming the parameter, what is allowed and what was given.
    """
    for name, values in (("d_scan", d_scan), ("small_d", small_d)):
        if not values or any(not isinstance(v, int) or isinstance(v, bool) or v < 1 for v in values):
            raise NTPError(f"parameter '{name}' must be a non-empty list of positive integers; got {values!r}")
    if any(d >= vocab for d in small_d):
        raise NTPError(f"parameter 'small_d' must hold widths below V = vocab = {vocab}; got {small_d!r}")
    try:
        lams = [float(x) for x in lambdas]
    except (TypeError, ValueError):
        raise NTPError(f"parameter 'lambdas' must be a list of numbers; got {lambdas!r}") from None
    if len(lams) < 3 or any(not (x > 0) for x in lams) or any(b >= a for a, b in zip(lams, lams[1:])):
        raise NTPError(f"parameter 'lambdas' must be at least three positive, strictly decreasing numbers; got {lambdas!r}")
    if not any(abs(x / (100 * lams[-1]) - 1) < 1e-9 for x in lams):
        raise NTPError(f"parameter 'lambdas' must contain 100 × its smallest value ({100 * lams[-1]:g}; the path's "
                       f"claims compare the two); got {lambdas!r}")
    return lams




# --------------------------------------------------------------------------------------
# Entropy, cross-entropy, KL
# --------------------------------------------------------------------------------------

def log_softmax(L) -> np.ndarray:
    """Column-wise log softmax of logits L (V × m)."""
    return scipy.special.log_softmax(np.asarray(L, dtype=np.float64), axis=0)


def softmax(L) -> np.ndarray:
    return np.exp(log_softmax(L))


def cross_entropy(pi, P, L, per_context: bool = False):
    """CE(L) = −Σ_j π̂_j Σ_z p̂_{j,z} log softmax_z(l_j); with per_context, the m values
    −Σ_z p̂_{j,z} log softmax_z(l_j) (unweighted)."""
    pi, P = check_distribution(pi, P)
    ce = -(np.where(P > 0, P * log_softmax(L), 0.0)).sum(0)
    return ce if per_context else float((pi * ce).sum())


def kl_terms(pi, P, L) -> np.ndarray:
    """KL(p̂_j ‖ softmax(l_j)) for each context j (computed directly, not as CE − H)."""
    pi, P = check_distribution(pi, P)
    logq = log_softmax(L)
    return np.where(P > 0, P * (np.log(np.where(P > 0, P, 1.0)) - logq), 0.0).sum(0)


# --------------------------------------------------------------------------------------
# Linear model with fixed embeddings (NeurIPS'24)
# --------------------------------------------------------------------------------------

def _pairs(S) -> list[tuple[int, int, int]]:
    """(j, z, z0) for each context j and each z ∈ S_j other than its first token z0."""
    out = []
    for j in range(S.shape[1]):
        sup = np.flatnonzero(S[:, j] > 0)
        out += [(j, int(z), int(sup[0])) for z in sup[1:]]
    return out


def linear_constraints(P, Hf) -> tuple[np.ndarray, np.ndarray]:
    """The compatibility system A vec(W) = b: one row vec((e_z − e_{z0})h_jᵀ) per (j, z ≠ z0 ∈ S_j)
    (vec row-major, W ∈ R^{V×d}), b = log(p̂_{j,z}/p̂_{j,z0}). The rows span F."""
    P, Hf = np.asarray(P, float), np.asarray(Hf, float)
    V, d = P.shape[0], Hf.shape[0]
    rows = _pairs(P > 0)
    A = np.zeros((len(rows), V * d))
    b = np.zeros(len(rows))
    for r, (j, z, z0) in enumerate(rows):
        A[r, z * d:(z + 1) * d] += Hf[:, j]
        A[r, z0 * d:(z0 + 1) * d] -= Hf[:, j]
        b[r] = math.log(P[z, j] / P[z0, j])
    return A, b


@dataclass
class LinearGeometry:
    """W* (V × d), an orthonormal basis Q of F (vec coordinates, columns), the relative
    residual of the compatibility system, and whether it is compatible (residual ≤ tol)."""

    W_star: np.ndarray
    Q: np.ndarray
    residual: float
    compatible: bool

    def project_F(self, W) -> np.ndarray:
        w = np.asarray(W, float).reshape(-1)
        return (self.Q @ (self.Q.T @ w)).reshape(self.W_star.shape)


def linear_geometry(P, Hf, tol: float = 1e-8) -> LinearGeometry:
    """W* ∈ F, the minimum-norm solution of the compatibility system (unique in F when it is
    solvable: NeurIPS'24 Def. of the subspace component), and the projector onto F."""
    A, b = linear_constraints(P, Hf)
    V, d = np.asarray(P).shape[0], np.asarray(Hf).shape[0]
    if A.shape[0] == 0:
        return LinearGeometry(np.zeros((V, d)), np.zeros((V * d, 0)), 0.0, True)
    U, s, Vt = np.linalg.svd(A, full_matrices=False)
    r = int((s > s[0] * max(A.shape) * np.finfo(float).eps).sum())
    w = Vt[:r].T @ ((U[:, :r].T @ b) / s[:r])
    res = float(np.linalg.norm(A @ w - b) / max(np.linalg.norm(b), 1e-300))
    return LinearGeometry(w.reshape(V, d), Vt[:r].T, res, res <= tol)


def _svm_constraints(cp, G, S):
    """Constraints of the NTP-SVM on a V × m affine expression G: G_{zj} = a_j on S_j and
    G_{vj} ≤ a_j − 1 off it (equivalent to the slides' pairwise form, with V·m rows). Entries
    are selected by sparse matrices acting on vec(G), so no trivial 0 = 0 rows reach the solver."""
    import scipy.sparse as sp

    V, m = S.shape
    a = cp.Variable(m)
    flat = S.reshape(-1, order="F") > 0                       # cp.vec is column-major
    idx = np.arange(V * m)
    col = idx // V
    def pick(mask):
        rows = np.flatnonzero(mask)
        n = rows.size
        E = sp.csr_matrix((np.ones(n), (np.arange(n), idx[rows])), shape=(n, V * m))
        B = sp.csr_matrix((np.ones(n), (np.arange(n), col[rows])), shape=(n, m))
        return E, B
    Ein, Bin = pick(flat)
    cons = [Ein @ cp.vec(G, order="F") == Bin @ a]
    if (~flat).any():
        Eoff, Boff = pick(~flat)
        cons.append(Eoff @ cp.vec(G, order="F") <= Boff @ a - 1)
    return cons


def _solve(prob, name: str, solver: str, **opts) -> tuple[str, float]:
    import cvxpy as cp

    t0 = time.perf_counter()
    try:
        prob.solve(solver=solver, **opts)
    except cp.error.SolverError as err:
        raise SolverError(f"{name}: solver {solver} failed ({err})") from None
    seconds = time.perf_counter() - t0
    if prob.status != cp.OPTIMAL:
        raise SolverError(f"{name}: solver {solver} returned status {prob.status!r}, not 'optimal'; "
                          "the solution is not used")
    return prob.status, seconds


def separability(S, Hf) -> bool:
    """NTP-separability of fixed embeddings as an LP feasibility problem, solved by HiGHS
    (``scipy.optimize.linprog``): unknowns W ∈ R^{V×d} and a ∈ R^m with (W h_j)_z = a_j on S_j and
    (W h_j)_v ≤ a_j − 1 off it. True when feasible, False when HiGHS certifies infeasibility; any
    other outcome raises SolverError."""
    import scipy.sparse as sp
    from scipy.optimize import linprog

    S = check_support(S)
    Hf = np.asarray(Hf, float)
    V, m = S.shape
    d = Hf.shape[0]
    def block(zs, js):
        n = zs.size
        rows = np.repeat(np.arange(n), d)
        cols = (zs[:, None] * d + np.arange(d)[None, :]).ravel()
        vals = Hf[:, js].T.ravel()
        A = sp.csr_matrix((vals, (rows, cols)), shape=(n, V * d))
        B = sp.csr_matrix((-np.ones(n), (np.arange(n), js)), shape=(n, m))
        return sp.hstack([A, B]).tocsr()
    zi, ji = np.nonzero(S > 0)
    zo, jo = np.nonzero(S == 0)
    res = linprog(np.zeros(V * d + m), A_ub=block(zo, jo) if zo.size else None,
                  b_ub=-np.ones(zo.size) if zo.size else None, A_eq=block(zi, ji), b_eq=np.zeros(zi.size),
                  bounds=(None, None), method="highs")
    if res.status == 0:
        return True
    if res.status == 2:
        return False
    raise SolverError(f"NTP-separability LP (d={d}): HiGHS ended with status {res.status} ({res.message})")


def linear_w_mm(S, Hf, solver: str = "CLARABEL") -> np.ndarray:
    """W^mm: min ‖W‖_F s.t. ⟨W,(e_z − e_z')h_jᵀ⟩ = 0, ⟨W,(e_z − e_v)h_jᵀ⟩ ≥ 1 (the NTP-SVM of
    the linear model, a QP; NeurIPS'24 eq. (NTP-SVM)). Status checked."""
    import cvxpy as cp

    S = check_support(S)
    Hf = np.asarray(Hf, float)
    W = cp.Variable((S.shape[0], Hf.shape[0]))
    prob = cp.Problem(cp.Minimize(cp.sum_squares(W)), _svm_constraints(cp, W @ Hf, S))
    _solve(prob, "linear NTP-SVM (W^mm)", solver)
    return np.asarray(W.value)


def smoothness(pi, Hf) -> float:
    """A smoothness constant of W ↦ CE(W Hf): the Hessian is Σ_j π̂_j (h_j h_jᵀ) ⊗ (diag q_j − q_j q_jᵀ)
    and ‖diag q − q qᵀ‖ ≤ 1/2, so L_s = ½ λ_max(Σ_j π̂_j h_j h_jᵀ)."""
    Hf = np.asarray(Hf, float)
    return 0.5 * float(np.linalg.eigvalsh((Hf * np.asarray(pi)) @ Hf.T)[-1])


def gd_linear(pi, P, Hf, steps: int, eta: float | None = None, n_checkpoints: int = 40,
              geometry: LinearGeometry | None = None, W_mm: np.ndarray | None = None) -> dict:
    """Full-batch GD on W ↦ CE(W Hf) from W_0 = 0 with step η (default 1/L_s; must be ≤ 2/L_s).
    At log-spaced iterations records CE − H, ‖P_F(W_k) − W*‖_F, ‖P_⊥(W_k)‖_F, cos(W_k, W^mm)
    and cos(P_⊥ W_k, W^mm)."""
    pi, P = check_distribution(pi, P)
    Hf = np.asarray(Hf, float)
    Ls = smoothness(pi, Hf)
    eta = 1.0 / Ls if eta is None else float(eta)
    if not 0 < eta <= 2.0 / Ls:
        raise NTPError(f"step η = {eta:g} must be in (0, 2/L] with L = {Ls:g}")
    geo = geometry or linear_geometry(P, Hf)
    H = entropy_lower_bound(pi, P)
    marks = set(np.unique(np.round(np.geomspace(1, steps, n_checkpoints)).astype(int)).tolist())
    W = np.zeros((P.shape[0], Hf.shape[0]))
    HpiT = (Hf * pi).T  # m × d
    out = {k: [] for k in ("k", "excess", "dist_F", "norm_perp", "cos_mm", "cos_perp_mm")}
    nmm = np.linalg.norm(W_mm) if W_mm is not None else None
    for k in range(1, steps + 1):
        Q = softmax(W @ Hf)
        W -= eta * (Q - P) @ HpiT
        if k in marks:
            WF = geo.project_F(W)
            Wp = W - WF
            out["k"].append(k)
            out["excess"].append(cross_entropy(pi, P, W @ Hf) - H)
            out["dist_F"].append(float(np.linalg.norm(WF - geo.W_star)))
            out["norm_perp"].append(float(np.linalg.norm(Wp)))
            if W_mm is not None:
                out["cos_mm"].append(float((W * W_mm).sum() / (np.linalg.norm(W) * nmm)))
                out["cos_perp_mm"].append(float((Wp * W_mm).sum() / (np.linalg.norm(Wp) * nmm)))
    res = {k: np.asarray(v) for k, v in out.items()}
    res.update(W=W, eta=eta, smoothness=Ls, entropy=H)
    return res


RAY = np.concatenate([[0.0], np.geomspace(1e-3, 1e3, 1201)])   # the ρ at which the ray bounds are evaluated


def ray_excess(pi, P, base, direction, rhos=RAY) -> np.ndarray:
    """Σ_j π̂_j KL(p̂_j ‖ softmax(b_j + ρ d_j)) for each ρ of ``rhos``: the excess loss CE − H of
    the logits B + ρD (V × m each) along a ray, computed directly (not as a difference CE − H)."""
    pi, P = check_distribution(pi, P)
    base, direction = np.asarray(base, float), np.asarray(direction, float)
    if base.shape != P.shape or direction.shape != P.shape:
        raise NTPError(f"the ray's logits must be V × m = {P.shape}; got {base.shape} and {direction.shape}")
    rhos = np.asarray(rhos, float)
    logP = np.log(np.where(P > 0, P, 1.0))
    out = np.empty(rhos.size)
    for start in range(0, rhos.size, _CHUNK):
        r = rhos[start:start + _CHUNK, None, None]
        logq = scipy.special.log_softmax(base[None] + r * direction[None], axis=1)
        out[start:start + _CHUNK] = (np.where(P > 0, P * (logP - logq), 0.0).sum(1) * pi).sum(1)
    return out


def _ray_nuclear_norms(base, direction, rhos=RAY) -> np.ndarray:
    """‖B + ρD‖_* for each ρ of ``rhos`` (batched SVDs)."""
    rhos = np.asarray(rhos, float)
    out = np.empty(rhos.size)
    for start in range(0, rhos.size, _CHUNK):
        stack = base[None] + rhos[start:start + _CHUNK, None, None] * direction[None]
        out[start:start + _CHUNK] = np.linalg.svd(stack, compute_uv=False).sum(1)
    return out


_CHUNK = 64     # ρ values evaluated at once along a ray (bounds the memory to 64 logit matrices)


def gd_excess_bound(pi, P, Hf, W_star, W_mm, eta: float, ks) -> np.ndarray:
    """An upper bound on CE(W_k) − H for GD from W_0 = 0 with step η ≤ 1/L_s, at each k of ``ks``.

    W ↦ CE(W Hf) is convex and L_s-smooth (:func:`smoothness`), so for every comparison point W
    and every k ≥ 1, CE(W_k) − CE(W) ≤ ‖W − W_0‖²/(2ηk) (the descent lemma plus convexity,
    telescoped; CE(W_k) does not increase). Taking W on the ray W* + ρW^mm, ρ ≥ 0:

        CE(W_k) − H ≤ B_k = min_ρ [ CE((W* + ρW^mm) Hf) − H + ‖W* + ρW^mm‖²/(2ηk) ],

    the minimum taken over the grid :data:`RAY`. This holds for any matrices W*, W^mm; with the
    true ones (NeurIPS'24 Thm 2) the first term decays like e^{−ρ} and B_k = O(log²k / k). This is
    the quantitative content of Thm 2 (i) that a finite run can check."""
    pi, P = check_distribution(pi, P)
    Hf = np.asarray(Hf, float)
    Ls = smoothness(pi, Hf)
    if not 0 < eta <= (1 + 1e-12) / Ls:
        raise NTPError(f"the bound needs a step η in (0, 1/L_s] with L_s = {Ls:g}; got η = {eta:g}")
    ks = np.asarray(ks, float)
    if ks.ndim != 1 or (ks < 1).any():
        raise NTPError(f"ks must be iteration counts ≥ 1; got {ks!r}")
    W_star, W_mm = np.asarray(W_star, float), np.asarray(W_mm, float)
    excess = ray_excess(pi, P, W_star @ Hf, W_mm @ Hf)
    norms = (W_star ** 2).sum() + 2 * RAY * (W_star * W_mm).sum() + RAY ** 2 * (W_mm ** 2).sum()   # ‖W* + ρW^mm‖²
    return (excess[:, None] + norms[:, None] / (2 * eta * ks[None, :])).min(0)


# --------------------------------------------------------------------------------------
# Logit space: L*, P_F, the nuclear-norm NTP-SVM (COLM'24)
# --------------------------------------------------------------------------------------

def l_star(P) -> np.ndarray:
    """L* ∈ F: on S_j, log p̂_{j,z} minus its mean over S_j; zero off S_j (the unique solution in
    F of L_{zj} − L_{z'j} = log(p̂_{j,z}/p̂_{j,z'}), z, z' ∈ S_j)."""
    P = np.asarray(P, float)
    S = support_matrix(P)
    logP = np.log(np.where(S > 0, P, 1.0))
    mean = (logP * S).sum(0) / S.sum(0)
    return S * (logP - mean)


def project_F(S, L) -> np.ndarray:
    """Orthogonal projection onto F = span{(e_z − e_z')e_jᵀ : z, z' ∈ S_j}: per column, the
    entries on S_j minus their mean, zero off S_j."""
    S = check_support(S)
    L = np.asarray(L, float)
    mean = (L * S).sum(0) / S.sum(0)
    return S * (L - mean)


@dataclass
class SVMResult:
    """The nuclear-norm NTP-SVM's solution L (V × m), its objective ‖L‖_*, the solver, its
    status (always 'optimal': anything else raised), the relative duality gap reported by the
    solver (|primal − dual| / max(1, |primal|)), the largest constraint violation, seconds."""

    L: np.ndarray
    objective: float
    solver: str
    status: str
    gap: float
    violation: float
    seconds: float


def svm_violation(S, L) -> float:
    """Largest violation of the NTP-SVM constraints by L: spread of L on each S_j and
    max(0, 1 − (min_{S_j} L − max_{off S_j} L))."""
    S = check_support(S)
    L = np.asarray(L, float)
    big = np.where(S > 0, L, np.inf)
    small = np.where(S > 0, L, -np.inf)
    spread = (small.max(0) - big.min(0))
    off = np.where(S > 0, -np.inf, L).max(0)
    margin = np.where(np.isfinite(off), big.min(0) - off, np.inf)
    return float(max(spread.max(), np.maximum(0.0, 1.0 - margin).max()))


def svm_dual_bound(S, Y) -> float:
    """A certified lower bound on the NTP-SVM's optimum from any candidate dual matrix Y.

    The Lagrange dual of min ‖L‖_* s.t. L_{zj} = a_j (z ∈ S_j), L_{vj} ≤ a_j − 1 (v ∉ S_j) is
    max Σ_{v∉S_j} Y_{vj} s.t. ‖Y‖_op ≤ 1, 1ᵀY = 0, Y_{vj} ≥ 0 off the supports (Y free on them).
    Y is made feasible (off-support entries clipped at 0, on-support entries shifted so that
    each column sums to 0, then divided by max(1, ‖Y‖_op)), so the value returned is always a
    valid lower bound, whatever produced Y: (primal − bound)/primal is a duality gap."""
    S = check_support(S)
    Y = np.asarray(Y, float)
    Y = np.where(S > 0, Y, np.maximum(Y, 0.0))
    Y = Y - S * (Y.sum(0) / S.sum(0))
    scale = max(1.0, float(np.linalg.norm(Y, 2)))
    return float(((1 - S) * Y).sum() / scale)


def solve_ntp_svm(S, solver: str = "CLARABEL", **opts) -> SVMResult:
    """min ‖L‖_* s.t. L_{zj} = L_{z'j} (z, z' ∈ S_j), L_{zj} − L_{vj} ≥ 1 (z ∈ S_j, v ∉ S_j)
    (COLM'24's NTP-SVM; slide "Regularization-path of NTP-UFM"), with cvxpy (an SDP).
    The status is checked (SolverError otherwise) and the duality gap is certified from the
    solver's multipliers (:func:`svm_dual_bound`). Columns are shift-invariant and centring
    never increases the nuclear norm, so the solution is returned centred (1ᵀL = 0)."""
    import cvxpy as cp

    S = check_support(S)
    if (S.sum(0) == S.shape[0]).all():
        raise NTPError("every context has the full vocabulary as support: nothing to separate, L^mm = 0")
    L = cp.Variable(S.shape)
    cons = _svm_constraints(cp, L, S)
    prob = cp.Problem(cp.Minimize(cp.normNuc(L)), cons)
    status, seconds = _solve(prob, f"nuclear-norm NTP-SVM (V={S.shape[0]}, m={S.shape[1]})", solver, **opts)
    Lv = np.asarray(L.value)
    Lv = Lv - Lv.mean(0, keepdims=True)
    obj = float(np.linalg.svd(Lv, compute_uv=False).sum())
    return SVMResult(Lv, obj, solver, status, certified_gap(S, obj, _cvx_dual(S, cons)), svm_violation(S, Lv),
                     seconds)


def _cvx_dual(S, cons) -> list[np.ndarray]:
    """Candidate dual matrices Y from cvxpy's multipliers (both sign conventions)."""
    V, m = S.shape
    flat = S.reshape(-1, order="F") > 0
    y = np.zeros(V * m)
    nu = np.atleast_1d(np.asarray(cons[0].dual_value, float))
    y[flat] = nu
    if len(cons) > 1:
        y[~flat] = np.atleast_1d(np.asarray(cons[1].dual_value, float))
    Y = y.reshape((V, m), order="F")
    Y2 = Y.copy()
    Y2[S > 0] *= -1
    return [Y, Y2, -Y, -Y2]


def certified_gap(S, primal: float, candidates) -> float:
    """The relative duality gap (primal − bound)/max(1, |primal|), clipped at 0, certified by the best
    lower bound :func:`svm_dual_bound` gives over the candidate dual matrices."""
    bound = max(svm_dual_bound(S, Y) for Y in candidates)
    return float(max(0.0, primal - bound) / max(1.0, abs(primal)))


def ntp_svm(S, solver: str = "CLARABEL") -> np.ndarray:
    """L^mm (V × m) for a support matrix S ∈ {0,1}^{V×m}: the nuclear-norm NTP-SVM, solved by
    cvxpy with its status checked (see :func:`solve_ntp_svm`)."""
    return solve_ntp_svm(S, solver=solver).L


def ntp_svm_first_order(S, iters: int = 100000, rho: float = 1.0, tol: float = 1e-7, check_every: int = 20,
                        L0=None) -> SVMResult:
    """The nuclear-norm NTP-SVM by ADMM on the split L = X: min ‖X‖_* + ι_C(L), C the
    (column-separable) constraint set. X-step: singular-value thresholding; L-step: the exact
    projection onto C, column by column (:func:`project_svm_constraints`); ρ adapted by residual balancing
    (Boyd et al. 2011, §3.4.1). Every ``check_every`` iterations the projection of X onto C (a
    feasible point) is compared with the dual bound certified from the multiplier ρU
    (:func:`svm_dual_bound`); the solver stops when that certified relative gap is ≤ ``tol``
    and raises SolverError if it is not reached in ``iters`` iterations. BLAS runs on one thread
    (:func:`lib.book.threads.solver_threads`): the loop is thousands of small SVDs."""
    S = check_support(S)
    Sb = S > 0
    t0 = time.perf_counter()
    V, m = S.shape
    if (S.sum(0) == V).all():
        raise NTPError("every context has the full vocabulary as support: nothing to separate, L^mm = 0")
    X = np.zeros((V, m)) if L0 is None else np.asarray(L0, float).copy()
    U = np.zeros((V, m))
    gap = float("inf")
    with solver_threads():
        for it in range(1, iters + 1):
            Lc = _project_columns(Sb, X - U)
            u, s, vt = np.linalg.svd(Lc + U, full_matrices=False)
            Xn = (u * np.maximum(s - 1.0 / rho, 0.0)) @ vt
            r = np.linalg.norm(Lc - Xn)
            sd = rho * np.linalg.norm(Xn - X)
            X = Xn
            U += Lc - X
            if it % check_every == 0:
                feas = _project_columns(Sb, X)
                feas -= feas.mean(0, keepdims=True)
                obj = float(np.linalg.svd(feas, compute_uv=False).sum())
                gap = certified_gap(S, obj, [rho * U, -rho * U])
                if gap <= tol:
                    return SVMResult(feas, obj, "ADMM", "optimal", gap, svm_violation(S, feas),
                                     time.perf_counter() - t0)
            if it % 20 == 0 and (r > 10 * sd or sd > 10 * r):   # residual balancing
                f = 2.0 if r > sd else 0.5
                rho *= f
                U /= f
    raise SolverError(f"ADMM for the NTP-SVM (V={V}, m={m}) did not reach the certified gap {tol:g} in {iters} "
                      f"iterations (last gap {gap:.2e})")


def project_svm_constraints(S, Y) -> np.ndarray:
    """The Euclidean projection of Y (V × m) onto the NTP-SVM's constraint set C, column by
    column: y onto {l : l_z = a for z ∈ S_j, l_v ≤ a − 1 for v ∉ S_j, some a ∈ R}. For a
    fixed a the best l is a on S_j and min(y_v, a − 1) off it; the cost
    Σ_{S_j}(y_z − a)² + Σ_{v∉S_j} max(0, y_v + 1 − a)² is convex piecewise quadratic in a. With
    the t largest shifted off values u = y_v + 1 active, its minimiser is (Σ_{S_j} y + Σ_top-t u)/(k + t),
    valid when it lies between the t-th and (t+1)-th largest u: all columns at once."""
    S = check_support(S)
    Y = np.asarray(Y, float)
    if Y.shape != S.shape:
        raise NTPError(f"Y must have the shape of S, {S.shape}; got {Y.shape}")
    return _project_columns(S > 0, Y)


def _project_columns(S, Y) -> np.ndarray:
    """:func:`project_svm_constraints` without the input checks (S boolean), for the ADMM loop."""
    V, m = Y.shape
    k = S.sum(0)
    n_off = V - k
    u = np.sort(np.where(S, -np.inf, Y + 1.0), axis=0)[::-1]            # descending, −inf padding last
    fin = np.isfinite(u)
    csum = np.vstack([np.zeros((1, m)), np.cumsum(np.where(fin, u, 0.0), axis=0)])   # (V+1) × m
    t = np.arange(V + 1)[:, None]
    cand = ((Y * S).sum(0) + csum) / (k + t)
    upper = np.vstack([np.full((1, m), np.inf), np.where(fin, u, -np.inf)])       # u[t−1] (t ≥ 1)
    lower = np.vstack([np.where(fin, u, -np.inf), np.full((1, m), -np.inf)])      # u[t]
    ok = (upper >= cand - 1e-12) & (lower <= cand + 1e-12) & (t <= n_off)
    first = np.argmax(ok, axis=0)
    if not ok[first, np.arange(m)].all():
        raise SolverError("projection onto the NTP-SVM constraints found no breakpoint (non-finite input?)")
    a = cand[first, np.arange(m)]
    return np.where(S, a, np.minimum(Y, a - 1.0))


# --------------------------------------------------------------------------------------
# UFM: regularisation path and factors
# --------------------------------------------------------------------------------------

def ufm_logits(pi, P, lam: float, solver: str = "CLARABEL", **opts) -> tuple[np.ndarray, dict]:
    """L_λ = argmin_L CE(L) + 2λ‖L‖_* (the UFM with d ≥ V − 1 in logit space; the factor 2 is
    min_{WH=L}(‖W‖²+‖H‖²) = 2‖L‖_*), solved with cvxpy (exponential cones and an SDP).
    Returns (L_λ, info with status, objective, seconds). λ must be > 0."""
    import cvxpy as cp

    if not (isinstance(lam, (int, float)) and math.isfinite(lam) and lam > 0):
        raise NTPError(f"λ must be a positive number; got {lam!r} (at λ = 0 the minimum is not attained)")
    pi, P = check_distribution(pi, P)
    L = cp.Variable(P.shape)
    obj = cp.sum(cp.multiply(pi, cp.log_sum_exp(L, axis=0))) - cp.sum(cp.multiply(P * pi, L)) \
        + 2 * lam * cp.normNuc(L)
    prob = cp.Problem(cp.Minimize(obj))
    status, seconds = _solve(prob, f"UFM logit problem at λ={lam:g}", solver, **opts)
    Lv = np.asarray(L.value)
    Lv = Lv - Lv.mean(0, keepdims=True)          # CE is shift-invariant per column; centring lowers ‖L‖_*
    return Lv, {"status": status, "objective": float(prob.value), "seconds": seconds}


def path_excess_bound(pi, P, L_star, L_mm, lambdas) -> np.ndarray:
    """An upper bound on CE(L_λ) − H for the minimiser L_λ of CE(L) + 2λ‖L‖_*, at each λ.

    L_λ is at least as good as every point L* + ρL^mm of the ray, and 2λ‖L_λ‖_* ≥ 0, so

        CE(L_λ) − H ≤ B(λ) = min_ρ [ CE(L* + ρL^mm) − H + 2λ‖L* + ρL^mm‖_* ],

    the minimum taken over the grid :data:`RAY`. With the true L* and L^mm (equal logits on each
    support, a margin of one off it) the first term is at most c e^{−ρ}, c = Σ_j π̂_j (V − |S_j|)
    e^{mean_{S_j} log p̂_j} ≤ V − 1, and ρ = ln(c/(2λ‖L^mm‖_*)) gives
    B(λ) ≤ 2λ(‖L*‖_* + ‖L^mm‖_*(1 + ln(c/(2λ‖L^mm‖_*)))) = O(λ log 1/λ): the rate behind
    COLM'24 Thm (i), as a bound. Holds for any matrices L*, L^mm given; only L_λ must be optimal."""
    pi, P = check_distribution(pi, P)
    L_star, L_mm = np.asarray(L_star, float), np.asarray(L_mm, float)
    lams = np.atleast_1d(np.asarray(lambdas, float))
    if (lams <= 0).any() or not np.isfinite(lams).all():
        raise NTPError(f"every λ must be a positive number; got {lambdas!r}")
    excess = ray_excess(pi, P, L_star, L_mm)
    nuc = _ray_nuclear_norms(L_star, L_mm)
    return (excess[:, None] + 2 * lams[None, :] * nuc[:, None]).min(0)


def ufm_path(pi, P, lambdas: Sequence[float], d: int | None = None, max_iter: int = 20000, seed: int = 0) -> list[dict]:
    """The UFM's regularisation path by L-BFGS on (W, H) ∈ R^{V×d} × R^{d×m} (d = V by default,
    so that the rank constraint is void), λ decreasing, each solve warm-started from the last
    (from a small random start when the last solution is zero, a stationary point). Returns per λ:
    L = WH, W, H, the objective, the gradient norm at the end."""
    import torch

    pi, P = check_distribution(pi, P)
    lambdas = [float(x) for x in lambdas]
    if any(not (math.isfinite(x) and x > 0) for x in lambdas):
        raise NTPError(f"every λ must be a positive number; got {lambdas}")
    d = P.shape[0] if d is None else d
    out, init = [], None
    for lam in lambdas:
        W, H, losses = ufm_train(pi, P, d, lam=lam, steps=max_iter, optimizer="lbfgs", seed=seed, init=init)
        # W = H = 0 is a stationary point of the factorised problem: never warm-start from it
        init = (W, H) if np.linalg.norm(W) > 1e-3 else None
        Wt = torch.tensor(W, requires_grad=True)
        Ht = torch.tensor(H, requires_grad=True)
        Pt, pit = torch.as_tensor(P), torch.as_tensor(pi)
        loss = -(pit * (Pt * torch.log_softmax(Wt @ Ht, 0)).sum(0)).sum() + lam * (Wt.square().sum() + Ht.square().sum())
        loss.backward()
        grad = float(torch.sqrt(Wt.grad.square().sum() + Ht.grad.square().sum()))
        out.append({"lam": lam, "L": W @ H, "W": W, "H": H, "objective": float(loss.detach()), "grad_norm": grad,
                    "evaluations": len(losses)})
    return out


def ufm_objective(pi, P, L, lam: float) -> float:
    """CE(L) + 2λ‖L‖_*: the UFM's objective in logit space (slide "Logit-space relaxation", which writes λ for 2λ)."""
    return cross_entropy(pi, P, L) + 2 * lam * float(np.linalg.svd(L, compute_uv=False).sum())


def ufm_factors(L, d: int | None = None, tol: float = 1e-9) -> tuple[np.ndarray, np.ndarray]:
    """W = U√Σ R, H = Rᵀ√Σ Vᵀ from L = UΣVᵀ (R = identity on the r = rank(L) first coordinates,
    padded to d ≥ r with zeros): W ∈ R^{V×d}, H ∈ R^{d×m}, WH = L, ‖W‖² + ‖H‖² = 2‖L‖_*."""
    U, s, Vt = np.linalg.svd(np.asarray(L, float), full_matrices=False)
    r = int((s > tol * max(s[0], 1e-300)).sum())
    d = r if d is None else d
    if d < r:
        raise NTPError(f"d = {d} is below rank(L) = {r}")
    W = np.zeros((L.shape[0], d))
    H = np.zeros((d, L.shape[1]))
    W[:, :r] = U[:, :r] * np.sqrt(s[:r])
    H[:r] = np.sqrt(s[:r])[:, None] * Vt[:r]
    return W, H


def ufm_train(pi, P, d: int, lam: float = 0.0, steps: int = 2000, lr: float = 1e-2, weight_decay: float = 0.0,
              seed: int = 0, init_scale: float = 0.1, optimizer: str = "adamw", dtype=None, init=None):
    """The UFM trained directly: min over W ∈ R^{V×d}, H ∈ R^{d×m} of CE(WH) + λ(‖W‖²+‖H‖²),
    with AdamW (the talk's analysis model) or L-BFGS (for tight optima). Returns (W, H, losses)."""
    import torch

    pi, P = check_distribution(pi, P)
    if lam < 0:
        raise NTPError(f"λ must be ≥ 0; got {lam}")
    dtype = dtype or torch.float64
    g = torch.Generator().manual_seed(seed)
    V, m = P.shape
    if init is not None:
        W = torch.as_tensor(np.array(init[0]), dtype=dtype).requires_grad_()
        H = torch.as_tensor(np.array(init[1]), dtype=dtype).requires_grad_()
    else:
        W = (init_scale * torch.randn(V, d, generator=g, dtype=dtype)).requires_grad_()
        H = (init_scale * torch.randn(d, m, generator=g, dtype=dtype)).requires_grad_()
    Pt = torch.as_tensor(P, dtype=dtype)
    pit = torch.as_tensor(pi, dtype=dtype)

    def loss_fn():
        logq = torch.log_softmax(W @ H, dim=0)
        return -(pit * (Pt * logq).sum(0)).sum() + lam * (W.square().sum() + H.square().sum())

    losses = []
    with torch_threads(1):
        _run_ufm(optimizer, W, H, loss_fn, losses, steps, lr, weight_decay)
    return W.detach().numpy(), H.detach().numpy(), np.asarray(losses)


def _run_ufm(optimizer, W, H, loss_fn, losses, steps, lr, weight_decay):
    import torch

    if optimizer == "lbfgs":
        opt = torch.optim.LBFGS([W, H], lr=1.0, max_iter=steps, tolerance_grad=1e-12, tolerance_change=1e-15,
                                history_size=50, line_search_fn="strong_wolfe")

        def closure():
            opt.zero_grad()
            loss = loss_fn()
            loss.backward()
            losses.append(float(loss.detach()))
            return loss

        opt.step(closure)
    else:
        opt = torch.optim.AdamW([W, H], lr=lr, weight_decay=weight_decay)
        for _ in range(steps):
            opt.zero_grad()
            loss = loss_fn()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))


# --------------------------------------------------------------------------------------
# Geometry read-outs: cosine matrices of embeddings and how alike two of them are
# --------------------------------------------------------------------------------------

def cosine_matrix(X, center: bool = False) -> np.ndarray:
    """Cosine similarities between the rows of X (n × d); rows of zero norm give 0.
    With center, the mean row is subtracted first."""
    X = np.asarray(X, float)
    if center:
        X = X - X.mean(0, keepdims=True)
    n = np.linalg.norm(X, axis=1, keepdims=True)
    Y = X / np.where(n > 0, n, 1.0)
    return Y @ Y.T


def offdiag_corr(A, B) -> float:
    """Pearson correlation of the strictly upper-triangular entries of two square matrices."""
    A, B = np.asarray(A, float), np.asarray(B, float)
    iu = np.triu_indices(A.shape[0], 1)
    a, b = A[iu], B[iu]
    if a.std() == 0 or b.std() == 0:
        return float("nan")
    return float(np.corrcoef(a, b)[0, 1])


def permutation_null(A, B, n_perm: int = 1000, seed: int = 0) -> np.ndarray:
    """Null distribution of offdiag_corr(A, Π B Πᵀ) over random relabellings Π (B's items
    assigned to A's at random): the correlation expected when B's geometry is unrelated to
    which item is which."""
    A, B = np.asarray(A, float), np.asarray(B, float)
    rng = np.random.default_rng(seed)
    iu = np.triu_indices(A.shape[0], 1)
    a = A[iu] - A[iu].mean()
    out = np.empty(n_perm)
    for i in range(n_perm):
        p = rng.permutation(A.shape[0])
        b = B[p[iu[0]], p[iu[1]]]
        b = b - b.mean()
        den = math.sqrt(float(a @ a) * float(b @ b))
        out[i] = float(a @ b) / den if den > 0 else float("nan")
    return out
