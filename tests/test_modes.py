"""Modes (lib/modes.py) against the identities of Chen & Murfet §4–5 on exact languages:
Lemma 4.10, Lemma 4.14, eq. (41), Lemmas 5.2/5.6, the effective distribution (Def 4.16) and
the naive truncation (Remark 4.18), the sparse paths, and input validation."""
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from lib import languages as L
from lib.modes import Modes, truncated_family


@pytest.fixture(scope="module")
def markov():
    """Order-2 chain on 3 tokens, (k, l) = (2, 1): a full-support 9 × 3 joint."""
    return Modes.from_joint(L.random_markov_chain(3, 2, rng=0).joint(2, 1))


@pytest.fixture(scope="module")
def hmm():
    """HMM, (k, l) = (2, 2): 16 × 16, rank limited by the 3 hidden states."""
    return Modes.from_joint(L.random_hmm(4, 3, rng=1).joint(2, 2))


@pytest.fixture(scope="module")
def planted():
    lang = L.planted_language(2, 1, background_size=3, rng=5)
    return lang, Modes.from_joint(lang.joint(2, 1), zero_rows="drop")


def all_modes(markov, hmm, planted):
    return [markov, hmm, planted[1]]


def test_svd_reconstructs_and_is_orthonormal(markov, hmm, planted):
    for m in all_modes(markov, hmm, planted):
        M = m.matrix
        assert np.abs((m.u * m.sigma) @ m.v_tilde.T - M).max() < 1e-14
        assert np.all(np.diff(m.sigma) <= 0)
        r = m.n_modes
        assert np.abs(m.u.T @ m.u - np.eye(r)).max() < 1e-13
        gram_V = np.array([[m.inner_V(m.v[:, a], m.v[:, b]) for b in range(r)] for a in range(r)])
        assert np.abs(gram_V - np.eye(r)).max() < 1e-12          # v_α orthonormal in V_k (Def 4.2)
        a = np.abs(m.u)                                           # sign convention
        j = np.argmax(a >= (1 - 1e-9) * a.max(0), axis=0)
        assert np.all(m.u[j, np.arange(r)] > 0)


def test_lemma_4_10_propensities_sum_to_conditional(markov, hmm, planted):
    for m in all_modes(markov, hmm, planted):
        rho = m.propensity()
        assert rho.shape == (m.n_modes, m.shape[0], m.shape[1])
        assert np.abs(rho.sum(0) - m.conditional).max() < 1e-12
        # subsets of modes / histories are slices of the full array
        assert np.array_equal(m.propensity(modes=[1, 0], histories=[2]), rho[[1, 0]][:, [2]])
    assert (hmm.propensity() < -1e-3).any()                          # propensities can be negative


def test_lemma_4_14_mode_basis_orthonormal_and_eq_41(markov, hmm):
    for m in (markov, hmm):
        nx, ny = m.shape
        basis = np.stack([m.mode_basis(a, b) for a in range(nx) for b in range(ny)])  # (nx·ny, nx, ny)
        flat = basis.reshape(len(basis), -1) * np.sqrt(np.repeat(m.q_x, ny))[None, :]
        assert np.abs(flat @ flat.T - np.eye(nx * ny)).max() < 1e-10   # ⟨e_αβ, e_α'β'⟩_H = δδ
        coeff = np.array([m.inner_H(m.conditional, e) for e in basis]).reshape(nx, ny)
        sigma = np.zeros((nx, ny))
        np.fill_diagonal(sigma, np.r_[m.sigma, np.zeros(max(0, min(nx, ny) - m.n_modes))])
        assert np.abs(coeff - sigma).max() < 1e-12                    # eq. (41)
        recon = sum(m.sigma[a] * m.mode_basis(a, a) for a in range(m.n_modes))
        assert np.abs(recon - m.conditional).max() < 1e-12              # q = Σ σ_α e_αα


