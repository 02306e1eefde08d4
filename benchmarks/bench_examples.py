"""Benchmark the Examples chapter's pipeline (Chen & Murfet, App. B) against plain baselines.

    python benchmarks/bench_examples.py [--copies C] [--kl K L] [--threshold T] [--rank R]
                                        [--counter-tokens N] [--json PATH]

Data: the book's offline corpus tokenized with its tokenizer (bpe:2048), repeated ``--copies``
times (documents kept apart) so that the stream has at least 10^7 tokens.

1. Counting at k + l = 4 (default (2, 2)): ``lib.empirical_modes.count_sequences`` (count, then the
   paper's thresholds), best of 3, against
   * a plain numpy/scipy count: window codes for x and y, ``np.unique`` for the row and column
     indices, ``scipy.sparse.coo_matrix(...).tocsr()`` to sum duplicates, the same thresholds;
   * the pure-Python ``collections.Counter`` (``lib.text.ngrams.count_ngrams_counter``) on the first
     ``--counter-tokens`` tokens (it is far too slow for the whole stream), as tokens per second.
   The scipy result must equal ours exactly.
2. The top-``--rank`` SVD of the chapter's largest matrix — the paper's P at (2, 2), threshold 10,
   on the corpus once — by the paper's rule (randomized SVD here, the smaller side is above 5000)
   and by our Lanczos, against scipy's ``svds(P, k)`` with its defaults; ratios are baseline time /
   our time, and the leading singular values must agree.
Timings are wall-clock seconds on this machine (set OPENBLAS_NUM_THREADS to pin BLAS threads).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # repo root, for `lib`

import numpy as np  # noqa: E402
import scipy  # noqa: E402
import scipy.sparse as sp  # noqa: E402
import scipy.sparse.linalg as spla  # noqa: E402

from lib.book.timing import best_of  # noqa: E402
from lib import empirical_modes as em  # noqa: E402
from lib.text.ngrams import count_ngrams_counter  # noqa: E402



def tile(tokens, offsets, copies):
    n = len(tokens)
    return (np.tile(tokens, copies),
            np.concatenate([offsets + i * n for i in range(copies)]).astype(np.int64))


def scipy_count(tokens, offsets, k, l, V, t):
    """Plain numpy/scipy counting with the paper's thresholds (x first, then y), for comparison."""
    n = len(tokens)
    ends = np.append(offsets[1:], n)
    doc = np.searchsorted(offsets, np.arange(n - k - l + 1), side="right") - 1
    starts = np.flatnonzero(np.arange(n - k - l + 1) + k + l <= ends[doc])
    tok = tokens.astype(np.int64)
    xc = np.zeros(len(starts), dtype=np.int64)
    for j in range(k):
        xc = xc * V + tok[starts + j]
    yc = np.zeros(len(starts), dtype=np.int64)
    for j in range(l):
        yc = yc * V + tok[starts + k + j]
    xs, rows = np.unique(xc, return_inverse=True)
    ys, cols = np.unique(yc, return_inverse=True)
    C = sp.coo_matrix((np.ones(len(starts), dtype=np.int64), (rows, cols)), shape=(len(xs), len(ys))).tocsr()
    cx = np.asarray(C.sum(axis=1)).ravel()
    keep_x = np.flatnonzero(cx >= t)
    C = C[keep_x]
    keep_y = np.flatnonzero(np.asarray(C.sum(axis=0)).ravel() >= t)
    C = C[:, keep_y].tocsr()
    nonempty = np.flatnonzero(np.diff(C.indptr) > 0)
    return xs[keep_x][nonempty], ys[keep_y], C[nonempty].tocsr()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--copies", type=int, default=3, help="repeat the corpus this many times (>= 1e7 tokens)")
    ap.add_argument("--kl", type=int, nargs=2, default=(2, 2), help="k and l of the counting benchmark")
    ap.add_argument("--threshold", type=int, default=10)
    ap.add_argument("--rank", type=int, default=100)
    ap.add_argument("--counter-tokens", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=3, help="best of this many runs, for ours and the baseline alike")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    k, l = args.kl
    _, tok, stream = em.load_token_stream("default", "bpe:2048", 1000.0, seed=0)
    V = tok.vocab_size
    tokens, offsets = tile(stream.tokens, stream.doc_offsets, args.copies)
    n = len(tokens)
    print(f"numpy {np.__version__}, scipy {scipy.__version__}, python {platform.python_version()}, "
          f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}, cpus {os.cpu_count()}")
    print(f"stream: {n:,} tokens ({args.copies} copies of the corpus), V = {V}, (k, l) = ({k}, {l}), "
          f"threshold {args.threshold}")

    # 1. counting
    t_ours, ours = best_of(lambda: em.count_sequences(tokens, k, l, offsets, V, args.threshold), args.repeats)
    t_scipy, (xs, ys, C) = best_of(lambda: scipy_count(tokens, offsets, k, l, V, args.threshold), args.repeats)
    code = lambda seqs: (seqs.astype(np.int64) * (V ** np.arange(seqs.shape[1] - 1, -1, -1))).sum(1)  # noqa: E731
    agree = (np.array_equal(code(ours.prefixes), xs) and np.array_equal(code(ours.suffixes), ys)
             and (ours.counts != C).nnz == 0)
    m = min(args.counter_tokens, n)
    t_counter, _ = best_of(lambda: count_ngrams_counter(tokens[:m], k, l), 1)
    counting = dict(tokens=n, k=k, l=l, ours_s=t_ours, ours_tokens_per_s=n / t_ours, scipy_s=t_scipy,
                    scipy_tokens_per_s=n / t_scipy, speedup_vs_scipy=t_scipy / t_ours,
                    counter_tokens=m, counter_tokens_per_s=m / t_counter,
                    speedup_vs_counter=(n / t_ours) / (m / t_counter), agree_with_scipy=bool(agree),
                    shape=list(ours.shape), nnz=int(ours.counts.nnz))
    print(f"\ncounting (k+l = {k + l})   tokens/s        time (s)   ratio (ours/baseline tokens/s)")
    print(f"  ours (count_sequences)  {counting['ours_tokens_per_s']:>12,.0f}  {t_ours:>9.2f}")
    print(f"  numpy/scipy COO         {counting['scipy_tokens_per_s']:>12,.0f}  {t_scipy:>9.2f}   "
          f"{counting['speedup_vs_scipy']:.1f}×   (identical result: {agree})")
    print(f"  Counter ({m:,} tokens)  {counting['counter_tokens_per_s']:>12,.0f}  {t_counter:>9.2f}   "
          f"{counting['speedup_vs_counter']:.0f}×")

    # 2. the SVD of the chapter's largest matrix
    c = em.count_sequences(stream.tokens, 2, 2, stream.doc_offsets, V, 10)
    P = em.conditional_matrix(c, 1.0, "observed")
    rule = em.choose_method(P.shape)
    t_rule, r_rule = best_of(lambda: em.top_components(P, args.rank, "auto", seed=0), 1)
    t_lz, r_lz = best_of(lambda: em.top_components(P, args.rank, "lanczos", seed=0), 1)
    t_base, (_, s_base, _) = best_of(lambda: spla.svds(P, k=args.rank), 1)
    s_base = np.sort(s_base)[::-1]
    svd = dict(shape=list(P.shape), nnz=int(P.nnz), rank=args.rank, rule=rule, rule_s=t_rule, lanczos_s=t_lz,
               scipy_svds_s=t_base, ratio_rule=t_base / t_rule, ratio_lanczos=t_base / t_lz,
               agree_top10_rule=em.singular_value_agreement(s_base, r_rule.s, 10),
               agree_all_rule=em.singular_value_agreement(s_base, r_rule.s),
               agree_top10_lanczos=em.singular_value_agreement(s_base, r_lz.s, 10))
    print(f"\ntop-{args.rank} SVD of P at (2, 2): {P.shape[0]:,} × {P.shape[1]:,}, {P.nnz:,} non-zeros")
    print(f"  ours, rule ({rule})      {t_rule:>7.2f} s   ratio {svd['ratio_rule']:.2f}   "
          f"top-10 σ vs scipy {svd['agree_top10_rule']:.1e}, all {svd['agree_all_rule']:.1e}")
    print(f"  ours, lanczos           {t_lz:>7.2f} s   ratio {svd['ratio_lanczos']:.2f}   "
          f"top-10 σ vs scipy {svd['agree_top10_lanczos']:.1e}")
    print(f"  scipy svds (defaults)   {t_base:>7.2f} s")
    ok = agree and svd["agree_top10_rule"] < 1e-8 and n >= 10 ** 7
    print("OK" if ok else "FAIL")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(dict(counting=counting, svd=svd, ok=bool(ok), numpy=np.__version__,
                                             scipy=scipy.__version__, python=platform.python_version(),
                                             openblas_threads=os.environ.get("OPENBLAS_NUM_THREADS")), indent=2) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
