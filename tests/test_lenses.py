"""lib.lenses: the model's conditional by the chain rule (against closed forms and one forward pass per
context), the alphabet, principal angles between history subspaces and their null, the corpus views,
the links between the lenses, the geometry comparisons, α at several sizes and the modes carried."""
from collections import Counter
from math import gamma as Gamma

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from lib import lenses as LZ, lenses_experiments as LX, logits as lg
from lib.models import prefix_reuse
from lib.models.causal_lm import CausalLM
from lib.modes import Modes

torch.set_num_threads(1)


def tiny_lm(seed=0, vocab=8, ctx=16):
    from transformers import AutoModelForCausalLM

    from lib.models.mini_pythia import mini_pythia_config

    torch.manual_seed(seed)
    return CausalLM(AutoModelForCausalLM.from_config(mini_pythia_config("p-tiny", vocab, ctx)), "cpu")


@pytest.fixture(scope="module")
def lm():
    return tiny_lm()


def markov_oracle(P):
    """An oracle over len(P) tokens: the next-token log-probabilities of an order-1 chain P."""
    return lambda ctx: np.log(P[ctx[-1]])


def random_chain(rng, V):
    P = rng.random((V, V)) + 0.05
    return P / P.sum(1, keepdims=True)


# ---------------------------------------------------------------------------
# the model's conditional
# ---------------------------------------------------------------------------

def test_all_futures_order():
    assert LZ.all_futures(2, 3) == [(), (0,), (1,), (0, 0), (0, 1), (1, 0), (1, 1)]
    assert LZ.all_futures(5, 1) == [()]


@pytest.mark.parametrize("l", [1, 2, 3])
def test_conditional_of_a_markov_chain_is_its_closed_form(l):
    rng = np.random.default_rng(l)
    V = 4
    P = random_chain(rng, V)
    H = [(0,), (2, 1), (3, 3, 2)]
    got = LZ.model_conditional(markov_oracle(P), H, l, alphabet_size=V)
    want = np.empty((len(H), V ** l))
    for i, h in enumerate(H):
        for j, y in enumerate(np.ndindex(*(V,) * l)):          # lexicographic order of y
            prev, prob = h[-1], 1.0
            for t in y:
                prob *= P[prev, t]
                prev = t
            want[i, j] = prob
    assert np.abs(got - want).max() < 1e-12
    assert np.abs(got.sum(1) - 1).max() < 1e-12


def test_symbols_sum_the_merged_tokens_at_every_position():
    rng = np.random.default_rng(7)
    V = 5
    P = random_chain(rng, V)
    symbols = np.array([0, 1, 2, 2, 2])                     # tokens 2, 3, 4 become one symbol
    H = [(1,), (4, 0)]
    full = LZ.model_conditional(markov_oracle(P), H, 2, alphabet_size=V).reshape(2, V, V)
    merged = LZ.model_conditional(markov_oracle(P), H, 2, symbols, alphabet_size=V).reshape(2, 3, 3)
    want = np.zeros((2, 3, 3))
    for a in range(V):
        for b in range(V):
            want[:, symbols[a], symbols[b]] += full[:, a, b]
    assert np.abs(merged - want).max() < 1e-12
    # a map onto the wrong symbols gives another matrix (the comparison can fail)
    other = LZ.model_conditional(markov_oracle(P), H, 2, np.array([0, 1, 1, 2, 2]), alphabet_size=V)
    assert np.abs(other - merged.reshape(2, 9)).max() > 1e-3


def test_conditional_of_a_transformer_matches_one_forward_pass_per_context(lm):
    H = [(1, 2), (3,), (7, 0, 5)]
    got = LZ.model_conditional(lm, H, 2)
    V = lm.vocab_size
    contexts = [h + f for h in H for f in LZ.all_futures(V, 2)]
    rows = torch.exp(prefix_reuse.next_token_rows(lm, contexts)).double().numpy().reshape(len(H), V + 1, V)
    want = np.einsum("ha,hab->hab", rows[:, 0], rows[:, 1:]).reshape(len(H), V * V)
    assert np.abs(got - want).max() < 1e-5
    assert np.abs(got.sum(1) - 1).max() < 1e-12


