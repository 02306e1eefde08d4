"""Input Switched Affine Networks (ISANs) and low logit rank.

Golowich, Liu & Shetty, "Sequences of Logits Reveal the Low Rank Structure of
Language Models" (2025), §2, §4 and Appendix C. A language model M over Σ^T is
accessed through *logit queries* (Def C.14): a prefix h ↦ the mean-centred
logits (Def 2.1)

    L_M[z | h] = log Pr_M[z | h] − (1/|Σ|) Σ_{z'} log Pr_M[z' | h],   z ∈ Σ.

An *oracle* below is any callable prefix -> length-|Σ| array of such logits;
``TimeVaryingISAN.next_logits`` is one.

Indexing. The paper counts time from 1: z_t ~ softmax(B_t x_{t-1}), then
x_t = A_{z_t,t} x_{t-1}, t ∈ [T] (Def 4.2). Code counts from 0:

    A[t-1, z] = A_{z,t},   B[t-1] = B_t,   so   z_t ~ softmax(B[t-1] @ x_{t-1}),
                                                 x_t = A[t-1, z_t] @ x_{t-1}.

A history of length t is a tuple of t ints; the next-token logits after it are
B[t] @ x_t. A[T-1] is never used by the distribution over Σ^T (kept so that A
has the paper's T time slices).

Logit matrices. Def 2.2: L_M(H, F)[h, (f, z)] = L_M[z | h∘f], stored with
column f_index·|Σ| + z. Theorem 4.3 is stated with futures Σ^{≤T−t}; a context
h∘f of length T has no next token in a length-T model, so the futures that
exist for histories in Σ^t are Σ^{≤T−1−t} (``all_futures(S, T-1-t)``).

Sequences in Σ^T are enumerated lexicographically, first token most significant:
index(z_1..z_T) = Σ_t z_t |Σ|^{T−t}. Exact enumeration is refused beyond
MAX_STRINGS = 2^24 strings.
"""

from __future__ import annotations

import itertools
from typing import Callable, Sequence

import numpy as np
import scipy.linalg
from scipy.special import log_softmax

Oracle = Callable[[Sequence[int]], np.ndarray]

MAX_STRINGS = 2 ** 24   # exact enumeration of Σ^T: 2^24 float64 log-probs = 128 MiB per model
_BLOCK_FLOATS = 2 ** 22  # working-set budget (floats) of one block in sequence_logprobs
RANK_TOL = 1e-8          # default relative tolerance of the learner's rank tests (Algorithm 3)
EXACT_RANK_TOL = 1e-9    # default relative tolerance of logit_rank and Lemma C.3 (exact models)


# ---------------------------------------------------------------------------
# validation helpers
# ---------------------------------------------------------------------------

def _as_array(name, value, ndim, expected):
    a = np.asarray(value, dtype=float)
    if a.ndim != ndim:
        raise ValueError(f"{name}: expected a {ndim}-d array of shape {expected}, "
                         f"got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name}: all entries must be finite")
    return a


def _check_shape(name, a, shape, expected):
    if a.shape != tuple(shape):
        raise ValueError(f"{name}: expected shape {expected} = {tuple(shape)}, got {a.shape}")


def check_prefix(prefix, alphabet_size, max_len, name="prefix"):
    """``prefix`` as a tuple of ints, each in [0, alphabet_size), of length at most ``max_len``;
    ValueError naming ``name`` otherwise."""
    p = tuple(map(int, prefix))
    if p != tuple(prefix):  # int() truncated a non-integer token such as 1.7
        raise ValueError(f"{name}: tokens must be integers, got {tuple(prefix)}")
    if len(p) > max_len:
        raise ValueError(f"{name}: length must be <= {max_len} (the model has T = "
                         f"{max_len + 1} tokens), got length {len(p)}")
    if any(z < 0 or z >= alphabet_size for z in p):
        raise ValueError(f"{name}: tokens must lie in [0, {alphabet_size}), got {p}")
    return p


def check_positive_int(name, value, minimum=1):
    """``value`` as an int, refused (ValueError naming ``name``) unless it is an integer >= ``minimum``."""
    if int(value) != value or value < minimum:
        raise ValueError(f"{name}: expected an integer >= {minimum}, got {value!r}")
    return int(value)


def check_enumerable(alphabet_size: int, T: int) -> int:
    """Number of strings |Σ|^T; ValueError if above MAX_STRINGS (exact enumeration limit)."""
    n = int(alphabet_size) ** int(T)
    if n > MAX_STRINGS:
        gib = 2 * 8 * n / 2 ** 30
        raise ValueError(
            f"exact enumeration of Σ^T needs |Σ|^T = {alphabet_size}^{T} = {n:,} strings, above "
            f"the limit MAX_STRINGS = 2^24 = {MAX_STRINGS:,}; it would need about {gib:,.1f} GiB "
            f"for the two float64 log-probability vectors alone")
    return n


def centre(logits: np.ndarray) -> np.ndarray:
    """Mean-centre along the last axis (Def 2.1)."""
    return logits - logits.mean(axis=-1, keepdims=True)


