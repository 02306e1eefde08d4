"""Tests for lib/ngrams.py: exact agreement with brute-force counts, marginals,
both encoding paths, thresholding, lookup, and input validation."""

from collections import Counter, defaultdict

import numpy as np
import pytest
import scipy.sparse as sp

from lib.text import ngrams as ng
from lib.text.ngrams import (NGramCounts, count_ngrams, count_ngrams_counter,
                        ngram_frequencies)

KL = [(1, 1), (1, 2), (2, 1), (2, 2), (3, 1), (1, 3), (3, 2)]


# ---------------------------------------------------------------------------
# Independent brute force (explicit per-position loops, no Counter/zip)
# ---------------------------------------------------------------------------

def doc_end_of(n_tokens, offsets):
    """End (exclusive) of the document containing each position, by a plain loop."""
    bounds = [0, n_tokens] if offsets is None else list(offsets) + [n_tokens]
    end = [0] * n_tokens
    for a, b in zip(bounds[:-1], bounds[1:]):
        for i in range(a, b):
            end[i] = b
    return end


def naive_ngrams(tokens, n, offsets=None, start_shift=0, need=None):
    """Count tuple(tokens[i+start_shift : i+start_shift+n]) over positions i with
    i + need <= end of i's document (need defaults to n)."""
    tokens = [int(t) for t in tokens]
    need = n if need is None else need
    end = doc_end_of(len(tokens), offsets)
    counts = defaultdict(int)
    for i in range(len(tokens)):
        if i + need <= end[i]:
            counts[tuple(tokens[i + start_shift:i + start_shift + n])] += 1
    return dict(counts)


def as_dict(nc: NGramCounts):
    coo = nc.counts.tocoo()
    return {tuple(nc.prefixes[i].tolist()) + tuple(nc.suffixes[j].tolist()): int(c)
            for i, j, c in zip(coo.row, coo.col, coo.data)}


def is_strictly_lexsorted(rows):
    return all(tuple(a) < tuple(b) for a, b in zip(rows[:-1].tolist(), rows[1:].tolist()))


def check_structure(nc, k, l):
    P, S = len(nc.prefixes), len(nc.suffixes)
    assert nc.k == k and nc.l == l
    assert nc.prefixes.shape == (P, k) and nc.suffixes.shape == (S, l)
    assert np.issubdtype(nc.prefixes.dtype, np.integer)
    assert isinstance(nc.counts, sp.csr_matrix) and nc.counts.shape == (P, S)
    assert nc.counts.dtype == np.int64
    assert nc.counts.has_canonical_format
    assert (nc.counts.data > 0).all()
    assert is_strictly_lexsorted(nc.prefixes) and is_strictly_lexsorted(nc.suffixes)
    # only prefixes/suffixes that were seen: no empty rows or columns
    assert (nc.prefix_counts() > 0).all() and (nc.suffix_counts() > 0).all()


# Document layouts for a stream of length 600 (offsets); None = one document.
DOCS = {
    "single": None,
    "offsets_[0]": [0],
    "many": [0, 50, 51, 53, 200, 330, 331, 590],      # docs of length 1 and 2 (< k+l)
    "empty_docs": [0, 0, 100, 100, 100, 400, 600],    # empty first, middle and last docs
}


def random_stream(seed, n=600, vocab=6):
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, vocab + 1)  # Zipf-ish, so some n-grams repeat a lot
    return rng.choice(vocab, size=n, p=p / p.sum()).astype(np.int64)


# ---------------------------------------------------------------------------
# Exact counts
# ---------------------------------------------------------------------------

def test_hand_example():
    t = np.array([1, 2, 3, 1, 2, 4, 1, 2, 3])
    nc = count_ngrams(t, 2, 1)
    np.testing.assert_array_equal(nc.prefixes, [[1, 2], [2, 3], [2, 4], [3, 1], [4, 1]])
    np.testing.assert_array_equal(nc.suffixes, [[1], [2], [3], [4]])
    np.testing.assert_array_equal(nc.counts.toarray(), [[0, 0, 2, 1],
                                                        [1, 0, 0, 0],
                                                        [1, 0, 0, 0],
                                                        [0, 1, 0, 0],
                                                        [0, 1, 0, 0]])
    assert nc.total() == 7
    # with a boundary after position 4: [1 2 3 1] [2 4 1 2 3]
    nc = count_ngrams(t, 2, 1, doc_offsets=[0, 4])
    assert as_dict(nc) == {(1, 2, 3): 2, (2, 3, 1): 1, (2, 4, 1): 1, (4, 1, 2): 1}


