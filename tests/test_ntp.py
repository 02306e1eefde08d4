"""lib.ntp: data extraction, the entropy bound and the divergences (checked by hand), the linear
model's geometry, the NTP-SVM (cvxpy and ADMM) with its certificate, the UFM, and bad input.
Every bound that must hold for all inputs is tested on many random inputs with hypothesis;
each check is tested both ways."""
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lib import ntp

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SOLVER = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def synth():
    return ntp.synthetic_data(V=6, m=12, k=3, n=3000, seed=1)


def random_problem(seed: int, V: int, m: int, sparse: bool = True):
    """(π, P) with random supports (sizes 1..V−1 when sparse) and random weights."""
    rng = np.random.default_rng(seed)
    P = np.zeros((V, m))
    for j in range(m):
        k = int(rng.integers(1, V)) if sparse else V
        support = rng.choice(V, size=k, replace=False)
        P[support, j] = rng.dirichlet(np.full(k, 0.7))
    pi = rng.dirichlet(np.ones(m))
    return pi, P


def centred_ksubsets(V: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """S of all k-subsets and its centred form (I − 11ᵀ/V)S, the NTP-SVM's closed-form solution."""
    S = ntp.k_subsets(V, k)
    return S, (np.eye(V) - np.ones((V, V)) / V) @ S


# --- data ------------------------------------------------------------------------------------

def test_extract_contexts_counts_windows_inside_documents():
    docs = ["a b c . a b d . a b c .", "a b c"]
    streams, vocab = ntp.word_stream(docs)
    assert vocab[0] in ("a", "b", ".", "c")
    data = ntp.extract_contexts(streams, vocab, V=5, T=2, min_count=2)
    labels = data.labels
    j = next(j for j in range(data.m) if data.decode(j) == "a b")
    follow = {labels[z]: data.P[z, j] for z in np.flatnonzero(data.P[:, j])}
    # "a b" → c three times (twice in the first document, once in the second), d once; d is rare → OTHER
    assert follow == pytest.approx({"c": 0.75, "OTHER": 0.25})
    cross = ntp.extract_contexts([np.array([0, 1]), np.array([2, 0, 1])], ["x", "y", "z"], V=3, T=1)
    assert cross.m == 1 and cross.decode(0) == "x"             # windows never span two documents
    assert data.pi.sum() == pytest.approx(1.0)
    assert np.allclose(data.P.sum(0), 1.0)


def test_extract_contexts_orders_by_frequency_and_weights_by_count():
    streams, vocab = ntp.word_stream(["x y x y x z . x y"])     # x → y three times, x → z once
    data = ntp.extract_contexts(streams, vocab, V=5, T=1)
    assert data.decode(0) == "x"                                 # the most frequent context first
    assert data.counts[:, 0].sum() == 4 and data.n == data.counts.sum()
    assert data.pi[0] == pytest.approx(4 / data.n)
    assert data.P[vocab.index("y"), 0] == pytest.approx(0.75)


def test_extract_contexts_info_and_min_count():
    streams, vocab = ntp.word_stream(["x y x y x z . x y"])         # windows (T = 1): 8
    data = ntp.extract_contexts(streams, vocab, V=5, T=1)
    assert data.info == {"T": 1, "windows": 8, "distinct_contexts": 4, "repeated_contexts": 2, "min_count": 2}
    assert ntp.extract_contexts(streams, vocab, V=5, T=1, min_count=3).m == 1       # only 'x' (4 times)
    with pytest.raises(ntp.NTPError, match="min_count"):
        ntp.extract_contexts(streams, vocab, V=5, T=1, min_count=1)
    with pytest.raises(ntp.NTPError, match="V ≥ 2"):
        ntp.extract_contexts(streams, vocab, V=1, T=1)


def test_word_stream_breaks_frequency_ties_alphabetically():
    assert ntp.word_stream(["b a c b a"])[1] == ["a", "b", "c"]


def test_extract_contexts_refuses_streams_without_repeats():
    streams, vocab = ntp.word_stream(["one two three four five six seven"])
    with pytest.raises(ntp.NTPError, match="no context"):
        ntp.extract_contexts(streams, vocab, V=8, T=2)
    with pytest.raises(ntp.NTPError, match="only"):
        ntp.extract_contexts(*ntp.word_stream(["a b a b a b"]), V=3, T=1, m=5)


def test_contexts_with_other_are_dropped_unless_asked():
    """V = 3 keeps 'a' and 'b'; 'c', 'd' become OTHER. The context 'a c' (one OTHER) repeats but is dropped."""
    streams, vocab = ntp.word_stream(["a b a b a b a c a a c b a b"])
    assert vocab[:2] == ["a", "b"]
    kept = ntp.extract_contexts(streams, vocab, V=3, T=2)
    contexts = sorted(kept.decode(j) for j in range(kept.m))
    assert contexts == ["a b", "b a"]
    everything = ntp.extract_contexts(streams, vocab, V=3, T=2, drop_other_contexts=False)
    assert sorted(everything.decode(j) for j in range(everything.m)) == ["a OTHER", "a b", "b a"]
    ba = [kept.decode(j) for j in range(kept.m)].index("b a")
    assert kept.P[2, ba] == pytest.approx(0.25)                   # OTHER may follow: 'b a' → c once in four


def test_word_stream_lower_cases_and_counts():
    streams, vocab = ntp.word_stream(["The the THE cat.", "the Cat"])
    assert vocab == ["the", "cat", "."] and [len(s) for s in streams] == [5, 2]


def test_consecutive_full_stops_are_one_token():
    streams, vocab = ntp.word_stream(["end ... . next"])
    assert [vocab[t] for t in streams[0]] == ["end", ".", "next"]


def test_distribution_checks_both_ways():
    P = np.array([[0.5, 1.0], [0.5, 0.0]])
    ntp.check_distribution([0.5, 0.5], P)
    with pytest.raises(ntp.NTPError, match="empty support"):
        ntp.check_distribution([0.5, 0.5], np.array([[1.0, 0.0], [0.0, 0.0]]))
    with pytest.raises(ntp.NTPError, match="sum to 1"):
        ntp.check_distribution([0.5, 0.5], np.array([[0.5, 1.0], [0.4, 0.0]]))
    with pytest.raises(ntp.NTPError, match="sum to 1"):
        ntp.check_distribution([0.5, 0.6], P)
    with pytest.raises(ntp.NTPError, match="non-negative"):
        ntp.check_distribution([0.5, 0.5], np.array([[1.5, 1.0], [-0.5, 0.0]]))
    with pytest.raises(ntp.NTPError, match="non-negative"):
        ntp.check_distribution([1.5, -0.5], P)
    with pytest.raises(ntp.NTPError, match="finite"):
        ntp.check_distribution([0.5, 0.5], np.array([[np.nan, 1.0], [0.5, 0.0]]))


def test_ntp_data_properties_by_hand():
    counts = np.array([[3, 0, 1], [1, 2, 0], [0, 0, 0], [0, 2, 0]])
    data = ntp.NTPData(pi=counts.sum(0) / 9, P=counts / counts.sum(0), counts=counts,
                       contexts=np.array([[0, 1], [1, 3], [2, 0]]), labels=["a", "b", "c", "OTHER"])
    assert (data.V, data.m, data.n) == (4, 3, 9)
    assert data.support_sizes.tolist() == [2, 2, 1] and data.S[:, 1].tolist() == [0, 1, 0, 1]
    assert data.decode(1) == "b OTHER" and data.support_labels(0) == ["a", "b"]
    h = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25)) * 4 / 9 - 2 * 0.5 * math.log(0.5) * 4 / 9
    assert data.entropy == pytest.approx(h)
    wide = ntp.synthetic_data(V=60, m=4, k=3, seed=0)
    assert wide.support_sizes.tolist() == [3, 3, 3, 3]
    with pytest.raises(ntp.NTPError, match="empty support"):
        ntp.support_matrix(np.array([[1.0, 0.0], [0.0, 0.0]]))


