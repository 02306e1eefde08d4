"""Closed-form learning coefficients (lib.known_llc): each formula checked both ways."""
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lib import known_llc
from lib.known_llc import normal_crossing_llc, regular_llc, rrr_llc


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


@pytest.mark.parametrize("M,H,N,expected,case", [
    (5, 3, 5, 6.5, "1 odd"), (5, 4, 5, 8.0, "1 even"), (4, 3, 8, 6.0, "2"), (8, 3, 4, 6.0, "3"), (3, 8, 4, 6.0, "4")])
def test_rrr_devinterp_cases(M, H, N, expected, case):
    lam = rrr_llc(M, H, N, 0)
    assert float(lam) == expected and lam.case == case
    assert lam.multiplicity == (2 if case == "1 odd" else 1)


@pytest.mark.parametrize("M,H,N,r,expected,case", [
    (5, 3, 5, 1, 8.0, "1 even"), (5, 3, 5, 2, 9.5, "1 odd"), (4, 3, 8, 2, 11.0, "2"), (8, 3, 4, 1, 8.5, "3"),
    (3, 8, 4, 2, 6.0, "4")])
def test_rrr_positive_rank_cases(M, H, N, r, expected, case):
    lam = rrr_llc(M, H, N, r)
    assert float(lam) == expected and lam.case == case


def test_rrr_full_true_rank_is_regular():
    """r = H: the model is regular at the truth, λ = dim(rank-H matrices)/2, in every case."""
    for M in range(1, 7):
        for N in range(1, 7):
            for H in range(1, min(M, N) + 1):
                assert float(rrr_llc(M, H, N, H)) == H * (M + N - H) / 2, (M, H, N)


def test_rrr_never_exceeds_half_the_dimension():
    for M in range(1, 6):
        for N in range(1, 6):
            for H in range(1, 6):
                for r in range(0, min(M, H, N) + 1):
                    assert 0 <= float(rrr_llc(M, H, N, r)) <= H * (M + N) / 2


@pytest.mark.parametrize("bad", [dict(M=0, H=1, N=1), dict(M=2, H=2, N=2, r=3), dict(M=2.5, H=1, N=1),
                                 dict(M=2, H=1, N=2, r=-1)])
def test_rrr_rejects_bad_dimensions(bad):
    with pytest.raises(ValueError, match="parameter"):
        rrr_llc(**bad)


def test_normal_crossing_and_regular():
    assert float(normal_crossing_llc([1, 3])) == pytest.approx(1 / 6)
    assert normal_crossing_llc([1, 3]).multiplicity == 1
    assert normal_crossing_llc([2, 2]).multiplicity == 2
    assert float(regular_llc(7)) == 3.5
    for bad in ([], [0], [1.5]):
        with pytest.raises(ValueError, match="parameter 'k'"):
            normal_crossing_llc(bad)


def test_quadrature_gaussian_closed_form_and_limit():
    """k = (1,): E[nβK] = ½ nβc/(nβc + γ) exactly; larger k tend to λ as nβ grows."""
    for nb, g in [(10.0, 1.0), (1e3, 3.0)]:
        assert known_llc.normal_crossing_tempered_mean([1], nb, g) == pytest.approx(0.5 * nb / (nb + g), rel=1e-4)
    assert known_llc.normal_crossing_tempered_mean([2], 1e8, 1.0) == pytest.approx(0.25, rel=2e-3)
    assert known_llc.normal_crossing_tempered_mean([1, 3], 1e3, 1.0) < 0.95 / 6  # far from λ at small nβ
    with pytest.raises(ValueError):
        known_llc.normal_crossing_tempered_mean([1, 1, 1], 10.0, 1.0)


def test_regular_sgld_mean():
    sigma = np.diag([1.0, 2.0, 0.5])
    assert known_llc.regular_sgld_mean(sigma, 1e9, 0.0, 1e-15) == pytest.approx(1.5, rel=1e-6)
    assert known_llc.regular_sgld_mean(sigma, 100.0, 0.0, 0.01) > 1.5  # Euler inflates the variance
    assert math.isinf(known_llc.regular_sgld_mean(sigma, 100.0, 0.0, 0.03))  # ε a ≥ 4: unstable


def test_problems_sit_at_the_truth():
    p = known_llc.rrr_problem(5, 3, 4, 2, n=50)
    with torch.no_grad():
        assert known_llc.squared_error(p.model, p.data).abs().max() < 1e-10
        prod = p.model.B.weight @ p.model.A.weight
    assert torch.linalg.matrix_rank(prod) == 2
    nc = known_llc.normal_crossing_problem([1, 2], n=20)
    assert float(nc.truth) == 0.25 and torch.all(nc.model.w == 0)
    noisy = known_llc.regular_problem(3, n=20, noise=1.0)
    assert known_llc.squared_error(noisy.model, noisy.data).detach().abs().max() > 0


