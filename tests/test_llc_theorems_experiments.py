"""lib.llc_theorems_experiments: the chapter "LLC theorems"' studies on the mathematics of lib.llc_theorems: the
dial as one experiment (its schedule, the quadratic prediction of λ̂, the verdict over dials) and Theorems 7.3–7.4
checked on a dial's run and a priori."""
import numpy as np
import pytest

from lib import conditional_models as cm
from lib import languages as L
from lib import llc_theorems as th
from lib import llc_theorems_experiments as tx
from lib import local_quadratic as lq


@pytest.fixture(scope="module")
def ladder():
    return cm.Support.of(L.mode_ladder(k=1, n_bigrams=4, rng=0), 1, 1)


_DIAL = dict(gamma=500.0, chains=3, draws=40, burn_in=10, seed=2)  # tests/test_llc_theorems.py's small dial


@pytest.fixture(scope="module")
def small_model(ladder):
    return cm.build({"kind": "factored", "hidden": 3, "embed_dim": 2}, ladder, seed=0).double()


@pytest.fixture(scope="module")
def small_dial(ladder, small_model):
    return th.resolution_dial(small_model, ladder, chis=[1, 2, ladder.modes.rank], nbetas=[30.0, 60.0], n=300,
                              eps_nbeta=3e-3, snapshots=4, **_DIAL)


def test_the_quadratic_prediction_holds_where_the_prior_dominates(ladder, small_model):
    """At γ = 10⁴ the chains stay within ~1/√γ of w*, where the Taylor model holds: λ̂ of every target within
    5 s.e. + 5% of its prediction (and a prediction without the gradient term misses the truncated targets)."""
    ex = tx.dial_experiment("small", small_model, ladder, chis=[1, 2, ladder.modes.rank], beta_factors=[1.0, 4.0],
                            nbeta_star=200.0, n=300, gamma=1e4, step_scale=0.25, burn_in_relaxations=4,
                            relaxations=16, chains=6, seed=0, tolerance=0.5, measure=False)
    measured = np.nanmean(ex.dial.per_chain, axis=-1)
    assert np.all(np.abs(measured - ex.predicted) <= 5 * ex.dial.llc_se + 0.05 * np.abs(ex.predicted))
    curvature_only = lq.quadratic_llc(ex.quadratic.eigenvalues[1], 0 * ex.quadratic.gradient[1], nbeta=ex.dial.nbetas[1],
                                      gamma=1e4, eps=ex.schedule["eps"], burn_in=ex.schedule["burn_in"],
                                      draws=ex.schedule["draws"])
    assert abs(measured[1, 1] - curvature_only) > 5 * ex.dial.llc_se[1, 1] + 0.05 * abs(curvature_only)
    assert ex.schedule["eps"] == pytest.approx(0.25 / (800.0 * ex.quadratic.curvature + 1e4))
    assert np.all(ex.dial.rhat[:, 0] < 1.5) and np.all(ex.dial.ess > 1)


def test_dial_schedule_by_hand():
    s = tx.dial_schedule(2.0, [10.0, 40.0], 100.0, step_scale=0.5, burn_in_relaxations=2, relaxations=3)
    assert s["eps"] == pytest.approx(0.5 / (40.0 * 2.0 + 100.0))
    assert s["relaxation"] == pytest.approx(2 / (s["eps"] * 100.0)) and th.relaxation_steps(0.01, 4.0) == 50.0
    assert s["burn_in"] == int(np.ceil(2 * s["relaxation"])) and s["draws"] == s["burn_in"] + int(np.ceil(3 * s["relaxation"]))
    with pytest.raises(ValueError, match="step_scale"):
        tx.dial_schedule(2.0, [10.0], 100.0, step_scale=1e-9, burn_in_relaxations=2, relaxations=3)
    with pytest.raises(ValueError, match="'relaxations'"):
        tx.dial_schedule(2.0, [10.0], 100.0, step_scale=0.5, burn_in_relaxations=2, relaxations=0)