def test_k_subsets_and_random_supports():
    S = ntp.k_subsets(5, 2)
    assert S.shape == (5, 10) and (S.sum(0) == 2).all() and len({tuple(c) for c in S.T}) == 10
    R = ntp.random_supports(7, 20, 3, seed=0)
    assert (R.sum(0) == 3).all() and set(np.unique(R)) == {0.0, 1.0}
    with pytest.raises(ntp.NTPError, match="support size"):
        ntp.random_supports(4, 2, 5)
    with pytest.raises(ntp.NTPError):
        ntp.k_subsets(4, 4)


def test_synthetic_data_draws_dirichlet_probabilities():
    """The per-context entropies of exact synthetic data average to E[H] of Dirichlet(α1_k) (4 s.e.)."""
    for alpha in (1.0, 0.3):
        data = ntp.synthetic_data(V=9, m=3000, k=6, alpha=alpha, seed=4)
        h = -np.where(data.P > 0, data.P * np.log(np.where(data.P > 0, data.P, 1.0)), 0.0).sum(0)
        mean, sd = ntp.dirichlet_entropy_moments(6, alpha)
        assert abs(h.mean() - mean) < 4 * sd / math.sqrt(data.m)


def test_synthetic_data_exact_and_sampled():
    exact = ntp.synthetic_data(V=8, m=20, k=3, seed=0)
    assert (exact.support_sizes == 3).all() and exact.counts is None
    assert np.allclose(exact.pi, 1 / 20)
    sampled = ntp.synthetic_data(V=8, m=20, k=3, n=4000, seed=0)
    assert sampled.n == 4000 and (sampled.support_sizes <= 3).all()
    assert np.allclose(sampled.pi, sampled.counts.sum(0) / 4000)
    assert np.abs(sampled.P - exact.P).max() < 0.25                 # ~200 samples per context follow p
    with pytest.raises(ntp.NTPError, match="unseen"):
        ntp.synthetic_data(V=8, m=50, k=3, n=10, seed=0)
    assert np.array_equal(sampled.S * exact.S, sampled.S)       # sampling never adds a token to a support


# --- entropy and divergences: by hand ----------------------------------------------------------

def test_kl_terms_is_kl_of_data_to_model_by_hand():
    """KL(p̂ ‖ q) with p̂ = (3/4, 1/4) and q = softmax(0, 0) = (1/2, 1/2): the two directions differ."""
    P = np.array([[0.75], [0.25]])
    kl = ntp.kl_terms([1.0], P, np.zeros((2, 1)))
    assert kl[0] == pytest.approx(0.75 * math.log(1.5) + 0.25 * math.log(0.5), abs=1e-15)
    reverse = 0.5 * math.log(0.5 / 0.75) + 0.5 * math.log(0.5 / 0.25)
    assert abs(kl[0] - reverse) > 0.01


def test_kl_terms_on_a_sparse_support_by_hand():
    """p̂ = (1/2, 1/2, 0), q = (1/4, 1/4, 1/2): KL(p̂ ‖ q) = ln 2 (the reverse is infinite)."""
    P = np.array([[0.5], [0.5], [0.0]])
    L = np.log(np.array([[0.25], [0.25], [0.5]]))
    assert ntp.kl_terms([1.0], P, L)[0] == pytest.approx(math.log(2), abs=1e-15)


def test_cross_entropy_and_entropy_by_hand():
    """π = (1/4, 3/4); p̂_1 = (1, 0), p̂_2 = (1/2, 1/2); logits (ln 3, 0) and (0, 0)."""
    pi, P = np.array([0.25, 0.75]), np.array([[1.0, 0.5], [0.0, 0.5]])
    L = np.array([[math.log(3), 0.0], [0.0, 0.0]])
    per = ntp.cross_entropy(pi, P, L, per_context=True)
    assert per == pytest.approx([-math.log(0.75), math.log(2)], abs=1e-15)
    assert ntp.cross_entropy(pi, P, L) == pytest.approx(-0.25 * math.log(0.75) + 0.75 * math.log(2), abs=1e-15)
    assert ntp.entropy_lower_bound(pi, P) == pytest.approx(0.75 * math.log(2), abs=1e-15)
    assert ntp.softmax(L)[:, 0] == pytest.approx([0.75, 0.25])
    assert ntp.log_softmax(L)[:, 1] == pytest.approx([-math.log(2)] * 2)