def test_normal_crossing_poles():
    from lib.known_llc import normal_crossing_poles

    assert normal_crossing_poles([1]) == [(0.5, 1), (1.5, 1)]
    assert normal_crossing_poles([1, 2]) == [(0.25, 1), (0.5, 1)]
    assert normal_crossing_poles([1, 3]) == [(pytest.approx(1 / 6), 1), (0.5, 2)]  # 3/6 from k = 3 meets 1/2 from k = 1
    assert normal_crossing_poles([2, 2]) == [(0.25, 2), (0.75, 2)]
    assert normal_crossing_poles([1, 4], count=3) == [(0.125, 1), (0.375, 1), (0.5, 1)]
    for k in ([1], [2, 3], [2, 2]):  # the first pole is normal_crossing_llc's (λ, m)
        lam = normal_crossing_llc(k)
        assert normal_crossing_poles(k)[0] == (pytest.approx(float(lam)), lam.multiplicity)
    with pytest.raises(ValueError, match="count"):
        normal_crossing_poles([1], count=0)


def test_nbeta_extrapolation_recovers_lambda_from_exact_means():
    """The poles' form fitted to the exact tempered means reaches λ; a wrong gap does not (both ways)."""
    from lib import llc
    from lib.known_llc import normal_crossing_poles, normal_crossing_tempered_mean

    nbs = [30.0, 100.0, 300.0, 1000.0]
    for k in ([2], [1, 2]):
        (lam, _), (lam2, m2) = normal_crossing_poles(k)
        exact = [normal_crossing_tempered_mean(k, nb, 1.0) for nb in nbs]
        fit = llc.extrapolate_nbeta(nbs, exact, gap=lam2 - lam, gap_multiplicity=m2)
        assert abs(fit.llc - lam) / lam < 0.01, (k, fit.llc)
        assert fit.curve(nbs) == pytest.approx(exact, rel=0.02)
        assert abs(exact[-1] - lam) / lam > 0.01  # the raw value at the largest nβ is not yet there
        wrong = llc.extrapolate_nbeta(nbs, exact, gap=4 * (lam2 - lam))  # too fast an approach: stops short
        assert abs(wrong.llc - lam) / lam > 0.01, (k, wrong.llc)  # the bar the right form passes
    exact = [normal_crossing_tempered_mean([2, 2], nb, 1.0) for nb in nbs]  # multiplicity 2: the log form
    fit = llc.extrapolate_nbeta(nbs, exact, multiplicity=2)
    assert abs(fit.llc - 0.25) / 0.25 < 0.06 and abs(exact[-1] - 0.25) / 0.25 > 0.3
    assert "log" in fit.form


def test_nbeta_extrapolation_synthetic_and_refusals():
    from lib import llc

    nbs = np.array([10.0, 30.0, 100.0, 300.0])
    y = 0.7 - 0.4 * nbs ** -0.5
    fit = llc.extrapolate_nbeta(nbs, y, np.full(4, 0.01), gap=0.5)
    assert fit.llc == pytest.approx(0.7, abs=1e-9) and fit.se > 0
    y2 = 0.7 - 1.0 / (np.log(nbs) + 0.8)
    fit2 = llc.extrapolate_nbeta(nbs, y2, multiplicity=2)
    assert fit2.llc == pytest.approx(0.7, abs=1e-6) and fit2.params[1] == pytest.approx(0.8, abs=1e-5)
    with pytest.raises(llc.LLCInputError, match="gap"):
        llc.extrapolate_nbeta(nbs, y)
    with pytest.raises(llc.LLCInputError, match="at least 3"):
        llc.extrapolate_nbeta(nbs[:2], y[:2], gap=0.5, gap_multiplicity=2)
    with pytest.raises(llc.LLCInputError, match="multiplicity"):
        llc.extrapolate_nbeta(nbs, y, multiplicity=3)
    with pytest.raises(llc.LLCInputError, match="> 1"):
        llc.extrapolate_nbeta([0.5, 10.0, 30.0], [0.1, 0.2, 0.3], gap=0.5)
    with pytest.raises(llc.LLCInputError, match="one length"):
        llc.extrapolate_nbeta(nbs, y[:3], gap=0.5)


# ----- the Euler scheme's closed form -------------------------------------------------------------------------