@pytest.mark.parametrize("doc", list(DOCS))
@pytest.mark.parametrize("k,l", KL)
def test_counts_match_brute_force(k, l, doc):
    offsets = DOCS[doc]
    t = random_stream(seed=10 * k + l)
    nc = count_ngrams(t, k, l, doc_offsets=offsets)
    check_structure(nc, k, l)
    expected = naive_ngrams(t, k + l, offsets)
    assert as_dict(nc) == expected
    assert dict(count_ngrams_counter(t, k, l, doc_offsets=offsets)) == expected
    assert nc.total() == sum(expected.values())


@pytest.mark.parametrize("doc", list(DOCS))
@pytest.mark.parametrize("k,l", [(1, 1), (2, 2), (3, 1)])
def test_total_is_number_of_valid_windows(k, l, doc):
    offsets = DOCS[doc]
    t = random_stream(seed=3)
    bounds = [0, len(t)] if offsets is None else offsets + [len(t)]
    windows = sum(max(b - a - (k + l) + 1, 0) for a, b in zip(bounds[:-1], bounds[1:]))
    assert count_ngrams(t, k, l, doc_offsets=offsets).total() == windows


@pytest.mark.parametrize("doc", list(DOCS))
@pytest.mark.parametrize("k,l", [(1, 1), (1, 3), (2, 2), (3, 1)])
def test_marginals_are_restricted_kgram_and_lgram_counts(k, l, doc):
    """Row sums = k-gram counts at positions with l more tokens in the document;
    column sums = l-gram counts at positions preceded by k tokens of the document."""
    offsets = DOCS[doc]
    t = random_stream(seed=5)
    nc = count_ngrams(t, k, l, doc_offsets=offsets)
    rows = naive_ngrams(t, k, offsets, need=k + l)
    cols = naive_ngrams(t, l, offsets, start_shift=k, need=k + l)
    assert {tuple(x): int(c) for x, c in zip(nc.prefixes.tolist(), nc.prefix_counts())} == rows
    assert {tuple(y): int(c) for y, c in zip(nc.suffixes.tolist(), nc.suffix_counts())} == cols


def test_boundaries_matter():
    """A stream split into documents loses exactly the windows that cross a boundary."""
    t = np.array([0, 1, 0, 1, 0, 1])
    assert count_ngrams(t, 1, 1).total() == 5
    nc = count_ngrams(t, 1, 1, doc_offsets=[0, 3])
    assert nc.total() == 4
    assert as_dict(nc) == {(0, 1): 2, (1, 0): 2}


def test_empty_and_short_inputs():
    for t, offsets in [(np.array([], dtype=np.int32), None), ([], [0]),
                       (np.array([3, 1]), None), (np.array([3, 1, 2, 2]), [0, 2, 2])]:
        nc = count_ngrams(t, 2, 1, doc_offsets=offsets)
        assert nc.total() == 0
        assert nc.prefixes.shape == (0, 2) and nc.suffixes.shape == (0, 1)
        assert nc.counts.shape == (0, 0)
        assert nc.joint().shape == (0, 0)
        assert count_ngrams_counter(t, 2, 1, doc_offsets=offsets) == Counter()
        g, c = ngram_frequencies(t, 3, doc_offsets=offsets)
        assert g.shape == (0, 3) and c.shape == (0,)


def test_input_types_agree():
    t = random_stream(seed=7, n=300)
    ref = as_dict(count_ngrams(t, 2, 1))
    assert as_dict(count_ngrams(t.astype(np.int32), 2, 1)) == ref
    assert as_dict(count_ngrams(t.astype(np.uint16), 2, 1)) == ref
    assert as_dict(count_ngrams(t.tolist(), 2, 1)) == ref
    assert as_dict(count_ngrams(t, 2, 1, doc_offsets=np.array([0], dtype=np.int32))) == ref


