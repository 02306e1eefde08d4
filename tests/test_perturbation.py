"""Tests for lib/perturbation.py: the perturbation formulas against exact SVDs of smooth families,
finite-difference Taylor coefficients, Wedin's bound and crossings (the planted-noise study of the
Examples chapter: test_examples_experiments.py)."""
import numpy as np
import pytest

from lib import perturbation as pt


def family(M0, M1, M2):
    return lambda eta: M0 + eta * M1 + 0.5 * eta ** 2 * M2


@pytest.mark.parametrize("shape", [(7, 4), (4, 7), (6, 6)])
def test_first_and_second_order_have_the_stated_orders(shape):
    rng = np.random.default_rng(sum(shape))
    M0, M1, M2 = (rng.standard_normal(shape) for _ in range(3))
    per = pt.svd_perturbation(M0, M1, M2)
    p = min(shape)
    assert np.all(np.isfinite(per.dsigma)) and np.all(per.gap > 0)
    errs = {1: [], 2: [], "v": []}
    etas = np.array([2e-3, 1e-3, 5e-4, 2.5e-4])
    for eta in etas:
        U, s, Vt = np.linalg.svd(family(M0, M1, M2)(eta))
        e1 = max(abs(s[a] - per.sigma_first(a, eta)) for a in range(p))
        e2 = max(abs(s[a] - per.sigma_second(a, eta)) for a in range(p))
        ev = 0.0
        for a in range(p):
            u1, v1 = per.vectors_first(a, eta)
            sign = np.sign(U[:, a] @ u1)
            ev = max(ev, np.linalg.norm(sign * U[:, a] - u1), np.linalg.norm(sign * Vt[a] - v1))
        errs[1].append(e1), errs[2].append(e2), errs["v"].append(ev)
    assert pt.loglog_slope(etas, errs[1]) == pytest.approx(2, abs=0.05)
    assert pt.loglog_slope(etas, errs[2]) == pytest.approx(3, abs=0.1)
    assert pt.loglog_slope(etas, errs["v"]) == pytest.approx(2, abs=0.1)
    # gauge: u' ⊥ u, v' ⊥ v
    for a in range(p):
        assert abs(per.U[:, a] @ per.du[:, a]) < 1e-12 and abs(per.V[:, a] @ per.dv[:, a]) < 1e-12


def test_first_order_derivative_matches_finite_differences():
    rng = np.random.default_rng(1)
    M0, M1 = rng.standard_normal((5, 3)), rng.standard_normal((5, 3))
    per = pt.svd_perturbation(M0, M1)
    h = 1e-6
    s_plus = np.linalg.svd(M0 + h * M1, compute_uv=False)
    s_minus = np.linalg.svd(M0 - h * M1, compute_uv=False)
    np.testing.assert_allclose((s_plus - s_minus) / (2 * h), per.dsigma, rtol=1e-6)


def test_degenerate_or_zero_values_are_nan():
    M0 = np.diag([2.0, 1.0, 1.0, 0.0])
    per = pt.svd_perturbation(M0, np.ones((4, 4)))
    assert np.isfinite(per.dsigma[0])
    assert np.all(np.isnan(per.dsigma[1:])) and np.all(np.isnan(per.du[:, 1:]))
    with pytest.raises(ValueError, match="same shape"):
        pt.svd_perturbation(M0, np.ones((3, 4)))
    with pytest.raises(ValueError, match="M2"):
        pt.svd_perturbation(M0, M0, np.ones(3))


def test_taylor_coefficients_exact_on_polynomials():
    A, B, C, D = (np.random.default_rng(i).standard_normal((3, 2)) for i in range(4))
    f = lambda e: A + e * B + e ** 2 * C + e ** 4 * D          # noqa: E731
    M0, M1, M2 = pt.taylor_coefficients(f, h=1e-2, n_points=5)
    np.testing.assert_allclose(M0, A, atol=1e-15)
    np.testing.assert_allclose(M1, B, atol=1e-10)
    np.testing.assert_allclose(M2, 2 * C, atol=1e-7)
    with pytest.raises(ValueError):
        pt.taylor_coefficients(f, n_points=2)
    with pytest.raises(ValueError):
        pt.taylor_coefficients(f, h=0.0)


def test_wedin_bound_holds_on_random_perturbations():
    rng = np.random.default_rng(2)
    for trial in range(30):
        m, n = rng.integers(3, 8, size=2)
        M0 = rng.standard_normal((m, n))
        E = 10 ** rng.uniform(-4, 0) * rng.standard_normal((m, n))
        s0 = np.linalg.svd(M0, compute_uv=False)
        U, s, Vt = np.linalg.svd(M0 + E)
        for a in range(min(m, n)):
            measured, bound = pt.wedin_bound(M0, s0, a, s[a], U[:, a], Vt[a])
            assert measured <= bound * (1 + 1e-9) + 1e-12
    U, s, Vt = np.linalg.svd(M0)
    measured, bound = pt.wedin_bound(M0, s, 0, s[0], U[:, 0], Vt[0])
    assert measured < 1e-7 and bound < 1e-10


def test_first_crossing_and_match_mode():
    M0 = np.diag([2.0, 1.0])
    per = pt.svd_perturbation(M0, np.diag([-2.0, 0.0]))
    assert pt.first_crossing(per, 0) == pytest.approx(0.5)
    assert pt.first_crossing(per, 1) == pytest.approx(0.5)
    per = pt.svd_perturbation(M0, np.diag([1.0, 0.0]))
    assert pt.first_crossing(per, 0) == np.inf
    U = np.eye(3)
    a, score = pt.match_mode(U, U, np.array([0, 0.6, 0.8]), np.array([0, 0, 1.0]))
    assert a == 2 and score == pytest.approx(0.8)
    assert pt.loglog_slope([1, 10, 100], [3, 300, 30000]) == pytest.approx(2)
    with pytest.raises(ValueError):
        pt.loglog_slope([1, 2], [0, 1])
