"""Modes of real text: Chen & Murfet's Appendix B method, and the book's weighted variant.

The pipeline (paper, App. B; Notation page § Bigrams, and the modes of real text):

1. **Count** (:func:`count_sequences`). Every position of a document where a history
   x ∈ Σ^k is followed by a continuation y ∈ Σ^l gives one co-occurrence c(xy). Keep the
   histories seen at least ``min_x_count`` times, then the continuations seen at least
   ``min_y_count`` times *after a kept history* (the paper's order: x first, then y). Histories
   left with no kept continuation are dropped too, so both operators below share one x-set.
2. **Conditional matrix** (:func:`conditional_matrix`). Laplace-smoothed conditionals with
   rows x and columns y (the paper's orientation),

       P(y|x) = (c(xy) + a) / (c(x) + a·N_Y),

   c(x) every occurrence of x (followed by l tokens in its document, kept y or not), N_Y the
   number of kept continuations. **Choice** (the paper calls the matrix "large" and "sparse",
   so it cannot hold the formula in every cell): ``smoothing="observed"`` (default) applies the
   formula to the observed pairs only, a sparse matrix; ``"full"`` applies it to every cell,
   held without densifying as the sparse matrix plus the rank-one term a·d 1ᵀ,
   d(x) = 1/(c(x) + a·N_Y); ``"none"`` is c(xy)/c(x).
3. **Weighted operator** (:func:`weighted_matrix`, :func:`weighted_modes`): the book's
   M[y, x] = q(xy)/√q(x) (Notation page § The conditional operator) of the empirical joint q(xy) = c(xy)/Σc over kept pairs —
   the matrix of ``lib.modes.Modes.top(counts.joint(), r)``, decomposed by the same rule as P.
4. **Top components** (:func:`top_components`): the r largest singular triples, by a randomized
   SVD (Halko et al. 2011) when the smaller side exceeds ``RANDOMIZED_ABOVE`` = 5000, else by
   ARPACK's Lanczos bidiagonalisation (``scipy.sparse.linalg.svds``): the paper's rule.

Orientation — which vector is "left". The paper's matrix P has rows x, so its *left* singular
vectors live on histories and its *right* ones on continuations. The book's M has rows y
(it is the matrix of C: V_k → R^{Σ^l}), so its *left* vectors u_α live on continuations and its
*right* vectors ṽ_α on histories. :class:`EmpiricalModes` therefore names the two sides
``x_vectors`` and ``y_vectors`` and keeps ``left``/``right`` only as aliases.

A useful identity for reading tables. For any SVD A = Σ σ a bᵀ of a row-stochastic-like matrix
with rows x, the x-side loading is the conditional mean of the y-side loading:
a_α(x) = Σ_y A[x, y] b_α(y) / σ_α. For M in V_k coordinates it reads
⟨v_α, e_x⟩_V = Σ_y q(y|x) u_α(y) / σ_α. So every history that is always followed by the same
continuation y* gets the same x-loading u(y*)/σ: a collective bigram (Def 5.5) shows up as a
set of histories *tied* at the top loading with one dominant continuation.

Measures of "perturbed collective bigram" (:meth:`EmpiricalModes.component`): for a mode with
dominant continuation y* (largest |y-loading|, made positive), its ``y_mass`` = b(y*)² (share of
the y-side's squared norm on y*), the best collective set S* (the upper level set of the x-side
function g that maximises the cosine between g and the indicator 1_S, in the x-side geometry:
weights 1 for P, q(x) for M) and the **bigram overlap** |b(y*)| · cos(g, 1_{S*}) ∈ [0, 1]:
the cosine between the mode and the exact collective-bigram mode of (S*, y*) (Lemma 5.6), 1 iff
the mode is one. Data-side, Def 5.5 (a) and (b) become q(y*|S*) and q(S*|y*) (both 1 for an
exact collective bigram).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from .book.tables import Raw, markdown_table, md_escape  # noqa: F401  (Raw, markdown_table: used by chapters as em.*)
from .book.threads import solver_threads
from .text.ngrams import count_ngrams

RANDOMIZED_ABOVE = 5000      # the paper's rule: randomized SVD when min(shape) > 5000
SMOOTHINGS = ("observed", "full", "none")
OPERATORS = ("conditional", "weighted")


# ---------------------------------------------------------------------------
# 1. Counting and thresholds
# ---------------------------------------------------------------------------

@dataclass(eq=False)
class SequenceCounts:
    """Co-occurrence counts c(xy) after the thresholds of App. B (rows x, columns y).

    prefixes : (n_x, k) kept histories x, lexicographic
    suffixes : (n_y, l) kept continuations y, lexicographic
    counts   : (n_x, n_y) int64 CSR, c(xy) over kept pairs
    x_total  : (n_x,) c(x), every occurrence of x followed by l tokens in its document
    n_windows: number of (k+l)-windows counted before the thresholds
    """

    k: int
    l: int
    prefixes: np.ndarray
    suffixes: np.ndarray
    counts: sp.csr_matrix
    x_total: np.ndarray
    n_windows: int
    min_x_count: int
    min_y_count: int
    n_x_seen: int = 0
    n_y_seen: int = 0

    @property
    def shape(self) -> tuple[int, int]:
        return self.counts.shape

    @property
    def total(self) -> int:
        """Σ c(xy) over kept pairs."""
        return int(self.counts.data.sum())

    @property
    def kept_fraction(self) -> float:
        """Share of all counted windows that land on a kept (x, y) pair."""
        return self.total / self.n_windows if self.n_windows else 0.0

    @property
    def x_counts(self) -> np.ndarray:
        """Kept row sums Σ_y c(xy) (the empirical q(x) up to the total)."""
        return np.asarray(self.counts.sum(axis=1)).ravel().astype(np.int64)

    @property
    def y_counts(self) -> np.ndarray:
        return np.asarray(self.counts.sum(axis=0)).ravel().astype(np.int64)

    def joint(self) -> sp.csr_matrix:
        """Empirical joint q(xy) = c(xy) / Σ c over kept pairs (float64 CSR, sums to 1)."""
        q = self.counts.astype(np.float64)
        q.data /= q.data.sum()
        return q


def count_sequences(tokens, k: int, l: int, doc_offsets=None, vocab_size=None, min_x_count: int = 1,
                    min_y_count: int | None = None) -> SequenceCounts:
    """Count k-histories, l-continuations and their co-occurrences, then threshold (App. B, steps 1–4).

    Keeps x with c(x) ≥ min_x_count; then y with Σ_{kept x} c(xy) ≥ min_y_count (default: the
    same threshold); then drops histories with no kept continuation. Windows never cross a
    document boundary (``doc_offsets``)."""
    min_y_count = min_x_count if min_y_count is None else min_y_count
    for name, v in (("min_x_count", min_x_count), ("min_y_count", min_y_count)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    nc = count_ngrams(tokens, k, l, doc_offsets, vocab_size)
    cx = nc.prefix_counts()
    rows = np.flatnonzero(cx >= min_x_count)
    C = nc.counts[rows]
    cy = np.asarray(C.sum(axis=0)).ravel()
    cols = np.flatnonzero(cy >= min_y_count)
    C = C[:, cols].tocsr()
    nonempty = np.flatnonzero(np.diff(C.indptr) > 0)
    C = C[nonempty].tocsr()
    C.sort_indices()
    rows = rows[nonempty]
    return SequenceCounts(k, l, nc.prefixes[rows], nc.suffixes[cols], C.astype(np.int64), cx[rows].astype(np.int64),
                          nc.total(), int(min_x_count), int(min_y_count), len(nc.prefixes), len(nc.suffixes))


# ---------------------------------------------------------------------------
# 2. The paper's conditional matrix
# ---------------------------------------------------------------------------

class SparsePlusRankOne(spla.LinearOperator):
    """A = S + a bᵀ (S sparse), applied without densifying: the fully smoothed matrix."""

    def __init__(self, S, a, b):
        self.S = sp.csr_matrix(S, dtype=np.float64)
        self.St = self.S.T.tocsr()
        self.a, self.b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        super().__init__(np.float64, self.S.shape)

    def _matvec(self, x):
        x = np.asarray(x).ravel()
        return self.S @ x + self.a * (self.b @ x)

    def _rmatvec(self, y):
        y = np.asarray(y).ravel()
        return self.St @ y + self.b * (self.a @ y)

    def _matmat(self, X):
        return self.S @ X + np.outer(self.a, self.b @ X)

    def _rmatmat(self, Y):
        return self.St @ Y + np.outer(self.b, self.a @ Y)

    def _adjoint(self):
        return SparsePlusRankOne(self.St, self.b, self.a)

    def toarray(self) -> np.ndarray:
        return self.S.toarray() + np.outer(self.a, self.b)

    @property
    def nnz(self) -> int:
        return self.S.nnz


def conditional_matrix(counts: SequenceCounts, alpha: float = 1.0, smoothing: str = "observed"):
    """The paper's P(y|x) = (c(xy) + a)/(c(x) + a·N_Y), rows x, columns y (eq. 78).

    smoothing="observed": the formula on observed pairs only (CSR); "full": on every cell
    (a ``SparsePlusRankOne`` operator, exact, never densified); "none": c(xy)/c(x) (CSR)."""
    if smoothing not in SMOOTHINGS:
        raise ValueError(f"smoothing must be one of {SMOOTHINGS}, got {smoothing!r}")
    if not (isinstance(alpha, (int, float)) and alpha >= 0 and math.isfinite(alpha)):
        raise ValueError(f"alpha must be a finite number >= 0, got {alpha!r}")
    n_x, n_y = counts.shape
    C = counts.counts.astype(np.float64)
    a = 0.0 if smoothing == "none" else float(alpha)
    denom = counts.x_total.astype(np.float64) + a * n_y
    d = 1.0 / denom
    S = C.copy()
    if smoothing == "observed":
        S.data += a
    S = (sp.diags(d) @ S).tocsr()
    if smoothing == "full":
        return SparsePlusRankOne(S, a * d, np.ones(n_y))
    return S


# ---------------------------------------------------------------------------
# 3. Top components
# ---------------------------------------------------------------------------

@dataclass
class SVDResult:
    U: np.ndarray          # (m, r) left singular vectors (rows of A)
    s: np.ndarray          # (r,) descending
    Vt: np.ndarray         # (r, n) right singular vectors (columns of A)
    method: str
    seconds: float


def choose_method(shape, randomized_above: int = RANDOMIZED_ABOVE) -> str:
    """The paper's rule: 'randomized' if min(shape) > randomized_above, else 'lanczos'."""
    return "randomized" if min(shape) > randomized_above else "lanczos"