def test_regular_sgld_mean_at_half_the_stability_limit():
    """At εa = 2 the AR(1) factor is 1 − εa/2 = 0 and the stationary variance is ε = 2/a: E[nβK] = nβσ/a exactly."""
    nb, g, s = 50.0, 1.0, 0.8
    a = nb * s + g
    assert known_llc.regular_sgld_mean(np.array([[s]]), nb, g, 2 / a) == pytest.approx(nb * s / a, rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.05, 5.0), min_size=1, max_size=4), st.floats(1.0, 1e3), st.floats(0.0, 10.0),
       st.floats(0.01, 3.9))
def test_regular_sgld_mean_is_the_ar1_variance(sig, nb, g, eps_a_max):
    """Per eigen-direction, w' = ρw + √ε ξ with ρ = 1 − εa/2 has variance ε/(1 − ρ²) (summed by hand)."""
    sig = np.array(sig)
    a = nb * sig + g
    eps = eps_a_max / a.max()  # every εa below 4: stable
    rho = 1 - eps * a / 2
    by_hand = 0.5 * nb * np.sum(sig * eps / (1 - rho ** 2))
    assert known_llc.regular_sgld_mean(np.diag(sig), nb, g, eps) == pytest.approx(by_hand, rel=1e-9)


# ----- the tolerance band -------------------------------------------------------------------------------------

def test_beyond_tolerance_z_both_ways():
    assert known_llc.beyond_tolerance_z(9.5, 0.1, 10.0, 0.1) == 0.0          # inside the band
    assert known_llc.beyond_tolerance_z(8.7, 0.1, 10.0, 0.1) == pytest.approx(3.0)   # 1.3 off, 1.0 allowed
    assert known_llc.beyond_tolerance_z(11.3, 0.1, 10.0, 0.1) == pytest.approx(3.0)  # symmetric
    assert known_llc.beyond_tolerance_z(8.7, 0.2, 10.0, 0.1) == pytest.approx(1.5)
    with pytest.raises(ValueError, match="se"):
        known_llc.beyond_tolerance_z(1.0, 0.0, 1.0, 0.1)


def _fake_limit(value, se, rhat=1.0, ess=1000.0, diverged=0.0):
    class FakeLimit:  # what KnownCaseEstimate reads of an EpsLimit
        llc, max_rhat, min_total_ess, divergent_fraction = value, rhat, ess, diverged
    FakeLimit.se = se
    return FakeLimit()


def test_known_case_estimate_band_and_mixing():
    lam = known_llc.rrr_llc(5, 4, 5, 0)
    est = known_llc.KnownCaseEstimate("x", lam, _fake_limit(7.0, 0.1), 0.1)
    assert est.rel_error == pytest.approx(-0.125) and est.z == pytest.approx(-10.0)
    assert est.excess_z == pytest.approx((1.0 - 0.8) / 0.1) and est.mixed
    assert not known_llc.KnownCaseEstimate("x", lam, _fake_limit(8.0, 0.1, rhat=1.06), 0.1).mixed
    assert known_llc.KnownCaseEstimate("x", lam, _fake_limit(8.0, 0.1, rhat=1.05), 0.1).mixed
    assert not known_llc.KnownCaseEstimate("x", lam, _fake_limit(8.0, 0.1, ess=399.0), 0.1).mixed


def test_case_checks_name_the_parameter():
    assert known_llc.check_rrr_cases([[5, 3, 5, 1]]) == [(5, 3, 5, 1)]
    for bad in ([[5, 3, 5]], [[2, 2, 2, 3]], [[0, 1, 1, 0]]):
        with pytest.raises(ValueError, match="'rrr_cases'"):
            known_llc.check_rrr_cases(bad)
    assert known_llc.check_crossing_cases([[1], [2, 3]]) == [(1,), (2, 3)]
    for bad in ([[1, 2, 3]], [[]], [[0]]):
        with pytest.raises(ValueError, match="'nc_cases'"):
            known_llc.check_crossing_cases(bad)


# ----- noisy labels at the empirical minimiser ------------------------------------------------------------------

