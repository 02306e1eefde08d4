"""Exact languages (lib/languages.py): the language condition (Def 3.2) to rounding, closed-form
probabilities, sparse = dense, sampling against the exact law, planted bigrams (Defs 5.1, 5.5)."""
import itertools

import numpy as np
import pytest
import scipy.sparse as sp

from lib import languages as L


def exact_languages():
    return {
        "markov order 0": L.random_markov_chain(4, 0, rng=0),
        "markov order 1": L.random_markov_chain(3, 1, rng=1),
        "markov order 2": L.random_markov_chain(3, 2, rng=2, concentration=0.5),
        "markov order 2, given start": L.MarkovChain(L.random_markov_chain(2, 2, rng=3).transition,
                                                     initial=[0.1, 0.2, 0.3, 0.4]),
        "hmm": L.random_hmm(3, 4, rng=4),
        "mixture": L.mixture([L.random_markov_chain(3, 1, rng=5), L.random_hmm(3, 2, rng=6),
                              L.random_markov_chain(3, 2, rng=7)], [0.2, 0.5, 0.3]),
        "planted k=1 l=1": L.planted_language(1, 1, background_size=3, rng=8),
        "planted k=2 l=2 noisy": L.planted_language(2, 2, background_size=3, noise=0.1, rng=9,
                                                    absolute=(0.05,), collective=((0.02, 0.03),)),
        "fitted": L.fit_markov_chain(np.random.default_rng(10).integers(0, 4, 500), order=2, alpha=0.5),
    }


STATIONARY = {"markov order 0", "markov order 1", "markov order 2", "hmm", "mixture", "planted k=1 l=1",
              "planted k=2 l=2 noisy", "fitted"}


@pytest.mark.parametrize("name", list(exact_languages()))
def test_is_language(name):
    lang = exact_languages()[name]
    N = 4 if lang.alphabet_size <= 12 else 3
    check = L.is_language(lang, N, first_position=name in STATIONARY)
    assert check.ok and check.max_violation < 1e-12, (lang.describe(), check)
    assert set(check.violations) == set(range(N)) and check.min_entry >= 0
    assert lang.describe()


def test_broken_tensors_fail():
    lang = L.random_markov_chain(3, 1, rng=0)
    tensors = [lang.prob(n).copy() for n in (1, 2, 3)]
    assert L.is_language(tensors, 3).ok
    tensors[1][0, 1] += 1e-3
    tensors[1][0, 2] -= 1e-3       # row 0 keeps its sum: only A_3 -> A_2 sees this
    tensors[1][1, 0] += 2e-3       # rows 1, 2 change their sums: A_2 -> A_1 breaks too
    tensors[1][2, 0] -= 2e-3
    check = L.is_language(L.TensorLanguage(tensors), 3)
    assert not check.ok and not check
    assert check.violations[0] < 1e-15
    assert check.violations[1] == pytest.approx(2e-3, rel=1e-9)
    assert check.violations[2] == pytest.approx(2e-3, rel=1e-9)
    assert check.max_violation == pytest.approx(2e-3, rel=1e-9)


def test_markov_chain_closed_form():
    """q(abc) = π(a) P(b|a) P(c|b) for order 1, with π stationary; order 2 via its window chain."""
    lang = L.random_markov_chain(3, 1, rng=3)
    P, A3 = lang.transition, lang.prob(3)
    pi = lang.prob(1)
    assert np.allclose(pi @ P, pi, atol=1e-15, rtol=0)
    brute = np.einsum("a,ab,bc->abc", pi, P, P)
    assert np.abs(A3 - brute).max() < 1e-15
    chain2 = L.random_markov_chain(2, 2, rng=4)
    P2, A2 = chain2.transition, chain2.prob(2).ravel()
    A4 = chain2.prob(4)
    for a, b, c, d in itertools.product(range(2), repeat=4):
        expected = A2[2 * a + b] * P2[2 * a + b, c] * P2[2 * b + c, d]
        assert A4[a, b, c, d] == pytest.approx(expected, rel=1e-13)


