"""The chapter "Learning coefficients"'s studies (lib.llc_experiments): verdicts by hand, the studies on tiny
settings, λ̂ over a language model's checkpoints, and the old names that answer for them."""
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from lib import known_llc, llc
from lib import llc_experiments as ex
from lib.llc_experiments import known_cases
from lib.text import tokenization


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


# ----- the tolerance band -------------------------------------------------------------------------------------

def test_beyond_tolerance_z_both_ways():
    assert ex.beyond_tolerance_z(9.5, 0.1, 10.0, 0.1) == 0.0          # inside the band
    assert ex.beyond_tolerance_z(8.7, 0.1, 10.0, 0.1) == pytest.approx(3.0)   # 1.3 off, 1.0 allowed
    assert ex.beyond_tolerance_z(11.3, 0.1, 10.0, 0.1) == pytest.approx(3.0)  # symmetric
    assert ex.beyond_tolerance_z(8.7, 0.2, 10.0, 0.1) == pytest.approx(1.5)
    with pytest.raises(ValueError, match="se"):
        ex.beyond_tolerance_z(1.0, 0.0, 1.0, 0.1)


def test_asymmetric_band_by_hand():
    """(below, above): max(0, λ(1 − below) − λ̂, λ̂ − λ(1 + above)) / s.e.; one fraction is the symmetric band."""
    assert ex.beyond_tolerance_z(9.0, 0.1, 10.0, (0.1, 0.01)) == 0.0            # at the lower edge
    assert ex.beyond_tolerance_z(10.1, 0.1, 10.0, (0.1, 0.01)) == 0.0           # at the upper edge
    assert ex.beyond_tolerance_z(10.4, 0.1, 10.0, (0.1, 0.01)) == pytest.approx(3.0)  # 0.3 above 10.1
    assert ex.beyond_tolerance_z(8.7, 0.1, 10.0, (0.1, 0.01)) == pytest.approx(3.0)   # 0.3 below 9.0
    assert ex.beyond_tolerance_z(10.4, 0.1, 10.0, (0.01, 0.1)) == 0.0           # the other way round
    assert ex.band_fractions(0.1) == (0.1, 0.1) and ex.band_fractions((0.1, 0.01)) == (0.1, 0.01)
    for bad in ((0.1,), (0.1, -0.01), (0.1, 0.01, 0.0), float("nan")):
        with pytest.raises(ValueError, match="'tolerance'"):
            ex.beyond_tolerance_z(10.0, 0.1, 10.0, bad)
    assert ex.RRR_BAND == (0.10, 0.01)  # the chapter's band: its reason is RRR_BAND's docstring and the yml


# Relative errors and relative s.e. of an unbiased estimator at the chapter's ci noise: a finite-nβ shortfall of
# 0% to 3% (as the normal crossings' exact values give at nβ = 300), s.e. 1% to 1.3% of λ (64 chains).
_UNBIASED_M1 = [(-0.025, 0.009), (-0.02, 0.012), (0.0, 0.012), (-0.03, 0.010), (-0.03, 0.013), (-0.02, 0.010)]
_UNBIASED_M2 = (-0.01, 0.009)


def _validation(factor, band):
    """An RRRValidation whose multiplicity-one estimates and multiplicity-two limit are an estimator's output
    (the values above) times ``factor``: the chapter's verdict path on a biased estimator."""
    lam1, lam2 = known_llc.rrr_llc(5, 4, 5, 0), known_llc.rrr_llc(5, 3, 5, 0)
    ones = [ex.KnownCaseEstimate(f"m1-{i}", lam1, _fake_limit(factor * lam1 * (1 + e), factor * lam1 * s), band)
            for i, (e, s) in enumerate(_UNBIASED_M1)]
    e, s = _UNBIASED_M2
    fit = SimpleNamespace(llc=factor * lam2 * (1 + e), se=factor * lam2 * s)
    two = ex.NbetaLimit("m2", lam2, [_fake_limit(6.0, 0.1)], fit, None, band)
    return ex.RRRValidation(ones, [two], 300.0, band)


@pytest.mark.parametrize("factor", [1.05, 1.10])
def test_rrr_band_fails_an_upward_biased_estimator_on_both_multiplicities(factor):
    """A uniform +5% (or +10%) bias confined to the singular models fails both reduced-rank regression claims
    (excess > 3 s.e.), which the symmetric 10% band let pass; the unbiased estimator passes both."""
    fair = _validation(1.0, ex.RRR_BAND)
    assert fair.multiplicity_one_excess_z == 0.0 and fair.multiplicity_two_excess_z == 0.0
    biased = _validation(factor, ex.RRR_BAND)
    assert biased.multiplicity_one_excess_z > 3.0 and biased.multiplicity_two_excess_z > 3.0
    if factor == 1.05:
        old = _validation(factor, 0.1)
        assert old.multiplicity_one_excess_z == 0.0 and old.multiplicity_two_excess_z == 0.0