# ---------------------------------------------------------------------------
# the models
# ---------------------------------------------------------------------------

class TimeVaryingISAN:
    """Time-varying ISAN of length T (Def 4.2).

    x0: (d,); A: (T, |Σ|, d, d) with x_t = A[t-1, z_t] x_{t-1};
    B: (T, |Σ|, d) with z_t ~ softmax(B[t-1] x_{t-1}).
    """

    def __init__(self, x0, A, B):
        A = _as_array("A", A, 4, "(T, |Σ|, d, d)")
        T, S, d = A.shape[0], A.shape[1], A.shape[2]
        if T < 1 or S < 1 or d < 1:
            raise ValueError(f"A: expected shape (T, |Σ|, d, d) with T, |Σ|, d >= 1, got {A.shape}")
        _check_shape("A", A, (T, S, d, d), "(T, |Σ|, d, d)")
        x0 = _as_array("x0", x0, 1, "(d,)")
        _check_shape("x0", x0, (d,), "(d,) with d from A")
        B = _as_array("B", B, 3, "(T, |Σ|, d)")
        _check_shape("B", B, (T, S, d), "(T, |Σ|, d) with T, |Σ|, d from A")
        self.x0, self.A, self.B = x0, A, B

    d = property(lambda self: self.A.shape[2])
    T = property(lambda self: self.A.shape[0])
    alphabet_size = property(lambda self: self.A.shape[1])

    def __repr__(self):
        return f"TimeVaryingISAN(d={self.d}, |Σ|={self.alphabet_size}, T={self.T})"

    def state(self, prefix) -> np.ndarray:
        """Hidden state x_t after the prefix z_1..z_t (t <= T)."""
        p = check_prefix(prefix, self.alphabet_size, self.T)
        x = self.x0
        for t, z in enumerate(p):
            x = self.A[t, z] @ x
        return x

    def next_logits(self, prefix) -> np.ndarray:
        """Logit query (Def C.14): mean-centred logits L[· | prefix], len(prefix) < T."""
        p = check_prefix(prefix, self.alphabet_size, self.T - 1)
        x = self.x0
        for t, z in enumerate(p):
            x = self.A[t, z] @ x
        return centre(self.B[len(p)] @ x)

    def next_logprobs(self, prefix) -> np.ndarray:
        """Normalised logits log Pr[· | prefix] (the non-centred variant of Remark 1)."""
        return log_softmax(self.next_logits(prefix))

    def sequence_logprobs(self) -> np.ndarray:
        """log Pr[z_1..z_T] for all |Σ|^T strings, lexicographic order (first token most significant)."""
        return _sequence_logprobs(self.x0, self.A, self.B, self.T)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """n i.i.d. sequences, shape (n, T), dtype int64."""
        return _sample(self.x0, self.A, self.B, self.T, n, rng)


class ISAN:
    """Time-invariant ISAN (Def C.1, Foerster et al. 2017).

    x0: (d,); A: (|Σ|, d, d) with x_t = A[z_t] x_{t-1}; B: (|Σ|, d) with z_t ~ softmax(B x_{t-1}).
    It generates sequences of any length; methods that need a length take T.
    """

    def __init__(self, x0, A, B):
        A = _as_array("A", A, 3, "(|Σ|, d, d)")
        S, d = A.shape[0], A.shape[1]
        if S < 1 or d < 1:
            raise ValueError(f"A: expected shape (|Σ|, d, d) with |Σ|, d >= 1, got {A.shape}")
        _check_shape("A", A, (S, d, d), "(|Σ|, d, d)")
        x0 = _as_array("x0", x0, 1, "(d,)")
        _check_shape("x0", x0, (d,), "(d,) with d from A")
        B = _as_array("B", B, 2, "(|Σ|, d)")
        _check_shape("B", B, (S, d), "(|Σ|, d) with |Σ|, d from A")
        self.x0, self.A, self.B = x0, A, B

    d = property(lambda self: self.A.shape[1])
    alphabet_size = property(lambda self: self.A.shape[0])

    def __repr__(self):
        return f"ISAN(d={self.d}, |Σ|={self.alphabet_size})"

    def next_logits(self, prefix) -> np.ndarray:
        p = check_prefix(prefix, self.alphabet_size, float("inf"))
        x = self.x0
        for z in p:
            x = self.A[z] @ x
        return centre(self.B @ x)

    def to_time_varying(self, T: int) -> TimeVaryingISAN:
        """The same model on Σ^T with the time-invariant matrices repeated T times."""
        T = check_positive_int("T", T)
        return TimeVaryingISAN(self.x0, np.broadcast_to(self.A, (T,) + self.A.shape),
                               np.broadcast_to(self.B, (T,) + self.B.shape))

    def sequence_logprobs(self, T: int) -> np.ndarray:
        return self.to_time_varying(T).sequence_logprobs()

    def sample(self, n: int, T: int, rng: np.random.Generator) -> np.ndarray:
        return self.to_time_varying(T).sample(n, rng)


