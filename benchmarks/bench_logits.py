"""Benchmark lib.logits: contexts h∘f per second for L_{M,k}(H, F), history reuse against one pass per context.

    python benchmarks/bench_logits.py [--n 256] [--k 50] [--size p-small] [--threads 1] [--min-ratio 3]
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

The arms run ``--repeats`` times, interleaved in one process (the order rotates each round),
``--threads`` torch threads; wall and process CPU time are both reported, and the ratios are
ratios of medians (on a shared machine the CPU-time ratio is the steadier one). Beside them,
the arithmetic: floating-point operations of the linear layers and the head (2·rows·cols per
token and weight matrix) and of attention, for each scheme at these lengths (no padding), so
the measured ratio can be read against the bound the scheme allows.
Also: the same call under ``torchrun`` with 2 processes (gloo) against 1 process, each
``--threads`` threads. Reports contexts/s, the ratios, and the largest difference (must be
≤ 1e-4); exits 1 if the CPU-time ratio is below --min-ratio or the results differ.
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
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--min-ratio", type=float, default=3.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-generic", action="store_true")
    ap.add_argument("--no-distributed", action="store_true")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error(f"--repeats must be at least 1; got {args.repeats}")
    torch.set_num_threads(args.threads)

    suite, size, H, F = setting(args.n, args.size)
    model = suite.load(size, device="cpu")
    cols = lg.select_columns(model, F, args.k)
    contexts = len(H) * len(F)
    arms = {"ours": lambda: lg.extended_logit_matrix(model, H, F, columns=cols),
            "naive": lambda: lg.naive_extended_logit_matrix(model, H, F, columns=cols)}
    if not args.no_generic:
        arms["generic"] = lambda: lg.extended_logit_matrix(model, H, F, columns=cols, last_position_only=False)
    fast = prefix_reuse.last_position_supported(model)          # the probe runs once, outside the timings
    names = list(arms)
    times = {a: {"wall": [], "cpu": []} for a in names}
    out = {}
    for r in range(args.repeats):
        for a in names[r % len(names):] + names[:r % len(names)]:   # rotate the order each round
            t, c = time.perf_counter(), time.process_time()
            out[a] = arms[a]()
            times[a]["wall"].append(time.perf_counter() - t)
            times[a]["cpu"].append(time.process_time() - c)
            print(f"round {r}: {a:8s} wall {times[a]['wall'][-1]:7.2f} s, CPU {times[a]['cpu'][-1]:7.2f} s",
                  flush=True)
    med = {a: {k: float(np.median(v)) for k, v in times[a].items()} for a in names}
    diff = {a: float(np.abs(out[a] - out["naive"]).max()) for a in names if a != "naive"}
    result = {
        "benchmark": "logits.extended_logit_matrix",
        "model": size, "n_params": model.n_params, "hidden_size": model.config.hidden_size,
        "layers": model.config.num_hidden_layers, "vocab": model.vocab_size,
        "histories": len(H), "futures": len(F), "k": args.k,
        "mean_history_tokens": float(np.mean([len(h) for h in H])),
        "mean_future_tokens": float(np.mean([len(f) for f in F])),
        "threads": args.threads, "repeats": args.repeats, "last_position_path": fast,
        "times": times, "median": med,
        "ours_contexts_per_s": contexts / med["ours"]["wall"], "naive_contexts_per_s": contexts / med["naive"]["wall"],
        "ratio": med["naive"]["wall"] / med["ours"]["wall"], "cpu_ratio": med["naive"]["cpu"] / med["ours"]["cpu"],
        "max_abs_diff": diff["ours"],
        "work": work(model, H, F, args.k),
        "machine": machine_info(),
    }
    if "generic" in names:
        result.update({"generic_max_abs_diff": diff["generic"],
                       "generic_ratio": med["naive"]["wall"] / med["generic"]["wall"],
                       "generic_cpu_ratio": med["naive"]["cpu"] / med["generic"]["cpu"],
                       "ours_over_generic_cpu": med["generic"]["cpu"] / med["ours"]["cpu"]})
    if not args.no_distributed:
        one, s1, wall1 = run_workers(len(H), size, args.threads, cols, 1)
        two, s2, wall2 = run_workers(len(H), size, args.threads, cols, 2)
        result.update({"one_process_s": s1, "two_process_s": s2, "distributed_ratio": s1 / s2,
                       "one_process_wall_s": wall1, "two_process_wall_s": wall2,
                       "distributed_max_abs_diff": float(np.abs(one - two).max())})
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    ok = (result["cpu_ratio"] >= args.min_ratio and max(diff.values()) <= 1e-4
          and result.get("distributed_max_abs_diff", 0) <= 1e-5)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
