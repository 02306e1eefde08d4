"""Descriptive statistics of text and token streams: rank–frequency laws and n-gram baselines.

These are the reference points a reader needs before any model: how heavy-tailed the
vocabulary is (Zipf's law), and how well a unigram or bigram table predicts held-out
tokens — the losses a trained language model has to beat.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Iterable

import numpy as np

_WORD = re.compile(r"[A-Za-z]+(?:'[a-z]+)?")


def word_counts(documents: Iterable[str]) -> np.ndarray:
    """Counts of lower-cased alphabetic words, sorted in decreasing order (rank 1 first)."""
    counter: Counter[str] = Counter()
    for doc in documents:
        counter.update(w.lower() for w in _WORD.findall(doc))
    return np.array(sorted(counter.values(), reverse=True), dtype=np.int64)


@dataclass(frozen=True)
class PowerLawFit:
    """Least-squares fit of log f(r) = log C − s log r over ranks ``r_min ≤ r ≤ r_max``."""

    exponent: float
    log_c: float
    r_min: int
    r_max: int
    r_squared: float

    def predict(self, ranks: np.ndarray) -> np.ndarray:
        return np.exp(self.log_c) * np.asarray(ranks, dtype=float) ** (-self.exponent)


def fit_zipf(sorted_counts: np.ndarray, r_min: int = 10, r_max: int = 10_000) -> PowerLawFit:
    """Fit Zipf's law f(r) ∝ r^(−s) to counts sorted decreasingly, by least squares in log–log.

    Ranks are 1-based; the window is clipped to the number of distinct items. Points are
    log-spaced in rank so that the many tail ranks do not dominate the fit.
    """
    counts = np.asarray(sorted_counts, dtype=float)
    if counts.ndim != 1 or counts.size < 3:
        raise ValueError(f"parameter 'sorted_counts' must be a 1-D array of at least 3 counts; got shape {counts.shape}")
    if np.any(np.diff(counts) > 0):
        raise ValueError("parameter 'sorted_counts' must be sorted in decreasing order")
    r_max = min(r_max, counts.size)
    if not 1 <= r_min < r_max:
        raise ValueError(f"need 1 <= r_min < r_max <= number of items ({counts.size}); got r_min={r_min}, r_max={r_max}")
    ranks = np.unique(np.round(np.geomspace(r_min, r_max, 200)).astype(int))
    x, y = np.log(ranks), np.log(counts[ranks - 1])
    slope, intercept = np.polyfit(x, y, 1)
    resid = y - (slope * x + intercept)
    r2 = 1 - resid.var() / y.var() if y.var() > 0 else 1.0
    return PowerLawFit(exponent=float(-slope), log_c=float(intercept), r_min=r_min, r_max=r_max, r_squared=float(r2))


def unigram_cross_entropy(train_tokens: np.ndarray, heldout_tokens: np.ndarray, vocab_size: int,
                          alpha: float = 1.0) -> float:
    """Held-out cross-entropy (nats/token) of the add-α smoothed unigram distribution of the train stream."""
    counts = np.bincount(np.asarray(train_tokens), minlength=vocab_size).astype(float) + alpha
    logp = np.log(counts / counts.sum())
    return float(-logp[np.asarray(heldout_tokens)].mean())


def bigram_cross_entropy(train_tokens: np.ndarray, heldout_tokens: np.ndarray, vocab_size: int,
                         alpha: float = 0.1) -> float:
    """Held-out cross-entropy (nats/token) of the add-α smoothed bigram table q(z | previous token).

    Counted over adjacent pairs of each stream (document boundaries ignored, as in a
    model trained on the concatenated stream).
    """
    train = np.asarray(train_tokens, dtype=np.int64)
    held = np.asarray(heldout_tokens, dtype=np.int64)
    pair_codes = train[:-1] * vocab_size + train[1:]
    codes, counts = np.unique(pair_codes, return_counts=True)
    prev_totals = np.bincount(train[:-1], minlength=vocab_size).astype(float)
    query = held[:-1] * vocab_size + held[1:]
    pos = np.searchsorted(codes, query)
    pos = np.minimum(pos, codes.size - 1)
    found = codes[pos] == query
    pair = np.where(found, counts[pos], 0).astype(float)
    prob = (pair + alpha) / (prev_totals[held[:-1]] + alpha * vocab_size)
    return float(-np.log(prob).mean())