def top_components(A, r: int = 100, method: str = "auto", seed: int = 0, n_iter: int = 7, n_oversamples: int = 10,
                   randomized_above: int = RANDOMIZED_ABOVE) -> SVDResult:
    """The r largest singular triples of A (sparse matrix, dense array or LinearOperator).

    method: "auto" (the paper's rule, :func:`choose_method`), "lanczos" (ARPACK ``svds`` with a
    start vector drawn from ``seed``), "randomized" (:func:`randomized_svd`: r + n_oversamples
    Gaussian probes, n_iter subspace iterations) or "dense" (LAPACK, small A only).
    Singular values are sorted descending; signs are left as the solver returns them. BLAS runs on
    one thread (:func:`lib.book.threads.solver_threads`)."""
    m, n = A.shape
    if not (isinstance(r, (int, np.integer)) and 1 <= r < min(m, n)):
        raise ValueError(f"r must be an integer with 1 <= r < min{A.shape} = {min(m, n)}, got {r!r}")
    if method == "auto":
        method = choose_method(A.shape, randomized_above)
    rng = np.random.default_rng(seed)
    if method not in ("lanczos", "randomized", "dense"):
        raise ValueError(f"method must be 'auto', 'lanczos', 'randomized' or 'dense', got {method!r}")
    t0 = time.perf_counter()
    with solver_threads():
        if method == "lanczos":
            U, s, Vt = spla.svds(A, k=int(r), v0=rng.standard_normal(min(m, n)), solver="arpack")
        elif method == "randomized":
            U, s, Vt = randomized_svd(A, int(r), n_oversamples, n_iter, rng)
        else:
            D = A.toarray() if hasattr(A, "toarray") else np.asarray(A)
            U, s, Vt = np.linalg.svd(D, full_matrices=False)
            U, s, Vt = U[:, :r], s[:r], Vt[:r]
    seconds = time.perf_counter() - t0
    order = np.argsort(s)[::-1]
    return SVDResult(np.ascontiguousarray(U[:, order]), s[order], np.ascontiguousarray(Vt[order]), method, seconds)


def _orthonormalize(Y: np.ndarray) -> np.ndarray:
    """Orthonormal basis of the columns of a tall Y: Cholesky QR twice (CholQR2; BLAS-3, about
    3× faster than Householder QR here), falling back to QR if YᵀY is numerically singular."""
    try:
        for _ in range(2):
            R = np.linalg.cholesky(Y.T @ Y)
            Y = sla.solve_triangular(R, Y.T, lower=True).T
        return np.ascontiguousarray(Y)
    except np.linalg.LinAlgError:
        return np.linalg.qr(Y)[0]


def randomized_svd(A, r: int, n_oversamples: int = 10, n_iter: int = 7, rng=None):
    """Top-r SVD of A (m × n: sparse, dense or LinearOperator) by randomized range finding with
    subspace iteration (Halko, Martinsson & Tropp 2011, Alg. 4.4 and 5.1), re-orthonormalised by
    CholQR2 after every product. Returns (U (m, r), s (r,), Vt (r, n))."""
    rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    m, n = A.shape
    At = A.T.tocsr() if sp.issparse(A) else A.T
    ell = min(r + n_oversamples, m, n)
    Q = _orthonormalize(np.asarray(A @ rng.standard_normal((n, ell))))
    for _ in range(n_iter):
        Z = _orthonormalize(np.asarray(At @ Q))
        Q = _orthonormalize(np.asarray(A @ Z))
    Bt = np.asarray(At @ Q)                                  # (QᵀA)ᵀ, n × ell
    Vb, s, UbT = np.linalg.svd(Bt, full_matrices=False)     # QᵀA = Ub s Vbᵀ
    return Q @ UbT.T[:, :r], s[:r], Vb[:, :r].T


def singular_value_agreement(s_a, s_b, n: int | None = None) -> float:
    """max_i |s_a[i] − s_b[i]| / s_a[0] over the first n values (all common ones by default)."""
    m = min(len(s_a), len(s_b)) if n is None else n
    s_a, s_b = np.asarray(s_a)[:m], np.asarray(s_b)[:m]
    return float(np.max(np.abs(s_a - s_b)) / s_a[0])