@FAST
@given(seed=st.integers(0, 10 ** 6), V=st.integers(2, 7), m=st.integers(1, 6), scale=st.floats(0.01, 50.0))
def test_entropy_is_a_lower_bound_for_every_logit_matrix(seed, V, m, scale):
    pi, P = random_problem(seed, V, m)
    L = scale * np.random.default_rng(seed + 1).standard_normal((V, m))
    H = ntp.entropy_lower_bound(pi, P)
    kl = ntp.kl_terms(pi, P, L)
    assert (kl >= -1e-12).all()
    assert ntp.cross_entropy(pi, P, L) >= H - 1e-12
    assert ntp.cross_entropy(pi, P, L) == pytest.approx(H + pi @ kl, abs=1e-9 * max(1.0, scale))
    assert ntp.cross_entropy(pi, P, np.log(np.maximum(P, 1e-300))) == pytest.approx(H, abs=1e-12)


def test_entropy_lower_bound_and_ce_identity(synth):
    H = ntp.entropy_lower_bound(synth.pi, synth.P)
    manual = -sum(synth.pi[j] * sum(p * np.log(p) for p in synth.P[:, j] if p > 0) for j in range(synth.m))
    assert H == pytest.approx(manual, abs=1e-14)
    assert synth.entropy == pytest.approx(manual, abs=1e-14)


def test_entropy_lower_bound_refuses_an_empty_support():
    with pytest.raises(ntp.NTPError, match="empty"):
        ntp.entropy_lower_bound([0.5, 0.5], np.array([[1.0, 0.0], [0.0, 0.0]]))


def test_dirichlet_entropy_moments_closed_form_and_monte_carlo():
    assert ntp.dirichlet_entropy_moments(2)[0] == pytest.approx(0.5, abs=1e-14)     # ψ(3) − ψ(2) = 1/2
    assert ntp.dirichlet_entropy_moments(6)[0] == pytest.approx(sum(1 / i for i in range(2, 7)), abs=1e-14)
    assert ntp.dirichlet_entropy_moments(1) == (0.0, 0.0)
    rng = np.random.default_rng(0)
    for k, alpha in ((6, 1.0), (3, 0.5), (10, 2.0)):
        p = rng.dirichlet(np.full(k, alpha), size=100_000)
        h = -np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0).sum(1)
        mean, sd = ntp.dirichlet_entropy_moments(k, alpha)
        assert abs(h.mean() - mean) < 4 * h.std() / math.sqrt(h.size)
        assert sd == pytest.approx(h.std(), rel=0.02)
    assert ntp.dirichlet_entropy_moments(6)[1] == pytest.approx(0.1753, abs=5e-4)
    with pytest.raises(ntp.NTPError):
        ntp.dirichlet_entropy_moments(0)
    with pytest.raises(ntp.NTPError):
        ntp.dirichlet_entropy_moments(3, alpha=0.0)


# --- linear model ----------------------------------------------------------------------------

def test_overparameterised_embeddings_are_compatible_and_separable(synth):
    rng = np.random.default_rng(0)
    big = rng.standard_normal((synth.m + 3, synth.m))
    assert ntp.linear_geometry(synth.P, big).compatible and ntp.separability(synth.S, big)
    tiny = rng.standard_normal((1, synth.m))                 # d = 1: the failing side
    assert not ntp.separability(synth.S, tiny)
    assert not ntp.linear_geometry(synth.P, tiny).compatible


def test_compatibility_is_decided_by_a_tight_residual():
    """Two contexts with the same embedding and log-ratios ln 1.5 and ln 1.5 + 4e-5: inconsistent, with a
    relative residual of about 3e-5, far above rounding; equal ratios are compatible."""
    h = np.array([[1.0, 1.0]])
    near = np.array([[0.6, 0.6 + 1e-5], [0.4, 0.4 - 1e-5]])
    geo = ntp.linear_geometry(near, h)
    assert not geo.compatible and 1e-6 < geo.residual < 1e-4
    assert ntp.linear_geometry(np.array([[0.6, 0.6], [0.4, 0.4]]), h).compatible


def test_linear_geometry_against_least_squares():
    """W* is the minimum-norm least-squares solution of A vec(W) = b, and project_F the projector A⁺A;
    an ill-conditioned but consistent system (nearly collinear embeddings) is compatible."""
    pi, P = random_problem(5, 4, 3)
    Hf = np.random.default_rng(5).standard_normal((6, 3))
    A, b = ntp.linear_constraints(P, Hf)
    geo = ntp.linear_geometry(P, Hf)
    assert np.allclose(geo.W_star.reshape(-1), np.linalg.lstsq(A, b, rcond=None)[0], atol=1e-10)
    X = np.random.default_rng(6).standard_normal((4, 6))
    assert np.allclose(geo.project_F(X).reshape(-1), np.linalg.pinv(A) @ A @ X.reshape(-1), atol=1e-10)
    near = np.array([[1.0, 1.0], [0.0, 1e-6]])                        # h_1 and h_2 nearly collinear
    P2 = np.array([[0.5, 0.8], [0.5, 0.2]])                            # different log-ratios: consistent in d = 2
    assert ntp.linear_geometry(P2, near).compatible


def test_linear_w_mm_by_hand():
    """V = 3, d = 1, h = 1, support {0}: min ‖w‖² s.t. w_0 − w_1 ≥ 1, w_0 − w_2 ≥ 1 gives (2/3, −1/3, −1/3)."""
    W = ntp.linear_w_mm(np.array([[1.0], [0.0], [0.0]]), np.array([[1.0]]))
    assert W[:, 0] == pytest.approx([2 / 3, -1 / 3, -1 / 3], abs=1e-6)
    W2 = ntp.linear_w_mm(np.array([[1.0], [1.0], [0.0]]), np.array([[2.0]]))   # support {0, 1}, h = 2
    assert W2[:, 0] == pytest.approx([1 / 6, 1 / 6, -1 / 3], abs=1e-6)


