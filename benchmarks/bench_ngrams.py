"""Benchmark lib.text.ngrams.count_ngrams (vectorised) against the Counter baseline.

    python benchmarks/bench_ngrams.py [--tokens N] [--vocab V] [--seed S]
                                      [--large N2] [--min-ratio R] [--json PATH]

Two streams of --tokens tokens each, both counted by both implementations at
(k, l) = (2, 1), (3, 1) (k + l = 3) and (2, 2) (k + l = 4):

* ``corpus``: the book's offline default corpus tokenized with the book's
  tokenizer (bpe:2048), with its document boundaries: the data the chapters
  count. The required speed-up (--min-ratio, default 10) is checked here.
* ``zipf``: i.i.d. tokens from a Zipf-Mandelbrot law p(r) ∝ 1/(r + 2.7) over
  V = --vocab ranks. Unigram statistics resemble text, but almost every 4-gram
  is distinct, the hardest case for a sort-based count; reported, not gated.

The vectorised time is the best of 3, the Counter time one run (it is ~1 s and
varies little). Exits with status 1 if the results disagree anywhere or the
corpus speed-up is below --min-ratio. A last line times the vectorised count
alone on --large Zipf tokens at k + l = 4.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # repo root, for `lib`

import numpy as np  # noqa: E402
import scipy  # noqa: E402

from lib.book.timing import best_of  # noqa: E402
from lib.text.ngrams import count_ngrams, count_ngrams_counter  # noqa: E402

CASES = [(2, 1), (2, 2), (3, 1)]


def zipf_tokens(n: int, vocab: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    p = 1.0 / (np.arange(vocab) + 2.7)
    return rng.choice(vocab, size=n, p=p / p.sum()).astype(np.int32)



def as_dict(nc) -> dict:
    coo = nc.counts.tocoo()
    keys = np.hstack([nc.prefixes[coo.row], nc.suffixes[coo.col]]).tolist()
    return dict(zip(map(tuple, keys), coo.data.tolist()))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=2_000_000, help="stream length for the comparison")
    ap.add_argument("--vocab", type=int, default=4096, help="vocabulary size V")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--large", type=int, default=10_000_000,
                    help="stream length for the vectorised-only run at k+l=4 (0 to skip)")
    ap.add_argument("--min-ratio", type=float, default=10.0, help="fail below this speed-up")
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    args = ap.parse_args(argv)

    from lib import empirical_modes as em

    _, tok, stream = em.load_token_stream("default", "bpe:2048", 1000.0, seed=0)
    if len(stream.tokens) < args.tokens:
        raise SystemExit(f"the corpus has {len(stream.tokens):,} tokens, fewer than --tokens {args.tokens:,}")
    corpus_tokens = stream.tokens[:args.tokens]
    corpus_offsets = stream.doc_offsets[stream.doc_offsets < args.tokens]
    streams = [("corpus", corpus_tokens, corpus_offsets, tok.vocab_size, True),
               ("zipf", zipf_tokens(args.tokens, args.vocab, args.seed), None, args.vocab, False)]
    rows, ok = [], True
    header = (f"{'stream':<8}{'case':<10}{'tokens':>12}{'vectorised s':>14}{'Counter s':>12}{'ratio':>9}"
              f"{'tokens/s':>14}  agree")
    print(f"numpy {np.__version__}, scipy {scipy.__version__}, python {platform.python_version()}, seed = {args.seed}")
    print(f"corpus: the book's default corpus, bpe:2048 (V = {tok.vocab_size}), {len(corpus_offsets):,} documents; "
          f"zipf: i.i.d. Zipf-Mandelbrot, V = {args.vocab}")
    print(header)
    print("-" * len(header))
    for name, tokens, offsets, V, gated in streams:
        for k, l in CASES:
            t_fast, nc = best_of(lambda: count_ngrams(tokens, k, l, offsets, vocab_size=V), 3)
            t_slow, counter = best_of(lambda: count_ngrams_counter(tokens, k, l, offsets), 1)
            agree = as_dict(nc) == counter
            ratio = t_slow / t_fast
            ok &= agree and (ratio >= args.min_ratio or not gated)
            row = dict(stream=name, case=f"k={k},l={l}", k=k, l=l, tokens=args.tokens, vocab=V, gated=gated,
                       vectorised_s=t_fast, counter_s=t_slow, ratio=ratio, tokens_per_s=args.tokens / t_fast,
                       agree=agree, distinct_prefixes=nc.counts.shape[0], distinct_suffixes=nc.counts.shape[1],
                       distinct_ngrams=nc.counts.nnz)
            rows.append(row)
            print(f"{name:<8}{row['case']:<10}{args.tokens:>12,}{t_fast:>14.4f}{t_slow:>12.3f}{ratio:>9.1f}"
                  f"{row['tokens_per_s']:>14,.0f}  {agree}  ({nc.counts.nnz:,} distinct {k + l}-grams)")
            del nc, counter

    large = None
    if args.large > 0:
        big = zipf_tokens(args.large, args.vocab, args.seed + 1)
        t_big, nc = best_of(lambda: count_ngrams(big, 2, 2, vocab_size=args.vocab), 3)
        large = dict(case="k=2,l=2", tokens=args.large, vectorised_s=t_big,
                     tokens_per_s=args.large / t_big, distinct_ngrams=nc.counts.nnz)
        print(f"{'zipf':<8}{'k=2,l=2':<10}{args.large:>12,}{t_big:>14.4f}{'-':>12}{'-':>9}"
              f"{large['tokens_per_s']:>14,.0f}  (vectorised only)")

    status = "OK" if ok else f"FAIL (disagreement, or a corpus ratio < {args.min_ratio})"
    print(status)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(dict(
            tokens=args.tokens, vocab=args.vocab, seed=args.seed, min_ratio=args.min_ratio, ok=ok,
            cases=rows, large=large, numpy=np.__version__, scipy=scipy.__version__,
            python=platform.python_version(), machine=platform.machine()), indent=2) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