@pytest.mark.parametrize("bad, message", [
    (np.array([0, 1, 2]), "length"),                        # not one symbol per token
    (np.array([0, 1, 3, 3, 0, 1, 1, 0]), "onto"),           # symbol 2 unused
    (np.array([0, -1, 1, 1, 0, 0, 1, 1]), "onto"),          # a negative symbol
    (np.linspace(0, 1, 8), "integer"),
])
def test_symbols_that_are_not_a_map_onto_the_alphabet_are_refused(lm, bad, message):
    with pytest.raises(LZ.LensesError, match=message):
        LZ.model_conditional(lm, [(1,)], 1, bad)


def test_bad_requests_are_refused_before_work(lm):
    with pytest.raises(LZ.LensesError, match="max_contexts"):
        LZ.model_conditional(lm, [(1,)] * 10, 3, max_contexts=500)
    with pytest.raises(LZ.LensesError, match="'l'"):
        LZ.model_conditional(lm, [(1,)], 0)
    with pytest.raises(LZ.LensesError, match="histories"):
        LZ.model_conditional(lm, [], 1)


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 4), st.integers(1, 3), st.integers(1, 3), st.integers(0, 10 ** 6))
def test_chain_rule_gives_distributions_and_merging_commutes(V, l, b, seed):
    rng = np.random.default_rng(seed)
    n_f = sum(V ** j for j in range(l))
    probs = rng.dirichlet(np.ones(V), size=(b, n_f))
    table = rng.integers(0, 2, V)
    table[:2] = [0, 1]                                      # onto {0, 1}
    onehot = np.zeros((V, 2))
    onehot[np.arange(V), table] = 1
    merged = LZ.chain_rule(probs, onehot, l)
    full = LZ.chain_rule(probs, np.eye(V), l)
    assert np.abs(merged.sum(1) - 1).max() < 1e-12 and (merged >= 0).all()
    # summing the full conditional over the tokens of each symbol string gives the merged one
    want = np.zeros((b,) + (2,) * l)
    for idx in np.ndindex(*(V,) * l):
        want[(slice(None),) + tuple(table[list(idx)])] += full.reshape((b,) + (V,) * l)[(slice(None),) + idx]
    assert np.abs(want.reshape(b, -1) - merged).max() < 1e-12


def test_symbol_table_and_check_symbols():
    table = LZ.symbol_table([5, 2, -1], 7)
    assert table.tolist() == [2, 2, 1, 2, 2, 0, 2]
    assert LZ.check_symbols(table, 7)[1] == 3
    with pytest.raises(LZ.LensesError):
        LZ.symbol_table([1, 1], 4)                          # a token kept twice
    with pytest.raises(LZ.LensesError):
        LZ.symbol_table([0, 1, 2], 3)                       # nothing left for OTHER


# ---------------------------------------------------------------------------
# principal angles between history subspaces
# ---------------------------------------------------------------------------

def test_lens_alignment_by_hand():
    e = np.eye(6)
    rows = np.linalg.qr(np.random.default_rng(0).standard_normal((9, 3)))[0].T      # orthonormal rows
    A = e[:, :3] @ np.diag([3.0, 2.0, 1.0]) @ rows      # left singular vectors e0, e1, e2 exactly
    # same top-2 left subspace, other columns (a different lens on the same histories)
    B = np.column_stack([e[:, 1] * 5, e[:, 0] * 4, e[:, 2] * 0.1, e[:, 4] * 0.01])
    assert np.allclose(LZ.lens_alignment(A, B, 2), [1, 1])
    # orthogonal histories: cos = 0; one direction shared at 45°: cos = 1/√2
    C = np.column_stack([e[:, 3] * 2, e[:, 4]])
    assert np.allclose(LZ.lens_alignment(A, C, 2), [0, 0], atol=1e-12)
    D = np.column_stack([(e[:, 0] + e[:, 5]) * 2, e[:, 4]])
    assert np.allclose(LZ.lens_alignment(A[:, :], D, 2), [1 / np.sqrt(2), 0], atol=1e-12)


