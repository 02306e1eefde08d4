"""The Hilbert-space picture of a language (Chen & Murfet §4.1–4.2; the book's
Notation page, chapters/appendix/notation.md, § Histories, continuations and their inner products).

Fix history and continuation lengths k, l and a joint q(xy) on Σ^k × Σ^l (rows x, columns y,
``joint[x, y] = q(xy)``, e.g. ``Language.joint(k, l)``) with q(x) > 0 for every history.

* R^{Σ^l} carries the dot product (Def 4.1).
* V_k = R^{Σ^k} carries ⟨a, b⟩_V = Σ_x a(x) b(x) / q(x) (Def 4.2); {√q(x) e_x} is an
  orthonormal basis (Remark 4.3).
* H_{k,l} = L²(Σ^k, q; R^{Σ^l}): functions f: Σ^k → R^{Σ^l}, stored as arrays f[x, y] = f(x)_y,
  with ⟨f, g⟩_H = Σ_x q(x) f(x)·g(x). P_{k,l} ⊂ H_{k,l} are the conditional distributions.

The three descriptions of the same object (§4.2), all as arrays of this module:

    tensor   T ∈ R^{Σ^k} ⊗ R^{Σ^l}         T[x, y], the coefficient of e_x ⊗ e_y
    map      L: V_k → R^{Σ^l}             L[y, x'], its matrix in the word bases
    function f ∈ H_{k,l}                   f[x, y] = f(x)_y

A tensor a ⊗ b becomes the map v ↦ ⟨a, v⟩_V b (the form of V_k turns a into a functional,
eqs. 26–28), and a map L becomes the function x ↦ L(e_x) (eqs. 24–25). Composed (eq. 29):
e_x ⊗ e_y ↦ (x' ↦ δ_{xx'} e_y / q(x)) (Lemma 4.7), hence A_{k+l} = Σ q(xy) e_x ⊗ e_y ↦
(x ↦ q(·|x)) (Lemma 4.8). Lemma 4.5 (the reading the proof of Lemma 4.14 needs) is Parseval in
V_k: ⟨a, b⟩_V = Σ_x q(x) ⟨a, e_x⟩_V ⟨b, e_x⟩_V; Lemma 4.6: the inverse of v ↦ ⟨v, ·⟩_V sends a
functional φ to Σ_x q(x) φ(e_x) e_x. Lemma 4.15: pairing an observable O ∈ H_{k,l} with a
conditional p ∈ P_{k,l} is an expectation, ⟨O, p⟩_H = E_{x∼q} E_{y∼p(·|x)} O(x)_y.

Remark 4.12: the matrix of the conditional operator in the word bases, Q[y, x] = q(y|x), is
column-stochastic; for k = l it is the transition matrix of the block chain x → y on Σ^k, whose
Perron–Frobenius vector is the marginal q(x) when the source is stationary
(:func:`perron_frobenius`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp

from .languages import decode


def orthonormality_error(gram) -> float:
    """max |G − I| of a Gram matrix (0 for an orthonormal family)."""
    G = np.asarray(gram, dtype=np.float64)
    return float(np.abs(G - np.eye(G.shape[0])).max()) if G.size else 0.0


class FunctionSpace:
    """V_k, R^{Σ^l} and H_{k,l} of a joint q(xy) (dense, rows x ∈ Σ^k, columns y ∈ Σ^l).

    Every history must have q(x) > 0 (V_k's form divides by it); the joint must sum to 1."""

    def __init__(self, joint, atol: float = 1e-9):
        J = joint.toarray() if sp.issparse(joint) else np.asarray(joint, dtype=np.float64)
        if J.ndim != 2 or 0 in J.shape:
            raise ValueError(f"joint must be a non-empty 2-D array (histories × continuations), got shape {J.shape}")
        if not np.all(np.isfinite(J)) or J.min() < 0:
            raise ValueError("joint must hold finite non-negative probabilities q(xy)")
        if abs(J.sum() - 1) > atol:
            raise ValueError(f"joint sums to {J.sum():.12g}, not 1")
        self.joint = J
        self.q_x = J.sum(axis=1)
        self.q_y = J.sum(axis=0)
        if self.q_x.min() <= 0:
            raise ValueError(f"{int(np.sum(self.q_x <= 0))} histories have q(x) = 0: V_k needs q(x) > 0 "
                             "(restrict the joint to histories that occur)")
        self.n_x, self.n_y = J.shape

    # -- inner products (Defs 4.1, 4.2, H_{k,l}) -------------------------------------
    def inner_V(self, a, b) -> float:
        """⟨a, b⟩_V = Σ_x a(x) b(x) / q(x)."""
        return float(np.sum(np.asarray(a, dtype=np.float64) * np.asarray(b, dtype=np.float64) / self.q_x))

    def gram_V(self, vectors) -> np.ndarray:
        """Gram matrix ⟨a_i, a_j⟩_V of the columns of ``vectors`` (|Σ^k| × m)."""
        A = np.asarray(vectors, dtype=np.float64)
        return A.T @ (A / self.q_x[:, None])

    def inner_H(self, f, g) -> float:
        """⟨f, g⟩_H = Σ_x q(x) f(x)·g(x) for f, g of shape (|Σ^k|, |Σ^l|)."""
        return float(np.einsum("x,xy,xy->", self.q_x, np.asarray(f, dtype=np.float64), np.asarray(g, dtype=np.float64)))

    def gram_H(self, functions) -> np.ndarray:
        """Gram matrix ⟨f_i, f_j⟩_H of a stack of functions (m, |Σ^k|, |Σ^l|)."""
        F = np.asarray(functions, dtype=np.float64).reshape(-1, self.n_x * self.n_y)
        w = np.repeat(self.q_x, self.n_y)
        return F @ (F * w).T

    def unit_basis_V(self) -> np.ndarray:
        """The columns √q(x) e_x: the orthonormal basis of V_k of Remark 4.3 (|Σ^k| × |Σ^k|)."""
        return np.diag(np.sqrt(self.q_x))

    # -- forms as isomorphisms with the duals (eqs. 27, 28; Lemma 4.6) -----------------
    def functional_of(self, v) -> np.ndarray:
        """The functional ⟨v, ·⟩_V as its values on the word basis: φ(e_x) = v(x) / q(x) (eq. 28)."""
        return np.asarray(v, dtype=np.float64) / self.q_x

    def vector_of(self, phi) -> np.ndarray:
        """Inverse of ``functional_of`` (Lemma 4.6): φ ↦ Σ_x q(x) φ(e_x) e_x.

        ``phi`` is a functional given by its values on the word basis (an array of length
        |Σ^k|) or a callable taking a vector of V_k."""
        if callable(phi):
            E = np.eye(self.n_x)
            phi = np.array([phi(E[x]) for x in range(self.n_x)], dtype=np.float64)
        return self.q_x * np.asarray(phi, dtype=np.float64)

    # -- tensor <-> map <-> function (eqs. 24–29, Lemmas 4.7, 4.8) ---------------------
    def tensor_to_map(self, T) -> np.ndarray:
        """The map v ↦ Σ_{x,y} T[x, y] ⟨e_x, v⟩_V e_y (eq. 26 with the forms 27, 28), as its
        matrix L[y, x'] in the word bases. Built from the Gram matrix of the word basis in V_k,
        ⟨e_x, e_x'⟩_V = δ_{xx'}/q(x), so it holds for any form, not only a diagonal one."""
        T = np.asarray(T, dtype=np.float64)
        if T.shape != (self.n_x, self.n_y):
            raise ValueError(f"tensor must have shape {(self.n_x, self.n_y)}, got {T.shape}")
        gram_words = self.gram_V(np.eye(self.n_x))          # ⟨e_x, e_x'⟩_V
        return T.T @ gram_words

    def map_to_function(self, L) -> np.ndarray:
        """The function x ↦ L(e_x) (eqs. 24–25): f[x, :] = L e_x."""
        L = np.asarray(L, dtype=np.float64)
        if L.shape != (self.n_y, self.n_x):
            raise ValueError(f"map must have shape {(self.n_y, self.n_x)}, got {L.shape}")
        return np.stack([L @ e for e in np.eye(self.n_x)])

    def function_to_map(self, f) -> np.ndarray:
        """Inverse of ``map_to_function``: the linear map with L e_x = f(x)."""
        return np.asarray(f, dtype=np.float64).T.copy()

    def tensor_to_function(self, T) -> np.ndarray:
        """The composite isomorphism (eq. 29): T ↦ (x ↦ Σ_y T[x, y] e_y / q(x)) (Lemma 4.7)."""
        return self.map_to_function(self.tensor_to_map(T))

    def function_to_tensor(self, f) -> np.ndarray:
        """Inverse of eq. (29): f ↦ Σ_{x,y} q(x) f(x)_y e_x ⊗ e_y."""
        return self.q_x[:, None] * np.asarray(f, dtype=np.float64)

    def orthonormal_matrix(self, L) -> np.ndarray:
        """Matrix of a map L: V_k → R^{Σ^l} in the orthonormal bases {√q(x) e_x}, {e_y}:
        L diag(√q). For the conditional operator this is M[y, x] = q(xy)/√q(x) (§4.3)."""
        return np.asarray(L, dtype=np.float64) * np.sqrt(self.q_x)[None, :]

    # -- the conditional distribution and observables ----------------------------------
    @property
    def conditional(self) -> np.ndarray:
        """q(·|·) ∈ P_{k,l}: conditional[x, y] = q(y|x)."""
        return self.joint / self.q_x[:, None]

    def in_simplex_error(self, f) -> float:
        """How far f is from P_{k,l}: max(max |Σ_y f(x)_y − 1|, max(−f, 0))."""
        f = np.asarray(f, dtype=np.float64)
        return float(max(np.abs(f.sum(axis=1) - 1).max(), max(0.0, -f.min())))

    def pairing(self, observable, p=None) -> float:
        """⟨O, p⟩_H (default p = q(·|·)): by Lemma 4.15 the expectation E_{x∼q} E_{y∼p(·|x)} O(x)_y."""
        return self.inner_H(observable, self.conditional if p is None else p)

    def expectation(self, observable, p=None) -> float:
        """E_{x∼q(x)} Σ_y p(y|x) O(x)_y computed as a plain sum over pairs (x, y) of the joint
        q(x) p(y|x) (default p = q, i.e. Σ_{xy} q(xy) O(x)_y): the right side of Lemma 4.15."""
        O = np.asarray(observable, dtype=np.float64)
        weights = self.joint if p is None else self.q_x[:, None] * np.asarray(p, dtype=np.float64)
        return float(np.sum(weights * O))

    def cross_entropy(self, p) -> float:
        """−⟨q(·|·), log p⟩_H = −Σ_{xy} q(xy) log p(y|x): the population loss of predicting
        continuations with p (nats per history). +inf if p = 0 where q(xy) > 0."""
        p = np.asarray(p, dtype=np.float64)
        mask = self.joint > 0
        if np.any(p[mask] <= 0):
            return float("inf")
        return float(-np.sum(self.joint[mask] * np.log(p[mask])))

    def stochastic_matrix(self) -> np.ndarray:
        """Q[y, x] = q(y|x), the conditional operator in the word bases (column-stochastic, Remark 4.12)."""
        return self.conditional.T.copy()


LEMMA_CHECKS = {"remark_4_3": r"Remark 4.3: $\sqrt{q(x)}\,e_x$ orthonormal",
                "lemma_4_5": r"Lemma 4.5: Parseval in $V_k$", "lemma_4_6": "Lemma 4.6: functional to vector",
                "lemma_4_7": r"Lemma 4.7: $e_x\otimes e_y$ to a function", "roundtrip": "tensor → function → tensor",
                "lemma_4_8": r"Lemma 4.8: $A_{k+l}$ to $q(\cdot\mid x)$"}
"""What each error of :func:`lemma_errors` checks, in words (the rows of the chapter's table)."""


def lemma_errors(space: "FunctionSpace", tensor=None, conditional=None, rng=None, n_random: int = 8) -> dict:
    """Numerical errors of Remark 4.3 and Lemmas 4.5–4.8 on one FunctionSpace (0 in exact arithmetic).

    ``remark_4_3``  max |⟨√q(x) e_x, √q(x') e_x'⟩_V − δ|             (orthonormal basis of V_k)
    ``lemma_4_5``   max over random a, b of |⟨a, b⟩_V − Σ_x q(x) ⟨a, e_x⟩_V ⟨b, e_x⟩_V| / (‖a‖_V ‖b‖_V)
    ``lemma_4_6``   max over random functionals φ of |⟨Σ_x q(x) φ(e_x) e_x, ·⟩_V − φ| (on the word basis)
    ``lemma_4_7``   max over all word tensors e_x ⊗ e_y of |image − (x' ↦ δ_{xx'} e_y / q(x))| · q(x)
    ``roundtrip``   max over random tensors T of |tensor(function(T)) − T| (eq. 29 is invertible)
    ``lemma_4_8``   max |image of ``tensor`` − ``conditional``| (given both: A_{k+l} as a (|Σ^k|, |Σ^l|)
                    array and q(y|x) computed independently, e.g. ``Language.conditional``)
    The random test vectors are N(0, 1) entries drawn from ``rng``."""
    rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    nx, ny = space.n_x, space.n_y
    E = np.eye(nx)
    out = {"remark_4_3": orthonormality_error(space.gram_V(space.unit_basis_V()))}
    worst = 0.0
    for _ in range(n_random):
        a, b = rng.standard_normal(nx), rng.standard_normal(nx)
        coords_a = np.array([space.inner_V(a, e) for e in E])
        coords_b = np.array([space.inner_V(b, e) for e in E])
        scale = np.sqrt(space.inner_V(a, a) * space.inner_V(b, b))
        worst = max(worst, abs(space.inner_V(a, b) - float(np.sum(space.q_x * coords_a * coords_b))) / scale)
    out["lemma_4_5"] = worst
    worst = 0.0
    for _ in range(n_random):
        phi = rng.standard_normal(nx)                                   # φ(e_x)
        v = space.vector_of(lambda w, phi=phi: float(phi @ w))
        worst = max(worst, float(np.abs(np.array([space.inner_V(v, e) for e in E]) - phi).max()))
    out["lemma_4_6"] = worst
    worst = 0.0
    for x in range(nx):
        for y in range(ny):
            T = np.zeros((nx, ny))
            T[x, y] = 1.0
            expected = np.zeros((nx, ny))
            expected[x, y] = 1.0 / space.q_x[x]
            worst = max(worst, float(np.abs(space.tensor_to_function(T) - expected).max()) * space.q_x[x])
    out["lemma_4_7"] = worst
    worst = 0.0
    for _ in range(n_random):
        T = rng.standard_normal((nx, ny))
        worst = max(worst, float(np.abs(space.function_to_tensor(space.tensor_to_function(T)) - T).max()))
    out["roundtrip"] = worst
    if tensor is not None and conditional is not None:
        out["lemma_4_8"] = float(np.abs(space.tensor_to_function(tensor) - np.asarray(conditional)).max())
    return out


def token_match_observable(alphabet_size: int, k: int, l: int, i: int = -1, j: int = 0) -> np.ndarray:
    """The observable O(x)_y = 1 if token i of the history equals token j of the continuation, else 0
    (default: "the continuation starts by repeating the last history token"), shape (V^k, V^l)."""
    V = int(alphabet_size)
    xs = decode(np.arange(V ** k), V, k)[:, i]
    ys = decode(np.arange(V ** l), V, l)[:, j]
    return (xs[:, None] == ys[None, :]).astype(np.float64)


def block_chain_tv(Q, start, n_steps: int) -> np.ndarray:
    """Total-variation distance between Qⁿ start and the Perron vector of Q, n = 0..n_steps
    (Q column-stochastic, start a distribution): how fast the block chain forgets its start."""
    Q = np.asarray(Q, dtype=np.float64)
    pi = perron_frobenius(Q).vector
    p = np.asarray(start, dtype=np.float64).copy()
    out = np.empty(n_steps + 1)
    for n in range(n_steps + 1):
        out[n] = 0.5 * np.abs(p - pi).sum()
        p = Q @ p
    return out


def sampled_expectation(observable, histories, continuations):
    """Monte-Carlo estimate of E O(x)_y from sampled pairs (codes of x and y): (mean, standard error)."""
    O = np.asarray(observable, dtype=np.float64)
    vals = O[np.asarray(histories), np.asarray(continuations)]
    n = vals.size
    if n < 2:
        raise ValueError("need at least two samples")
    return float(vals.mean()), float(vals.std(ddof=1) / np.sqrt(n))


@dataclass
class PerronFrobenius:
    """Perron–Frobenius data of a column-stochastic matrix Q (Q π = π, Σ π = 1)."""

    eigenvalue: float            # the Perron root (1 for a stochastic matrix)
    vector: np.ndarray           # its eigenvector, normalised to a distribution
    second_modulus: float        # |λ_2|: the block chain mixes like |λ_2|^n
    column_sum_error: float      # max |Σ_y Q[y, x] − 1|
    residual: float              # max |Q π − π|


def perron_frobenius(Q) -> PerronFrobenius:
    """The Perron vector of a non-negative column-stochastic matrix Q (dense eigendecomposition).

    For a positive (or irreducible and aperiodic) Q the eigenvalue 1 is simple and dominant and
    its eigenvector can be chosen positive (Perron–Frobenius); it is returned normalised to sum 1."""
    Q = np.asarray(Q.toarray() if sp.issparse(Q) else Q, dtype=np.float64)
    if Q.ndim != 2 or Q.shape[0] != Q.shape[1]:
        raise ValueError(f"Q must be square, got shape {Q.shape}")
    if Q.min() < 0:
        raise ValueError("Q must be non-negative")
    w, vecs = sla.eig(Q)
    order = np.argsort(-np.abs(w))
    w, vecs = w[order], vecs[:, order]
    v = np.real(vecs[:, 0])
    v = v / v.sum()
    if v.min() < -1e-12:
        raise ValueError("the dominant eigenvector is not of one sign: is Q irreducible?")
    second = float(np.abs(w[1])) if len(w) > 1 else 0.0
    return PerronFrobenius(float(np.real(w[0])), v, second, float(np.abs(Q.sum(axis=0) - 1).max()),
                           float(np.abs(Q @ v - v).max()))


__all__ = ["FunctionSpace", "orthonormality_error", "lemma_errors", "sampled_expectation", "PerronFrobenius",
           "perron_frobenius", "block_chain_tv", "token_match_observable"]