def test_rrr_band_allows_the_shortfall_and_fails_a_large_downward_bias():
    """Below, the band allows the finite-nβ shortfall (10%): −5% on top of it is not told apart (the chapter says
    so); −15% is, on both multiplicities."""
    assert _validation(0.95, ex.RRR_BAND).multiplicity_one_excess_z < 3.0
    low = _validation(0.85, ex.RRR_BAND)
    assert low.multiplicity_one_excess_z > 3.0 and low.multiplicity_two_excess_z > 3.0


def _fake_limit(value, se, rhat=1.0, ess=1000.0, diverged=0.0):
    class FakeLimit:  # what KnownCaseEstimate reads of an EpsLimit
        llc, max_rhat, min_total_ess, divergent_fraction = value, rhat, ess, diverged
    FakeLimit.se = se
    return FakeLimit()


def test_known_case_estimate_band_and_mixing():
    lam = known_llc.rrr_llc(5, 4, 5, 0)
    est = ex.KnownCaseEstimate("x", lam, _fake_limit(7.0, 0.1), 0.1)
    assert est.rel_error == pytest.approx(-0.125) and est.z == pytest.approx(-10.0)
    assert est.excess_z == pytest.approx((1.0 - 0.8) / 0.1) and est.mixed
    assert not ex.KnownCaseEstimate("x", lam, _fake_limit(8.0, 0.1, rhat=1.06), 0.1).mixed
    assert ex.KnownCaseEstimate("x", lam, _fake_limit(8.0, 0.1, rhat=1.05), 0.1).mixed
    assert not ex.KnownCaseEstimate("x", lam, _fake_limit(8.0, 0.1, ess=399.0), 0.1).mixed


def test_case_checks_name_the_parameter():
    assert ex.check_rrr_cases([[5, 3, 5, 1]]) == [(5, 3, 5, 1)]
    for bad in ([[5, 3, 5]], [[2, 2, 2, 3]], [[0, 1, 1, 0]]):
        with pytest.raises(ValueError, match="'rrr_cases'"):
            ex.check_rrr_cases(bad)
    assert ex.check_crossing_cases([[1], [2, 3]]) == [(1,), (2, 3)]
    for bad in ([[1, 2, 3]], [[]], [[0]]):
        with pytest.raises(ValueError, match="'nc_cases'"):
            ex.check_crossing_cases(bad)


# ----- the experiments, on tiny settings ------------------------------------------------------------------------

TINY = dict(gamma=1.0, eps_nbeta=[0.2, 0.1], relax=0.3, chains=4, seed=0, device="cpu")


def test_validate_rrr_splits_by_multiplicity_and_uses_eps_limits():
    v = ex.validate_rrr([[4, 3, 8, 0], [5, 3, 5, 0]], n=30, nbeta=40.0, limit_nbetas=[20.0, 30.0, 40.0], **TINY)
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
    assert v.tolerance == ex.RRR_BAND and v.estimates[0].tolerance == ex.RRR_BAND  # the default band
    with pytest.raises(ValueError, match="'tolerance'"):
        ex.validate_rrr([[4, 3, 8, 0]], n=30, nbeta=40.0, limit_nbetas=[20.0, 30.0, 40.0], tolerance=(0.1,), **TINY)
    none = ex.RRRValidation([], [], 40.0, 0.1)
    assert "no reduced-rank" in none.multiplicity_one_undecided and none.multiplicity_one_excess_z is None


def test_unmixed_and_refused_leave_the_claims_undecided():
    lam1, lam2 = known_llc.rrr_llc(5, 4, 5, 0), known_llc.rrr_llc(5, 3, 5, 0)
    good = ex.KnownCaseEstimate("a", lam1, _fake_limit(8.0, 0.1), 0.1)
    slow = ex.KnownCaseEstimate("b", lam1, _fake_limit(8.0, 0.1, rhat=1.2), 0.1)
    refused = ex.NbetaLimit("c", lam2, [_fake_limit(6.0, 0.1)], None, "runs away", 0.1)
    assert ex.RRRValidation([good], [], 300.0, 0.1).multiplicity_one_undecided is None
    assert "b" in ex.RRRValidation([good, slow], [], 300.0, 0.1).multiplicity_one_undecided
    v = ex.RRRValidation([good], [refused], 300.0, 0.1)
    assert "runs away" in v.multiplicity_two_undecided and v.multiplicity_two_excess_z is None
    assert refused.rel_error is None and refused.largest_nbeta_rel_error == pytest.approx(6.0 / 6.5 - 1)


