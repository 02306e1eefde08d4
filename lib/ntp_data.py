"""Next-token prediction data: contexts, their next-token distributions and supports.

A token stream gives m distinct contexts x_j of length T with frequencies π̂_j and next-token
distributions p̂_j ∈ Δ^V with supports S_j (Thrampoulidis, NeurIPS 2024; Zhao, Behnia,
Vakilian & Thrampoulidis, COLM 2024: "NTP training is sparse soft-label classification").
This module holds the data side: P = [p̂_1, …, p̂_m] ∈ R^{V×m}, the support matrix
S ∈ {0,1}^{V×m} with S_{zj} = 1[z ∈ S_j], the empirical entropy H (the loss's lower bound),
contexts extracted from text, and synthetic supports. The geometry these data imply (the
NTP-SVM, implicit bias, unconstrained features) is :mod:`lib.ntp`.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from itertools import combinations
from typing import Iterable, Sequence

import numpy as np
import scipy.special


class NTPError(ValueError):
    """Bad input: a distribution that is not one, an empty support, no repeated contexts, λ ≤ 0."""


def check_distribution(pi, P, tol: float = 1e-9) -> tuple[np.ndarray, np.ndarray]:
    """Validate (π̂, P): π̂ ∈ Δ^m, every column of P ∈ Δ^V, no empty support. Returns float64 copies."""
    pi = np.asarray(pi, dtype=np.float64)
    P = np.asarray(P, dtype=np.float64)
    if P.ndim != 2 or pi.ndim != 1 or pi.shape[0] != P.shape[1]:
        raise NTPError(f"P must be V × m and π of length m; got P {P.shape}, π {pi.shape}")
    if P.shape[1] == 0 or P.shape[0] < 2:
        raise NTPError(f"need at least one context and two tokens; got P of shape {P.shape}")
    if not (np.all(np.isfinite(P)) and np.all(np.isfinite(pi))):
        raise NTPError("P and π must be finite")
    if (P < 0).any() or (pi < 0).any():
        raise NTPError("P and π must be non-negative")
    empty = np.flatnonzero(P.sum(0) <= 0)
    if empty.size:
        raise NTPError(f"context(s) {empty[:5].tolist()} have an empty support (a column of P is zero)")
    if np.abs(P.sum(0) - 1).max() > tol:
        raise NTPError(f"every column of P must sum to 1; worst is {P.sum(0)[np.argmax(np.abs(P.sum(0) - 1))]:.6g}")
    if abs(pi.sum() - 1) > tol:
        raise NTPError(f"π must sum to 1; got {pi.sum():.6g}")
    return pi, P


def support_matrix(P) -> np.ndarray:
    """S ∈ {0,1}^{V×m}, S_{zj} = 1[p̂_{j,z} > 0]; refuses an empty support."""
    S = (np.asarray(P) > 0).astype(np.float64)
    check_support(S)
    return S


def check_support(S) -> np.ndarray:
    S = np.asarray(S, dtype=np.float64)
    if S.ndim != 2 or S.shape[0] < 2 or S.shape[1] < 1:
        raise NTPError(f"a support matrix is V × m with V ≥ 2, m ≥ 1; got shape {S.shape}")
    if not np.isin(S, (0.0, 1.0)).all():
        raise NTPError("a support matrix holds only 0 and 1")
    empty = np.flatnonzero(S.sum(0) == 0)
    if empty.size:
        raise NTPError(f"context(s) {empty[:5].tolist()} have an empty support (a zero column of S)")
    return S


@dataclass
class NTPData:
    """m distinct contexts with frequencies π̂ (m,), next-token distributions P (V × m), the
    counts they came from (V × m; None for exact synthetic data), the contexts' tokens (m × T)
    when they come from a stream, and a label per token."""

    pi: np.ndarray
    P: np.ndarray
    counts: np.ndarray | None = None
    contexts: np.ndarray | None = None
    labels: list[str] | None = None
    info: dict = field(default_factory=dict)

    def __post_init__(self):
        self.pi, self.P = check_distribution(self.pi, self.P)

    @property
    def V(self) -> int:
        return self.P.shape[0]

    @property
    def m(self) -> int:
        return self.P.shape[1]

    @property
    def n(self) -> int | None:
        return int(self.counts.sum()) if self.counts is not None else None

    @property
    def S(self) -> np.ndarray:
        return support_matrix(self.P)

    @property
    def support_sizes(self) -> np.ndarray:
        return (self.P > 0).sum(0)

    @property
    def entropy(self) -> float:
        return entropy_lower_bound(self.pi, self.P)

    def decode(self, j: int) -> str:
        """Context j as text (its tokens' labels)."""
        if self.contexts is None:
            return f"context {j}"
        labels = self.labels or [str(i) for i in range(self.V)]
        return " ".join(labels[t] for t in self.contexts[j])

    def support_labels(self, j: int) -> list[str]:
        labels = self.labels or [str(i) for i in range(self.V)]
        return [labels[z] for z in np.flatnonzero(self.P[:, j] > 0)]


_WORD = re.compile(r"[a-z]+|\.+")


def word_stream(documents: Iterable[str]) -> tuple[list[np.ndarray], list[str]]:
    """Word-level tokens of each document: lower-cased alphabetic words and the full stop
    (the TinyStories-style unit of the talk's experiment; consecutive dots are one full stop). Returns (token ids per document,
    vocabulary ordered by decreasing frequency, ties alphabetically)."""
    docs = []
    for d in documents:
        words = ["." if w[0] == "." else w for w in _WORD.findall(d.lower())]
        docs.append([w for i, w in enumerate(words) if not (w == "." and i and words[i - 1] == ".")])
    counts = Counter(w for words in docs for w in words)
    vocab = sorted(counts, key=lambda w: (-counts[w], w))
    index = {w: i for i, w in enumerate(vocab)}
    return [np.fromiter((index[w] for w in words), dtype=np.int64, count=len(words)) for words in docs], vocab


def extract_contexts(streams: Sequence[np.ndarray], vocab: Sequence[str], V: int, T: int, m: int | None = None,
                     min_count: int = 2, drop_other_contexts: bool = True) -> NTPData:
    """Distinct contexts of length T and their sparse next-token distributions.

    The V − 1 most frequent tokens (ids 0..V−2 of ``vocab``, which is sorted by frequency)
    keep their own symbol, every other token becomes OTHER (symbol V − 1). Windows of T + 1
    symbols are taken inside each document. Contexts seen at least ``min_count`` times are
    kept (those containing OTHER are dropped when ``drop_other_contexts``; OTHER may still be
    a next token), the ``m`` most frequent of them (ties by first occurrence) when m is given.
    π̂_j = n_j / Σ n_j and p̂_{j,z} = n_{j,z} / n_j over the kept contexts.

    Raises NTPError when V or T leave no context repeated ``min_count`` times."""
    if not isinstance(V, int) or V < 2 or not isinstance(T, int) or T < 1:
        raise NTPError(f"need integers V ≥ 2 and T ≥ 1; got V={V!r}, T={T!r}")
    if min_count < 2:
        raise NTPError(f"min_count must be ≥ 2 (a context seen once has a one-token support by construction); got {min_count}")
    other = V - 1
    keys, nexts = [], []
    for toks in streams:
        s = np.minimum(np.asarray(toks, dtype=np.int64), other)
        if s.size < T + 1:
            continue
        win = np.lib.stride_tricks.sliding_window_view(s, T + 1)
        key = np.zeros(len(win), dtype=np.int64)
        for t in range(T):
            key = key * V + win[:, t]
        keep = ~(win[:, :T] == other).any(1) if drop_other_contexts else np.ones(len(win), bool)
        keys.append(key[keep])
        nexts.append(win[keep, T])
    if not keys or sum(k.size for k in keys) == 0:
        raise NTPError(f"the stream has no window of T + 1 = {T + 1} tokens (without OTHER in the context)")
    if T * math.log(V) > 62 * math.log(2):
        raise NTPError(f"V^T = {V}^{T} does not fit the 64-bit context key; use a smaller V or T")
    key, nxt = np.concatenate(keys), np.concatenate(nexts)
    uniq, first, inv, n_ctx = np.unique(key, return_index=True, return_inverse=True, return_counts=True)
    repeated = np.flatnonzero(n_ctx >= min_count)
    if repeated.size == 0:
        raise NTPError(f"no context of length T={T} over V={V} symbols occurs {min_count} times or more: "
                       "there is no repeated context to learn a distribution from (lower T or V)")
    order = repeated[np.lexsort((first[repeated], -n_ctx[repeated]))]
    if m is not None:
        if m < 1:
            raise NTPError(f"m must be ≥ 1; got {m}")
        if order.size < m:
            raise NTPError(f"only {order.size} contexts of length T={T} over V={V} repeat ≥ {min_count} times; m={m} asked")
        order = order[:m]
    pos = np.full(uniq.size, -1)
    pos[order] = np.arange(order.size)
    sel = pos[inv] >= 0
    counts = np.zeros((V, order.size), dtype=np.int64)
    np.add.at(counts, (nxt[sel], pos[inv[sel]]), 1)
    ctx = np.zeros((order.size, T), dtype=np.int64)
    k = uniq[order].copy()
    for t in range(T - 1, -1, -1):
        ctx[:, t] = k % V
        k //= V
    n_j = counts.sum(0)
    labels = [str(w) for w in vocab[:V - 1]] + ["OTHER"]
    return NTPData(pi=n_j / n_j.sum(), P=counts / n_j, counts=counts, contexts=ctx, labels=labels,
                   info={"T": T, "windows": int(key.size), "distinct_contexts": int(uniq.size),
                         "repeated_contexts": int(repeated.size), "min_count": min_count})


def random_supports(V: int, m: int, k: int, seed: int = 0) -> np.ndarray:
    """S ∈ {0,1}^{V×m} with a uniformly random support of size k per column."""
    if not 1 <= k <= V:
        raise NTPError(f"support size k must be in [1, V={V}]; got {k}")
    rng = np.random.default_rng(seed)
    S = np.zeros((V, m))
    for j in range(m):
        S[rng.choice(V, size=k, replace=False), j] = 1
    return S


def k_subsets(V: int, k: int) -> np.ndarray:
    """S ∈ {0,1}^{V×C(V,k)}: every k-subset of [V] once, in lexicographic order."""
    if not 1 <= k < V:
        raise NTPError(f"k must be in [1, V − 1] (k = V leaves nothing to separate); got k={k}, V={V}")
    cols = list(combinations(range(V), k))
    S = np.zeros((V, len(cols)))
    for j, c in enumerate(cols):
        S[list(c), j] = 1
    return S


def synthetic_data(V: int, m: int, k: int, n: int | None = None, alpha: float = 1.0, seed: int = 0) -> NTPData:
    """NeurIPS'24 App. A.2-style data: random supports of size k, p̂_j ~ Dirichlet(α 1_k) on its
    support, contexts uniform; with n, the pairs (j, z) are sampled n times and (π̂, P) are the
    empirical frequencies (a token drawn with probability p but never sampled leaves the
    support). E[H] for α = 1 and exact sampling is Σ_{i=2}^{k} 1/i (1.45 for k = 6)."""
    rng = np.random.default_rng(seed)
    S = random_supports(V, m, k, seed=int(rng.integers(2 ** 31)))
    P = np.zeros((V, m))
    for j in range(m):
        P[S[:, j] > 0, j] = rng.dirichlet(np.full(k, alpha))
    if n is None:
        return NTPData(pi=np.full(m, 1.0 / m), P=P)
    ctx = rng.integers(m, size=n)
    counts = np.zeros((V, m), dtype=np.int64)
    u = rng.random(n)
    cdf = np.cumsum(P, axis=0)
    z = np.minimum((u[None, :] > cdf[:, ctx]).sum(0), V - 1)
    np.add.at(counts, (z, ctx), 1)
    n_j = counts.sum(0)
    if (n_j == 0).any():
        raise NTPError(f"n={n} samples left {(n_j == 0).sum()} of the m={m} contexts unseen; raise n")
    return NTPData(pi=n_j / n, P=counts / n_j, counts=counts)


def dirichlet_entropy_moments(k: int, alpha: float = 1.0) -> tuple[float, float]:
    """Mean and standard deviation of the entropy H(p) = −Σ_i p_i log p_i of p ~ Dirichlet(α 1_k),
    in closed form (Wolpert & Wolf 1995, with A = kα, ψ the digamma and ψ₁ the trigamma function):

        E[H] = ψ(A + 1) − ψ(α + 1),
        E[H²] = k(k − 1) α²/(A(A + 1)) [(ψ(α + 1) − ψ(A + 2))² − ψ₁(A + 2)]
              + k α(α + 1)/(A(A + 1)) [(ψ(α + 2) − ψ(A + 2))² + ψ₁(α + 2) − ψ₁(A + 2)].

    For α = 1 the mean is Σ_{i=2}^{k} 1/i (1.45 nats for k = 6): the generator of NeurIPS'24
    App. A.2 as this book reads it (:func:`synthetic_data`)."""
    from scipy.special import digamma, polygamma

    if not (isinstance(k, (int, np.integer)) and k >= 1) or not (math.isfinite(alpha) and alpha > 0):
        raise NTPError(f"need an integer k ≥ 1 and α > 0; got k={k!r}, α={alpha!r}")
    A = k * alpha
    mean = float(digamma(A + 1) - digamma(alpha + 1))
    if k == 1:
        return 0.0, 0.0
    t1 = polygamma(1, A + 2)
    cross = alpha ** 2 / (A * (A + 1)) * ((digamma(alpha + 1) - digamma(A + 2)) ** 2 - t1)
    diag = alpha * (alpha + 1) / (A * (A + 1)) * ((digamma(alpha + 2) - digamma(A + 2)) ** 2
                                                  + polygamma(1, alpha + 2) - t1)
    second = k * (k - 1) * cross + k * diag
    return mean, float(math.sqrt(max(second - mean ** 2, 0.0)))

def entropy_lower_bound(pi, P) -> float:
    """H = −Σ_j π̂_j Σ_{z∈S_j} p̂_{j,z} log p̂_{j,z} (slide "Entropy Lower-bound"), P of shape V × m."""
    pi, P = check_distribution(pi, P)
    return float(-(pi * scipy.special.xlogy(P, P).sum(0)).sum())