@pytest.mark.parametrize("k,l", [(1, 1), (2, 1), (1, 2), (2, 2)])
def test_lemmas_5_2_and_5_6_planted_bigrams(k, l):
    lang = L.planted_language(k, l, background_size=3, rng=k + 10 * l)
    m = Modes.from_joint(lang.joint(k, l), zero_rows="drop")
    M = m.matrix
    for pm in lang.predicted_modes():
        rows = np.searchsorted(m.rows, pm.rows)                        # kept-row indices of S
        assert np.array_equal(m.rows[rows], pm.rows)
        vt = np.zeros(m.shape[0])
        vt[rows] = np.sqrt(pm.q_rows / pm.q_rows.sum())
        u = pm.u(m.shape[1])
        # an exact singular triple: M ṽ = σ u and Mᵀ u = σ ṽ, σ = √q(S) (= √q(x) if absolute)
        assert np.abs(M @ vt - pm.sigma * u).max() < 1e-12
        assert np.abs(M.T @ u - pm.sigma * vt).max() < 1e-12
        if pm.kind == "absolute":
            assert pm.sigma == pytest.approx(np.sqrt(m.q_x[rows[0]]), rel=1e-12)
        # ... and the SVD finds it: σ is a (simple) singular value with these vectors (up to sign)
        i = int(np.argmin(np.abs(m.sigma - pm.sigma)))
        assert abs(m.sigma[i] - pm.sigma) < 1e-12
        assert np.sort(np.abs(m.sigma - pm.sigma))[1] > 1e-6            # non-degenerate here
        assert np.abs(m.u[:, i] - u).max() < 1e-10                      # sign convention: u = +e_y
        assert np.abs(m.v_tilde[:, i] - vt).max() < 1e-10
        v_V = m.v[:, i]                                                 # v = Σ_{x∈S} q(x) e_x / √q(S)
        assert np.abs(v_V[rows] - pm.q_rows / pm.sigma).max() < 1e-10


def test_naive_truncation(markov, hmm, planted):
    for m in all_modes(markov, hmm, planted):
        assert np.abs(m.naive_truncation(m.n_modes) - m.conditional).max() < 1e-12
        assert np.abs(m.naive_truncation(m.rank) - m.conditional).max() < 1e-12
        for chi in range(1, m.rank):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                p = m.naive_truncation(chi, clip=True)
            assert p.min() >= 0 and np.abs(p.sum(1) - 1).max() < 1e-12
    raw = hmm.naive_truncation(1)
    assert raw.min() < 0 or np.abs(raw.sum(1) - 1).max() > 1e-6          # not a distribution in general


def check_effective(m, atol_full):
    kls = []
    for chi in range(0, m.rank + 1):
        p, info = m.effective(chi, return_info=True)
        assert info.status == "optimal", info
        assert info.newton_decrement ** 2 / 2 <= 1e-12 and info.duality_gap <= 1e-10   # within 2e-10 nats
        assert info.primal_residual < 1e-12 and info.step_rel < 1e-9
        assert p.min() >= 0 and np.abs(p.sum(1) - 1).max() < 1e-12
        assert info.kl == pytest.approx(m.kl_to(p), abs=1e-15)
        kls.append(info.kl)
    assert np.all(np.diff(kls) <= 1e-10), kls                          # P_χ ⊂ P_{χ+1}
    assert kls[-1] < 1e-9
    assert np.abs(p - m.conditional).max() < atol_full                 # q^(rank) = q
    assert np.abs(m.effective(0) - m.q_y).max() < 1e-9                 # χ = 0: the marginal q(y)
    return kls


def test_effective_distribution_full_support(markov, hmm):
    check_effective(markov, 1e-12)
    kls = check_effective(hmm, 1e-12)
    assert kls[0] > kls[1] > kls[2] > 0


def test_effective_distribution_with_zeros(planted):
    _, m = planted
    kls = check_effective(m, 1e-8)
    assert kls[0] > 0.1


