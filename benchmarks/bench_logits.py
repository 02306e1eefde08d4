"""Benchmark lib.logits: contexts h∘f per second for L_{M,k}(H, F), history reuse against one pass per context.

    python benchmarks/bench_logits.py [--n 256] [--k 50] [--size p-small] [--threads 1,2] [--min-ratio 3]
                                      [--repeats 3] [--no-generic] [--no-distributed] [--json PATH]

Setting: the largest model of the book's ``ci`` suite (trained by the Introduction; read from
the cache), |H| = |F| = n histories and futures drawn from held-out text as the chapter
"Logit rank" draws them (App. A.1.1, ℓ from 20 to 80 characters, spans of at most 30
tokens), k = 50 columns per future (selected once beforehand, not timed). Both sides
return the mean-centred logits of the same columns:

* ours      ``logits.extended_logit_matrix``: each history encoded once, its key/value cache
            reused for all futures (histories of unequal lengths batched with left-padded
            caches, futures batched by length); on GPT-NeoX the layers run directly, layer 1's
            token-wise parts looked up per token, the last layer only at each future's last
            position; the head evaluated only at the selected columns;
* generic   the same call with ``last_position_only=False`` (cache reuse through the
            backbone's own forward: the previous implementation), unless ``--no-generic``;
* baseline  ``logits.naive_extended_logit_matrix``: every h∘f sorted by length, batched,
            right-padded, one forward pass each, log-softmax over the vocabulary at the
            last real position, centred, the same columns picked.

Timing (benchmarks/harness.py): at each thread count of --threads (torch and BLAS/OpenMP
limited to it, reported separately) the arms run ``--repeats`` times, interleaved in one
process (the order rotates each round); wall and CPU time are both reported, each arm's best
run of each, and the ratios are ratios of the bests, with the 1-minute load average before
and after every run. Beside them, the arithmetic: floating-point operations of the linear
layers and the head (2·rows·cols per token and weight matrix) and of attention, for each
scheme at these lengths (no padding), so the measured ratio can be read against the bound
the scheme allows. Also, at the smallest thread count t: the same call under ``torchrun`` with
2 processes (gloo) against 1 process, each t threads. Reports contexts/s, the ratios, and the
largest difference (must be ≤ 1e-4); exits 1 if the results differ, or, on a clean run (load
average within the cores), the CPU-time ratio is below --min-ratio; a loaded run is reported,
not gated. Smoke check: --n 16 --repeats 1 --no-distributed --threads 1."""
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

from benchmarks.harness import (TIMING_GATE_RULE, Comparison, add_arguments, compute_threads,  # noqa: E402
                                interleave, thread_environment)