def test_hmm_closed_form():
    hmm = L.random_hmm(2, 3, rng=5)
    A, E, pi = hmm.hidden_transition, hmm.emission, hmm.initial
    A3 = hmm.prob(3)
    for s in itertools.product(range(2), repeat=3):
        f = pi * E[:, s[0]]
        for t in s[1:]:
            f = (f @ A) * E[:, t]
        assert A3[s] == pytest.approx(f.sum(), rel=1e-13)
    assert hmm.string_prob([1, 0, 1]) == pytest.approx(A3[1, 0, 1], abs=1e-16)


def test_joint_indexing_and_sparse_path():
    lang = L.planted_language(2, 1, background_size=3, rng=1)
    V = lang.alphabet_size
    dense = lang.joint(2, 1)
    sparse = lang.joint(2, 1, sparse=True)
    assert sp.issparse(sparse) and dense.shape == sparse.shape == (V ** 2, V)
    assert np.abs(sparse.toarray() - dense).max() < 1e-17
    assert sparse.nnz == np.count_nonzero(dense)
    assert np.array_equal(dense.ravel(), lang.prob(3).ravel())
    for x, y in [((0, 1), (2,)), ((3, 4), (7,)), ((V - 1, 0), (1,))]:
        assert dense[L.encode(x, V), L.encode(y, V)] == pytest.approx(lang.string_prob(x + y), abs=1e-17)
    codes = np.arange(V ** 3)
    assert np.array_equal(L.encode(L.decode(codes, V, 3), V), codes)


def frequencies_match(lang, n_sequences, length, seed):
    sample = lang.sample(n_sequences, length, rng=seed)
    assert sample.shape == (n_sequences, length) and sample.min() >= 0 and sample.max() < lang.alphabet_size
    p = lang.prob(length).ravel()
    f = np.bincount(L.encode(sample, lang.alphabet_size), minlength=p.size) / n_sequences
    bound = 5 * np.sqrt(p * (1 - p) / n_sequences) + 1e-12       # 5 standard errors per cell
    assert np.all(np.abs(f - p) <= bound), np.abs(f - p).max()
    assert np.all(f[p == 0] == 0)                                   # impossible strings never appear


@pytest.mark.parametrize("name", ["markov order 2", "hmm", "mixture", "planted k=1 l=1"])
def test_sampling_matches_probabilities(name):
    frequencies_match(exact_languages()[name], 100_000, 3, seed=0)


def test_generic_sampler_and_reproducibility():
    lang = L.random_markov_chain(3, 1, rng=2)
    frequencies_match(L.TensorLanguage([lang.prob(n) for n in (1, 2, 3)]), 50_000, 3, seed=1)
    assert np.array_equal(lang.sample(10, 5, rng=7), lang.sample(10, 5, rng=7))


def test_fit_markov_chain_smoothing():
    tokens = np.array([0, 1, 2, 0, 1, 1, 0, 2, 2, 0, 1])
    alpha, V = 0.5, 3
    chain = L.fit_markov_chain(tokens, order=1, alpha=alpha)
    counts = np.zeros((V, V))
    for a, b in zip(tokens[:-1], tokens[1:]):
        counts[a, b] += 1
    expected = (counts + alpha) / (counts.sum(1, keepdims=True) + alpha * V)
    assert np.abs(chain.transition - expected).max() < 1e-15
    # documents are not crossed: a boundary between 1 and 2 removes that bigram
    split = L.fit_markov_chain(tokens, order=1, alpha=alpha, doc_offsets=[0, 6])
    c2 = counts.copy()
    c2[tokens[5], tokens[6]] -= 1
    assert np.abs(split.transition - (c2 + alpha) / (c2.sum(1, keepdims=True) + alpha * V)).max() < 1e-15
    assert L.is_language(L.fit_markov_chain(tokens, order=2, alpha=alpha), 4, first_position=True).ok