def time_varying_to_isan(model: TimeVaryingISAN) -> ISAN:
    """Fact C.2: a time-varying ISAN (dim d, length T) as an ISAN of dim T·d, same law on Σ^T.

    Block k (0-based) of the state holds x_k; A_z has A_{z,k} (paper's index) on
    block (k, k-1) for k = 1..T-1 and zeros elsewhere; B = [B_1 ... B_T].
    """
    T, S, d = model.T, model.alphabet_size, model.d
    A = np.zeros((S, T * d, T * d))
    for k in range(1, T):
        A[:, k * d:(k + 1) * d, (k - 1) * d:k * d] = model.A[k - 1]
    B = np.concatenate(list(model.B), axis=1)           # (S, T·d)
    x0 = np.zeros(T * d)
    x0[:d] = model.x0
    return ISAN(x0, A, B)


def random_isan(d: int, alphabet_size: int, T: int, rng: np.random.Generator,
                scale: float = 1.0) -> TimeVaryingISAN:
    """Generic time-varying ISAN: x0 a random unit vector, A entries N(0, 1/d)
    (so E‖A x‖² = ‖x‖²), B entries N(0, scale²) (logits of order `scale`)."""
    d = check_positive_int("d", d)
    S = check_positive_int("alphabet_size", alphabet_size)
    T = check_positive_int("T", T)
    x0 = rng.standard_normal(d)
    x0 /= np.linalg.norm(x0)
    A = rng.standard_normal((T, S, d, d)) / np.sqrt(d)
    B = scale * rng.standard_normal((T, S, d))
    return TimeVaryingISAN(x0, A, B)


# ---------------------------------------------------------------------------
# exact enumeration and sampling
# ---------------------------------------------------------------------------

def _expand(X, lp, A, B, t0, T):
    """Breadth-first expansion of states X (m, d) with log-probs lp (m,) from time t0 to T."""
    d = A.shape[2]
    for t in range(t0, T):
        lp = (lp[:, None] + log_softmax(X @ B[t].T, axis=1)).reshape(-1)
        if t < T - 1:
            X = np.einsum("zij,mj->mzi", A[t], X).reshape(-1, d)
    return lp