def test_log_form_check_error_grows_as_the_gap_shrinks():
    rows = ex.log_form_check([100.0, 300.0, 1000.0], 1.0)
    assert [r["k"] for r in rows] == [(1, 1), (2, 2), (3, 3)] and [r["δ"] for r in rows] == pytest.approx([1, 0.5, 1 / 3])
    errors = [abs(r["rel. error"]) for r in rows]
    assert errors[0] < 0.01 and errors[0] < errors[1] < errors[2] < 0.1
    assert all(r["E[nβK]/λ at the largest nβ"] < 0.8 for r in rows)  # the raw values are far from λ
    with pytest.raises(ValueError, match="multiplicity-two"):
        ex.log_form_check([100.0, 300.0, 1000.0], 1.0, ks=[(1, 2)])


def test_normal_crossing_limits_compare_with_quadrature():
    out = ex.normal_crossing_limits([[1], [1, 3]], n=40, nbetas=[10.0, 20.0, 30.0],
                                    **{**TINY, "relax": 1.0, "chains": 64})
    one, three = out
    scale = float((known_llc.normal_crossing_problem([1], n=40, seed=0).data[0] ** 2).mean())
    assert one.exact == pytest.approx([known_llc.normal_crossing_tempered_mean([1], nb, 1.0, scale)
                                       for nb in (10.0, 20.0, 30.0)])
    assert one.z_vs_exact == pytest.approx([(p.llc - e) / p.se for p, e in zip(one.points, one.exact)])
    assert one.fit is not None and one.dof == 1 and max(abs(z) for z in one.z_vs_exact) < 5
    assert three.fit is None and "no degree of freedom" in three.refused  # k = (1, 3): three coefficients
    assert abs(one.exact_fit_rel_error) < 0.01


def test_precision_run_agrees_with_quadrature_on_a_singular_crossing():
    """A real run on k = (2) at nβ = 10 (λ = 1/4 < d/2): λ̂₀ within 4 s.e. of the exact E[nβK] by quadrature (an
    independent computation), and the properties by hand."""
    p = ex.crossing_at_precision([2], n=40, nbeta=10.0, **{**TINY, "relax": 1.0, "chains": 1024})
    scale = float((known_llc.normal_crossing_problem([2], n=40, seed=0).data[0] ** 2).mean())
    assert p.exact == pytest.approx(known_llc.normal_crossing_tempered_mean([2], 10.0, 1.0, scale))
    assert p.k == (2,) and p.chains == 1024 and abs(p.z) < 4
    assert p.z == pytest.approx((p.estimate - p.exact) / p.se)
    assert p.bias_z == pytest.approx(0.05 * p.exact / p.se)
    with pytest.raises(ValueError, match="'nc_precision_case' must be a singular normal crossing"):
        ex.crossing_at_precision([1], n=40, nbeta=10.0, **{**TINY, "relax": 1.0, "chains": 8})
    assert ex.singular_crossing_problem([1, 1]) is None and "regular" in ex.singular_crossing_problem([1])
    assert "'nc_precision_case' must be a list of 1 or 2 integers" in ex.singular_crossing_problem([1, 1, 1])
    with pytest.raises(ValueError, match="'nc_cases' must hold lists of 1 or 2 integers"):
        ex.check_crossing_cases([[2], [0]])


@pytest.mark.parametrize("factor", [0.95, 1.05])
def test_a_five_percent_bias_on_a_singular_model_fails_a_must_hold(factor):
    """At the ci run's precision (s.e. 0.8% of E[nβK] at nβ = 10 on k = (2)), an unbiased estimate a standard
    error or two off passes llc.nc-singular-precise; the same estimator times 0.95 or 1.05 fails it, decided by
    the chapter's own claim. The precision gate passes at that s.e. and fails at twice it."""
    from lib.book.chapters import get_chapter
    from lib.book.claims import evaluate

    claims = {c.id: c for c in get_chapter("llc").claims}
    exact = 0.2162
    for z0 in (-1.5, 0.0, 1.5):
        se = 0.008 * exact
        fair = ex.PrecisionPoint((2,), 10.0, exact + z0 * se, se, exact, 16384)
        records = {"values": {"nc_precision_abs_z": {"value": abs(fair.z)},
                              "nc_precision_bias_z": {"value": fair.bias_z}}, "meta": {"profile": "ci"}}
        assert evaluate(claims["llc.nc-singular-precise"], records).ok
        assert evaluate(claims["llc.nc-singular-tells-5pct"], records).ok
        biased = {"values": {"nc_precision_abs_z": {"value": abs(fair.z_if_scaled(factor))}}, "meta": {"profile": "ci"}}
        assert not evaluate(claims["llc.nc-singular-precise"], biased).ok
        # the same by hand: (f·λ̂ − E)/(f·s.e.)
        assert fair.z_if_scaled(factor) == pytest.approx((factor * fair.estimate - exact) / (factor * se))
    loose = ex.PrecisionPoint((2,), 10.0, exact, 0.016 * exact, exact, 4096)
    assert not evaluate(claims["llc.nc-singular-tells-5pct"],
                        {"values": {"nc_precision_bias_z": {"value": loose.bias_z}}, "meta": {"profile": "ci"}}).ok