def test_separability_against_an_independent_lp():
    """The LP of lib.ntp against the same feasibility question written with cvxpy here, on random
    supports at widths where the answer goes both ways."""
    import cvxpy as cp

    answers = set()
    for seed in range(12):
        rng = np.random.default_rng(seed)
        V, m, d = 4, 6, 1 + seed % 4
        S = ntp.random_supports(V, m, 1 + seed % 2, seed=seed)
        Hf = rng.standard_normal((d, m))
        W, a = cp.Variable((V, d)), cp.Variable(m)
        L = W @ Hf
        cons = [L[z, j] == a[j] if S[z, j] else L[z, j] <= a[j] - 1 for z in range(V) for j in range(m)]
        prob = cp.Problem(cp.Minimize(0), cons)
        prob.solve(solver="CLARABEL")
        expected = prob.status == cp.OPTIMAL
        assert ntp.separability(S, Hf) == expected, seed
        answers.add(expected)
    assert answers == {True, False}


def test_linear_constraints_by_hand():
    """One context, support {0, 2} with p̂ = (1/4, 0, 3/4), h = (1, 2): one row (e_2 − e_0)hᵀ, b = ln 3."""
    P = np.array([[0.25], [0.0], [0.75]])
    A, b = ntp.linear_constraints(P, np.array([[1.0], [2.0]]))
    assert A.tolist() == [[-1.0, -2.0, 0.0, 0.0, 1.0, 2.0]] and b == pytest.approx([math.log(3)])
    geo = ntp.linear_geometry(P, np.array([[1.0], [2.0]]))
    W = geo.W_star
    assert (W[2] - W[0]) @ np.array([1.0, 2.0]) == pytest.approx(math.log(3))


@FAST
@given(seed=st.integers(0, 10 ** 6), V=st.integers(2, 5), m=st.integers(1, 5), d=st.integers(1, 6))
def test_smoothness_bounds_the_curvature_in_every_direction(seed, V, m, d):
    """d²/dt² CE((W + tD)H) = Σ_j π_j (Dh_j)ᵀ(diag q_j − q_j q_jᵀ)(Dh_j) ≤ L_s ‖D‖_F² (computed here)."""
    rng = np.random.default_rng(seed)
    pi, P = random_problem(seed, V, m)
    Hf = rng.standard_normal((d, m)) * rng.uniform(0.1, 5)
    W, D = rng.standard_normal((V, d)), rng.standard_normal((V, d))
    Q = ntp.softmax(W @ Hf)
    G = D @ Hf
    curvature = sum(pi[j] * G[:, j] @ (np.diag(Q[:, j]) - np.outer(Q[:, j], Q[:, j])) @ G[:, j] for j in range(m))
    assert curvature <= ntp.smoothness(pi, Hf) * (D ** 2).sum() * (1 + 1e-9) + 1e-12


def test_smoothness_is_half_the_top_eigenvalue_by_hand():
    Hf = np.array([[2.0, 0.0], [0.0, 1.0]])
    assert ntp.smoothness([0.5, 0.5], Hf) == pytest.approx(0.5 * 2.0)      # ½ λ_max(diag(2, 0.5))


def test_gd_checkpoints_are_log_spaced_and_recomputable():
    pi, P = random_problem(9, 4, 3)
    Hf = np.random.default_rng(9).standard_normal((5, 3))
    geo = ntp.linear_geometry(P, Hf)
    out = ntp.gd_linear(pi, P, Hf, steps=1000, n_checkpoints=4, geometry=geo)
    assert out["k"].tolist() == [1, 10, 100, 1000]
    W = out["W"]
    assert out["excess"][-1] == pytest.approx(ntp.cross_entropy(pi, P, W @ Hf) - ntp.entropy_lower_bound(pi, P))
    assert out["norm_perp"][-1] == pytest.approx(np.linalg.norm(W - geo.project_F(W)))
    assert out["eta"] == pytest.approx(1 / ntp.smoothness(pi, Hf)) and out["smoothness"] == ntp.smoothness(pi, Hf)


def test_gd_first_step_by_hand():
    """From W_0 = 0 the softmax is uniform: W_1 = −η (1/V − P) diag(π) Hfᵀ."""
    pi, P = random_problem(3, 4, 3)
    Hf = np.random.default_rng(3).standard_normal((5, 3))
    eta = 0.5 / ntp.smoothness(pi, Hf)
    out = ntp.gd_linear(pi, P, Hf, steps=1, eta=eta, n_checkpoints=1)
    assert np.allclose(out["W"], -eta * (np.full_like(P, 0.25) - P) @ (Hf * pi).T, atol=1e-14)


