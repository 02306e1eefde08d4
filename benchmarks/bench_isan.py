"""Benchmark lib.isan: learning a time-varying ISAN from logit queries (Theorem 4.4).

    python benchmarks/bench_isan.py [--d 8] [--alphabet 4] [--T 10] [--eps 0.05]
                                    [--seed 0] [--scale 1.0] [--json PATH]

A random ISAN (lib.isan.random_isan, fixed seed) is learned by Algorithms 2-3
through its next_logits oracle; reported: wall time, logit queries (calls to the
oracle), the theorem's N = ⌈4T/ε ln(dT/ε)⌉, prefixes sampled, the spans |H_t|,
and the exact TV to the original over all |Σ|^T strings. sequence_logprobs and
tv_distance are timed (best of 3) at the same size. Exits with status 1 if
TV > eps or the learner takes more than --max-seconds (default 60).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # repo root, for `lib`

import numpy as np  # noqa: E402

from lib.book.timing import best_of  # noqa: E402
from lib.isan import learn_from_logit_queries, random_isan, tv_distance  # noqa: E402



def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--d", type=int, default=8)
    ap.add_argument("--alphabet", type=int, default=4)
    ap.add_argument("--T", type=int, default=10)
    ap.add_argument("--eps", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--max-seconds", type=float, default=60.0)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)

    model = random_isan(args.d, args.alphabet, args.T, np.random.default_rng(args.seed), scale=args.scale)
    t0 = time.perf_counter()
    learned, n_queries, info = learn_from_logit_queries(
        model.next_logits, args.alphabet, args.T, args.eps, np.random.default_rng(args.seed + 1),
        d=args.d, return_info=True)
    learn_s = time.perf_counter() - t0

    lp_s, lp = best_of(model.sequence_logprobs)
    tv_s, tv = best_of(lambda: tv_distance(model, learned))
    res = dict(
        d=args.d, alphabet_size=args.alphabet, T=args.T, eps=args.eps, seed=args.seed, scale=args.scale,
        n_strings=args.alphabet ** args.T, learn_seconds=learn_s, logit_queries=n_queries,
        N=info["N"], samples=info["samples"], iterations=info["iterations"], spans=info["sizes"],
        ranks=info["ranks"], learned_hidden_dim=info["hidden_dim"], tv=tv,
        sequence_logprobs_seconds=lp_s, tv_distance_seconds=tv_s,
        logsumexp_error=float(abs(np.log(np.exp(lp).sum()))),
        python=platform.python_version(), numpy=np.__version__, machine=platform.machine())
    w = max(map(len, res))
    for k, v in res.items():
        print(f"{k:<{w}}  {v:.3g}" if isinstance(v, float) else f"{k:<{w}}  {v}")
    if args.json:
        args.json.write_text(json.dumps(res, indent=2))

    ok = tv <= args.eps and learn_s <= args.max_seconds
    if not ok:
        print(f"FAIL: tv = {tv:.3g} (eps {args.eps}), learner {learn_s:.1f} s (limit {args.max_seconds} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