# ---------------------------------------------------------------------------
# Integer-code path vs np.unique(axis=0) fallback
# ---------------------------------------------------------------------------

def assert_identical(a: NGramCounts, b: NGramCounts):
    assert (a.k, a.l) == (b.k, b.l)
    np.testing.assert_array_equal(a.prefixes, b.prefixes)
    np.testing.assert_array_equal(a.suffixes, b.suffixes)
    assert a.prefixes.dtype == b.prefixes.dtype and a.suffixes.dtype == b.suffixes.dtype
    assert a.counts.shape == b.counts.shape and a.counts.dtype == b.counts.dtype
    for name in ("indptr", "indices", "data"):
        np.testing.assert_array_equal(getattr(a.counts, name), getattr(b.counts, name))


@pytest.mark.parametrize("doc", ["single", "many", "empty_docs"])
@pytest.mark.parametrize("k,l", KL)
def test_code_path_equals_unique_rows_fallback(k, l, doc):
    t = random_stream(seed=k * l, vocab=9)
    offsets = DOCS[doc]
    assert ng._fits_int64(9, k + l) and not ng._fits_int64(2 ** 40, k + l)
    fast = count_ngrams(t, k, l, doc_offsets=offsets)
    slow = count_ngrams(t, k, l, doc_offsets=offsets, vocab_size=2 ** 40)  # V**n > int64
    assert_identical(fast, slow)
    # a larger base that still fits int64 changes nothing either
    assert_identical(fast, count_ngrams(t, k, l, doc_offsets=offsets, vocab_size=1000))


def test_large_token_ids_use_fallback_and_are_exact():
    rng = np.random.default_rng(1)
    alphabet = np.array([0, 5, 2 ** 20, 2 ** 31 + 7, 2 ** 40])  # max**4 overflows int64
    t = alphabet[rng.integers(0, len(alphabet), size=400)]
    nc = count_ngrams(t, 2, 2, doc_offsets=[0, 150, 152])
    check_structure(nc, 2, 2)
    assert as_dict(nc) == naive_ngrams(t, 4, [0, 150, 152])


@pytest.mark.parametrize("k,l,vocab", [(1, 2, 200), (2, 2, 150), (1, 3, 40)])
def test_wide_suffix_range_uses_packed_sort_and_is_exact(k, l, vocab):
    """vocab**l much larger than the number of distinct grams: the dense table of _ranks for
    vocab**l <= 2^24, and its packed-sort branch once vocab_size = 2^40 widens the range."""
    t = random_stream(seed=vocab, n=3000, vocab=vocab)
    offsets = [0, 1000, 1001, 2500]
    nc = count_ngrams(t, k, l, doc_offsets=offsets)
    assert vocab ** l > 4 * nc.counts.nnz + 1024 and (2 ** 40) ** l > ng._DENSE_RANK_SIZE
    check_structure(nc, k, l)
    assert as_dict(nc) == naive_ngrams(t, k + l, offsets)
    assert_identical(nc, count_ngrams(t, k, l, doc_offsets=offsets, vocab_size=2 ** 40))


@pytest.mark.parametrize("size,n", [(50, 1000),            # dense table
                                    (10 ** 9, 1000),        # packed sort
                                    (2 ** 62, 1000)])       # size * G overflows: np.unique
