"""Benchmark the Examples chapter's pipeline (Chen & Murfet, App. B) against plain baselines.

    python benchmarks/bench_examples.py [--copies C] [--kl K L] [--threshold T] [--rank R]
                                        [--counter-tokens N] [--threads 1,2] [--repeats 3]
                                        [--processes 3] [--quick] [--json PATH]

Data: the book's offline corpus tokenized with its tokenizer (bpe:2048), repeated ``--copies``
times (documents kept apart) so that the stream has at least 10^7 tokens.

1. Counting at k + l = 4 (default (2, 2)): ``lib.empirical_modes.count_sequences`` (count, then the
   paper's thresholds) against
   * a plain numpy/scipy count: window codes for x and y, ``np.unique`` for the row and column
     indices, ``scipy.sparse.coo_matrix(...).tocsr()`` to sum duplicates, the same thresholds;
   * the pure-Python ``collections.Counter`` (``lib.text.ngrams.count_ngrams_counter``) on the first
     ``--counter-tokens`` tokens (it is far too slow for the whole stream), as tokens per second.
   The scipy result must equal ours exactly.
2. The top-``--rank`` SVD of the chapter's largest matrix — the paper's P at (2, 2), threshold 10,
   on the corpus once — by the paper's rule (randomized SVD here, the smaller side is above 5000)
   and by our Lanczos, against scipy's ``svds(P, k)`` with its defaults; ratios are baseline time /
   our time, and the leading singular values must agree. Ours runs BLAS on one thread at every
   count (the library's policy, lib.book.threads.solver_threads); svds gets the count given.

Timing (benchmarks/harness.py): each thread count of --threads runs in fresh processes (polars
sizes its sorting pool when it starts), with torch, BLAS/OpenMP and polars at that count; within
each part the sides are interleaved --repeats times in a process, and each side's best wall-clock
run over --processes such processes (default 3, one after another) is reported, with the 1-minute
load average before and after every run (a run whose load exceeded the cores is flagged; no timing
is gated here). Several processes because a baseline's speed can differ between processes more than
between runs in one (scipy's count by 12 % in two quiet runs, ours by 0.1 %). Exits 1 if a result
disagrees or the stream is under 10^7 tokens. --quick: the corpus once, rank 20, 200,000 Counter
tokens, one repetition, one process, no 10^7 requirement (a smoke test, not a measurement).
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

from benchmarks.harness import TIMING_GATE_RULE, add_arguments, interleave, main_per_thread_count  # noqa: E402
from lib import empirical_modes as em  # noqa: E402
from lib import examples_experiments as ex  # noqa: E402
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


def derive_counting(counting: dict) -> dict:
    """The counting part's bests, rates and ratios, from its comparison ``counting["timing"]``."""
    best = {name: side["best_s"] for name, side in counting["timing"]["sides"].items()}
    n, m = counting["tokens"], counting["counter_tokens"]
    counting.update(ours_s=best["ours"], ours_tokens_per_s=n / best["ours"], scipy_s=best["scipy"],
                    scipy_tokens_per_s=n / best["scipy"], speedup_vs_scipy=best["scipy"] / best["ours"],
                    counter_s=best["counter"], counter_tokens_per_s=m / best["counter"],
                    speedup_vs_counter=(n / best["ours"]) / (m / best["counter"]))
    return counting


def derive_svd(svd: dict) -> dict:
    """The SVD part's bests and ratios (svds' time over ours), from its comparison ``svd["timing"]``."""
    best = {name: side["best_s"] for name, side in svd["timing"]["sides"].items()}
    svd.update(rule_s=best["rule"], lanczos_s=best["lanczos"], scipy_svds_s=best["svds"],
               ratio_rule=best["svds"] / best["rule"], ratio_lanczos=best["svds"] / best["lanczos"])
    return svd


def run_ok(counting: dict, svd: dict, quick: bool) -> bool:
    """Our counts equal scipy's, our leading singular values agree with svds' to 1e-8, and the stream has
    at least 10^7 tokens (unless ``quick``)."""
    return bool(counting["agree_with_scipy"] and svd["agree_top10_rule"] < 1e-8
                and (counting["tokens"] >= 10 ** 7 or quick))