@pytest.mark.parametrize("case", [(5, 3, 5, 1), (4, 2, 3, 0), (3, 4, 2, 1)])
def test_minimiser_is_the_reduced_rank_least_squares_solution(case):
    """ŵ has rank ≤ H, zero gradient, and the loss of Eckart–Young: OLS loss + (1/2n) Σ_{j>H} μ_j, μ the
    eigenvalues of the OLS fitted values' Gram matrix (the residual of the projection is orthogonal)."""
    M, H, N, r = case
    p = known_llc.rrr_minimiser_problem(M, H, N, r, n=400, seed=3)
    x, y = (t.double() for t in p.data)
    with torch.no_grad():
        w = (p.model.B.weight @ p.model.A.weight).double()
    assert torch.linalg.matrix_rank(w, atol=1e-6) <= H
    ols = torch.linalg.lstsq(x, y).solution
    fitted = x @ ols
    mu = torch.linalg.eigvalsh(fitted.T @ fitted)  # ascending
    expected = 0.5 * ((y - fitted) ** 2).sum() / 400 + 0.5 * mu[: max(N - H, 0)].sum() / 400
    loss = known_llc.squared_error(p.model, p.data).mean()
    assert float(loss.detach()) == pytest.approx(float(expected), rel=1e-5)
    grads = torch.autograd.grad(loss, list(p.model.parameters()))
    assert max(float(g.abs().max()) for g in grads) < 1e-4
    assert p.truth == known_llc.rrr_llc(M, H, N, r) and float(loss.detach()) > 0.3  # the labels are noisy


# ----- the experiments, on tiny settings ------------------------------------------------------------------------

TINY = dict(gamma=1.0, eps_nbeta=[0.2, 0.1], relax=0.3, chains=4, seed=0, device="cpu")


def test_validate_rrr_splits_by_multiplicity_and_uses_eps_limits():
    from lib import llc

    v = known_llc.validate_rrr([[4, 3, 8, 0], [5, 3, 5, 0]], n=30, nbeta=40.0, limit_nbetas=[20.0, 30.0, 40.0],
                               **TINY)
    assert [e.truth.multiplicity for e in v.estimates] == [1] and [x.truth.multiplicity for x in v.limits] == [2]
    p = known_llc.rrr_problem(4, 3, 8, 0, n=30, seed=0)
    by_hand = llc.eps_limits(p.model, known_llc.squared_error, p.data, nbetas=[40.0], eps_nbeta=[0.2, 0.1],
                             langevin_time=0.3, gamma=1.0, chains=4, batch_size=30, seed=0, device="cpu",
                             progress=False)[0]
    assert v.estimates[0].limit.llc == by_hand.llc and v.estimates[0].limit.se == by_hand.se
    assert [pt.nbeta for pt in v.limits[0].points] == [20.0, 30.0, 40.0]
    assert v.multiplicity_one_excess_z == v.estimates[0].excess_z
    assert len(v.table()) == 1 and len(v.limits_table()) == 1
    assert v.max_rhat >= v.estimates[0].limit.max_rhat
    none = known_llc.RRRValidation([], [], 40.0, 0.1)
    assert "no reduced-rank" in none.multiplicity_one_undecided and none.multiplicity_one_excess_z is None


def test_unmixed_and_refused_leave_the_claims_undecided():
    lam1, lam2 = known_llc.rrr_llc(5, 4, 5, 0), known_llc.rrr_llc(5, 3, 5, 0)
    good = known_llc.KnownCaseEstimate("a", lam1, _fake_limit(8.0, 0.1), 0.1)
    slow = known_llc.KnownCaseEstimate("b", lam1, _fake_limit(8.0, 0.1, rhat=1.2), 0.1)
    refused = known_llc.NbetaLimit("c", lam2, [_fake_limit(6.0, 0.1)], None, "runs away", 0.1)
    assert known_llc.RRRValidation([good], [], 300.0, 0.1).multiplicity_one_undecided is None
    assert "b" in known_llc.RRRValidation([good, slow], [], 300.0, 0.1).multiplicity_one_undecided
    v = known_llc.RRRValidation([good], [refused], 300.0, 0.1)
    assert "runs away" in v.multiplicity_two_undecided and v.multiplicity_two_excess_z is None
    assert refused.rel_error is None and refused.largest_nbeta_rel_error == pytest.approx(6.0 / 6.5 - 1)


def test_log_form_check_error_grows_as_the_gap_shrinks():
    rows = known_llc.log_form_check([100.0, 300.0, 1000.0], 1.0)
    assert [r["k"] for r in rows] == [(1, 1), (2, 2), (3, 3)] and [r["δ"] for r in rows] == pytest.approx([1, 0.5, 1 / 3])
    errors = [abs(r["rel. error"]) for r in rows]
    assert errors[0] < 0.01 and errors[0] < errors[1] < errors[2] < 0.1
    assert all(r["E[nβK]/λ at the largest nβ"] < 0.8 for r in rows)  # the raw values are far from λ
    with pytest.raises(ValueError, match="multiplicity-two"):
        known_llc.log_form_check([100.0, 300.0, 1000.0], 1.0, ks=[(1, 2)])


