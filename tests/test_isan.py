"""Tests for lib.isan: ISANs and low logit rank (Golowich, Liu & Shetty 2025, §2, §4, App. C)."""

import itertools

import numpy as np
import pytest
from scipy.special import expit, log_softmax, logsumexp
from scipy.stats import chi2

import lib.isan as isan
from lib.isan import (ISAN, TimeVaryingISAN, all_futures, all_histories, copying_isan,
                      copying_logprobs, isan_from_low_rank_oracle, learn_from_logit_queries,
                      logit_matrix, logit_rank, noisy_parity_isan, noisy_parity_logprobs,
                      random_isan, rare_branch_isan, ssm_to_isan, time_varying_to_isan,
                      tv_distance)


def full_logit_matrix(oracle, S, T, t):
    """L_M(Σ^t, Σ^{≤T-1-t}) (Theorem 4.3's matrix, futures that have a next token)."""
    return logit_matrix(oracle, all_histories(S, t), all_futures(S, T - 1 - t), S)


def brute_force_logprobs(oracle, S, T):
    """log Pr[s] = Σ_t log softmax(L[· | s_{<t}])[s_t], one string at a time."""
    return np.array([sum(log_softmax(oracle(s[:t]))[s[t]] for t in range(T))
                     for s in itertools.product(range(S), repeat=T)])


# ---------------------------------------------------------------------------
# the model
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("d,S,T", [(1, 2, 3), (3, 2, 6), (4, 3, 5), (2, 5, 3)])
def test_sequence_logprobs_normalised_and_match_brute_force(d, S, T):
    m = random_isan(d, S, T, np.random.default_rng(d * 100 + S * 10 + T), scale=1.5)
    lp = m.sequence_logprobs()
    assert lp.shape == (S ** T,)
    assert abs(logsumexp(lp)) < 1e-10
    np.testing.assert_allclose(lp, brute_force_logprobs(m.next_logits, S, T), atol=1e-10)


def test_sequence_logprobs_blocked_path(monkeypatch):
    m = random_isan(3, 3, 6, np.random.default_rng(0))
    full = m.sequence_logprobs()
    monkeypatch.setattr(isan, "_BLOCK_FLOATS", 50)  # forces splitting after several tokens
    np.testing.assert_allclose(m.sequence_logprobs(), full, atol=1e-13)


def test_next_logits_are_mean_centred_and_state_matches():
    m = random_isan(4, 3, 5, np.random.default_rng(1))
    for h in [(), (2,), (0, 1, 2, 1)]:
        L = m.next_logits(h)
        assert abs(L.sum()) < 1e-12
        x = m.state(h)
        np.testing.assert_allclose(L, (m.B[len(h)] @ x) - (m.B[len(h)] @ x).mean(), atol=1e-12)


def test_sample_frequencies_match_probabilities():
    S, T, n = 2, 4, 40_000
    m = random_isan(3, S, T, np.random.default_rng(2))
    Z = m.sample(n, np.random.default_rng(3))
    assert Z.shape == (n, T) and Z.dtype == np.int64
    idx = Z @ (S ** np.arange(T - 1, -1, -1))   # lexicographic index, first token most significant
    counts = np.bincount(idx, minlength=S ** T)
    expected = n * np.exp(m.sequence_logprobs())
    assert expected.min() > 5
    stat = ((counts - expected) ** 2 / expected).sum()
    assert chi2.sf(stat, S ** T - 1) > 1e-3


# ---------------------------------------------------------------------------
# logit matrices and Theorem 4.3
# ---------------------------------------------------------------------------

def test_logit_matrix_layout_and_helpers():
    m = random_isan(2, 3, 4, np.random.default_rng(4))
    H, F = all_histories(3, 2), all_futures(3, 1)
    assert H[:4] == [(0, 0), (0, 1), (0, 2), (1, 0)] and len(H) == 9
    assert F == [(), (0,), (1,), (2,)]
    L = logit_matrix(m.next_logits, H, F, 3)
    assert L.shape == (9, 12)
    for i, j, z in [(0, 0, 0), (5, 2, 1), (8, 3, 2)]:
        assert L[i, j * 3 + z] == pytest.approx(m.next_logits(H[i] + F[j])[z], abs=1e-14)
    assert np.array_equal(logit_matrix(m.next_logits, H, F), L)  # |Σ| read off the oracle's answers
    assert logit_rank(np.zeros((3, 3))) == 0
    assert logit_rank(np.diag([1.0, 1e-3, 1e-12]), tol=1e-9) == 2