def test_effective_lies_in_truncated_family(hmm, planted):
    """q^(χ)(·|x) = c + Σ_{α<χ} ⟨v_α, e_x⟩_V w_α: as functions of x, its columns lie in
    span{1, ṽ_α/√q : α < χ} (MATH.md §4 Choice), while for χ < rank − 1 q itself does not."""
    for m in (hmm, planted[1]):
        for chi in (1, 3):
            feats = np.column_stack([np.ones(m.shape[0]), m.v_tilde[:, :chi] / np.sqrt(m.q_x)[:, None]])
            w = np.sqrt(m.q_x)[:, None]                                   # least squares in H's weights
            def residual(p):
                coef, *_ = np.linalg.lstsq(w * feats, w * p, rcond=None)
                return np.abs(feats @ coef - p).max()
            assert residual(m.effective(chi)) < 1e-9
            if chi < m.rank - 1:          # (with the constant feature, χ = rank − 1 generically suffices)
                assert residual(m.conditional) > 1e-6


def test_effective_hessian_paths_agree(hmm, monkeypatch):
    """Both ways of building the Hessian blocks (one product with Φ⊗Φ, or block by block)."""
    import lib.modes as lm
    p1 = hmm.effective(3)
    monkeypatch.setattr(lm, "HESSIAN_LIMIT", 0)
    assert np.abs(hmm.effective(3) - p1).max() < 1e-12


def random_sparse_joint(seed, nx=600, ny=400, density=0.03, expo=1.0):
    rng = np.random.default_rng(seed)
    J = sp.random(nx, ny, density=density, random_state=rng, format="csr")
    J = sp.diags(1 / np.arange(1, nx + 1) ** expo) @ J @ sp.diags(1 / np.arange(1, ny + 1) ** expo)
    J = J + sp.csr_matrix((np.full(nx, 1e-4), (np.arange(nx), rng.integers(0, ny, nx))), shape=(nx, ny))
    return (J / J.sum()).tocsr()


def test_top_agrees_with_dense():
    J = random_sparse_joint(1)
    dense = Modes.from_joint(J)
    r = 10
    for method, kw, tol_v in [("lanczos", {}, 1e-9), ("randomized", dict(n_oversamples=20, n_iter=10), 1e-7)]:
        top = Modes.top(J, r, method=method, seed=3, **kw)
        assert not top.complete and top.n_modes == r and sp.issparse(top.joint)
        assert np.abs(top.sigma - dense.sigma[:r]).max() < 1e-12 * dense.sigma[0]
        assert np.abs(top.u - dense.u[:, :r]).max() < tol_v              # same sign convention
        assert np.abs(top.v_tilde - dense.v_tilde[:, :r]).max() < tol_v
        assert np.abs(top.propensity(histories=[0, 5]) - dense.propensity(range(r), [0, 5])).max() < 1e-6
    again = Modes.top(J, r, method="randomized", seed=3, n_oversamples=20, n_iter=10)
    assert np.array_equal(again.sigma, top.sigma)                          # fixed seed: reproducible


def test_zero_rows_policy():
    lang = L.planted_language(2, 1, background_size=3, rng=5)
    J = lang.joint(2, 1)
    zero = np.flatnonzero(J.sum(1) == 0)
    assert len(zero) > 0
    with pytest.warns(RuntimeWarning, match="q\\(x\\) = 0"):
        m = Modes.from_joint(J)
    with pytest.raises(ValueError, match="zero_rows='raise'"):
        Modes.from_joint(J, zero_rows="raise")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m2 = Modes.from_joint(J, zero_rows="drop")
        m3 = Modes.from_joint(sp.csr_matrix(J), zero_rows="drop")
    assert np.array_equal(m.rows, np.setdiff1d(np.arange(J.shape[0]), zero))
    assert np.array_equal(m.sigma, m2.sigma) and np.abs(m3.sigma - m2.sigma).max() < 1e-15
    assert m.shape == (J.shape[0] - len(zero), J.shape[1]) and m.n_rows_in == J.shape[0]
    cond_full = np.full(J.shape, 1.0 / J.shape[1])                       # kl_to accepts input-shaped p
    cond_full[m.rows] = m.conditional
    assert m.kl_to(cond_full) == pytest.approx(0.0, abs=1e-15)
    assert m.kl_to(m.conditional) == pytest.approx(0.0, abs=1e-15)


