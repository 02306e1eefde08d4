"""Vectorised n-gram statistics of a token stream.

For a history length k and a continuation length l, the basic object is the
count matrix

    c(xy) = #{positions where the history x in Σ^k is immediately followed by
              the continuation y in Σ^l, inside one document},

stored as a sparse (P, S) matrix whose rows are the distinct histories x seen
and whose columns are the distinct continuations y seen. Normalising by the
number of (k+l)-gram occurrences gives the empirical joint distribution q(xy);
its row sums are q(x), and q(y|x) = q(xy) / q(x) is the conditional operator
of Chen & Murfet (arXiv:2504.18048, §4).

Everything is array operations (no Python loop per token); the one large sort
is done by polars (a parallel radix sort, several times faster than np.sort on
int64 keys), with np.sort as the fallback when polars is not installed:

1. the valid windows are those that end inside the document they start in;
2. each window of width n = k + l is encoded as one integer in base V
   (V = vocabulary size) when V**n fits in int64, so sorting the codes sorts
   the windows lexicographically; otherwise the windows are stacked as an
   (W, n) array and np.unique(axis=0) does the same, more slowly;
3. run lengths of the sorted codes are the counts; split each distinct window
   into (prefix, suffix): since the windows are sorted, equal prefixes are
   consecutive, so the rows of the CSR matrix come for free; the column of a
   window is the rank of its suffix among the distinct suffixes (a second,
   smaller sort, or a lookup table when V**l is small).

Documents are given by their start offsets; empty documents and documents
shorter than the window simply contribute no windows.

`count_ngrams_counter` is the plain-Python baseline (collections.Counter over
tuples) used by the tests and the benchmark.
"""

from __future__ import annotations

import bisect
import operator
from collections import Counter
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

_INT64_MAX = int(np.iinfo(np.int64).max)
_DENSE_RANK_SIZE = 2 ** 24  # value ranges up to this size are ranked through a dense table


# ---------------------------------------------------------------------------
# The count object
# ---------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)  # eq=False: numpy fields make == ambiguous
class NGramCounts:
    """Counts c(xy) of a history x in Σ^k followed by a continuation y in Σ^l.

    prefixes : (P, k) int64, the distinct histories x, sorted lexicographically
    suffixes : (S, l) int64, the distinct continuations y, sorted lexicographically
    counts   : (P, S) int64 CSR matrix, counts[i, j] = c(prefixes[i] ++ suffixes[j])
    """

    k: int
    l: int
    prefixes: np.ndarray
    suffixes: np.ndarray
    counts: sp.csr_matrix

    def total(self) -> int:
        """Number of (k+l)-gram occurrences counted, sum_{x,y} c(xy)."""
        return int(self.counts.data.sum())

    def prefix_counts(self) -> np.ndarray:
        """Row sums c(x) = sum_y c(xy): history counts, restricted to positions
        that have l further tokens in the same document. Shape (P,)."""
        return np.asarray(self.counts.sum(axis=1), dtype=np.int64).ravel()

    def suffix_counts(self) -> np.ndarray:
        """Column sums c(y) = sum_x c(xy): continuation counts. Shape (S,)."""
        return np.asarray(self.counts.sum(axis=0), dtype=np.int64).ravel()

    def prefix_index(self, prefix) -> int:
        """Row of the history `prefix` (a length-k sequence of ints)."""
        return _find_row(self.prefixes, prefix, "prefix")

    def suffix_index(self, suffix) -> int:
        """Column of the continuation `suffix` (a length-l sequence of ints)."""
        return _find_row(self.suffixes, suffix, "suffix")

    def joint(self) -> sp.csr_matrix:
        """Empirical joint q(xy) = c(xy) / total as float64 CSR, same shape as counts.

        Row sums are q(x); dividing row x by q(x) gives q(y|x), the conditional
        operator of Chen & Murfet (arXiv:2504.18048, §4)."""
        total = self.total()
        q = self.counts.astype(np.float64)
        if total > 0:
            q.data /= total
        return q

    def threshold(self, min_prefix_count: int = 1, min_suffix_count: int = 1) -> "NGramCounts":
        """Keep histories with c(x) >= min_prefix_count and continuations with
        c(y) >= min_suffix_count.

        Both marginals are computed on *this* matrix and rows and columns are
        dropped in one step (not iterated to a fixed point), so a kept row may
        lose mass to dropped columns, and can even become all zero."""
        min_p = _check_int(min_prefix_count, "min_prefix_count", minimum=0)
        min_s = _check_int(min_suffix_count, "min_suffix_count", minimum=0)
        rows = np.flatnonzero(self.prefix_counts() >= min_p)
        cols = np.flatnonzero(self.suffix_counts() >= min_s)
        counts = self.counts[rows][:, cols].tocsr()
        counts.sort_indices()
        return NGramCounts(self.k, self.l, self.prefixes[rows], self.suffixes[cols], counts)


