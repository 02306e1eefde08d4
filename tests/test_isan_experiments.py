"""Tests for lib.isan_experiments: the experiments of the chapter "ISAN learning"."""

import itertools

import numpy as np
import pytest
from scipy.special import expit, log_softmax, logsumexp

import lib.isan_experiments as ie
from lib.isan import (copying_isan, learn_from_logit_queries, noisy_parity_isan, noisy_parity_logprobs,
                      random_isan, ssm_to_isan, tv_distance)


# ---------------------------------------------------------------------------
# oracles, log-probabilities, divergences
# ---------------------------------------------------------------------------

def test_state_cached_oracle_matches_next_logits_and_counts():
    m = random_isan(4, 3, 6, np.random.default_rng(0))
    oracle = ie.StateCachedOracle(m)
    for h in [(), (2,), (0, 1), (2, 2, 1, 0, 1), (0, 1, 2)]:
        np.testing.assert_allclose(oracle(h), m.next_logits(h), atol=1e-13)
    assert oracle.calls == 5
    with pytest.raises(ValueError, match="prefix"):
        oracle((0, 0, 0, 0, 0, 0))
    with pytest.raises(ValueError, match="prefix"):
        oracle((3,))


def test_string_logprobs_matches_enumeration():
    m = random_isan(3, 3, 4, np.random.default_rng(1))
    Z = np.array(list(itertools.product(range(3), repeat=4)))
    np.testing.assert_allclose(ie.string_logprobs(m, Z), m.sequence_logprobs(), atol=1e-12)
    with pytest.raises(ValueError, match="Z: expected shape"):
        ie.string_logprobs(m, Z[:, :3])


def test_tv_monte_carlo_is_unbiased_within_error():
    a = random_isan(2, 2, 6, np.random.default_rng(2))
    b = random_isan(2, 2, 6, np.random.default_rng(3))
    exact = tv_distance(a, b)
    est, se = ie.tv_monte_carlo(a, b, 40_000, np.random.default_rng(4))
    assert 0 < se < 0.01
    assert abs(est - exact) < 4 * se
    assert ie.tv_monte_carlo(a, a, 100, np.random.default_rng(0)) == (0.0, 0.0)
    tv, _, exact_flag = ie.tv_exact_or_mc(a, b, np.random.default_rng(0), exact_limit=10, mc_samples=1000)
    assert not exact_flag and 0 < tv < 1


def test_kl_divergence():
    a = random_isan(2, 3, 4, np.random.default_rng(5))
    b = random_isan(2, 3, 4, np.random.default_rng(6))
    la, lb = a.sequence_logprobs(), b.sequence_logprobs()
    assert ie.kl_divergence(a, a) == 0.0
    assert ie.kl_divergence(a, b) == pytest.approx(float(np.sum(np.exp(la) * (la - lb))), rel=1e-12)
    assert ie.kl_divergence(a, b) >= 2 * tv_distance(a, b) ** 2  # Pinsker
    with np.errstate(divide="ignore"):
        half = np.log(np.array([0.5, 0.5, 0.0, 0.0]))
        assert ie.kl_divergence(half, np.log(np.full(4, 0.25))) == pytest.approx(np.log(2))
        assert ie.kl_divergence(np.log(np.full(4, 0.25)), half) == float("inf")


def test_logprob_table_oracle_gives_centred_marginal_logits():
    m = random_isan(3, 3, 4, np.random.default_rng(7))
    oracle = ie.logprob_table_oracle(m.sequence_logprobs(), 3, 4)
    for h in [(), (1,), (2, 0), (0, 1, 2)]:
        np.testing.assert_allclose(oracle(h), m.next_logits(h), atol=1e-10)
    with pytest.raises(ValueError, match="logprobs: expected shape"):
        ie.logprob_table_oracle(np.zeros(5), 3, 4)


# ---------------------------------------------------------------------------
# Theorem 4.3, Remark 1, representation power
# ---------------------------------------------------------------------------

