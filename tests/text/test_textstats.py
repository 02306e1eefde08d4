"""Rank-frequency fits and n-gram baselines against closed forms."""
import numpy as np
import pytest

from lib.text import textstats


def test_zipf_fit_recovers_exact_power_law():
    ranks = np.arange(1, 20001)
    counts = np.floor(1e9 * ranks ** -1.1)
    fit = textstats.fit_zipf(counts, 10, 10_000)
    assert fit.exponent == pytest.approx(1.1, abs=1e-3) and fit.r_squared > 0.9999
    with pytest.raises(ValueError, match="decreasing"):
        textstats.fit_zipf(counts[::-1])


def test_word_counts():
    counts = textstats.word_counts(["The cat and the dog.", "THE end, isn't it"])
    assert counts.tolist() == [3, 1, 1, 1, 1, 1, 1]


def test_cross_entropies_match_closed_forms():
    rng = np.random.default_rng(0)
    V = 5
    p = np.array([0.4, 0.3, 0.15, 0.1, 0.05])
    train = rng.choice(V, size=200_000, p=p)
    held = rng.choice(V, size=50_000, p=p)
    entropy = -(p * np.log(p)).sum()
    assert textstats.unigram_cross_entropy(train, held, V) == pytest.approx(entropy, abs=0.01)
    # a deterministic cycle is perfectly predictable from the previous token
    cycle = np.tile(np.arange(V), 1000)
    assert textstats.bigram_cross_entropy(cycle, cycle, V, alpha=1e-9) == pytest.approx(0.0, abs=1e-6)
    assert textstats.unigram_cross_entropy(cycle, cycle, V, alpha=0) == pytest.approx(np.log(V))
