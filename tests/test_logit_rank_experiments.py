"""lib.logit_rank_experiments: the α curve and the rules that decide the α findings, Fig. 3's shape, the overlap
against a control pair with its bootstrap, LinGen's margins and its comparison with the baselines, Lemma C.18's
table; each against a hand-made case or an independent computation, and each rule both ways."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import torch

from lib import isan, logit_rank_experiments as lx, logits as lg

torch.set_num_threads(1)


# ---------------------------------------------------------------------------
# the α curve and its decisions
# ---------------------------------------------------------------------------

def test_alpha_over_n_reads_the_nested_submatrices():
    rng = np.random.default_rng(0)
    width, n = 3, 40
    L = np.full((60, 70 * width), 1e6)                      # rows and futures beyond n must never be read
    L[:n, :n * width] = rng.standard_normal((n, n * width)) @ np.diag(np.linspace(3, 0.1, n * width))
    curve = lx.alpha_over_n(L, width, [10, 20, 40, 80])
    assert list(curve.sizes) == [10, 20, 40]                 # 80 > the 40 rows that hold real values... and is dropped
    for j, m in enumerate(curve.sizes):
        s = np.linalg.svd(L[:m, :m * width], compute_uv=False) / np.sqrt(m * m * width)
        for r in lx.READINGS:
            assert curve.alpha[r][j] == pytest.approx(lg.fit_power_law(s, r).alpha, abs=1e-10)
    assert curve.at("original", 20) == curve.alpha["original"][1]
    assert list(lx.alpha_over_n(L, width, [3, 4, 8]).sizes) == [4, 8]    # the fit needs 4 singular values


def test_planted_curve_bias_shrinks_with_n():
    sizes = [50, 200, 1000, 10000]
    out = lx.planted_alpha_curve(0.6, sizes)
    assert np.allclose(out["original"], 0.6, atol=1e-9)
    assert np.all(np.diff(out["literal"]) > 0) and np.all(out["literal"] < 0.6)
    assert out["literal"][-1] > 0.5 > out["literal"][0]


def curve(sizes, literal, original):
    return lx.AlphaCurve(np.array(sizes), {"literal": np.array(literal, float), "original": np.array(original, float)})


def test_band_decision_both_ways():
    sizes = [30, 60, 120, 240]
    inside = lx.decide_band(curve(sizes, [0.3, 0.55, 0.555, 0.56], [0.4, 0.56, 0.565, 0.57]), 0.5, 0.6)
    assert inside.decided and inside.inside and inside.value == 0.56 and inside.reason is None
    # the smallest size (outside the last two doublings) does not count, nor (beyond the slope) the middle ones
    assert lx.decide_band(curve(sizes, [0.9, 0.55, 0.555, 0.56], [0.9, 0.56, 0.565, 0.57]), 0.5, 0.6).decided
    # every reading at the largest n and both projections above 1/2: does not reproduce (the step-0 case)
    step0 = lx.decide_band(curve(sizes, [0.344, 0.364, 0.428, 0.555], [0.467, 0.484, 0.563, 0.713]), -np.inf, 0.5)
    assert step0.decided and step0.inside is False and step0.value == 0.555
    assert min(step0.projected.values()) > 0.5
    above = lx.decide_band(curve(sizes, [0.5, 0.66, 0.70, 0.74], [0.6, 0.8, 0.84, 0.9]), 0.5, 0.6)
    assert above.decided and above.inside is False
    # the readings disagree: undecided, naming both
    split = lx.decide_band(curve(sizes, [0.4, 0.45, 0.47, 0.48], [0.5, 0.55, 0.57, 0.58]), -np.inf, 0.5)
    assert not split.decided and split.inside is None and "literal" in split.reason and "original" in split.reason
    # measured above the band, but falling fast enough to reach it by n = 10^4: undecided
    falling = lx.decide_band(curve(sizes, [0.9, 0.8, 0.72, 0.64], [0.95, 0.85, 0.77, 0.69]), 0.5, 0.6)
    assert not falling.decided and "projected" in falling.reason
    slope = np.polyfit(np.log2([60, 120, 240]), [0.8, 0.72, 0.64], 1)[0]
    assert falling.slope["literal"] == pytest.approx(slope)
    assert falling.projected["literal"] == pytest.approx(0.64 + slope * np.log2(10_000 / 240))
    # at the paper's size there is nothing to project
    at_paper = lx.decide_band(curve([2500, 5000, 10000], [0.7, 0.6, 0.55], [0.8, 0.6, 0.56]), 0.5, 0.6)
    assert at_paper.projected == {"literal": 0.55, "original": 0.56} and at_paper.decided and at_paper.inside
    edge = lx.decide_band(curve([2500, 5000, 10000], [0.7, 0.6, 0.55], [0.8, 0.6, 0.65]), 0.5, 0.6)
    assert not edge.decided and "original reading at n = 10000: 0.650 (above)" in edge.reason


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0, 1.2), min_size=8, max_size=8), st.floats(0.2, 0.8), st.floats(0.01, 0.4))
def test_band_decision_agrees_with_the_claim_check(values, low, width):
    """Whenever the rule decides, its verdict is the check on the recorded value (the literal α at the largest n)."""
    c = curve([20, 40, 80, 160], values[:4], values[4:])
    d = lx.decide_band(c, low, low + width)
    if d.decided:
        assert d.inside == (low <= d.value <= low + width)
        assert (low <= c.alpha["original"][-1] <= low + width) == d.inside
        assert all(low <= v <= low + width for v in d.projected.values()) == d.inside
    else:
        assert d.reason


def test_sign_decision_both_ways():
    sizes = [30, 60, 120, 240]
    a = curve(sizes, [0.5, 0.6, 0.65, 0.7], [0.6, 0.7, 0.75, 0.8])
    b = curve(sizes, [0.9, 0.4, 0.45, 0.5], [0.9, 0.5, 0.55, 0.58])
    up = lx.decide_sign(a, b)
    assert up.decided and up.value == pytest.approx(0.2) and list(up.sizes) == [60, 120, 240]
    down = lx.decide_sign(b, a)
    assert down.decided and down.value == pytest.approx(-0.2)
    mixed = lx.decide_sign(a, curve(sizes, [0.4, 0.4, 0.7, 0.5], [0.5, 0.5, 0.6, 0.6]))
    assert not mixed.decided and "changes sign" in mixed.reason and mixed.value == pytest.approx(0.2)


def test_sign_against_every_null_needs_all_of_them():
    """By hand: two nulls decided below give the smallest gap; one decided above settles it whatever the other
    says; an undecided null withholds a positive verdict and names itself."""
    sizes = [30, 60, 120, 240]
    trained = curve(sizes, [0.5, 0.6, 0.65, 0.7], [0.6, 0.7, 0.75, 0.8])
    low = curve(sizes, [0.3, 0.4, 0.45, 0.5], [0.4, 0.5, 0.55, 0.6])          # 0.2 below everywhere
    lower = curve(sizes, [0.1, 0.2, 0.25, 0.3], [0.2, 0.3, 0.35, 0.4])        # 0.4 below
    high = curve(sizes, [0.9, 0.9, 0.9, 0.9], [0.9, 0.9, 0.9, 0.9])           # above: 0.1 to 0.3
    mixed = curve(sizes, [0.4, 0.4, 0.7, 0.5], [0.5, 0.5, 0.6, 0.6])
    sign = lambda null: lx.decide_sign(trained, null)
    assert lx.decide_sign_against_nulls({"a": sign(low), "b": sign(lower)}) == (pytest.approx(0.2), None)
    value, reason = lx.decide_sign_against_nulls({"a": sign(lower), "b": sign(high)})
    assert value == pytest.approx(-0.1) and reason is None
    value, reason = lx.decide_sign_against_nulls({"a": sign(mixed), "b": sign(high)})
    assert value < 0 and reason is None
    value, reason = lx.decide_sign_against_nulls({"a": sign(low), "shuffled": sign(mixed)})
    assert reason.startswith("against shuffled:") and "changes sign" in reason and "against a" not in reason
    with pytest.raises(lg.LogitsError):
        lx.decide_sign_against_nulls({})


# ---------------------------------------------------------------------------
# Fig. 3's shape, average KL to low rank
# ---------------------------------------------------------------------------

def test_training_shape_by_hand():
    s = lx.training_shape([0, 1, 10, 100], [0.8, 0.1, 0.2, 0.4])
    assert (s.drop, s.rise, s.final_over_start, s.argmin_step) == (pytest.approx(0.125), pytest.approx(4.0),
                                                                     pytest.approx(0.5), 1)
    # the minimum is taken strictly between the first and the last checkpoint
    s2 = lx.training_shape([0, 1, 10, 100], [0.05, 0.1, 0.2, 0.01])
    assert s2.argmin_step == 1 and s2.drop == pytest.approx(2.0) and s2.rise == pytest.approx(0.1)
    with pytest.raises(lg.LogitsError, match="three or more"):
        lx.training_shape([0, 1], [1.0, 2.0])


def _structured(rng, n=40, futures=20, width=3, rank=2, noise=0.05):
    """Logits with a rank-``rank`` history dependence plus small noise (a model with structure)."""
    return rng.normal(size=(n, rank)) @ rng.normal(size=(rank, futures * width)) + noise * rng.normal(size=(n, futures * width))


def test_scale_free_kl_does_not_move_with_the_logits_scale():
    """Logits shrunk toward their history mean by c: KL shrinks ~c², the history-dependent rms by c exactly, and the
    scale-free KL stays (to the quadratic order of small residuals)."""
    rng = np.random.default_rng(2)
    L = 0.1 * _structured(rng, noise=0.5)
    mean = L.mean(0, keepdims=True)
    out = []
    for c in (0.1, 0.01):
        Lc = mean + c * (L - mean)
        out.append((lx.kl_at_rank(Lc, 3, 1), lg.history_dependent_rms(Lc, 3)))
    (k1, r1), (k2, r2) = out
    assert r2 == pytest.approx(0.1 * r1, rel=1e-9) and k2 < 0.02 * k1
    free = lx.scale_free_kl([k1, k2], [r1, r2])
    assert free[1] == pytest.approx(free[0], rel=0.05)
    with pytest.raises(lg.LogitsError, match="rms"):
        lx.scale_free_kl([1.0], [0.0])


def test_kl_ratio_by_hand():
    rng = np.random.default_rng(0)
    L, row = _structured(rng), rng.normal(size=(1, 60))
    by_hand = lx.kl_at_rank(L, 3, 2) / lg.average_kl(L, np.tile(row, (40, 1)), 3)
    assert lx.kl_ratio(L, row, 3, 2) == pytest.approx(by_hand, rel=1e-12)
    assert lx.kl_ratio(L, row, 3, 40) == pytest.approx(0.0, abs=1e-12)   # rank = |H|: exact


def test_truncation_and_row_kl_against_the_svd_and_average_kl():
    rng = np.random.default_rng(3)
    L = _structured(rng, rank=5, noise=0.3)
    exact = lg.rank_r_approximation(lg.svd(L, "exact"), 3)
    assert np.abs(lx.truncation(L, 3) - exact).max() < 1e-9
    dup = L[[0, 0, 1, 2, 3, 4, 5, 5, 6, 7]]                     # repeated rows, as a bootstrap draw has
    assert np.abs(lx.truncation(dup, 2) - lg.rank_r_approximation(lg.svd(dup, "exact"), 2)).max() < 1e-9
    tall = L[:, :12]                                          # more rows than columns
    assert np.abs(lx.truncation(tall, 3) - lg.rank_r_approximation(lg.svd(tall, "exact"), 3)).max() < 1e-9
    A = rng.normal(size=L.shape)
    per = lx.row_kl(L, A, 3)
    assert per.shape == (40,) and per.mean() == pytest.approx(lg.average_kl(L, A, 3), rel=1e-12)
    assert per[4] == pytest.approx(lg.average_kl(L[4:5], A[4:5], 3), rel=1e-12)


def test_ratio_gain_over_a_null_both_ways():
    """Against a null with no low-rank structure (i.i.d. logits of the same scale) a rank-2 model's gain
    reproduces; against itself the gain is exactly 0 with s.e. 0 (does not reproduce); against a null of the same
    kind (another structured matrix) it does not reproduce or stays undecided, never reproduces; seeded."""
    rng = np.random.default_rng(1)
    L, row = _structured(rng), np.zeros((1, 60))
    null = rng.normal(size=L.shape) * L.std()
    g = lx.ratio_gain_over_null(L, row, null, row, 3, 2, replicates=50, seed=0)
    assert g.effect.reproduces is True and g.gain == pytest.approx(1 - g.ratio / g.null_ratio)
    assert g.ratio == pytest.approx(lx.kl_ratio(L, row, 3, 2)) and g.null_ratio > 0.5 > g.ratio
    assert 0 < g.effect.se < 0.2 and g.effect.resolution == lx.RATIO_GAIN_RESOLUTION
    again = lx.ratio_gain_over_null(L, row, null, row, 3, 2, replicates=50, seed=0)
    assert again.effect.se == g.effect.se
    other = lx.ratio_gain_over_null(L, row, null, row, 3, 2, replicates=50, seed=1)
    assert 0.5 < other.effect.se / g.effect.se < 2.0
    same = lx.ratio_gain_over_null(L, row, L, row, 3, 2, replicates=20, seed=0)
    assert same.gain == 0.0 and same.effect.se == 0.0 and same.effect.reproduces is False
    alike = lx.ratio_gain_over_null(L, row, _structured(rng), row, 3, 2, replicates=50, seed=0)
    assert alike.effect.reproduces is not True
    with pytest.raises(lg.LogitsError, match="one shape"):
        lx.ratio_gain_over_null(L, row, null[:-1], row, 3, 2)
    with pytest.raises(lg.LogitsError, match="'replicates'"):
        lx.ratio_gain_over_null(L, row, null, row, 3, 2, replicates=1)
    # several nulls: every one must be beaten
    assert lx.decide_against_nulls({"a": g}) == (True, None)
    assert lx.decide_against_nulls({"a": g, "b": same}) == (False, None)
    undecided = lx.RatioGain(0.2, 0.25, lx.decide_effect(0.2, 0.1, resolution=0.1), 50)
    verdict, reason = lx.decide_against_nulls({"a": g, "b": undecided})
    assert verdict is None and "against b" in reason
    with pytest.raises(lg.LogitsError, match="no null"):
        lx.decide_against_nulls({})


def test_low_rank_kl_on_an_oracle():
    model = isan.random_isan(3, 4, 5, np.random.default_rng(1))
    H = isan.all_histories(4, 2)[:10]
    F = [f for f in isan.all_futures(4, 2) if f][:6]
    L = lg.extended_logit_matrix(model.next_logits, H, F, k=3)
    res = lx.low_rank_kl(model.next_logits, L, F, 3, [1, 2, 4, 10], downsize=[4])
    assert res.max_violation == pytest.approx(0.0, abs=1e-9)              # rank 10 = |H|: exact, both sides 0
    assert lx.low_rank_kl(model.next_logits, L, F, 3, [1, 2]).max_violation < -1e-6
    assert set(res.curves) == {1, 4} and res.curves[4]["kl"].shape[0] >= 1
    cols = lg.select_columns(model.next_logits, F, 3)
    row = np.concatenate([model.next_logits(f)[cols[j]] for j, f in enumerate(F)])   # logits after f alone
    assert res.baseline_kl == pytest.approx(lg.average_kl(L, np.tile(row, (10, 1)), 3), rel=1e-10)
    assert lx.kl_at_rank(L, 3, 2) == pytest.approx(res.curves[1]["kl"][1], rel=1e-10)


# ---------------------------------------------------------------------------
# overlap against a control pair
# ---------------------------------------------------------------------------

def test_grams_eigenvectors_and_mean_cosine():
    rng = np.random.default_rng(2)
    L = rng.standard_normal((7, 5 * 4))
    G = lx.future_group_grams(L, 4, 3)
    assert G.shape == (3, 7, 7) and np.allclose(G.sum(0), L @ L.T)
    U = lx.top_eigenvectors(L @ L.T, 2)
    u_svd = np.linalg.svd(L)[0][:, :2]
    assert np.allclose(np.abs(U.T @ u_svd), np.eye(2), atol=1e-8)
    e1, e2 = np.eye(3)[:, :1], np.array([[1.0], [1.0], [0.0]]) / np.sqrt(2)
    assert lx.mean_cosine(e1, e2) == pytest.approx(np.sqrt(0.5))
    assert lx.random_subspace_null(6, 6, 5) == (pytest.approx(1.0), pytest.approx(0.0, abs=1e-12))
    trials = lg.random_subspace_cosine_trials(30, 3, 7, seed=4).mean(axis=1)
    assert lx.random_subspace_null(30, 3, 7, seed=4) == (pytest.approx(trials.mean()), pytest.approx(trials.std(ddof=1)))
    mu, sd = lx.random_subspace_null(200, 1, 400, seed=1)
    assert mu == pytest.approx(np.sqrt(2 / (np.pi * 200)), rel=0.1) and sd > 0


def test_overlap_against_control_both_ways():
    rng = np.random.default_rng(3)
    n, width, r = 40, 2, 4
    basis = rng.standard_normal((n, r))
    aligned = [basis @ rng.standard_normal((r, 30 * width)) + 0.05 * rng.standard_normal((n, 30 * width))
               for _ in range(2)]
    unrelated = [rng.standard_normal((n, 30 * width)) for _ in range(2)]
    res = lx.overlap_against_control(tuple(aligned), tuple(unrelated), width, r, n_boot=60, null_trials=20)
    want = lg.column_space_angles(aligned[0], aligned[1], r).mean()
    assert res.test == pytest.approx(want, abs=1e-8)                         # the same overlap as the SVDs give
    assert res.control == pytest.approx(lg.column_space_angles(*unrelated, r).mean(), abs=1e-8)
    assert res.test > 0.95 and res.z > 3 and res.difference == pytest.approx(res.test - res.control)
    assert res.z_test_vs_random > res.z_control_vs_random
    mu, sd = lx.random_subspace_null(n, r, 20, seed=0)                       # the same null, the same seed
    assert (res.null_mean, res.null_sd) == (pytest.approx(mu), pytest.approx(sd))
    assert res.z_test_vs_random == pytest.approx((res.test - mu) / sd)
    assert res.z_control_vs_random == pytest.approx((res.control - mu) / sd)
    back = lx.overlap_against_control(tuple(unrelated), tuple(aligned), width, r, n_boot=60, null_trials=20)
    assert back.z < -3                                                       # the other way round: no
    same = lx.overlap_against_control(tuple(aligned), tuple(aligned), width, r, n_boot=20, null_trials=5)
    assert same.difference == 0 and same.se == 0                             # a pair against itself
    with pytest.raises(lg.LogitsError, match="rank"):
        lx.overlap_against_control(tuple(aligned), tuple(unrelated), width, 21)
    with pytest.raises(lg.LogitsError, match="share their histories"):
        lx.overlap_against_control((aligned[0], aligned[1][:30]), tuple(unrelated), width, r)


# ---------------------------------------------------------------------------
# LinGen beside its baselines
# ---------------------------------------------------------------------------

def test_margin_total_and_per_position_by_hand():
    kl = {lx.LINGEN: np.array([[1.0, 0.1, 0.1], [2.0, 0.3, 0.1]]),
          lx.SINGLE_TOKEN: np.array([[0.2, 0.5, 0.5], [0.4, 0.9, 0.9]]),
          lx.SHORT_CONTEXT: np.array([[0.5, 0.5, 0.5], [0.5, 0.5, 0.5]]),
          lx.EARLIER_CHECKPOINT: np.array([[3.0, 3.0, 3.0], [3.0, 3.0, 3.0]])}
    c = lx.LinGenComparison(kl)
    assert c.total(lx.LINGEN) == pytest.approx(1.8) and c.total(lx.LINGEN, first=2) == pytest.approx(0.3)
    mean, se = c.per_position(lx.LINGEN)
    assert np.allclose(mean, [1.5, 0.2, 0.1]) and se[0] == pytest.approx(0.5)
    m, s, best = c.margin()                          # best baseline over all positions: short context (1.5)
    assert best == lx.SHORT_CONTEXT and m == pytest.approx(1.5 - 1.8)
    assert s == pytest.approx(np.std([1.5 - 1.2, 1.5 - 2.4], ddof=1) / np.sqrt(2))
    m2, _, best2 = c.margin(first=2)                 # after the first token: short context 1.0 vs LinGen 0.3
    assert best2 == lx.SHORT_CONTEXT and m2 == pytest.approx(0.7)
    assert lx.t_critical(5) == pytest.approx(2.776, abs=1e-3) and lx.t_critical(1000) == pytest.approx(1.962, abs=1e-3)


def test_lingen_comparison_is_exact_on_a_target_among_the_histories():
    """On an ISAN (exactly low logit rank) with the target one of the histories, the regression puts weight 1 on
    it and LinGen reproduces the model, with and without the empty future; the baselines do not."""
    rng = np.random.default_rng(4)
    model = isan.random_isan(2, 3, 8, rng).next_logprobs
    H = [tuple(int(x) for x in rng.integers(0, 3, 3)) for _ in range(6)]
    F = [tuple(int(x) for x in rng.integers(0, 3, rng.integers(1, 3))) for _ in range(12)]
    targets = [H[2]]
    base = lx.history_free_baselines(model, model, targets, steps=3, short_window=1, seed=0)
    res = lx.lingen_comparison(model, H, F, targets, k=3, steps=3, baselines=base, seed=0)
    assert set(res.kl) == {lx.LINGEN, lx.SINGLE_TOKEN, lx.WITH_EMPTY_FUTURE, lx.SHORT_CONTEXT, lx.EARLIER_CHECKPOINT}
    assert res.kl[lx.WITH_EMPTY_FUTURE].max() < 1e-8
    assert res.kl[lx.EARLIER_CHECKPOINT].max() < 1e-12                    # the "earlier" model is the model itself
    assert res.kl[lx.SHORT_CONTEXT].max() > 1e-4
    assert 0 <= res.history_independent_fraction <= 1
    assert res.tokens[lx.LINGEN].shape == (1, 3)
    twice = lx.lingen_comparison(model, H, F, targets, k=3, steps=2, samples=2, seed=1)   # each target twice
    assert twice.kl[lx.LINGEN].shape == (2, 2) and twice.kl[lx.WITH_EMPTY_FUTURE].max() < 1e-8
    assert twice.coefficients[lx.LINGEN].shape == (1, 6)


def test_lemma_c18_check_rows():
    rng = np.random.default_rng(5)
    model = isan.random_isan(2, 3, 8, rng).next_logprobs
    H = [tuple(int(x) for x in rng.integers(0, 3, 2)) for _ in range(4)]
    v = rng.standard_normal((2, 4))
    rows = lx.lemma_c18_check(model, H, v, [(0, 1), (2,)], 2, 2, seed=0)
    assert len(rows) == 2 and all(r["ratio"] >= 1 for r in rows)
    est = lg.lemma_c18_estimates(model, H, v[1], (2,), 2, 2, seed=1)      # target i uses seed + i
    assert rows[1]["measured_kl"] == pytest.approx(est["measured_kl"]) and rows[1]["delta"] == pytest.approx(est["delta"])


def test_the_old_module_path_answers_every_name():
    from lib import logit_experiments

    assert logit_experiments.overlap_against_control is lx.overlap_against_control
    assert logit_experiments.heavy_steps is lx.heavy_steps


def test_smallest_overlap_z_over_every_control():
    """By hand: the claim reads its weakest control; a zero standard error makes it unscalable (None)."""
    def comparison(difference, se):
        return lx.OverlapComparison(rank=2, test=0.9, control=0.9 - difference, difference=difference, se=se,
                                    z=difference / se if se else float("inf"), null_mean=0.1, null_sd=0.05, n_boot=10)

    strong, weak, negative = comparison(0.4, 0.05), comparison(0.1, 0.05), comparison(-0.1, 0.05)
    assert strong.z_or_none == pytest.approx(8.0) and comparison(0.1, 0.0).z_or_none is None
    assert lx.smallest_overlap_z({"step 0": strong, "shuffled": weak}) == pytest.approx(2.0)
    assert lx.smallest_overlap_z({"step 0": weak, "shuffled": strong}) == pytest.approx(2.0)
    assert lx.smallest_overlap_z({"step 0": strong, "shuffled": negative}) == pytest.approx(-2.0)
    assert lx.smallest_overlap_z({"step 0": strong}) == pytest.approx(8.0)
    assert lx.smallest_overlap_z({"step 0": strong, "shuffled": comparison(0.1, 0.0)}) is None
    with pytest.raises(lg.LogitsError):
        lx.smallest_overlap_z({})