def test_regular_check_properties_by_hand():
    """z per step size, the largest |z|, and the weighted line through the exact targets at ε = 0."""
    class Run:
        def __init__(self, eps, value, se):
            self.settings, self.llc, self.se, self.nbeta = {"eps": eps, "draws": 10}, value, se, 100.0

    runs = [Run(0.004, 2.3, 0.1), Run(0.002, 2.05, 0.05), Run(0.001, 2.1, 0.05)]
    limit = _fake_limit(2.0, 0.04)
    limit.runs = runs
    check = ex.RegularCheck(known_llc.regular_llc(4), limit, [2.2, 2.1, 2.05], 2.0)
    assert check.z == pytest.approx([1.0, -1.0, 1.0]) and check.max_abs_z == pytest.approx(1.0)
    assert check.rel_error == 0.0
    w = np.array([10.0, 20.0, 20.0]) ** 2  # weights 1/s.e.²: the line by the normal equations
    e, y = np.array([0.004, 0.002, 0.001]), np.array([2.2, 2.1, 2.05])
    slope = (w.sum() * (w * e * y).sum() - (w * e).sum() * (w * y).sum()) / (w.sum() * (w * e * e).sum() - (w * e).sum() ** 2)
    assert check.exact_line_limit == pytest.approx(((w * y).sum() - slope * (w * e).sum()) / w.sum(), rel=1e-10)
    assert [row["steps"] for row in check.table()] == [10, 10, 10]


def test_experiments_refuse_no_localisation():
    with pytest.raises(ValueError, match="'gamma'"):
        ex.validate_rrr([[4, 3, 8, 0]], n=30, nbeta=40.0, limit_nbetas=[20.0, 30.0, 40.0],
                        **{**TINY, "gamma": 0.0})


def test_crossing_and_limit_properties_by_hand():
    lam = known_llc.normal_crossing_llc([2])
    fit = SimpleNamespace(llc=0.26, se=0.02, params=np.zeros(2))
    exact_fit = SimpleNamespace(llc=0.25, params=np.zeros(2))
    c = ex.CrossingLimit((2,), lam, 0.5, 1, [_fake_limit(0.2, 0.01)] * 3, [0.21, 0.2, 0.22], exact_fit, fit, None)
    assert c.name == "(2)" and c.dof == 1 and c.z_fit_vs_exact_fit == pytest.approx(0.5)
    assert c.z_vs_exact == pytest.approx([-1.0, 0.0, -2.0]) and c.exact_fit_rel_error == 0.0
    lam2 = known_llc.rrr_llc(5, 3, 5, 0)
    x = ex.NbetaLimit("c", lam2, [_fake_limit(5.0, 0.1), _fake_limit(5.2, 0.1, rhat=1.1)],
                             SimpleNamespace(llc=5.2, se=0.2, params=np.array([5.2, 1.0]), chi2=0.5, dof=1), None, 0.1)
    assert x.rel_error == pytest.approx(-1.3 / 6.5) and x.excess_z == pytest.approx((1.3 - 0.65) / 0.2)
    assert x.largest_nbeta_rel_error == pytest.approx(-1.3 / 6.5) and not x.mixed


def test_noisy_rrr_runs_at_beta_star_with_minibatches():
    est = ex.noisy_rrr([4, 2, 3, 1], n=60, batch_size=10, **TINY)
    run = est.limit.runs[0]
    assert est.limit.nbeta == pytest.approx(60 / np.log(60)) and run.settings["batch_size"] == 10
    assert est.truth == known_llc.rrr_llc(4, 2, 3, 1) and "minimiser" in est.name
    with pytest.raises(ValueError, match="'noisy_case'"):
        ex.noisy_rrr([4, 2, 3], n=60, batch_size=10, **TINY)