@pytest.mark.parametrize("d,S,T", [(2, 2, 6), (3, 2, 7), (4, 3, 5), (5, 3, 5)])
def test_theorem_4_3_fact_c4_random_isans_have_logit_rank_d(d, S, T):
    """rank L(Σ^t, Σ^{≤T-1-t}) = min(d, |Σ|^t, (|Σ|-1)·#futures) for generic ISANs, always <= d."""
    m = random_isan(d, S, T, np.random.default_rng(d + 10 * S))
    for t in range(T):
        n_fut = len(all_futures(S, T - 1 - t))
        r = logit_rank(full_logit_matrix(m.next_logits, S, T, t), tol=1e-9)
        assert r <= d
        assert r == min(d, S ** t, (S - 1) * n_fut)
        if S ** t >= d and (S - 1) * n_fut >= d:
            assert r == d


@pytest.mark.parametrize("d,S,T", [(2, 2, 6), (3, 3, 5), (4, 2, 7)])
def test_lemma_c3_rebuilds_isan_from_logit_queries(d, S, T):
    m = random_isan(d, S, T, np.random.default_rng(7 * d + S))
    rebuilt, n_queries = isan_from_low_rank_oracle(m.next_logits, S, T, d, return_queries=True)
    assert rebuilt.d == d and rebuilt.T == T
    assert n_queries == sum(S ** k for k in range(T))  # every prefix of Σ^{≤T-1}, once
    assert tv_distance(m, rebuilt) < 1e-10
    with pytest.raises(ValueError, match="d:"):
        isan_from_low_rank_oracle(m.next_logits, S, T, d - 1)


def test_remark_1_normalised_logits_have_higher_rank():
    d, S, T = 2, 3, 5
    m = random_isan(d, S, T, np.random.default_rng(5))
    for t in (2, 3):
        centred = logit_rank(full_logit_matrix(m.next_logits, S, T, t), tol=1e-9)
        normalised = logit_rank(full_logit_matrix(m.next_logprobs, S, T, t), tol=1e-9)
        assert centred == d
        assert normalised > d


# ---------------------------------------------------------------------------
# Fact C.2 and the representation results (Appendix C.2)
# ---------------------------------------------------------------------------

def test_fact_c2_time_varying_to_time_invariant():
    d, S, T = 3, 3, 5
    m = random_isan(d, S, T, np.random.default_rng(6))
    inv = time_varying_to_isan(m)
    assert isinstance(inv, ISAN) and inv.d == T * d
    np.testing.assert_allclose(inv.sequence_logprobs(T), m.sequence_logprobs(), atol=1e-12)
    assert tv_distance(inv, m, T=T) < 1e-12
    for h in [(), (1,), (2, 0, 1, 1)]:
        np.testing.assert_allclose(inv.next_logits(h), m.next_logits(h), atol=1e-12)


@pytest.mark.parametrize("n", [1, 3, 5])
def test_fact_c9_copying(n):
    target = copying_logprobs(n)
    assert abs(logsumexp(target)) < 1e-12
    tvs = []
    for C in [0.0, 2.0, 8.0, 20.0, 60.0]:
        m = copying_isan(n, C)
        assert m.d == n + 1 and m.T == 2 * n
        tv = tv_distance(m, target)
        # every copy step errs independently with q = 1/(1 + e^{C/2}): TV = 1 - (1-q)^n <= n e^{-C/2}
        assert tv == pytest.approx(1 - (1 - expit(-C / 2)) ** n, abs=1e-12)
        assert tv <= n * np.exp(-C / 2) + 1e-15
        tvs.append(tv)
    assert all(a > b for a, b in zip(tvs, tvs[1:])) and tvs[-1] < 1e-12
    for t in range(2 * n):
        assert logit_rank(full_logit_matrix(copying_isan(n, 8.0).next_logits, 2, 2 * n, t)) <= n + 1


@pytest.mark.parametrize("y,p", [([1], 0.1), ([1, 0, 1], 0.2), ([0, 1, 1, 0, 1], 0.05)])
def test_fact_c11_noisy_parity_hidden_dim_2(y, p):
    n = len(y)
    m = noisy_parity_isan(y, p)
    target = noisy_parity_logprobs(y, p)
    assert m.d == 2 and m.T == n + 1
    assert abs(logsumexp(target)) < 1e-12
    assert tv_distance(m, target) < 1e-12
    for t in range(n + 1):
        assert logit_rank(full_logit_matrix(m.next_logits, 2, n + 1, t)) <= 2
    # the proof's route: any model with logit rank <= 2 (here the definition itself) -> Lemma C.3
    table = target.reshape((2,) * (n + 1))

    def oracle(h):
        marg = logsumexp(table[tuple(h)].reshape(2, -1), axis=1)
        return marg - marg.mean()
    assert tv_distance(isan_from_low_rank_oracle(oracle, 2, n + 1, 2), target) < 1e-10


