"""Tests for lib/empirical_modes.py: Appendix-B counting and thresholds, the two operators and
their orientation, the SVD rule, component measures, snippets, tables, and the planted-bigram
checks (Lemmas 5.2, 5.4, 5.6, Remark 5.3) on languages the book does not use. The Examples
chapter's studies are tested in test_examples_experiments.py, the randomized SVD in test_linalg.py."""
from collections import Counter
from itertools import combinations

import numpy as np
import pytest
import scipy.sparse as sp

from lib import empirical_modes as em
from lib.book.tables import Raw, markdown_table
from lib.examples_experiments import PLANTED_COLLECTIVE
from lib.languages import planted_language
from lib.modes import Modes


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------

def stream(seed=0, n=3000, vocab=7):
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, vocab + 1)
    return rng.choice(vocab, size=n, p=p / p.sum()).astype(np.int64)


def naive_counts(tokens, k, l, offsets):
    bounds = list(offsets) + [len(tokens)]
    c = Counter()
    for a, b in zip(bounds[:-1], bounds[1:]):
        doc = [int(t) for t in tokens[a:b]]
        for i in range(len(doc) - k - l + 1):
            c[(tuple(doc[i:i + k]), tuple(doc[i + k:i + k + l]))] += 1
    return c


def counts_from_matrix(C, k=1, l=1, x_total=None):
    """A SequenceCounts over histories 0..n_x-1 and continuations 0..n_y-1 from a count matrix."""
    C = sp.csr_matrix(np.asarray(C, dtype=np.int64))
    n_x, n_y = C.shape
    xt = np.asarray(C.sum(axis=1)).ravel() if x_total is None else np.asarray(x_total)
    return em.SequenceCounts(k, l, np.arange(n_x).reshape(-1, 1).repeat(k, 1), np.arange(n_y).reshape(-1, 1).repeat(l, 1),
                             C, xt.astype(np.int64), int(C.sum()), 1, 1, n_x, n_y)


def collective_counts():
    """Histories 0,1,2 always followed by continuation 0 (and nothing else precedes 0): an exact
    collective bigram ({0, 1, 2}, 0); histories 3..7 followed by continuations 1..5 at random."""
    rng = np.random.default_rng(3)
    C = np.zeros((8, 6), dtype=np.int64)
    C[0, 0], C[1, 0], C[2, 0] = 40, 25, 60
    C[3:, 1:] = rng.integers(1, 30, size=(5, 5))
    return counts_from_matrix(C)


# ---------------------------------------------------------------------------
# counting and thresholds
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("k, l", [(1, 1), (2, 1), (1, 2), (2, 2)])
def test_count_sequences_matches_brute_force_and_paper_order(k, l):
    tokens = stream(k + 10 * l)
    offsets = [0, 100, 101, 900, 1500, 2999]
    t = 4
    c = em.count_sequences(tokens, k, l, offsets, min_x_count=t)
    naive = naive_counts(tokens, k, l, offsets)
    cx = Counter()
    for (x, _), n in naive.items():
        cx[x] += n
    keep_x = {x for x, n in cx.items() if n >= t}
    cy = Counter()
    for (x, y), n in naive.items():
        if x in keep_x:
            cy[y] += n
    keep_y = {y for y, n in cy.items() if n >= t}
    expect = {(x, y): n for (x, y), n in naive.items() if x in keep_x and y in keep_y}
    coo = c.counts.tocoo()
    got = {(tuple(c.prefixes[i]), tuple(c.suffixes[j])): int(v) for i, j, v in zip(coo.row, coo.col, coo.data)}
    assert got == expect
    assert c.n_windows == sum(naive.values())
    # c(x) counts every occurrence of x, kept continuation or not; no empty rows remain
    assert all(c.x_total[i] == cx[tuple(c.prefixes[i])] for i in range(c.shape[0]))
    assert (c.x_counts > 0).all() and (c.x_counts <= c.x_total).all()
    assert c.kept_fraction == pytest.approx(sum(expect.values()) / sum(naive.values()))
    assert c.joint().sum() == pytest.approx(1.0)


def test_count_sequences_rejects_bad_thresholds():
    with pytest.raises(ValueError, match="min_x_count"):
        em.count_sequences(stream(), 1, 1, min_x_count=0)
    with pytest.raises(ValueError, match="min_y_count"):
        em.count_sequences(stream(), 1, 1, min_y_count=True)