def test_generic_rank():
    assert ie.generic_rank(4, 2, 9, 0) == 1          # one history
    assert ie.generic_rank(4, 2, 9, 1) == 2          # two histories
    assert ie.generic_rank(4, 2, 9, 8) == 1          # one future (Null): (|Σ|-1)·1 columns
    assert ie.generic_rank(4, 2, 9, 4) == 4
    assert ie.generic_rank(6, 4, 5, 4) == 3


def test_theorem_4_3_table_small():
    rows = ie.theorem_4_3_table([(2, 2, 6), (3, 3, 4)], seed=1)
    for r in rows:
        assert r["rank_mismatches"] == 0 and r["max_rank"] == r["d"]
        assert r["rebuild_tv"] < 1e-10 and r["rebuilt_d"] == r["d"]
        assert r["rebuild_queries"] == sum(r["S"] ** k for k in range(r["T"]))
        assert r["invariant_d"] == r["T"] * r["d"] and r["invariant_tv"] < 1e-12
        assert r["max_normalised_rank"] > r["d"]   # Remark 1


def test_copying_table_matches_closed_form():
    rows = ie.copying_table([1, 3], [0.0, 6.0, 30.0])
    assert len(rows) == 6
    for r in rows:
        assert r["d"] == r["n"] + 1
        assert r["tv"] == pytest.approx(1 - (1 - expit(-r["C"] / 2)) ** r["n"], abs=1e-12)
        assert r["tv"] <= r["bound"] + 1e-12


def test_noisy_parity_table_rank_one_and_dim_one_rebuild():
    rows = ie.noisy_parity_table([[1, 0, 1], [0, 1, 1, 1]], 0.2)
    for r in rows:
        assert r["d"] == 2 and r["tv"] < 1e-12
        assert r["max_rank"] == 1 and len(r["ranks"]) == r["n"] + 1
        assert r["dim1_tv"] < 1e-10


def test_random_ssm_literal_simulation_matches_isan_and_per_string_reference():
    ssm = ie.random_ssm(2, 2, 3, 2, np.random.default_rng(8))
    T = 5
    lp = ie.ssm_sequence_logprobs(**ssm, T=T)
    assert abs(logsumexp(lp)) < 1e-12
    m = ssm_to_isan(**ssm)
    assert m.d == 2 + 2 * 3 + 1
    assert tv_distance(m, lp, T=T) < 1e-12
    # one string by hand
    s = (1, 0, 1, 1, 0)
    x, u, ref = ssm["x0"], ssm["u1"], 0.0
    for z in s:
        y = ssm["C"](u) @ x + ssm["D"](u) @ u
        ref += log_softmax(ssm["U"] @ y)[z]
        x = ssm["A"](u) @ x + ssm["B"](u) @ u
        u = ssm["V"][:, z]
    assert lp[int("".join(map(str, s)), 2)] == pytest.approx(ref, abs=1e-12)


# ---------------------------------------------------------------------------
# Theorem 4.4 experiments
# ---------------------------------------------------------------------------

def test_theorem_n_and_exhaustive():
    assert ie.theorem_n(8, 10, 0.05) == int(np.ceil(4 * 10 / 0.05 * np.log(8 * 10 / 0.05)))
    assert ie.exhaustive_queries(3, 4) == 1 + 3 + 9 + 27


def test_learning_grid_and_summary():
    rows = ie.learning_grid([2, 3], [2, 3], [4], [0.3, 0.1], repeats=2, seed=0)
    assert len(rows) == 2 * 2 * 1 * 2 * 2
    assert all(r["tv"] < 1e-9 and r["queries"] <= r["exhaustive"] for r in rows)
    summary = ie.grid_summary(rows)
    assert len(summary) == 8 and all(s["runs"] == 2 for s in summary)
    s = next(s for s in summary if (s["d"], s["S"], s["eps"]) == (3, 3, 0.1))
    sel = [r["tv"] for r in rows if (r["d"], r["S"], r["eps"]) == (3, 3, 0.1)]
    assert s["mean_tv"] == pytest.approx(np.mean(sel)) and s["N"] == ie.theorem_n(3, 4, 0.1)