def test_ranks_matches_np_unique(size, n):
    rng = np.random.default_rng(size % 97)
    values = rng.integers(0, size, size=n // 2, dtype=np.int64)
    values = np.concatenate([values, values[: n // 4], [0, size - 1]])  # repeats + extremes
    uniq, inverse = ng._ranks(values, size)
    ref_uniq, ref_inverse = np.unique(values, return_inverse=True)
    np.testing.assert_array_equal(uniq, ref_uniq)
    np.testing.assert_array_equal(inverse, ref_inverse.reshape(-1))


def test_encode_decode_roundtrip_is_order_preserving():
    rng = np.random.default_rng(2)
    V, width = 7, 4
    rows = rng.integers(0, V, size=(200, width))
    codes = ng._encode(list(rows.T), V)
    np.testing.assert_array_equal(ng._decode(codes, V, width), rows)
    order = np.argsort(codes, kind="stable")
    np.testing.assert_array_equal(order, np.lexsort(rows.T[::-1]))


# ---------------------------------------------------------------------------
# NGramCounts methods
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def nc22():
    return count_ngrams(random_stream(seed=11, n=2000, vocab=8), 2, 2, doc_offsets=[0, 700, 701, 1500])


def test_joint_is_normalised_counts(nc22):
    q = nc22.joint()
    assert isinstance(q, sp.csr_matrix) and q.dtype == np.float64
    assert q.shape == nc22.counts.shape
    assert q.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(q.toarray(), nc22.counts.toarray() / nc22.total())
    # q(y|x) = q(xy) / q(x) has rows summing to one
    qx = np.asarray(q.sum(axis=1)).ravel()
    cond = sp.diags(1.0 / qx) @ q
    np.testing.assert_allclose(np.asarray(cond.sum(axis=1)).ravel(), 1.0)
    assert nc22.counts.dtype == np.int64  # joint() did not modify counts


def test_index_lookup(nc22):
    for i, x in enumerate(nc22.prefixes.tolist()):
        assert nc22.prefix_index(x) == i
    for j, y in enumerate(nc22.suffixes.tolist()):
        assert nc22.suffix_index(tuple(y)) == j
    assert nc22.prefix_index(np.array(nc22.prefixes[3])) == 3
    with pytest.raises(KeyError, match=r"prefix \(99, 99\) was never seen"):
        nc22.prefix_index((99, 99))
    with pytest.raises(KeyError, match="suffix"):
        nc22.suffix_index([0, 99])
    with pytest.raises(ValueError, match="prefix must have length 2"):
        nc22.prefix_index((1,))


@pytest.mark.parametrize("mp,ms", [(1, 1), (2, 1), (1, 5), (4, 9), (30, 30), (10 ** 9, 1)])
def test_threshold_drops_exactly_the_rare_rows_and_columns(nc22, mp, ms):
    dense = nc22.counts.toarray()
    keep_r = dense.sum(axis=1) >= mp
    keep_c = dense.sum(axis=0) >= ms
    th = nc22.threshold(min_prefix_count=mp, min_suffix_count=ms)
    assert (th.k, th.l) == (2, 2)
    np.testing.assert_array_equal(th.prefixes, nc22.prefixes[keep_r])
    np.testing.assert_array_equal(th.suffixes, nc22.suffixes[keep_c])
    np.testing.assert_array_equal(th.counts.toarray(), dense[keep_r][:, keep_c])
    assert isinstance(th.counts, sp.csr_matrix) and th.counts.has_canonical_format
    assert th.counts.dtype == np.int64
    np.testing.assert_array_equal(nc22.counts.toarray(), dense)  # original untouched
    if (mp, ms) == (1, 1):
        assert_identical(th, nc22)


def test_threshold_validates(nc22):
    with pytest.raises(ValueError, match="min_prefix_count"):
        nc22.threshold(min_prefix_count=-1)
    with pytest.raises(ValueError, match="min_suffix_count"):
        nc22.threshold(min_suffix_count=1.5)


def test_frozen(nc22):
    with pytest.raises(AttributeError):
        nc22.k = 3


# ---------------------------------------------------------------------------
# ngram_frequencies
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("doc", ["single", "many"])
def test_ngram_frequencies(n, doc):
    offsets = DOCS[doc]
    t = random_stream(seed=n, vocab=5)
    grams, counts = ngram_frequencies(t, n, doc_offsets=offsets)
    assert grams.shape == (len(counts), n)
    assert {tuple(g): int(c) for g, c in zip(grams.tolist(), counts)} == naive_ngrams(t, n, offsets)
    # count descending; within equal counts, lexicographic
    keys = [(-int(c), tuple(g)) for g, c in zip(grams.tolist(), counts)]
    assert keys == sorted(keys)
    # the np.unique(axis=0) path yields the same lexicographic order, hence the same result
    rows, c2, coded = ng._distinct_windows(t, n, None if offsets is None else np.array(offsets),
                                           5, use_codes=False)
    assert not coded
    order = np.argsort(-c2, kind="stable")
    np.testing.assert_array_equal(rows[order], grams)
    np.testing.assert_array_equal(c2[order], counts)


def test_unigram_frequencies_are_bincount():
    t = random_stream(seed=4, n=1000, vocab=30)
    grams, counts = ngram_frequencies(t, 1)
    bc = np.bincount(t)
    nz = np.flatnonzero(bc)
    order = np.lexsort((nz, -bc[nz]))  # count desc, then token id
    np.testing.assert_array_equal(grams[:, 0], nz[order])
    np.testing.assert_array_equal(counts, bc[nz][order])


def test_ngram_frequencies_ties():
    grams, counts = ngram_frequencies(np.array([3, 1, 2, 1, 3, 0]), 1)
    np.testing.assert_array_equal(grams[:, 0], [1, 3, 0, 2])
    np.testing.assert_array_equal(counts, [2, 2, 1, 1])


# ---------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------

T = np.arange(10) % 4

BAD_CALLS = [
    (dict(tokens=T, k=0, l=1), r"^k must be an integer >= 1, got 0"),
    (dict(tokens=T, k=2, l=0), r"^l must be an integer >= 1, got 0"),
    (dict(tokens=T, k=1.5, l=1), r"^k must be an integer"),
    (dict(tokens=T, k=True, l=1), r"^k must be an integer"),
    (dict(tokens=T, k="2", l=1), r"^k must be an integer"),
    (dict(tokens=T.astype(float), k=1, l=1), r"^tokens must be .*integer.*got dtype float64"),
    (dict(tokens=T.astype(bool), k=1, l=1), r"^tokens must be .*integer.*got dtype bool"),
    (dict(tokens=T.reshape(2, 5), k=1, l=1), r"^tokens must be a 1-D .*got shape \(2, 5\)"),
    (dict(tokens=np.int64(3), k=1, l=1), r"^tokens must be a 1-D .*got shape \(\)"),
    (dict(tokens=T - 2, k=1, l=1), r"^tokens must be non-negative.*got minimum value -2"),
    (dict(tokens=T, k=1, l=1, doc_offsets=[1, 5]), r"^doc_offsets must start at 0, got doc_offsets\[0\] = 1"),
    (dict(tokens=T, k=1, l=1, doc_offsets=[]), r"^doc_offsets must be a non-empty"),
    (dict(tokens=T, k=1, l=1, doc_offsets=[[0, 5]]), r"^doc_offsets must be a non-empty 1-D"),
    (dict(tokens=T, k=1, l=1, doc_offsets=[0, 6, 4]), r"^doc_offsets must be non-decreasing.*doc_offsets\[2\] = 4"),
    (dict(tokens=T, k=1, l=1, doc_offsets=[0, 11]), r"^doc_offsets must lie in \[0, len\(tokens\)\] = \[0, 10\], got 11"),
    (dict(tokens=T, k=1, l=1, doc_offsets=[0.0, 5.0]), r"^doc_offsets must be an integer array"),
]


@pytest.mark.parametrize("kwargs,match", BAD_CALLS)
def test_validation_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        count_ngrams(**kwargs)
    with pytest.raises(ValueError, match=match):
        count_ngrams_counter(**kwargs)


def test_vocab_size_validation():
    with pytest.raises(ValueError, match=r"^vocab_size must be >= max\(tokens\) \+ 1 = 4, got 3"):
        count_ngrams(T, 1, 1, vocab_size=3)
    with pytest.raises(ValueError, match=r"^vocab_size must be an integer >= 1, got 0"):
        count_ngrams(T, 1, 1, vocab_size=0)
    with pytest.raises(ValueError, match=r"^vocab_size must be an integer"):
        count_ngrams(T, 1, 1, vocab_size=4.0)
    assert count_ngrams(T, 1, 1, vocab_size=4).total() == 9


def test_ngram_frequencies_validation():
    with pytest.raises(ValueError, match=r"^n must be an integer >= 1, got 0"):
        ngram_frequencies(T, 0)
    with pytest.raises(ValueError, match=r"^doc_offsets must start at 0"):
        ngram_frequencies(T, 1, doc_offsets=[2])