def test_gd_drives_the_geometry_of_the_theorem(synth):
    Hf = np.random.default_rng(2).standard_normal((synth.m + 3, synth.m))
    geo = ntp.linear_geometry(synth.P, Hf)
    W_mm = ntp.linear_w_mm(synth.S, Hf)
    assert np.linalg.norm(geo.project_F(W_mm)) <= 1e-6 * np.linalg.norm(W_mm)
    gd = ntp.gd_linear(synth.pi, synth.P, Hf, steps=20000, geometry=geo, W_mm=W_mm, n_checkpoints=20)
    assert gd["excess"][-1] < 0.05 * gd["excess"][0]
    assert gd["dist_F"][-1] < 0.1 * gd["dist_F"][0]
    assert gd["norm_perp"][-1] > gd["norm_perp"][len(gd["k"]) // 2]
    assert gd["cos_mm"][-1] > gd["cos_mm"][0]
    W = gd["W"]                                                # the last checkpoint is the last iteration
    Wp = W - geo.project_F(W)
    cos = lambda A, B: (A * B).sum() / (np.linalg.norm(A) * np.linalg.norm(B))                 # noqa: E731
    assert gd["cos_mm"][-1] == pytest.approx(cos(W, W_mm)) and gd["cos_perp_mm"][-1] == pytest.approx(cos(Wp, W_mm))
    assert gd["norm_perp"][-1] == pytest.approx(np.linalg.norm(Wp))
    assert gd["dist_F"][-1] == pytest.approx(np.linalg.norm(geo.project_F(W) - geo.W_star))
    bound = ntp.gd_excess_bound(synth.pi, synth.P, Hf, geo.W_star, W_mm, gd["eta"], gd["k"])
    assert (gd["excess"] <= bound).all()
    assert (gd["excess"] / bound).max() > 0.05                  # the bound is not vacuous here
    with pytest.raises(ntp.NTPError, match="step"):
        ntp.gd_linear(synth.pi, synth.P, Hf, steps=10, eta=3.0 / ntp.smoothness(synth.pi, Hf))


@FAST
@given(seed=st.integers(0, 10 ** 6), V=st.integers(2, 5), m=st.integers(1, 5), d=st.integers(1, 7),
       eta_share=st.floats(0.05, 1.0), comparison_scale=st.floats(0.0, 3.0))
def test_gd_excess_bound_holds_for_every_comparison_point(seed, V, m, d, eta_share, comparison_scale):
    """CE(W_k) − H ≤ B_k for any W*, W^mm given (the bound's proof uses no property of them)."""
    rng = np.random.default_rng(seed)
    pi, P = random_problem(seed, V, m)
    Hf = rng.standard_normal((d, m))
    eta = eta_share / ntp.smoothness(pi, Hf)
    gd = ntp.gd_linear(pi, P, Hf, steps=200, eta=eta, n_checkpoints=12)
    W_star = comparison_scale * rng.standard_normal((V, d))
    W_dir = rng.standard_normal((V, d))
    bound = ntp.gd_excess_bound(pi, P, Hf, W_star, W_dir, eta, gd["k"])
    assert (gd["excess"] <= bound * (1 + 1e-9) + 1e-12).all()


def test_gd_excess_bound_is_the_minimum_over_the_ray():
    """B_k against a continuous minimisation over ρ of the same expression, written out here."""
    from scipy.optimize import minimize_scalar

    pi, P = random_problem(7, 4, 3)
    Hf = np.random.default_rng(7).standard_normal((6, 3))
    W0, W1 = np.random.default_rng(8).standard_normal((2, 4, 6))
    eta = 1 / ntp.smoothness(pi, Hf)
    H = ntp.entropy_lower_bound(pi, P)
    for k in (1, 10, 1000):
        def value(rho):
            W = W0 + rho * W1
            return ntp.cross_entropy(pi, P, W @ Hf) - H + (W ** 2).sum() / (2 * eta * k)
        best = min(minimize_scalar(value, bounds=(0, 50), method="bounded").fun, value(0.0))
        B = ntp.gd_excess_bound(pi, P, Hf, W0, W1, eta, [k])[0]
        assert best - 1e-12 <= B <= best * (1 + 1e-3) + 1e-12
    with pytest.raises(ntp.NTPError, match="1/L_s"):
        ntp.gd_excess_bound(pi, P, Hf, W0, W1, 1.5 * eta, [1])


def test_ray_excess_by_hand():
    """One context, p̂ = (1, 0); logits (0, 0) + ρ(1, 0): KL = ln(1 + e^{−ρ})."""
    out = ntp.ray_excess([1.0], np.array([[1.0], [0.0]]), np.zeros((2, 1)), np.array([[1.0], [0.0]]),
                         rhos=[0.0, 1.0, 5.0])
    assert out == pytest.approx(np.log1p(np.exp(-np.array([0.0, 1.0, 5.0]))), abs=1e-14)


# --- NTP-SVM ---------------------------------------------------------------------------------

@pytest.mark.parametrize("V,k", [(5, 1), (5, 2), (6, 3)])
def test_ksubset_closed_form_is_the_centred_support(V, k):
    S, centred = centred_ksubsets(V, k)
    res = ntp.solve_ntp_svm(S)
    slide = (np.eye(V) - np.ones((V, V))) @ S
    assert np.abs(res.L - centred).max() < 1e-6
    assert np.abs(res.L - slide).max() > 0.5                 # the slide's form is not the solution
    assert res.objective == pytest.approx(np.linalg.svd(centred, compute_uv=False).sum(), rel=1e-7)
    assert res.gap < 1e-6 and res.violation < 1e-7


def test_public_ntp_svm_returns_feasible_margin_one_logits():
    S = ntp.random_supports(6, 15, 2, seed=3)
    L = ntp.ntp_svm(S)
    assert L.shape == (6, 15)
    assert ntp.svm_violation(S, L) < 1e-7
    assert ntp.svm_violation(S, 0.5 * L) > 0.4                # half the margin: the check fails


def test_svm_violation_by_hand():
    full = np.array([[1.0, 1.0], [1.0, 0.0]])                      # a full support has no margin to keep
    assert ntp.svm_violation(full, np.array([[0.0, 1.0], [0.0, 0.0]])) == 0.0
    S = np.array([[1.0], [1.0], [0.0]])
    assert ntp.svm_violation(S, np.array([[1.0], [1.0], [0.0]])) == 0.0
    assert ntp.svm_violation(S, np.array([[1.0], [0.8], [0.0]])) == pytest.approx(0.2)   # spread 0.2, margin 0.8
    assert ntp.svm_violation(S, np.array([[1.0], [1.0], [0.7]])) == pytest.approx(0.7)   # margin 0.3


def test_dual_bound_certifies_and_detects_suboptimal_points():
    S = ntp.k_subsets(5, 2)
    res = ntp.solve_ntp_svm(S)
    assert res.gap < 1e-6
    slide = (np.eye(5) - np.ones((5, 5))) @ S                # feasible but not optimal
    nuc = np.linalg.svd(slide, compute_uv=False).sum()
    Y = -res.L / np.linalg.norm(res.L, 2)                     # any candidate gives a valid lower bound
    bound = max(ntp.svm_dual_bound(S, Y), ntp.svm_dual_bound(S, -Y))
    assert bound <= res.objective + 1e-9
    assert (nuc - bound) / nuc > 0.1                          # the certificate exposes the gap of a bad point


def test_dual_bound_by_hand():
    """V = 2, one context with support {0}: the dual is max Y_1 with Y_0 = −Y_1, ‖Y‖_op ≤ 1, Y_1 ≥ 0;
    its optimum 1/√2 equals the primal's ‖(1/2, −1/2)‖_* = 1/√2."""
    S = np.array([[1.0], [0.0]])
    assert ntp.svm_dual_bound(S, np.array([[-1.0], [1.0]])) == pytest.approx(1 / math.sqrt(2))
    assert ntp.svm_dual_bound(S, np.array([[5.0], [1.0]])) == pytest.approx(1 / math.sqrt(2))   # re-centred
    assert ntp.svm_dual_bound(S, np.array([[0.0], [-1.0]])) == 0.0                          # clipped at 0
    assert ntp.svm_dual_bound(S, np.array([[0.0], [0.1]])) == pytest.approx(0.1)            # inside the ball


def test_certified_gap_by_hand():
    """S = (1, 0)ᵀ: the candidate (−1, 1) certifies the bound 1/√2; the gap is relative to max(1, primal)."""
    S = np.array([[1.0], [0.0]])
    good, bad = np.array([[-1.0], [1.0]]), np.array([[1.0], [-1.0]])
    assert ntp.certified_gap(S, 0.9, [bad, good]) == pytest.approx(0.9 - 1 / math.sqrt(2))
    assert ntp.certified_gap(S, 20.0, [good]) == pytest.approx((20 - 1 / math.sqrt(2)) / 20)
    assert ntp.certified_gap(S, 0.5, [good]) == 0.0                # below the bound: clipped at 0
    assert ntp.certified_gap(S, 0.9, [bad]) == pytest.approx(0.9)  # a useless candidate certifies nothing


@FAST
@given(V=st.integers(3, 6), k_share=st.floats(0.0, 1.0), seed=st.integers(0, 10 ** 6),
       scale=st.floats(1e-3, 1e3), near=st.floats(0.0, 2.0))
def test_dual_bound_never_exceeds_the_optimum(V, k_share, seed, scale, near):
    """Whatever Y, svm_dual_bound(S, Y) ≤ min ‖L‖_* (weak duality), on the all-k-subsets supports
    whose optimum ‖(I − 11ᵀ/V)S‖_* is known in closed form; Y drawn near ± the solution and at random."""
    k = 1 + int(k_share * (V - 2))
    S, centred = centred_ksubsets(V, k)
    optimum = np.linalg.svd(centred, compute_uv=False).sum()
    rng = np.random.default_rng(seed)
    for base in (-centred / np.linalg.norm(centred, 2), centred / np.linalg.norm(centred, 2), 0 * centred):
        Y = scale * (base + near * rng.standard_normal(S.shape))
        assert ntp.svm_dual_bound(S, Y) <= optimum * (1 + 1e-12) + 1e-12


@FAST
@given(seed=st.integers(0, 10 ** 6), V=st.integers(2, 6), m=st.integers(1, 6), scale=st.floats(0.01, 100.0))
def test_dual_bound_is_below_every_feasible_point(seed, V, m, scale):
    """Weak duality on random supports: svm_dual_bound(S, Y) ≤ ‖L‖_* for every feasible L (here the
    projection of a random matrix onto the constraints), whatever Y."""
    rng = np.random.default_rng(seed)
    S = (rng.random((V, m)) < 0.5).astype(float)
    S[rng.integers(V, size=m), np.arange(m)] = 1.0
    L = ntp.project_svm_constraints(S, scale * rng.standard_normal((V, m)))
    assert ntp.svm_violation(S, L) <= 1e-9
    for _ in range(3):
        Y = scale * rng.standard_normal((V, m))
        assert ntp.svm_dual_bound(S, Y) <= np.linalg.svd(L, compute_uv=False).sum() * (1 + 1e-12) + 1e-12


@FAST
@given(seed=st.integers(0, 10 ** 6), V=st.integers(2, 6), m=st.integers(1, 5), scale=st.floats(0.01, 100.0))
def test_projection_onto_the_constraints_is_the_euclidean_projection(seed, V, m, scale):
    """P(y) is feasible, P(P(y)) = P(y), and ⟨y − P(y), c − P(y)⟩ ≤ 0 for every feasible c."""
    rng = np.random.default_rng(seed)
    S = (rng.random((V, m)) < 0.5).astype(float)
    S[rng.integers(V, size=m), np.arange(m)] = 1.0
    Y = scale * rng.standard_normal((V, m))
    PY = ntp.project_svm_constraints(S, Y)
    assert ntp.svm_violation(S, PY) <= 1e-9 * max(1.0, scale)
    assert np.allclose(ntp.project_svm_constraints(S, PY), PY, atol=1e-9 * max(1.0, scale))
    for _ in range(5):
        c = ntp.project_svm_constraints(S, scale * rng.standard_normal((V, m)))
        assert ((Y - PY) * (c - PY)).sum() <= 1e-7 * max(1.0, scale) ** 2


def test_projection_by_hand():
    """Support {0, 1}, y = (0, 2, 0): a = 1 keeps the off entry at 0 = a − 1, so P(y) = (1, 1, 0)."""
    S = np.array([[1.0], [1.0], [0.0]])
    assert ntp.project_svm_constraints(S, np.array([[0.0], [2.0], [0.0]]))[:, 0] == pytest.approx([1, 1, 0])
    # y = (0, 0, 0): the off entry is active: a = (0 + 0 + 1)/3, off = a − 1
    assert ntp.project_svm_constraints(S, np.zeros((3, 1)))[:, 0] == pytest.approx([1 / 3, 1 / 3, -2 / 3])
    with pytest.raises(ntp.NTPError, match="shape"):
        ntp.project_svm_constraints(S, np.zeros((2, 1)))


def test_admm_agrees_with_cvxpy():
    S = ntp.random_supports(8, 20, 3, seed=4)
    a = ntp.solve_ntp_svm(S, "SCS", eps=1e-10, max_iters=100000)
    b = ntp.ntp_svm_first_order(S, tol=1e-9)
    assert abs(a.objective - b.objective) / a.objective < 1e-6
    assert b.gap <= 1e-9 and b.violation < 1e-9                    # the certified gap asked for
    for tol in (1e-2, 1e-3, 1e-4, 1e-5):
        assert ntp.ntp_svm_first_order(S, tol=tol).gap <= tol
    with pytest.raises(ntp.SolverError, match="did not reach"):
        ntp.ntp_svm_first_order(S, iters=5, tol=1e-12)


def test_solver_status_other_than_optimal_raises():
    S = ntp.random_supports(6, 10, 2, seed=0)
    with pytest.raises(ntp.SolverError, match="not 'optimal'"):
        ntp.solve_ntp_svm(S, "SCS", max_iters=2)               # stopped early: status is not optimal


def test_full_supports_have_nothing_to_separate():
    with pytest.raises(ntp.NTPError, match="nothing to separate"):
        ntp.solve_ntp_svm(np.ones((3, 4)))
    with pytest.raises(ntp.NTPError, match="empty support"):
        ntp.ntp_svm(np.zeros((3, 2)))


# --- UFM -------------------------------------------------------------------------------------

def test_ufm_relaxation_is_tight_and_factors_reproduce_l(synth):
    lam = 1e-2
    L, info = ntp.ufm_logits(synth.pi, synth.P, lam, "SCS", eps=1e-10, max_iters=200000)
    fact = ntp.ufm_path(synth.pi, synth.P, [lam], max_iter=2000)[0]
    relaxed = ntp.ufm_objective(synth.pi, synth.P, L, lam)
    assert abs(fact["objective"] - relaxed) / relaxed < 1e-6
    # the other way: the same objective with λ instead of 2λ on the nuclear norm is not the UFM's value
    half = ntp.cross_entropy(synth.pi, synth.P, L) + lam * np.linalg.svd(L, compute_uv=False).sum()
    assert abs(fact["objective"] - half) / relaxed > 1e-4


def test_ufm_train_minimises_the_weighted_loss_with_the_ridge():
    """The first loss of the curve is CE(W_0 H_0) + λ(‖W_0‖² + ‖H_0‖²) at the initialisation (π-weighted)."""
    pi, P = random_problem(12, 4, 5)
    W0, H0, none = ntp.ufm_train(pi, P, 3, lam=0.1, steps=0, seed=4)
    assert none.size == 0
    _, _, losses = ntp.ufm_train(pi, P, 3, lam=0.1, steps=5, lr=1e-2, seed=4)
    assert losses[0] == pytest.approx(ntp.cross_entropy(pi, P, W0 @ H0) + 0.1 * ((W0 ** 2).sum() + (H0 ** 2).sum()))
    assert losses[-1] < losses[0]


def test_ufm_path_reports_its_own_objective_and_gradient():
    pi, P = random_problem(13, 3, 4)
    out = ntp.ufm_path(pi, P, [1e-1, 1e-2], max_iter=500)
    for r in out:
        assert np.allclose(r["L"], r["W"] @ r["H"])
        expected = ntp.cross_entropy(pi, P, r["L"]) + r["lam"] * ((r["W"] ** 2).sum() + (r["H"] ** 2).sum())
        assert r["objective"] == pytest.approx(expected, rel=1e-10)
        assert r["grad_norm"] < 1e-5
        L, info = ntp.ufm_logits(pi, P, r["lam"])
        assert r["objective"] == pytest.approx(ntp.ufm_objective(pi, P, L, r["lam"]), rel=1e-6)
        assert info["objective"] == pytest.approx(ntp.ufm_objective(pi, P, L, r["lam"]), rel=1e-6)
        assert np.abs(L.sum(0)).max() < 1e-9                      # returned centred


@FAST
@given(seed=st.integers(0, 10 ** 6), V=st.integers(2, 6), m=st.integers(1, 6), d=st.integers(1, 7))
def test_factors_reproduce_l_with_twice_its_nuclear_norm(seed, V, m, d):
    rng = np.random.default_rng(seed)
    L = rng.standard_normal((V, min(d, V))) @ rng.standard_normal((min(d, V), m))
    W, H = ntp.ufm_factors(L, d=max(d, V))
    assert np.allclose(W @ H, L, atol=1e-9)
    assert (W ** 2).sum() + (H ** 2).sum() == pytest.approx(2 * np.linalg.svd(L, compute_uv=False).sum(), rel=1e-9)
    assert np.abs(W[:, np.linalg.matrix_rank(L):]).max(initial=0.0) == 0    # padded with zeros up to d
    with pytest.raises(ntp.NTPError, match="below rank"):
        ntp.ufm_factors(np.eye(3), d=2)


@FAST
@given(seed=st.integers(0, 10 ** 6), V=st.integers(2, 5), m=st.integers(1, 5), d=st.integers(1, 6),
       lam=st.floats(1e-4, 10.0))
def test_factorised_objective_is_never_below_the_relaxation(seed, V, m, d, lam):
    """CE(WH) + λ(‖W‖² + ‖H‖²) ≥ CE(WH) + 2λ‖WH‖_* for every W, H (‖W‖² + ‖H‖² ≥ 2‖WH‖_*)."""
    rng = np.random.default_rng(seed)
    pi, P = random_problem(seed, V, m)
    W, H = rng.standard_normal((V, d)), rng.standard_normal((d, m))
    factorised = ntp.cross_entropy(pi, P, W @ H) + lam * ((W ** 2).sum() + (H ** 2).sum())
    assert factorised >= ntp.ufm_objective(pi, P, W @ H, lam) - 1e-9


@SOLVER
@given(seed=st.integers(0, 10 ** 6), V=st.integers(2, 4), m=st.integers(1, 4), log_lam=st.floats(-3.0, -0.5))
def test_path_excess_bound_holds_at_the_optimum(seed, V, m, log_lam):
    """CE(L_λ) − H ≤ B(λ) for the convex solution L_λ, with L* and a random direction in place of L^mm
    (the bound holds for any ray; only L_λ must be optimal)."""
    lam = 10.0 ** log_lam
    pi, P = random_problem(seed, V, m)
    L, _ = ntp.ufm_logits(pi, P, lam)
    excess = ntp.cross_entropy(pi, P, L) - ntp.entropy_lower_bound(pi, P)
    direction = np.random.default_rng(seed).standard_normal((V, m))
    for ray in (direction, ntp.project_svm_constraints(ntp.support_matrix(P), direction)):
        assert excess <= ntp.path_excess_bound(pi, P, ntp.l_star(P), ray, [lam])[0] + 1e-7


@FAST
@given(V=st.integers(3, 6), k_share=st.floats(0.0, 1.0), seed=st.integers(0, 10 ** 6), log_lam=st.floats(-8.0, -1.0))
def test_path_excess_bound_is_below_its_closed_form(V, k_share, seed, log_lam):
    """With the exact L^mm (all k-subsets: the centred S) the ray bound is at most
    2λ(‖L*‖_* + ‖L^mm‖_*(1 + ln(c/(2λ‖L^mm‖_*)))), c = Σ_j π_j (V − k) e^{mean log p̂_j}."""
    k = 1 + int(k_share * (V - 2))
    S, L_mm = centred_ksubsets(V, k)
    rng = np.random.default_rng(seed)
    P = np.zeros(S.shape)
    for j in range(S.shape[1]):
        P[S[:, j] > 0, j] = rng.dirichlet(np.ones(k))
    pi = rng.dirichlet(np.ones(S.shape[1]))
    lam = 10.0 ** log_lam
    Ls = ntp.l_star(P)
    nuc = lambda M: np.linalg.svd(M, compute_uv=False).sum()                                     # noqa: E731
    c = float(pi @ ((V - k) * np.exp((np.log(np.where(S > 0, P, 1.0)) * S).sum(0) / k)))
    x = 2 * lam * nuc(L_mm)
    closed = 2 * lam * nuc(Ls) + x * (1 + math.log(c / x)) if c > x else 2 * lam * nuc(Ls) + c
    assert ntp.path_excess_bound(pi, P, Ls, L_mm, [lam])[0] <= closed * (1 + 1e-3) + 1e-12


def test_path_excess_bound_is_the_minimum_over_the_ray():
    """B(λ) against a continuous minimisation over ρ of the same expression, written out here."""
    from scipy.optimize import minimize_scalar

    pi, P = random_problem(11, 4, 5)
    base, direction = np.random.default_rng(11).standard_normal((2, 4, 5))
    H = ntp.entropy_lower_bound(pi, P)
    for lam in (1e-1, 1e-3, 1e-5):
        def value(rho):
            L = base + rho * direction
            return ntp.cross_entropy(pi, P, L) - H + 2 * lam * np.linalg.svd(L, compute_uv=False).sum()
        best = min(minimize_scalar(value, bounds=(0, 50), method="bounded").fun, value(0.0))
        B = ntp.path_excess_bound(pi, P, base, direction, [lam])[0]
        assert best - 1e-12 <= B <= best * (1 + 1e-3) + 1e-12


def test_path_excess_bound_refuses_bad_lambda(synth):
    with pytest.raises(ntp.NTPError, match="λ"):
        ntp.path_excess_bound(synth.pi, synth.P, ntp.l_star(synth.P), ntp.l_star(synth.P), [0.0])


def test_l_star_and_projection(synth):
    Ls = ntp.l_star(synth.P)
    S = synth.S
    assert np.allclose(ntp.project_F(S, Ls), Ls)
    for j in range(synth.m):
        sup = np.flatnonzero(S[:, j])
        z, z2 = sup[0], sup[1]
        assert Ls[z, j] - Ls[z2, j] == pytest.approx(np.log(synth.P[z, j] / synth.P[z2, j]))
    L_mm = ntp.ntp_svm(S)
    assert np.abs(ntp.project_F(S, L_mm)).max() < 1e-6       # L^mm ⟂ F
    assert np.abs(ntp.project_F(S, np.ones_like(L_mm))).max() == 0.0


def test_project_f_by_hand():
    S = np.array([[1.0], [1.0], [0.0]])
    assert ntp.project_F(S, np.array([[3.0], [1.0], [7.0]]))[:, 0] == pytest.approx([1.0, -1.0, 0.0])


@pytest.mark.parametrize("lam", [0.0, -1.0, float("nan")])
def test_ufm_refuses_non_positive_lambda(synth, lam):
    with pytest.raises(ntp.NTPError, match="λ"):
        ntp.ufm_logits(synth.pi, synth.P, lam)
    with pytest.raises(ntp.NTPError, match="λ"):
        ntp.ufm_path(synth.pi, synth.P, [lam])


def test_check_settings_accepts_the_presets_and_refuses_bad_lists():
    from lib.book.chapters import chapters

    for profile, preset in chapters()["ntp"].presets.items():
        lams = ntp.check_settings(vocab=preset["vocab"], d_scan=preset["d_scan"], small_d=preset["small_d"],
                                  lambdas=preset["lambdas"])
        assert lams == [float(x) for x in preset["lambdas"]], profile
    good = dict(vocab=40, d_scan=[2, 5], small_d=[2, 4], lambdas=[1e-2, 1e-3, 1e-4])
    for change, message in (({"d_scan": []}, "'d_scan' must be a non-empty list of positive integers"),
                            ({"d_scan": [2, 1.5]}, "'d_scan'"), ({"d_scan": [True, 2]}, "'d_scan'"),
                            ({"small_d": [0]}, "'small_d'"), ({"small_d": []}, "'small_d'"),
                            ({"small_d": [40]}, "below V = vocab = 40"),
                            ({"lambdas": [1e-2, 1e-3]}, "at least three"),
                            ({"lambdas": [1e-4, 1e-3, 1e-2]}, "strictly decreasing"),
                            ({"lambdas": [1e-2, 1e-3, 5e-4]}, "must contain 100 × its smallest value"),
                            ({"lambdas": [1e-2, 1e-5, 1e-6]}, "must contain 100 × its smallest value"),
                            ({"lambdas": ["a", 1, 2]}, "a list of numbers")):
        with pytest.raises(ntp.NTPError, match=message):
            ntp.check_settings(**{**good, **change})


# --- geometry read-outs (moved from lib.ntp_experiments) ------------------------------------------

def test_cosine_matrix_and_offdiag_corr_by_hand():
    X = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0]])
    C = ntp.cosine_matrix(X)
    assert C[0, 1] == pytest.approx(1 / math.sqrt(2)) and C[2, 2] == 0.0
    assert ntp.cosine_matrix(X, center=True)[0, 1] == pytest.approx(
        ntp.cosine_matrix(X - X.mean(0))[0, 1])
    A = np.array([[0, 1, 2], [1, 0, 3], [2, 3, 0]], float)
    B = np.array([[0, 2, 4], [2, 0, 7], [4, 7, 0]], float)
    assert ntp.offdiag_corr(A, B) == pytest.approx(np.corrcoef([1, 2, 3], [2, 4, 7])[0, 1])
    assert math.isnan(ntp.offdiag_corr(A, np.ones((3, 3))))


def test_permutation_null_relabels_b():
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((2, 7, 7))
    A, B = A + A.T, B + B.T
    null = ntp.permutation_null(A, B, n_perm=20, seed=5)
    replay = np.random.default_rng(5)
    for value in null:
        p = replay.permutation(7)
        assert value == pytest.approx(ntp.offdiag_corr(A, B[np.ix_(p, p)]), abs=1e-12)