def test_learn_once_plain_and_cached_oracles_agree():
    m = random_isan(3, 3, 5, np.random.default_rng(9))
    a = ie.learn_once(m, 0.2, np.random.default_rng(1), cached_oracle=True)
    b = ie.learn_once(m, 0.2, np.random.default_rng(1), cached_oracle=False)
    assert a["queries"] == b["queries"] and a["hidden_dim"] == b["hidden_dim"]
    assert a["tv"] < 1e-9 and b["tv"] < 1e-9 and a["tv_exact"]


def test_horizon_sweep_monte_carlo_branch(monkeypatch):
    monkeypatch.setattr(ie, "EXACT_TV_LIMIT", 100)
    rows = ie.horizon_sweep(2, 3, [4, 6], 0.3, 1, seed=0, mc_samples=2000)
    assert [r["tv_exact"] for r in rows] == [True, False]  # 3^4 = 81 <= 100 < 3^6
    assert all(r["tv"] < 1e-9 for r in rows)


def test_fit_power_law_recovers_exponents():
    rows = [dict(d=d, T=T, eps=e, y=3.0 * d ** 0.5 * T ** 2.0 * (1 / e) ** 1.0)
            for d, T, e in itertools.product([2, 4, 8], [3, 5, 9], [0.3, 0.1])]
    fit = ie.fit_power_law(rows, "y", ["d", "T", "eps"], {"eps": lambda e: 1 / e})
    assert fit["exponents"] == pytest.approx({"d": 0.5, "T": 2.0, "eps": 1.0}, abs=1e-10)
    assert fit["intercept"] == pytest.approx(np.log(3.0)) and fit["r2"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="rows: need at least"):
        ie.fit_power_law(rows[:2], "y", ["d", "T", "eps"])


def test_rare_branch_sweep_extremes():
    rows = ie.rare_branch_sweep([0.1], [1e-7, 0.3], repeats=3, seed=0)
    rare, common = rows
    assert rare["found_fraction"] == 0 and rare["mean_tv"] == pytest.approx(rare["missed_tv"], rel=1e-6)
    assert common["found_fraction"] == 1 and common["mean_tv"] < 1e-9
    assert all(r["mean_tv"] <= r["eps"] for r in rows)


# ---------------------------------------------------------------------------
# Theorem C.13: noisy parity from samples
# ---------------------------------------------------------------------------

def test_fwht_matches_definition():
    f = np.random.default_rng(0).standard_normal(16)
    F = ie.fwht(f)
    ref = [sum(f[z] * (-1) ** bin(y & z).count("1") for z in range(16)) for y in range(16)]
    np.testing.assert_allclose(F, ref, atol=1e-12)
    with pytest.raises(ValueError, match="power of 2"):
        ie.fwht(np.ones(6))


def test_empirical_logprobs():
    Z = np.array([[0, 1], [0, 1], [1, 1], [0, 0]])
    lp = ie.empirical_logprobs(Z, 2)
    np.testing.assert_allclose(np.exp(lp), [0.25, 0.5, 0.0, 0.25])
    np.testing.assert_array_equal(ie.string_index(Z, 2), [1, 1, 3, 0])


def test_parity_mle_recovers_y_and_noise():
    y, p = np.array([1, 0, 1, 1, 0, 1]), 0.1
    Z = noisy_parity_isan(y, p).sample(4000, np.random.default_rng(3))
    y_hat, p_hat, cand = ie.parity_mle(Z)
    np.testing.assert_array_equal(y_hat, y)
    assert cand == 2 ** 6 and abs(p_hat - p) < 0.02
    assert tv_distance(noisy_parity_logprobs(y_hat, p_hat), noisy_parity_logprobs(y, p)) < 0.02
    # noiseless samples: clipped away from 0
    Z0 = noisy_parity_isan(y, 1e-12).sample(50, np.random.default_rng(0))
    assert ie.parity_mle(Z0)[1] == pytest.approx(0.5 / 50)


