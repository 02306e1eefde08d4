"""Modes of a sequence distribution: the SVD of the conditional operator (Chen & Murfet §4–5).

Notation (the book's Notation page, chapters/appendix/notation.md, §§ inner products to truncation). Histories x ∈ Σ^k index rows of the joint q(xy), continuations
y ∈ Σ^l its columns. V_k = R^{Σ^k} with ⟨u, v⟩_V = Σ_x u(x) v(x) / q(x) (Def 4.2), R^{Σ^l}
with the dot product (Def 4.1), H_{k,l} = L²(Σ^k, q; R^{Σ^l}) with ⟨f, g⟩_H = Σ_x q(x) f(x)·g(x).

The conditional operator C: V_k → R^{Σ^l}, e_x ↦ q(·|x), has, in the orthonormal bases
{√q(x) e_x} and {e_y}, the matrix

    M[y, x] = √q(x) q(y|x) = q(xy) / √q(x)            (|Σ^l| × |Σ^k|)

and its SVD M = Σ_α σ_α u_α ṽ_αᵀ gives the modes (σ_α, u_α, v_α = diag(√q) ṽ_α) (§4.3).

Conventions of this module
* Modes are indexed from 0 (the paper's mode 1 is index 0) in order of decreasing σ;
  "keep χ modes" means indices 0..χ-1.
* Sign: each pair (u_α, ṽ_α) is flipped so that the first entry of u_α whose |·| is within
  a factor (1 − 1e-9) of max|u_α| is positive. Deterministic up to rounding, and up to the
  inherent freedom inside a repeated singular value.
* Zero histories: rows with q(x) = 0 have no V_k coordinate. ``zero_rows="warn"`` (default)
  drops them with a warning, "drop" silently, "raise" raises. ``Modes.rows`` maps the kept
  rows back to the rows of the joint that was given; every array is over kept rows.
  Continuations with q(y) = 0 are kept (they are zero rows of M).
* Numerical rank: #{σ_α > rtol · σ_0} with rtol = max(|Σ^k|, |Σ^l|) · machine-eps (numpy's
  default), or an explicit ``rtol`` to ``numerical_rank``.

Comparing one set of modes with another (a planted language's predicted modes, history lengths k and
k + 1, separately truncated joints) is :mod:`lib.mode_comparisons`; those names answer here too.
"""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from .book.moved import forward_moved
from .book.threads import solver_threads
from .linalg import principal_angles, randomized_svd  # noqa: F401  (principal_angles: its old home)

DENSE_LIMIT = 5 * 10 ** 7  # entries: above this a sparse joint is not densified
HESSIAN_LIMIT = 2 * 10 ** 7  # entries of Φ⊗Φ (|Σ^k| · d²) above which Hessian blocks are built one by one
ZERO_ROWS = ("warn", "drop", "raise")
TIE_RTOL = 1e-9  # σ_{χ-1} − σ_χ ≤ TIE_RTOL·σ_0: a tie, where the top-χ span depends on the SVD's basis


# ---------------------------------------------------------------------------
# Input checks
# ---------------------------------------------------------------------------

def looks_conditional(table, atol: float = 1e-9) -> bool:
    """Whether a non-negative table of two or more rows has every row summing to 1 (within ``atol``):
    the form of a conditional P(y|x), one distribution per row, which a joint P(x, y) (whose whole
    table sums to 1) of two or more rows cannot have. Dense arrays and sparse matrices."""
    rows = np.asarray(table.sum(axis=1)).ravel()
    return len(rows) >= 2 and bool(np.all(np.abs(rows - 1) <= atol))


def _is_integral(values) -> bool:
    """Whether every entry is a whole number (a table of counts)."""
    values = np.asarray(values)
    return bool(np.all(values == np.round(values)))


def _validate_joint(joint, zero_rows: str, normalize: bool, atol: float = 1e-9):
    """Return (joint as float64 dense array or CSR, kept row indices, number of rows given)."""
    if zero_rows not in ZERO_ROWS:
        raise ValueError(f"zero_rows must be one of {ZERO_ROWS}, got {zero_rows!r}")
    if sp.issparse(joint):
        J = sp.csr_matrix(joint, dtype=np.float64)
        J.sum_duplicates()
        values = J.data
    else:
        J = np.asarray(joint)
        if J.dtype == object or not np.issubdtype(J.dtype, np.number) or np.iscomplexobj(J):
            raise ValueError(f"joint must be a real numeric array, got dtype {J.dtype}")
        J = J.astype(np.float64)
        values = J
    if J.ndim != 2 or 0 in J.shape:
        raise ValueError(f"joint must be a non-empty 2-D array (histories × continuations), got shape {J.shape}")
    if not np.all(np.isfinite(values)):
        raise ValueError("joint has non-finite entries")
    if values.size and values.min() < 0:
        raise ValueError(f"joint has negative entries (min {values.min():.3g}); it must hold probabilities q(xy)")
    total = float(values.sum())
    conditional = looks_conditional(J, atol)
    if conditional and not (normalize and _is_integral(values)):
        raise ValueError(
            f"joint: the table's rows each sum to 1: it looks like a conditional P(y|x), not a joint P(x, y) "
            f"(its {J.shape[0]} rows sum to {total:.12g}, a joint to 1). Pass the joint: multiply each row by P(x), "
            "`joint = p_x[:, None] * cond`; normalize=True only rescales a joint given as counts (on a conditional it "
            "would make P(x) uniform: if that is meant, pass `cond / len(cond)`)")
    if normalize:
        if total <= 0:
            raise ValueError("joint is all zero")
        J = J / total
    elif abs(total - 1) > atol:
        raise ValueError(f"joint sums to {total:.12g}, not 1 (tolerance {atol:g}); a joint P(x, y) sums to 1 over "
                         "the whole table. Pass normalize=True to divide a table of counts by its sum")
    qx = np.asarray(J.sum(axis=1)).ravel()
    rows = np.flatnonzero(qx > 0)
    if len(rows) < len(qx):
        msg = f"{len(qx) - len(rows)} of {len(qx)} histories have q(x) = 0"
        if zero_rows == "raise":
            raise ValueError(msg + " (zero_rows='raise'); drop them or pass zero_rows='drop'")
        if zero_rows == "warn":
            warnings.warn(msg + "; they are dropped (Modes.rows maps kept rows to the input)", RuntimeWarning,
                          stacklevel=3)
        J = J[rows]
    return J, rows, len(qx)


