"""lib.ntp: data extraction, the entropy bound, the linear model's geometry, the NTP-SVM (cvxpy and
ADMM) with its certificate, the UFM, and bad input. Each check is tested both ways."""
import numpy as np
import pytest

from lib import ntp


@pytest.fixture(scope="module")
def synth():
    return ntp.synthetic_data(V=6, m=12, k=3, n=3000, seed=1)


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


def test_extract_contexts_refuses_streams_without_repeats():
    streams, vocab = ntp.word_stream(["one two three four five six seven"])
    with pytest.raises(ntp.NTPError, match="no context"):
        ntp.extract_contexts(streams, vocab, V=8, T=2)
    with pytest.raises(ntp.NTPError, match="only"):
        ntp.extract_contexts(*ntp.word_stream(["a b a b a b"]), V=3, T=1, m=5)


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
    with pytest.raises(ntp.NTPError, match="empty support"):
        ntp.support_matrix(np.array([[1.0, 0.0], [0.0, 0.0]]))


def test_k_subsets_and_random_supports():
    S = ntp.k_subsets(5, 2)
    assert S.shape == (5, 10) and (S.sum(0) == 2).all() and len({tuple(c) for c in S.T}) == 10
    R = ntp.random_supports(7, 20, 3, seed=0)
    assert (R.sum(0) == 3).all()
    with pytest.raises(ntp.NTPError):
        ntp.k_subsets(4, 4)


# --- entropy ---------------------------------------------------------------------------------

def test_entropy_lower_bound_and_ce_identity(synth):
    H = ntp.entropy_lower_bound(synth.pi, synth.P)
    manual = -sum(synth.pi[j] * sum(p * np.log(p) for p in synth.P[:, j] if p > 0) for j in range(synth.m))
    assert H == pytest.approx(manual, abs=1e-14)
    L = np.random.default_rng(0).standard_normal(synth.P.shape)
    kl = ntp.kl_terms(synth.pi, synth.P, L)
    assert ntp.cross_entropy(synth.pi, synth.P, L) == pytest.approx(H + synth.pi @ kl, abs=1e-12)
    assert (kl > 0).all()                                    # random logits are not the data's distribution
    assert ntp.cross_entropy(synth.pi, synth.P, np.log(np.maximum(synth.P, 1e-300))) == pytest.approx(H, abs=1e-12)


def test_entropy_lower_bound_refuses_an_empty_support():
    with pytest.raises(ntp.NTPError, match="empty"):
        ntp.entropy_lower_bound([0.5, 0.5], np.array([[1.0, 0.0], [0.0, 0.0]]))


# --- linear model ----------------------------------------------------------------------------

def test_overparameterised_embeddings_are_compatible_and_separable(synth):
    rng = np.random.default_rng(0)
    big = rng.standard_normal((synth.m + 3, synth.m))
    assert ntp.linear_geometry(synth.P, big).compatible and ntp.separability(synth.S, big)
    tiny = rng.standard_normal((1, synth.m))                 # d = 1: the failing side
    assert not ntp.separability(synth.S, tiny)
    assert not ntp.linear_geometry(synth.P, tiny).compatible


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
    with pytest.raises(ntp.NTPError, match="step"):
        ntp.gd_linear(synth.pi, synth.P, Hf, steps=10, eta=3.0 / ntp.smoothness(synth.pi, Hf))


# --- NTP-SVM ---------------------------------------------------------------------------------

@pytest.mark.parametrize("V,k", [(5, 1), (5, 2), (6, 3)])
def test_ksubset_closed_form_is_the_centred_support(V, k):
    S = ntp.k_subsets(V, k)
    res = ntp.solve_ntp_svm(S)
    centred = (np.eye(V) - np.ones((V, V)) / V) @ S
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