# ---------------------------------------------------------------------------
# 4. Modes with named sides, and their summaries
# ---------------------------------------------------------------------------

@dataclass
class Component:
    """One component read the way of Examples 5.7–5.11 and measured as a perturbed collective bigram."""

    index: int
    sigma: float
    y_top: np.ndarray            # indices of the continuations with the largest |y-loading|
    y_loadings: np.ndarray
    x_top: np.ndarray            # indices of the histories with the largest |x-loading| (function values)
    x_loadings: np.ndarray
    n_tied: int                  # histories whose x-loading is within tie_rtol of the top one (same sign)
    tie_share: float             # n_tied / n_x
    tied_mass: float             # share of the x-side squared norm on the tied histories
    y_star: int
    y_mass: float                # b(y*)²
    best_set_size: int           # |S*|
    x_set_cosine: float          # cos(g, 1_{S*}) in the x-side geometry
    bigram_overlap: float        # |b(y*)| · cos(g, 1_{S*})
    q_y_given_S: float           # Def 5.5 (a) on the data: c(S* y*)/c(S*)
    q_S_given_y: float           # Def 5.5 (b): c(S* y*)/c(y*)


@dataclass
class EmpiricalModes:
    """Top components of an empirical operator, with their history (x) and continuation (y) sides.

    operator="conditional": the paper's P (rows x): left vectors = x side, right = y side.
    operator="weighted":    the book's M (rows y): left vectors u_α = y side, right ṽ_α = x side.
    x_vectors are Euclidean-unit in either case (U of P, ṽ of M); ``x_function(α)`` is the x-side as a
    function of the history: for P the same vector, for M the V_k coordinate ⟨v_α, e_x⟩_V = ṽ_α(x)/√q(x).
    ``x_weights`` is the measure in which the functions are unit: 1 for P, q(x) for M.
    Signs: each mode is flipped so that its largest |y-loading| is positive."""

    counts: SequenceCounts
    operator: str
    sigma: np.ndarray
    x_vectors: np.ndarray
    y_vectors: np.ndarray
    x_weights: np.ndarray
    method: str
    seconds: float
    smoothing: str | None = None
    alpha: float | None = None

    def __post_init__(self):
        j = np.argmax(np.abs(self.y_vectors), axis=0)
        flip = self.y_vectors[j, np.arange(self.y_vectors.shape[1])] < 0
        self.y_vectors[:, flip] *= -1
        self.x_vectors[:, flip] *= -1

    @property
    def n_modes(self) -> int:
        return len(self.sigma)

    @property
    def left(self) -> np.ndarray:
        """Left singular vectors of the operator's matrix (x side for P, y side for M)."""
        return self.x_vectors if self.operator == "conditional" else self.y_vectors

    @property
    def right(self) -> np.ndarray:
        """Right singular vectors (y side for P, x side ṽ for M)."""
        return self.y_vectors if self.operator == "conditional" else self.x_vectors

    def x_function(self, alpha: int) -> np.ndarray:
        return self.x_vectors[:, alpha] / np.sqrt(self.x_weights)

    def x_order(self, alpha: int, tie_rtol: float = 1e-2) -> np.ndarray:
        """Histories by decreasing |x-loading| (the function ``x_function``), ties broken by count:
        loadings within ``tie_rtol`` of the top one count as tied (the tie of :meth:`component`),
        and so do loadings equal to 9 significant digits elsewhere; among tied histories the more
        frequent one (larger c(x)) comes first, then the lexicographic order."""
        g = np.abs(self.x_function(alpha))
        top = g.max()
        if top == 0:
            return np.arange(len(g))
        key = np.round(g / top, 9)
        key[key >= 1 - tie_rtol] = 1.0
        return np.lexsort((np.arange(len(g)), -self.counts.x_total, -key))

    def component(self, alpha: int, n_top: int = 8, tie_rtol: float = 1e-2) -> Component:
        """Summary of mode ``alpha`` (see the module docstring for the measures)."""
        if not 0 <= alpha < self.n_modes:
            raise IndexError(f"mode {alpha} out of range [0, {self.n_modes})")
        b = self.y_vectors[:, alpha]
        g = self.x_function(alpha)
        w = self.x_weights
        y_top = np.argsort(-np.abs(b), kind="stable")[:n_top]
        x_top = self.x_order(alpha, tie_rtol)[:n_top]
        y_star = int(y_top[0])
        top = g[int(np.argmax(np.abs(g)))]      # the tie is measured from the largest |loading| itself
        tied = np.flatnonzero(np.sign(g) == np.sign(top)) if top != 0 else np.arange(len(g))
        tied = tied[np.abs(g[tied]) >= (1 - tie_rtol) * abs(top)]
        norm2 = float(np.sum(w * g * g))
        tied_mass = float(np.sum(w[tied] * g[tied] ** 2) / norm2)
        S, cos = best_collective_set(g, w)
        C = self.counts.counts
        c_Sy = float(C[S][:, y_star].sum())
        c_S = float(self.counts.x_counts[S].sum())
        c_y = float(self.counts.y_counts[y_star])
        return Component(alpha, float(self.sigma[alpha]), y_top, b[y_top], x_top, g[x_top], len(tied),
                         len(tied) / len(g), tied_mass, y_star, float(b[y_star] ** 2), len(S), cos,
                         abs(float(b[y_star])) * cos, c_Sy / c_S if c_S else 0.0, c_Sy / c_y if c_y else 0.0)

    def bigram_overlaps(self) -> np.ndarray:
        """bigram_overlap of every mode (see :meth:`component`)."""
        out = np.empty(self.n_modes)
        for a in range(self.n_modes):
            b = self.y_vectors[:, a]
            _, cos = best_collective_set(self.x_function(a), self.x_weights)
            out[a] = np.abs(b).max() * cos
        return out


def best_collective_set(g, w) -> tuple[np.ndarray, float]:
    """The upper level set S of g maximising cos(g, 1_S) = Σ_S w g / (‖g‖_w √(Σ_S w)).

    The optimum over all sets is an upper level set of g (exchange argument), so scanning the
    histories by decreasing g is exact. Returns (indices of S, the cosine; 0 if g ≤ 0)."""
    g, w = np.asarray(g, dtype=np.float64), np.asarray(w, dtype=np.float64)
    order = np.argsort(-g, kind="stable")
    num = np.cumsum(w[order] * g[order])
    den = np.sqrt(np.cumsum(w[order]))
    norm = math.sqrt(float(np.sum(w * g * g)))
    if norm == 0 or g[order[0]] <= 0:
        return order[:0], 0.0
    cos = num / den / norm
    m = int(np.argmax(cos))
    return np.sort(order[:m + 1]), float(cos[m])


def conditional_modes(counts: SequenceCounts, r: int = 100, alpha: float = 1.0, smoothing: str = "observed",
                      method: str = "auto", seed: int = 0, n_iter: int = 7) -> EmpiricalModes:
    """Top-r components of the paper's P (App. B), with named sides (x = left, y = right)."""
    P = conditional_matrix(counts, alpha, smoothing)
    res = top_components(P, r, method, seed, n_iter)
    return EmpiricalModes(counts, "conditional", res.s, res.U, res.Vt.T.copy(), np.ones(counts.shape[0]),
                          res.method, res.seconds, smoothing, float(alpha))