def test_input_validation(markov):
    J = L.random_markov_chain(3, 1, rng=0).joint(1, 1)
    bad = J.copy()
    bad[0, 0] = -1e-3
    with pytest.raises(ValueError, match="negative"):
        Modes.from_joint(bad)
    with pytest.raises(ValueError, match="sums to"):
        Modes.from_joint(2 * J)
    assert np.abs(Modes.from_joint(2 * J, normalize=True).sigma - Modes.from_joint(J).sigma).max() < 1e-15
    with pytest.raises(ValueError, match="2-D"):
        Modes.from_joint(J.ravel())
    with pytest.raises(ValueError, match="non-finite"):
        Modes.from_joint(np.where(J > J.max() - 1e-12, np.nan, J))
    with pytest.raises(ValueError, match="zero_rows"):
        Modes.from_joint(J, zero_rows="ignore")
    with pytest.raises(ValueError, match="p must have shape"):
        markov.kl_to(np.ones((2, 2)))
    point = np.zeros(markov.shape)
    point[:, 0] = 1.0                       # a distribution with p(y|x) = 0 where q(xy) > 0
    assert markov.kl_to(point) == np.inf
    with pytest.raises(ValueError, match="conditional distribution"):
        markov.kl_to(np.ones(markov.shape))
    with pytest.raises(ValueError, match="conditional distribution"):
        markov.kl_to(np.where(np.eye(*markov.shape) > 0, 1.5, -0.5 / (markov.shape[1] - 1)))
    assert markov.propensity(modes=[]).shape == (0, *markov.shape) and markov.features(range(0)).shape[1] == 0
    assert markov.family_residual(markov.effective(0), 0) < 1e-9
    with pytest.raises(IndexError, match="modes"):
        markov.propensity(modes=[-1])
    for chi in (-1, markov.n_modes + 1, 1.5, True):
        with pytest.raises(ValueError, match="chi"):
            markov.effective(chi)
        with pytest.raises(ValueError, match="chi"):
            markov.naive_truncation(chi)
    with pytest.raises(IndexError):
        markov.mode_basis(markov.shape[0], 0)
    sparse = random_sparse_joint(2, 60, 40, 0.2)
    with pytest.raises(ValueError, match="r must satisfy"):
        Modes.top(sparse, 40)
    with pytest.raises(ValueError, match="method"):
        Modes.top(sparse, 3, method="qr")
    with pytest.raises(ValueError, match="all modes"):
        Modes.top(sparse, 3).mode_basis(0, 0)


# --- additions for the Modes chapter -------------------------------------------------------

from lib.modes import compare_history_lengths, history_lift, planted_mode_errors  # noqa: E402


def test_identity_errors_and_their_failure(markov, hmm, planted):
    for m in all_modes(markov, hmm, planted):
        errs = m.identity_errors()
        assert set(errs) == {"reconstruction", "orthonormal_u", "orthonormal_v", "lemma_4_10", "parseval",
                             "lemma_4_14", "eq_41", "lemma_4_10_histories"}
        assert errs.pop("lemma_4_10_histories") == m.shape[0]
        assert max(errs.values()) < 1e-12, errs
        sub = m.identity_errors(mode_basis=False, max_propensities=3 * m.n_modes * m.shape[1])
        assert sub["lemma_4_10_histories"] <= 3 and sub["lemma_4_10"] < 1e-12
        assert "lemma_4_14" not in m.identity_errors(mode_basis=False)
    broken = Modes.from_joint(hmm.joint)
    broken.sigma = broken.sigma * 1.01                                  # a corrupted decomposition is caught
    errs = broken.identity_errors()
    assert errs["lemma_4_10"] > 1e-4 and errs["eq_41"] > 1e-4 and errs["reconstruction"] > 1e-4