def test_parity_sample_learners_and_samples_needed():
    rows = ie.parity_sample_learners([3, 5], repeats=2, p=0.1, seed=0, max_samples=2 ** 10, beyond_log2=5)
    assert {r["m"] for r in rows if r["n"] == 3} == {2 ** k for k in range(3, 9)}
    assert {r["m"] for r in rows if r["n"] == 5} == {2 ** k for k in range(3, 11)}
    assert all(0 <= r["empirical_tv"] <= 1 and 0 <= r["mle_tv"] <= 1 for r in rows)
    need = ie.samples_needed(rows, "empirical_tv", 0.1)
    assert need[3] is not None
    assert need[5] is None or need[5] > need[3]
    synthetic = [dict(n=1, m=m, v=v) for m, v in [(10, 0.5), (100, 0.2), (1000, 0.05)]]
    assert ie.samples_needed(synthetic, "v", 0.1)[1] == pytest.approx(10 ** (2 + 2 / 3))
    assert ie.samples_needed(synthetic, "v", 0.6)[1] == 10.0
    assert ie.samples_needed(synthetic, "v", 0.01)[1] is None


def test_parity_query_learner_exact():
    rows = ie.parity_query_learner([3, 6], eps=0.2, p=0.1, seed=0)
    assert [r["n"] for r in rows] == [3, 6]
    assert all(r["tv"] < 1e-9 and r["hidden_dim"] <= 3 for r in rows)


def test_random_parity_vector_nonzero():
    rng = np.random.default_rng(0)
    assert all(ie.random_parity_vector(1, rng).tolist() == [1] for _ in range(5))


# ---------------------------------------------------------------------------
# approximately low-rank models
# ---------------------------------------------------------------------------

def test_perturbed_isan_is_base_plus_eta_and_has_rank_d_plus_k():
    base = random_isan(2, 3, 5, np.random.default_rng(10))
    zero = ie.perturbed_isan(base, 2, 0.0, np.random.default_rng(11))
    assert zero.d == 4 and tv_distance(zero, base) < 1e-14
    m1 = ie.perturbed_isan(base, 2, 1e-3, np.random.default_rng(11))
    m2 = ie.perturbed_isan(base, 2, 2e-3, np.random.default_rng(11))
    for h in [(), (1,), (2, 0, 1)]:  # logits are affine in eta
        np.testing.assert_allclose(m2.next_logits(h) - base.next_logits(h),
                                   2 * (m1.next_logits(h) - base.next_logits(h)), atol=1e-13)
    assert max(ie.rank_profile(m1.next_logits, 3, 5)) == 4


def test_gap_tolerance_and_spectrum():
    assert ie.gap_tolerance([1.0, 0.5, 1e-4, 1e-5], 2) == pytest.approx(np.sqrt(0.5e-4))
    m = random_isan(2, 2, 6, np.random.default_rng(12))
    s = ie.normalised_spectrum(m.next_logits, 2, 6, 3)
    assert s[0] == 1.0 and s[2] < 1e-12


def test_approx_low_rank_sweep_small():
    out = ie.approx_low_rank_sweep(2, 2, 6, 2, [1e-3], [1e-9, 0.5], eps=0.2, seed=0)
    rows = {(r["tol_kind"], r["tol"]): r for r in out["rows"]}
    exact = rows[("grid", 1e-9)]
    assert exact["hidden_dim"] == 4 and exact["tv"] < 1e-9
    gap = next(r for r in out["rows"] if r["tol_kind"] == "gap")
    assert gap["hidden_dim"] == 2 and gap["tv"] <= 3 * gap["base_tv"]
    assert set(out["spectra"]) == {1e-3}


# ---------------------------------------------------------------------------
# Theorem 4.4 fidelity: query scaling, structural counts, Lemma C.17, rare branch, Theorem C.13 budget
# (each chapter claim decided both ways with its declared check)
# ---------------------------------------------------------------------------