def _fix_signs(u: np.ndarray, vt: np.ndarray) -> None:
    """In place: make the first near-maximal |entry| of each column of u positive (module doc)."""
    a = np.abs(u)
    j = np.argmax(a >= (1 - 1e-9) * a.max(axis=0, keepdims=True), axis=0)
    flip = u[j, np.arange(u.shape[1])] < 0
    u[:, flip] *= -1
    vt[:, flip] *= -1


def _complete(Q: np.ndarray) -> np.ndarray:
    """Extend orthonormal columns Q (n × r) to an orthonormal basis [Q | Q⊥] of R^n."""
    n, r = Q.shape
    if r == n:
        return Q
    full, _ = np.linalg.qr(Q, mode="complete")
    rest = full[:, r:]
    rest -= Q @ (Q.T @ rest)               # one re-orthogonalisation pass against Q itself
    rest, _ = np.linalg.qr(rest)
    return np.column_stack([Q, rest])


# ---------------------------------------------------------------------------
# Effective distribution: solver result
# ---------------------------------------------------------------------------

@dataclass
class EffectiveInfo:
    """Diagnostics of ``Modes.effective`` (log-barrier method with Newton centring).

    KKT conditions of  min F(W) s.t. W1 = a, ΦW ≥ 0  (see ``Modes.effective``): there are ν and
    Λ ≥ 0 with Φᵀ(q/p + Λ)_{·y} = ν for every column y, and Λ·p = 0. The barrier iterate uses
    Λ = μ/p on the entries with q(xy) = 0 (so Λ ≥ 0 and Λ·p = μ exactly) and measures the
    stationarity residual in the norm the problem defines, the Newton decrement
    λ = ‖projected gradient‖_{H⁻¹} (λ²/2 is the predicted decrease of the objective, in nats).

    ``newton_decrement`` λ, ``primal_residual`` = max(|Σ_y p(y|x) − 1|, |p − ΦW|, max(−p, 0)) (the
    iterate keeps p and W; p is updated by the same steps as W, so it stays positive),
    ``complementarity`` = max Λ·p = μ; ``kkt_residual`` is the largest of the three.
    ``duality_gap`` = μ · #(q(xy) = 0 entries) bounds F(p) − min F (for a centred iterate).
    ``step_rel`` = max over q(xy) > 0 of |Newton step in p| / p (relative accuracy of p on the
    support). ``status``: "optimal" (λ²/2 ≤ tol, duality_gap ≤ tol, primal_residual ≤ 1e-9: the
    objective is within 2·tol of its minimum), "inaccurate", or "max_iter". The last centring
    stops when λ²/2 ≤ 0.01·tol and step_rel ≤ 1e-11, or when step_rel stalls at rounding level.
    Entries with q(xy) = 0 end at O(μ/Λ) (tiny, positive), not exactly 0."""

    chi: int
    chi_used: int
    status: str
    kl: float
    newton_steps: int
    outer_iterations: int
    mu: float
    duality_gap: float
    newton_decrement: float
    step_rel: float
    primal_residual: float
    complementarity: float
    kkt_residual: float
    n_features: int
    seconds: float


# ---------------------------------------------------------------------------
# Modes
# ---------------------------------------------------------------------------