def weighted_matrix(counts: SequenceCounts) -> sp.csr_matrix:
    """The book's M[y, x] = q(xy)/√q(x) (Notation page § The conditional operator) of the empirical joint over kept pairs,
    shape (n_y, n_x) — the same matrix as ``lib.modes.Modes.top(counts.joint(), r).matrix``."""
    J = counts.joint()
    sqrt_q = np.sqrt(np.asarray(J.sum(axis=1)).ravel())
    return (sp.diags(1 / sqrt_q) @ J).T.tocsr()


def weighted_modes(counts: SequenceCounts, r: int = 100, method: str = "auto", seed: int = 0,
                   n_iter: int = 7) -> EmpiricalModes:
    """Top-r modes of M (rows y): y side = left vectors u_α, x side = right vectors ṽ_α."""
    res = top_components(weighted_matrix(counts), r, method, seed, n_iter)
    q_x = counts.x_counts / counts.total
    return EmpiricalModes(counts, "weighted", res.s, res.Vt.T.copy(), res.U, q_x, res.method, res.seconds)


# ---------------------------------------------------------------------------
# 5. Bigram modes of exact languages (Lemmas 5.2, 5.4, 5.6, Remark 5.3)
# ---------------------------------------------------------------------------

@dataclass
class BigramModeCheck:
    """How exactly a planted (collective) bigram (S, y) is a mode of C_{k,l} (Notation page § Bigrams).

    Predicted triple: σ = √q(S), u = e_y, ṽ_S ∝ (√q(x))_{x∈S} (unit; Lemma 5.2 when |S| = 1, 5.6).
    cluster     : computed modes whose σ is within ``tol``·σ_0 of the prediction (more than one
                  when the spectrum is degenerate: then any rotation inside the cluster is an
                  equally valid SVD, and the one aligned with the prediction is used below)
    sigma_error : min_β |σ_β − √q(S)|
    u_error, v_error : largest entry of e_y (resp. ṽ_S) minus its projection on the cluster's left
                  (right) singular subspace
    residual    : largest entry of M ṽ_S − σ e_y and Mᵀ e_y − σ ṽ_S (the singular-triple equations)
    own_propensity_error : max_{x', y'} |ρ_α(y'|x') − 1[x' ∈ S, y' = y]|  (Remark 5.3)
    other_propensity_max : max over modes β ≠ α of |ρ_β(y'|x)| (x ∈ S, any y') and of |ρ_β(y|x')|
                           (any x'): no other mode predicts anything from S, or y from anything
                           (Lemma 5.4, our reading)
    violation   : ``lib.languages.bigram_violation`` (0 when Def 5.1 / 5.5 holds)"""

    kind: str
    size: int
    mode: int
    cluster: int
    sigma_predicted: float
    sigma_computed: float
    sigma_error: float
    u_error: float
    v_error: float
    residual: float
    own_propensity_error: float
    other_propensity_max: float
    violation: float

    @property
    def vector_error(self) -> float:
        return max(self.u_error, self.v_error, self.residual)


def check_bigram_modes(lang, k: int, l: int, modes=None, tol: float = 1e-9) -> list[BigramModeCheck]:
    """Compare the modes that ``lang.predicted_modes()`` (a ``PlantedLanguage``) predicts for
    joint(k, l) with a dense SVD (``lib.modes.Modes.from_joint``; pass ``modes`` to reuse one).
    σ and vector errors come from ``lib.modes.planted_mode_errors``; this adds the propensities."""
    from .languages import bigram_violation
    from .modes import Modes, planted_mode_errors

    joint = lang.joint(k, l)
    if modes is None:
        modes = Modes.from_joint(joint, zero_rows="drop")
    n_x, n_y = modes.shape
    sqrt_q = np.sqrt(modes.q_x)
    M = np.asarray(modes.matrix)
    predicted = lang.predicted_modes()
    out = []
    for p, f in zip(predicted, planted_mode_errors(modes, predicted, cluster_rtol=tol)):
        S, C = f["rows"], f["cluster_modes"]
        # the unit vector of the cluster's left singular subspace closest to the prediction e_y
        c = modes.u[p.col, C]
        u_a = modes.u[:, C] @ c / np.linalg.norm(c) if np.linalg.norm(c) > 0 else modes.u[:, f["index"]]
        # Propensities of the bigram's mode and of all the others, as operators: the mode's part
        # of M is u_a u_aᵀ M and the others' is (I − u_a u_aᵀ) M. This equals σ_a u_a ṽ_aᵀ and the
        # sum over the other modes when σ_a is isolated, and stays exact inside a cluster of nearly
        # equal singular values, where single singular pairs are not determined.
        row = M.T @ u_a
        rho_own = np.outer(row / sqrt_q, u_a)
        target = np.zeros((n_x, n_y))
        target[S, p.col] = 1.0
        rho_other = (M - np.outer(u_a, row)).T / sqrt_q[:, None]
        from_S, to_y = float(np.abs(rho_other[S]).max()), float(np.abs(rho_other[:, p.col]).max())
        a = f["index"]
        out.append(BigramModeCheck(
            p.kind, len(S), a, len(C), p.sigma, float(modes.sigma[a]), f["sigma_error"], f["u_error"], f["v_error"],
            f["pair_error"], float(np.abs(rho_own - target).max()), max(from_S, to_y),
            bigram_violation(joint, p.rows, p.col)))
    return out


# ---------------------------------------------------------------------------
# 6. Context snippets (App. B) and tables
# ---------------------------------------------------------------------------

@dataclass
class Snippet:
    document: int
    position: int                 # stream position of the history's first token
    before: np.ndarray
    x: np.ndarray
    y: np.ndarray
    after: np.ndarray


@dataclass
class SnippetSearch:
    """Result of :func:`context_snippets`: the leading history, the continuations matched, the
    relative loading cut that found them (0.1 = within 10% of the top |y-loading|), the snippets."""

    x_index: int
    y_indices: np.ndarray
    relative_cut: float
    n_occurrences: int
    snippets: list = field(default_factory=list)