@pytest.mark.parametrize("k,l", [(1, 1), (2, 1), (1, 2), (2, 2)])
def test_planted_bigrams_hold_exactly(k, l):
    lang = L.planted_language(k, l, background_size=3, rng=k + 10 * l)
    J = lang.joint(k, l)
    modes = lang.predicted_modes()
    assert [m.kind for m in modes] == ["absolute", "absolute", "collective"]
    for m in modes:
        assert L.bigram_violation(J, m.rows, m.col) < 1e-15
        qS = J[m.rows].sum()
        assert m.sigma == pytest.approx(np.sqrt(qS), rel=1e-14)
        assert np.allclose(m.q_rows, J[m.rows].sum(1), rtol=1e-13, atol=0)
    noisy = L.planted_language(k, l, background_size=3, rng=k + 10 * l, noise=0.05)
    Jn = noisy.joint(k, l)
    assert all(L.bigram_violation(Jn, m.rows, m.col) > 1e-3 for m in noisy.predicted_modes())


def test_input_validation():
    with pytest.raises(ValueError, match="row-stochastic"):
        L.HMM(np.full((2, 2, 2), 0.4))
    with pytest.raises(ValueError, match="not a power"):
        L.MarkovChain(np.full((3, 2), 0.5))
    with pytest.raises(ValueError, match="probability vectors"):
        L.MarkovChain(np.array([[0.5, 0.6], [0.5, 0.5]]))
    with pytest.raises(ValueError, match="must be < 1"):
        L.planted_language(1, 1, absolute=(0.6,), collective=((0.5,),))
    with pytest.raises(ValueError, match="stationary"):
        L.MarkovChain(np.eye(2))                      # reducible: no unique stationary start
    with pytest.raises(ValueError, match="DENSE_LIMIT"):
        L.random_markov_chain(50, 1, rng=0).prob(5)
    with pytest.raises(ValueError, match="only A_1..A_2"):
        L.TensorLanguage([np.ones(2) / 2, np.ones((2, 2)) / 4]).prob(3)


# --- additions for the Hilbert space and Modes chapters ------------------------------------

def test_marginalise_any_positions():
    lang = L.random_hmm(3, 2, rng=0)
    A4 = lang.prob(4)
    assert np.abs(L.marginalise(A4, -1) - lang.prob(3)).max() < 1e-16
    assert np.abs(L.marginalise(A4, [2, 3]) - lang.prob(2)).max() < 1e-16
    assert np.abs(L.marginalise(A4, 0) - lang.prob(3)).max() < 1e-15          # stationary source
    assert L.marginalise(A4, [1, 2]).shape == (3, 3)                        # law of (σ1, σ4)
    assert np.array_equal(L.marginalise(A4, []), A4)
    with pytest.raises(ValueError, match="positions"):
        L.marginalise(A4, 4)


def test_window_frequencies_fail_the_language_condition_by_at_most_one_over_T():
    text = L.random_markov_chain(3, 1, rng=1).sample(1, 5000, rng=2)[0]
    wf = L.window_frequencies(text, 3, alphabet_size=3)
    check = L.is_language(wf, 3)
    assert not check.ok
    for n in (1, 2):
        assert 0 < check.violations[n] <= 1 / (len(text) - n) + 1e-15
    # the final window explains it: adding it back restores the marginal exactly
    counts = np.bincount(L.encode(np.lib.stride_tricks.sliding_window_view(text, 3), 3), minlength=27)
    pairs = np.bincount(L.encode(np.lib.stride_tricks.sliding_window_view(text, 2), 3), minlength=9)
    last = np.zeros(9)
    last[L.encode(text[-2:], 3)] = 1
    assert np.array_equal(counts.reshape(9, 3).sum(1) + last, pairs)
    with pytest.raises(ValueError, match="more than N"):
        L.window_frequencies([0, 1], 3)