def test_dial_verdict_over_several_dials():
    def fake(verdict, name="m", gamma=1.0):
        return tx.DialExperiment(name, gamma, [], {}, None, None, None, None, [], verdict, 0.5, 2.0)
    assert tx.dial_verdict([fake("supported"), fake("supported")]) == ("supported", None)
    assert tx.dial_verdict([fake("supported"), fake("contradicted")]) == ("contradicted", None)
    value, reason = tx.dial_verdict([fake("supported"), fake("inconclusive", "h=2", 100.0)])
    assert value is None and "h=2, γ = 100" in reason


def test_dial_experiment_slope_and_saturation_by_hand():
    """λ̂ ∝ nβ has slope 1; a constant λ̂ slope 0; nβh > γ counted per temperature."""
    nbetas = [10.0, 20.0, 40.0]
    def fake(llc_q):
        dial = th.Dial([1, 2], nbetas, None, np.asarray(llc_q, float), None, None, None, [], None, {}, 0.0)
        quad = lq.LocalQuadratic(np.array([[0.0, 1.0, 3.0, 6.0]]), np.zeros((1, 4)))
        return tx.DialExperiment("m", 50.0, [1, 2, 4], {}, dial, quad, None, None, [], "", 0.5, 2.0)
    assert fake([1.0, 2.0, 4.0]).llc_slope() == pytest.approx(1.0)
    assert fake([3.0, 3.0, 3.0]).llc_slope() == pytest.approx(0.0, abs=1e-12)
    assert fake([1.0, 2.0, 4.0]).saturated() == [1, 2, 2]        # h > 5, > 2.5, > 1.25 (1.0 is not)


def test_theorem_checks_on_a_small_dial(small_model, small_dial):
    tc = tx.theorem_checks(small_model, _experiment(small_dial))
    cst = tc.constants
    b, j, c = 1, 0, 2
    s = small_dial.settings
    mean_sep = small_dial.separation[b, j, c].mean()
    want = small_dial.nbetas[b] * (cst["K"] * mean_sep + 2 * cst["eps"][b, j]) / abs(small_dial.diff[b, j, c])
    assert tc.llc_ratio[b, j, c] == pytest.approx(want, rel=1e-12)
    assert tc.llc_ratio.shape == (2, 2, 3)                       # the rank is left out
    assert tc.one_step_violations == 0 and 0 < tc.separation_ratio <= 1 + 1e-9
    assert tc.llc_violations == 0 and np.nanmin(tc.llc_ratio) > 1
    assert tc.hypotheses[b] == th.contraction(eps=small_dial.eps[b], gamma=s["gamma"], nbeta=small_dial.nbetas[b],
                                              M=cst["M"])


def _experiment(dial):
    return tx.DialExperiment("small", dial.settings["gamma"], [1.0, 2.0], {}, dial, None, None, None, [], "", 0.5, 2.0)


def test_a_priori_bound_by_hand(ladder, small_model, small_dial):
    from lib.insensitivity import constants
    ap = tx.a_priori_bounds(small_model, ladder, _experiment(small_dial))
    assert ap.chis == [1, 2] and ap.bound.shape == (2, 2)
    b, j, chi = 0, 1, 2
    s, nb, e = small_dial.settings, small_dial.nbetas[b], small_dial.eps[b]
    pop = constants(small_model, ladder.modes, chi)
    M = th.curvature(small_model, th.weighted_nll, th.population_data(ladder, chi)).spectral_norm
    K = th.curvature(small_model, th.weighted_nll, th.population_data(ladder)).grad_norm
    steps = np.arange(s["burn_in"] + 1, s["draws"] + 1)
    a, bb = abs(1 - e * s["gamma"] / 2) + e * nb * M / 2, e * nb * pop.delta / 2
    sep = bb * (1 - a ** steps) / (1 - a)
    assert ap.bound[b, j] == pytest.approx(nb * (K * sep.mean() + 2 * pop.eps), rel=1e-6)
    assert ap.contracts[b, j] == (nb * M < s["gamma"])
    assert ap.resolving[b, j] == (ap.bound[b, j] <= 0.5)
    assert ap.se_q[b] == pytest.approx(small_dial.llc_se[b, 0])