@settings(max_examples=30, deadline=None)
@given(st.integers(4, 12), st.integers(1, 3), st.integers(0, 10 ** 6))
def test_lens_alignment_is_symmetric_and_a_cosine(n, r, seed):
    rng = np.random.default_rng(seed)
    A, B = rng.standard_normal((n, 7)), rng.standard_normal((n, 5))
    c = LZ.lens_alignment(A, B, r)
    assert c.shape == (r,) and (c >= -1e-12).all() and (c <= 1 + 1e-12).all()
    assert np.allclose(c, LZ.lens_alignment(B, A, r))
    assert np.all(np.diff(c) <= 1e-12)                      # descending
    # brute force: singular values of U_Aᵀ U_B
    ua = np.linalg.svd(A, full_matrices=False)[0][:, :r]
    ub = np.linalg.svd(B, full_matrices=False)[0][:, :r]
    assert np.allclose(c, np.linalg.svd(ua.T @ ub, compute_uv=False), atol=1e-9)


def test_lens_alignment_refuses_bad_input():
    with pytest.raises(LZ.LensesError, match="same histories"):
        LZ.lens_alignment(np.ones((4, 3)), np.ones((5, 3)), 1)
    with pytest.raises(LZ.LensesError, match="'r'"):
        LZ.lens_alignment(np.ones((4, 3)), np.ones((4, 2)), 3)
    with pytest.raises(LZ.LensesError, match="finite"):
        LZ.lens_alignment(np.full((4, 3), np.nan), np.ones((4, 2)), 1)


def test_alignment_null_matches_the_closed_form_for_lines():
    """For two random lines in R^n, E|cos| = Γ(n/2) / (√π Γ((n+1)/2))."""
    n = 7
    null = LZ.alignment_null(n, 1, 4000, seed=3)
    assert null.shape == (4000, 1)
    want = Gamma(n / 2) / (np.sqrt(np.pi) * Gamma((n + 1) / 2))
    assert abs(null.mean() - want) < 4 * null.std() / np.sqrt(4000)


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 9), st.integers(1, 4), st.integers(0, 10 ** 6))
def test_history_dependent_is_centred_in_l2_q(n, cols, seed):
    rng = np.random.default_rng(seed)
    X, q = rng.standard_normal((n, cols)), rng.random(n) + 0.01
    Y = LZ.history_dependent(X, q)
    p = q / q.sum()
    assert np.abs(np.sqrt(p) @ Y).max() < 1e-10            # orthogonal to the constant function
    # the Euclidean Gram of Y is the covariance of X's columns under q
    mean = p @ X
    assert np.allclose(Y.T @ Y, (X - mean).T @ (p[:, None] * (X - mean)))


# ---------------------------------------------------------------------------
# the corpus
# ---------------------------------------------------------------------------

def small_corpus(seed=0, n_docs=6, length=400, V=6):
    rng = np.random.default_rng(seed)
    P = random_chain(rng, V) ** 3
    P /= P.sum(1, keepdims=True)
    docs = []
    for _ in range(n_docs):
        x = [int(rng.integers(V))]
        for _ in range(length - 1):
            x.append(int(rng.choice(V, p=P[x[-1]])))
        docs.append(np.array(x))
    return docs


def test_corpus_view_by_hand_and_conditional_at_agree():
    docs = small_corpus()
    kept = np.array([10, 11, 12, 13, 14, -1])               # symbol i is token 10 + i, symbol 5 OTHER
    labels = [str(t) for t in kept]
    view = LZ.corpus_view(docs, kept, labels, 2, 8)
    assert view.data.m == 8 and view.tokens.shape == (8, 2)
    assert (view.tokens == view.data.contexts + 10).all()
    pairs = Counter()
    for d in docs:
        for a, b, c in zip(d, d[1:], d[2:]):
            pairs[(a, b, c)] += 1
    for j, (a, b) in enumerate(view.data.contexts):
        row = np.array([pairs[(a, b, c)] for c in range(6)], dtype=float)
        assert np.allclose(view.conditional[j], row / row.sum())
    stream = np.concatenate(docs)
    offsets = np.cumsum([0] + [len(d) for d in docs[:-1]])
    assert np.allclose(LZ.conditional_at(stream, offsets, view.data.contexts, 6), view.conditional)
    assert np.isclose(view.q_x.sum(), 1) and view.modes.shape == (8, 6)