def context_snippets(tokens, doc_offsets, em: EmpiricalModes, alpha: int, n_snippets: int = 3, width: int = 50,
                     cuts=(0.1, 0.2, 0.3, 0.4, 0.5), seed: int = 0) -> SnippetSearch:
    """Occurrences in the corpus of component ``alpha`` (App. B): the history x with the largest
    |x-loading| in the Euclidean-unit x vector (U of P, ṽ of M: the singular vector itself, as
    App. B; not the function ṽ/√q(x), which favours rare histories; ties to the more frequent x)
    followed by a continuation y whose |y-loading| is within ``cut`` of the largest
    (cut = 10%, relaxed step by step to 50% until some occurrence is found), with ``width`` tokens
    of context on each side, clipped to the document. Snippets are drawn at random (``seed``)."""
    tokens = np.asarray(tokens)
    offsets = np.asarray(doc_offsets, dtype=np.int64)
    c = em.counts
    k, l = c.k, c.l
    xv = np.abs(em.x_vectors[:, alpha])
    b = em.y_vectors[:, alpha]
    xi = int(np.lexsort((-c.x_total, -np.round(xv / xv.max(), 9)))[0]) if xv.max() > 0 else 0
    x = c.prefixes[xi]
    n = len(tokens)
    # positions where x starts (and is followed by l tokens in the same document)
    ends = np.append(offsets[1:], n)
    doc_of = np.searchsorted(offsets, np.arange(n), side="right") - 1
    starts = np.arange(max(n - k - l + 1, 0))
    ok = starts + k + l <= ends[doc_of[starts]]
    for j in range(k):
        ok &= tokens[starts + j] == x[j]
    starts = starts[ok]
    y_at = np.stack([tokens[starts + k + j] for j in range(l)], axis=1) if starts.size else np.zeros((0, l), int)
    top = np.abs(b).max()
    chosen, used, found = np.zeros(0, int), cuts[-1], np.zeros(0, int)
    for cut in cuts:
        ys = np.flatnonzero(np.abs(b) >= (1 - cut) * top)
        match = np.zeros(len(starts), dtype=bool)
        for yi in ys:
            match |= np.all(y_at == c.suffixes[yi], axis=1)
        if match.any():
            chosen, used, found = ys, cut, starts[match]
            break
    rng = np.random.default_rng(seed)
    pick = np.sort(rng.choice(found, size=min(n_snippets, len(found)), replace=False)) if len(found) else found
    snippets = []
    for s in pick:
        d = int(doc_of[s])
        lo, hi = max(offsets[d], s - width), min(ends[d], s + k + l + width)
        snippets.append(Snippet(d, int(s), tokens[lo:s], tokens[s:s + k], tokens[s + k:s + k + l],
                                tokens[s + k + l:hi]))
    return SnippetSearch(xi, chosen, used, len(found), snippets)


def token_label(tokenizer, seq) -> str:
    """A token sequence as readable text (spaces '␣', newlines '↵'; ``Tokenizer.token_strings``),
    tokens separated by a thin '·' when there are several."""
    return "·".join(tokenizer.token_strings(np.asarray(seq).ravel()))


def component_table(em: EmpiricalModes, alpha: int, tokenizer, n_top: int = 8, tie_rtol: float = 1e-2) -> str:
    """Markdown for one component, in the manner of Examples 5.7–5.11: a header line (σ, ties,
    bigram measures) and a table of the leading continuations (y side) and histories (x side)
    with their loadings (x side as the function ⟨v, e_x⟩_V for M, the left vector for P) and the
    count c(x) of each history; histories tied at the top loading are listed by decreasing c(x)
    (:meth:`EmpiricalModes.x_order`)."""
    cp = em.component(alpha, n_top, tie_rtol)
    c = em.counts
    side_y = "right" if em.operator == "conditional" else "left"
    side_x = "left" if em.operator == "conditional" else "right"
    name = "P" if em.operator == "conditional" else "M"
    head = (f"**{name}, (k, l) = ({c.k}, {c.l}), component {alpha + 1}: σ = {cp.sigma:.4g}.** "
            f"{cp.n_tied} of {c.shape[0]} histories ({100 * cp.tie_share:.2g}%) are tied at the top x-loading "
            f"(within {100 * tie_rtol:g}%); y-mass on the dominant continuation {cp.y_mass:.2f}; "
            f"bigram overlap {cp.bigram_overlap:.2f} with |S\\*| = {cp.best_set_size}; "
            f"q(y\\*|S\\*) = {cp.q_y_given_S:.2f}, q(S\\*|y\\*) = {cp.q_S_given_y:.2f}.")
    from .book.tables import table

    rows = []
    for i in range(n_top):
        yi, xi = cp.y_top[i], cp.x_top[i]
        rows.append([i + 1, token_label(tokenizer, c.suffixes[yi]), f"{cp.y_loadings[i]:+.3f}".replace("-", "−"),
                     token_label(tokenizer, c.prefixes[xi]), f"{cp.x_loadings[i]:+.3g}".replace("-", "−"),
                     int(c.x_total[xi])])
    shown = table(rows, headers=["rank", f"continuation y ({side_y} vector)", "loading", f"history x ({side_x} vector)",
                                 "loading", "c(x)"], align=["--:", ":--", "--:", ":--", "--:", "--:"],
                  name=f"component-{name}-{c.k}{c.l}-{alpha + 1}")
    return head + "\n\n" + shown.data


def snippets_markdown(search: SnippetSearch, tokenizer, counts: SequenceCounts) -> str:
    """The snippets of :func:`context_snippets` as a fenced text block, history in ⟦ ⟧ and
    continuation in ⟨ ⟩ (the fence is longer than any run of backticks or tildes in the text)."""
    x = token_label(tokenizer, counts.prefixes[search.x_index])
    ys = ", ".join(token_label(tokenizer, counts.suffixes[i]) for i in search.y_indices[:6])
    head = (f"Leading history x = “{md_escape(x)}”; continuations within {100 * search.relative_cut:.0f}% of the "
            f"top loading: {md_escape(ys)}{' …' if len(search.y_indices) > 6 else ''}; "
            f"{search.n_occurrences} occurrences in the corpus.")
    if not search.snippets:
        return head + " No occurrence found."
    texts = []
    for s in search.snippets:
        body = (tokenizer.decode(s.before) + "⟦" + tokenizer.decode(s.x) + "⟧⟨" + tokenizer.decode(s.y) + "⟩"
                + tokenizer.decode(s.after))
        texts.append(f"[document {s.document}, token {s.position}]\n…{body}…")
    text = "\n\n".join(texts)
    run = max([len(m) for m in __import__("re").findall(r"`+|~+", text)] + [2]) + 1
    fence = "~" * max(run, 3)
    return head + "\n\n" + fence + "text\n" + text + "\n" + fence


# ---------------------------------------------------------------------------
# 7. Studies the chapter runs (thin wrappers, so that the chapter holds no logic)
# ---------------------------------------------------------------------------

PLANTED_COLLECTIVE = ((0.02, 0.015), (0.01, 0.01, 0.012))
PLANTED_MAX_LENGTH = 4  # k + l of a planted-bigram check (see planted_orders_problem)


def require_sweep_order(orders, sweep_order) -> None:
    """Refuse (:class:`lib.book.parameters.ParameterError`, naming the parameter) a smoothing-sweep
    order [k, l] that is not the (k, l) of one of ``orders`` ([k, l, threshold] each): the sweep
    reads the counts and modes computed for that order."""
    from .book.parameters import ParameterError

    known = [list(o[:2]) for o in orders]
    if list(sweep_order) not in known:
        raise ParameterError(f"parameter 'sweep_order': allowed values are the [k, l] of one of the orders {known}; "
                             f"got {list(sweep_order)!r}")


def planted_orders_problem(orders) -> str | None:
    """Why the (k, l) of :func:`planted_lemma_study` cannot be run, in a sentence, or None.

    The check takes a dense SVD of the planted language's joint over Σ^k × Σ^l. With the default
    bigrams (two absolute, collective ones of two and three histories) the planted alphabet has
    |Σ| = 4 + 7k + 4l tokens (background, reserved history and continuation tokens), so
    k + l = 4 is the longest order whose joint stays within ``lib.languages.DENSE_LIMIT``
    (|Σ|^(k+l) = 29^4 at (3, 1); 33^5 > 2^24 at (3, 2)). Used by the Examples chapter's
    declaration (``validate:``), so that a wrong order is refused before any work."""
    for i, order in enumerate(orders):
        k, l = order
        if k + l > PLANTED_MAX_LENGTH:
            return (f"item [{i}] = {list(order)}: k + l = {k + l} is above {PLANTED_MAX_LENGTH}, the longest planted "
                    f"joint that stays dense (|Σ|^(k+l) with |Σ| = 4 + 7k + 4l)")
    return None