from lib.book.chapters import get_claim  # noqa: E402
from lib.isan import rare_branch_isan  # noqa: E402


def _decide(claim_id, value):
    return get_claim(claim_id).check.decide(value)


def test_effective_rank_caps_d_by_the_generic_rank():
    assert ie.effective_rank(8, 2, 3) == 2          # ranks min(8, 1, 7), min(8, 2, 3), min(8, 4, 1) at t = 0, 1, 2
    assert ie.effective_rank(8, 2, 7) == 8
    assert ie.effective_rank(4, 3, 16) == 4
    assert ie.effective_rank(8, 2, 3) == max(ie.generic_rank(8, 2, 3, t) for t in range(3))


def test_learn_once_records_structure_and_both_counts():
    m = random_isan(3, 3, 6, np.random.default_rng(11))
    row = ie.learn_once(m, 0.3, np.random.default_rng(1))
    assert row["d_eff"] == ie.effective_rank(3, 3, 6) and row["d_used"] == 3
    assert 0 < row["iteration_ratio"] <= 1 and row["iteration_ratio"] == row["iterations"] / (3 * 6)
    assert row["queries"] <= row["bound"] == ie.query_count_bound(3, 3, 6, row["N"])
    assert row["final_pass"] > 0


def test_final_pass_lookups_closed_form_and_validation():
    # T = 3, |Σ| = 2, N = 10, |H| = [1, 2, 2], |F| = [1, 2, 1]
    expected = (10 * 1 + (10 + 2 + 2 * 1) * (2 + 2 * 1)) + (10 * 2 + (10 + 2 + 2 * 2) * (1 + 0))
    assert ie.final_pass_lookups(10, 2, 3, [1, 2, 2], [1, 2, 1]) == expected
    with pytest.raises(ValueError, match="sizes, future_sizes"):
        ie.final_pass_lookups(10, 2, 3, [1, 2], [1, 2, 1])


def test_query_bound_claim_both_ways():
    m = random_isan(4, 3, 8, np.random.default_rng(12))
    row = ie.learn_once(m, 0.2, np.random.default_rng(2))
    assert _decide("isan.thm44-query-bound", row["queries"] / row["bound"])            # must pass
    # must fail: an exhaustive learner (all of Σ^{≤T−1}, as Lemma C.3 asks) at |Σ| = 3, T = 14, d = 1
    assert not _decide("isan.thm44-query-bound",
                       ie.exhaustive_queries(3, 14) / ie.query_count_bound(1, 3, 14, ie.theorem_n(1, 14, 0.3)))


def test_fit_power_law_intervals_cover_the_truth_and_flag_no_dof():
    rng = np.random.default_rng(0)
    rows = [dict(x=x, y=2.0 * x ** 1.5 * np.exp(0.05 * rng.standard_normal())) for x in [2, 3, 4, 6, 8, 12, 16]]
    fit = ie.fit_power_law(rows, "y", ["x"])
    lo, hi = fit["interval"]["x"]
    assert lo < 1.5 < hi and hi - lo < 0.3 and fit["stderr"]["x"] > 0
    exact = ie.fit_power_law(rows[:2], "y", ["x"])  # two points, two parameters: no interval
    assert exact["interval"]["x"] == (-np.inf, np.inf)