def test_features_bounds_and_mutual_information(markov, hmm, planted):
    for m in all_modes(markov, hmm, planted):
        phi = m.features()
        gram = phi.T @ (m.q_x[:, None] * phi)                            # orthonormal in L²(q)
        assert np.abs(gram - np.eye(m.n_modes)).max() < 1e-12
        lower, upper = m.top_sigma_bounds()
        assert lower - 1e-15 <= m.sigma[0] <= upper + 1e-15
        J = m.joint
        qxqy = np.outer(m.q_x, m.q_y)
        mask = J > 0
        assert m.mutual_information() == pytest.approx(np.sum(J[mask] * np.log(J[mask] / qxqy[mask])), rel=1e-12)
        assert m.effective(0, return_info=True)[1].kl == pytest.approx(m.mutual_information(), abs=1e-9)
    indep = Modes.from_joint(np.outer([0.2, 0.8], [0.5, 0.3, 0.2]))
    assert indep.rank == 1 and abs(indep.mutual_information()) < 1e-15
    assert indep.sigma[0] == pytest.approx(np.linalg.norm([0.5, 0.3, 0.2]), rel=1e-14)   # lower bound attained


def test_naive_truncation_is_projection_and_leaves_the_family(hmm, planted):
    for m in (hmm, planted[1]):
        assert max(m.projection_residual(c) for c in range(m.n_modes + 1)) < 1e-13
        for chi in (1, 2, 3):
            assert m.family_residual(m.effective(chi), chi) < 1e-9
            assert m.family_residual(m.naive_truncation(chi), chi) < 1e-12      # unclipped: inside H_χ
        assert m.family_residual(m.conditional, m.rank) < 1e-12
    neg = hmm.naive_negative_mass(2)
    assert set(neg) == {"negative_mass", "negative_rows", "row_sum_error"}
    assert hmm.naive_negative_mass(hmm.rank)["negative_mass"] < 1e-15
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        clipped = hmm.naive_truncation(2, clip=True)
    if neg["negative_mass"] > 1e-9:                                     # clipping moved the truncation
        assert hmm.family_residual(clipped, 2) > 1e-9


def test_truncation_curve(hmm, planted):
    for m in (hmm, planted[1]):
        c = m.truncation_curve()
        assert list(c.chis) == list(range(m.n_modes + 1)) and c.rank == m.rank
        assert c.max_increase <= 1e-10 and c.kl_effective[-1] < 1e-9
        assert 0 <= c.first_exact() <= m.rank
        assert all(i.status == "optimal" for i in c.infos)
        assert c.kl_naive[m.rank] < 1e-12 and np.all(c.kl_naive >= -1e-12)
    c = hmm.truncation_curve([0, 2])
    assert list(c.chis) == [0, 2] and len(c.kl_effective) == 2 and c.kl_effective[1] < c.kl_effective[0]