def test_prediction_holds_and_ratio_by_hand():
    """Within z s.e. + 10% of the prediction's size: 104 ± 0 vs 100 holds, 111 does not; 1.2 ± 0.1 (s.e. 0.1/√2 · ...)
    against 1.0 holds only through its standard error."""
    per_chain = np.array([[[104.0, 104.0], [111.0, 111.0], [1.1, 1.3], [1.5, 1.5]]])      # (B=1, K=4, C=2)
    dial = th.Dial([1, 2, 3], [10.0], None, per_chain[:, 0].mean(-1), None, None, None, [], None, {}, 0.0,
                   per_chain=per_chain)
    predicted = np.array([[100.0, 100.0, 1.0, 1.0]])
    e = tx.DialExperiment("m", 1.0, [1.0], {}, dial, None, predicted, None, [], "", 0.5, 2.0)
    assert e.prediction_holds().tolist() == [[True, False, True, False]]
    assert e.prediction_holds(z=0.0).tolist() == [[True, False, False, False]]
    assert e.prediction_ratio() == pytest.approx([1.04])
    assert e.prediction_z()[0, 2] == pytest.approx(0.2 / 0.1)


def test_the_difference_identity_holds_to_rounding_and_catches_sign_and_pairing(small_model, small_dial):
    """Δλ̂ = nβ[mean_t (L_n(w_t) − L_n(w'_t)) + mean_t g_t − g_0] chain by chain, to rounding, with terms far from 0;
    its recorded losses are the losses at the kept positions (computed here directly); Δλ̂ with its sign flipped, or
    taken between chains that were not coupled (chain c of q against chain c + 1 of q^(χ)), fails it."""
    import dataclasses

    import torch

    ident = tx.difference_identity(small_dial)
    assert ident.max_rel_error <= tx.IDENTITY_RTOL
    rank_col = small_dial.chis.index(max(small_dial.chis))
    below = np.delete(np.arange(len(small_dial.chis)), rank_col)
    sized = lambda a: np.abs(a[:, below]) / ident.scale[:, None, None]  # noqa: E731
    assert sized(ident.delta_llc).min() > 1e-6                     # a sign error moves it by this much
    assert sized(ident.moved).min() > 1e-6 and sized(ident.gap_mean).min() > 1e-6 and sized(ident.gap_0).min() > 1e-6
    assert np.all(ident.delta_llc[:, rank_col] == 0) and np.abs(ident.rhs[:, rank_col]).max() < 1e-9
    # the recorded terms are what they name: the losses at the positions kept at a snapshot step
    fs = [lq.flat_loss(small_model, cm.history_nll, d)[0] for d in small_dial.data]
    b, j, c, i = 1, 0, 2, 1
    t = small_dial.snapshot_steps[i]
    w_q = torch.as_tensor(small_dial.positions[b, 0, c, i])
    w_chi = torch.as_tensor(small_dial.positions[b, j + 1, c, i])
    st = small_dial.steps
    assert st["loss"][b, 0, c, t] == pytest.approx(float(fs[0](w_q)), rel=1e-12)
    assert st["loss_q"][b, j + 1, c, t] == pytest.approx(float(fs[0](w_chi)), rel=1e-12)
    assert st["loss"][b, j + 1, c, t] == pytest.approx(float(fs[j + 1](w_chi)), rel=1e-12)
    assert st["init_loss"][j + 1] == pytest.approx(float(fs[j + 1](torch.cat(
        [p.detach().reshape(-1) for p in small_model.parameters()]))), rel=1e-12)
    # planted bugs: a sign error in Δλ̂; coupled chains mis-paired
    flipped = dataclasses.replace(small_dial, diff=-small_dial.diff)
    assert tx.difference_identity(flipped).max_rel_error > 1e3 * tx.IDENTITY_RTOL
    per = small_dial.per_chain
    mispaired = dataclasses.replace(small_dial, diff=per[:, :1] - np.roll(per[:, 1:], 1, axis=-1))
    assert tx.difference_identity(mispaired).max_rel_error > 1e3 * tx.IDENTITY_RTOL
    with pytest.raises(ValueError, match="per-step losses"):
        tx.difference_identity(dataclasses.replace(small_dial, steps=None))
