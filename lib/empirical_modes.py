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
import re
import time
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from .book.moved import forward_moved
from .book.tables import md_escape, table
from .book.threads import solver_threads
from .languages import bigram_violation
from .linalg import randomized_svd, subspace_overlap  # noqa: F401  (subspace_overlap: its old name here)
from .mode_comparisons import planted_mode_errors
from .modes import Modes
from .text.ngrams import count_ngrams

RANDOMIZED_ABOVE = 5000      # the paper's rule: randomized SVD when min(shape) > 5000
SMOOTHINGS = ("observed", "full", "none")
OPERATORS = ("conditional", "weighted")

# The Examples chapter's studies moved to lib.examples_experiments, and the tables' helpers live in
# lib.book.tables: their old names here still answer (lib.book.moved), without an import upwards.
_MOVED = dict.fromkeys((
    "PLANTED_COLLECTIVE", "PLANTED_MAX_LENGTH", "require_sweep_order", "planted_orders_problem",
    "planted_lemma_study", "planted_lemma_summary", "OrderAnalysis", "analyse_order", "counting_rows", "svd_rows",
    "STAND_INS", "representative_components", "MethodAgreement", "method_agreement", "max_tied", "smoothing_sweep",
    "overlap_rows", "mean_log_count", "random_overlap_baseline", "load_token_stream", "text_statistics",
    "shuffled_null", "BYTES_PER_TOKEN", "COUNT_BYTES_PER_TOKEN", "DEFAULT_CORPUS_MB", "corpus_tokens",
    "counting_cost", "components_cost", "heavy_steps"), "lib.examples_experiments")
__getattr__ = forward_moved(__name__, {**_MOVED, "Raw": "lib.book.tables", "markdown_table": "lib.book.tables"})


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
            U, s, Vt = randomized_svd(A, int(r), n_oversamples, n_iter, rng, orthonormalize="cholqr2",
                                      transpose_csr=True)
        else:
            D = A.toarray() if hasattr(A, "toarray") else np.asarray(A)
            U, s, Vt = np.linalg.svd(D, full_matrices=False)
            U, s, Vt = U[:, :r], s[:r], Vt[:r]
    seconds = time.perf_counter() - t0
    order = np.argsort(s)[::-1]
    return SVDResult(np.ascontiguousarray(U[:, order]), s[order], np.ascontiguousarray(Vt[order]), method, seconds)


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
    σ and vector errors come from ``lib.mode_comparisons.planted_mode_errors``; this adds the propensities."""
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
    run = max([len(m) for m in re.findall(r"`+|~+", text)] + [2]) + 1
    fence = "~" * max(run, 3)
    return head + "\n\n" + fence + "text\n" + text + "\n" + fence


# ---------------------------------------------------------------------------
# 7. A shuffled corpus (the null model of the Examples chapter; also lib.lenses)
# ---------------------------------------------------------------------------

def shuffle_tokens(tokens, seed: int = 0) -> np.ndarray:
    """The token stream in a uniformly random order (``seed``): same length, same token counts and
    same document boundaries (positions), but no sequential structure — a 'random language of the
    same size' whose every history is followed by draws from the unigram law."""
    return np.random.default_rng(seed).permutation(np.asarray(tokens))