def _find_row(rows: np.ndarray, key, name: str) -> int:
    """Binary search for `key` in the lexicographically sorted rows of `rows`."""
    try:
        key = tuple(operator.index(v) for v in key)
    except TypeError:
        raise TypeError(f"{name} must be a sequence of ints, got {key!r}") from None
    if len(key) != rows.shape[1]:
        raise ValueError(f"{name} must have length {rows.shape[1]}, got {len(key)}: {key}")
    i = bisect.bisect_left(range(len(rows)), key, key=lambda r: tuple(rows[r].tolist()))
    if i == len(rows) or tuple(rows[i].tolist()) != key:
        raise KeyError(f"{name} {key} was never seen (not among the {len(rows)} distinct {name}es)")
    return i


# ---------------------------------------------------------------------------
# Input validation
# ---------------------------------------------------------------------------

def _check_int(value, name: str, minimum: int) -> int:
    if isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    try:
        value = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}") from None
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value}")
    return value


def _check_tokens(tokens) -> np.ndarray:
    """Return tokens as a 1-D integer array of non-negative values, castable to int64."""
    arr = np.asarray(tokens)
    if arr.ndim != 1:
        raise ValueError(f"tokens must be a 1-D integer array, got shape {arr.shape}")
    if arr.size == 0:  # any empty 1-D input (np.asarray([]) is float64) is an empty stream
        return arr.astype(np.int64)
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"tokens must be a 1-D integer array (int32 or int64), got dtype {arr.dtype}")
    lo, hi = int(arr.min()), int(arr.max())
    if lo < 0:
        raise ValueError(f"tokens must be non-negative integers, got minimum value {lo}")
    if hi > _INT64_MAX - 1:
        raise ValueError(f"tokens must be < 2**63 - 1, got maximum value {hi}")
    return arr if np.can_cast(arr.dtype, np.int64) else arr.astype(np.int64)  # e.g. uint64


def _check_offsets(doc_offsets, n_tokens: int) -> np.ndarray | None:
    """Return document starts as int64, or None for a single document.

    Consecutive equal offsets (empty documents) are allowed, as is a final
    offset equal to len(tokens) (an empty last document): they hold no n-grams."""
    if doc_offsets is None:
        return None
    off = np.asarray(doc_offsets)
    if off.ndim != 1 or off.size == 0:
        raise ValueError(f"doc_offsets must be a non-empty 1-D integer array starting at 0, got shape {off.shape}")
    if off.dtype == np.bool_ or not np.issubdtype(off.dtype, np.integer):
        raise ValueError(f"doc_offsets must be an integer array, got dtype {off.dtype}")
    off = off.astype(np.int64)
    if off[0] != 0:
        raise ValueError(f"doc_offsets must start at 0, got doc_offsets[0] = {off[0]}")
    bad = np.flatnonzero(np.diff(off) < 0)
    if bad.size:
        i = int(bad[0]) + 1
        raise ValueError(f"doc_offsets must be non-decreasing, got doc_offsets[{i}] = {off[i]} "
                         f"< doc_offsets[{i - 1}] = {off[i - 1]}")
    if off[-1] > n_tokens:
        raise ValueError(f"doc_offsets must lie in [0, len(tokens)] = [0, {n_tokens}], got {off[-1]}")
    return off


def _vocab(tokens: np.ndarray, vocab_size) -> int:
    needed = int(tokens.max()) + 1 if tokens.size else 1
    if vocab_size is None:
        return needed
    V = _check_int(vocab_size, "vocab_size", minimum=1)
    if V < needed:
        raise ValueError(f"vocab_size must be >= max(tokens) + 1 = {needed}, got {V}")
    return V


# ---------------------------------------------------------------------------
# Core: distinct windows and their counts
# ---------------------------------------------------------------------------

def _window_columns(tokens: np.ndarray, width: int, offsets: np.ndarray | None) -> list[np.ndarray]:
    """Columns j = 0..width-1 of the (W, width) matrix of valid windows, i.e.
    column j holds tokens[s + j] for every start s whose window stays in its document."""
    if offsets is None:
        W = max(len(tokens) - width + 1, 0)
        return [tokens[j:j + W] for j in range(width)]  # views, no copy
    ends = np.append(offsets[1:], len(tokens))
    n_win = np.maximum(ends - offsets - width + 1, 0)          # windows per document
    first = np.cumsum(n_win) - n_win                           # index of each doc's first window
    starts = np.arange(n_win.sum()) + np.repeat(offsets - first, n_win)
    return [tokens[starts + j] for j in range(width)]