class Modes:
    """The modes (σ_α, u_α, v_α) of the conditional operator C_{k,l} of a joint q(xy).

    Build with ``Modes.from_joint(joint)`` (dense SVD, all min(|Σ^k|, |Σ^l|) modes) or
    ``Modes.top(joint, r)`` (top r modes of a large sparse joint).

    Attributes
    ----------
    joint     : q(xy) over kept histories (dense array, or CSR for ``top``)
    q_x, q_y  : marginals q(x) (kept rows) and q(y)
    sigma     : singular values, descending                             (n_modes,)
    u         : left singular vectors u_α ∈ R^{Σ^l}, columns             (|Σ^l|, n_modes)
    v_tilde   : right singular vectors in orthonormal coordinates ṽ_α   (|Σ^k|, n_modes)
    v         : right singular vectors as elements of V_k, diag(√q) ṽ    (|Σ^k|, n_modes)
    rows      : kept row indices of the input joint
    complete  : True if these are all min(|Σ^k|, |Σ^l|) modes (dense SVD)
    """

    def __init__(self, joint, rows, n_rows_in, sigma, u, v_tilde, complete, method):
        self.joint, self.rows, self.n_rows_in = joint, rows, n_rows_in
        self.q_x = np.asarray(joint.sum(axis=1)).ravel()
        self.q_y = np.asarray(joint.sum(axis=0)).ravel()
        self.sigma, self.u, self.v_tilde = sigma, u, v_tilde
        self.complete, self.method = complete, method
        self._sqrt_q = np.sqrt(self.q_x)
        self._u_full = self._v_full = None

    # -- construction ---------------------------------------------------------
    @classmethod
    def from_joint(cls, joint, zero_rows: str = "warn", normalize: bool = False) -> "Modes":
        """All modes from a dense SVD of M[y, x] = q(xy)/√q(x).

        joint : (|Σ^k|, |Σ^l|) array or sparse matrix of q(xy) ≥ 0 summing to 1 (or a table
                of counts with ``normalize=True``, divided by its sum). Sparse input is densified.
                A table whose rows each sum to 1 is a conditional q(y|x), not a joint, and is
                refused with the fix (``joint = p_x[:, None] * cond``; :func:`looks_conditional`):
                ``normalize=True`` would silently make q(x) uniform."""
        J, rows, n_in = _validate_joint(joint, zero_rows, normalize)
        if sp.issparse(J):
            if J.shape[0] * J.shape[1] > DENSE_LIMIT:
                raise ValueError(f"joint {J.shape} is too large to densify; use Modes.top(joint, r)")
            J = J.toarray()
        M = (J / np.sqrt(J.sum(axis=1))[:, None]).T
        try:
            U, s, Vt = sla.svd(M, full_matrices=False, lapack_driver="gesdd")
        except np.linalg.LinAlgError:                  # rare divide-and-conquer failure: QR iteration
            U, s, Vt = sla.svd(M, full_matrices=False, lapack_driver="gesvd")
        V = Vt.T.copy()
        _fix_signs(U, V)
        return cls(J, rows, n_in, s, U, V, complete=True, method="dense")

    @classmethod
    def top(cls, joint, r: int, method: str = "lanczos", seed: int = 0, n_oversamples: int = 10,
            n_iter: int = 8, zero_rows: str = "warn", normalize: bool = False) -> "Modes":
        """The r largest modes of a (large, sparse) joint without densifying it.

        method="lanczos"    scipy.sparse.linalg.svds (ARPACK, implicitly restarted Lanczos) with
                            the fixed start vector v0 = N(0, I) drawn from ``seed``.
        method="randomized" randomized SVD (Halko, Martinsson & Tropp 2011, Alg. 4.4 + 5.1):
                            a Gaussian sketch of r + n_oversamples columns, n_iter power
                            iterations with QR re-orthonormalisation, then an exact SVD of QᵀM.
        Both agree with ``from_joint`` where both run (tests); randomized accuracy depends on
        the spectral decay near σ_r (raise n_iter for flat spectra). Either runs BLAS on one
        thread (:func:`lib.book.threads.solver_threads`)."""
        J, rows, n_in = _validate_joint(joint, zero_rows, normalize)
        J = sp.csr_matrix(J)
        n_x, n_y = J.shape
        if not 1 <= r < min(n_x, n_y):
            raise ValueError(f"r must satisfy 1 <= r < min{J.shape} = {min(n_x, n_y)}, got {r}")
        sqrt_q = np.sqrt(np.asarray(J.sum(axis=1)).ravel())
        Mt = sp.diags(1 / sqrt_q) @ J                      # Mᵀ (|Σ^k| × |Σ^l|), CSR
        M = Mt.T.tocsr()
        rng = np.random.default_rng(seed)
        if method not in ("lanczos", "randomized"):
            raise ValueError(f"method must be 'lanczos' or 'randomized', got {method!r}")
        with solver_threads():
            if method == "lanczos":
                U, s, Vt = spla.svds(M, k=r, v0=rng.standard_normal(min(M.shape)), solver="arpack")
            else:
                U, s, Vt = randomized_svd(M, r, n_oversamples, n_iter, rng, orthonormalize="householder",
                                          transpose_csr=False)
        order = np.argsort(s)[::-1]
        U, s, V = U[:, order], s[order], Vt[order].T.copy()
        _fix_signs(U, V)
        return cls(J, rows, n_in, s, U, V, complete=False, method=method)

    # -- basic objects ----------------------------------------------------------
    @property
    def n_modes(self) -> int:
        return len(self.sigma)

    @property
    def shape(self) -> tuple[int, int]:
        """(|Σ^k| kept, |Σ^l|)."""
        return self.joint.shape

    @property
    def v(self) -> np.ndarray:
        """Right singular vectors as elements of V_k: v_α = diag(√q) ṽ_α, unit in ⟨·,·⟩_V."""
        return self._sqrt_q[:, None] * self.v_tilde

    @property
    def matrix(self):
        """M[y, x] = q(xy)/√q(x), the conditional operator in orthonormal bases (§4.3)."""
        if sp.issparse(self.joint):
            return (sp.diags(1 / self._sqrt_q) @ self.joint).T.tocsr()
        return (self.joint / self._sqrt_q[:, None]).T

    @property
    def conditional(self):
        """q(y|x), shape (|Σ^k|, |Σ^l|); rows are distributions (Remark 4.12: the transpose is
        column-stochastic)."""
        if sp.issparse(self.joint):
            return (sp.diags(1 / self.q_x) @ self.joint).tocsr()
        return self.joint / self.q_x[:, None]

    def numerical_rank(self, rtol: float | None = None) -> int:
        """#{α: σ_α > rtol σ_0}; rtol defaults to max(|Σ^k|, |Σ^l|) · eps. For ``top`` this counts
        only the computed modes (a lower bound on the rank)."""
        rtol = max(self.shape) * np.finfo(float).eps if rtol is None else rtol
        return int(np.sum(self.sigma > rtol * self.sigma[0]))

    @property
    def rank(self) -> int:
        return self.numerical_rank()

    def gap_cutoff(self, chi: int) -> int:
        """The smallest χ' ≥ χ at which the spectrum has a gap: σ_{χ'−1} − σ_{χ'} > TIE_RTOL·σ_0,
        or χ' = rank. At a tie (σ_{χ−1} = σ_χ) the span of the top χ modes is a choice of basis
        within the cluster of equal σ, and so would be q^(χ); keeping the whole cluster makes it
        well defined. χ' = χ whenever χ already cuts at a gap (and for χ = 0)."""
        chi, rank = self.check_chi(chi), self.rank
        while 0 < chi < rank and self.sigma[chi - 1] - self.sigma[chi] <= TIE_RTOL * self.sigma[0]:
            chi += 1
        return chi

    # -- inner products (Defs 4.1, 4.2, H_{k,l}) ---------------------------------
    def inner_V(self, a, b) -> float:
        """⟨a, b⟩_V = Σ_x a(x) b(x) / q(x)."""
        return float(np.sum(np.asarray(a) * np.asarray(b) / self.q_x))

    def inner_H(self, f, g) -> float:
        """⟨f, g⟩_H = Σ_x q(x) f(x)·g(x) for f, g of shape (|Σ^k|, |Σ^l|)."""
        return float(np.einsum("x,xy,xy->", self.q_x, np.asarray(f), np.asarray(g)))

    @staticmethod
    def _indices(selection, n: int, name: str) -> np.ndarray:
        """An index selection (None: all, int, sequence, range or boolean mask) as an int array in [0, n)."""
        if selection is None:
            return np.arange(n)
        idx = np.atleast_1d(np.asarray(selection))
        if idx.dtype == bool:
            if idx.shape != (n,):
                raise ValueError(f"{name}: a boolean mask must have length {n}, got {idx.shape}")
            return np.flatnonzero(idx)
        if idx.size == 0:
            return np.zeros(0, dtype=np.int64)
        if not np.issubdtype(idx.dtype, np.integer):
            raise ValueError(f"{name}: expected integer indices, got dtype {idx.dtype}")
        if idx.min() < 0 or idx.max() >= n:
            raise IndexError(f"{name}: indices must lie in [0, {n}), got {idx.min()}..{idx.max()}")
        return idx.astype(np.int64)

    # -- propensities (Def 4.9, Lemma 4.10) -------------------------------------
    def propensity(self, modes=None, histories=None) -> np.ndarray:
        """ρ_α(y|x) = σ_α u_α(y) ⟨v_α, e_x⟩_V = σ_α u_α(y) ṽ_α(x)/√q(x)  (Def 4.9).

        Returns shape (len(modes), len(histories), |Σ^l|); defaults: all modes, all kept
        histories. Summed over all modes it is q(y|x) (Lemma 4.10). Propensities can be negative.
        Memory is n_modes · n_histories · |Σ^l| floats: select modes/histories for big problems."""
        a = self._indices(modes, self.n_modes, "modes")
        x = self._indices(histories, self.shape[0], "histories")
        coef = self.v_tilde[x][:, a] / self._sqrt_q[x, None]            # ⟨v_α, e_x⟩_V, (n_x, n_a)
        return np.einsum("xa,ya->axy", coef * self.sigma[a], self.u[:, a], optimize=True)

    # -- mode basis (Def 4.13, Lemma 4.14, eq. 41) -------------------------------
    def full_bases(self) -> tuple[np.ndarray, np.ndarray]:
        """(V_full, U_full): the ṽ_α and the u_β completed to orthonormal bases of R^{Σ^k} and R^{Σ^l}
        (deterministic completions, by QR; computed once and kept). Needs all modes (``from_joint``)."""
        if not self.complete:
            raise ValueError("the mode basis needs all modes: build with Modes.from_joint")
        if self._v_full is None:
            self._v_full, self._u_full = _complete(self.v_tilde), _complete(self.u)
        return self._v_full, self._u_full

    def mode_basis(self, alpha: int, beta: int) -> np.ndarray:
        """e_{αβ}(x) = ⟨v_α, e_x⟩_V u_β  (Def 4.13), shape (|Σ^k|, |Σ^l|).

        α ranges over an orthonormal basis of V_k (the v_α, completed), β over one of R^{Σ^l}
        (the u_β, completed; completions are deterministic, by QR). The e_{αβ} are an
        orthonormal basis of H_{k,l} (Lemma 4.14), q(·|·) = Σ_α σ_α e_{αα} and
        ⟨q(·|·), e_{αβ}⟩_H = σ_α δ_{αβ} (eq. 41, with σ_α = 0 beyond the modes)."""
        Vf, Uf = self.full_bases()
        if not (0 <= alpha < Vf.shape[1] and 0 <= beta < Uf.shape[1]):
            raise IndexError(f"need 0 <= alpha < {Vf.shape[1]} and 0 <= beta < {Uf.shape[1]}, got ({alpha}, {beta})")
        return np.outer(Vf[:, alpha] / self._sqrt_q, Uf[:, beta])

    # -- truncations (Remark 4.18, Def 4.16) --------------------------------------
    def check_chi(self, chi) -> int:
        """``chi`` as an int if it is a cutoff of these modes (0 ≤ χ ≤ the number of modes); else ValueError."""
        if isinstance(chi, (bool, np.bool_)) or not isinstance(chi, (int, np.integer)) or not 0 <= chi <= self.n_modes:
            raise ValueError(f"chi must be an integer in [0, {self.n_modes}], got {chi!r}")
        return int(chi)

    def naive_truncation(self, chi: int, clip: bool = False, histories=None) -> np.ndarray:
        """q̃_χ(y|x) = Σ_{α<χ} ρ_α(y|x)  (Remark 4.18, eqs. 42–43), shape (|Σ^k|, |Σ^l|).

        Entries can be negative. clip=True gives eq. (44): max(q̃, 0) renormalised per row;
        a row with no positive entry (possible for small χ) becomes uniform, with a warning."""
        chi = self.check_chi(chi)
        x = self._indices(histories, self.shape[0], "histories")
        coef = self.v_tilde[x, :chi] * self.sigma[:chi] / self._sqrt_q[x, None]
        p = coef @ self.u[:, :chi].T
        if clip:
            p = np.clip(p, 0.0, None)
            z = p.sum(axis=1, keepdims=True)
            dead = z[:, 0] <= 0
            if dead.any():
                warnings.warn(f"{dead.sum()} rows have no positive entry at chi={chi}; set to uniform",
                              RuntimeWarning, stacklevel=2)
                p[dead], z[dead] = 1.0, p.shape[1]
            p = p / z
        return p

    def kl_to(self, p) -> float:
        """Σ_x q(x) KL(q(·|x) ‖ p(·|x)) = Σ_{q(xy)>0} q(xy) log(q(y|x)/p(y|x)): the excess
        cross-entropy loss of predicting with p. p has shape (|Σ^k|, |Σ^l|) over kept rows, or
        over the rows of the joint that was given. +inf if p(y|x) ≤ 0 where q(xy) > 0."""
        J = self.joint.tocoo() if sp.issparse(self.joint) else None
        if sp.issparse(p):
            p = p.tocsr()
        else:
            p = np.asarray(p, dtype=np.float64)
        if p.shape == (self.n_rows_in, self.shape[1]) and p.shape != self.shape:
            p = p[self.rows]
        if p.shape != self.shape:
            raise ValueError(f"p must have shape {self.shape} (kept rows) or ({self.n_rows_in}, {self.shape[1]}), "
                             f"got {p.shape}")
        rows = np.asarray(p.sum(axis=1)).ravel()
        if np.abs(rows - 1).max() > 1e-6 or (p.min() if p.size else 0) < 0:
            raise ValueError("p must be a conditional distribution: rows non-negative and summing to 1 "
                             f"(largest |row sum − 1| {np.abs(rows - 1).max():.2g}, smallest entry {p.min():.2g})")
        if J is not None:
            x, y, qxy = J.row, J.col, J.data
        else:
            x, y = np.nonzero(self.joint)
            qxy = self.joint[x, y]
        px = np.asarray(p[x, y]).ravel()
        if np.any(px <= 0):
            return float("inf")
        return float(np.sum(qxy * (np.log(qxy / self.q_x[x]) - np.log(px))))

    @solver_threads()
    def effective(self, chi: int, return_info: bool = False, tol: float = 1e-10, max_newton: int = 500,
                  shrink: float = 10.0):
        """The effective true distribution q^(χ) (Def 4.16, Notation page § Truncation, the Choice):

            q^(χ) = argmin_{p ∈ P_χ} Σ_x q(x) KL(q(·|x) ‖ p(·|x)),
            P_χ   = {p(·|x) = c + Σ_{α<χ} ⟨v_α, e_x⟩_V w_α, every row in the simplex},

        i.e. H_χ = span{e_{αβ}: α < χ, all β} + span{1 ⊗ u_β}. Returns (|Σ^k|, |Σ^l|) conditionals
        (and an ``EffectiveInfo`` with return_info=True).

        Structure used. Let B be an orthonormal basis (in V-coordinates) of span{√q, ṽ_0..ṽ_{χ-1}}
        (√q is the constant function 1) and Φ = diag(1/√q) B, so Φᵀ diag(q) Φ = I. Then
        p = ΦW with W ∈ R^{d×|Σ^l|}, the rows sum to 1 iff W1 = a := Bᵀ√q, and the problem is

            min_W  F(W) = −Σ_{xy} q(xy) log (ΦW)_{xy}   s.t.  W1 = a,  ΦW ≥ 0:

        convex, strictly convex in the entries p(y|x) with q(xy) > 0 (so q^(χ) is unique there;
        it exists since P_χ is compact and contains the uniform conditional). Columns with q(y) = 0
        are fixed at p = 0 (optimal). Entries with q(xy) = 0 get a log-barrier μ Σ log p; Newton's
        method (block-diagonal Hessian Φᵀdiag(q/p²)Φ per column y, Schur complement for the |Σ^l|
        coupled equality constraints) centres for each μ, and μ shrinks until μ · #barrier ≤ tol.
        Without zeros in q there is no barrier and one damped-Newton solve gives the optimum to
        rounding; with zeros, p is O(μ/Λ) (not 0) on them and the objective is within the gap.
        For χ ≥ rank, H_χ ∋ q and the answer is q itself; χ is then capped at the rank (modes
        beyond the rank are an arbitrary basis completion). A χ that cuts through a cluster of
        equal singular values is raised to the cluster's end (:meth:`gap_cutoff`, with a
        warning), so that q^(χ) does not depend on the SVD's choice of basis; ``info.chi_used``
        says which χ was solved. Histories with equal conditionals q(·|x) are solved as one (their
        features are equal), and the Schur-complement solve of each Newton step is iteratively refined,
        so that the row sums stay exact while the Hessian blocks' condition grows like 1/μ (the k = 2
        mode ladder reaches 1e20). BLAS runs on one thread (:func:`lib.book.threads.solver_threads`):
        on a loaded machine two threads made this Newton loop up to 45× slower."""
        t0 = time.perf_counter()
        chi = self.check_chi(chi)
        chi_used = min(self.gap_cutoff(chi), self.rank)
        if chi_used > chi and chi < self.rank:
            warnings.warn(f"effective(chi={chi}): σ_{chi - 1} = σ_{chi} (a tie), so the top-{chi} span depends on the "
                          f"SVD's basis; solving at the next gap, chi = {chi_used}", UserWarning, stacklevel=2)
        if sp.issparse(self.joint) and self.shape[0] * self.shape[1] > DENSE_LIMIT:
            raise ValueError(f"effective() works on a dense joint; {self.shape} is too large")
        J = self.joint.toarray() if sp.issparse(self.joint) else self.joint
        n_x, n_y = J.shape
        cols = np.flatnonzero(self.q_y > 0)
        Q = J[:, cols]
        m = len(cols)

        s = self._sqrt_q
        B = self.family_basis(chi_used)
        Phi_all = B / s[:, None]
        a = B.T @ s
        d = B.shape[1]
        # Histories with the same conditional q(·|x) have the same features φ(x) (functions of q(·|x)),
        # hence the same p(·|x) for every p ∈ P_χ: solve once per class, with the class's summed joint.
        # Exact (p ∈ P_χ cannot tell such histories apart). On the k = 2 mode ladder it cuts 524
        # histories to 35 classes and the barrier count nZ thirteen-fold, so the final μ = tol/nZ is
        # thirteen times larger, the Hessian blocks less ill-conditioned, and the solve 3× faster.
        _, first, group = np.unique(np.round(Q / self.q_x[:, None], 12), axis=0, return_index=True,
                                    return_inverse=True)
        group = group.ravel()
        n_g = len(first)
        q_g = np.bincount(group, weights=self.q_x, minlength=n_g)
        Phi = np.stack([np.bincount(group, weights=self.q_x * Phi_all[:, j], minlength=n_g) for j in range(d)],
                       axis=1) / q_g[:, None]
        Q = np.stack([np.bincount(group, weights=Q[:, j], minlength=n_g) for j in range(m)], axis=1)
        n_rows = n_x
        n_x = n_g
        # Φ ⊗ Φ row by row, so that all Hessian blocks are one matrix product (if it fits)
        Phi2 = (Phi[:, :, None] * Phi[:, None, :]).reshape(n_x, d * d) if n_x * d * d <= HESSIAN_LIMIT else None

        Z = Q == 0
        supp = ~Z
        nZ = int(Z.sum())
        W = np.outer(a, np.full(m, 1.0 / m))                 # the uniform conditional
        P = Phi @ W
        mu = 1.0 / Q.size if nZ else 0.0
        steps = outer = 0
        status = "optimal"

        def newton(P, R):
            """Newton step for min −Σ R log(ΦW) s.t. Σ_y dW_y = 0: (dW, ν, λ²)."""
            gW = Phi.T @ (-R / P)                                # gradient, (d, m)
            h = R / P ** 2                                       # Hessian blocks Φᵀ diag(h_y) Φ, one per y
            H = (h.T @ Phi2).reshape(m, d, d) if Phi2 is not None else np.stack(
                [(Phi * h[:, y, None]).T @ Phi for y in range(m)])
            try:
                Hinv = np.linalg.inv(H)
            except np.linalg.LinAlgError:    # a flat direction (Φ nearly rank-deficient): least-norm step
                Hinv = np.linalg.pinv(H, hermitian=True)
            HinvG = np.einsum("yij,jy->yi", Hinv, gW)
            S = Hinv.sum(axis=0)
            nu = np.linalg.solve(S, -HinvG.sum(axis=0))          # Schur complement
            dW = -(HinvG + Hinv @ nu).T
            # Two rounds of iterative refinement on the coupling Σ_y dW_y = 0. Near the boundary H_y⁻¹
            # spans ~1/μ (curvature R/p² from ~μ on far-from-zero barrier entries to ~Λ²/μ on active
            # ones), so the two terms above cancel to ε/μ and one solve leaves Σ_y dW_y ~ 1e-7; the
            # drift accumulated in the row sums and ended the k = 2 ladder's solves "inaccurate".
            for _ in range(2):
                dnu = np.linalg.solve(S, dW.sum(axis=1))
                dW = dW - (Hinv @ dnu).T
                nu = nu + dnu
            return dW, nu, float(-(gW * dW).sum())

        while True:                                              # barrier loop: μ → 0
            outer += 1
            R = Q + mu * Z if nZ else Q
            final = not nZ or mu * nZ <= tol
            rel_prev, stalled = np.inf, 0
            while True:                                          # centring by damped Newton
                dW, nu, lam2 = newton(P, R)
                dP = Phi @ dW
                rel = float(np.abs(dP[supp] / P[supp]).max())    # relative Newton step on the support
                if final:
                    small = lam2 / 2 <= 1e-2 * tol                # centring error ≪ the gap tolerance
                    stalled = stalled + 1 if small and rel > 0.5 * rel_prev else 0
                    if (small and rel <= 1e-11) or stalled >= 3:
                        break                                    # converged, or at the rounding floor
                elif lam2 / 2 <= 1e-9:
                    break
                if steps >= max_newton:
                    status = "max_iter"
                    break
                steps += 1
                rel_prev = rel
                neg = dP < 0
                t = min(1.0, 0.99 * float(np.min(-P[neg] / dP[neg]))) if neg.any() else 1.0
                # Armijo backtracking (f(P + t dP) − f(P) = −Σ R log1p(t dP/P), exact to rounding);
                # below λ² = 1e-14 decreases are at rounding level and the full step is taken
                while lam2 > 1e-14 and t > 1e-12 and -np.sum(R * np.log1p(t * dP / P)) > -0.25 * t * lam2:
                    t *= 0.5
                W = W + t * dW
                P = P + t * dP      # not Φ @ W: rounding then scales with the step, and P stays > 0
            if final or status != "optimal":
                break
            mu /= shrink

        # Optimality certificate (see EffectiveInfo): multipliers Λ = μ/p on the q(xy) = 0 entries
        Lam = mu * Z / P
        newton_dec = float(np.sqrt(abs(lam2)))      # a rounding-level λ² < 0 counts by its size
        primal = float(max(np.abs(P.sum(axis=1) - 1).max(), np.abs(P[group] - Phi_all @ W).max(),
                           max(0.0, -P.min())))
        compl = float((Lam * P).max()) if nZ else 0.0
        kkt = max(newton_dec, primal, compl)
        if status == "optimal" and (newton_dec ** 2 / 2 > tol or mu * nZ > tol or primal > 1e-9):
            status = "inaccurate"
        if status != "optimal":
            warnings.warn(f"effective(chi={chi}): solver status {status}, KKT residual {kkt:.2e}", RuntimeWarning,
                          stacklevel=2)
        out = np.zeros((n_rows, n_y))
        out[:, cols] = P[group]
        if not return_info:
            return out
        info = EffectiveInfo(chi, chi_used, status, self.kl_to(out), steps, outer, mu, mu * nZ, newton_dec, rel,
                             primal, compl, kkt, d, time.perf_counter() - t0)
        return out, info

    def family_basis(self, chi: int) -> np.ndarray:
        """An orthonormal basis, in V-coordinates, of span{√q, ṽ_0..ṽ_{χ-1}}: the history
        features 1, φ_0..φ_{χ-1} of the family H_χ (Notation page § Truncation, the Choice), shape (|Σ^k|, χ or χ+1).
        The constant is appended by two Gram–Schmidt passes unless it already lies in the span."""
        s = self._sqrt_q
        B = self.v_tilde[:, :chi]
        res = s - B @ (B.T @ s)
        res -= B @ (B.T @ res)                              # second Gram-Schmidt pass
        if np.linalg.norm(res) > 1e-9:                      # 1 ∉ span of the kept features
            B = np.column_stack([B, res / np.linalg.norm(res)])
        return B

    # -- the paper's literal ordering of mode pairs (§4.5) ---------------------------------
    def constant_coordinates(self) -> np.ndarray:
        """Coordinates of the constant function 1 in the features: 1 = Σ_α c_α φ_α with
        c_α = σ_α ⟨u_α, 1⟩ (from Mᵀ1 = √q, i.e. Σ_y q(y|x) = 1), shape (n_modes,)."""
        return self.sigma * self.u.sum(axis=0)

    def literal_family_distance(self, chi: int) -> dict:
        """How far the paper's literal truncation is from containing any conditional distribution.

        §4.5 orders the mode pairs (α, β) (largest σ first) and keeps span{e_αβ : α < χ, all β}
        (cutting inside a block α adds some e_{χβ}, which changes nothing below). A conditional
        p(·|x) = Σ_{α<χ} φ_α(x) w_α has row sums Σ_α φ_α(x) ⟨w_α, 1⟩, so it exists iff the constant
        1 lies in span{φ_α : α < χ}; then that span equals the book's H_χ (which adds 1 ⊗ u_β),
        and otherwise P ∩ span{e_αβ : α < χ} is empty. Returns the L²(q) distance of 1 from the
        span two ways: ``projection`` (least squares on the features) and ``spectral``
        (√Σ_{α≥χ} c_α², :meth:`constant_coordinates`; needs all modes), and ``empty`` (distance >
        ``1e-9``)."""
        chi = self.check_chi(chi)
        s = self._sqrt_q
        B = self.v_tilde[:, :chi]
        res = s - B @ (B.T @ s)
        res -= B @ (B.T @ res)
        proj = float(np.linalg.norm(res))                   # ‖1 − Π1‖ in L²(q) = Euclidean norm in ṽ-coordinates
        spec = float(np.sqrt(np.sum(self.constant_coordinates()[chi:] ** 2))) if self.complete else float("nan")
        return {"projection": proj, "spectral": spec, "empty": proj > 1e-9}

    # -- Remark 4.11: the adjoint ---------------------------------------------------------
    def adjoint_errors(self, n_random: int = 8, rng=0) -> dict:
        """Remark 4.11 numerically. Q[y, x] = q(y|x) is C: V_k → R^{Σ^l} in the word bases; its
        adjoint for ⟨·,·⟩_V on the domain and the dot product on the codomain is C† = G⁻¹Qᵀ with G
        the Gram matrix ⟨e_x, e_x'⟩_V = δ/q(x), so C† = diag(q) Qᵀ. Then CC† = Q diag(q) Qᵀ = MMᵀ,
        and the SVD of C between inner-product spaces is the SVD of M: C v_α = σ_α u_α and
        C† u_α = σ_α v_α with v_α = diag(√q) ṽ_α (0 in exact arithmetic):

        ``adjoint``   max over random a ∈ V_k, b ∈ R^{Σ^l} of |⟨Ca, b⟩ − ⟨a, C†b⟩_V| / (‖a‖_V ‖b‖)
        ``gram``      max |CC† − MMᵀ| / σ_0²
        ``triples``   max of |C v_α − σ_α u_α| and |C† u_α − σ_α v_α|_V over the modes"""
        rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
        cond = self.conditional
        Q = (cond.toarray() if sp.issparse(cond) else cond).T               # (|Σ^l|, |Σ^k|)
        G = np.diag(1.0 / self.q_x)                                          # ⟨e_x, e_x'⟩_V
        Cd = np.linalg.solve(G, Q.T)                                         # C† = G⁻¹ Qᵀ
        worst = 0.0
        for _ in range(n_random):
            a, b = rng.standard_normal(Q.shape[1]), rng.standard_normal(Q.shape[0])
            na = np.sqrt(self.inner_V(a, a))
            worst = max(worst, abs(float(b @ (Q @ a)) - self.inner_V(a, Cd @ b)) / (na * np.linalg.norm(b)))
        M = self.matrix
        M = M.toarray() if sp.issparse(M) else M
        gram = float(np.abs(Q @ Cd - M @ M.T).max() / self.sigma[0] ** 2)
        V = self.v
        t1 = np.abs(Q @ V - self.u * self.sigma).max()
        t2 = np.abs((Cd @ self.u - V * self.sigma) / self._sqrt_q[:, None]).max()   # V-norm coordinates
        return {"adjoint": float(worst), "gram": gram, "triples": float(max(t1, t2))}

    # -- features, checks and truncation diagnostics ------------------------------------
    def features(self, modes=None) -> np.ndarray:
        """The right singular functions φ_α(x) = ⟨v_α, e_x⟩_V = ṽ_α(x)/√q(x), shape (|Σ^k|, n):
        the features through which mode α reads a history (orthonormal in L²(Σ^k, q))."""
        a = self._indices(modes, self.n_modes, "modes")
        return self.v_tilde[:, a] / self._sqrt_q[:, None]

    def conditional_entropy(self) -> float:
        """H(Y|X) = −Σ q(xy) log q(y|x) in nats (= H(Y) − I(X; Y))."""
        J = self.joint.tocoo() if sp.issparse(self.joint) else None
        if J is not None:
            x, qxy = J.row, J.data
        else:
            x, y = np.nonzero(self.joint)
            qxy = self.joint[x, y]
        return float(-np.sum(qxy * np.log(qxy / self.q_x[x])))

    def mutual_information(self) -> float:
        """I(X; Y) = Σ q(xy) log(q(xy) / (q(x) q(y))) in nats: the KL of q(·|·) from the
        x-independent q(y), i.e. KL(q ‖ q^(0)) under the book's Choice."""
        J = self.joint.tocoo() if sp.issparse(self.joint) else None
        if J is not None:
            x, y, qxy = J.row, J.col, J.data
        else:
            x, y = np.nonzero(self.joint)
            qxy = self.joint[x, y]
        return float(np.sum(qxy * np.log(qxy / (self.q_x[x] * self.q_y[y]))))

    def top_sigma_bounds(self) -> tuple[float, float]:
        """(‖q(y)‖₂, √max_y q(y)): lower and upper bounds on the largest singular value σ_0.

        Lower: ṽ = √q(x) is a unit vector with M ṽ = q(y). Upper: by Cauchy–Schwarz with the
        weights q(y|x), (Σ_x q(y|x) √q(x) ṽ(x))² ≤ q(y) Σ_x q(y|x) ṽ(x)², and summing over y
        gives ‖M ṽ‖² ≤ max_y q(y) ‖ṽ‖². So σ_0² ≤ max_y q(y) ≤ 1."""
        return float(np.linalg.norm(self.q_y)), float(np.sqrt(self.q_y.max()))

    def mode_basis_stack(self, max_entries: int = 2 * 10 ** 7) -> np.ndarray:
        """Every e_{αβ} of Def 4.13 (α over the completed basis of V_k, β over that of R^{Σ^l}),
        stacked in the order (α, β) → α·|Σ^l| + β: shape (|Σ^k|·|Σ^l|, |Σ^k|, |Σ^l|)."""
        Vf, Uf = self.full_bases()
        n_x, n_y = self.shape
        if (n_x * n_y) ** 2 > max_entries:
            raise ValueError(f"the mode basis has {(n_x * n_y) ** 2:.2e} entries (> {max_entries:.0e}); "
                             "check Lemma 4.14 on a smaller (k, l)")
        feats = Vf / self._sqrt_q[:, None]                          # ⟨v_α, e_x⟩_V
        return np.einsum("xa,yb->abxy", feats, Uf).reshape(n_x * n_y, n_x, n_y)

    def identity_errors(self, mode_basis: bool = True, block: int | None = None,
                        max_propensities: int = 5 * 10 ** 8) -> dict:
        """Numerical errors of the identities of §4 on this joint (all 0 in exact arithmetic):

        ``reconstruction``  max |Σ_α σ_α u_α ṽ_αᵀ − M|                       (the SVD, §4.3)
        ``orthonormal_u``   max |UᵀU − I|;  ``orthonormal_v`` max |⟨v_α, v_β⟩_V − δ|
        ``lemma_4_10``      max_{x,y} |Σ_α ρ_α(y|x) − q(y|x)|      (propensities, in blocks of modes; over
                            ``lemma_4_10_histories`` histories, all of them unless that exceeds
                            ``max_propensities`` propensity entries)
        ``parseval``        |Σ_α σ_α² − ‖q(·|·)‖²_H|  (‖q‖²_H = Σ_x q(x) Σ_y q(y|x)²)
        ``lemma_4_14``      max |⟨e_αβ, e_α'β'⟩_H − δδ|         (only with ``mode_basis=True``)
        ``eq_41``           max |⟨q, e_αβ⟩_H − σ_α δ_αβ|          (only with ``mode_basis=True``)
        """
        if not self.complete:
            raise ValueError("identity checks need all modes: build with Modes.from_joint")
        cond = self.conditional
        cond = cond.toarray() if sp.issparse(cond) else cond
        M = self.matrix
        M = M.toarray() if sp.issparse(M) else M
        r = self.n_modes
        out = {"reconstruction": float(np.abs((self.u * self.sigma) @ self.v_tilde.T - M).max()),
               "orthonormal_u": float(np.abs(self.u.T @ self.u - np.eye(r)).max()),
               "orthonormal_v": float(np.abs(self.v.T @ (self.v / self.q_x[:, None]) - np.eye(r)).max())}
        # Lemma 4.10 by summing the propensity arrays themselves, over at most max_propensities
        # entries (r · histories · |Σ^l|): beyond that, on evenly spaced histories (always including
        # the rarest one, where rounding is worst); ``lemma_4_10_histories`` says how many.
        n_x, n_y = self.shape
        n_hist = int(min(n_x, max(1, max_propensities // (r * n_y))))
        hist = np.arange(n_x) if n_hist == n_x else np.unique(
            np.r_[np.linspace(0, n_x - 1, n_hist - 1).astype(int), np.argmin(self.q_x)])
        total = np.zeros((len(hist), n_y))
        if block is None:                                            # ~5·10^6 propensities per block
            block = max(1, 5 * 10 ** 6 // (len(hist) * n_y))
        for start in range(0, r, block):
            total += self.propensity(modes=range(start, min(start + block, r)), histories=hist).sum(axis=0)
        out["lemma_4_10"] = float(np.abs(total - cond[hist]).max())
        out["lemma_4_10_histories"] = len(hist)
        out["parseval"] = abs(float(np.sum(self.sigma ** 2)) - float(np.einsum("x,xy->", self.q_x, cond ** 2)))
        if mode_basis:
            E = self.mode_basis_stack()
            n = E.shape[0]
            flat = E.reshape(n, -1)
            w = np.repeat(self.q_x, self.shape[1])
            gram = flat @ (flat * w).T                               # ⟨e_αβ, e_α'β'⟩_H
            out["lemma_4_14"] = float(np.abs(gram - np.eye(n)).max())
            coeff = (flat @ (w * cond.ravel())).reshape(self.shape)  # ⟨q, e_αβ⟩_H, rows α, columns β
            target = np.zeros(self.shape)
            np.fill_diagonal(target, np.r_[self.sigma, np.zeros(min(self.shape) - r)])
            out["eq_41"] = float(np.abs(coeff - target).max())
        return out

    def naive_negative_mass(self, chi: int) -> dict:
        """How far the unclipped naive truncation q̃_χ (Remark 4.18) is from a distribution:
        ``negative_mass`` Σ_x q(x) Σ_y max(−q̃_χ(y|x), 0), ``negative_rows`` the q-weight of the
        histories with some negative entry, ``row_sum_error`` max_x |Σ_y q̃_χ(y|x) − 1|."""
        p = self.naive_truncation(chi)
        neg = np.clip(-p, 0.0, None)
        return {"negative_mass": float(self.q_x @ neg.sum(axis=1)),
                "negative_rows": float(self.q_x @ (neg.max(axis=1) > 0)),
                "row_sum_error": float(np.abs(p.sum(axis=1) - 1).max())}

    def family_residual(self, p, chi: int) -> float:
        """Distance of a conditional p from the subspace H_χ of the book's Choice: the largest
        entry of p minus its H-orthogonal projection onto functions c + Σ_{α<χ} φ_α(x) w_α
        (columns of p regressed on the features 1, φ_0..φ_{χ-1} in L²(q)). 0 iff p ∈ H_χ."""
        chi = min(self.check_chi(chi), self.rank)
        p = np.asarray(p.toarray() if sp.issparse(p) else p, dtype=np.float64)
        feats = np.column_stack([np.ones(self.shape[0]), self.features(range(chi))])
        w = self._sqrt_q[:, None]
        coef, *_ = np.linalg.lstsq(w * feats, w * p, rcond=None)
        return float(np.abs(feats @ coef - p).max())

    def projection_residual(self, chi: int) -> float:
        """max_{α<χ, β} |⟨q − q̃_χ, e_αβ⟩_H|: the naive truncation q̃_χ = Σ_{α<χ} σ_α e_αα is the
        H-orthogonal projection of q(·|·) onto span{e_αβ : α < χ} (0 up to rounding)."""
        chi = self.check_chi(chi)
        if chi == 0:
            return 0.0
        Vf, Uf = self.full_bases()
        cond = self.conditional
        cond = cond.toarray() if sp.issparse(cond) else cond
        diff = cond - self.naive_truncation(chi)
        feats = Vf[:, :chi] / self._sqrt_q[:, None]
        coeff = feats.T @ (self.q_x[:, None] * diff) @ Uf         # ⟨q − q̃, e_αβ⟩_H
        return float(np.abs(coeff).max())

    def truncation_curve(self, chis=None) -> "TruncationCurve":
        """KL(q ‖ q^(χ)) (Def 4.16, the Choice) and KL(q ‖ clipped naive truncation) (Remark 4.18,
        eq. 44) for each χ (default 0..n_modes), with the unclipped truncation's negative mass."""
        chis = list(range(self.n_modes + 1)) if chis is None else [self.check_chi(c) for c in chis]
        kl_eff, kl_naive, neg, infos = [], [], [], []
        solved = {}  # effective() caps χ at the rank: every χ >= rank is one and the same problem
        for chi in chis:
            key = min(self.gap_cutoff(chi), self.rank)
            if key not in solved:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", UserWarning)    # a tie: the curve repeats the cluster's end
                    solved[key] = self.effective(chi, return_info=True)[1]
            info = solved[key]
            kl_eff.append(info.kl)
            infos.append(info)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)     # dead rows become uniform (documented)
                kl_naive.append(self.kl_to(self.naive_truncation(chi, clip=True)))
            neg.append(self.naive_negative_mass(chi)["negative_mass"])
        return TruncationCurve(np.array(chis), np.array(kl_eff), np.array(kl_naive), np.array(neg), infos,
                               self.rank)

    def __repr__(self) -> str:
        kind = "all" if self.complete else f"top {self.n_modes} ({self.method})"
        return (f"Modes({self.shape[0]} histories × {self.shape[1]} continuations, {kind} modes, "
                f"σ_0 = {self.sigma[0]:.4g}, rank {self.rank})")


@dataclass
class TruncationCurve:
    """``Modes.truncation_curve``: per cutoff χ, KL(q ‖ q^(χ)) (``kl_effective``), KL(q ‖ clipped
    naive truncation) (``kl_naive``, +inf where clipping zeroes an entry with q(xy) > 0) and the
    negative mass of the unclipped naive truncation; ``infos`` are the solver diagnostics."""

    chis: np.ndarray
    kl_effective: np.ndarray
    kl_naive: np.ndarray
    negative_mass: np.ndarray
    infos: list
    rank: int

    @property
    def max_increase(self) -> float:
        """max_χ KL(q‖q^(χ+1)) − KL(q‖q^(χ)) (≤ 0 up to solver tolerance: P_χ ⊂ P_{χ+1})."""
        return float(np.diff(self.kl_effective).max()) if len(self.chis) > 1 else 0.0

    def first_exact(self, atol: float = 1e-9) -> int:
        """The smallest χ with KL(q ‖ q^(χ)) ≤ atol."""
        hit = np.flatnonzero(self.kl_effective <= atol)
        return int(self.chis[hit[0]]) if hit.size else -1


# Comparing modes (planted predictions, history lengths, truncated families) is lib.mode_comparisons.
__getattr__ = forward_moved(__name__, {name: "lib.mode_comparisons" for name in (
    "planted_mode_errors",
    "history_lift",
    "HistoryComparison",
    "compare_history_lengths",
    "TruncatedFamily",
    "truncated_family",
)})