# ---------------------------------------------------------------------------
# the two operators
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("smoothing", em.SMOOTHINGS)
@pytest.mark.parametrize("alpha", [0.0, 0.5, 1.0])
def test_conditional_matrix_is_equation_78(smoothing, alpha):
    c = em.count_sequences(stream(1), 2, 1, min_x_count=3)
    C = c.counts.toarray().astype(float)
    n_y = C.shape[1]
    a = 0.0 if smoothing == "none" else alpha
    denom = c.x_total[:, None] + a * n_y
    if smoothing == "full":
        expect = (C + a) / denom
    else:
        expect = np.where(C > 0, (C + a) / denom, 0.0)
    P = em.conditional_matrix(c, alpha, smoothing)
    dense = P.toarray()
    np.testing.assert_allclose(dense, expect, rtol=1e-13, atol=1e-15)
    if smoothing == "none":
        np.testing.assert_allclose(dense.sum(axis=1), c.x_counts / c.x_total, rtol=1e-12)


def test_sparse_plus_rank_one_operator_products():
    rng = np.random.default_rng(0)
    S = sp.random(30, 20, density=0.2, random_state=1, format="csr")
    a, b = rng.random(30), rng.random(20)
    A = em.SparsePlusRankOne(S, a, b)
    D = S.toarray() + np.outer(a, b)
    x, y = rng.standard_normal(20), rng.standard_normal(30)
    X, Y = rng.standard_normal((20, 4)), rng.standard_normal((30, 3))
    np.testing.assert_allclose(A @ x, D @ x, rtol=1e-13)
    np.testing.assert_allclose(A.T @ y, D.T @ y, rtol=1e-13)
    np.testing.assert_allclose(A @ X, D @ X, rtol=1e-13)
    np.testing.assert_allclose(A.T @ Y, D.T @ Y, rtol=1e-13)
    np.testing.assert_allclose(A.H.toarray(), D.T)
    assert A.nnz == S.nnz


def test_conditional_matrix_rejects_bad_arguments():
    c = collective_counts()
    with pytest.raises(ValueError, match="smoothing"):
        em.conditional_matrix(c, 1.0, "everywhere")
    with pytest.raises(ValueError, match="alpha"):
        em.conditional_matrix(c, -1.0)


def test_weighted_matrix_is_lib_modes_matrix():
    c = em.count_sequences(stream(2), 2, 1, min_x_count=3)
    M = em.weighted_matrix(c)
    ref = Modes.top(c.joint(), 5).matrix
    np.testing.assert_allclose(M.toarray(), ref.toarray(), rtol=1e-13)


# ---------------------------------------------------------------------------
# SVD rule and methods
# ---------------------------------------------------------------------------

def test_choose_method_is_the_papers_rule():
    assert em.choose_method((5001, 5001)) == "randomized"
    assert em.choose_method((5000, 10 ** 6)) == "lanczos"
    assert em.choose_method((10 ** 6, 5000)) == "lanczos"
    assert em.choose_method((40, 30), randomized_above=20) == "randomized"


@pytest.mark.parametrize("make", ["sparse", "operator"])
def test_top_components_methods_agree(make):
    rng = np.random.default_rng(5)
    n, m = 300, 120
    # a matrix with a decaying spectrum, so that 10 components are well separated
    U, _ = np.linalg.qr(rng.standard_normal((n, m)))
    V, _ = np.linalg.qr(rng.standard_normal((m, m)))
    s = 0.7 ** np.arange(m)
    D = (U * s) @ V.T
    A = sp.csr_matrix(D) if make == "sparse" else em.SparsePlusRankOne(sp.csr_matrix(D - 0.01), 0.1 * np.ones(n),
                                                                       0.1 * np.ones(m))
    dense = em.top_components(A, 10, "dense")
    for method in ("lanczos", "randomized"):
        res = em.top_components(A, 10, method, seed=3)
        assert res.method == method
        assert em.singular_value_agreement(dense.s, res.s) < 1e-10
        np.testing.assert_allclose(np.abs(np.sum(res.U * dense.U, axis=0)), 1, atol=1e-8)
        np.testing.assert_allclose(np.abs(np.sum(res.Vt * dense.Vt, axis=1)), 1, atol=1e-8)
    assert em.top_components(A, 10, "auto", randomized_above=50).method == "randomized"
    assert em.top_components(A, 10, "auto").method == "lanczos"
    with pytest.raises(ValueError, match="r must"):
        em.top_components(A, m, "lanczos")
    with pytest.raises(ValueError, match="method"):
        em.top_components(A, 3, "qr")