def _inside_documents(n_tokens: int, width: int, offsets: np.ndarray) -> np.ndarray:
    """Mask over all n_tokens - width + 1 window starts: True where the window lies inside one
    document (it does not cross any start offsets[i] > 0)."""
    W = max(n_tokens - width + 1, 0)
    cuts = offsets[offsets > 0]
    crossing = (cuts[:, None] - np.arange(1, width)).ravel()  # starts s with s < cut <= s + width - 1
    inside = np.ones(W, dtype=bool)
    inside[crossing[(crossing >= 0) & (crossing < W)]] = False
    return inside


def _fits_int64(V: int, width: int) -> bool:
    return V ** width - 1 <= _INT64_MAX  # Python ints: no overflow


def _encode(cols: list[np.ndarray], V: int) -> np.ndarray:
    """Base-V code of each window (Horner's rule); order of codes = lexicographic order."""
    code = cols[0].astype(np.int64)  # copy
    for c in cols[1:]:
        code *= V
        code += c
    return code


def _decode(codes: np.ndarray, V: int, width: int) -> np.ndarray:
    """Inverse of _encode: (G,) codes -> (G, width) digits (a transposed view)."""
    digits = np.empty((width, len(codes)), dtype=np.int64)  # filled row by row: contiguous writes
    for j in range(width - 1, 0, -1):
        higher = codes // V  # division by a scalar is much faster than by an array
        np.multiply(higher, V, out=digits[j])
        np.subtract(codes, digits[j], out=digits[j])
        codes = higher
    digits[0] = codes  # the leading digit is what is left
    return digits.T


def sort_int64(values: np.ndarray) -> np.ndarray:
    """The int64 array sorted ascending (a new array): polars' multi-threaded sort where
    polars is installed, else np.sort. Used for the one large sort of every count."""
    try:
        import polars as pl
    except ImportError:  # pragma: no cover - polars is pinned in requirements.txt
        return np.sort(values)
    return pl.Series(values, dtype=pl.Int64).sort().to_numpy(writable=True)


def _run_starts(sorted_values: np.ndarray) -> np.ndarray:
    """Boolean mask of the first element of each run of equal values in a sorted 1-D array."""
    new = np.empty(len(sorted_values), dtype=bool)
    new[:1] = True
    np.not_equal(sorted_values[1:], sorted_values[:-1], out=new[1:])
    return new


def _index_dtype(n: int):
    """int32 where it suffices: halves memory traffic, and is what scipy.sparse uses."""
    return np.int32 if n <= np.iinfo(np.int32).max else np.int64


