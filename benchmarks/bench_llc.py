"""Benchmark lib.llc.estimate_llc against devinterp 2.0.1 and 1.3.2, side by side.

    python benchmarks/bench_llc.py [--threads 2] [--rrr-eps 6e-4] [--many-chains 256]
                                   [--cases rrr,transformer] [--repeats 1] [--quick]
                                   [--no-gate] [--json PATH]

Two cases, each sampled by our estimator and by both devinterp versions from the same
w* and data (trained/built once here, saved to a temporary .pt that every side loads):

(a) reduced-rank regression (M, H, N) = (5, 3, 5), devinterp's own test
    (tests/slt/rrr_test.py): n = 1000, x ~ N(0, I_5), y ~ N(0, I_5) (true rank 0),
    y = B A x trained by Adam (lr 0.01, 5000 full-batch steps, torch.manual_seed(42)),
    loss F.mse_loss; SGLD ε = 6e-4 (the issue's; devinterp's test uses 6e-5), γ = 1,
    nβ = n/ln n, full batch, 3 chains × 2000 draws, seed 42, no burn-in. True λ = 6.5
    (Aoyagi & Watanabe 2005, case 1, M + H + N odd). Ours also with --many-chains chains
    (the headline throughput; goal ≥ 20× the faster devinterp's chain-steps/s), once in
    one process of --threads threads and once as the library's torchrun split over the same
    cores (--rrr-ranks processes of --threads / ranks threads; the headline).
(b) the 417,280-parameter transformer of tiny_transformer.py (2 layers, d_model 128,
    4 heads, MLP 4×, context 32, vocabulary 64) at its seeded initialisation, on 4096
    random sequences of 33 tokens; next-token cross entropy, 4 chains × 200 draws,
    batch 32, ε = 1e-4, γ = 100, nβ = n/ln n with n = 4096 (goal ≥ 1.5× the faster
    devinterp). Reported: the fraction of the machine's fp32 matmul peak (a large
    torch.matmul) that ours reaches, with FLOPs per chain-step counted by
    torch.utils.flop_counter on one forward + backward; and the eager ceiling, bare forward +
    backward steps/s of the same model with no sampler, as --tf-ranks concurrent processes
    and as one process of --threads threads (no eager-PyTorch sampler can beat it).

Every side runs in its own subprocess with the same torch thread count (OMP_NUM_THREADS
and torch.set_num_threads = --threads), except ours on the transformer and the headline
RRR run, which by default use the same cores as the library's torchrun split: 2 processes
(--tf-ranks, --rrr-ranks) of --threads / 2 threads each, the chains split between them
(chunk_size = chains / ranks; on the transformer with estimate_llc(batching="loop")); their
peak RSS and disk are summed over the ranks. Reported per side: seconds of the sampling call only, chain-steps/s,
λ̂ mean ± std over chains, peak RSS (ru_maxrss of that process, imports included) and
bytes left on disk by the run; with --repeats R every side runs R times, interleaved,
and its fastest run is kept. The 1-minute load average before and after each run is
recorded (the timings mean little when other work shares the CPUs). The devinterp sides run in .venv-devinterp2 and
.venv-devinterp1 (``bash scripts/setup_bench.sh``, or ``make bench``); without them the
script says so and exits 2. Exits 1 if either goal ratio is missed (unless --no-gate).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))  # repo root, for `lib`
sys.path.insert(0, str(HERE))  # tiny_transformer

TRUE_RRR_LLC = 6.5  # Aoyagi: (1 + 2MN + 2HN + 2MH − N² − M² − H²) / 8 at (5, 3, 5)
BASELINES = {"devinterp 2.0.1": ".venv-devinterp2", "devinterp 1.3.2": ".venv-devinterp1"}


# ----- the data and w*, made once -------------------------------------------------------

def make_rrr(path: Path, m=5, h=3, n_out=5, n=1000, steps=5000) -> dict:
    """devinterp's rrr_test: seed 42, x, y ~ N(0, 1), model initialised after the data, Adam."""
    import torch
    import torch.nn.functional as F

    from tiny_transformer import rrr_model

    torch.manual_seed(42)
    x, y = torch.randn(n, m), torch.randn(n, n_out)
    model = rrr_model(m, h, n_out)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    t0 = time.perf_counter()
    for _ in range(steps):
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
    with torch.no_grad():
        final = F.mse_loss(model(x), y).item()
    torch.save({"shape": [m, h, n_out], "state_dict": model.state_dict(), "x": x, "y": y}, path)
    return dict(n=n, train_steps=steps, train_seconds=time.perf_counter() - t0, train_loss=final)


