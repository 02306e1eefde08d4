"""The Hilbert-space picture (lib/hilbert.py): inner products, Lemmas 4.5–4.8 and 4.15, and the
Perron–Frobenius vector of Remark 4.12, on exact languages; and that the checks can fail."""
import numpy as np
import pytest

from lib import hilbert as H
from lib import languages as L


@pytest.fixture(scope="module")
def hmm():
    return L.random_hmm(3, 4, rng=1)


@pytest.fixture(scope="module")
def space(hmm):
    return H.FunctionSpace(hmm.joint(2, 2))


def test_inner_products_by_hand(space):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(space.n_x), rng.standard_normal(space.n_x)
    assert space.inner_V(a, b) == pytest.approx(sum(a[x] * b[x] / space.q_x[x] for x in range(space.n_x)), rel=1e-13)
    f, g = rng.standard_normal((2, space.n_x, space.n_y))
    brute = sum(space.q_x[x] * f[x] @ g[x] for x in range(space.n_x))
    assert space.inner_H(f, g) == pytest.approx(brute, rel=1e-13)
    G = space.gram_H(np.stack([f, g]))
    assert G[0, 1] == pytest.approx(brute, rel=1e-13) and G[1, 0] == pytest.approx(brute, rel=1e-13)
    assert H.orthonormality_error(space.gram_V(space.unit_basis_V())) < 1e-14
    assert H.orthonormality_error(space.gram_V(np.eye(space.n_x))) > 1.0     # word vectors are not unit in V_k


def test_lemmas_4_5_to_4_8(hmm, space):
    errs = H.lemma_errors(space, tensor=hmm.joint(2, 2), conditional=hmm.conditional(2, 2), rng=0)
    assert set(errs) == {"remark_4_3", "lemma_4_5", "lemma_4_6", "lemma_4_7", "roundtrip", "lemma_4_8"}
    assert max(errs.values()) < 1e-13, errs
    # the three forms: tensor -> map -> function, and the orthonormal matrix is q(xy)/sqrt(q(x))
    T = hmm.joint(2, 2)
    Lmap = space.tensor_to_map(T)
    assert np.allclose(Lmap, space.stochastic_matrix(), atol=1e-15, rtol=0)
    assert np.allclose(space.map_to_function(Lmap), space.conditional, atol=1e-15, rtol=0)
    assert np.array_equal(space.function_to_map(space.conditional), space.conditional.T)
    assert np.allclose(space.orthonormal_matrix(Lmap), (T / np.sqrt(space.q_x)[:, None]).T, atol=1e-15, rtol=0)
    phi = np.random.default_rng(1).standard_normal(space.n_x)
    assert np.allclose(space.functional_of(space.vector_of(phi)), phi, rtol=1e-14, atol=0)


def test_lemma_4_8_detects_a_non_language(hmm):
    """If A_k is not the marginal of A_{k+l}, the image of A_{k+l} is not q(.|x) computed from A_k."""
    J = hmm.joint(1, 1)
    space = H.FunctionSpace(J)
    wrong_qx = hmm.prob(1) * np.array([1.1, 0.9, 1.0])        # a family that fails Def 3.2
    cond = J / wrong_qx[:, None]
    assert H.lemma_errors(space, tensor=J, conditional=cond, rng=0)["lemma_4_8"] > 1e-3


def test_lemma_4_15_pairing_is_expectation(hmm, space):
    O = H.token_match_observable(3, 2, 2)
    assert O.shape == (9, 9) and O[L.encode([0, 2], 3), L.encode([2, 1], 3)] == 1
    assert O[L.encode([0, 2], 3), L.encode([1, 2], 3)] == 0
    A4 = hmm.prob(4)
    brute = sum(A4[a, b, c, d] for a in range(3) for b in range(3) for c in range(3) for d in range(3) if b == c)
    assert space.pairing(O) == pytest.approx(brute, abs=1e-15)
    assert space.expectation(O) == pytest.approx(brute, abs=1e-15)
    model = L.random_markov_chain(3, 1, rng=2).conditional(2, 2)
    assert space.pairing(O, model) == pytest.approx(space.expectation(O, model), abs=1e-15)
    # loss = -<q, log p>_H, and the excess over the true conditional is a KL >= 0
    assert space.cross_entropy(model) == pytest.approx(-space.pairing(np.log(model)), rel=1e-14)
    assert space.cross_entropy(model) > space.cross_entropy(space.conditional)
    assert space.cross_entropy(np.where(np.arange(9)[None, :] == 0, 1.0, 0.0) * np.ones((9, 1))) == np.inf
    xs, ys = hmm.sample_pairs(50_000, 2, 2, rng=3)
    mean, se = H.sampled_expectation(O, xs, ys)
    assert abs(mean - brute) < 5 * se and 0 < se < 0.01


def test_perron_frobenius_is_stationary_marginal():
    for lang in (L.random_markov_chain(3, 2, rng=4), L.random_hmm(3, 3, rng=5),
                 L.mixture([L.random_markov_chain(3, 1, rng=6), L.random_hmm(3, 2, rng=7)], [0.4, 0.6])):
        space = H.FunctionSpace(lang.joint(2, 2))
        pf = H.perron_frobenius(space.stochastic_matrix())
        assert pf.eigenvalue == pytest.approx(1.0, abs=1e-13) and pf.column_sum_error < 1e-14
        assert np.abs(pf.vector - space.q_x).max() < 1e-13 and pf.residual < 1e-14
        assert 0 <= pf.second_modulus < 1
    chain = L.random_markov_chain(3, 2, rng=4)
    late = L.MarkovChain(chain.transition, initial=np.random.default_rng(0).dirichlet(np.ones(9)))
    space = H.FunctionSpace(late.joint(2, 2))
    pf = H.perron_frobenius(space.stochastic_matrix())
    assert np.abs(pf.vector - chain.prob(2).ravel()).max() < 1e-13     # the *stationary* marginal ...
    assert np.abs(pf.vector - space.q_x).max() > 1e-2                  # ... not the first block's
    tv = H.block_chain_tv(space.stochastic_matrix(), space.q_x, 30)
    assert tv[0] > 0.05 and tv[-1] < 1e-10 and np.all(np.diff(tv) <= 1e-15)


def test_validation():
    with pytest.raises(ValueError, match="q\\(x\\) = 0"):
        H.FunctionSpace(np.array([[0.5, 0.5], [0.0, 0.0]]))
    with pytest.raises(ValueError, match="sums to"):
        H.FunctionSpace(np.ones((2, 2)))
    with pytest.raises(ValueError, match="square"):
        H.perron_frobenius(np.ones((2, 3)) / 2)
    with pytest.raises(ValueError, match="at least two"):
        H.sampled_expectation(np.ones((2, 2)), [0], [0])
    space = H.FunctionSpace(np.full((2, 3), 1 / 6))
    with pytest.raises(ValueError, match="tensor must have shape"):
        space.tensor_to_map(np.ones((3, 2)))
    assert space.in_simplex_error(np.full((2, 3), 0.5)) == pytest.approx(0.5)