def _ranks(values: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(values, return_inverse=True) for int64 values in [0, size), faster.

    Small range (size <= max(4G, 2^24), e.g. l = 1 or l = 2 with V <= 4096): mark the values
    seen in a dense table (at most ~80 MB). Otherwise, if size * G fits in int64, sort the
    packed keys value * G + position: a plain int64 sort, several times faster than the
    argsort in np.unique."""
    G = len(values)
    if size <= max(4 * G + 1024, _DENSE_RANK_SIZE):
        seen = np.zeros(size, dtype=bool)
        seen[values] = True
        uniq = np.flatnonzero(seen)
        rank = np.empty(size, dtype=_index_dtype(G))
        rank[uniq] = np.arange(len(uniq))
        return uniq, rank[values]
    if size * G > _INT64_MAX:
        uniq, inverse = np.unique(values, return_inverse=True)
        return uniq, inverse.reshape(-1)
    packed = values * G
    packed += np.arange(G)
    packed = sort_int64(packed)
    sorted_values = packed // G
    packed -= sorted_values * G  # now the original position of each sorted value
    new = _run_starts(sorted_values)
    inverse = np.empty(G, dtype=_index_dtype(G))
    inverse[packed] = np.cumsum(new, dtype=inverse.dtype) - 1
    return sorted_values[new], inverse


def _distinct_windows(tokens, width, offsets, V, use_codes=None):
    """Sort and count the valid windows of `width` tokens.

    Returns (keys, counts, coded): keys are the distinct windows in lexicographic
    order, as base-V codes (G,) if coded, else as rows (G, width); counts (G,) int64.
    use_codes=None picks codes whenever V**width fits in int64."""
    if use_codes is None:
        use_codes = _fits_int64(V, width)
    if use_codes:
        # encode every window of the stream (column views, no gather), then drop those that cross
        # a document start: cheaper than gathering the valid windows column by column
        codes = _encode(_window_columns(tokens, width, None), V)
        if offsets is not None:
            codes = codes[_inside_documents(len(tokens), width, offsets)]
        codes = sort_int64(codes)
        first = np.flatnonzero(_run_starts(codes))
        keys, counts = codes[first], np.diff(first, append=len(codes))
    else:
        windows = np.stack(_window_columns(tokens, width, offsets), axis=1)
        keys, counts = np.unique(windows, axis=0, return_counts=True)
        keys = keys.reshape(-1, width).astype(np.int64, copy=False)
    return keys, counts.astype(np.int64, copy=False), use_codes


def _split(keys, counts, k, l, V, coded):
    """Turn sorted distinct (k+l)-grams into an NGramCounts.

    Because the grams are sorted, equal prefixes are contiguous (they are the CSR
    rows) and, within a row, suffixes increase (so column indices are sorted)."""
    G = len(counts)
    if coded:
        pre = keys // V ** l  # code of the prefix x
        suf = np.subtract(keys, pre * V ** l, out=keys)  # code of the suffix y (keys is ours)
        row_start = np.flatnonzero(_run_starts(pre))  # first gram of each prefix
    else:
        pre, suf = keys[:, :k], keys[:, k:]
        row_start = np.flatnonzero(np.r_[G > 0, np.any(pre[1:] != pre[:-1], axis=1)])
    prefixes = pre[row_start]
    if coded:
        suffixes, col = _ranks(suf, V ** l)
        prefixes, suffixes = _decode(prefixes, V, k), _decode(suffixes, V, l)
    else:
        suffixes, col = np.unique(suf, axis=0, return_inverse=True)
    indptr = np.append(row_start, G).astype(_index_dtype(G))
    counts = sp.csr_matrix((counts, col.reshape(-1).astype(indptr.dtype, copy=False), indptr),
                           shape=(len(prefixes), len(suffixes)), dtype=np.int64)
    return NGramCounts(k, l, prefixes.reshape(-1, k), suffixes.reshape(-1, l), counts)


# ---------------------------------------------------------------------------
# Public functions
# ---------------------------------------------------------------------------

def count_ngrams(tokens, k, l, doc_offsets=None, vocab_size=None) -> NGramCounts:
    """Count c(xy) for every history x in Σ^k followed by a continuation y in Σ^l.

    tokens      : 1-D array of non-negative ints (the token stream).
    k, l        : history and continuation lengths, both >= 1.
    doc_offsets : start of each document in `tokens` (first 0, non-decreasing);
                  a (k+l)-gram never crosses a document boundary. Documents
                  shorter than k+l (including empty ones) contribute nothing.
                  None means a single document.
    vocab_size  : |Σ|, at least max(tokens) + 1 (default exactly that). It is
                  only the base of the integer code; if vocab_size**(k+l)
                  exceeds int64 the slower np.unique(axis=0) path is used.
    """
    k = _check_int(k, "k", minimum=1)
    l = _check_int(l, "l", minimum=1)
    tokens = _check_tokens(tokens)
    offsets = _check_offsets(doc_offsets, len(tokens))
    V = _vocab(tokens, vocab_size)
    keys, counts, coded = _distinct_windows(tokens, k + l, offsets, V)
    return _split(keys, counts, k, l, V, coded)


def count_ngrams_counter(tokens, k, l, doc_offsets=None) -> Counter:
    """Plain-Python baseline: Counter mapping each (k+l)-gram tuple to its count."""
    k = _check_int(k, "k", minimum=1)
    l = _check_int(l, "l", minimum=1)
    tokens = _check_tokens(tokens)
    offsets = _check_offsets(doc_offsets, len(tokens))
    bounds = [0, len(tokens)] if offsets is None else offsets.tolist() + [len(tokens)]
    counter = Counter()
    for a, b in zip(bounds[:-1], bounds[1:]):
        doc = tokens[a:b].tolist()
        counter.update(zip(*(doc[j:] for j in range(k + l))))
    return counter


def ngram_frequencies(tokens, n, doc_offsets=None) -> tuple[np.ndarray, np.ndarray]:
    """Distinct n-grams (G, n) and their counts (G,), by count descending, ties
    lexicographic. n = 1 gives the unigram frequencies of a rank-frequency plot."""
    n = _check_int(n, "n", minimum=1)
    tokens = _check_tokens(tokens)
    offsets = _check_offsets(doc_offsets, len(tokens))
    V = _vocab(tokens, None)
    keys, counts, coded = _distinct_windows(tokens, n, offsets, V)
    grams = _decode(keys, V, n) if coded else keys
    order = np.argsort(-counts, kind="stable")  # stable: ties keep lexicographic order
    return grams[order], counts[order]
