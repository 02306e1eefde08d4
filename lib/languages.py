"""Exact finite languages: sources whose string probabilities are known exactly.

A *language* (Chen & Murfet, Def 3.2, after Mumford) is a family of fundamental tensors
A_n ∈ (R^Σ)^{⊗n}, A_n[σ_1, …, σ_n] = q(σ_1…σ_n), such that summing A_{n+1} over its last
position gives A_n (Notation page, § Strings, languages). Every source here is a finite-state process, so q is known
in closed form and identities (the language condition, Lemmas 4.10, 5.2, 5.6) can be checked
to machine precision; every source can also be sampled.

One representation covers them all: a *hidden Markov model with emissions on transitions*,

    q(σ_1…σ_n) = π T_{σ_1} T_{σ_2} ⋯ T_{σ_n} 1,

with π a distribution over hidden states and T_σ[s, s'] = P(emit σ and move to s' | s).
Because Σ_σ T_σ is row-stochastic, marginalising the last position gives
π T_{σ_1}⋯T_{σ_n} (Σ_σ T_σ) 1 = q(σ_1…σ_n): *every* such process is a language. If π is
stationary for Σ_σ T_σ, the first position marginalises too (a stationary source).

* ``MarkovChain``       order-r chain; hidden state = the next r tokens (a "look-ahead window").
* ``HMM``               the general form (``random_hmm`` draws a classical HMM).
* ``Mixture``           block-diagonal union of components, initial weights w_i π_i.
* ``PlantedLanguage``   a background chain plus planted absolute / collective bigrams
                        (Defs 5.1, 5.5) that hold *exactly* for a chosen (k, l) when noise = 0.
* ``fit_markov_chain``  an order-r chain fitted (with additive smoothing) to a token stream
                        via ``lib.text.ngrams.count_ngrams``: real text as an exact language.
* ``TensorLanguage``    explicit tensors A_1…A_N (need not be a language: for tests).

Indexing convention everywhere: a string σ_1…σ_n ∈ Σ^n has code Σ_i σ_i V^{n-i}
(lexicographic, first token most significant), so ``prob(n).ravel()[code]`` = q(string) and
``joint(k, l)[x, y] = q(xy)``.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from .text.ngrams import count_ngrams

DENSE_LIMIT = 2 ** 24  # largest dense tensor (entries) built without being asked for sparse


# ---------------------------------------------------------------------------
# String codes
# ---------------------------------------------------------------------------

def encode(tokens, alphabet_size: int) -> int | np.ndarray:
    """Lexicographic code of a string (1-D) or of each row of a 2-D array of strings."""
    t = np.asarray(tokens, dtype=np.int64)
    code = np.zeros(t.shape[:-1], dtype=np.int64)
    for j in range(t.shape[-1]):
        code = code * alphabet_size + t[..., j]
    return int(code) if code.ndim == 0 else code


def decode(codes, alphabet_size: int, length: int) -> np.ndarray:
    """Inverse of ``encode``: codes (...) -> strings (..., length)."""
    c = np.asarray(codes, dtype=np.int64)
    out = np.empty(c.shape + (length,), dtype=np.int64)
    for j in range(length - 1, -1, -1):
        c, out[..., j] = np.divmod(c, alphabet_size)
    return out


def _rng(rng) -> np.random.Generator:
    return rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)


def _check_length(n, name="n", minimum=0) -> int:
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) or n < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {n!r}")
    return int(n)


# ---------------------------------------------------------------------------
# Base class
# ---------------------------------------------------------------------------

class Language:
    """A family of fundamental tensors A_n over an alphabet Σ = {0, …, V-1}.

    Subclasses implement ``prob(n)``; ``joint``, ``sample`` and ``describe`` have generic
    (dense) fall-backs."""

    alphabet_size: int

    def prob(self, n: int) -> np.ndarray:
        """The fundamental tensor A_n (Def 3.1): dense array of shape (V,)*n, entry q(σ_1…σ_n)."""
        raise NotImplementedError

    def joint(self, k: int, l: int, sparse: bool | None = None):
        """q(xy) over histories x ∈ Σ^k (rows) and continuations y ∈ Σ^l (columns):
        A_{k+l} reshaped to (V^k, V^l). ``sparse=None`` chooses CSR above DENSE_LIMIT entries."""
        k, l = _check_length(k, "k", 1), _check_length(l, "l", 1)
        V = self.alphabet_size
        A = self.prob(k + l).reshape(V ** k, V ** l)
        return sp.csr_matrix(A) if sparse else A

    def sample(self, n_sequences: int, length: int, rng=None) -> np.ndarray:
        """i.i.d. strings of the given length, shape (n_sequences, length), drawn from A_length."""
        n, length = _check_length(n_sequences, "n_sequences"), _check_length(length, "length", 1)
        p = self.prob(length).ravel()
        codes = _rng(rng).choice(p.size, size=n, p=p / p.sum())
        return decode(codes, self.alphabet_size, length)

    def conditional(self, k: int, l: int) -> np.ndarray:
        """q(y|x) = A_{k+l}[x, y] / A_k[x] with A_k taken from the tensor of length k itself (not
        from the row sums of A_{k+l}: the two agree exactly when the language condition holds).
        Histories with q(x) = 0 get a zero row. Dense, shape (V^k, V^l)."""
        k, l = _check_length(k, "k", 1), _check_length(l, "l", 1)
        J = self.joint(k, l, sparse=False)
        qx = self.prob(k).ravel()
        return np.divide(J, qx[:, None], out=np.zeros_like(J), where=qx[:, None] > 0)

    def sample_pairs(self, n_pairs: int, k: int, l: int, rng=None) -> tuple[np.ndarray, np.ndarray]:
        """i.i.d. pairs (x, y) ~ q(xy) as codes: strings of length k + l split after k tokens.
        Returns (history codes in Σ^k, continuation codes in Σ^l), each of length n_pairs."""
        k, l = _check_length(k, "k", 1), _check_length(l, "l", 1)
        s = self.sample(n_pairs, k + l, rng=rng)
        return encode(s[:, :k], self.alphabet_size), encode(s[:, k:], self.alphabet_size)

    def describe(self) -> str:
        return f"{type(self).__name__}(|Σ|={self.alphabet_size})"

    def __repr__(self) -> str:
        return self.describe()

    def _check_dense(self, n: int) -> None:
        if self.alphabet_size ** n > DENSE_LIMIT:
            raise ValueError(f"A_{n} has {self.alphabet_size}^{n} entries (> DENSE_LIMIT = {DENSE_LIMIT}); "
                             f"use joint(k, l, sparse=True)")


class TensorLanguage(Language):
    """Explicit tensors A_1, …, A_N (A_n of shape (V,)*n). Not checked: use ``is_language``."""

    def __init__(self, tensors, name: str = "tensors"):
        self.tensors = [np.asarray(A, dtype=np.float64) for A in tensors]
        if not self.tensors:
            raise ValueError("need at least one tensor A_1")
        self.alphabet_size = self.tensors[0].shape[0]
        for n, A in enumerate(self.tensors, start=1):
            if A.shape != (self.alphabet_size,) * n:
                raise ValueError(f"A_{n} must have shape {(self.alphabet_size,) * n}, got {A.shape}")
        self.name = name

    def prob(self, n: int) -> np.ndarray:
        n = _check_length(n, "n", 1)
        if n > len(self.tensors):
            raise ValueError(f"only A_1..A_{len(self.tensors)} are given, asked for A_{n}")
        return self.tensors[n - 1]

    def describe(self) -> str:
        return f"TensorLanguage({self.name}, |Σ|={self.alphabet_size}, N={len(self.tensors)})"


# ---------------------------------------------------------------------------
# The language condition (Def 3.2)
# ---------------------------------------------------------------------------

@dataclass
class LanguageCheck:
    """Result of ``is_language``: violations[n] = max |Σ_σ A_{n+1}[…, σ] − A_n| (A_0 = 1)."""

    max_violation: float
    violations: dict[int, float]
    min_entry: float
    first_position: dict[int, float] | None = None  # same, marginalising the first position
    tol: float = 1e-12

    @property
    def ok(self) -> bool:
        return self.max_violation <= self.tol and self.min_entry >= -self.tol

    def __bool__(self) -> bool:
        return self.ok


def marginalise(A, positions) -> np.ndarray:
    """Apply the "sum" functional e_σ ↦ 1 at the given positions (0-based) of a tensor A_n.

    Summing A_{n+1} over its last position gives A_n for a language (Def 3.2); summing over any
    set of positions gives the marginal law of the remaining positions (their order is kept)."""
    A = np.asarray(A, dtype=np.float64)
    given = [int(p) for p in np.atleast_1d(positions)]
    if any(not -A.ndim <= p < A.ndim for p in given):
        raise ValueError(f"positions must lie in [-{A.ndim}, {A.ndim}) for A_{A.ndim}, got {positions!r}")
    pos = tuple(sorted({p % A.ndim for p in given}))
    return A.sum(axis=pos) if pos else A.copy()


def window_frequencies(tokens, N: int, alphabet_size: int | None = None) -> TensorLanguage:
    """Empirical tensors of one finite token sequence: A_n[w] = (#windows of length n equal to w) /
    (#windows of length n), n = 1..N. A finite text is *not* exactly a language: the last window
    of length n has no continuation, so summing A_{n+1} over its last position misses it, and
    the language condition fails by at most 1/(T − n) (T the sequence length)."""
    toks = np.asarray(tokens, dtype=np.int64).ravel()
    N = _check_length(N, "N", 1)
    V = int(alphabet_size) if alphabet_size is not None else int(toks.max()) + 1
    if toks.size <= N:
        raise ValueError(f"need more than N = {N} tokens, got {toks.size}")
    if V ** N > DENSE_LIMIT:
        raise ValueError(f"V^N = {V}^{N} entries exceed DENSE_LIMIT = {DENSE_LIMIT}")
    tensors = []
    for n in range(1, N + 1):
        windows = np.lib.stride_tricks.sliding_window_view(toks, n)
        counts = np.bincount(encode(windows, V), minlength=V ** n).astype(np.float64)
        tensors.append((counts / counts.sum()).reshape((V,) * n))
    return TensorLanguage(tensors, name=f"window frequencies of {toks.size} tokens")


def is_language(lang, N: int, tol: float = 1e-12, first_position: bool = False) -> LanguageCheck:
    """Check Def 3.2 for A_1..A_N: summing A_{n+1} over its last position gives A_n, n = 0..N-1.

    ``lang`` is a ``Language`` or a list [A_1, …, A_N]. With ``first_position=True`` also
    report the same check for the first position (a stationary source passes both)."""
    N = _check_length(N, "N", 1)
    if not isinstance(lang, Language):
        lang = TensorLanguage(lang)
    A = [np.ones(())] + [lang.prob(n) for n in range(1, N + 1)]
    last = {n: float(np.max(np.abs(marginalise(A[n + 1], -1) - A[n]))) for n in range(N)}
    first = {n: float(np.max(np.abs(marginalise(A[n + 1], 0) - A[n]))) for n in range(N)} if first_position else None
    worst = max(list(last.values()) + (list(first.values()) if first else []))
    return LanguageCheck(worst, last, float(min(a.min() for a in A[1:])), first, tol)


# ---------------------------------------------------------------------------
# Hidden Markov models (the common exact representation)
# ---------------------------------------------------------------------------

def stationary_distribution(P) -> np.ndarray:
    """The stationary distribution π = π P of an irreducible row-stochastic matrix P (S×S).

    Solves (I − P)ᵀ π = 0 with the last equation replaced by Σ π = 1 (sparse LU);
    raises if the result is not a stationary distribution (e.g. P is reducible)."""
    P = sp.csr_matrix(P, dtype=np.float64)
    S = P.shape[0]
    if S == 1:
        return np.ones(1)
    A = (sp.identity(S, format="csr") - P).T.tolil()
    A[S - 1, :] = np.ones(S)
    b = np.zeros(S)
    b[-1] = 1.0
    with warnings.catch_warnings():          # a singular system (reducible chain) is reported below
        warnings.simplefilter("ignore")
        pi = spla.spsolve(A.tocsc(), b)
    finite = np.all(np.isfinite(pi))
    if not finite or np.abs(P.T @ pi - pi).max() > 1e-10 or pi.min() < -1e-10:
        raise ValueError("no unique stationary distribution (singular system or negative solution); "
                         "is the chain irreducible? give an explicit initial distribution instead")
    pi = np.clip(pi, 0.0, None)
    return pi / pi.sum()


class HMM(Language):
    """q(σ_1…σ_n) = π T_{σ_1}⋯T_{σ_n} 1 with T_σ[s, s'] = P(emit σ, move to s' | s).

    transfer : array (V, S, S), or a list of V (S, S) matrices (dense or sparse), with
               T_σ ≥ 0 and Σ_σ T_σ row-stochastic.
    initial  : distribution over the S hidden states, or "stationary" (the stationary
               distribution of Σ_σ T_σ: then the language is stationary).
    """

    def __init__(self, transfer, initial="stationary", name: str = "HMM"):
        mats = [sp.csr_matrix(T, dtype=np.float64) for T in transfer]
        if not mats:
            raise ValueError("transfer needs at least one token")
        self.alphabet_size, self.n_states = len(mats), mats[0].shape[0]
        S = self.n_states
        if any(T.shape != (S, S) for T in mats):
            raise ValueError(f"every T_σ must have shape ({S}, {S})")
        # T_cat[s, σ·S + s'] = T_σ[s, s']: one sparse matrix drives forward passes and sampling
        self.T_cat = sp.hstack(mats, format="csr")
        self.T_cat.eliminate_zeros()
        self.T_cat.sort_indices()
        if self.T_cat.nnz and self.T_cat.data.min() < 0:
            raise ValueError("transfer matrices must be non-negative")
        rows = np.asarray(self.T_cat.sum(axis=1)).ravel()
        if np.abs(rows - 1).max() > 1e-12:
            raise ValueError(f"Σ_σ T_σ must be row-stochastic (max |row sum − 1| = {np.abs(rows - 1).max():.1e})")
        # emit[s, σ] = (T_σ 1)[s] = P(next token σ | state s)
        self.emit = np.column_stack([np.asarray(T.sum(axis=1)).ravel() for T in mats])
        if isinstance(initial, str):
            if initial != "stationary":
                raise ValueError(f"initial must be a distribution or 'stationary', got {initial!r}")
            initial = stationary_distribution(sum(mats))
            self.start = "stationary"
        else:
            self.start = "given"
        initial = np.asarray(initial, dtype=np.float64)
        if initial.shape != (S,) or initial.min() < 0 or abs(initial.sum() - 1) > 1e-12:
            raise ValueError(f"initial must be a probability vector of length {S}")
        self.initial = initial
        self.name = name

    # -- exact probabilities ------------------------------------------------
    def _forward_dense(self, n: int) -> np.ndarray:
        """q of every string of length n, as a flat vector of length V^n."""
        S, V = self.n_states, self.alphabet_size
        if V ** (n - 1) * S > 4 * DENSE_LIMIT:         # too many forward vectors: go through the sparse pass
            out = np.zeros(V ** n)
            codes, p = self._forward_sparse(n)
            out[codes] = p
            return out
        F = self.initial[None, :]                      # forward vectors π T_{w}, one row per string w
        T_t = self.T_cat.T.tocsr()
        for _ in range(n - 1):
            F = np.ascontiguousarray((T_t @ F.T).T).reshape(-1, S)  # row w·V + σ: π T_w T_σ
        return (F @ self.emit).ravel()                 # last step without materialising states

    def _forward_sparse(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(codes, probs) of the strings of length n with q > 0, codes sorted."""
        S, V = self.n_states, self.alphabet_size
        if V ** n > np.iinfo(np.int64).max:
            raise ValueError(f"V^n = {V}^{n} does not fit in int64 codes")
        codes, F = np.zeros(1, dtype=np.int64), sp.csr_matrix(self.initial[None, :])
        for _ in range(n):
            G = (F @ self.T_cat).tocoo()
            G.eliminate_zeros()
            sigma, s = np.divmod(G.col, S)
            uniq, inv = np.unique(codes[G.row] * V + sigma, return_inverse=True)
            F = sp.csr_matrix((G.data, (inv.ravel(), s)), shape=(len(uniq), S))
            codes = uniq
        return codes, np.asarray(F.sum(axis=1)).ravel()

    def prob(self, n: int) -> np.ndarray:
        n = _check_length(n, "n", 1)
        self._check_dense(n)
        return self._forward_dense(n).reshape((self.alphabet_size,) * n)

    def joint(self, k: int, l: int, sparse: bool | None = None):
        k, l = _check_length(k, "k", 1), _check_length(l, "l", 1)
        V = self.alphabet_size
        if sparse is None:
            sparse = V ** (k + l) > DENSE_LIMIT
        if not sparse:
            self._check_dense(k + l)
            return self._forward_dense(k + l).reshape(V ** k, V ** l)
        codes, p = self._forward_sparse(k + l)
        x, y = np.divmod(codes, V ** l)
        return sp.csr_matrix((p, (x, y)), shape=(V ** k, V ** l))

    def string_prob(self, tokens) -> float:
        """q(σ_1…σ_n) of one string, π T_{σ_1}⋯T_{σ_n} 1."""
        S, f = self.n_states, self.initial
        for t in np.asarray(tokens, dtype=np.int64):
            f = self.T_cat[:, t * S:(t + 1) * S].T @ f
        return float(f.sum())

    # -- sampling ------------------------------------------------------------
    def sample(self, n_sequences: int, length: int, rng=None) -> np.ndarray:
        """Run n_sequences independent copies of the process for `length` steps (vectorised).

        Each step draws the pair (σ, s') from row s of T_cat by inverting its cumulative sum."""
        n, length = _check_length(n_sequences, "n_sequences"), _check_length(length, "length", 1)
        rng, S = _rng(rng), self.n_states
        T = self.T_cat
        cum = np.cumsum(T.data)
        start = np.concatenate([[0.0], cum])[T.indptr[:-1]]           # mass before each row
        state = rng.choice(S, size=n, p=self.initial)
        out = np.empty((n, length), dtype=np.int64)
        for t in range(length):
            target = start[state] + rng.random(n) * (cum[T.indptr[state + 1] - 1] - start[state])
            j = np.searchsorted(cum, target, side="right")
            j = np.clip(j, T.indptr[state], T.indptr[state + 1] - 1)
            out[:, t], state = np.divmod(T.indices[j], S)
        return out

    def describe(self) -> str:
        return f"{self.name}(|Σ|={self.alphabet_size}, {self.n_states} hidden states, {self.start} start)"


class MarkovChain(HMM):
    """Order-r Markov chain: P(σ_{t} | σ_{t-r}…σ_{t-1}) = transition[code(window), σ_t].

    transition : (V^r, V) row-stochastic; r = 0 is an i.i.d. source (shape (1, V)).
    initial    : "stationary", or the distribution of the first r tokens (length V^r).

    As an HMM the hidden state is the window of the *next* r tokens s_t = σ_t…σ_{t+r-1}: the
    state emits its first token and moves to σ_{t+1}…σ_{t+r} with probability
    P(σ_{t+r} | s_t). So A_n for n < r are the marginals of the initial window distribution.
    """

    def __init__(self, transition, initial="stationary", name: str | None = None):
        P = np.asarray(transition, dtype=np.float64)
        if P.ndim != 2:
            raise ValueError(f"transition must be 2-D (V^r, V), got shape {P.shape}")
        V = P.shape[1]
        r = round(math.log(P.shape[0], V)) if P.shape[0] > 1 else 0
        if V ** r != P.shape[0]:
            raise ValueError(f"transition has {P.shape[0]} rows, not a power of V = {V}")
        if P.min() < 0 or np.abs(P.sum(1) - 1).max() > 1e-12:
            raise ValueError("transition rows must be probability vectors")
        self.order, self.transition = r, P
        self.label = name or "MarkovChain"
        if r == 0:
            transfer = [sp.csr_matrix([[P[0, s]]]) for s in range(V)]
        else:
            S, W = V ** r, V ** (r - 1)
            s = np.repeat(np.arange(S), V)                 # current window
            tau = np.tile(np.arange(V), S)                 # token appended
            first, rest = np.divmod(s, W)                  # emitted token, window tail
            transfer = [sp.csr_matrix((P[s, tau] * (first == sig), (s, rest * V + tau)), shape=(S, S))
                        for sig in range(V)]
        super().__init__(transfer, initial, self.label)

    # -- closed-form probabilities -------------------------------------------------------
    # The look-ahead window makes the hidden state hold future tokens, so the generic HMM
    # forward pass carries V^r states per prefix; the chain's own product formula does not:
    #     q(σ_1…σ_n) = q(σ_1…σ_r) · Π_{t>r} P(σ_t | σ_{t-r}…σ_{t-1}).
    def _forward_dense(self, n: int) -> np.ndarray:
        V, r, P = self.alphabet_size, self.order, self.transition
        if n <= r:                                      # marginal of the first window
            return self.initial.reshape(V ** n, V ** (r - n)).sum(axis=1)
        out = self.initial                              # q of the first r tokens (code = window)
        for _ in range(r, n):                           # append one token: code w·V + σ
            out = (out.reshape(-1, V ** r)[:, :, None] * P[None, :, :]).ravel()
        return out

    def _forward_sparse(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        if self.alphabet_size ** n > 4 * DENSE_LIMIT:
            return super()._forward_sparse(n)
        p = self._forward_dense(n)
        codes = np.flatnonzero(p)
        return codes.astype(np.int64), p[codes]

    def describe(self) -> str:
        return f"{self.label}(order={self.order}, |Σ|={self.alphabet_size}, {self.start} start)"


class Mixture(HMM):
    """Σ_i w_i q_i: a block-diagonal HMM whose initial distribution is (w_i π_i)_i."""

    def __init__(self, components, weights, name: str = "Mixture"):
        comps = list(components)
        w = np.asarray(weights, dtype=np.float64)
        if len(comps) != len(w) or not comps or w.min() < 0 or abs(w.sum() - 1) > 1e-12:
            raise ValueError("weights must be a probability vector, one weight per component")
        V = comps[0].alphabet_size
        if any(c.alphabet_size != V for c in comps) or not all(isinstance(c, HMM) for c in comps):
            raise ValueError("components must be HMM-based languages over the same alphabet")
        transfer = [sp.block_diag([c.T_cat[:, s * c.n_states:(s + 1) * c.n_states] for c in comps])
                    for s in range(V)]
        super().__init__(transfer, np.concatenate([wi * c.initial for wi, c in zip(w, comps)]), name)
        self.components, self.weights = comps, w
        self.start = "mixed"

    def describe(self) -> str:
        inner = ", ".join(f"{w:.3g}·{c.describe()}" for w, c in zip(self.weights, self.components))
        return f"Mixture({inner})"


# ---------------------------------------------------------------------------
# Random and fitted constructors
# ---------------------------------------------------------------------------

def random_markov_chain(alphabet_size: int, order: int, rng=None, concentration: float = 1.0,
                        initial="stationary") -> MarkovChain:
    """Order-r chain with each row of the transition table ~ Dirichlet(concentration · 1)."""
    V, r = _check_length(alphabet_size, "alphabet_size", 1), _check_length(order, "order")
    P = _rng(rng).dirichlet(np.full(V, float(concentration)), size=V ** r)
    return MarkovChain(P, initial)


def random_hmm(alphabet_size: int, n_states: int, rng=None, concentration: float = 1.0,
               emission_concentration: float | None = None, initial="stationary") -> HMM:
    """Classical HMM z_{t+1} ~ A[z_t], σ_t ~ E[z_t] with Dirichlet rows; T_σ = diag(E[:, σ]) A."""
    V, S = _check_length(alphabet_size, "alphabet_size", 1), _check_length(n_states, "n_states", 1)
    rng = _rng(rng)
    A = rng.dirichlet(np.full(S, float(concentration)), size=S)
    E = rng.dirichlet(np.full(V, float(emission_concentration or concentration)), size=S)
    hmm = HMM([E[:, s, None] * A for s in range(V)], initial, name="HMM")
    hmm.hidden_transition, hmm.emission = A, E
    return hmm


def mixture(components, weights) -> Mixture:
    return Mixture(components, weights)


def fit_markov_chain(tokens, order: int, alpha: float = 0.1, vocab_size: int | None = None,
                     doc_offsets=None, initial="stationary") -> MarkovChain:
    """Order-r chain fitted to a token stream with additive smoothing:

        P(σ | w) = (c(wσ) + α) / (c(w) + α V),   c from lib.text.ngrams.count_ngrams(tokens, r, 1).

    Histories never seen get the uniform distribution. α > 0 makes every transition positive,
    so the chain is irreducible and the stationary start exists."""
    r = _check_length(order, "order")
    toks = np.asarray(tokens)
    V = int(vocab_size) if vocab_size is not None else int(toks.max()) + 1
    if alpha < 0:
        raise ValueError(f"alpha must be >= 0, got {alpha}")
    if V ** (r + 1) > DENSE_LIMIT:
        raise ValueError(f"V^(r+1) = {V}^{r + 1} transition entries exceed DENSE_LIMIT = {DENSE_LIMIT}")
    C = np.zeros((V ** r, V))
    if r == 0:
        C[0] = np.bincount(toks.ravel(), minlength=V)
    else:
        nc = count_ngrams(toks, r, 1, doc_offsets=doc_offsets, vocab_size=V)
        coo = nc.counts.tocoo()
        C[encode(nc.prefixes, V)[coo.row], nc.suffixes[coo.col, 0]] = coo.data
    C += alpha
    rowsum = C.sum(1, keepdims=True)
    P = np.where(rowsum > 0, C / np.where(rowsum > 0, rowsum, 1), 1.0 / V)
    chain = MarkovChain(P, initial, name=f"fitted MarkovChain[α={alpha}, {int(C.sum() - alpha * C.size)} counts]")
    return chain


class CorpusLanguage(MarkovChain):
    """An order-r Markov chain fitted to a corpus over a reduced alphabet (``corpus_language``).

    ``symbols[i]`` is the original token id of symbol i, −1 for the catch-all symbol OTHER
    (the last one, present when some tokens were merged); ``coverage`` is the fraction of
    corpus tokens that kept their own symbol; ``n_tokens`` the tokens the chain was fitted on."""

    symbols: np.ndarray
    coverage: float
    n_tokens: int
    alpha: float

    def symbol_labels(self, tokenizer=None) -> list[str]:
        """A printable label per symbol: the token's text (``tokenizer.token_strings``, which shows
        a space as ␣ and a newline as ↵) or its id, and "OTHER" for the catch-all symbol."""
        labels = []
        for sid in self.symbols:
            if sid < 0:
                labels.append("OTHER")
            elif tokenizer is not None:
                labels.append(tokenizer.token_strings([int(sid)])[0])
            else:
                labels.append(str(int(sid)))
        return labels

    def describe(self) -> str:
        other = " + OTHER" if (self.symbols < 0).any() else ""
        return (f"CorpusLanguage(order={self.order}, {int((self.symbols >= 0).sum())} tokens{other}, "
                f"α={self.alpha}, {self.n_tokens:,} corpus tokens, coverage {self.coverage:.3f})")


def reduce_vocabulary(tokens, n_symbols: int, vocab_size: int | None = None):
    """Map a token stream onto n_symbols symbols: the n_symbols − 1 most frequent tokens keep a
    symbol each (0 = most frequent, ties by token id) and every other token becomes OTHER
    (symbol n_symbols − 1). If the stream has at most n_symbols distinct tokens, each keeps its
    own symbol and there is no OTHER.

    Returns (mapped tokens (int64), symbols: original id of each symbol, −1 for OTHER)."""
    toks = np.asarray(tokens, dtype=np.int64).ravel()
    n_symbols = _check_length(n_symbols, "n_symbols", 2)
    V = int(vocab_size) if vocab_size is not None else int(toks.max()) + 1 if toks.size else 1
    counts = np.bincount(toks, minlength=V)
    order = np.lexsort((np.arange(V), -counts))               # by count, descending; ties by id
    seen = order[counts[order] > 0]
    if len(seen) <= n_symbols:
        keep, symbols = seen, seen.copy()
    else:
        keep = seen[:n_symbols - 1]
        symbols = np.append(keep, -1)
    table = np.full(V, len(symbols) - 1, dtype=np.int64)
    table[keep] = np.arange(len(keep))
    return table[toks], symbols.astype(np.int64)


def corpus_language(tokens, n_symbols: int, order: int, alpha: float = 0.1, doc_offsets=None,
                    vocab_size: int | None = None, initial="stationary") -> CorpusLanguage:
    """A real text as an *exact* language: reduce the stream to ``n_symbols`` symbols
    (``reduce_vocabulary``) and fit an order-r chain with additive smoothing α
    (``fit_markov_chain``, counts within documents). α > 0 makes every transition positive, so
    the chain is irreducible, its stationary start exists, every string has q > 0 and the
    source is stationary (it passes the language condition for the first position too).

    Two approximations separate it from the text: the alphabet (rare tokens are merged) and the
    order (the chain forgets everything older than r tokens). In exchange every q(xy) is exact."""
    mapped, symbols = reduce_vocabulary(tokens, n_symbols, vocab_size)
    chain = fit_markov_chain(mapped, order, alpha=alpha, vocab_size=len(symbols), doc_offsets=doc_offsets,
                             initial=initial)
    lang = CorpusLanguage.__new__(CorpusLanguage)
    lang.__dict__.update(chain.__dict__)
    lang.symbols = symbols
    lang.coverage = float(np.mean(symbols[mapped] >= 0)) if mapped.size else 0.0
    lang.n_tokens = int(mapped.size)
    lang.alpha = float(alpha)
    lang.label = "CorpusLanguage"
    return lang


# ---------------------------------------------------------------------------
# Planted bigrams (Defs 5.1, 5.5)
# ---------------------------------------------------------------------------

@dataclass
class PlantedBigram:
    """A planted (collective) bigram (S, y): histories S ⊂ Σ^k, continuation y ∈ Σ^l.

    With |S| = 1 it is an absolute bigram. ``rates`` are the per-step probabilities, from the
    background, of starting each history word h_j ∈ S (always followed by y when noise = 0)."""

    histories: np.ndarray          # (m, k) tokens of the history words h_1..h_m
    continuation: np.ndarray       # (l,) tokens of y
    rates: np.ndarray              # (m,)
    kind: str = field(default="collective")


@dataclass
class PredictedMode:
    """Lemma 5.2 / 5.6: σ = √q(S); ṽ ∝ (√q(x))_{x∈S} (unit); u = e_y."""

    kind: str
    rows: np.ndarray               # codes of x ∈ S in Σ^k
    col: int                       # code of y in Σ^l
    q_rows: np.ndarray             # q(x), x ∈ S
    sigma: float                   # √q(S)

    # rows and col index the full Σ^k × Σ^l joint (before Modes drops histories with q(x) = 0)
    def v_tilde(self, n_rows: int) -> np.ndarray:
        out = np.zeros(n_rows)
        out[self.rows] = np.sqrt(self.q_rows / self.q_rows.sum())
        return out

    def u(self, n_cols: int) -> np.ndarray:
        out = np.zeros(n_cols)
        out[self.col] = 1.0
        return out


class PlantedLanguage(HMM):
    """A background order-1 chain on tokens 0..B-1 plus planted bigrams on reserved tokens.

    Construction (tokens of every planted word are reserved and distinct). Bigram c has
    history words h_{c,1..m} ∈ Σ^k and one continuation y_c ∈ Σ^l. Hidden states: background
    state b ("the last background token was b"), (c, j, i) ("inside h_{c,j}, next emit its
    i-th token") and (c, i) ("next emit y_c[i]"). From background state b:

      * with probability ε_{c,j}: emit h_{c,j}[0] and continue deterministically through
        h_{c,j} and then y_c; after the last token resume the background at b' ~ π_bg;
      * with probability η Σ_j ε_{c,j}  (leak, noise η): emit y_c[0] directly and finish y_c;
      * otherwise (probability 1 − (1+η) Σ ε): emit a background token b' ~ P_bg(b, ·).

    Inside a word each emission is replaced with probability η (abort, noise) by a background
    token b' ~ π_bg, which ends the word. Inside a history word (k ≥ 2) the word is moreover
    abandoned the same way with probability ``history_abort`` at each token after the first:
    this does not touch Defs 5.1/5.5 (a history that is not completed is not in S), but it
    stops the shifted windows (t, h[0]…) → (h[1]…, y[0]…) from being exact bigrams with the
    same mass, which would make the planted singular values degenerate.

    With η = 0 the definitions hold exactly for the chosen (k, l): every occurrence of h_{c,j}
    (its first token occurs nowhere else) is followed by y_c, and y_c[0] is only emitted right
    after some h_{c,j}, so the k tokens before y_c are a history in S_c. Hence (S_c, y_c) is a
    collective bigram (absolute if m = 1) and Lemmas 5.2 / 5.6 hold to rounding. η > 0 breaks
    (a) by aborts and (b) by leaks. The hidden chain is irreducible (P_bg > 0) and the start
    is stationary, so the source is stationary.
    """

    def __init__(self, k: int, l: int, background, absolute=(0.05,), collective=(), noise: float = 0.0,
                 history_abort: float = 0.5, name: str = "PlantedLanguage"):
        k, l = _check_length(k, "k", 1), _check_length(l, "l", 1)
        P_bg = np.asarray(background, dtype=np.float64)
        B = P_bg.shape[0]
        if P_bg.shape != (B, B) or P_bg.min() < 0 or np.abs(P_bg.sum(1) - 1).max() > 1e-12:
            raise ValueError("background must be a row-stochastic (B, B) matrix")
        if not 0 <= noise <= 1:
            raise ValueError(f"noise must lie in [0, 1], got {noise}")
        if not 0 <= history_abort < 1:
            raise ValueError(f"history_abort must lie in [0, 1), got {history_abort}")
        go_on = (1 - noise) * (1 - history_abort)     # continue a history word
        groups = [[float(e)] for e in absolute] + [[float(e) for e in g] for g in collective]
        if not groups or any(not g or min(g) <= 0 for g in groups):
            raise ValueError("every planted bigram needs at least one positive rate")
        total = (1 + noise) * sum(map(sum, groups))
        if total >= 1:
            raise ValueError(f"(1 + noise) · Σ rates = {total:.3g} must be < 1")
        pi_bg = stationary_distribution(P_bg)

        # tokens and hidden states
        self.k, self.l, self.noise, self.background = k, l, float(noise), P_bg
        self.history_abort = float(history_abort)
        self.bigrams: list[PlantedBigram] = []
        tok, S = B, B
        hist_state, cont_state = [], []       # state ids: hist_state[c][j][i], cont_state[c][i]
        for g, rates in enumerate(groups):
            m = len(rates)
            hist = np.arange(tok, tok + m * k).reshape(m, k)
            cont = np.arange(tok + m * k, tok + m * k + l)
            tok += m * k + l
            self.bigrams.append(PlantedBigram(hist, cont, np.array(rates),
                                              "absolute" if g < len(absolute) else "collective"))
            hist_state.append([list(range(S + j * (k - 1), S + (j + 1) * (k - 1))) for j in range(m)])
            S += m * (k - 1)
            cont_state.append(list(range(S, S + l)))
            S += l
        V = tok
        rows, cols, vals = [], [], []          # entries of T_cat: (s, σ·S + s', value)

        def add(s, sigma, s_next, value):      # s_next may be an array of targets with weights
            s_next, value = np.atleast_1d(s_next), np.broadcast_to(value, np.shape(np.atleast_1d(s_next)))
            rows.extend([s] * len(s_next)); cols.extend((sigma * S + s_next).tolist()); vals.extend(value.tolist())

        bg = np.arange(B)
        for b in range(B):
            for tau in range(B):
                add(b, tau, tau, (1 - total) * P_bg[b, tau])
        for c, bi in enumerate(self.bigrams):
            for j, h in enumerate(bi.histories):   # start a history word
                chain = hist_state[c][j] + [cont_state[c][0]]
                for b in range(B):
                    add(b, h[0], chain[0], bi.rates[j])
                for i in range(1, k):                  # inside h: next emit h[i]
                    add(chain[i - 1], h[i], chain[i], go_on)
                    for tau in range(B):
                        add(chain[i - 1], tau, tau, (1 - go_on) * pi_bg[tau])
            cs = cont_state[c]
            for b in range(B):                         # leak: y_c starts without a history
                if noise > 0:
                    add(b, bi.continuation[0], cs[1] if l > 1 else bg, noise * bi.rates.sum() *
                        (1.0 if l > 1 else pi_bg))
            for i in range(l):                         # inside y: next emit y[i]
                target = cs[i + 1] if i + 1 < l else bg
                add(cs[i], bi.continuation[i], target, (1 - noise) * (1.0 if i + 1 < l else pi_bg))
                for tau in range(B):
                    add(cs[i], tau, tau, noise * pi_bg[tau])
        T_cat = sp.csr_matrix((vals, (rows, cols)), shape=(S, V * S))   # duplicates are summed
        super().__init__([T_cat[:, s * S:(s + 1) * S] for s in range(V)], "stationary", name)

    def predicted_modes(self) -> list[PredictedMode]:
        """The modes Lemmas 5.2 / 5.6 predict for joint(k, l), one per planted bigram (exact when
        noise = 0): σ = √q(S), ṽ ∝ √q(x) on S, u = e_y."""
        V, out = self.alphabet_size, []
        for bi in self.bigrams:
            q_rows = np.array([self.string_prob(h) for h in bi.histories])
            out.append(PredictedMode(bi.kind, encode(bi.histories, V), encode(bi.continuation, V),
                                     q_rows, float(np.sqrt(q_rows.sum()))))
        return out

    def describe(self) -> str:
        kinds = ", ".join(f"{b.kind}(|S|={len(b.rates)}, rate={b.rates.sum():.3g})" for b in self.bigrams)
        return (f"PlantedLanguage(k={self.k}, l={self.l}, |Σ|={self.alphabet_size}, background "
                f"{self.background.shape[0]} tokens, noise={self.noise}, bigrams: {kinds})")


def planted_language(k: int, l: int, background_size: int = 4, absolute=(0.06, 0.03), collective=((0.02, 0.015),),
                     noise: float = 0.0, rng=None, concentration: float = 1.0,
                     history_abort: float = 0.5) -> PlantedLanguage:
    """PlantedLanguage with a random Dirichlet background chain on `background_size` tokens."""
    B = _check_length(background_size, "background_size", 1)
    P_bg = _rng(rng).dirichlet(np.full(B, float(concentration)), size=B)
    return PlantedLanguage(k, l, P_bg, absolute, collective, noise, history_abort)


def plant_bigrams(k: int, l: int, background=4, absolute=(0.04, 0.01), collective=((0.01, 0.005),),
                  noise: float = 0.0, history_abort: float = 0.5, tol: float = 1e-14,
                  max_iter: int = 200, rng=None, concentration: float = 1.0) -> PlantedLanguage:
    """A ``PlantedLanguage`` whose planted histories have *chosen probabilities* q(h).

    ``background`` is a row-stochastic (B, B) matrix, or an integer B: then its rows are drawn
    from Dirichlet(concentration · 1) with ``rng``.

    ``absolute`` lists q(h) of one history per absolute bigram; ``collective`` lists, per
    collective bigram, q(h_j) of each of its histories (so q(S) = Σ_j q(h_j)). The rates ε of
    ``PlantedLanguage`` are found by the fixed point ε ← ε · q_target / q(ε): q(h) is ε times
    the probability of being in a background state times the probability of completing h, and
    only the middle factor depends on all rates (weakly), so the iteration converges fast.
    With noise = 0, Lemmas 5.2/5.6 then give singular values σ = √q(S) of the chosen sizes."""
    if np.ndim(background) == 0:
        B = _check_length(background, "background", 1)
        background = _rng(rng).dirichlet(np.full(B, float(concentration)), size=B)
    groups = [[float(p)] for p in absolute] + [[float(p) for p in g] for g in collective]
    target = np.array([p for g in groups for p in g])
    if not target.size or target.min() <= 0:
        raise ValueError("every planted history needs a positive probability")
    if target.sum() >= 1:
        raise ValueError(f"the planted probabilities sum to {target.sum():.3g}; they must leave room for the background")

    def build(rates):
        it = iter(rates)
        abs_r = tuple(next(it) for _ in absolute)
        coll_r = tuple(tuple(next(it) for _ in g) for g in collective)
        return PlantedLanguage(k, l, background, abs_r, coll_r, noise, history_abort)

    def achieved(lang):
        return np.concatenate([m.q_rows for m in lang.predicted_modes()])

    rates = target.copy()
    for _ in range(max_iter):
        try:
            lang = build(rates)
        except ValueError as err:
            raise ValueError(f"planted probabilities {target.tolist()} are not reachable: {err}") from None
        q = achieved(lang)
        if np.abs(q / target - 1).max() <= tol:
            return lang
        rates = rates * target / q
    raise RuntimeError(f"plant_bigrams did not converge in {max_iter} iterations "
                       f"(max relative error {np.abs(q / target - 1).max():.2e})")


def bigram_violation(joint, rows, col) -> float:
    """How far (S = rows, y = col) is from a collective bigram (Def 5.5; absolute when |S| = 1):
    max( max_{x∈S} |1 − q(y|x)|, max_{x∉S, q(x)>0} q(y|x) ). Zero iff the definition holds."""
    J = joint.toarray() if sp.issparse(joint) else np.asarray(joint, dtype=np.float64)
    qx = J.sum(1)
    in_S = np.zeros(len(qx), dtype=bool)
    in_S[np.asarray(rows)] = True
    cond = np.divide(J[:, col], qx, out=np.zeros(len(qx)), where=qx > 0)
    return float(max(np.abs(1 - cond[in_S]).max(), cond[~in_S & (qx > 0)].max(initial=0.0)))


def mode_ladder(k: int = 1, l: int = 1, n_bigrams: int = 8, top: float = 0.08, ratio: float = 0.7,
                collective_every: int = 3, background=4, noise: float = 0.0, rng=None) -> PlantedLanguage:
    """A *mode ladder*: planted bigrams whose singular values decay geometrically.

    Bigram i = 0..n_bigrams−1 has q(S_i) = top · ratio^i, so by Lemmas 5.2 / 5.6 (noise = 0)
    its mode has σ_i = √q(S_i) = √top · ratio^{i/2}: a spectrum spread over a known ladder,
    on top of the background chain's own modes. Every ``collective_every``-th bigram
    (i ≡ collective_every − 1) is collective, with two histories holding 60% and 40% of q(S_i);
    the others are absolute. ``background`` is a (B, B) row-stochastic matrix or B (drawn
    from Dirichlet(1) with ``rng``). Built by ``plant_bigrams``, so the q(S_i) are exact."""
    n_bigrams = _check_length(n_bigrams, "n_bigrams", 1)
    if not 0 < ratio < 1:
        raise ValueError(f"parameter 'ratio' must lie in (0, 1); got {ratio!r}")
    if not 0 < top < 1:
        raise ValueError(f"parameter 'top' must lie in (0, 1); got {top!r}")
    every = _check_length(collective_every, "collective_every", 1)
    absolute, collective = [], []
    for i in range(n_bigrams):
        q_s = top * ratio ** i
        if every > 1 and i % every == every - 1:
            collective.append((0.6 * q_s, 0.4 * q_s))
        else:
            absolute.append(q_s)
    return plant_bigrams(k, l, background=background, absolute=tuple(absolute), collective=tuple(collective),
                         noise=noise, rng=rng)