def ssm_reference_logprobs(x0, u1, V, U, A, B, C, D, S, T):
    """Defs C.5-C.6 simulated literally for every string."""
    out = []
    for s in itertools.product(range(S), repeat=T):
        x, u, lp = x0, u1, 0.0
        for z in s:
            y = C(u) @ x + D(u) @ u
            lp += log_softmax(U @ y)[z]
            x = A(u) @ x + B(u) @ u
            u = V[:, z]
        out.append(lp)
    return np.array(out)


def test_fact_c7_ssm_as_isan():
    rng = np.random.default_rng(8)
    d, p, q, S, T = 3, 2, 2, 3, 4
    A0, A1 = rng.standard_normal((2, d, d)) / np.sqrt(d)
    B0, C0, D0 = rng.standard_normal((d, p)), rng.standard_normal((q, d)), rng.standard_normal((q, p))
    w = rng.standard_normal(p)
    A = lambda u: A0 + np.tanh(u @ w) * A1          # selective: arbitrary functions of the input
    B = lambda u: B0 * np.exp(-(u ** 2).sum())
    C = lambda u: C0 * np.cos(u[0])
    D = lambda u: D0 + np.outer(np.sin(u[:q]), u)
    x0, u1 = rng.standard_normal(d), rng.standard_normal(p)
    V, U = rng.standard_normal((p, S)), rng.standard_normal((S, q))
    m = ssm_to_isan(x0, u1, V, U, A, B, C, D)
    assert m.d == d + 2 * q + 1
    ref = ssm_reference_logprobs(x0, u1, V, U, A, B, C, D, S, T)
    assert tv_distance(m, ref, T=T) < 1e-12
    np.testing.assert_allclose(m.sequence_logprobs(T), ref, atol=1e-10)
    with pytest.raises(ValueError, match=r"A\(u\)"):
        ssm_to_isan(x0, u1, V, U, lambda u: np.eye(d + 1), B, C, D)


# ---------------------------------------------------------------------------
# Theorem 4.4: learning from logit queries
# ---------------------------------------------------------------------------

class CountingOracle:
    def __init__(self, oracle):
        self.oracle, self.calls = oracle, 0

    def __call__(self, h):
        self.calls += 1
        return self.oracle(h)


@pytest.mark.parametrize("d,S,T", [(2, 2, 5), (3, 3, 4), (4, 2, 7), (3, 4, 5), (5, 3, 6), (6, 4, 7)])
@pytest.mark.parametrize("eps", [0.3, 0.1])
def test_theorem_4_4_learner_on_random_isans(d, S, T, eps):
    m = random_isan(d, S, T, np.random.default_rng(100 * d + 10 * S + T))
    oracle = CountingOracle(m.next_logits)
    learned, n_queries, info = learn_from_logit_queries(
        oracle, S, T, eps, np.random.default_rng(0), d=d, return_info=True)
    assert n_queries == oracle.calls == info["queries"]
    assert info["N"] == int(np.ceil(4 * T / eps * np.log(d * T / eps)))
    assert learned.d <= d + 1 and max(info["ranks"]) <= d
    assert info["iterations"] <= d * T == info["max_iterations"]  # Lemma C.17
    assert info["future_sizes"][0] >= 1 and len(info["future_sizes"]) == T
    assert tv_distance(m, learned) <= eps
    assert tv_distance(m, learned) < 1e-9                       # generic models are learned exactly


def test_learner_guard_is_lemma_c17_dT():
    """More than dT passes of Algorithm 3 means the model's logit rank exceeds the d given: refused."""
    m = random_isan(3, 4, 2, np.random.default_rng(13))  # rank 3 at t = 1: 3 passes
    learned, _, info = learn_from_logit_queries(m.next_logits, 4, 2, 0.2, np.random.default_rng(0), d=2,
                                                return_info=True)
    assert info["iterations"] == 3 <= 2 * 2 == info["max_iterations"]
    with pytest.raises(RuntimeError, match=r"within d·T = 1·2 = 2 iterations \(Lemma C.17\).*exceeds d = 1"):
        learn_from_logit_queries(m.next_logits, 4, 2, 0.2, np.random.default_rng(0), d=1)