def make_transformer(path: Path, n_seq=4096, seq_len=33, vocab=64, seed=0) -> dict:
    import torch

    from tiny_transformer import TinyTransformer

    config = dict(vocab=vocab, context=seq_len - 1, d_model=128, n_heads=4, n_layers=2, mlp_ratio=4)
    torch.manual_seed(seed)
    model = TinyTransformer(**config)
    tokens = torch.randint(0, vocab, (n_seq, seq_len), generator=torch.Generator().manual_seed(seed + 1))
    torch.save({"config": config, "state_dict": model.state_dict(), "tokens": tokens}, path)
    return dict(n=n_seq, params=sum(p.numel() for p in model.parameters()), config=config)


def flops_per_step(data: Path, batch_size: int) -> int:
    """FLOPs of one forward + backward of the transformer on one minibatch (flop_counter)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from tiny_transformer import TinyTransformer, per_sequence_loss

    blob = torch.load(data, weights_only=True)
    model = TinyTransformer(**blob["config"])
    model.load_state_dict(blob["state_dict"])
    counter = FlopCounterMode(display=False)
    with counter:
        per_sequence_loss(model, blob["tokens"][:batch_size]).mean().backward()
    return int(counter.get_total_flops())


def matmul_peak(size=2048, repeats=7) -> float:
    """Best fp32 FLOP/s of a size² @ size² torch.matmul (the machine's achievable peak)."""
    import torch

    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2 * size ** 3 / best


# ----- one side in its own process --------------------------------------------------------

def _dir_bytes(root: Path) -> int:
    return sum(os.lstat(os.path.join(d, f)).st_size for d, _, fs in os.walk(root) for f in fs)


def worker(spec: dict) -> dict:
    """Our side (runs in a subprocess of this script, `--worker SPEC`)."""
    work = Path(tempfile.mkdtemp(prefix="llc-bench-"))
    os.environ["TMPDIR"] = str(work)
    tempfile.tempdir = str(work)
    cwd = os.getcwd()
    os.chdir(work)
    try:
        import numpy as np
        import torch

        torch.set_num_threads(spec["threads"])
        from lib.llc import estimate_llc
        from tiny_transformer import TinyTransformer, per_sequence_loss, rrr_model

        blob = torch.load(spec["data"], weights_only=True)
        if spec["case"] == "rrr":
            model = rrr_model(*blob["shape"])
            data = (blob["x"], blob["y"])

            def loss_fn(model, batch):  # per-sample; its batch mean is F.mse_loss
                x, y = batch
                return ((model(x) - y) ** 2).mean(dim=1)
        else:
            model = TinyTransformer(**blob["config"])
            data = (blob["tokens"],)

            def loss_fn(model, batch):
                return per_sequence_loss(model, batch[0])
        model.load_state_dict(blob["state_dict"])
        t0 = time.perf_counter()
        res = estimate_llc(model, loss_fn, data, nbeta=spec["nbeta"], gamma=spec["gamma"], eps=spec["eps"],
                           chains=spec["chains"], draws=spec["draws"], burn_in=0, batch_size=spec["batch_size"],
                           seed=spec["seed"], device="cpu", chunk_size=spec.get("chunk_size"), progress=False,
                           batching=spec.get("batching", "vmap"))
        call_seconds = time.perf_counter() - t0
        disk = _dir_bytes(work)
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        import torch.distributed as dist

        ranks = 1
        if dist.is_available() and dist.is_initialized():  # torchrun: every rank's peak RSS and disk, summed
            ranks = dist.get_world_size()
            everything = [None] * ranks
            dist.all_gather_object(everything, (rss, disk))
            rss, disk = (sum(v) for v in zip(*everything))
            if dist.get_rank() != 0:
                return None
    finally:
        os.chdir(cwd)
        shutil.rmtree(work, ignore_errors=True)
    per_chain = np.asarray(res.per_chain, dtype=float)
    steps = spec["chains"] * spec["draws"]
    d = res.diagnostics
    return dict(
        side="ours", torch=torch.__version__, threads=spec["threads"], ranks=ranks, batching=spec.get("batching", "vmap"),
        chunk_size=spec.get("chunk_size"), case=spec["case"], chains=spec["chains"],
        draws=spec["draws"], batch_size=spec["batch_size"], eps=spec["eps"], gamma=spec["gamma"],
        nbeta=spec["nbeta"], seed=spec["seed"], chain_steps=steps, seconds=res.seconds,
        call_seconds=call_seconds, chain_steps_per_s=steps / res.seconds, llc=res.llc, se=res.se,
        llc_mean=float(per_chain.mean()), llc_std=float(per_chain.std(ddof=1)) if len(per_chain) > 1 else math.nan,
        llc_per_chain=per_chain.tolist()[:16], init_loss=res.init_loss,
        rhat=float(d.get("rhat", math.nan)), ess_mean=float(np.mean(d["ess"])) if "ess" in d else math.nan,
        mala_acceptance=float(np.nanmean(d["mala_acceptance"])) if "mala_acceptance" in d else math.nan,
        divergent=len(d.get("divergent", [])),
        peak_rss_bytes=rss, disk_bytes=disk)


def plain_worker(spec: dict) -> dict:
    """The eager ceiling: bare forward + backward of the transformer on fresh minibatches (no sampler)."""
    import torch

    from tiny_transformer import TinyTransformer, per_sequence_loss

    torch.set_num_threads(spec["threads"])
    blob = torch.load(spec["data"], weights_only=True)
    model = TinyTransformer(**blob["config"])
    model.load_state_dict(blob["state_dict"])
    tokens, gen = blob["tokens"], torch.Generator().manual_seed(0)
    times = []
    for i in range(spec["steps"] + 5):
        batch = tokens[torch.randint(0, tokens.shape[0], (spec["batch_size"],), generator=gen)]
        t0 = time.perf_counter()
        model.zero_grad(set_to_none=True)
        per_sequence_loss(model, batch).mean().backward()
        if i >= 5:  # the first steps warm the allocator
            times.append(time.perf_counter() - t0)
    return dict(steps_per_s=1.0 / sorted(times)[len(times) // 2], threads=spec["threads"])


def eager_ceiling(data: str, batch_size: int, threads: int, ranks: int, steps: int = 40) -> dict:
    """Steps/s of bare forward + backward: ``ranks`` concurrent processes of threads/ranks threads (summed), and one
    process of ``threads`` threads; what any sampler built on eager PyTorch can at most reach on these cores."""
    me = Path(__file__).resolve()

    def launch(t):
        spec = dict(data=data, batch_size=batch_size, threads=t, steps=steps)
        env = dict(os.environ, OMP_NUM_THREADS=str(t), MKL_NUM_THREADS=str(t))
        return subprocess.Popen([sys.executable, str(me), "--plain", json.dumps(spec)], stdout=subprocess.PIPE,
                                text=True, env=env, cwd=ROOT)

    def rate(procs):
        return sum(json.loads(p.communicate()[0].strip().splitlines()[-1])["steps_per_s"] for p in procs)

    split = rate([launch(threads // ranks) for _ in range(ranks)])
    whole = rate([launch(threads)])
    return dict(split_steps_per_s=split, one_process_steps_per_s=whole, ranks=ranks, threads=threads)


def run_side(python: Path, script: Path, spec: dict, threads: int, extra=(), ranks: int = 1) -> dict:
    """One side in a subprocess; with ``ranks`` > 1 under ``torchrun`` (the library's multi-process split)."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               OPENBLAS_NUM_THREADS=str(threads), TQDM_DISABLE="1", PYTHONWARNINGS="ignore")
    launch = [str(python)]
    if ranks > 1:
        launch += ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}"]
    proc = subprocess.run([*launch, str(script), *extra, json.dumps(spec)], capture_output=True, text=True,
                          env=env, cwd=ROOT)
    if proc.returncode != 0:
        raise RuntimeError(f"{python} {script.name} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ----- report ----------------------------------------------------------------------------

def _mib(b) -> str:
    return f"{b / 2**20:.0f} MiB"


def _disk(b) -> str:
    return "0" if b == 0 else (f"{b / 2**20:.1f} MiB" if b >= 2**20 else f"{b / 1024:.0f} KiB")


def print_table(rows: list[dict]) -> None:
    head = ["case", "side", "chains×draws", "s", "chain-steps/s", "ratio", "λ̂ ± std", "peak RSS", "disk"]
    lines = [head]
    for r in rows:
        lam = f"{r['llc_mean']:.2f} ± {r['llc_std']:.2f}"
        side = r["side"] + (f" ({r['ranks']} ranks × {r['threads']} thread)" if r.get("ranks", 1) > 1 else "")
        lines.append([r["case_label"], side, f"{r['chains']}×{r['draws']}", f"{r['seconds']:.2f}",
                      f"{r['chain_steps_per_s']:,.0f}", f"{r['ratio']:.1f}×" if r.get("ratio") else "",
                      lam, _mib(r["peak_rss_bytes"]), _disk(r["disk_bytes"])])
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(head))]
    for i, line in enumerate(lines):
        print("  ".join(str(c).ljust(w) for c, w in zip(line, widths)).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2, help="torch/OpenMP threads on every side (default 2)")
    ap.add_argument("--rrr-eps", type=float, default=6e-4, help="SGLD ε for RRR (devinterp's test: 6e-5)")
    ap.add_argument("--rrr-draws", type=int, default=2000)
    ap.add_argument("--many-chains", type=int, default=256, help="our headline RRR run")
    ap.add_argument("--rrr-ranks", type=int, default=2,
                    help="ours on RRR with --many-chains chains: torchrun processes of --threads / ranks threads "
                         "each, the chains split between them (default 2, the same cores as the other sides; the "
                         "same run in one process of --threads threads is shown beside it)")
    ap.add_argument("--tf-eps", type=float, default=1e-4)
    ap.add_argument("--tf-gamma", type=float, default=100.0)
    ap.add_argument("--tf-chains", type=int, default=4)
    ap.add_argument("--tf-draws", type=int, default=200)
    ap.add_argument("--tf-batch", type=int, default=32)
    ap.add_argument("--tf-ranks", type=int, default=2,
                    help="ours on the transformer: torchrun processes of --threads / ranks threads each, the "
                         "chains split between them (default 2; 1 = one process of --threads threads)")
    ap.add_argument("--tf-batching", choices=["vmap", "loop"], default="loop",
                    help="ours on the transformer: estimate_llc(batching=...) (default loop)")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--min-rrr-ratio", type=float, default=20.0)
    ap.add_argument("--min-tf-ratio", type=float, default=1.5)
    ap.add_argument("--repeats", type=int, default=1,
                    help="run every side this many times, interleaved, and keep each side's fastest (default 1)")
    ap.add_argument("--quick", action="store_true", help="smoke test: 10x fewer draws, 32 chains")
    ap.add_argument("--no-gate", action="store_true", help="report only; exit 0 even if a goal is missed")
    ap.add_argument("--cases", type=lambda v: v.split(","), default=["rrr", "transformer"],
                    help="comma-separated subset of rrr,transformer (default both)")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--plain", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the `finally`s: temporary files go

    if args.plain is not None:
        print(json.dumps(plain_worker(json.loads(args.plain))))
        return 0
    if args.worker is not None:
        out = worker(json.loads(args.worker))
        if out is not None:  # under torchrun only rank 0 reports
            print(json.dumps(out))
        return 0

    pythons = {side: ROOT / venv / "bin" / "python" for side, venv in BASELINES.items()}
    missing = [str(p.relative_to(ROOT)) for p in pythons.values() if not p.exists()]
    if missing:
        print(f"bench_llc: the devinterp baseline venvs are missing ({', '.join(missing)}).\n"
              f"Create them with `bash scripts/setup_bench.sh` (or run `make bench`, which does).", file=sys.stderr)
        return 2
    if args.quick:
        args.rrr_draws, args.tf_draws, args.many_chains = args.rrr_draws // 10, args.tf_draws // 10, 32

    import torch

    torch.set_num_threads(args.threads)
    from lib.book.timing import machine_info

    unknown = set(args.cases) - {"rrr", "transformer"}
    if unknown:
        ap.error(f"--cases: unknown {sorted(unknown)}")
    tmp = Path(tempfile.mkdtemp(prefix="bench-llc-"))
    rows: list[dict] = []
    res: dict = dict(date=time.strftime("%Y-%m-%d"), threads=args.threads, quick=args.quick, repeats=args.repeats,
                     true_rrr_llc=TRUE_RRR_LLC, torch=torch.__version__, platform=platform.platform(), rows=rows,
                     goals=dict(rrr=args.min_rrr_ratio, transformer=args.min_tf_ratio), goals_met={})
    me = Path(__file__).resolve()
    baseline = HERE / "devinterp_baseline.py"

    def save():
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(dict(res, **machine_info()), indent=2, default=float))

    def one(label, spec, who):
        print(f"  {label}: {who} ({spec['chains']} chains × {spec['draws']} draws) …", flush=True)
        load = os.getloadavg()[0]
        if who == "ours":
            ranks = spec.get("ranks", 1)
            r = run_side(Path(sys.executable), me, dict(spec, threads=spec["threads"] // ranks), spec["threads"] // ranks,
                         extra=("--worker",), ranks=ranks)
        else:
            r = run_side(pythons[who], baseline, spec, args.threads)
        r["case_label"] = label
        r["load_average_1min"] = [load, os.getloadavg()[0]]  # before and after: other work on the machine
        return r

    def sides(label, runs):
        """Each (spec, who) once per repeat, interleaved; the fastest of each kept."""
        out = [[] for _ in runs]
        for _ in range(args.repeats):
            for i, (spec, who) in enumerate(runs):
                out[i].append(one(label, spec, who))
        best = []
        for tries in out:
            r = max(tries, key=lambda r: r["chain_steps_per_s"])
            r["repeats_chain_steps_per_s"] = [t["chain_steps_per_s"] for t in tries]
            rows.append(r)
            best.append(r)
        save()  # partial results survive an interrupted run
        return best

    failures, notes = [], []
    try:
        if "rrr" in args.cases:
            info = make_rrr(tmp / "rrr.pt")
            n = info["n"]
            rrr = dict(case="rrr", data=str(tmp / "rrr.pt"), eps=args.rrr_eps, gamma=1.0, nbeta=n / math.log(n),
                       chains=3, draws=args.rrr_draws, batch_size=n, seed=args.seed, threads=args.threads)
            res["rrr"] = dict(rrr, **info)
            print(f"== RRR (5, 3, 5), ε = {args.rrr_eps:g}, γ = 1, nβ = n/ln n = {rrr['nbeta']:.1f}, full batch")
            if args.rrr_ranks < 1 or args.threads % args.rrr_ranks or args.many_chains % args.rrr_ranks:
                ap.error("--rrr-ranks must divide --threads and --many-chains")
            many_spec = dict(rrr, chains=args.many_chains)
            split_spec = dict(many_spec, ranks=args.rrr_ranks, chunk_size=args.many_chains // args.rrr_ranks)
            runs = [*((rrr, who) for who in BASELINES), (rrr, "ours"), (many_spec, "ours")]
            if args.rrr_ranks > 1:
                runs.append((split_spec, "ours"))
            got = sides("RRR", runs)
            dv, ours3, manys = got[:len(BASELINES)], got[len(BASELINES)], got[len(BASELINES) + 1:]
            many = manys[-1]  # the headline: the library's torchrun split over the same cores (or one process)
            best = max(dv, key=lambda r: r["chain_steps_per_s"])
            for r in (ours3, *manys):
                r["ratio"] = r["chain_steps_per_s"] / best["chain_steps_per_s"]
            for r in (*dv, ours3, *manys):
                r["llc_rel_error"] = abs(r["llc_mean"] - TRUE_RRR_LLC) / TRUE_RRR_LLC
            res.update(rrr_ratio=many["ratio"], rrr_ratio_3_chains=ours3["ratio"],
                       rrr_ratio_one_process=manys[0]["ratio"])
            res["goals_met"]["rrr"] = ok = many["ratio"] >= args.min_rrr_ratio
            notes.append(f"RRR: true λ = {TRUE_RRR_LLC}; λ̂ (mean ± std over chains): " + "; ".join(
                f"{r['side']} ({r['chains']} chains) {r['llc_mean']:.2f} ± {r['llc_std']:.2f}"
                for r in (*dv, ours3, *manys)))
            split = f" as {args.rrr_ranks} ranks × {args.threads // args.rrr_ranks} thread" if args.rrr_ranks > 1 else ""
            notes.append(f"RRR ratios vs the faster devinterp ({best['side']}, {best['chain_steps_per_s']:,.0f} "
                         f"chain-steps/s): 3 chains {ours3['ratio']:.1f}×, {args.many_chains} chains in one process "
                         f"{manys[0]['ratio']:.1f}×" + (f", {args.many_chains} chains{split} {many['ratio']:.1f}×"
                                                         if len(manys) > 1 else "")
                         + f" (goal ≥ {args.min_rrr_ratio:g}×, on the last)")
            if not ok:
                failures.append(f"RRR {args.many_chains} chains {many['ratio']:.1f}× < {args.min_rrr_ratio:g}×")
        if "transformer" in args.cases:
            info = make_transformer(tmp / "transformer.pt", seed=args.seed)
            nt = info["n"]
            tf = dict(case="transformer", data=str(tmp / "transformer.pt"), eps=args.tf_eps, gamma=args.tf_gamma,
                      nbeta=nt / math.log(nt), chains=args.tf_chains, draws=args.tf_draws, batch_size=args.tf_batch,
                      seed=args.seed, threads=args.threads)
            print(f"== transformer ({info['params']:,} parameters), ε = {args.tf_eps:g}, γ = {args.tf_gamma:g}, "
                  f"batch {args.tf_batch}, nβ = {tf['nbeta']:.1f}")
            flops = flops_per_step(tmp / "transformer.pt", args.tf_batch)
            peak = matmul_peak()
            res.update(transformer=dict(tf, **info), flops_per_chain_step=flops, matmul_peak_flop_per_s=peak)
            if args.tf_ranks < 1 or args.threads % args.tf_ranks or args.tf_chains % args.tf_ranks:
                ap.error("--tf-ranks must divide --threads and --tf-chains")
            ours_tf = dict(tf, ranks=args.tf_ranks, batching=args.tf_batching,
                           chunk_size=args.tf_chains // args.tf_ranks if args.tf_ranks > 1 else None)
            *dv, ours = sides("transformer", [*((tf, who) for who in BASELINES), (ours_tf, "ours")])
            best = max(dv, key=lambda r: r["chain_steps_per_s"])
            ours["ratio"] = ours["chain_steps_per_s"] / best["chain_steps_per_s"]
            for r in (*dv, ours):
                r.update(flops_per_chain_step=flops, flop_per_s=flops * r["chain_steps_per_s"],
                         fraction_of_matmul_peak=flops * r["chain_steps_per_s"] / peak)
            res["transformer_ratio"] = ours["ratio"]
            res["goals_met"]["transformer"] = ok = ours["ratio"] >= args.min_tf_ratio
            notes.append(f"transformer: {flops / 1e9:.2f} GFLOP per chain-step (forward + backward, batch "
                         f"{args.tf_batch}); fp32 matmul peak {peak / 1e9:.1f} GFLOP/s; ours "
                         f"{ours['flop_per_s'] / 1e9:.1f} GFLOP/s = {100 * ours['fraction_of_matmul_peak']:.0f} % of "
                         "peak (" + ", ".join(f"{r['side']} {100 * r['fraction_of_matmul_peak']:.0f} %" for r in dv)
                         + ")")
            notes.append(f"transformer ratio vs the faster devinterp ({best['side']}, "
                         f"{best['chain_steps_per_s']:.1f} chain-steps/s): {ours['ratio']:.2f}× "
                         f"(goal ≥ {args.min_tf_ratio:g}×)")
            ceiling = eager_ceiling(tf["data"], args.tf_batch, args.threads, args.tf_ranks)
            ceiling.update(ratio_split=ceiling["split_steps_per_s"] / best["chain_steps_per_s"],
                           ours_fraction_of_split=ours["chain_steps_per_s"] / ceiling["split_steps_per_s"],
                           best_devinterp_fraction_of_one_process=best["chain_steps_per_s"]
                           / ceiling["one_process_steps_per_s"])
            res["transformer_eager_ceiling"] = ceiling
            notes.append(f"transformer eager ceiling (bare forward + backward, no sampler): {args.tf_ranks} processes "
                         f"× {args.threads // args.tf_ranks} thread {ceiling['split_steps_per_s']:.1f} steps/s "
                         f"(= {ceiling['ratio_split']:.2f}× the faster devinterp; ours reaches "
                         f"{100 * ceiling['ours_fraction_of_split']:.0f} % of it), one process × {args.threads} threads "
                         f"{ceiling['one_process_steps_per_s']:.1f} steps/s ({best['side']} reaches "
                         f"{100 * ceiling['best_devinterp_fraction_of_one_process']:.0f} % of it)")
            if not ok:
                failures.append(f"transformer {ours['ratio']:.2f}× < {args.min_tf_ratio:g}×")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    save()
    print()
    print_table(rows)
    print()
    for line in notes:
        print(line)
    loads = [x for r in rows for x in r["load_average_1min"]]
    if loads and max(loads) > args.threads + 0.5:
        print(f"note: the 1-minute load average reached {max(loads):.1f} during the run (other work on the "
              f"machine); the timings are not clean")
    if failures:
        print("FAIL: " + "; ".join(failures))
        return 0 if args.no_gate else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
