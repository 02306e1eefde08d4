"""Benchmark lib.logits: contexts h∘f per second for L_{M,k}(H, F), history reuse against one pass per context.

    python benchmarks/bench_logits.py [--n 256] [--k 50] [--size p-small] [--threads 1] [--min-ratio 3]
                                      [--no-distributed] [--json PATH]

Setting: the largest model of the book's ``ci`` suite (trained by the Introduction; read from
the cache), |H| = |F| = n histories and futures drawn from held-out text as the chapter
"Logit rank" draws them (App. A.1.1, ℓ from 20 to 80 characters, spans of at most 30
tokens), k = 50 columns per future (selected once beforehand, not timed). Both sides
return the mean-centred logits of the same columns:

* ours      ``logits.extended_logit_matrix``: each history encoded once, its key/value cache
            reused for all futures (histories of unequal lengths batched with left-padded
            caches, futures batched by length), the head evaluated only at the selected columns;
* baseline  ``logits.naive_extended_logit_matrix``: every h∘f sorted by length, batched,
            right-padded, one forward pass each, log-softmax over the vocabulary at the
            last real position, centred, the same columns picked.

One run each (the baseline takes minutes), same process, ``--threads`` torch threads; wall and
process CPU time are both reported (on a shared machine the CPU-time ratio is the steadier one).
Also: the same call under ``torchrun`` with 2 processes (gloo) against 1 process, each
``--threads`` threads. Reports contexts/s, the ratios, and the largest difference (must be
≤ 1e-4); exits 1 if the ratio is below --min-ratio or the results differ.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # repo root, for `lib`

import numpy as np  # noqa: E402
import torch  # noqa: E402

from lib import logits as lg, substrate  # noqa: E402
from lib.book.timing import machine_info  # noqa: E402


def setting(n: int, size: str | None, seed: int = 0):
    suite, tok, _train, _held = substrate.book_suite("ci", seed, "cpu")
    intro = substrate.intro_settings("ci", seed, "cpu")
    text = substrate.load_text(intro["corpus"], intro["max_corpus_mb"])
    _, held_idx = text.split(heldout_fraction=substrate.HELDOUT_FRACTION, seed=seed)
    docs = [text.documents[i] for i in held_idx]
    sp = lg.sample_spans(docs, int(n * 1.3) + 8, 20, 80, seed=seed, one_per_document=False)
    enc = lambda s: tuple(int(t) for t in tok.encode(s))  # noqa: E731
    H = [h for h in map(enc, sp.histories) if 0 < len(h) <= 30][:n]
    F = [f for f in map(enc, sp.futures) if 0 < len(f) <= 30][:n]
    size = size or suite.sizes[-1]
    return suite, size, H, F


WORKER = r"""
import sys, time, numpy as np, torch
torch.set_num_threads(int(sys.argv[3]))
sys.path.insert(0, sys.argv[4])
from benchmarks.bench_logits import setting
from lib import logits as lg
suite, size, H, F = setting(int(sys.argv[1]), sys.argv[5])
model = suite.load(size, device="cpu")
cols = np.load(sys.argv[2] + ".cols.npy")
import torch.distributed as dist
from lib.book.device import process_group
rank, world = process_group()
if world > 1:
    dist.barrier()
t = time.perf_counter()
L = lg.extended_logit_matrix(model, H, F, columns=cols)
seconds = time.perf_counter() - t
if rank == 0:
    np.save(sys.argv[2] + f".w{world}.npy", L)
    open(sys.argv[2] + f".w{world}.json", "w").write(str(seconds))
"""


def run_workers(n, size, threads, cols, world):
    with tempfile.TemporaryDirectory() as tmp:
        base = os.path.join(tmp, "m")
        np.save(base + ".cols.npy", cols)
        script = os.path.join(tmp, "worker.py")
        Path(script).write_text(WORKER)
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": str(threads)}
        args = [script, str(n), base, str(threads), str(ROOT), size]
        cmd = ([sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={world}", "--master_port=29541"]
               if world > 1 else [sys.executable]) + args
        t = time.perf_counter()
        out = subprocess.run(cmd, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t
        if out.returncode:
            raise RuntimeError(out.stderr[-3000:])
        return np.load(base + f".w{world}.npy"), float(Path(base + f".w{world}.json").read_text()), wall


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--k", type=int, default=50)
    ap.add_argument("--size", default=None)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--min-ratio", type=float, default=3.0)
    ap.add_argument("--no-distributed", action="store_true")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    suite, size, H, F = setting(args.n, args.size)
    model = suite.load(size, device="cpu")
    cols = lg.select_columns(model, F, args.k)
    contexts = len(H) * len(F)
    t, c = time.perf_counter(), time.process_time()
    ours = lg.extended_logit_matrix(model, H, F, columns=cols)
    t_ours, c_ours = time.perf_counter() - t, time.process_time() - c
    t, c = time.perf_counter(), time.process_time()
    naive = lg.naive_extended_logit_matrix(model, H, F, columns=cols)
    t_naive, c_naive = time.perf_counter() - t, time.process_time() - c
    diff = float(np.abs(ours - naive).max())
    result = {
        "benchmark": "logits.extended_logit_matrix",
        "model": size, "n_params": model.n_params, "histories": len(H), "futures": len(F), "k": args.k,
        "mean_history_tokens": float(np.mean([len(h) for h in H])),
        "mean_future_tokens": float(np.mean([len(f) for f in F])),
        "threads": args.threads,
        "ours_s": t_ours, "naive_s": t_naive,
        "ours_contexts_per_s": contexts / t_ours, "naive_contexts_per_s": contexts / t_naive,
        "ratio": t_naive / t_ours, "ours_cpu_s": c_ours, "naive_cpu_s": c_naive, "cpu_ratio": c_naive / c_ours,
        "max_abs_diff": diff,
        "machine": machine_info(),
    }
    if not args.no_distributed:
        one, s1, wall1 = run_workers(len(H), size, args.threads, cols, 1)
        two, s2, wall2 = run_workers(len(H), size, args.threads, cols, 2)
        result.update({"one_process_s": s1, "two_process_s": s2, "distributed_ratio": s1 / s2,
                       "one_process_wall_s": wall1, "two_process_wall_s": wall2,
                       "distributed_max_abs_diff": float(np.abs(one - two).max())})
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    ok = result["ratio"] >= args.min_ratio and diff <= 1e-4 and result.get("distributed_max_abs_diff", 0) <= 1e-5
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