def test_api_on_fresh_planted_language_and_random_chain():
    """Planted bigrams of chosen probabilities: σ = √q(S) and u = e_y; random chains: Lemma 4.10, q^(rank) = q."""
    lang = L.plant_bigrams(2, 2, 3, absolute=(0.09, 0.0225), collective=((0.01, 0.0125, 0.0025),), rng=11)
    m = Modes.from_joint(lang.joint(2, 2), zero_rows="drop")
    found = planted_mode_errors(m, lang.predicted_modes())
    assert [f["kind"] for f in found] == ["absolute", "absolute", "collective"]
    assert np.allclose([m.sigma[f["index"]] for f in found], [0.3, 0.15, 0.1 * np.sqrt(2.5)], atol=1e-12, rtol=0)
    assert max(max(f["sigma_error"], f["u_error"], f["v_error"], f["pair_error"]) for f in found) < 1e-10
    # two planted bigrams of equal q(S): one repeated σ, whose singular vectors are a subspace
    twin = L.plant_bigrams(2, 1, 3, absolute=(0.05,), collective=((0.03, 0.02),), rng=0)
    found = planted_mode_errors(Modes.from_joint(twin.joint(2, 1), zero_rows="drop"), twin.predicted_modes())
    assert [f["cluster"] for f in found] == [2, 2]
    assert max(max(f["sigma_error"], f["u_error"], f["v_error"], f["pair_error"]) for f in found) < 1e-10
    chain = Modes.from_joint(L.random_markov_chain(4, 1, rng=12).joint(2, 1))
    assert chain.rank == 4
    assert chain.identity_errors()["lemma_4_10"] < 1e-13
    assert np.abs(chain.effective(chain.rank) - chain.conditional).max() < 1e-10


def test_modes_across_history_lengths():
    chain = L.random_markov_chain(3, 2, rng=13)
    ms = [Modes.from_joint(chain.joint(k, 2)) for k in (1, 2, 3)]
    first, second = compare_history_lengths(ms[0], ms[1], 3), compare_history_lengths(ms[1], ms[2], 3)
    for c in (first, second):
        assert c.isometry_error < 1e-14 and c.intertwining_error < 1e-14 and c.sigma_drop < 1e-14
    assert first.leakage > 1e-4 and first.sigma_drop < -1e-6              # k = 1 < order: σ grows strictly
    assert second.leakage < 1e-25                                         # k = 2 = order: inherited exactly
    assert np.abs(second.sigma_short - second.sigma_long[:len(second.sigma_short)]).max() < 1e-14
    assert max(a.max() for a in list(second.left_angles.values()) + list(second.right_angles.values())) < 1e-10
    hmm = L.random_hmm(3, 4, rng=14, concentration=0.3)
    hs = [Modes.from_joint(hmm.joint(k, 2)) for k in (1, 2, 3)]
    for a, b in zip(hs[:-1], hs[1:]):
        c = compare_history_lengths(a, b, 3, ranks=(1, 2))
        assert c.sigma_drop < 1e-14 and c.leakage > 1e-8
    late = L.MarkovChain(chain.transition, initial=np.random.default_rng(0).dirichlet(np.ones(9)))
    ls = [Modes.from_joint(late.joint(k, 1)) for k in (2, 3)]
    assert compare_history_lengths(ls[0], ls[1], 3).isometry_error > 1e-3   # not stationary: no isometry
    J = history_lift(ms[0], ms[1], 3)
    assert J.shape == (9, 3) and np.abs((J.T @ J).toarray() - np.eye(3)).max() < 1e-14
    with pytest.raises(ValueError, match="do not look like"):
        history_lift(ms[0], ms[2], 3)


def test_conditional_entropy_is_h_y_minus_mutual_information():
    from lib import languages as L

    modes = Modes.from_joint(L.mode_ladder(k=1, n_bigrams=3, rng=0).joint(1, 1))
    q_y = modes.q_y[modes.q_y > 0]
    h_y = float(-np.sum(q_y * np.log(q_y)))
    assert modes.conditional_entropy() == pytest.approx(h_y - modes.mutual_information(), abs=1e-12)
    assert modes.conditional_entropy() > 0.1          # not vacuous: the ladder's continuations are uncertain
    exact = Modes.from_joint(np.eye(4) / 4)           # y determined by x
    assert exact.conditional_entropy() == pytest.approx(0.0, abs=1e-15)


