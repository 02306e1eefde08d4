"""Closed-form learning coefficients (lib.known_llc): each formula checked both ways."""
import math

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
