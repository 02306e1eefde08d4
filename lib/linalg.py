"""Linear algebra shared by the modes modules: a randomized SVD, principal angles, subspace overlap.

Nothing here knows about languages or modes: these are the generic tools that
:mod:`lib.modes` (modes of a known joint) and :mod:`lib.empirical_modes` (modes of real text)
both call.

* :func:`randomized_svd` — the top-r SVD by randomized range finding with subspace iteration
  (Halko, Martinsson & Tropp 2011). One function for both callers, which had each written their own:
  they differ in the number of subspace iterations, in the re-orthonormalisation (CholQR2 or
  Householder QR) and in whether a sparse matrix's transpose is converted to CSR once; each caller
  passes what it used before, so that its results stay the same bit for bit.
* :func:`principal_angles`, :func:`subspace_overlap` — comparing two column spans.
"""
from __future__ import annotations

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp

ORTHONORMALIZE = ("cholqr2", "householder")


# ---------------------------------------------------------------------------
# Randomized SVD
# ---------------------------------------------------------------------------

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


def _householder(Y: np.ndarray) -> np.ndarray:
    """Orthonormal basis of the columns of Y by Householder QR (``np.linalg.qr``)."""
    Q, _ = np.linalg.qr(Y)
    return Q


def randomized_svd(A, r: int, n_oversamples: int = 10, n_iter: int = 7, rng=None,
                   orthonormalize: str = "cholqr2", transpose_csr: bool = True):
    """Top-r SVD of A (m × n: sparse, dense or LinearOperator) by randomized range finding with
    subspace iteration (Halko, Martinsson & Tropp 2011, Alg. 4.4 and 5.1): a Gaussian sketch of
    r + n_oversamples columns, n_iter subspace iterations, each product re-orthonormalised, then an
    exact SVD of QᵀA. Returns (U (m, r), s (r,), Vt (r, n)) like ``np.linalg.svd``.

    orthonormalize : "cholqr2" (Cholesky QR twice, falling back to Householder QR if YᵀY is
                     numerically singular) or "householder" (``np.linalg.qr`` every time).
    transpose_csr  : multiply by a sparse A's transpose converted to CSR once (True), or by ``A.T``
                     as it comes (False; the CSC view of a CSR matrix).
    Accuracy depends on the spectral decay near σ_r (raise n_iter for flat spectra)."""
    if orthonormalize not in ORTHONORMALIZE:
        raise ValueError(f"orthonormalize must be one of {ORTHONORMALIZE}, got {orthonormalize!r}")
    ortho = _orthonormalize if orthonormalize == "cholqr2" else _householder
    rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    m, n = A.shape
    At = A.T.tocsr() if transpose_csr and sp.issparse(A) else A.T
    ell = min(r + n_oversamples, m, n)
    Q = ortho(np.asarray(A @ rng.standard_normal((n, ell))))
    for _ in range(n_iter):                                  # subspace iteration, re-orthonormalised
        Z = ortho(np.asarray(At @ Q))
        Q = ortho(np.asarray(A @ Z))
    Bt = np.asarray(At @ Q)                                  # (QᵀA)ᵀ, n × ell
    Vb, s, UbT = np.linalg.svd(Bt, full_matrices=False)     # QᵀA = Ub s Vbᵀ
    return Q @ UbT.T[:, :r], s[:r], Vb[:, :r].T


# ---------------------------------------------------------------------------
# Comparing subspaces
# ---------------------------------------------------------------------------

def principal_angles(A, B, weights=None) -> np.ndarray:
    """Principal angles (radians, ascending) between the column spans of A and B (same number of
    rows), in the inner product Σ_i w_i a_i b_i (default w = 1). Computed by
    ``scipy.linalg.subspace_angles`` (accurate for small angles too); min(rank A, rank B) angles."""
    A = np.asarray(A, dtype=np.float64)
    B = np.asarray(B, dtype=np.float64)
    if A.ndim == 1:
        A = A[:, None]
    if B.ndim == 1:
        B = B[:, None]
    if A.shape[0] != B.shape[0]:
        raise ValueError(f"A and B must have the same number of rows, got {A.shape[0]} and {B.shape[0]}")
    if weights is not None:
        w = np.sqrt(np.asarray(weights, dtype=np.float64))[:, None]
        A, B = w * A, w * B
    return np.sort(sla.subspace_angles(A, B))


def subspace_overlap(A, B, r: int) -> float:
    """‖A_rᵀ B_r‖_F² / r for orthonormal columns: mean squared cosine of the principal angles
    between the spans of the first r columns (1 = same subspace, r/n for random ones)."""
    return float(np.linalg.norm(A[:, :r].T @ B[:, :r]) ** 2 / r)