def test_normal_crossing_limits_compare_with_quadrature():
    out = known_llc.normal_crossing_limits([[1], [1, 3]], n=40, nbetas=[10.0, 20.0, 30.0],
                                           **{**TINY, "relax": 1.0, "chains": 64})
    one, three = out
    scale = float((known_llc.normal_crossing_problem([1], n=40, seed=0).data[0] ** 2).mean())
    assert one.exact == pytest.approx([known_llc.normal_crossing_tempered_mean([1], nb, 1.0, scale)
                                       for nb in (10.0, 20.0, 30.0)])
    assert one.z_vs_exact == pytest.approx([(p.llc - e) / p.se for p, e in zip(one.points, one.exact)])
    assert one.fit is not None and one.dof == 1 and max(abs(z) for z in one.z_vs_exact) < 5
    assert three.fit is None and "no degree of freedom" in three.refused  # k = (1, 3): three coefficients
    assert abs(one.exact_fit_rel_error) < 0.01


def test_regular_check_properties_by_hand():
    """z per step size, the largest |z|, and the weighted line through the exact targets at ε = 0."""
    class Run:
        def __init__(self, eps, value, se):
            self.settings, self.llc, self.se, self.nbeta = {"eps": eps, "draws": 10}, value, se, 100.0

    runs = [Run(0.004, 2.3, 0.1), Run(0.002, 2.05, 0.05), Run(0.001, 2.1, 0.05)]
    limit = _fake_limit(2.0, 0.04)
    limit.runs = runs
    check = known_llc.RegularCheck(known_llc.regular_llc(4), limit, [2.2, 2.1, 2.05], 2.0)
    assert check.z == pytest.approx([1.0, -1.0, 1.0]) and check.max_abs_z == pytest.approx(1.0)
    assert check.rel_error == 0.0
    w = np.array([10.0, 20.0, 20.0]) ** 2  # weights 1/s.e.²: the line by the normal equations
    e, y = np.array([0.004, 0.002, 0.001]), np.array([2.2, 2.1, 2.05])
    slope = (w.sum() * (w * e * y).sum() - (w * e).sum() * (w * y).sum()) / (w.sum() * (w * e * e).sum() - (w * e).sum() ** 2)
    assert check.exact_line_limit == pytest.approx(((w * y).sum() - slope * (w * e).sum()) / w.sum(), rel=1e-10)
    assert [row["steps"] for row in check.table()] == [10, 10, 10]


def test_experiments_refuse_no_localisation():
    with pytest.raises(ValueError, match="'gamma'"):
        known_llc.validate_rrr([[4, 3, 8, 0]], n=30, nbeta=40.0, limit_nbetas=[20.0, 30.0, 40.0],
                               **{**TINY, "gamma": 0.0})


def test_crossing_and_limit_properties_by_hand():
    lam = known_llc.normal_crossing_llc([2])
    fit = SimpleNamespace(llc=0.26, se=0.02, params=np.zeros(2))
    exact_fit = SimpleNamespace(llc=0.25, params=np.zeros(2))
    c = known_llc.CrossingLimit((2,), lam, 0.5, 1, [_fake_limit(0.2, 0.01)] * 3, [0.21, 0.2, 0.22], exact_fit, fit,
                                None)
    assert c.name == "(2)" and c.dof == 1 and c.z_fit_vs_exact_fit == pytest.approx(0.5)
    assert c.z_vs_exact == pytest.approx([-1.0, 0.0, -2.0]) and c.exact_fit_rel_error == 0.0
    lam2 = known_llc.rrr_llc(5, 3, 5, 0)
    x = known_llc.NbetaLimit("c", lam2, [_fake_limit(5.0, 0.1), _fake_limit(5.2, 0.1, rhat=1.1)],
                             SimpleNamespace(llc=5.2, se=0.2, params=np.array([5.2, 1.0]), chi2=0.5, dof=1), None, 0.1)
    assert x.rel_error == pytest.approx(-1.3 / 6.5) and x.excess_z == pytest.approx((1.3 - 0.65) / 0.2)
    assert x.largest_nbeta_rel_error == pytest.approx(-1.3 / 6.5) and not x.mixed


def test_noisy_rrr_runs_at_beta_star_with_minibatches():
    est = known_llc.noisy_rrr([4, 2, 3, 1], n=60, batch_size=10, **TINY)
    run = est.limit.runs[0]
    assert est.limit.nbeta == pytest.approx(60 / np.log(60)) and run.settings["batch_size"] == 10
    assert est.truth == known_llc.rrr_llc(4, 2, 3, 1) and "minimiser" in est.name
    with pytest.raises(ValueError, match="'noisy_case'"):
        known_llc.noisy_rrr([4, 2, 3], n=60, batch_size=10, **TINY)