def planted_lemma_study(orders, n_languages: int, seed: int = 0, background_size: int = 4,
                        absolute=(0.06, 0.03), collective=PLANTED_COLLECTIVE) -> list[dict]:
    """``check_bigram_modes`` on ``n_languages`` random planted languages (backgrounds drawn from
    seed, seed+1, …) for every (k, l) in ``orders``: one row per planted bigram."""
    from .languages import planted_language

    rows = []
    for k, l in orders:
        for i in range(n_languages):
            lang = planted_language(k, l, background_size, absolute, collective, rng=seed + i)
            for c in check_bigram_modes(lang, k, l):
                rows.append(dict(k=k, l=l, language=seed + i, alphabet=lang.alphabet_size, kind=c.kind, size=c.size,
                                 mode=c.mode, cluster=c.cluster, sigma=c.sigma_predicted, sigma_error=c.sigma_error,
                                 vector_error=c.vector_error, own_propensity_error=c.own_propensity_error,
                                 other_propensity_max=c.other_propensity_max, violation=c.violation))
    return rows


def planted_lemma_summary(rows: list[dict]) -> list[dict]:
    """:func:`planted_lemma_study`'s rows summed up per (k, l) and kind of bigram: how many were
    checked, and the largest error in σ, in the vectors, of the own-mode propensities (against the
    indicator of the bigram) and of the other modes' propensities (against 0)."""
    out = []
    for k, l in dict.fromkeys((r["k"], r["l"]) for r in rows):
        for kind in ("absolute", "collective"):
            sel = [r for r in rows if (r["k"], r["l"], r["kind"]) == (k, l, kind)]
            if sel:
                out.append({"(k, l)": (k, l), "bigram": kind, "checked": len(sel),
                            "σ error": max(r["sigma_error"] for r in sel),
                            "vector error": max(r["vector_error"] for r in sel),
                            "own propensity": max(r["own_propensity_error"] for r in sel),
                            "other propensities": max(r["other_propensity_max"] for r in sel)})
    return out


@dataclass
class OrderAnalysis:
    """Everything the chapter computes for one (k, l) of real text."""

    k: int
    l: int
    counts: SequenceCounts
    P: EmpiricalModes            # the paper's matrix, smoothing α
    P0: EmpiricalModes           # the same without smoothing (α = 0): P(y|x) = c(xy)/c(x)
    M: EmpiricalModes            # the weighted operator
    count_seconds: float


def analyse_order(tokens, doc_offsets, vocab_size, k: int, l: int, min_count: int, r: int = 100,
                  alpha: float = 1.0, smoothing: str = "observed", seed: int = 0) -> OrderAnalysis:
    """Count and threshold (App. B), then the top-r components of P (α), P (α = 0) and M, each by
    the paper's randomized/Lanczos rule. A kept matrix with fewer than r + 1 rows or columns (a high
    threshold on a small corpus) gives its min(shape) − 1 leading components, all the rule can return."""
    t0 = time.perf_counter()
    counts = count_sequences(tokens, k, l, doc_offsets, vocab_size, min_count)
    t_count = time.perf_counter() - t0
    if min(counts.shape) < 2:
        raise ValueError(f"order (k, l) = ({k}, {l}) at threshold {min_count} keeps a {counts.shape[0]} × "
                         f"{counts.shape[1]} matrix: too few histories or continuations for any component; "
                         "lower the threshold or read a larger corpus")
    r = min(r, min(counts.shape) - 1)
    P = conditional_modes(counts, r, alpha, smoothing, seed=seed)
    P0 = conditional_modes(counts, r, 0.0, "none", seed=seed)
    M = weighted_modes(counts, r, seed=seed)
    return OrderAnalysis(k, l, counts, P, P0, M, t_count)


def counting_rows(analyses: dict) -> list[dict]:
    """Per order (k, l) of real text: the threshold, the histories seen, the kept matrix's shape and
    non-zeros, and the share of windows kept (``analyses``: (k, l) → :class:`OrderAnalysis`)."""
    return [{"(k, l)": (A.k, A.l), "threshold t": A.counts.min_x_count, "histories seen": A.counts.n_x_seen,
             "kept x × y": f"{A.counts.shape[0]:,} × {A.counts.shape[1]:,}", "non-zeros": A.counts.counts.nnz,
             "windows kept": A.counts.kept_fraction} for A in analyses.values()]


def svd_rows(analyses: dict) -> list[dict]:
    """Per order: the SVD method the paper's rule picks, the top singular value of P and of M, and
    the seconds spent counting and on each SVD."""
    return [{"(k, l)": (A.k, A.l), "SVD (rule)": A.P.method, "σ₁ of P": A.P.sigma[0], "σ₁ of M": A.M.sigma[0],
             "count (s)": round(A.count_seconds, 2), "SVD of P (s)": round(A.P.seconds, 1),
             "SVD of M (s)": round(A.M.seconds, 1)} for A in analyses.values()]


STAND_INS = ("Example 5.7 (a top component)", "Examples 5.9 and 5.10 (single leading components)",
             "the reading after Example 5.8 (a perturbed collective bigram)", "Example 5.8 (a seventh component)")


def representative_components(analyses: dict, sweep_order) -> list[tuple[EmpiricalModes, int, str]]:
    """Components of M that stand in for the paper's Examples 5.7–5.11, as (modes, index, which
    example): the leading mode of the first order, the leading mode at the sweep order, the most
    bigram-like of the first ten at the longest k (the reading after Example 5.8), and the seventh
    at the longest l (Example 5.8 shows a seventh component)."""
    orders = list(analyses.values())
    longest_k = next(A for A in orders if A.k == max(a.k for a in orders))
    longest_l = next(A for A in orders if A.l == max(a.l for a in orders))
    picks = [(orders[0].M, 0), (analyses[tuple(sweep_order)].M, 0),
             (longest_k.M, int(np.argmax(longest_k.M.bigram_overlaps()[:10]))),
             (longest_l.M, min(6, longest_l.M.n_modes - 1))]
    return [(modes, alpha, example) for (modes, alpha), example in zip(picks, STAND_INS)]


@dataclass
class MethodAgreement:
    """:func:`method_agreement`: per operator ('P', 'M'), the largest relative difference between the
    Lanczos and the randomized singular values, over the top 10 (``top10``) and all r (``all``), and
    each method's seconds (``seconds[operator][method]``)."""

    top10: dict
    all: dict
    seconds: dict


def method_agreement(counts: SequenceCounts, r: int, alpha: float, smoothing: str = "observed",
                     seed: int = 0) -> MethodAgreement:
    """Both SVD methods (randomized and Lanczos) on the paper's P and on M of one count table, so that
    the one the paper's rule did not pick is checked against the one it did (App. B)."""
    top10, every, seconds = {}, {}, {}
    for name, mat in (("P", conditional_matrix(counts, alpha, smoothing)), ("M", weighted_matrix(counts))):
        res = {m: top_components(mat, r, m, seed=seed) for m in ("lanczos", "randomized")}
        top10[name] = singular_value_agreement(res["lanczos"].s, res["randomized"].s, 10)
        every[name] = singular_value_agreement(res["lanczos"].s, res["randomized"].s)
        seconds[name] = {m: x.seconds for m, x in res.items()}
    return MethodAgreement(top10, every, seconds)