def test_exponent_claim_both_ways():
    allowed = ie.polynomial_degrees(4, 16, 0.2)
    assert allowed["eps"] == pytest.approx(1 + 1 / np.log(4 * 16 / 0.2)) and allowed["S"] == 2.0
    base = dict(d_eff=4, S=3, T=16, eps=0.2)
    points = [base] + [dict(base, **{k: v}) for k, vals in
                       {"d_eff": [2, 8], "S": [4, 5], "T": [12, 20, 24], "eps": [0.4, 0.1]}.items() for v in vals]
    # must pass: a count of the algorithm's shape, N·T·(T/2 + (d+1)(|Σ|+1)), with mild noise
    rng = np.random.default_rng(1)
    poly = [dict(p, y=ie.theorem_n(p["d_eff"], p["T"], p["eps"]) * p["T"] * (p["T"] / 2 + (p["d_eff"] + 1) * (p["S"] + 1))
                 * np.exp(0.02 * rng.standard_normal())) for p in points]
    fit = ie.fit_power_law(poly, "y", ["d_eff", "S", "T", "eps"], {"eps": lambda e: 1 / e})
    assert _decide("isan.thm44-query-exponents", ie.exponent_excess(fit, allowed))
    # must fail: the exhaustive count |Σ^{≤T−1}| of the same points
    exh = [dict(p, y=ie.exhaustive_queries(p["S"], p["T"])) for p in points]
    fit = ie.fit_power_law(exh, "y", ["d_eff", "S", "T", "eps"], {"eps": lambda e: 1 / e})
    assert not _decide("isan.thm44-query-exponents", ie.exponent_excess(fit, allowed))
    with pytest.raises(ValueError, match="allowed: no degree"):
        ie.exponent_excess(fit, {"S": 2.0})


def test_local_slope_claim_both_ways():
    Ts = [16, 20, 24]
    cubic = [dict(T=T, y=ie.theorem_n(4, T, 0.2) * T ** 2 / 2) for T in Ts]
    assert _decide("isan.thm44-local-slope", ie.fit_power_law(cubic, "y", ["T"])["exponents"]["T"])
    exh = [dict(T=T, y=ie.exhaustive_queries(3, T)) for T in Ts]
    assert not _decide("isan.thm44-local-slope", ie.fit_power_law(exh, "y", ["T"])["exponents"]["T"])


def test_query_scaling_one_factor_at_a_time():
    rows = ie.query_scaling(dict(d=2, S=2, T=5, eps=0.3), {"d": [2, 3], "eps": [0.5]}, 1, seed=0)
    assert [(r["factor"], r["d"], r["eps"]) for r in rows] == [("base", 2, 0.3), ("d", 3, 0.3), ("eps", 2, 0.5)]
    assert all(r["tv"] < 1e-9 and r["queries"] <= r["bound"] for r in rows)
    with pytest.raises(ValueError, match="base: expected the keys"):
        ie.query_scaling(dict(d=2, S=2, T=5), {}, 1, seed=0)
    with pytest.raises(ValueError, match="axes: factors"):
        ie.query_scaling(dict(d=2, S=2, T=5, eps=0.3), {"n": [1]}, 1, seed=0)


def test_lemma_c17_claim_both_ways():
    m = random_isan(3, 4, 2, np.random.default_rng(13))  # logit rank 3 at t = 1: two histories to add
    row = ie.learn_once(m, 0.2, np.random.default_rng(3))
    assert row["iterations"] == 3 and _decide("isan.lemma-c17-iterations", row["iteration_ratio"])  # must pass
    # must fail: the same passes counted against d = 1 (the model's rank is 3), and the learner's guard
    assert not _decide("isan.lemma-c17-iterations", row["iterations"] / (1 * 2))
    with pytest.raises(RuntimeError, match=r"d·T = 1·2 = 2 iterations"):
        learn_from_logit_queries(m.next_logits, 4, 2, 0.2, np.random.default_rng(3), d=1)


def test_exactness_claim_both_ways():
    m = random_isan(3, 3, 5, np.random.default_rng(14))
    assert _decide("isan.thm44-exact", ie.learn_once(m, 0.2, np.random.default_rng(4))["tv"])
    rare = rare_branch_isan(1e-3)  # the rare direction is missed at eps = 0.3 (N = 75): TV = δ(σ(2C) − 1/2)
    learned, _ = learn_from_logit_queries(rare.next_logits, 2, 4, 0.3, np.random.default_rng(0), d=2)
    assert not _decide("isan.thm44-exact", tv_distance(rare, learned))