def test_conditional_at_refuses_an_unseen_context():
    with pytest.raises(LZ.LensesError, match="never occur"):
        LZ.conditional_at(np.array([0, 1, 0, 1, 0, 1]), np.array([0]), np.array([[1, 1]]), 2)


def test_corpus_view_needs_an_other_symbol():
    with pytest.raises(LZ.LensesError, match="OTHER"):
        LZ.corpus_view(small_corpus(), np.array([1, 2, 3, 4, 5, 6]), list("abcdef"), 1, 4)


# ---------------------------------------------------------------------------
# the links between the lenses
# ---------------------------------------------------------------------------

def test_empty_future_link_both_ways(lm):
    H = [(1, 2), (3, 4), (5, 6, 7)]
    L = lg.extended_logit_matrix(lm, H, [()], None, centered=True)
    P = LZ.model_conditional(lm, H, 1)
    assert LZ.empty_future_link(L, P) < 1e-5
    # the uncentred log-probabilities are not the logit rows (Def 2.1 centres them)
    assert LZ.empty_future_link(L, P / np.e) > 0.5 or LZ.empty_future_link(L + 0.1, P) > 0.05


def test_readout_link_both_ways(lm):
    H = [(1, 2), (3, 4), (5,)]
    L = lg.extended_logit_matrix(lm, H, [()], None, centered=True)
    assert LZ.readout_link(lm, H, L) < 1e-4
    assert LZ.readout_link(lm, H, L[[1, 0, 2]]) > 1e-2      # another history's row


def test_context_embeddings_group_lengths_and_word_embeddings(lm):
    H = [(1, 2), (3,), (4, 5)]
    together = LZ.context_embeddings(lm, H)
    alone = np.vstack([LZ.context_embeddings(lm, [h]) for h in H])
    assert together.shape == (3, lm.config.hidden_size) and np.abs(together - alone).max() < 1e-5
    W = LZ.word_embeddings(lm, [3, 1])
    assert np.allclose(W, lm.model.get_output_embeddings().weight.detach().double().numpy()[[3, 1]])


# ---------------------------------------------------------------------------
# geometry comparisons, α, verdicts
# ---------------------------------------------------------------------------