def _sequence_logprobs(x0, A, B, T):
    S, d = A.shape[1], A.shape[2]
    n = check_enumerable(S, T)
    # split after k tokens so that one block's expansion (≈ S^{T-k}·d floats per root) fits the budget
    k = 0
    while k < T - 1 and S ** (T - k) * (d + 1) > _BLOCK_FLOATS:
        k += 1
    X, lp = x0[None, :], np.zeros(1)
    for t in range(k):  # enumerate the first k tokens (states only)
        lp = (lp[:, None] + log_softmax(X @ B[t].T, axis=1)).reshape(-1)
        X = np.einsum("zij,mj->mzi", A[t], X).reshape(-1, d)
    per_root = S ** (T - k)
    roots = max(1, _BLOCK_FLOATS // (per_root * (d + 1)))
    out = np.empty(n)
    for i in range(0, len(lp), roots):
        out[i * per_root:(i + roots) * per_root] = _expand(X[i:i + roots], lp[i:i + roots], A, B, k, T)
    return out


def _sample(x0, A, B, T, n, rng):
    n = check_positive_int("n", n, minimum=0)
    S, d = A.shape[1], A.shape[2]
    Z = np.empty((n, T), dtype=np.int64)
    X = np.broadcast_to(x0, (n, d)).copy()
    for t in range(T):
        P = np.exp(log_softmax(X @ B[t].T, axis=1))
        z = (np.cumsum(P, axis=1)[:, :-1] < rng.random(n)[:, None]).sum(axis=1)
        Z[:, t] = z
        if t < T - 1:
            X = np.einsum("nij,nj->ni", A[t][z], X)
    return Z


def all_histories(alphabet_size: int, t: int) -> list[tuple[int, ...]]:
    """Σ^t in lexicographic order (first token most significant)."""
    return list(itertools.product(range(alphabet_size), repeat=t))


def all_futures(alphabet_size: int, max_len: int) -> list[tuple[int, ...]]:
    """Σ^{≤max_len}: Null first, then by length, each length lexicographically."""
    return [f for k in range(max_len + 1) for f in all_histories(alphabet_size, k)]


def tv_distance(a, b, T: int | None = None) -> float:
    """Exact total variation ½ Σ_{s ∈ Σ^T} |P_a(s) − P_b(s)| by enumeration.

    a, b: TimeVaryingISANs, ISANs (then T is required) or log-probability arrays
    as returned by sequence_logprobs. Refuses when |Σ|^T > MAX_STRINGS = 2^24.
    """
    la, lb = logprobs_of("a", a, T), logprobs_of("b", b, T)
    if la.shape != lb.shape:
        raise ValueError(f"b: expected log-probabilities of shape {la.shape} (as a), got {lb.shape}")
    return float(0.5 * np.abs(np.exp(la) - np.exp(lb)).sum())


def logprobs_of(name, m, T):
    """The log-probabilities of every string of Σ^T (lexicographic order) of ``m``: a
    :class:`TimeVaryingISAN`, an :class:`ISAN` (at ``T``), or such a vector itself (checked);
    errors name ``name``."""
    if isinstance(m, TimeVaryingISAN):
        if T is not None and T != m.T:
            raise ValueError(f"T: {name} has T = {m.T}, got T = {T}")
        check_enumerable(m.alphabet_size, m.T)
        return m.sequence_logprobs()
    if isinstance(m, ISAN):
        if T is None:
            raise ValueError(f"T: required when {name} is a time-invariant ISAN")
        check_enumerable(m.alphabet_size, T)
        return m.sequence_logprobs(T)
    lp = np.asarray(m, dtype=float)
    if lp.ndim != 1:
        raise ValueError(f"{name}: expected a 1-d array of log-probabilities of length |Σ|^T, "
                         f"got shape {lp.shape}")
    if lp.size > MAX_STRINGS:
        raise ValueError(f"{name}: {lp.size:,} strings is above the limit MAX_STRINGS = 2^24")
    return lp


# ---------------------------------------------------------------------------
# logit matrices (Def 2.2) and rank
# ---------------------------------------------------------------------------

def logit_matrix(oracle: Oracle, histories, futures, alphabet_size: int | None = None) -> np.ndarray:
    """Extended logit matrix L_M(H, F) (Def 2.2), shape (|H|, |F|·|Σ|), column f_index·|Σ| + z.

    Entries are the oracle's answers as given (mean-centred for a logit oracle). ``alphabet_size``
    defaults to the length of the oracle's first answer; every answer must have that length.
    The book's one implementation, :func:`lib.logits.extended_logit_matrix` (``centered=False``).

    A language model (a :class:`lib.models.causal_lm.CausalLM` or a ``transformers`` causal LM, read
    by :func:`lib.logits.as_model`) answers the logit queries of Def C.14, its mean-centred logits
    L_M[z | h] (Def 2.1): the matrix is ``extended_logit_matrix(model, H, F)`` (centred), float32, and
    ``alphabet_size``, if given, must be its vocabulary size. Its histories must not be empty.
    """
    from .logits import as_model, extended_logit_matrix, is_language_model, vocab_size

    histories, futures = [tuple(h) for h in histories], [tuple(f) for f in futures]
    if is_language_model(oracle):
        model = as_model(oracle, name="oracle")
        V = vocab_size(model)
        if alphabet_size is not None and check_positive_int("alphabet_size", alphabet_size) != V:
            raise ValueError(f"alphabet_size: the language model's vocabulary has {V} tokens; got {alphabet_size}")
        if not histories or not futures:
            return np.empty((len(histories), len(futures) * V), dtype=np.float32)
        return extended_logit_matrix(model, histories, futures)
    if alphabet_size is None:
        if not histories or not futures:
            raise ValueError("logit_matrix: give alphabet_size when histories or futures is empty")
        alphabet_size = np.asarray(oracle(histories[0] + futures[0])).shape[-1]
    S = check_positive_int("alphabet_size", alphabet_size)
    if not histories or not futures:
        return np.empty((len(histories), len(futures) * S))
    return extended_logit_matrix(oracle, histories, futures, centered=False, alphabet_size=S)


def logit_rank(matrix, tol: float = EXACT_RANK_TOL) -> int:
    """Numerical rank: number of singular values > tol·σ_max (0 for the zero matrix)."""
    s = np.linalg.svd(np.atleast_2d(np.asarray(matrix, dtype=float)), compute_uv=False)
    return int(np.sum(s > tol * s[0])) if s.size and s[0] > 0 else 0


def trivial_logit_rank_bound(alphabet_size: int, T: int) -> int:
    """max_t rank bound of L_M(Σ^t, Σ^{≤T-1-t}) valid for every model:
    min(#rows, (|Σ|−1)·#futures) (each future's block of |Σ| centred columns sums to 0)."""
    S = alphabet_size
    return max(min(S ** t, (S - 1) * sum(S ** k for k in range(T - t))) for t in range(T))


# ---------------------------------------------------------------------------
# Lemma C.3: an ISAN from the logit queries of any model of logit rank <= d
# ---------------------------------------------------------------------------

def refuse_language_model(oracle, algorithm: str) -> None:
    """Raise a ``TypeError`` if ``oracle`` is a language model (a CausalLM, a ``transformers`` model, a
    module reading ``input_ids``) rather than a callable prefix -> logits: ``algorithm`` queries every
    prefix from the empty one up, which a causal LM cannot answer without a token of context, and
    calling the model on a tuple would fail deep inside it."""
    from .logits import is_language_model

    if is_language_model(oracle):
        raise TypeError(
            f"oracle: {algorithm} queries a callable prefix -> logits at every prefix, the empty one included; got "
            f"the language model {type(oracle).__name__}, which needs a token of context. Pass an oracle over "
            "prefixes, e.g. lm = CausalLM(model) (lib.models.causal_lm) and oracle = lambda p: "
            "lib.logits.next_token_logprobs(lm, [(bos,) + tuple(p)])[0] with bos its beginning-of-sequence token "
            "id (|Σ| is then the whole vocabulary: only tiny models are enumerable), or use "
            "lib.logits.extended_logit_matrix(model, H, F) for its logit matrices")


class _Memo:
    """Logit-query wrapper: caches answers by prefix and counts calls to the wrapped oracle."""

    def __init__(self, oracle: Oracle, alphabet_size: int):
        self.oracle, self.S, self.calls, self.cache = oracle, alphabet_size, 0, {}
        self.samples = 0  # prefixes drawn from M[:t] (Algorithm 3, line 9)

    def __call__(self, prefix: tuple) -> np.ndarray:
        v = self.cache.get(prefix)
        if v is None:
            v = np.asarray(self.oracle(prefix), dtype=float)
            if v.shape != (self.S,):
                raise ValueError(f"oracle: expected logits of shape ({self.S},), got {v.shape}")
            self.calls += 1
            self.cache[prefix] = v
        return v

    def block(self, rows, cols) -> np.ndarray:
        """L_M(rows, cols) from (cached) queries."""
        out = np.empty((len(rows), len(cols) * self.S))
        for i, h in enumerate(rows):
            out[i] = np.concatenate([self(h + f) for f in cols])
        return out


def isan_from_low_rank_oracle(oracle: Oracle, alphabet_size: int, T: int, d: int,
                              tol: float = EXACT_RANK_TOL, return_queries: bool = False):
    """Lemma C.3: a time-varying ISAN of hidden dim d with the same law on Σ^T as any model
    whose logit matrices L_M(Σ^t, Σ^{≤T-1-t}) have rank <= d, from logit queries only.

    S^(t) ⊂ Σ^t: d rows spanning the row space (pivoted QR, padded by repetition);
    A_{z,t} solves L(S^(t-1)∘z, Σ^{≤T-1-t}) = A_{z,t}^T L(S^(t), Σ^{≤T-1-t})    (eq. 2, transposed
    to our x_t = A x_{t-1}); B_t = L(S^(t-1), {Null})^T; x0 = e_1. Exponentially many queries
    (all of Σ^{≤T-1}): a constructive proof, for small cases.
    """
    refuse_language_model(oracle, "Lemma C.3")
    S = check_positive_int("alphabet_size", alphabet_size)
    T = check_positive_int("T", T)
    d = check_positive_int("d", d)
    check_enumerable(S, T - 1)
    q = _Memo(oracle, S)
    basis, mats = [], []
    for t in range(T):
        H, F = all_histories(S, t), all_futures(S, T - 1 - t)
        L = q.block(H, F)
        _, R, piv = scipy.linalg.qr(L.T, mode="economic", pivoting=True)
        diag = np.abs(np.diag(R))
        r = int(np.sum(diag > tol * diag[0])) if diag.size and diag[0] > 0 else 0
        if r > d:
            raise ValueError(f"d: the logit matrix at t = {t} has numerical rank {r} > d = {d}")
        rows = [H[i] for i in piv[:max(r, 1)]]
        basis.append((rows * d)[:d])  # a multiset of exactly d histories
        mats.append(L)
    A = np.zeros((T, S, d, d))
    B = np.zeros((T, S, d))
    for t in range(1, T + 1):  # paper's t
        B[t - 1] = q.block(basis[t - 1], [()]).T
        if t < T:
            F = all_futures(S, T - 1 - t)
            Lt = q.block(basis[t], F)
            for z in range(S):
                Lz = q.block([h + (z,) for h in basis[t - 1]], F)
                A[t - 1, z] = np.linalg.lstsq(Lt.T, Lz.T, rcond=None)[0]
    x0 = np.zeros(d)
    x0[0] = 1.0
    model = TimeVaryingISAN(x0, A, B)
    return (model, q.calls) if return_queries else model


# ---------------------------------------------------------------------------
# representation power (Appendix C.2)
# ---------------------------------------------------------------------------

def copying_isan(n: int, C: float) -> TimeVaryingISAN:
    """Fact C.9: time-varying ISAN of hidden dim n+1 over {0,1}^{2n} close to n-bit copying (Def C.8).

    State (bits a_1..a_n, 1). Steps 1..n: B = 0 (uniform bit), A_{z,t} writes z into coordinate t.
    Steps n+j: A = I, B_{n+j} = [[0 … 0 C/2], [0 … C (column j) … 0]]. Each copy step errs with
    probability q = 1/(1 + e^{C/2}), so TV to copying = 1 − (1 − q)^n <= n e^{−C/2}.
    """
    n = check_positive_int("n", n)
    if not np.isfinite(C):
        raise ValueError(f"C: expected a finite number, got {C!r}")
    d, T = n + 1, 2 * n
    A = np.broadcast_to(np.eye(d), (T, 2, d, d)).copy()
    B = np.zeros((T, 2, d))
    for t in range(n):
        A[t, 1, t, n] = 1.0  # x[t] <- x[t] + 1·x[n] (x[t] = 0 before)
    for j in range(n):
        B[n + j, 0, n] = C / 2
        B[n + j, 1, j] = C
    x0 = np.zeros(d)
    x0[n] = 1.0
    return TimeVaryingISAN(x0, A, B)


def copying_logprobs(n: int) -> np.ndarray:
    """Def C.8: log-probabilities over {0,1}^{2n} (lexicographic) of a∘a, a uniform in {0,1}^n."""
    n = check_positive_int("n", n)
    check_enumerable(2, 2 * n)
    a = np.arange(2 ** n)
    lp = np.full(4 ** n, -np.inf)
    lp[a * 2 ** n + a] = -n * np.log(2)
    return lp


def _check_parity(y, p: float) -> np.ndarray:
    y = np.asarray(y)
    if y.ndim != 1 or y.size == 0 or not np.all((y == 0) | (y == 1)):
        raise ValueError(f"y: expected a non-empty 1-d 0/1 vector, got {y!r}")
    if not 0 < p < 0.5:
        raise ValueError(f"p: expected 0 < p < 1/2 (Def C.10), got {p!r}")
    return y.astype(np.int64)


def noisy_parity_isan(y, p: float) -> TimeVaryingISAN:
    """Fact C.11 (made explicit): hidden dim 2 exactly generating the noisy parity of Def C.10.

    State = one-hot of the running parity ⟨y_{1:t}, z_{1:t}⟩ mod 2; A_{z,t} swaps it iff y_t z = 1;
    B_t = 0 for t <= n; B_{n+1} = [[log(1−p), log p], [log p, log(1−p)]] so b = parity w.p. 1 − p.
    """
    y = _check_parity(y, p)
    n = y.size
    swap, eye = np.array([[0.0, 1.0], [1.0, 0.0]]), np.eye(2)
    A = np.broadcast_to(eye, (n + 1, 2, 2, 2)).copy()
    for t in range(n):
        if y[t]:
            A[t, 1] = swap
    B = np.zeros((n + 1, 2, 2))
    B[n] = [[np.log1p(-p), np.log(p)], [np.log(p), np.log1p(-p)]]
    return TimeVaryingISAN(np.array([1.0, 0.0]), A, B)


def noisy_parity_logprobs(y, p: float) -> np.ndarray:
    """Def C.10 by definition: log Pr[(z, b)] over {0,1}^{n+1}, lexicographic."""
    y = _check_parity(y, p)
    n = y.size
    check_enumerable(2, n + 1)
    Z = np.array(all_histories(2, n), dtype=np.int64).reshape(-1, n)
    parity = (Z @ y) % 2
    lp = np.empty((2 ** n, 2))
    lp[:, 0] = np.where(parity == 0, np.log1p(-p), np.log(p))
    lp[:, 1] = np.where(parity == 1, np.log1p(-p), np.log(p))
    return (lp - n * np.log(2)).reshape(-1)


def rare_branch_isan(delta: float, C: float = 5.0) -> TimeVaryingISAN:
    """Not in the paper: a hidden dim 2 ISAN over {0,1}^4 whose second logit-rank direction is
    reached only through the rare first token 1 (probability delta) and is visible only at step 4.

    State (1, k): z_1 = 1 sets k = 1; steps 2-3 are uniform whatever k; step 4 has logits
    (C k, −C k). Algorithm 3 can only find the branch through its samples S_2, S_3 (the
    deterministic candidates H_{t-1}∘Σ never contain it first), so a learner that misses it
    returns the k = 0 model, at TV delta·(σ(2C) − 1/2) from this one.
    """
    if not 0 < delta < 1:
        raise ValueError(f"delta: expected 0 < delta < 1, got {delta!r}")
    A = np.broadcast_to(np.eye(2), (4, 2, 2, 2)).copy()
    A[0, 1] = [[1.0, 0.0], [1.0, 0.0]]
    B = np.zeros((4, 2, 2))
    B[0, 1, 0] = np.log(delta) - np.log1p(-delta)
    B[3] = [[0.0, C], [0.0, -C]]
    return TimeVaryingISAN(np.array([1.0, 0.0]), A, B)


def ssm_to_isan(x0, u1, V, U, A, B, C, D) -> ISAN:
    """Fact C.7: a linear-in-state SSM (Defs C.5, C.6) as an ISAN of hidden dim d + 2q + 1.

    SSM: x_t = A(u_t) x_{t-1} + B(u_t) u_t,  y_t = C(u_t) x_{t-1} + D(u_t) u_t,
         z_t ~ softmax(U y_t),  u_{t+1} = V e(z_t),  u_1 fixed.
    x0: (d,), u1: (p,), V: (p, |Σ|), U: (|Σ|, q); A, B, C, D: callables u -> (d,d), (d,p), (q,d), (q,p).
    ISAN state before sampling z_t: h_{t-1} = (x_t, C(u_t) x_{t-1}, D(u_t) u_t, 1); logits
    U(C x + D u) = [0 U U 0] h; after z_t (u' = V e(z_t)) the update is the linear map
    [[A(u'), 0, 0, B(u')u'], [C(u'), 0, 0, 0], [0, 0, 0, D(u')u'], [0, 0, 0, 1]].
    """
    x0 = _as_array("x0", x0, 1, "(d,)")
    u1 = _as_array("u1", u1, 1, "(p,)")
    U = _as_array("U", U, 2, "(|Σ|, q)")
    V = _as_array("V", V, 2, "(p, |Σ|)")
    d, p = x0.size, u1.size
    S, q = U.shape
    _check_shape("V", V, (p, S), "(p, |Σ|) with p from u1 and |Σ| from U")

    def mats(u):
        mA, mB, mC, mD = (np.asarray(f(u), dtype=float) for f in (A, B, C, D))
        for name, m, shape, exp in (("A", mA, (d, d), "(d, d)"), ("B", mB, (d, p), "(d, p)"),
                                    ("C", mC, (q, d), "(q, d)"), ("D", mD, (q, p), "(q, p)")):
            _check_shape(f"{name}(u)", m, shape, exp)
        return mA, mB, mC, mD

    D_ = d + 2 * q + 1
    xs, cs, ds, one = slice(0, d), slice(d, d + q), slice(d + q, d + 2 * q), d + 2 * q
    A_isan = np.zeros((S, D_, D_))
    for z in range(S):
        u = V[:, z]
        mA, mB, mC, mD = mats(u)
        A_isan[z, xs, xs] = mA
        A_isan[z, xs, one] = mB @ u
        A_isan[z, cs, xs] = mC
        A_isan[z, ds, one] = mD @ u
        A_isan[z, one, one] = 1.0
    B_isan = np.zeros((S, D_))
    B_isan[:, cs] = U
    B_isan[:, ds] = U
    mA, mB, mC, mD = mats(u1)
    h0 = np.concatenate([mA @ x0 + mB @ u1, mC @ x0, mD @ u1, [1.0]])
    return ISAN(h0, A_isan, B_isan)


# ---------------------------------------------------------------------------
# Theorem 4.4: learning from logit queries (Algorithms 2 and 3)
# ---------------------------------------------------------------------------

def _rowspace(M, tol):
    """Orthonormal basis (columns) of the numerical row space of M and σ_max."""
    _, s, Vt = np.linalg.svd(M, full_matrices=False)
    if not s.size or s[0] == 0:
        return np.zeros((M.shape[1], 0)), 0.0
    return Vt[s > tol * s[0]].T, s[0]


def _sample_prefixes(q: _Memo, t: int, m: int, rng) -> list[tuple]:
    """m i.i.d. draws from M[:t] through logit queries (Fact C.15)."""
    prefixes = [()] * m
    for _ in range(t):
        P = np.exp(log_softmax(np.stack([q(h) for h in prefixes]), axis=1))
        z = (np.cumsum(P, axis=1)[:, :-1] < rng.random(m)[:, None]).sum(axis=1)
        prefixes = [h + (zi,) for h, zi in zip(prefixes, z.tolist())]
    q.samples += m
    return prefixes


def _complete_span_step(q, t, H, F, N, rng, tol, chunk):
    """One pass of the body of Algorithm 3 for one t: returns (h, f) raising the rank, or None.

    Tests Rank L(H_t, F_t) < Rank L(H_t ∪ H_{t-1}∘Σ ∪ S_t, F_t ∪ Σ∘F_{t+1}) lazily: the candidate
    rows (H_{t-1}∘Σ, then the samples S_t drawn in chunks) are scanned until one leaves the row
    space, so S_t is only drawn in full when the test passes (same outcome as drawing it first).
    """
    S, Ft = q.S, F[t]
    seen = set(Ft)
    cols = Ft + [c for c in ((z,) + f for z in range(S) for f in F[t + 1]) if c not in seen]
    nF = len(Ft) * S
    LH = q.block(H[t], cols)
    r = logit_rank(LH[:, :nF], tol)
    V, smax = _rowspace(LH, tol)
    shifted = [h + (z,) for h in H[t - 1] for z in range(S)]

    def scan(rows):
        X = q.block(rows, cols)
        res = np.linalg.norm(X - (X @ V) @ V.T, axis=1)
        rel = res / np.maximum(smax, np.linalg.norm(X, axis=1)).clip(min=1e-300)
        return X, rel

    if V.shape[1] > r:  # the H_t rows alone gain rank on the new columns Σ∘F_{t+1}
        X, rel = scan(shifted)
        i = int(np.argmax(rel))
    else:
        def chunks():
            yield shifted
            for k in range(0, N, chunk):
                yield _sample_prefixes(q, t, min(chunk, N - k), rng)
        for rows in chunks():
            X, rel = scan(rows)
            if np.any(rel > tol):
                i = int(np.argmax(rel))
                break
        else:
            return None
        shifted = rows
    h, x = shifted[i], X[i]
    # the future f ∈ Σ∘F_{t+1}: best-conditioned rank increase of L(H_t ∪ {h}, F_t ∪ {f}).
    # If Σ∘F_{t+1} ⊂ F_t (always at t = T-1, where F_T = ∅) the row h alone raises the rank on
    # F_t and F_t ∪ {f} = F_t: f = None.
    M = np.vstack([LH, x])
    best, f = -1.0, None
    for j in range(len(Ft), len(cols)):
        s = np.linalg.svd(np.hstack([M[:, :nF], M[:, j * S:(j + 1) * S]]), compute_uv=False)
        ratio = s[r] / s[0] if len(s) > r and s[0] > 0 else 0.0
        if ratio > best:
            best, f = ratio, cols[j]
    return h, f


def learn_from_logit_queries(oracle: Oracle, alphabet_size: int, T: int, eps: float,
                             rng: np.random.Generator, *, d: int | None = None,
                             rank_tol: float = RANK_TOL, chunk: int = 512,
                             return_info: bool = False):
    """Theorem 4.4 via Algorithm 2 (with Algorithm 3, CompleteSpan): learn a time-varying ISAN
    M' with E[TV(M, M')] <= eps from logit queries to M (hidden dim <= d).

    N = ⌈4T/ε · ln(dT/ε)⌉ i.i.d. prefixes per rank test (Alg. 2 line 4). d enters only through
    this logarithm and the guard on the number of passes (d·T, Lemma C.17); if d is None the
    model-free bound trivial_logit_rank_bound(|Σ|, T) is used for both.
    Rank tests use relative tolerance rank_tol (singular values / residuals > rank_tol·σ_max):
    oracle logits carry float64 round-off ~1e-15 relative, so 1e-8 leaves a wide margin against
    spurious rank increases while only directions of relative size < 1e-8 are ignored.
    F_T = ∅ (histories of length T−1 only have the future Null). Answers are cached by prefix;
    the returned count is the number of calls made to `oracle` (distinct prefixes queried).

    Returns (model, n_queries), or (model, n_queries, info) with return_info; info holds N,
    d_used, iterations (of Algorithm 3's while loop, at most max_iterations = d_used·T by Lemma C.17;
    more raises RuntimeError), sizes |H_t|, future_sizes |F_t|, ranks of L(H_t, F_t),
    hidden_dim (= max_t |H_t|, the padding size; <= d + 1, since an initial row y^t with
    uniform next token has rank 0), queries and samples (prefixes drawn from M[:t]).
    """
    refuse_language_model(oracle, "the learner of Theorem 4.4")
    S = check_positive_int("alphabet_size", alphabet_size, minimum=2)
    T = check_positive_int("T", T)
    if not 0 < eps < 1:
        raise ValueError(f"eps: expected 0 < eps < 1, got {eps!r}")
    d_used = trivial_logit_rank_bound(S, T) if d is None else check_positive_int("d", d)
    N = int(np.ceil(4 * T / eps * np.log(d_used * T / eps)))
    q = _Memo(oracle, S)
    H = [[()]] + [[(0,) * t] for t in range(1, T)]  # H_t = {y^t}, y = token 0
    F = [[()] for _ in range(T)] + [[]]                # F_t = {Null}; F_T = ∅
    # Lemma C.17: each pass before the last adds a history to some H_t (t = 1..T-1), and |H_t| <= d + 1,
    # so there are at most d(T-1) + 1 <= dT passes of the while loop when the model's logit rank is <= d
    iterations, max_iter = 0, d_used * T
    while True:  # Algorithm 3
        iterations += 1
        if iterations > max_iter:
            raise RuntimeError(f"CompleteSpan did not terminate within d·T = {d_used}·{T} = {max_iter} "
                               f"iterations (Lemma C.17): the model's logit rank exceeds d = {d_used}")
        incomplete = False
        for t in range(1, T):
            found = _complete_span_step(q, t, H, F, N, rng, rank_tol, chunk)
            if found is not None:
                H[t].append(found[0])
                if found[1] is not None:
                    F[t].append(found[1])
                incomplete = True
        if not incomplete:
            break
    # Algorithm 2, lines 6-14
    D = max(len(h) for h in H)
    A, B = np.zeros((T, S, D, D)), np.zeros((T, S, D))
    for t in range(1, T):
        Lt = q.block(H[t], F[t])
        for z in range(S):
            Lz = q.block([h + (z,) for h in H[t - 1]], F[t])
            A[t - 1, z, :len(H[t]), :len(H[t - 1])] = np.linalg.lstsq(Lt.T, Lz.T, rcond=rank_tol)[0]
    for t in range(1, T + 1):
        B[t - 1, :, :len(H[t - 1])] = q.block(H[t - 1], [()]).T
    x0 = np.zeros(D)
    x0[0] = 1.0
    model = TimeVaryingISAN(x0, A, B)
    if not return_info:
        return model, q.calls
    calls = q.calls
    info = dict(N=N, d_used=d_used, iterations=iterations, max_iterations=max_iter,
                sizes=[len(h) for h in H], future_sizes=[len(f) for f in F[:T]],
                ranks=[logit_rank(q.block(H[t], F[t]), rank_tol) for t in range(T)],
                hidden_dim=D, queries=calls, samples=q.samples)
    return model, calls, info