# ---------------------------------------------------------------------------
# orientation and the reading identity
# ---------------------------------------------------------------------------

def test_sides_orientation_and_loading_identity():
    c = em.count_sequences(stream(4, n=6000), 2, 1, min_x_count=3)
    r = 6
    M = em.weighted_modes(c, r, "lanczos")
    P = em.conditional_modes(c, r, 1.0, "observed", "lanczos")
    ref = Modes.top(c.joint(), r)
    np.testing.assert_allclose(M.sigma, ref.sigma, rtol=1e-10)
    # M: left = y side (u), right = x side (ṽ); P: left = x side, right = y side
    assert M.left is M.y_vectors and M.right is M.x_vectors
    assert P.left is P.x_vectors and P.right is P.y_vectors
    np.testing.assert_allclose(np.abs(M.y_vectors.T @ ref.u).max(axis=1), 1, atol=1e-8)
    # x-loading = conditional mean of the y-loading / σ, for both operators
    Q = (sp.diags(1 / c.x_counts) @ c.counts).toarray()
    Pd = em.conditional_matrix(c, 1.0, "observed").toarray()
    for a in range(r):
        np.testing.assert_allclose(M.x_function(a), Q @ M.y_vectors[:, a] / M.sigma[a], rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(P.x_function(a), Pd @ P.y_vectors[:, a] / P.sigma[a], rtol=1e-8, atol=1e-10)
        # signs: the largest |y-loading| is positive
        assert M.y_vectors[np.argmax(np.abs(M.y_vectors[:, a])), a] > 0
    # Σ_x q(x) ⟨v, e_x⟩_V² = 1
    np.testing.assert_allclose([np.sum(M.x_weights * M.x_function(a) ** 2) for a in range(r)], 1, rtol=1e-10)


# ---------------------------------------------------------------------------
# collective-bigram measures
# ---------------------------------------------------------------------------

def test_best_collective_set_is_optimal_over_all_subsets():
    rng = np.random.default_rng(8)
    for _ in range(20):
        g, w = rng.standard_normal(8), rng.random(8) + 0.1
        S, cos = em.best_collective_set(g, w)
        norm = np.sqrt(np.sum(w * g * g))
        best = max(np.sum(w[list(T)] * g[list(T)]) / np.sqrt(np.sum(w[list(T)])) / norm
                   for m in range(1, 9) for T in combinations(range(8), m))
        if best > 0:
            assert cos == pytest.approx(best, rel=1e-12)
            assert np.all(g[S].min() >= np.delete(g, S))         # an upper level set
    assert em.best_collective_set(-np.ones(3), np.ones(3))[1] == 0.0


@pytest.mark.parametrize("operator", ["weighted", "conditional"])
def test_exact_collective_bigram_scores_one(operator):
    c = collective_counts()
    modes = (em.weighted_modes(c, 4, "lanczos") if operator == "weighted"
             else em.conditional_modes(c, 4, 0.0, "none", "lanczos"))
    # the bigram's mode: y* = continuation 0
    a = next(i for i in range(modes.n_modes) if modes.component(i).y_star == 0)
    cp = modes.component(a, tie_rtol=1e-9)
    assert cp.y_mass == pytest.approx(1, abs=1e-10)
    assert cp.bigram_overlap == pytest.approx(1, abs=1e-10)
    assert cp.best_set_size == 3 and cp.n_tied == 3
    assert cp.q_y_given_S == 1 and cp.q_S_given_y == 1
    assert cp.tied_mass == pytest.approx(1, abs=1e-10)
    expected = np.sqrt(125 / c.total) if operator == "weighted" else np.sqrt(3)
    assert cp.sigma == pytest.approx(expected, rel=1e-10)     # √q(S) for M (Lemma 5.6), √|S| for P
    assert modes.bigram_overlaps()[a] == pytest.approx(1, abs=1e-10)


# ---------------------------------------------------------------------------
# snippets and tables
# ---------------------------------------------------------------------------

def test_context_snippets_finds_pairs_inside_documents_and_relaxes():
    c = collective_counts()
    modes = em.conditional_modes(c, 4, 0.0, "none", "lanczos")
    a = next(i for i in range(modes.n_modes) if modes.component(i).y_star == 0)
    xi = int(modes.x_order(a)[0])             # tied at the top (P(0|x) = 1 on S): the most frequent, c = 60
    assert xi == 2
    x = int(c.prefixes[xi, 0])
    # x followed by 0 once across a document boundary (must not count) and twice inside
    tokens = np.array([5, x, 0, 7, 7, x, 0, 9, 9, x], dtype=np.int64)
    offsets = [0, 2, 9]
    tokens[1], tokens[2] = x, 0           # positions 1|2 straddle the boundary at 2
    found = em.context_snippets(tokens, offsets, modes, a, n_snippets=5, width=2)
    assert found.n_occurrences == 1 and found.relative_cut == 0.1
    s = found.snippets[0]
    assert s.position == 5 and list(s.x) == [x] and list(s.y) == [0]
    assert list(s.before) == [7, 7] and list(s.after) == [9, 9]      # clipped to the document [2, 9)
    # relax: y loadings 1.0 (never after x) and 0.65 (after x) → found at the 40% cut
    modes.y_vectors[:, a] = 0
    modes.y_vectors[1, a], modes.y_vectors[0, a] = 1.0, 0.65
    relaxed = em.context_snippets(tokens, offsets, modes, a)
    assert relaxed.relative_cut == pytest.approx(0.4) and relaxed.n_occurrences == 1
    modes.y_vectors[0, a] = 0.1
    none = em.context_snippets(tokens, offsets, modes, a)
    assert none.n_occurrences == 0 and none.snippets == []


class FakeTokenizer:
    def token_strings(self, ids):
        return [{0: "|", 1: "`a`", 2: "*"}.get(int(i), f"t{int(i)}") for i in ids]

    def decode(self, ids):
        return "".join({0: "|", 1: "```", 2: "*"}.get(int(i), f"t{int(i)} ") for i in ids)


def test_tables_escape_markdown_and_fences_are_safe():
    table = markdown_table(["a|b", "c"], [["x|y", Raw("**bold**")], [1.23456, "`q`"]])
    lines = table.splitlines()
    assert lines[0] == "| a\\|b | c |" and lines[2] == "| x\\|y | **bold** |"
    assert lines[3] == "| 1.235 | \\`q\\` |"
    assert all(line.count("|") - line.count("\\|") == 3 for line in lines)
    c = collective_counts()
    modes = em.weighted_modes(c, 3, "lanczos")
    md = em.component_table(modes, 0, FakeTokenizer(), n_top=3)
    assert "component 1" in md and "left vector" in md and "right vector" in md
    rows = [line for line in md.splitlines() if line.startswith("| ")]
    assert len(rows) == 2 + 3                # header, alignment, three rows
    assert all(line.count("|") - line.count("\\|") == 7 for line in rows)      # … and the c(x) column
    tokens = np.array([3, 0, 0, 1, 0, 2, 0, 1, 1, 1, 4], dtype=np.int64)     # every tied history, then ``````…
    a = next(i for i in range(modes.n_modes) if modes.component(i).y_star == 0)
    search = em.context_snippets(tokens, [0], modes, a)
    assert search.n_occurrences == 1 and len(search.snippets) == 1
    text = em.snippets_markdown(search, FakeTokenizer(), c)
    lines = text.splitlines()
    opening = next(line for line in lines if line.startswith("~"))
    fence = opening[:-len("text")]
    assert set(fence) == {"~"} and len(fence) >= 3 and lines[-1] == fence
    assert "⟦" in text and "⟨" in text


# ---------------------------------------------------------------------------
# planted bigrams (languages not used in the book)
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("k, l, seed", [(1, 1, 11), (2, 1, 12), (1, 3, 13), (3, 1, 0), (2, 2, 14)])
def test_planted_bigrams_are_exact_modes(k, l, seed):
    lang = planted_language(k, l, background_size=3, absolute=(0.05, 0.02, 0.01),
                            collective=((0.03, 0.01, 0.005),), rng=seed, concentration=0.5)
    checks = em.check_bigram_modes(lang, k, l)
    assert len(checks) == 4
    for c in checks:
        assert c.violation == 0
        assert c.sigma_error < 1e-12 and c.vector_error < 1e-10
        assert c.own_propensity_error < 1e-10 and c.other_propensity_max < 1e-10
    assert {c.kind for c in checks} == {"absolute", "collective"}


def test_degenerate_planted_value_is_handled():
    # (3, 1) with the book's rates has a planted σ that coincides with another singular value
    lang = planted_language(3, 1, background_size=4, collective=PLANTED_COLLECTIVE, rng=0)
    checks = em.check_bigram_modes(lang, 3, 1)
    assert max(c.cluster for c in checks) >= 2
    assert max(c.vector_error for c in checks) < 1e-10
    assert max(c.other_propensity_max for c in checks) < 1e-10


def test_nearly_equal_planted_values_are_still_exact():
    """Two exact bigrams whose σ differ by ~1e-9 (one cluster, not one value): the lemmas hold
    exactly, so every error is round-off, not the size of the split."""
    from lib.languages import plant_bigrams

    lang = plant_bigrams(1, 1, background=3, absolute=(0.04, 0.04 + 2e-10), collective=(), rng=1)
    checks = em.check_bigram_modes(lang, 1, 1)
    assert max(c.cluster for c in checks) == 2
    for c in checks:
        assert c.violation == 0 and c.vector_error < 1e-12
        assert c.own_propensity_error < 1e-12 and c.other_propensity_max < 1e-12


def test_noise_breaks_the_lemmas_measurably():
    lang = planted_language(1, 1, background_size=3, noise=0.05, rng=5)
    checks = em.check_bigram_modes(lang, 1, 1)
    assert all(c.violation == pytest.approx(0.05) for c in checks)
    assert all(c.residual > 1e-4 for c in checks)
    assert all(c.own_propensity_error > 1e-3 and c.other_propensity_max > 1e-4 for c in checks)


def test_tied_histories_are_listed_by_count_and_the_table_shows_it():
    c = collective_counts()                   # ({0, 1, 2}, 0) with c(x) = 40, 25, 60
    modes = em.weighted_modes(c, 4, "lanczos")
    a = next(i for i in range(modes.n_modes) if modes.component(i).y_star == 0)
    order = modes.x_order(a)
    assert list(order[:3]) == [2, 0, 1]        # tied at the top: most frequent first (not 0, 1, 2)
    cp = modes.component(a, n_top=3, tie_rtol=1e-9)
    assert list(cp.x_top) == [2, 0, 1]
    md = em.component_table(modes, a, FakeTokenizer(), n_top=3)
    rows = [line for line in md.splitlines() if line.startswith("| ") and "rank" not in line][1:]
    assert [r.split("|")[-2].strip() for r in rows] == ["60", "40", "25"]


def test_snippet_history_is_chosen_by_the_singular_vector_not_the_function():
    """History 0: c = 1000, followed by y* 900 times; history 1: c = 10, always y*. The function
    ṽ/√q(x) is larger at the rare history 1, the singular vector ṽ at the frequent history 0."""
    C = np.array([[900, 100, 0], [10, 0, 0], [0, 50, 400], [0, 300, 20]])
    c = counts_from_matrix(C)
    modes = em.weighted_modes(c, 2, "lanczos")
    a = next(i for i in range(modes.n_modes) if modes.component(i).y_star == 0)
    g, v = np.abs(modes.x_function(a)), np.abs(modes.x_vectors[:, a])
    assert np.argmax(g) == 1 and np.argmax(v) == 0            # the two rules disagree here
    tokens = np.array([0, 0, 1, 0, 0, 0], dtype=np.int64)
    assert em.context_snippets(tokens, [0], modes, a).x_index == 0


def test_shuffle_keeps_counts_and_is_seeded():
    x = stream(1, n=500)
    a, b = em.shuffle_tokens(x, 3), em.shuffle_tokens(x, 3)
    assert np.array_equal(a, b) and not np.array_equal(a, em.shuffle_tokens(x, 4))
    assert np.array_equal(np.bincount(a, minlength=7), np.bincount(x, minlength=7))