def refresh(merged: dict, runs: list[dict]) -> None:
    """The run merged over several processes: bests and ratios from the merged comparisons; the checks
    hold only if they held in every process (the worst singular-value agreement is kept)."""
    derive_counting(merged["counting"])["agree_with_scipy"] = all(r["counting"]["agree_with_scipy"] for r in runs)
    derive_svd(merged["svd"])
    for key in ("agree_top10_rule", "agree_all_rule", "agree_top10_lanczos"):
        merged["svd"][key] = max(r["svd"][key] for r in runs)
    merged["ok"] = run_ok(merged["counting"], merged["svd"], merged["quick"])
    merged["loaded"] = merged["counting"]["timing"]["loaded"] or merged["svd"]["timing"]["loaded"]


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--copies", type=int, default=3, help="repeat the corpus this many times (>= 1e7 tokens)")
    ap.add_argument("--kl", type=int, nargs=2, default=(2, 2), help="k and l of the counting benchmark")
    ap.add_argument("--threshold", type=int, default=10)
    ap.add_argument("--rank", type=int, default=100)
    ap.add_argument("--counter-tokens", type=int, default=1_000_000)
    add_arguments(ap, repeats=3, processes=3)
    ap.add_argument("--quick", action="store_true", help="small settings, one repetition, one process (a smoke test)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.quick:
        args.copies, args.rank, args.counter_tokens, args.repeats, args.processes = 1, 20, 200_000, 1, 1
    return main_per_thread_count(__file__, args, argv, measure, refresh)


def measure(args) -> int:
    """The benchmark at one thread count (this process's pools were started at it)."""
    threads, R = args.threads[0], args.repeats
    k, l = args.kl
    _, tok, stream = ex.load_token_stream("default", "bpe:2048", 1000.0, seed=0)
    V = tok.vocab_size
    tokens, offsets = tile(stream.tokens, stream.doc_offsets, args.copies)
    n = len(tokens)
    print(f"\n== {threads} thread{'s' if threads > 1 else ''}: numpy {np.__version__}, scipy {scipy.__version__}, "
          f"python {platform.python_version()}, cpus {os.cpu_count()}; best of {R} interleaved runs")
    print(f"stream: {n:,} tokens ({args.copies} copies of the corpus), V = {V}, (k, l) = ({k}, {l}), "
          f"threshold {args.threshold}")

    # 1. counting
    m = min(args.counter_tokens, n)
    c = interleave({"ours": lambda: em.count_sequences(tokens, k, l, offsets, V, args.threshold),
                    "scipy": lambda: scipy_count(tokens, offsets, k, l, V, args.threshold),
                    "counter": lambda: count_ngrams_counter(tokens[:m], k, l)}, threads=threads, repeats=R)
    ours, (xs, ys, C) = c.result("ours"), c.result("scipy")
    code = lambda seqs: (seqs.astype(np.int64) * (V ** np.arange(seqs.shape[1] - 1, -1, -1))).sum(1)  # noqa: E731
    agree = (np.array_equal(code(ours.prefixes), xs) and np.array_equal(code(ours.suffixes), ys)
             and (ours.counts != C).nnz == 0)
    counting = derive_counting(dict(tokens=n, k=k, l=l, counter_tokens=m, agree_with_scipy=bool(agree),
                                    shape=list(ours.shape), nnz=int(ours.counts.nnz), timing=c.as_dict()))
    t_ours, t_scipy, t_counter = counting["ours_s"], counting["scipy_s"], counting["counter_s"]
    print(f"\ncounting (k+l = {k + l})   tokens/s        best (s)   ratio (ours/baseline tokens/s)")
    print(f"  ours (count_sequences)  {counting['ours_tokens_per_s']:>12,.0f}  {t_ours:>9.2f}")
    print(f"  numpy/scipy COO         {counting['scipy_tokens_per_s']:>12,.0f}  {t_scipy:>9.2f}   "
          f"{counting['speedup_vs_scipy']:.1f}×   (identical result: {agree})")
    print(f"  Counter ({m:,} tokens)  {counting['counter_tokens_per_s']:>12,.0f}  {t_counter:>9.2f}   "
          f"{counting['speedup_vs_counter']:.0f}×")
    print(f"  {c.summary()}")
    del c, ours, C

    # 2. the SVD of the chapter's largest matrix
    counts = em.count_sequences(stream.tokens, 2, 2, stream.doc_offsets, V, 10)
    P = em.conditional_matrix(counts, 1.0, "observed")
    rule = em.choose_method(P.shape)
    c = interleave({"rule": lambda: em.top_components(P, args.rank, "auto", seed=0),
                    "lanczos": lambda: em.top_components(P, args.rank, "lanczos", seed=0),
                    "svds": lambda: spla.svds(P, k=args.rank)}, threads=threads, repeats=R)
    r_rule, r_lz = c.result("rule"), c.result("lanczos")
    s_base = np.sort(c.result("svds")[1])[::-1]
    svd = derive_svd(dict(shape=list(P.shape), nnz=int(P.nnz), rank=args.rank, rule=rule,
                          agree_top10_rule=em.singular_value_agreement(s_base, r_rule.s, 10),
                          agree_all_rule=em.singular_value_agreement(s_base, r_rule.s),
                          agree_top10_lanczos=em.singular_value_agreement(s_base, r_lz.s, 10), timing=c.as_dict()))
    print(f"\ntop-{args.rank} SVD of P at (2, 2): {P.shape[0]:,} × {P.shape[1]:,}, {P.nnz:,} non-zeros "
          f"(ours: BLAS on one thread, the library's policy)")
    print(f"  {'ours, rule (' + rule + ')':<24}{svd['rule_s']:>7.2f} s   ratio {svd['ratio_rule']:.2f}   "
          f"top-10 σ vs scipy {svd['agree_top10_rule']:.1e}, all {svd['agree_all_rule']:.1e}")
    print(f"  {'ours, lanczos':<24}{svd['lanczos_s']:>7.2f} s   ratio {svd['ratio_lanczos']:.2f}   "
          f"top-10 σ vs scipy {svd['agree_top10_lanczos']:.1e}")
    print(f"  {'scipy svds (defaults)':<24}{svd['scipy_svds_s']:>7.2f} s")
    print(f"  {c.summary()}")
    ok = run_ok(counting, svd, args.quick)
    loaded = counting["timing"]["loaded"] or svd["timing"]["loaded"]
    print(("OK" if ok else "FAIL") + (" (load exceeded the cores by more than 0.5: timings reported, not comparable)" if loaded else ""))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(dict(threads=threads, repeats=R, quick=args.quick, counting=counting, svd=svd,
                                             ok=ok, loaded=loaded, gate_rule=TIMING_GATE_RULE, numpy=np.__version__,
                                             scipy=scipy.__version__, python=platform.python_version()),
                                        indent=2) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