def max_tied(em: EmpiricalModes, tie_rtol: float = 1e-2, n_modes: int = 10) -> int:
    """The most histories tied at the top x-loading among the ``n_modes`` leading modes."""
    return int(max(em.component(a, tie_rtol=tie_rtol).n_tied for a in range(min(n_modes, em.n_modes))))


def smoothing_sweep(analysis: OrderAnalysis, alphas, alpha: float, r: int, smoothing: str = "observed",
                    tie_rtol: float = 1e-2, seed: int = 0, overlap_cut: float = 0.7) -> list[dict]:
    """The paper's P at each smoothing a of ``alphas`` (a = 0 and a = ``alpha`` reuse the analysis's
    P0 and P), and the weighted M, at one order: the mean log10 c(x) of the 10 leading modes'
    histories, the most tied histories among them, the share of modes with bigram overlap at least
    ``overlap_cut``, and the overlap of the top-10 continuation subspace with M's."""
    A = analysis
    rows = []
    for a in alphas:
        Pa = A.P0 if a == 0 else (A.P if a == alpha else conditional_modes(A.counts, r, a, smoothing, seed=seed))
        rows.append({"operator": f"P, a = {a:g}", "mean log₁₀ c(x)": mean_log_count(Pa),
                     "most tied histories": max_tied(Pa, tie_rtol), "share with overlap ≥ 0.7":
                     float(np.mean(Pa.bigram_overlaps() >= overlap_cut)),
                     "continuation overlap with M": subspace_overlap(Pa.y_vectors, A.M.y_vectors, 10)})
    rows.append({"operator": "M", "mean log₁₀ c(x)": mean_log_count(A.M), "most tied histories": max_tied(A.M, tie_rtol),
                 "share with overlap ≥ 0.7": float(np.mean(A.M.bigram_overlaps() >= overlap_cut)),
                 "continuation overlap with M": 1.0})
    return rows


def overlap_rows(analyses: dict, cut: float = 0.7) -> list[dict]:
    """Per order: the median bigram overlap of the modes of M and of P, and the share at least ``cut``."""
    return [{"(k, l)": (A.k, A.l), "M: median overlap": float(np.median(A.M.bigram_overlaps())),
             "M: share ≥ 0.7": float(np.mean(A.M.bigram_overlaps() >= cut)),
             "P: median overlap": float(np.median(A.P.bigram_overlaps())),
             "P: share ≥ 0.7": float(np.mean(A.P.bigram_overlaps() >= cut))} for A in analyses.values()]


def mean_log_count(em: EmpiricalModes, n_modes: int = 10) -> float:
    """Average over the leading ``n_modes`` of Σ_x x_vector(x)² log10 c(x): the typical frequency
    (in decades) of the histories a mode's x side sits on (Euclidean-unit x vectors: U of P, ṽ of M)."""
    logc = np.log10(em.counts.x_counts)
    return float(np.mean([(em.x_vectors[:, a] ** 2) @ logc for a in range(min(n_modes, em.n_modes))]))


def subspace_overlap(A, B, r: int) -> float:
    """‖A_rᵀ B_r‖_F² / r for orthonormal columns: mean squared cosine of the principal angles
    between the spans of the first r columns (1 = same subspace, r/n for random ones)."""
    return float(np.linalg.norm(A[:, :r].T @ B[:, :r]) ** 2 / r)


def random_overlap_baseline(em: EmpiricalModes, n: int = 100, seed: int = 0) -> np.ndarray:
    """Bigram overlaps of ``n`` random unit directions in the operator's coordinates (Gaussian
    x and y vectors, same shapes and x-side weights as ``em``): what chance gives."""
    rng = np.random.default_rng(seed)
    n_x, n_y = em.x_vectors.shape[0], em.y_vectors.shape[0]
    out = np.empty(n)
    for i in range(n):
        b = rng.standard_normal(n_y)
        b /= np.linalg.norm(b)
        xv = rng.standard_normal(n_x)
        xv /= np.linalg.norm(xv)
        g = xv / np.sqrt(em.x_weights)
        if g[np.argmax(np.abs(g))] < 0:
            g = -g
        _, cos = best_collective_set(g, em.x_weights)
        out[i] = np.abs(b).max() * cos
    return out


def load_token_stream(corpus: str, tokenizer: str, max_corpus_mb: float, seed: int = 0):
    """(corpus, tokenizer, token stream of the whole corpus). A 'bpe:<V>' tokenizer is trained on
    the training documents of the book's split (as in the introduction), so it is the same one."""
    from .text import corpus as corpora, tokenization

    options = {"max_bytes": int(max_corpus_mb * 1e6)} if corpus.startswith("hf:") else {}
    text = corpora.load_corpus(corpus, **options)
    train_idx, _ = text.split(heldout_fraction=0.1, seed=seed)
    tok = tokenization.get_tokenizer(tokenizer, corpus=text.subset(train_idx) if tokenizer.startswith("bpe:") else None)
    return text, tok, tokenization.encode_corpus(text, tok)


# ---------------------------------------------------------------------------
# 8. The statistics of §5.2 on real text, and a shuffled-corpus null model
# ---------------------------------------------------------------------------

def text_statistics(M_by_order: dict, P_sweep: EmpiricalModes, sweep_order, tie_rtol: float = 1e-2,
                    n_tie_modes: int = 10, n_mass_modes: int = 20, overlap_cut: float = 0.7) -> dict:
    """The numbers with which the book measures the paper's reading of its examples (§5.2, after
    Example 5.8), from the top modes of M at every order (``M_by_order``: (k, l) → EmpiricalModes
    of the weighted operator) and of the paper's smoothed P at the sweep order:

    ``smoothed_max_tied``  most histories tied at the top x-loading among P's ``n_tie_modes`` leading modes
    ``weighted_max_tied``  the same for M at the sweep order
    ``median_y_mass``      median over M's ``n_mass_modes`` leading modes (sweep order) of the share
                           of the y side on its dominant continuation
    ``collective_fraction`` share of all computed modes of M, pooled over the orders, whose bigram
                           overlap is at least ``overlap_cut``
    One function for the corpus and for its null (:func:`shuffled_null`), so both are measured alike."""
    sweep_order = tuple(sweep_order)
    if sweep_order not in M_by_order:
        raise ValueError(f"sweep_order {list(sweep_order)} must be one of the orders {[list(o) for o in M_by_order]}")
    M = M_by_order[sweep_order]
    overlaps = np.concatenate([E.bigram_overlaps() for E in M_by_order.values()])
    return dict(smoothed_max_tied=max_tied(P_sweep, tie_rtol, n_tie_modes), weighted_max_tied=max_tied(M, tie_rtol, n_tie_modes),
                median_y_mass=float(np.median([M.component(a, tie_rtol=tie_rtol).y_mass
                                               for a in range(min(n_mass_modes, M.n_modes))])),
                collective_fraction=float(np.mean(overlaps >= overlap_cut)))


def shuffle_tokens(tokens, seed: int = 0) -> np.ndarray:
    """The token stream in a uniformly random order (``seed``): same length, same token counts and
    same document boundaries (positions), but no sequential structure — a 'random language of the
    same size' whose every history is followed by draws from the unigram law."""
    return np.random.default_rng(seed).permutation(np.asarray(tokens))


