"""lib.local_quadratic: λ̂ of a quadratic loss in closed form, against a step-by-step recursion, its limits and
simulated chains."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from lib import local_quadratic as lq


def _recursion(h, g, nbeta, gamma, eps, burn_in, draws):
    """The mean and variance of SGLD on a quadratic loss, step by step (per eigendirection), and the estimator's mean."""
    a = nbeta * h + gamma
    m, v, total = np.zeros_like(h), np.zeros_like(h), 0.0
    for t in range(draws):
        if t >= burn_in:
            total += np.sum(g * m + 0.5 * h * (m ** 2 + v))
        m = (1 - eps * a / 2) * m - eps * nbeta * g / 2
        v = (1 - eps * a / 2) ** 2 * v + eps
    return nbeta * total / (draws - burn_in)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.floats(1.0, 200.0), st.floats(0.5, 50.0), st.floats(1e-5, 0.5), st.integers(0, 30),
       st.integers(1, 60), st.integers(0, 2 ** 31 - 1))
def test_quadratic_llc_equals_the_step_by_step_recursion(d, nbeta, gamma, step, burn_in, length, seed):
    rng = np.random.default_rng(seed)
    h = rng.normal(0.0, 1.0, d) * rng.choice([1e-3, 1.0, 10.0], d)
    g = rng.normal(0.0, 1.0, d)
    eps = step / (nbeta * np.max(np.abs(h)) + gamma)              # every direction stable: 0 < εa < 4
    want = _recursion(h, g, nbeta, gamma, eps, burn_in, burn_in + length)
    got = lq.quadratic_llc(h, g, nbeta=nbeta, gamma=gamma, eps=eps, burn_in=burn_in, draws=burn_in + length)
    # The closed form sums geometric series whose terms are of the stationary size nβ Σ (|g m∞| + ½|h|(m∞² + v∞)),
    # m∞ = −nβ g/a, v∞ = 1/(a(1 − εa/4)): where the recursion's value is near 0 (burn_in 0, one draw gives exactly
    # 0) the closed form keeps a cancellation error of that size times ~1e-12 (1.0e-10 seen at nβ 189, γ 0.5).
    a = nbeta * h + gamma
    m_inf, v_inf = -nbeta * g / a, 1.0 / (a * (1 - eps * a / 4))
    scale = nbeta * np.sum(np.abs(g * m_inf) + 0.5 * np.abs(h) * (m_inf ** 2 + v_inf))
    assert got == pytest.approx(want, rel=1e-8, abs=1e-12 * max(1.0, scale))


def test_quadratic_llc_limits_and_a_flat_direction():
    h, g = np.array([0.0, 0.5, 4.0]), np.array([0.0, 0.3, -0.2])
    nb, gam = 100.0, 20.0
    a = nb * h + gam
    laplace = 0.5 * np.sum(nb * h / a) - 0.5 * nb ** 2 * np.sum(g ** 2 * (nb * h + 2 * gam) / a ** 2)
    assert lq.quadratic_llc(h, g, nbeta=nb, gamma=gam) == pytest.approx(laplace, rel=1e-14)
    assert lq.quadratic_llc(h, g, nbeta=nb, gamma=gam, eps=1e-9) == pytest.approx(laplace, rel=1e-7)
    # a long run at a small step approaches the stationary law, which approaches the posterior
    assert lq.quadratic_llc(h, g, nbeta=nb, gamma=gam, eps=1e-5, burn_in=10 ** 6, draws=10 ** 7) == pytest.approx(
        lq.quadratic_llc(h, g, nbeta=nb, gamma=gam, eps=1e-5), rel=1e-9)
    # regular directions only, no gradient, γ → 0: each curved direction adds ½ (the learning coefficient d/2)
    assert lq.quadratic_llc(np.array([1.0, 2.0, 3.0]), np.zeros(3), nbeta=1e6, gamma=1e-6) == pytest.approx(1.5, rel=1e-9)
    # the prior dominates (nβh ≪ γ): a curvature trace nβ tr(H) / 2γ
    assert lq.quadratic_llc(np.array([1.0, 2.0]), np.zeros(2), nbeta=1.0, gamma=1e6) == pytest.approx(1.5e-6, rel=1e-5)
    assert np.isnan(lq.quadratic_llc(np.array([-1.0]), np.zeros(1), nbeta=100.0, gamma=10.0))      # improper
    assert np.isnan(lq.quadratic_llc(np.array([1.0]), np.zeros(1), nbeta=1.0, gamma=1.0, eps=5.0))    # unstable
    # a zero curvature of the whole potential (a = 0): the mean drifts linearly and the variance grows linearly
    zero = lq.quadratic_llc(np.array([-0.1]), np.array([0.2]), nbeta=10.0, gamma=1.0, eps=0.01, burn_in=3, draws=9)
    assert zero == pytest.approx(_recursion(np.array([-0.1]), np.array([0.2]), 10.0, 1.0, 0.01, 3, 9), rel=1e-12)
    with pytest.raises(ValueError, match="eps"):
        lq.quadratic_llc(h, g, nbeta=nb, gamma=gam, draws=10)