def test_admm_agrees_with_cvxpy():
    S = ntp.random_supports(8, 20, 3, seed=4)
    a = ntp.solve_ntp_svm(S, "SCS", eps=1e-10, max_iters=100000)
    b = ntp.ntp_svm_first_order(S, tol=1e-9)
    assert abs(a.objective - b.objective) / a.objective < 1e-6
    assert b.gap < 1e-6 and b.violation < 1e-9
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
    W, H = ntp.ufm_factors(L, d=synth.V)
    assert np.allclose(W @ H, L, atol=1e-10)
    assert (W ** 2).sum() + (H ** 2).sum() == pytest.approx(2 * np.linalg.svd(L, compute_uv=False).sum(), rel=1e-10)
    # the other way: the same objective with λ instead of 2λ on the nuclear norm is not the UFM's value
    half = ntp.cross_entropy(synth.pi, synth.P, L) + lam * np.linalg.svd(L, compute_uv=False).sum()
    assert abs(fact["objective"] - half) / relaxed > 1e-4


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


@pytest.mark.parametrize("lam", [0.0, -1.0, float("nan")])
def test_ufm_refuses_non_positive_lambda(synth, lam):
    with pytest.raises(ntp.NTPError, match="λ"):
        ntp.ufm_logits(synth.pi, synth.P, lam)
    with pytest.raises(ntp.NTPError, match="λ"):
        ntp.ufm_path(synth.pi, synth.P, [lam])


def test_geometry_readouts():
    A = np.eye(3)
    assert np.allclose(ntp.cosine_matrix(A), np.eye(3))
    rng = np.random.default_rng(0)
    X = rng.standard_normal((30, 4))
    C = ntp.cosine_matrix(X)
    assert ntp.offdiag_corr(C, C) == pytest.approx(1.0)
    null = ntp.permutation_null(C, C, n_perm=200, seed=0)
    assert np.quantile(null, 0.99) < 0.9                      # relabelled copies are not the same geometry
    assert ntp.effective_rank(np.diag([1.0, 1e-3, 1e-4])) == 1
    assert ntp.effective_rank(np.eye(4)) == 4


def test_transformer_readout_gives_the_model_logits():
    streams, vocab = ntp.word_stream(["a b c . a b d . b c a . a b c . b c d ."] * 3)
    data = ntp.extract_contexts(streams, vocab, V=5, T=2)
    out = ntp.train_transformer(data, hidden=8, layers=1, steps=20, lr=1e-2)
    assert out["readout_error"] < 1e-4                        # WH is the model's last-position logits
    assert np.allclose(out["L"], out["W"] @ out["H"])
    assert out["losses"][-1] < out["losses"][0]
    with pytest.raises(ntp.NTPError, match="contexts"):
        ntp.train_transformer(ntp.synthetic_data(V=4, m=3, k=2), hidden=8, layers=1, steps=1)


def test_check_settings_accepts_the_presets_and_refuses_bad_lists():
    from lib.book.chapters import chapters

    for profile, preset in chapters()["ntp"].presets.items():
        lams = ntp.check_settings(vocab=preset["vocab"], d_scan=preset["d_scan"], small_d=preset["small_d"],
                                  lambdas=preset["lambdas"])
        assert lams == [float(x) for x in preset["lambdas"]], profile
    good = dict(vocab=40, d_scan=[2, 5], small_d=[2, 4], lambdas=[1e-2, 1e-3, 1e-4])
    for change, message in (({"d_scan": []}, "'d_scan' must be a non-empty list of positive integers"),
                            ({"d_scan": [2, 1.5]}, "'d_scan'"), ({"small_d": [0]}, "'small_d'"),
                            ({"small_d": [40]}, "below V = vocab = 40"),
                            ({"lambdas": [1e-2, 1e-3]}, "at least three"),
                            ({"lambdas": [1e-4, 1e-3, 1e-2]}, "strictly decreasing"),
                            ({"lambdas": [1e-2, 1e-3, 5e-4]}, "must contain 100 × its smallest value"),
                            ({"lambdas": ["a", 1, 2]}, "a list of numbers")):
        with pytest.raises(ntp.NTPError, match=message):
            ntp.check_settings(**{**good, **change})