def shuffled_null(tokens, doc_offsets, vocab_size, orders, sweep_order, n_shuffles: int, r: int = 100,
                  alpha: float = 1.0, smoothing: str = "observed", tie_rtol: float = 1e-2, seed: int = 0) -> list[dict]:
    """:func:`text_statistics` on ``n_shuffles`` shuffled copies of the corpus (:func:`shuffle_tokens`,
    seeds seed, seed+1, …), counted and thresholded exactly as the corpus (``orders``: [k, l, t]),
    with top-r modes of M at every order and of the smoothed P at the sweep order. One dict per
    shuffle; orders whose thresholded matrix is too small for r modes use min(shape) − 1."""
    if not (isinstance(n_shuffles, (int, np.integer)) and n_shuffles >= 1):
        raise ValueError(f"n_shuffles must be an integer >= 1, got {n_shuffles!r}")
    sweep_order = tuple(sweep_order)
    if sweep_order not in [tuple(o[:2]) for o in orders]:
        raise ValueError(f"sweep_order {list(sweep_order)} must be one of the orders {[list(o[:2]) for o in orders]}")
    out = []
    for i in range(int(n_shuffles)):
        shuffled = shuffle_tokens(tokens, seed + i)
        Ms, P = {}, None
        for k, l, t in orders:
            counts = count_sequences(shuffled, k, l, doc_offsets, vocab_size, t)
            rr = min(r, min(counts.shape) - 1)
            if rr < 1:
                continue
            Ms[(k, l)] = weighted_modes(counts, rr, seed=seed)
            if (k, l) == sweep_order:
                P = conditional_modes(counts, rr, alpha, smoothing, seed=seed)
        if P is None:
            raise ValueError(f"the shuffled corpus keeps too few histories at the sweep order {list(sweep_order)}")
        out.append(text_statistics(Ms, P, sweep_order, tie_rtol))
    return out


# ---------------------------------------------------------------------------
# What the chapter costs
# ---------------------------------------------------------------------------

BYTES_PER_TOKEN = 3.0         # corpus bytes per token: fewer than GPT-NeoX's ~4 on English, so more tokens
COUNT_BYTES_PER_TOKEN = 96    # counting's peak per corpus token (traced at 10^6 tokens: 31 to 82, V = 2048 and 50304)


DEFAULT_CORPUS_MB = 16.0      # the offline default corpus, at most (lib.text.corpus: the pinned environment's docs)


def corpus_tokens(values: dict) -> int:
    """Tokens of the corpus a run reads, at most, at :data:`BYTES_PER_TOKEN`: ``max_corpus_mb`` of a
    streamed corpus, the offline default's :data:`DEFAULT_CORPUS_MB`, a local file or folder's size."""
    from pathlib import Path

    corpus = values["corpus"]
    if corpus.startswith("hf:"):
        mb = values["max_corpus_mb"]
    elif corpus == "default":
        mb = DEFAULT_CORPUS_MB
    else:
        path = Path(corpus)
        files = [path] if path.is_file() else list(path.rglob("*")) if path.is_dir() else []
        mb = sum(f.stat().st_size for f in files if f.is_file()) / 1e6
    return int(mb * 1e6 / BYTES_PER_TOKEN)


def counting_cost(n_tokens: int, k: int, l: int, vocab_size: int = 50304) -> tuple[float, float]:
    """(peak bytes, operations) of :func:`count_sequences` on ``n_tokens`` tokens: the windows' int64
    codes, their sort and the sparse table, :data:`COUNT_BYTES_PER_TOKEN` bytes a token, plus the dense
    table of continuations (a bool and an int64 rank per code) that ``lib.text.ngrams`` uses when V^l is
    at most max(4n, 2^24); and a sort of n windows of k + l tokens (n·log₂n·(k + l) comparisons)."""
    dense = float(vocab_size) ** l <= max(4 * n_tokens + 1024, 2 ** 24)
    peak = COUNT_BYTES_PER_TOKEN * n_tokens + (9.0 * vocab_size ** l if dense else 0.0)
    return float(peak), float(n_tokens * max(1.0, np.log2(max(n_tokens, 2))) * (k + l))


def components_cost(n_tokens: int, min_count: int, r: int, n_iter: int = 7, n_oversamples: int = 10,
                    vocab_size: int = 50304, k: int = 1, l: int = 1) -> tuple[float, float]:
    """(peak bytes, FLOPs) of the top-r components of P, P (a = 0) and M at one order
    (:func:`analyse_order`) from a corpus of ``n_tokens``: at most min(V^k, n/t) histories reach the
    threshold t, as many continuations (min(V^l, n/t): they are thresholded alike) and n non-zeros. Three sparse matrices (values, indices, their
    transposes: 24 bytes a non-zero each), and the randomized SVD's blocks of (rows + columns) × (r + p)
    float64 (three at once: the block, its product, the QR's workspace). FLOPs: 2·(n_iter + 1) products with the matrix and its transpose,
    2·nnz·(r + p) each, and as many QRs, 4·(rows + cols)·(r + p)², for each of the three matrices."""
    rows, cols = min(float(vocab_size) ** k, n_tokens / min_count), min(float(vocab_size) ** l, n_tokens / min_count)
    nnz = min(float(n_tokens), rows * cols)
    ell = r + n_oversamples
    peak = 3 * 24 * nnz + 8 * 3 * (rows + cols) * ell
    flops = 3 * (n_iter + 1) * 2 * (2 * 2 * nnz * ell + 4 * (rows + cols) * ell ** 2)
    return float(peak), float(flops)


def heavy_steps(values: dict) -> list:
    """The chapter's heavy steps for its resolved parameters ``values``: the corpus's token stream,
    counting each (k, l) of ``orders`` (peak at the costliest), and the components of every order
    (peak at the largest), once for the corpus and once per shuffled copy."""
    from .book.costs import HeavyStep
    from .substrate import tokenizer_vocab_size

    n = corpus_tokens(values)
    vocab = tokenizer_vocab_size(values["tokenizer"])
    orders = [tuple(o) for o in values["orders"]]
    copies = 1 + values["null_shuffles"]
    k, l = max(orders, key=lambda o: counting_cost(n, o[0], o[1], vocab)[0])[:2]
    count_bytes = max(counting_cost(n, a, b, vocab)[0] for a, b, _ in orders)
    count_ops = copies * sum(counting_cost(n, a, b, vocab)[1] for a, b, _ in orders)
    costs = {o: components_cost(n, o[2], values["n_components"], vocab_size=vocab, k=o[0], l=o[1]) for o in orders}
    ck, cl, t = max(orders, key=lambda o: costs[o][0])
    svd_bytes, svd_flops = costs[ck, cl, t][0], copies * sum(f for _, f in costs.values())
    return [
        HeavyStep("counting the corpus's windows", f"{n:.3g} tokens at most, peak at (k, l) = ({k}, {l}), "
                  f"{len(values['orders'])} orders × {copies} copies",
                  count_bytes + 8.0 * n, count_ops, "max_corpus_mb", host=True),
        HeavyStep("top components of P and M", f"r = {values['n_components']} at (k, l) = ({ck}, {cl}), "
                  f"threshold {t}, at most {min(vocab ** ck, n / t):.3g} histories", svd_bytes, svd_flops,
                  "max_corpus_mb or n_components", host=True),
    ]