def test_learner_without_known_d_uses_trivial_bound():
    m = random_isan(3, 2, 5, np.random.default_rng(9))
    learned, n, info = learn_from_logit_queries(m.next_logits, 2, 5, 0.2, np.random.default_rng(1),
                                                return_info=True)
    assert info["d_used"] == isan.trivial_logit_rank_bound(2, 5) >= 3
    assert tv_distance(m, learned) < 1e-9


@pytest.mark.parametrize("model", [copying_isan(3, 6.0), noisy_parity_isan([1, 0, 1, 1], 0.1)])
def test_learner_on_structured_models(model):
    """Degenerate starts (uniform steps: rank-0 initial rows) and noisy parity, which is hard
    from samples (Theorem C.13) but easy from logit queries."""
    oracle = CountingOracle(model.next_logits)
    learned, n = learn_from_logit_queries(oracle, 2, model.T, 0.1, np.random.default_rng(2), d=model.d)
    assert n == oracle.calls
    assert tv_distance(model, learned) < 1e-9


def test_learner_rare_branch_missed_or_found_tv_below_eps():
    """The sampled rank tests are what Theorem 4.4's eps pays for: a branch of probability
    delta << 1/N is missed (TV = delta·(σ(2C) − 1/2) <= eps); delta >> 1/N is found (TV ≈ 0)."""
    eps, C = 0.1, 5.0
    rare = rare_branch_isan(1e-7, C)
    learned, _, info = learn_from_logit_queries(rare.next_logits, 2, 4, eps, np.random.default_rng(0),
                                                d=2, return_info=True)
    assert info["sizes"] == [1, 1, 1, 1]
    assert tv_distance(rare, learned) == pytest.approx(1e-7 * (expit(2 * C) - 0.5), rel=1e-6)
    common = rare_branch_isan(0.05, C)
    learned, _ = learn_from_logit_queries(common.next_logits, 2, 4, eps, np.random.default_rng(0), d=2)
    assert tv_distance(common, learned) < 1e-9
    # E[TV] <= eps at the worst delta ~ 1/N, over a few learner seeds
    delta = 1.0 / info["N"]
    mid = rare_branch_isan(delta, C)
    tvs = [tv_distance(mid, learn_from_logit_queries(mid.next_logits, 2, 4, eps,
                                                     np.random.default_rng(s), d=2)[0])
           for s in range(10)]
    assert np.mean(tvs) <= eps


# ---------------------------------------------------------------------------
# tv_distance and validation
# ---------------------------------------------------------------------------

def test_tv_distance_properties():
    a = random_isan(2, 3, 4, np.random.default_rng(10))
    b = random_isan(2, 3, 4, np.random.default_rng(11))
    la, lb = a.sequence_logprobs(), b.sequence_logprobs()
    assert tv_distance(a, a) == 0.0
    assert tv_distance(a, b) == pytest.approx(tv_distance(b, a), abs=1e-15)
    assert tv_distance(a, b) == pytest.approx(0.5 * np.abs(np.exp(la) - np.exp(lb)).sum(), abs=1e-15)
    assert tv_distance(la, b) == pytest.approx(tv_distance(a, b), abs=1e-15)
    assert 0 < tv_distance(a, b) < 1


def test_tv_distance_refuses_too_large():
    big = random_isan(2, 2, 25, np.random.default_rng(0))  # 2^25 strings
    with pytest.raises(ValueError, match=r"2\^24.*GiB"):
        tv_distance(big, big)
    with pytest.raises(ValueError, match="T: required"):
        tv_distance(time_varying_to_isan(random_isan(1, 2, 2, np.random.default_rng(0))), np.zeros(4))
    with pytest.raises(ValueError, match="b: expected"):
        tv_distance(np.zeros(4), np.zeros(8))