from lib import logits as lg, substrate  # noqa: E402
from lib.models import prefix_reuse  # noqa: E402
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
        env = {**os.environ, **thread_environment(threads), "PYTHONPATH": str(ROOT)}
        args = [script, str(n), base, str(threads), str(ROOT), size]
        cmd = ([sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={world}", "--master_port=29541"]
               if world > 1 else [sys.executable]) + args
        t = time.perf_counter()
        out = subprocess.run(cmd, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t
        if out.returncode:
            raise RuntimeError(out.stderr[-3000:])
        return np.load(base + f".w{world}.npy"), float(Path(base + f".w{world}.json").read_text()), wall


def work(model, H, F, k: int) -> dict:
    """Floating-point operations of each scheme at these lengths (no padding): linear layers and
    head (2 flops per multiply-add), and attention (QKᵀ and the weighted sum of V, 4·d per
    query-key pair). A GPT-NeoX layer has 2·(3d² + d² + 2·d·I) flops of linear layers per token
    (fused query/key/value, output projection, MLP of width I)."""
    cfg = model.config
    d, n_layers, inter, V = cfg.hidden_size, cfg.num_hidden_layers, cfg.intermediate_size, model.vocab_size
    layer = 2 * (3 * d * d + d * d + 2 * d * inter)
    first = 2 * d * d if getattr(cfg, "use_parallel_residual", True) else 2 * (d * d + 2 * d * inter)
    kv_only, at_last = 2 * 2 * d * d, 2 * (d * d + d * d + 2 * d * inter)
    h, f = np.array([len(x) for x in H], float), np.array([len(x) for x in F], float)
    nH, nF = len(H), len(F)
    ctx = (h[:, None] + f[None, :]).ravel()
    naive_lin = ctx.sum() * n_layers * layer + nH * nF * 2 * d * V
    hist = h.sum() * n_layers * layer
    generic_lin = hist + nH * f.sum() * n_layers * layer + nH * nF * 2 * d * k
    if n_layers > 1:
        per_f = f * (first + (n_layers - 2) * layer + kv_only) + at_last
    else:
        per_f = f * kv_only + at_last
    ours_lin = hist + nH * per_f.sum() + nH * nF * 2 * d * k
    tri = lambda t: t * (t + 1) / 2  # noqa: E731  (query t attends to t keys, causal)
    naive_att = 4 * d * n_layers * tri(ctx).sum()
    futures_att = h.sum() * f.sum() + nH * tri(f).sum()   # query t of f after h attends |h| + t keys
    reuse_att = 4 * d * (n_layers * tri(h).sum() + (n_layers - 1) * futures_att)
    generic_att = reuse_att + 4 * d * futures_att
    ours_att = reuse_att + 4 * d * (h[:, None] + f[None, :]).sum()
    return {"naive_linear_flops": float(naive_lin), "generic_linear_flops": float(generic_lin),
            "ours_linear_flops": float(ours_lin), "naive_attention_flops": float(naive_att),
            "generic_attention_flops": float(generic_att), "ours_attention_flops": float(ours_att),
            "bound_linear_generic": float(naive_lin / generic_lin), "bound_linear_ours": float(naive_lin / ours_lin),
            "bound_all_ours": float((naive_lin + naive_att) / (ours_lin + ours_att)),
            "token_ratio_cache_reuse": float(ctx.sum() / (h.sum() + nH * f.sum()))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--k", type=int, default=50)
    ap.add_argument("--size", default=None)
    ap.add_argument("--min-ratio", type=float, default=3.0, help="fail below this CPU-time ratio (clean runs only)")
    add_arguments(ap, repeats=3)
    ap.add_argument("--no-generic", action="store_true")
    ap.add_argument("--no-distributed", action="store_true")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)

    suite, size, H, F = setting(args.n, args.size)
    model = suite.load(size, device="cpu")
    cols = lg.select_columns(model, F, args.k)
    contexts = len(H) * len(F)
    arms = {"ours": lambda: lg.extended_logit_matrix(model, H, F, columns=cols),
            "naive": lambda: lg.naive_extended_logit_matrix(model, H, F, columns=cols)}
    if not args.no_generic:
        arms["generic"] = lambda: lg.extended_logit_matrix(model, H, F, columns=cols, last_position_only=False)
    fast = prefix_reuse.last_position_supported(model)          # the probe runs once, outside the timings
    result = {
        "benchmark": "logits.extended_logit_matrix",
        "model": size, "n_params": model.n_params, "hidden_size": model.config.hidden_size,
        "layers": model.config.num_hidden_layers, "vocab": model.vocab_size,
        "histories": len(H), "futures": len(F), "k": args.k,
        "mean_history_tokens": float(np.mean([len(h) for h in H])),
        "mean_future_tokens": float(np.mean([len(f) for f in F])),
        "repeats": args.repeats, "last_position_path": fast, "work": work(model, H, F, args.k),
        "machine": machine_info(), "gate_rule": TIMING_GATE_RULE, "runs": [],
    }
    ok = True
    for t in args.threads:
        print(f"== {t} thread{'s' if t > 1 else ''}", flush=True)
        c = interleave(arms, threads=t, repeats=args.repeats, rotate=True, verbose=True)
        diff = {a: float(np.abs(c.result(a) - c.result("naive")).max()) for a in arms if a != "naive"}
        run = {"threads": t, "loaded": c.loaded, "timing": c.as_dict(),
               "best": {a: {"wall": c.best(a), "cpu": c.sides[a].best_cpu} for a in arms},
               "ours_contexts_per_s": contexts / c.best("ours"), "naive_contexts_per_s": contexts / c.best("naive"),
               "ratio": c.ratio("naive", "ours"), "cpu_ratio": c.ratio("naive", "ours", cpu=True),
               "max_abs_diff": diff["ours"]}
        if "generic" in arms:
            run.update({"generic_max_abs_diff": diff["generic"], "generic_ratio": c.ratio("naive", "generic"),
                        "generic_cpu_ratio": c.ratio("naive", "generic", cpu=True),
                        "ours_over_generic_cpu": c.ratio("generic", "ours", cpu=True)})
        print(f"  {c.summary()}\n  wall ratio {run['ratio']:.2f}, CPU-time ratio {run['cpu_ratio']:.2f}, "
              f"max |diff| {diff['ours']:.1e}", flush=True)
        ok &= c.gate(run["cpu_ratio"] >= args.min_ratio) and max(diff.values()) <= 1e-4
        result["runs"].append(run)
    if not args.no_distributed:
        t = min(args.threads)
        d = Comparison(threads=t)
        with compute_threads(t):
            one = d.time("one_process", lambda: run_workers(len(H), size, t, cols, 1), seconds_of=lambda r: r[1])
            two = d.time("two_processes", lambda: run_workers(len(H), size, t, cols, 2), seconds_of=lambda r: r[1])
        result["distributed"] = {"threads_per_process": t, "one_process_s": one[1], "two_process_s": two[1],
                                 "distributed_ratio": one[1] / two[1], "one_process_wall_s": one[2],
                                 "two_process_wall_s": two[2],
                                 "distributed_max_abs_diff": float(np.abs(one[0] - two[0]).max()),
                                 "timing": d.as_dict()}
        ok &= result["distributed"]["distributed_max_abs_diff"] <= 1e-5
    result["ok"] = bool(ok)
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