def _tied_joint():
    """Three absolute bigrams x_i → y_i of equal mass 0.2 (σ = √0.2 three times, Lemma 5.2) beside a
    two-history block on three other continuations."""
    J = np.zeros((5, 6))
    J[0, 0] = J[1, 1] = J[2, 2] = 0.2
    J[3, 3:] = 0.25 * np.array([0.5, 0.5, 0.0])
    J[4, 3:] = 0.15 * np.array([0.2, 0.3, 0.5])
    return J


def test_effective_cuts_only_at_a_spectral_gap():
    """q^(χ) at a tie would depend on the SVD's basis; effective() keeps the whole cluster."""
    m = Modes.from_joint(_tied_joint())
    tied = np.flatnonzero(np.isclose(m.sigma, np.sqrt(0.2), rtol=1e-12))
    assert len(tied) == 3
    first, end = int(tied[0]), int(tied[-1]) + 1
    assert m.gap_cutoff(first + 1) == end and m.gap_cutoff(first + 2) == end   # inside the cluster
    assert m.gap_cutoff(end) == end and m.gap_cutoff(0) == 0                    # at gaps: unchanged
    # the failing case the guard prevents: inside the cluster the kept span depends on the basis
    rng = np.random.default_rng(0)
    R, _ = np.linalg.qr(rng.normal(size=(3, 3)))
    rotated = Modes.from_joint(_tied_joint())
    rotated.v_tilde = rotated.v_tilde.copy()
    rotated.v_tilde[:, tied] = rotated.v_tilde[:, tied] @ R
    inside = first + 1
    a, b = m.v_tilde[:, :inside], rotated.v_tilde[:, :inside]
    assert np.linalg.svd(a.T @ b, compute_uv=False).min() < 0.99                # different spans
    with pytest.warns(UserWarning, match="tie"):
        q_inside, info = m.effective(inside, return_info=True)
    assert info.chi_used == end
    np.testing.assert_allclose(q_inside, m.effective(end), atol=1e-12)
    # at the gap the answer does not depend on the basis chosen within the cluster
    np.testing.assert_allclose(rotated.effective(end), m.effective(end), atol=1e-9)


def test_remark_4_11_adjoint_holds_and_fails_for_a_wrong_form(markov, hmm, planted):
    for m in all_modes(markov, hmm, planted):
        e = m.adjoint_errors(rng=0)
        assert max(e.values()) < 1e-12, e
    # must fail: the same checks with the form of V_k replaced by the dot product (q(x) → 1)
    wrong = Modes.from_joint(L.random_markov_chain(3, 2, rng=0).joint(2, 1))
    wrong.q_x = np.ones_like(wrong.q_x)
    assert max(wrong.adjoint_errors(rng=0).values()) > 1e-3


def test_literal_family_distance_two_ways_and_emptiness(markov, hmm):
    for m in (markov, hmm):
        assert m.literal_family_distance(0)["projection"] == pytest.approx(1.0)   # ‖1‖ in L²(q)
        for chi in range(1, m.n_modes + 1):
            d = m.literal_family_distance(chi)
            assert abs(d["projection"] - d["spectral"]) < 1e-12
        assert not m.literal_family_distance(m.rank)["empty"]                    # 1 in the span at full rank
        assert m.literal_family_distance(1)["empty"]                             # generic: empty below
    # the constant's coordinates σ_α⟨u_α, 1⟩ rebuild √q in ṽ-coordinates (Mᵀ1 = √q)
    c = markov.constant_coordinates()
    assert np.abs(markov.v_tilde @ c - np.sqrt(markov.q_x)).max() < 1e-12
    # must fail: a perturbed coordinate gives a different spectral distance
    assert abs(np.sqrt(np.sum((c[1:] * 1.1) ** 2)) - markov.literal_family_distance(1)["projection"]) > 1e-4