def test_validation_errors_name_the_argument():
    x0, A, B = np.ones(2), np.zeros((3, 2, 2, 2)), np.zeros((3, 2, 2))
    TimeVaryingISAN(x0, A, B)
    with pytest.raises(ValueError, match=r"A: expected a 4-d array .* got shape \(2, 2, 2\)"):
        TimeVaryingISAN(x0, A[0], B)
    with pytest.raises(ValueError, match=r"A: expected shape .* got \(3, 2, 2, 3\)"):
        TimeVaryingISAN(x0, np.zeros((3, 2, 2, 3)), B)
    with pytest.raises(ValueError, match=r"x0: expected shape .* = \(2,\), got \(3,\)"):
        TimeVaryingISAN(np.ones(3), A, B)
    with pytest.raises(ValueError, match=r"B: expected shape .* = \(3, 2, 2\), got \(3, 3, 2\)"):
        TimeVaryingISAN(x0, A, np.zeros((3, 3, 2)))
    with pytest.raises(ValueError, match="B: all entries must be finite"):
        TimeVaryingISAN(x0, A, np.full((3, 2, 2), np.nan))
    m = TimeVaryingISAN(x0, A, B)
    with pytest.raises(ValueError, match="prefix: length must be <= 2"):
        m.next_logits((0, 1, 0))
    with pytest.raises(ValueError, match="prefix: tokens must lie in"):
        m.next_logits((2,))
    with pytest.raises(ValueError, match="prefix: tokens must be integers"):
        m.next_logits((1.7,))
    assert np.array_equal(m.next_logits((1.0,)), m.next_logits((1,)))
    with pytest.raises(ValueError, match=r"A: expected a 3-d array"):
        ISAN(x0, A, B)
    with pytest.raises(ValueError, match="p: expected 0 < p < 1/2"):
        noisy_parity_isan([1, 0], 0.7)
    with pytest.raises(ValueError, match="y: expected"):
        noisy_parity_isan([2, 0], 0.1)
    with pytest.raises(ValueError, match="y: expected"):
        isan.noisy_parity_logprobs([1, 2], 0.1)
    with pytest.raises(ValueError, match="p: expected 0 < p < 1/2"):
        isan.noisy_parity_logprobs([1, 0], 0.7)
    with pytest.raises(ValueError, match="eps: expected"):
        learn_from_logit_queries(m.next_logits, 2, 3, 1.5, np.random.default_rng(0))
    with pytest.raises(ValueError, match="oracle: expected logits of shape"):
        learn_from_logit_queries(lambda h: np.zeros(3), 2, 3, 0.1, np.random.default_rng(0))
    with pytest.raises(ValueError, match="n: expected an integer"):
        m.sample(-1, np.random.default_rng(0))


# ---------------------------------------------------------------------------
# a language model where an oracle is expected
# ---------------------------------------------------------------------------

def tiny_transformers_model(seed=0):
    """A bare transformers causal LM (vocabulary 6) built offline from a config."""
    import torch
    from transformers import AutoModelForCausalLM, GPTNeoXConfig

    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(GPTNeoXConfig(vocab_size=6, hidden_size=16, num_hidden_layers=2,
                                                          num_attention_heads=2, intermediate_size=32,
                                                          max_position_embeddings=16))


def test_logit_matrix_of_a_language_model_is_its_centred_logits():
    from lib import logits as lg
    from lib.models.causal_lm import CausalLM

    model = tiny_transformers_model()
    H, F = all_histories(6, 1), all_futures(6, 1)
    L = logit_matrix(model, H, F)
    assert np.array_equal(L, lg.extended_logit_matrix(CausalLM(model, "cpu"), H, F))
    assert np.abs(L.reshape(6, 7, 6).sum(-1)).max() < 1e-5        # centred in every block (Def 2.1)
    assert np.array_equal(logit_matrix(model, H, F, alphabet_size=6), L)
    with pytest.raises(ValueError, match="alphabet_size.*6 tokens"):
        logit_matrix(model, H, F, alphabet_size=5)
    assert logit_matrix(model, [], F).shape == (0, 7 * 6)


def test_the_query_algorithms_refuse_a_language_model_with_the_fix():
    model = tiny_transformers_model()
    with pytest.raises(TypeError, match="empty one included.*oracle over prefixes"):
        isan_from_low_rank_oracle(model, 6, 2, 2)
    with pytest.raises(TypeError, match=r"CausalLM\(model\)"):
        learn_from_logit_queries(model, 6, 2, 0.5, np.random.default_rng(0))
    # the oracle the message describes runs: a beginning-of-sequence token before every prefix
    from lib import logits as lg
    from lib.models.causal_lm import CausalLM

    lm = CausalLM(model, "cpu")
    oracle = lambda p: lg.next_token_logprobs(lm, [(0,) + tuple(p)])[0]  # noqa: E731
    m = isan_from_low_rank_oracle(oracle, 6, 2, 7)
    assert m.A.shape == (2, 6, 7, 7)
