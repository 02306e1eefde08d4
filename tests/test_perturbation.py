"""Tests for lib/perturbation.py: the perturbation formulas against exact SVDs of smooth families,
finite-difference Taylor coefficients, Wedin's bound, crossings, and the planted-noise study."""
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


def test_planted_noise_study_on_a_language_not_in_the_book():
    etas = np.logspace(-4, -0.3, 25)
    modes = pt.planted_noise_study(1, 1, etas, seed=42, background_size=3, absolute=(0.05,),
                                   collective=((0.02, 0.01, 0.01),))
    assert [m.kind for m in modes] == ["absolute", "collective"]
    for m in modes:
        np.testing.assert_allclose(m.violation, etas, atol=1e-12)      # Def 5.5 broken by exactly η (k = 1)
        small = etas <= min(1e-2, m.crossing / 20)
        assert pt.loglog_slope(etas[small], np.abs(m.sigma - m.sigma_first)[small]) == pytest.approx(2, abs=0.1)
        assert pt.loglog_slope(etas[small], np.abs(m.sigma - m.sigma_second)[small]) == pytest.approx(3, abs=0.15)
        assert m.overlap[0] > 1 - 1e-6
        ok = np.isfinite(m.wedin_bound)
        assert np.all(m.wedin_measured[ok] <= m.wedin_bound[ok] * (1 + 1e-9))
        assert m.sigma0 == pytest.approx(m.sigma[0], rel=1e-3)
        assert m.breakdown(0.0) == np.inf
    with pytest.raises(ValueError, match="q\\(x\\) = 0"):
        pt.planted_noise_study(2, 1, etas[:3], seed=0)


def fake_mode(etas, sigma_order=2.0, second_order=3.0, vector_order=2.0, crossing=0.5, wedin=0.5, break_at=None):
    """A NoisyMode whose errors follow exact power laws of η (an independent, hand-made case)."""
    n = len(etas)
    overlap = np.ones(n) if break_at is None else np.where(etas >= break_at, 0.5, 1.0)
    return pt.NoisyMode("absolute", 1, 0, 0.2, etas, np.full(n, 0.2), 0.2 - 0.7 * etas ** sigma_order,
                        0.2 - 0.3 * etas ** second_order, 0.4 * etas ** vector_order, overlap, np.full(n, 0.8),
                        np.full(n, wedin), np.ones(n), etas.copy(), 0.1, crossing, -0.2, 0.0)


def test_noise_order_study_fits_known_power_laws_and_counts_break_downs():
    etas = np.logspace(-4, 0, 41)
    exact = pt.noise_order_study([fake_mode(etas), fake_mode(etas, crossing=0.2)], etas)
    assert exact.slopes == pytest.approx(np.array([[2.0, 3.0, 2.0], [2.0, 3.0, 2.0]]), abs=1e-4)
    assert exact.sigma_order_deviation == pytest.approx(0, abs=1e-4) and exact.vector_order_deviation < 1e-4
    assert exact.wedin_max_ratio == pytest.approx(0.5) and exact.violation_minus_eta == 0.0
    assert np.all(np.isinf(exact.breakdown_ratios)) and exact.overlap_at_break == [] and exact.near_crossing() == 0
    off = pt.noise_order_study([fake_mode(etas, sigma_order=2.2, vector_order=1.7, wedin=1.2, break_at=0.5)], etas)
    assert off.sigma_order_deviation == pytest.approx(0.2, abs=1e-4)
    assert off.vector_order_deviation == pytest.approx(0.3, abs=1e-4) and off.wedin_max_ratio == pytest.approx(1.2)
    assert off.breakdown_ratios[0] == pytest.approx(etas[etas >= 0.5][0] / 0.5) and off.near_crossing(0.15) == 1
    assert off.near_crossing(0.0) == int(abs(off.breakdown_ratios[0] - 1) == 0)
    assert off.overlap_at_break == [0.8]
    third = pt.noise_order_study([fake_mode(etas, second_order=3.4)], etas)  # the second-order fit counts too
    assert third.sigma_order_deviation == pytest.approx(0.4, abs=1e-4)


def test_noise_orders_are_fitted_only_well_inside_the_expansion():
    """Beyond η_×/20 the errors bend (here: a jump at η = 0.05); with η_× = 0.5 the fit stops at 0.01 first."""
    etas = np.logspace(-4, 0, 41)
    m = fake_mode(etas)
    m.sigma_first[etas > 0.05] -= 1.0
    assert pt.noise_order_study([m], etas).sigma_order_deviation == pytest.approx(0, abs=1e-4)
    assert pt.noise_order_study([m], etas, fit_max=1.0, crossing_fraction=1.0).sigma_order_deviation > 0.1