def test_conditional_and_sample_pairs():
    lang = L.random_markov_chain(3, 2, rng=3)
    C = lang.conditional(2, 1)
    assert np.abs(C - lang.transition).max() < 1e-14                     # order 2 at k = 2: the table itself
    x, y = lang.sample_pairs(40_000, 2, 1, rng=4)
    f = np.bincount(x * 3 + y, minlength=27) / len(x)
    p = lang.joint(2, 1).ravel()
    assert np.all(np.abs(f - p) <= 5 * np.sqrt(p * (1 - p) / len(x)) + 1e-12)


def test_reduce_vocabulary_and_corpus_language():
    rng = np.random.default_rng(5)
    tokens = rng.choice(10, size=20_000, p=np.arange(10, 0, -1) / 55)
    mapped, symbols = L.reduce_vocabulary(tokens, 4)
    assert list(symbols) == [0, 1, 2, -1] and mapped.max() == 3
    assert np.array_equal(mapped == 3, tokens >= 3)
    _, all_symbols = L.reduce_vocabulary(tokens, 12)                       # room for every token: no OTHER
    assert -1 not in all_symbols and len(all_symbols) == 10
    offsets = np.array([0, 7000, 15000])
    lang = L.corpus_language(tokens, 4, 2, alpha=0.5, doc_offsets=offsets)
    assert lang.alphabet_size == 4 and lang.order == 2 and lang.n_tokens == tokens.size
    assert lang.coverage == pytest.approx(np.mean(tokens < 3))
    assert lang.symbol_labels() == ["0", "1", "2", "OTHER"] and "OTHER" in lang.describe()
    ref = L.fit_markov_chain(mapped, 2, alpha=0.5, vocab_size=4, doc_offsets=offsets)
    assert np.array_equal(lang.transition, ref.transition)
    check = L.is_language(lang, 4, first_position=True)
    assert check.ok and check.min_entry > 0


@pytest.mark.parametrize("k,l", [(1, 1), (2, 1), (1, 2), (2, 2), (3, 1)])
def test_plant_bigrams_hits_chosen_probabilities(k, l):
    absolute, collective = (0.05, 0.012), ((0.02, 0.004, 0.001),)
    lang = L.plant_bigrams(k, l, 3, absolute=absolute, collective=collective, rng=k + l)
    got = [m.q_rows for m in lang.predicted_modes()]
    want = [np.array([a]) for a in absolute] + [np.array(c) for c in collective]
    for g, w in zip(got, want):
        assert np.abs(g / w - 1).max() < 1e-13
    J = lang.joint(k, l)
    for m in lang.predicted_modes():
        assert L.bigram_violation(J, m.rows, m.col) < 1e-15
    assert L.is_language(lang, k + l + 1, first_position=True).ok


def test_plant_bigrams_noise_and_errors():
    lang = L.plant_bigrams(2, 1, np.full((3, 3), 1 / 3), absolute=(0.03,), collective=(), noise=0.05)
    assert lang.predicted_modes()[0].q_rows[0] == pytest.approx(0.03, rel=1e-13)
    with pytest.raises(ValueError, match="positive"):
        L.plant_bigrams(1, 1, 3, absolute=(0.0,), rng=0)
    with pytest.raises(ValueError, match="room"):
        L.plant_bigrams(1, 1, 3, absolute=(0.6, 0.5), rng=0)


@pytest.mark.parametrize("order,initial", [(0, "stationary"), (1, "stationary"), (2, "stationary"), (2, "given"),
                                           (3, "stationary")])
def test_markov_closed_form_agrees_with_hmm_forward(order, initial):
    chain = L.random_markov_chain(3, order, rng=order)
    if initial == "given":
        chain = L.MarkovChain(chain.transition, initial=np.random.default_rng(1).dirichlet(np.ones(3 ** order)))
    for n in range(1, 6):
        fast = chain._forward_dense(n)
        generic = L.HMM._forward_dense(chain, n)
        assert np.abs(fast - generic).max() < 1e-15, (n, order)
        codes, p = chain._forward_sparse(n)
        hcodes, hp = L.HMM._forward_sparse(chain, n)
        assert np.array_equal(codes, hcodes) and np.abs(p - hp).max() < 1e-15
