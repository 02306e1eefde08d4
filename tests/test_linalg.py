"""Tests for lib/linalg.py: the randomized SVD (both ways of re-orthonormalising, dense, sparse and
matrix-free input) against numpy's exact SVD, principal angles and subspace overlap."""
import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from lib import empirical_modes as em, modes
from lib.linalg import principal_angles, randomized_svd, subspace_overlap


def low_rank(m=120, n=80, rank=6, seed=0):
    """An m × n matrix of exact rank ``rank`` with singular values 1, 1/2, 1/4, …"""
    rng = np.random.default_rng(seed)
    U, _ = np.linalg.qr(rng.standard_normal((m, rank)))
    V, _ = np.linalg.qr(rng.standard_normal((n, rank)))
    return (U * 0.5 ** np.arange(rank)) @ V.T


@pytest.mark.parametrize("orthonormalize, n_iter, transpose_csr", [("cholqr2", 7, True), ("householder", 8, False)])
@pytest.mark.parametrize("form", ["dense", "sparse", "operator"])
def test_randomized_svd_matches_numpy_on_a_low_rank_matrix(orthonormalize, n_iter, transpose_csr, form):
    D = low_rank()
    A = {"dense": D, "sparse": sp.csr_matrix(D), "operator": spla.aslinearoperator(D)}[form]
    U, s, Vt = randomized_svd(A, 6, n_iter=n_iter, rng=2, orthonormalize=orthonormalize, transpose_csr=transpose_csr)
    Ue, se, Vte = np.linalg.svd(D, full_matrices=False)
    assert U.shape == (120, 6) and s.shape == (6,) and Vt.shape == (6, 80)
    np.testing.assert_allclose(s, se[:6], rtol=1e-12)
    np.testing.assert_allclose(np.abs(np.sum(U * Ue[:, :6], axis=0)), 1, atol=1e-10)     # vectors up to sign
    np.testing.assert_allclose(np.abs(np.sum(Vt * Vte[:6], axis=1)), 1, atol=1e-10)
    np.testing.assert_allclose((U * s) @ Vt, D, atol=1e-12)
    np.testing.assert_allclose(U.T @ U, np.eye(6), atol=1e-12)


def test_the_two_callers_pass_what_they_used_before():
    """lib.modes and lib.empirical_modes call this one function (their old names are it); the ways they
    call it differ, and each gives the same numbers as the other way only up to rounding."""
    assert modes.randomized_svd is randomized_svd and em.randomized_svd is randomized_svd
    D = sp.csr_matrix(low_rank(300, 200, 20, seed=1))
    a = randomized_svd(D, 5, n_iter=7, rng=0, orthonormalize="cholqr2", transpose_csr=True)
    b = randomized_svd(D, 5, n_iter=8, rng=0, orthonormalize="householder", transpose_csr=False)
    np.testing.assert_allclose(a[1], b[1], rtol=1e-12)
    with pytest.raises(ValueError, match="orthonormalize"):
        randomized_svd(D, 5, orthonormalize="gram-schmidt")


def test_randomized_svd_recovers_a_decaying_spectrum():
    A = np.random.default_rng(0).standard_normal((30, 20)) @ np.diag(0.5 ** np.arange(20)) @ \
        np.linalg.qr(np.random.default_rng(1).standard_normal((20, 20)))[0]
    U, s, Vt = randomized_svd(A, 5, n_iter=8, rng=0, orthonormalize="householder", transpose_csr=False)
    assert np.abs(s - np.linalg.svd(A, compute_uv=False)[:5]).max() < 1e-12


def test_randomized_svd_survives_rank_deficiency():
    rng = np.random.default_rng(0)
    A = np.outer(rng.standard_normal(200), rng.standard_normal(50))      # rank one
    U, s, Vt = randomized_svd(A, 5, rng=1, orthonormalize="cholqr2")
    assert s[0] == pytest.approx(np.linalg.norm(A, 2), rel=1e-12)
    assert np.all(s[1:] < 1e-10 * s[0])
    np.testing.assert_allclose(U.T @ U, np.eye(5), atol=1e-10)


def test_principal_angles():
    e = np.eye(3)
    t = 0.3
    B = np.column_stack([np.cos(t) * e[0] + np.sin(t) * e[2], e[1]])
    assert np.allclose(principal_angles(e[:, :2], B), [0.0, t], atol=1e-14)
    assert np.allclose(principal_angles(e[:, 0], 5 * e[:, 0]), [0.0], atol=1e-15)
    w = np.array([1.0, 4.0, 1.0])                                      # weighted: e0 ⊥ e1 still, angle(e0+e1, e0)
    ang = principal_angles(e[:, 0] + e[:, 1], e[:, 0], weights=w)
    assert ang[0] == pytest.approx(np.arccos(1 / np.sqrt(5)), rel=1e-12)
    with pytest.raises(ValueError, match="same number of rows"):
        principal_angles(np.ones((3, 1)), np.ones((2, 1)))


def test_subspace_overlap_is_one_on_the_same_span_and_the_mean_squared_cosine_otherwise():
    e = np.eye(4)
    assert subspace_overlap(e[:, :2], e[:, [1, 0]], 2) == pytest.approx(1)
    assert subspace_overlap(e[:, :2], e[:, 2:], 2) == 0
    t = 0.3
    B = np.column_stack([np.cos(t) * e[0] + np.sin(t) * e[2], e[3]])
    assert subspace_overlap(e[:, :2], B, 2) == pytest.approx(np.cos(t) ** 2 / 2)