# ----- a language model over training ---------------------------------------------------------------------------

class _FakeSuite:
    """Two checkpoints of one tiny GPT-NeoX, with the history a suite keeps (held-out loss per checkpoint)."""

    checkpoint_steps = [0, 5]
    history = {"tiny": {"checkpoint_step": [0, 5], "heldout_loss": [3.5, 2.5]}}

    def load(self, size, step, device="cpu"):
        from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

        torch.manual_seed(step)
        cfg = GPTNeoXConfig(vocab_size=16, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                            intermediate_size=32, max_position_embeddings=8)
        return SimpleNamespace(model=GPTNeoXForCausalLM(cfg).eval())


def test_llc_over_training_rows():
    from lib.models.causal_lm import sequence_loss

    ids = torch.randint(0, 16, (32, 8), generator=torch.Generator().manual_seed(0))
    kw = dict(gamma=100.0, eps=1e-5, chains=2, draws=6, burn_in=2, batch_size=4, seed=0, device="cpu")
    rows = ex.llc_over_training(_FakeSuite(), "tiny", ids, **kw)
    assert [r["step"] for r in rows] == [0, 5] and [r["heldout_loss"] for r in rows] == [3.5, 2.5]
    model = _FakeSuite().load("tiny", 5).model
    model.set_attn_implementation("eager")
    by_hand = llc.estimate_llc(model, sequence_loss, (ids,), progress=False, **kw)
    assert rows[1]["llc"] == by_hand.llc and rows[1]["init_loss"] == by_hand.init_loss
    assert rows[1]["params"] == sum(p.numel() for p in model.parameters()) and rows[1]["diverged"] == 0.0


# ----- old names ------------------------------------------------------------------------------------------------

def test_old_names_answer_from_the_new_homes():
    """Each study's old public name in lib.llc or lib.known_llc is the function or class that moved."""
    assert llc.heavy_steps is ex.heavy_steps and llc.suite_config is ex.suite_config
    assert llc.llc_over_training is ex.llc_over_training
    assert known_llc.heavy_steps is known_cases.heavy_steps  # the known-λ problems' costs, as before
    for name in ["validate_rrr", "regular_check", "noisy_rrr", "normal_crossing_limits", "log_form_check",
                 "beyond_tolerance_z", "KnownCaseEstimate", "RRRValidation", "MIXED_RHAT", "MIXED_ESS",
                 "check_rrr_cases", "rrr_cases_problem", "crossing_cases_problem", "rrr_case_problem"]:
        assert getattr(known_llc, name) is getattr(ex, name), name
    assert known_llc.chain_steps is llc.chain_steps
    # the twin moved to lib.text.tokenization; lib.llc's old name keeps its lookup of a local tokenizer
    assert llc.tokenizer_vocab_size.func is tokenization.tokenizer_vocab_size
    assert llc.tokenizer_vocab_size.keywords == {"look_up_local": True}
    assert llc.tokenizer_vocab_size("bpe:2048") == 2048
    with pytest.raises(AttributeError, match="no_such_name"):
        known_llc.no_such_name  # noqa: B018


def test_chapter_costs_are_the_known_problems_then_the_language_model():
    """heavy_steps: the known-λ problems' steps, then one for the language model at its checkpoints."""
    values = dict(n_samples=100, nbeta=300.0, gamma=1.0, eps_nbeta=[0.2, 0.1], relax=3.0, chains=4, regular_d=4,
                  regular_eps_nbeta=[0.4, 0.2], regular_time=0.5, rrr_cases=[[5, 4, 5, 0]],
                  rrr_limit_nbetas=[100.0, 300.0, 1000.0], nc_cases=[[1]], nc_nbetas=[10.0, 30.0, 100.0], nc_chains=8,
                  noisy_case=[5, 3, 5, 1], noisy_n=1000, noisy_batch_size=100, profile="ci", seed=0, lm_size="p-tiny",
                  smoke_upstream=False, lm_chains=4, lm_draws=120, lm_batch_size=4, lm_windows=1024)
    steps = ex.heavy_steps(values)
    known = known_cases.heavy_steps(values)
    assert [(s.name, s.flops) for s in steps[:-1]] == [(s.name, s.flops) for s in known]
    config, checkpoints = ex.suite_config("ci", 0, "p-tiny")
    peak, flops = llc.lm_sgld_cost(config, chains=4, steps=120, batch_size=4, windows=1024)
    assert steps[-1].name == f"SGLD on mini-Pythia p-tiny at {len(checkpoints)} checkpoints"
    assert steps[-1].flops == flops * len(checkpoints) and steps[-1].peak_bytes == peak