def cosines(rng, n, d=3):
    X = rng.standard_normal((n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X @ X.T


def test_geometry_correlation_both_ways():
    rng = np.random.default_rng(0)
    A = cosines(rng, 30)
    r, p = LZ.geometry_correlation(A, A, 200)
    assert r == pytest.approx(1.0) and p == pytest.approx(1 / 201)
    r, p = LZ.geometry_correlation(A, cosines(rng, 30), 200)
    assert p > 0.01


def test_paired_correlation_difference():
    rng = np.random.default_rng(1)
    B = cosines(rng, 40)
    d, se = LZ.paired_correlation_difference(B, B, B, 50)
    assert d == 0 and se == pytest.approx(0, abs=1e-12)
    noisy = B + 0.3 * cosines(rng, 40)
    d, se = LZ.paired_correlation_difference(B, noisy, B, 100)
    assert d > 0 and d > 3 * se


def test_alpha_by_size_recovers_an_exact_power_law():
    rng = np.random.default_rng(2)
    n, n_f, width, alpha = 64, 64, 3, 0.6
    U = np.linalg.qr(rng.standard_normal((n, n)))[0]
    V = np.linalg.qr(rng.standard_normal((n_f * width, n)))[0]
    L = U @ np.diag(np.arange(1, n + 1) ** -alpha) @ V.T
    got = LZ.alpha_by_size(L, n_f, [1.0, 4.0])
    assert got["original"][1.0] == pytest.approx(alpha, abs=1e-9)
    assert got["literal"][1.0] < alpha - 0.01              # the literal reading is biased low
    assert set(got["original"]) == {1.0, 4.0}


def test_carried_shares_of_the_data_itself_are_one():
    rng = np.random.default_rng(3)
    q = rng.random((6, 4)) ** 2
    modes = Modes.from_joint(q / q.sum())
    cond = modes.conditional
    shares = LZ.carried_shares(modes, cond[None])
    assert np.allclose(shares, 1.0)
    assert LZ.modes_carried(shares)[0] == modes.rank
    flat = np.repeat(modes.q_y[None], 6, axis=0)            # a model that ignores the history
    assert LZ.modes_carried(LZ.carried_shares(modes, flat[None]))[0] < modes.rank


def test_the_llc_settings_are_the_learning_coefficients_chapters():
    from lib.book.chapters import get_chapter

    mine, theirs = get_chapter("lenses").presets["ci"], get_chapter("llc").presets["ci"]
    for name in ("windows", "chains", "draws", "burn_in", "batch_size", "eps", "gamma"):
        assert mine[f"llc_{name}"] == theirs[f"lm_{name}"], name
    assert mine["model_size"] == theirs["lm_size"]


# ---------------------------------------------------------------------------
# the history side of a wide matrix, its spectrum, the language condition
# ---------------------------------------------------------------------------

@settings(max_examples=30, deadline=None)
@given(st.integers(2, 8), st.integers(9, 40), st.integers(0, 10 ** 6))
def test_history_side_keeps_the_left_singular_vectors_and_values(m, n, seed):
    X = np.random.default_rng(seed).standard_normal((m, n)) * np.linspace(3, 0.5, m)[:, None]
    R = LZ.history_side(X)
    assert R.shape == (m, m)
    assert np.allclose(R @ R.T, X @ X.T)                                     # same Gram matrix, hence same U, Σ
    s_X, s_R = np.linalg.svd(X, compute_uv=False), np.linalg.svd(R, compute_uv=False)
    assert np.allclose(s_X, s_R, rtol=1e-8)
    for r in range(1, m):                                                    # the same top-r subspaces
        assert np.allclose(lg.column_space_angles(X, R, r), 1, atol=1e-6)


def test_history_side_leaves_a_tall_matrix_and_refuses_a_vector():
    X = np.arange(12.0).reshape(4, 3)
    assert LZ.history_side(X) is not None and np.array_equal(LZ.history_side(X), X)
    with pytest.raises(LZ.LensesError):
        LZ.history_side(np.ones(5))


def test_normalised_spectrum_is_the_logits_modules_on_the_whole_matrix():
    X = np.random.default_rng(3).standard_normal((6, 50)) * np.array([4, 2, 1, .5, .2, .1])[:, None]
    assert np.allclose(LZ.normalised_spectrum(X), np.linalg.svd(X, compute_uv=False) / np.sqrt(X.size), rtol=1e-8)


def test_lens_alignment_of_a_wide_matrix_equals_the_direct_angles():
    rng = np.random.default_rng(5)
    A, B = rng.standard_normal((7, 60)), rng.standard_normal((7, 4))
    U = np.linalg.svd(A)[0][:, :2]
    V = np.linalg.svd(B)[0][:, :2]
    want = np.linalg.svd(U.T @ V, compute_uv=False)
    assert np.allclose(LZ.lens_alignment(A, B, 2), want, atol=1e-8)


def test_language_condition_of_a_markov_chain_and_of_a_transformer(lm):
    rng = np.random.default_rng(1)
    P = random_chain(rng, 5)
    table = np.array([0, 1, 1, 2, 0])                                       # a map onto 3 symbols
    assert LZ.language_condition_error(markov_oracle(P), [(0,), (3, 2)], table) < 1e-12
    assert LZ.language_condition_error(lm, [(1,), (2, 5)], np.arange(8) % 3) < 1e-5


def test_language_condition_catches_a_transposed_order(monkeypatch):
    rng = np.random.default_rng(2)
    P = random_chain(rng, 4)
    real = LZ.model_conditional

    def transposed(model, histories, l, symbols=None, **kw):
        out = real(model, histories, l, symbols, **kw)
        if l == 2:
            n = int(round(np.sqrt(out.shape[1])))
            out = out.reshape(len(out), n, n).transpose(0, 2, 1).reshape(len(out), -1)
        return out

    monkeypatch.setattr(LZ, "model_conditional", transposed)
    assert LZ.language_condition_error(markov_oracle(P), [(0,), (1,)], np.arange(4)) > 1e-3


# ---------------------------------------------------------------------------
# the corpus's conditional at unseen contexts, and the modes carried
# ---------------------------------------------------------------------------

def test_conditional_at_gives_an_unseen_context_the_marginal_when_asked():
    stream = np.array([0, 1, 0, 2, 1, 1, 0, 1])
    contexts = np.array([[0], [2], [1]])
    got = LZ.conditional_at(stream, [0], contexts, 3, unseen="marginal")
    want_0 = np.array([0, 2, 1]) / 3                        # after 0: 1, 2, 1
    assert np.allclose(got[0], want_0)
    stream2 = np.array([0, 1, 0, 1, 1, 0])                  # symbol 2 never occurs as a context
    got = LZ.conditional_at(stream2, [0], np.array([[2], [0]]), 3, unseen="marginal")
    pairs = Counter(zip(stream2, stream2[1:]))
    marginal = np.array([sum(v for (a, b), v in pairs.items() if b == c) for c in range(3)], dtype=float)
    assert np.allclose(got[0], marginal / marginal.sum())
    assert np.allclose(got.sum(1), 1)
    with pytest.raises(LZ.LensesError, match="never occur"):
        LZ.conditional_at(stream2, [0], np.array([[2], [0]]), 3)
    with pytest.raises(LZ.LensesError, match="unseen"):
        LZ.conditional_at(stream2, [0], np.array([[0]]), 3, unseen="zero")


def test_modes_carried_counts_a_share_at_the_level():
    shares = np.array([[1.0, 0.5, 0.49999, 0.2], [0.5, 0.5, 0.5, 0.5]])
    assert LZ.modes_carried(shares, 0.5).tolist() == [2, 4]
    assert LZ.modes_carried(shares, 0.2).tolist() == [4, 4]


# ---------------------------------------------------------------------------
# a transformers model as a researcher has it (lib.logits.as_model wraps it)
# ---------------------------------------------------------------------------

def test_every_lens_takes_a_bare_transformers_model(lm):
    bare = tiny_lm(seed=3).model                         # a PreTrainedModel, not a CausalLM
    bare.train()
    wrapped = CausalLM(bare, "cpu")
    H = [(1, 2), (3,), (4, 5, 6)]
    assert np.array_equal(LZ.model_conditional(bare, H, 2), LZ.model_conditional(wrapped, H, 2))
    assert np.array_equal(LZ.context_embeddings(bare, H), LZ.context_embeddings(wrapped, H))
    assert np.array_equal(LZ.word_embeddings(bare, [3, 1]), LZ.word_embeddings(wrapped, [3, 1]))
    L = lg.extended_logit_matrix(bare, H, [()], None, centered=True)
    assert LZ.readout_link(bare, H, L) < 1e-4 and LZ.readout_link(bare, H, L[[1, 0, 2]]) > 1e-2
    assert LZ.language_condition_error(bare, H, np.arange(8) % 3) < 1e-5
    # the comparison can fail: another model's conditional differs
    assert np.abs(LZ.model_conditional(bare, H, 1) - LZ.model_conditional(lm, H, 1)).max() > 1e-3
    # an oracle has no hidden states: refused by the lenses that read them, naming the parameter
    with pytest.raises(LZ.LensesError, match="'model' must be a language model"):
        LZ.context_embeddings(markov_oracle(np.full((3, 3), 1 / 3)), H)
    assert LZ.language_model(bare).model is bare and LZ.language_model(wrapped) is wrapped