def test_classify_rare_runs_and_claims_both_ways():
    rows = ie.rare_branch_sweep([0.1], [1e-6, 0.3], repeats=3, seed=0)
    for r in rows:
        assert _decide("isan.rare-found-exact", r["found_max_tv"])
        assert _decide("isan.rare-missed-tv", r["missed_rel_error"])
    assert rows[0]["found_fraction"] == 0 and rows[1]["found_fraction"] == 1
    missed = rows[0]["missed_tv"]
    bad = ie.classify_rare_runs([0.0, 0.7 * missed, missed], missed)  # a run between found and missed
    assert bad["found_fraction"] == pytest.approx(1 / 3)
    assert not _decide("isan.rare-missed-tv", bad["missed_rel_error"])
    bad = ie.classify_rare_runs([1e-6 * missed + 1e-9, missed], missed)  # a "found" run that is not exact
    assert not _decide("isan.rare-found-exact", bad["found_max_tv"])
    with pytest.raises(ValueError, match="tvs"):
        ie.classify_rare_runs([], missed)
    with pytest.raises(ValueError, match="missed_tv"):
        ie.classify_rare_runs([0.1], 0.0)


def test_parity_budget_comparison_and_support_claim_both_ways():
    row = ie.parity_budget_comparison(10, 0.3, 0.1, seed=0)
    assert row["tv"] < 1e-9 and row["budget_samples"] == row["queries"]
    assert row["support_bound"] == pytest.approx(max(0.0, 1 - row["queries"] * 0.9 / 2 ** 10))
    assert _decide("isan.c13-budget-support", row["empirical_tv"] - row["support_bound"])
    # must fail: an estimate that is not supported on m samples (the truth itself, TV 0) against the bound
    # for a budget below 2^n/(1−p)
    m = 100
    assert not _decide("isan.c13-budget-support", 0.0 - max(0.0, 1 - m * 0.9 / 2 ** 10))


def test_configurations_problem_holds_the_exact_enumeration_limit_both_ways():
    from lib.isan import MAX_STRINGS
    from lib.isan_experiments import configurations_problem

    assert configurations_problem([[2, 2, 24], [3, 4, 12], [1, 2, 1]]) is None  # 2^24 and 4^12 = 2^24: at the limit
    assert configurations_problem([[2, 2, 25]]).startswith("item [0] = [2, 2, 25]: |Σ|^T = 2^25 strings is above 2^24")
    assert "item [1]" in configurations_problem([[2, 3, 5], [2, 3, 16]])  # 3^16 > 2^24 >= 3^15
    assert configurations_problem([[2, 3, 15]]) is None and 3 ** 15 <= MAX_STRINGS < 3 ** 16
    assert configurations_problem([[2, 1, 3]]).endswith("an alphabet has at least 2 tokens")


def test_parity_hardness_fits_the_counting_slope_and_lists_each_learner():
    import numpy as np
    import pytest

    from lib.isan_experiments import parity_hardness, samples_needed

    study = parity_hardness([2, 4], [2], repeats=2, p=0.1, seed=0, max_samples=4096, compare_n=6, compare_eps=0.3)
    assert study.need_counting == samples_needed(study.samples, "empirical_tv", 0.1)
    ns = study.fitted_ns
    assert ns == [2, 4]
    assert study.counting_slope == pytest.approx(np.polyfit(ns, np.log2([study.need_counting[n] for n in ns]), 1)[0])
    assert study.counting_log2_at(4) == pytest.approx(np.log2(study.need_counting[4]))
    assert study.counting_log2_at(6) == pytest.approx(np.log2(study.need_counting[4]) + 2 * study.counting_slope)
    rows = study.rows()
    assert [r["n"] for r in rows] == [2, 4, 6] and rows[-1]["queries"] == study.budget["queries"]
    assert rows[0]["queries"] == study.queries[0]["queries"] and rows[1]["queries"] is None
    assert [r["MLE: candidates"] for r in rows] == [4, 16, 64]