def test_quadratic_llc_against_simulated_chains():
    """Many SGLD chains on a quadratic loss, simulated with noise: the estimator's mean within 4 s.e. of the formula."""
    rng = np.random.default_rng(1)
    h, g = np.array([0.02, 1.0, 5.0]), np.array([0.1, -0.05, 0.2])
    nb, gam, eps, burn_in, draws, C = 50.0, 10.0, 2e-3, 40, 400, 4000
    u, per_chain = np.zeros((C, 3)), np.zeros(C)
    for t in range(draws):
        if t >= burn_in:
            per_chain += u @ g + 0.5 * (u ** 2) @ h
        u = u - eps / 2 * (nb * (g + h * u) + gam * u) + np.sqrt(eps) * rng.standard_normal((C, 3))
    per_chain *= nb / (draws - burn_in)
    want = lq.quadratic_llc(h, g, nbeta=nb, gamma=gam, eps=eps, burn_in=burn_in, draws=draws)
    assert abs(per_chain.mean() - want) < 4 * per_chain.std(ddof=1) / np.sqrt(C)
    assert abs(per_chain.mean() - lq.quadratic_llc(h, -g * 3, nbeta=nb, gamma=gam, eps=eps, burn_in=burn_in,
                                                   draws=draws)) > 10 * per_chain.std(ddof=1) / np.sqrt(C)


def test_taylor_chains_dense_and_product_forms_agree_and_average_to_the_closed_form():
    """SGLD on a quadratic's Taylor model: the chains with H u as a dense matrix product and as an autograd
    Hessian-vector product (lib.hessian) are the same to float rounding; their mean λ̂ is quadratic_llc's
    expectation within 4 standard errors of the chains' mean (and far from it with the wrong sign of g)."""
    import torch

    from lib import hessian

    rng = np.random.default_rng(3)
    d = 6
    Q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    h = np.array([0.0, 0.01, 0.3, 1.0, 2.0, 5.0])
    H = torch.as_tensor((Q * h) @ Q.T)
    g = torch.as_tensor(rng.standard_normal(d) * 0.05)
    loss = lambda p: 0.5 * p["w"] @ H @ p["w"] + g @ p["w"]
    w0 = {"w": torch.zeros(d, dtype=torch.float64)}

    def by_products(U):
        return torch.stack([hessian.hessian_vector_product(loss, w0, {"w": u})["w"] for u in U])

    nbetas, gamma, eps, burn_in, draws, chains = [20.0, 80.0], 1.0, 0.01, 50, 400, 200
    kw = dict(nbetas=nbetas, gamma=gamma, eps=eps, chains=chains, draws=draws, burn_in=burn_in, seed=7)
    dense = lq.taylor_chains(lambda U: U @ H, g, **kw)
    small = dict(kw, chains=3, draws=60)
    np.testing.assert_allclose(lq.taylor_chains(by_products, g, **small), lq.taylor_chains(lambda U: U @ H, g, **small),
                               rtol=1e-10, atol=1e-12)
    assert dense.shape == (2, chains)
    gt = Q.T @ g.numpy()
    for b, nb in enumerate(nbetas):
        want = lq.quadratic_llc(h, gt, nbeta=nb, gamma=gamma, eps=eps, burn_in=burn_in, draws=draws)
        se = dense[b].std(ddof=1) / np.sqrt(chains)
        assert abs(dense[b].mean() - want) < 4 * se
    flipped = lq.taylor_chains(lambda U: U @ H, -g * 20, **kw)
    want = lq.quadratic_llc(h, gt, nbeta=80.0, gamma=gamma, eps=eps, burn_in=burn_in, draws=draws)
    assert abs(flipped[1].mean() - want) > 4 * flipped[1].std(ddof=1) / np.sqrt(chains)
    with pytest.raises(ValueError, match="'burn_in'"):
        lq.taylor_chains(lambda U: U @ H, g, **dict(kw, burn_in=draws))
