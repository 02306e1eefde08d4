"""Tests for lib/examples_experiments.py: the Examples chapter's studies (planted bigrams under noise,
planted-bigram checks over random languages, the per-order analyses and their tables, the
shuffled-corpus null) and its costs."""
import numpy as np
import pytest

from lib import empirical_modes as em, examples_experiments as ex, perturbation as pt
from lib.linalg import subspace_overlap


def stream(seed=0, n=3000, vocab=7):
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, vocab + 1)
    return rng.choice(vocab, size=n, p=p / p.sum()).astype(np.int64)


def test_planted_noise_study_on_a_language_not_in_the_book():
    etas = np.logspace(-4, -0.3, 25)
    modes = ex.planted_noise_study(1, 1, etas, seed=42, background_size=3, absolute=(0.05,),
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
        ex.planted_noise_study(2, 1, etas[:3], seed=0)


def fake_mode(etas, sigma_order=2.0, second_order=3.0, vector_order=2.0, crossing=0.5, wedin=0.5, break_at=None):
    """A NoisyMode whose errors follow exact power laws of η (an independent, hand-made case)."""
    n = len(etas)
    overlap = np.ones(n) if break_at is None else np.where(etas >= break_at, 0.5, 1.0)
    return ex.NoisyMode("absolute", 1, 0, 0.2, etas, np.full(n, 0.2), 0.2 - 0.7 * etas ** sigma_order,
                        0.2 - 0.3 * etas ** second_order, 0.4 * etas ** vector_order, overlap, np.full(n, 0.8),
                        np.full(n, wedin), np.ones(n), etas.copy(), 0.1, crossing, -0.2, 0.0)


def test_noise_order_study_fits_known_power_laws_and_counts_break_downs():
    etas = np.logspace(-4, 0, 41)
    exact = ex.noise_order_study([fake_mode(etas), fake_mode(etas, crossing=0.2)], etas)
    assert exact.slopes == pytest.approx(np.array([[2.0, 3.0, 2.0], [2.0, 3.0, 2.0]]), abs=1e-4)
    assert exact.sigma_order_deviation == pytest.approx(0, abs=1e-4) and exact.vector_order_deviation < 1e-4
    assert exact.wedin_max_ratio == pytest.approx(0.5) and exact.violation_minus_eta == 0.0
    assert np.all(np.isinf(exact.breakdown_ratios)) and exact.overlap_at_break == [] and exact.near_crossing() == 0
    off = ex.noise_order_study([fake_mode(etas, sigma_order=2.2, vector_order=1.7, wedin=1.2, break_at=0.5)], etas)
    assert off.sigma_order_deviation == pytest.approx(0.2, abs=1e-4)
    assert off.vector_order_deviation == pytest.approx(0.3, abs=1e-4) and off.wedin_max_ratio == pytest.approx(1.2)
    assert off.breakdown_ratios[0] == pytest.approx(etas[etas >= 0.5][0] / 0.5) and off.near_crossing(0.15) == 1
    assert off.near_crossing(0.0) == int(abs(off.breakdown_ratios[0] - 1) == 0)
    assert off.overlap_at_break == [0.8]
    third = ex.noise_order_study([fake_mode(etas, second_order=3.4)], etas)  # the second-order fit counts too
    assert third.sigma_order_deviation == pytest.approx(0.4, abs=1e-4)


def test_noise_orders_are_fitted_only_well_inside_the_expansion():
    """Beyond η_×/20 the errors bend (here: a jump at η = 0.05); with η_× = 0.5 the fit stops at 0.01 first."""
    etas = np.logspace(-4, 0, 41)
    m = fake_mode(etas)
    m.sigma_first[etas > 0.05] -= 1.0
    assert ex.noise_order_study([m], etas).sigma_order_deviation == pytest.approx(0, abs=1e-4)
    assert ex.noise_order_study([m], etas, fit_max=1.0, crossing_fraction=1.0).sigma_order_deviation > 0.1


def test_random_directions_have_small_overlap():
    c = em.count_sequences(stream(6, n=20000, vocab=40), 2, 1, min_x_count=2)
    M = em.weighted_modes(c, 5, "lanczos")
    assert ex.random_overlap_baseline(M, 30, seed=1).max() < 0.5
    assert 0 < subspace_overlap(M.y_vectors, M.y_vectors, 5) == pytest.approx(1)
    assert np.isfinite(ex.mean_log_count(M, 3))


def test_planted_lemma_study_rows():
    rows = ex.planted_lemma_study([(1, 1), (1, 2)], 2, seed=20)
    assert len(rows) == 2 * 2 * 4
    assert max(r["sigma_error"] for r in rows) < 1e-12
    assert {r["language"] for r in rows} == {20, 21}


def structured_stream(n=60000, seed=0):
    """Tokens 0..29 with collective bigrams: after any of 0..9 comes 10, after 11..15 comes 16;
    the rest i.i.d. (a text with patterns)."""
    rng = np.random.default_rng(seed)
    out = np.empty(n, dtype=np.int64)
    t = 20
    for i in range(n):
        t = 10 if t < 10 else 16 if 11 <= t <= 15 else int(rng.integers(0, 30))
        out[i] = t
    return out


def test_patterns_beat_the_shuffled_null_and_iid_text_does_not():
    orders = [[1, 1, 5], [2, 1, 5]]
    def stats(tokens):
        Ms, P = {}, None
        for k, l, t in orders:
            c = em.count_sequences(tokens, k, l, [0], 30, t)
            Ms[(k, l)] = em.weighted_modes(c, 8, "lanczos")
            if (k, l) == (2, 1):
                P = em.conditional_modes(c, 8, 1.0, "observed", "lanczos")
        return ex.text_statistics(Ms, P, (2, 1))
    text = structured_stream()
    real = stats(text)
    null = ex.shuffled_null(text, [0], 30, orders, (2, 1), 2, r=8, seed=0)
    assert len(null) == 2 and set(null[0]) == set(real)
    top = {key: max(n[key] for n in null) for key in real}
    assert real["weighted_max_tied"] >= top["weighted_max_tied"] + 1        # must pass: patterns tie histories
    assert real["collective_fraction"] > top["collective_fraction"] + 0.05
    iid = stream(2, n=60000, vocab=30)
    flat = stats(iid)
    flat_null = ex.shuffled_null(iid, [0], 30, orders, (2, 1), 2, r=8, seed=0)
    assert flat["collective_fraction"] <= max(n["collective_fraction"] for n in flat_null) + 0.05   # must fail to beat it
    assert flat["weighted_max_tied"] < real["weighted_max_tied"]
    with pytest.raises(ValueError, match="n_shuffles"):
        ex.shuffled_null(text, [0], 30, orders, (2, 1), 0)
    with pytest.raises(ValueError, match="sweep_order"):
        ex.shuffled_null(text, [0], 30, orders, (3, 1), 1)


def test_planted_orders_problem_names_the_first_order_whose_joint_is_too_large():
    """Both ways: k + l = 4 passes (the largest dense planted joint), 5 is refused with its index;
    the bound agrees with the planted alphabet it is derived from (4 + 7k + 4l tokens)."""
    from lib.examples_experiments import PLANTED_COLLECTIVE, planted_orders_problem
    from lib.languages import DENSE_LIMIT, planted_language

    assert planted_orders_problem([[1, 1], [3, 1], [2, 2], [1, 3]]) is None
    assert planted_orders_problem([[1, 1], [3, 2]]).startswith("item [1] = [3, 2]: k + l = 5 is above 4")
    assert "item [0]" in planted_orders_problem([[1, 4]])
    for k, l in [(3, 1), (2, 2), (1, 3), (3, 2), (4, 1)]:
        size = planted_language(k, l, 4, (0.06, 0.03), PLANTED_COLLECTIVE, rng=0).alphabet_size
        assert size == 4 + 7 * k + 4 * l
        assert (size ** (k + l) <= DENSE_LIMIT) == (planted_orders_problem([[k, l]]) is None), (k, l)


def test_require_sweep_order_refuses_an_order_that_is_not_computed():
    import pytest

    from lib.book.parameters import ParameterError
    from lib.examples_experiments import require_sweep_order

    require_sweep_order([[1, 1, 5], [2, 1, 10]], [2, 1])
    with pytest.raises(ParameterError, match=r"parameter 'sweep_order'.*\[\[1, 1\], \[2, 1\]\]; got \[1, 2\]"):
        require_sweep_order([[1, 1, 5], [2, 1, 10]], [1, 2])


def test_planted_lemma_summary_takes_the_largest_error_per_order_and_kind():
    from lib.examples_experiments import planted_lemma_summary

    def row(k, kind, s, v, own, other):
        return dict(k=k, l=1, kind=kind, sigma_error=s, vector_error=v, own_propensity_error=own,
                    other_propensity_max=other)

    rows = [row(1, "absolute", 1e-16, 2e-16, 0, 1e-17), row(1, "absolute", 3e-16, 1e-16, 4e-16, 0),
            row(1, "collective", 5e-16, 0, 0, 0), row(2, "absolute", 1e-15, 0, 0, 2e-15)]
    out = planted_lemma_summary(rows)
    assert [(r["(k, l)"], r["bigram"], r["checked"]) for r in out] == [((1, 1), "absolute", 2), ((1, 1), "collective", 1),
                                                                       ((2, 1), "absolute", 1)]
    assert (out[0]["σ error"], out[0]["vector error"], out[0]["own propensity"], out[0]["other propensities"]) == \
        (3e-16, 2e-16, 4e-16, 1e-17)
    assert out[2]["other propensities"] == 2e-15


def test_order_tables_read_each_analysis():
    from types import SimpleNamespace as NS

    from lib.examples_experiments import counting_rows, overlap_rows, svd_rows

    counts = NS(min_x_count=5, n_x_seen=1234, shape=(1000, 20), counts=NS(nnz=4321), kept_fraction=0.75)
    modes = NS(method="lanczos", sigma=np.array([0.9, 0.1]), seconds=1.234, bigram_overlaps=lambda: np.array([0.5, 0.8, 1.0]))
    A = NS(k=2, l=1, counts=counts, P=modes, M=modes, count_seconds=0.123)
    assert counting_rows({(2, 1): A}) == [{"(k, l)": (2, 1), "threshold t": 5, "histories seen": 1234,
                                           "kept x × y": "1,000 × 20", "non-zeros": 4321, "windows kept": 0.75}]
    assert svd_rows({(2, 1): A}) == [{"(k, l)": (2, 1), "SVD (rule)": "lanczos", "σ₁ of P": 0.9, "σ₁ of M": 0.9,
                                      "count (s)": 0.12, "SVD of P (s)": 1.2, "SVD of M (s)": 1.2}]
    row = overlap_rows({(2, 1): A})[0]
    assert row["M: median overlap"] == 0.8 and row["M: share ≥ 0.7"] == pytest.approx(2 / 3)


# --------------------------------------------------------------------------- the chapter's costs

def _traced_peak(f, *args, **kw):
    import tracemalloc

    tracemalloc.start()
    f(*args, **kw)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


ZIPF_TOKENS = (np.random.default_rng(0).zipf(1.2, 200_000) % 2048).astype(np.int64)


@pytest.mark.parametrize("k, l", [(1, 1), (2, 2), (1, 3)])
def test_the_counting_estimate_bounds_the_traced_peak_within_a_factor_ten(k, l):
    """tracemalloc sees every NumPy/SciPy buffer. The estimate is an upper bound (measured between 1/3
    and 9/10 of it on Zipf-distributed tokens; (2, 2) with V = 2048 takes the dense continuation table),
    so: peak ≤ estimate ≤ 10 × peak."""
    peak = _traced_peak(em.count_sequences, ZIPF_TOKENS, k, l, None, 2048, 5)
    estimate = ex.counting_cost(ZIPF_TOKENS.size, k, l, 2048)[0]
    assert peak <= estimate <= 10 * peak


@pytest.mark.parametrize("k, l, t", [(1, 1, 5), (2, 1, 10), (2, 2, 10)])
def test_the_components_estimate_bounds_the_traced_peak_within_a_factor_ten(k, l, t):
    """analyse_order (counting and the three top-r decompositions) against the counting and component
    estimates: an upper bound (histories ≤ n/t is loose on Zipf text), measured 2 to 9 times the peak."""
    peak = _traced_peak(ex.analyse_order, ZIPF_TOKENS, None, 2048, k, l, t, r=20)
    estimate = max(ex.components_cost(ZIPF_TOKENS.size, t, 20, vocab_size=2048, k=k, l=l)[0],
                   ex.counting_cost(ZIPF_TOKENS.size, k, l, 2048)[0])
    assert peak <= estimate <= 10 * peak


def test_a_small_matrix_gives_as_many_components_as_it_has_and_an_empty_one_is_refused():
    tokens = np.array([0, 1, 2, 0, 1, 2, 0, 1, 3] * 4)
    A = ex.analyse_order(tokens, None, 4, 1, 1, 1, r=20)       # 4 × 4 kept: 3 components, not 20
    assert A.M.sigma.size == min(A.counts.shape) - 1
    with pytest.raises(ValueError, match="lower the threshold or read a larger corpus"):
        ex.analyse_order(tokens, None, 4, 1, 1, 1000)


def test_corpus_tokens_follow_the_streamed_cap_the_default_corpus_and_a_folder(tmp_path):
    assert ex.corpus_tokens({"corpus": "hf:x/y", "max_corpus_mb": 3.0}) == int(3e6 / ex.BYTES_PER_TOKEN)
    assert ex.corpus_tokens({"corpus": "default", "max_corpus_mb": 1000.0}) == int(
        ex.DEFAULT_CORPUS_MB * 1e6 / ex.BYTES_PER_TOKEN)
    (tmp_path / "a.txt").write_text("x" * 3000)
    assert ex.corpus_tokens({"corpus": str(tmp_path), "max_corpus_mb": 1000.0}) == 1000


def test_the_old_names_in_lib_empirical_modes_still_answer():
    """The studies moved here from lib.empirical_modes; their old names forward (lib.book.moved)."""
    from lib import linalg
    from lib.book import tables

    for name in ("heavy_steps", "analyse_order", "planted_orders_problem", "PLANTED_COLLECTIVE", "text_statistics"):
        assert getattr(em, name) is getattr(ex, name)
    assert em.subspace_overlap is linalg.subspace_overlap
    assert em.Raw is tables.Raw and em.markdown_table is tables.markdown_table
    for name in ("NoisyMode", "planted_noise_study", "NoiseOrders", "noise_order_study"):
        assert getattr(pt, name) is getattr(ex, name)
    with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
        em.not_a_name


@pytest.mark.parametrize("margin, null_max, undecided", [
    (1, 1, True),      # 2 tied against 1: band 3
    (2, 1, True),
    (3, 1, False),     # at the band: decided
    (4, 2, True),      # band 3√2 = 4.24
    (5, 2, False),
    (0, 2, False),     # no excess: decided (does not reproduce)
    (-1, 3, False),
    (90, 2, False),    # far beyond the null
    (2, 0, True),      # a null of no ties reads with the band of 1
    (3, 0, False),
])
def test_count_margin_band_by_hand(margin, null_max, undecided):
    """Undecided exactly for 1 ≤ margin < 3√max(1, null)."""
    band = 3 * max(1, null_max) ** 0.5
    assert ex.count_band(null_max) == pytest.approx(band)
    reason = ex.count_margin_undecided(margin, null_max)
    assert (reason is not None) is undecided
    if undecided:
        assert f"{band:.1f}" in reason and f"{margin:g}" in reason