def test_literal_family_matches_choice_when_nonempty():
    """A language whose continuation vectors below the top mode sum to zero: the constant is the top
    feature, the literal family is non-empty and equals H_χ, so q^(χ) is the same."""
    joint = np.array([[0.2, 0.05], [0.05, 0.2], [0.25, 0.25]])     # q(y) uniform: u_0 ∝ 1
    m = Modes.from_joint(joint)
    assert not m.literal_family_distance(1)["empty"]
    assert m.family_residual(m.effective(1), 1) < 1e-9


def test_truncated_family_is_a_language_only_without_truncation():
    lang = L.random_markov_chain(3, 1, rng=3)
    full = truncated_family(lang, 3, [(1, 1), (1, 2), (2, 1)])
    assert full.truncation_size < 1e-12 and full.max_violation < 1e-12      # no truncation: a language
    cut = truncated_family(lang, 1, [(1, 1), (1, 2), (2, 1)])
    assert cut.truncation_size > 1e-4 and cut.max_violation > 1e-4         # truncated separately: not one
    # Σ_last Ã_3^(2,1) = A_2 exactly, so that violation is the (1,1) truncation's change to A_2
    A2 = lang.joint(1, 1)
    expected = np.abs(cut.tensors[(1, 1)] - A2).max()
    assert cut.language_violation[((2, 1), (1, 1))] == pytest.approx(expected, abs=1e-12)
    with pytest.raises(ValueError, match="orders"):
        truncated_family(lang, 1, [(0, 1)])


def test_a_conditional_table_is_refused_as_a_joint_with_the_fix():
    """A table whose rows each sum to 1 is q(y|x), not q(xy): refused with what to pass, whether or not
    normalize=True (which would silently make q(x) uniform); a joint and a table of counts pass."""
    joint = L.random_markov_chain(3, 1, rng=0).joint(1, 1)           # 3 × 3, sums to 1
    q_x = joint.sum(1)
    cond = joint / q_x[:, None]                                       # rows sum to 1
    for normalize in (False, True):
        with pytest.raises(ValueError, match=r"rows each sum to 1: it looks like a conditional P\(y\|x\), not a joint"):
            Modes.from_joint(cond, normalize=normalize)
        with pytest.raises(ValueError, match=r"joint = p_x\[:, None\] \* cond"):
            Modes.top(sp.csr_matrix(np.hstack([cond, np.zeros((3, 1))])), 1, normalize=normalize)
    # following the fix gives the joint's own modes
    fixed = Modes.from_joint(q_x[:, None] * cond)
    assert np.abs(fixed.sigma - Modes.from_joint(joint).sigma).max() < 1e-15
    # a table of counts with normalize=True still works, and is the joint its frequencies give
    counts = np.array([[3, 1, 0], [2, 2, 4], [0, 1, 7]])
    by_counts = Modes.from_joint(counts, normalize=True)
    assert np.abs(by_counts.joint - counts / counts.sum()).max() < 1e-15
    with pytest.raises(ValueError, match="sums to 20.*normalize=True to divide a table of counts"):
        Modes.from_joint(counts)
    # counts of one observation per history (integral rows summing to 1) are counts: their joint is uniform in x
    one_each = np.array([[1, 0], [0, 1], [1, 0]])
    assert np.abs(Modes.from_joint(one_each, normalize=True).q_x - 1 / 3).max() < 1e-15
    # a single row is both a conditional and a joint: it passes
    assert Modes.from_joint(np.array([[0.25, 0.75]])).sigma[0] > 0
    from lib.modes import looks_conditional

    assert looks_conditional(cond) and looks_conditional(sp.csr_matrix(cond))
    assert not looks_conditional(joint) and not looks_conditional(counts) and not looks_conditional(cond[:1])


def test_mode_comparisons_answer_from_lib_modes_too():
    from lib import mode_comparisons, modes

    for name in ("planted_mode_errors", "history_lift", "HistoryComparison", "compare_history_lengths",
                 "TruncatedFamily", "truncated_family"):
        assert getattr(modes, name) is getattr(mode_comparisons, name)
