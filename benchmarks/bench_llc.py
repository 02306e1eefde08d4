"""Benchmark lib.llc.estimate_llc against devinterp 2.0.1 and 1.3.2 and canonical-interp 0.1.5, side by side.

    python benchmarks/bench_llc.py [--threads 2] [--repeats 3] [--cases rrr,transformer] [--quick]
                                   [--break-even] [--profile] [--no-gate] [--json PATH]   (--help: all)

Two cases, each sampled by our estimator and by every baseline from the same w* and data
(trained/built once here, saved to a temporary .pt that every side loads):

(a) reduced-rank regression (M, H, N) = (5, 3, 5), devinterp's own test
    (tests/slt/rrr_test.py): n = 1000, x ~ N(0, I_5), y ~ N(0, I_5) (true rank 0),
    y = B A x trained by Adam (lr 0.01, 5000 full-batch steps, torch.manual_seed(42)),
    loss F.mse_loss; SGLD ε = 6e-4 (the issue's; devinterp's test uses 6e-5), γ = 1,
    nβ = n/ln n, full batch, 3 chains × 2000 draws, seed 42, no burn-in. True λ = 6.5
    (Aoyagi & Watanabe 2005, case 1, M + H + N odd). Ours also with --many-chains chains
    (the headline throughput; goal ≥ 20× the faster devinterp's chain-steps/s), once in
    one process of --threads threads and once as the library's torchrun split over the same
    cores (--rrr-ranks processes of --threads / ranks threads; the headline). canonical-interp,
    which also runs every chain in one vmap, compiled, samples --many-chains chains at the same
    settings; so does "ours, compiled" (estimate_llc(..., compile=True): the vmapped gradient
    compiled, its tiny per-chain GEMMs summed in fused loops), in the torchrun split (goals:
    ours compiled ≥ 1.5× its chain-steps/s, each without its compile time, and as accurate:
    |λ̂ − 6.5| no larger than its own by more than two standard errors of the difference; and what a
    reader pays, our faster arm counting its compile ≥ 2× canonical-interp counting its own). The
    eager ceiling (--rrr-ceiling-steps bare forward + backward steps of the same loss over the same
    chains and processes, written by hand with the chains as a batch dimension: no torch.func, no
    sampler) says how far an eager step could go, and the note gives the eager rate that goal needs.
(b) the 417,280-parameter transformer of tiny_transformer.py (2 layers, d_model 128,
    4 heads, MLP 4×, context 32, vocabulary 64) at its seeded initialisation, on 4096
    random sequences of 33 tokens; next-token cross entropy, 4 chains × 200 draws,
    batch 32, ε = 1e-4, γ = 100, nβ = n/ln n with n = 4096 (goals: the overhead below;
    ≥ 1.5× canonical-interp's chain-steps/s counting its compile time, at these run lengths;
    the ratio to the faster devinterp is reported, and gated only with --min-tf-ratio: the
    model is compute-bound, so its goal is stated against the hardware). Reported besides: the fraction of the machine's fp32 matmul peak (a large
    torch.matmul) that each side reaches, with FLOPs per chain-step counted by
    torch.utils.flop_counter on one forward + backward; the eager ceiling, bare forward +
    backward steps/s of the same model with no sampler (--ceiling-steps steps after a warm-up,
    as --tf-ranks processes under torchrun, timed as ours is: from a barrier to the slowest
    rank's end, and as one process of --threads threads), and our
    sampler's **overhead** over it in the same process/thread setting: per-step time of ours
    over that of the bare step, − 1, in % (goal ≤ 5 %); and "ours, compiled",
    estimate_llc(..., compile=True), with its compile seconds apart (skipped, with a note,
    while the library has no ``compile`` parameter).

canonical-interp runs at two settings: its README's quick start (10 chains, 100 burn-in
steps + 200 draws, ε = 1e-5, γ = 100, nβ = n/ln n; torch.compile on and float32, its
defaults; on our batch size, unshuffled as the README's loader), and ours (ε, γ, nβ, chains,
draws, batch as ours, no burn-in, compile on). Its compile time is measured as the first-call
overhead of its compiled functions and reported apart (canonical_baseline.py). On the
transformer its model is passed with requires_grad off ("frozen"): as trained, its L_0
pass keeps every minibatch's autograd graph alive, about 21 GB here (canonical_baseline.py,
"Memory"); on RRR (one minibatch) it runs both ways.

Measurement. Every side runs in its own subprocess with --threads threads in all: torch's
pool and every OpenMP/BLAS pool that threadpoolctl finds are limited inside the worker
(llc_side.limit_threads; the pools in force are recorded per run), and OMP/MKL/OPENBLAS
_NUM_THREADS are set. Ours on the transformer and the headline RRR run use the same cores
as the library's torchrun split: 2 processes (--tf-ranks, --rrr-ranks) of --threads / 2
threads each, the chains split between them (chunk_size = chains / ranks; on the
transformer with estimate_llc(batching="loop")); their peak RSS and disk are summed over
the ranks. The baselines run one process of --threads threads. Reported per run: seconds of
the sampling only, chain-steps/s, λ̂ mean ± std over chains, peak RSS (ru_maxrss of that
process, imports included), bytes left on disk by the run, and the 1-minute load average
before and after it. Every arm runs --repeats times (default 3; 1 with --quick),
interleaved (round after round of every arm; canonical-interp's README arm once), and its
fastest clean run is kept; a run is clean when both load averages are at most the number of
cores + --load-margin (the sides alone bring the load near the cores). A goal is gated only
when every run it reads is clean; otherwise it is reported and flagged.

--break-even measures when compiling pays on the transformer: "ours, compiled" twice more in
separate processes sharing one fresh TORCHINDUCTOR_CACHE_DIR (the first compiles cold, the
second finds the cache warm); with compile seconds s and per-step times t_eager > t_compiled,
compiling pays after s / (t_eager − t_compiled) chain-steps. --profile runs torch.profiler on
--profile-draws draws of ours on each case (one process, --threads threads) and prints where
the wall time goes instead of benchmarking (see `breakdown`).

The baselines run in .venv-devinterp2, .venv-devinterp1 and .venv-canonical (``bash
scripts/setup_bench.sh``, or ``make bench``); without them the script says so and exits 2.
Exits 1 if a gated goal is missed (unless --no-gate).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))  # repo root, for `lib`
sys.path.insert(0, str(HERE))  # llc_side, tiny_transformer

from llc_side import (Sandbox, limit_threads, llc_summary, load_case, matmul_peak, peak_rss_bytes,  # noqa: E402
                       rrr_sample_loss)

TRUE_RRR_LLC = 6.5  # Aoyagi: (1 + 2MN + 2HN + 2MH − N² − M² − H²) / 8 at (5, 3, 5)
CANONICAL = "canonical-interp 0.1.5"
DEVINTERP = ("devinterp 2.0.1", "devinterp 1.3.2")
# each baseline: its venv and the script that runs it there
BASELINES = {"devinterp 2.0.1": (".venv-devinterp2", "devinterp_baseline.py"),
             "devinterp 1.3.2": (".venv-devinterp1", "devinterp_baseline.py"),
             CANONICAL: (".venv-canonical", "canonical_baseline.py")}
# canonical-interp's README quick start: LLCEstimator(draws=200, chains=10, burnin_steps=100,
# learning_rate=1e-5, localization=100.0, nbeta=n/log n), compile on, float32
CANONICAL_README = dict(chains=10, draws=200, burn_in=100, eps=1e-5, gamma=100.0, compile=True, shuffle=False)


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
    from torch.utils.flop_counter import FlopCounterMode

    from tiny_transformer import per_sequence_loss

    model, blob = load_case(dict(case="transformer", data=str(data)))
    counter = FlopCounterMode(display=False)
    with counter:
        per_sequence_loss(model, blob["tokens"][:batch_size]).mean().backward()
    return int(counter.get_total_flops())


# ----- our side, in its own process (`--worker SPEC`, `--plain SPEC`) --------------------------

def _case_data(spec: dict, blob: dict):
    """(data, per-sample loss_fn) of our estimator on the case."""
    from tiny_transformer import per_sequence_loss

    if spec["case"] == "rrr":
        return (blob["x"], blob["y"]), lambda model, batch: rrr_sample_loss(model, *batch)
    return (blob["tokens"],), lambda model, batch: per_sequence_loss(model, batch[0])


def worker(spec: dict) -> dict | None:
    """Our side: estimate_llc on the case (under torchrun, one rank of it; only rank 0 reports)."""
    pools = limit_threads(spec["threads"])
    import torch

    from lib.llc import estimate_llc

    model, blob = load_case(spec)
    data, loss_fn = _case_data(spec, blob)
    if spec.get("profile"):
        loss_fn = in_model_scope(loss_fn)
    options = dict(chunk_size=spec.get("chunk_size"), batching=spec.get("batching", "vmap"))
    if "compile" in spec:  # only the compiled arm passes it: the eager arms run on a library without it
        options["compile"] = spec["compile"]

    def call(draws=spec["draws"]):
        return estimate_llc(model, loss_fn, data, nbeta=spec["nbeta"], gamma=spec["gamma"], eps=spec["eps"],
                            chains=spec["chains"], draws=draws, burn_in=0, batch_size=spec["batch_size"],
                            seed=spec["seed"], device="cpu", progress=False, **options)

    if spec.get("profile"):
        call(draws=PROFILE_WARMUP_DRAWS)  # the first steps of a process are slow once (allocator, kernels' setup)
        return dict(side="ours", case=spec["case"], chains=spec["chains"], draws=spec["draws"], threads=spec["threads"],
                    thread_pools=pools, batching=options["batching"], **profiled(call))
    with Sandbox() as box:
        t0 = time.perf_counter()
        res = call()
        call_seconds = time.perf_counter() - t0
    rss, disk = peak_rss_bytes(), box.disk_bytes
    import torch.distributed as dist

    ranks = 1
    if dist.is_available() and dist.is_initialized():  # torchrun: every rank's peak RSS and disk, summed
        ranks = dist.get_world_size()
        everything = [None] * ranks
        dist.all_gather_object(everything, (rss, disk))
        rss, disk = (sum(v) for v in zip(*everything))
        if dist.get_rank() != 0:
            return None
    import numpy as np

    steps = spec["chains"] * spec["draws"]
    d = res.diagnostics
    seconds, compile_seconds = _without_compile(res.seconds, d.get("compile_seconds"))
    return dict(
        side="ours", torch=torch.__version__, threads=spec["threads"], thread_pools=pools, ranks=ranks,
        batching=options["batching"], compile=options.get("compile", False), chunk_size=spec.get("chunk_size"),
        case=spec["case"], chains=spec["chains"], draws=spec["draws"], batch_size=spec["batch_size"], eps=spec["eps"],
        gamma=spec["gamma"], nbeta=spec["nbeta"], seed=spec["seed"], chain_steps=steps, seconds=seconds,
        library_seconds=res.seconds, call_seconds=call_seconds, compile_seconds=compile_seconds,
        chain_steps_per_s=steps / seconds,
        chain_steps_per_s_with_compile=steps / (seconds + compile_seconds) if compile_seconds is not None else None,
        llc=res.llc, se=res.se, **llc_summary(res.per_chain), init_loss=res.init_loss,
        rhat=float(d.get("rhat", math.nan)), ess_mean=float(np.mean(d["ess"])) if "ess" in d else math.nan,
        mala_acceptance=float(np.nanmean(d["mala_acceptance"])) if "mala_acceptance" in d else math.nan,
        divergent=len(d.get("divergent", [])), peak_rss_bytes=rss, disk_bytes=disk)


def _without_compile(seconds: float, compile_seconds):
    """(sampling seconds without the compile, compile seconds or None). With ``compile=True`` the library builds
    its compiled steps and calls each once (lib.sgld.warm_up) before its chains and outside the time it reports
    (``LLCResult.seconds``), and says how long that took in ``diagnostics["compile_seconds"]`` (0 for an eager
    run)."""
    if not compile_seconds:
        return seconds, None
    return seconds, float(compile_seconds)


def rrr_chains_step(model, x, y, chains: int):
    """One bare forward + backward of the RRR loss for ``chains`` chains at once, written by hand with the chains
    as the batch dimension of two matmuls (x A_cᵀ B_cᵀ, then each chain's mean squared error): the arithmetic a
    vmapped step lowers to, with no torch.func, no sampler and no update. Returns the chains' losses."""
    import torch

    a, b = (p.detach().expand(chains, *p.shape).clone().requires_grad_(True) for p in (model[0].weight,
                                                                                        model[1].weight))
    losses = ((torch.matmul(torch.matmul(x, a.transpose(1, 2)), b.transpose(1, 2)) - y) ** 2).mean(dim=(1, 2))
    torch.autograd.grad(losses.sum(), (a, b))
    return losses.detach()


def plain_worker(spec: dict) -> dict | None:
    """The eager ceiling: ``steps`` bare forward + backward steps, after ``warmup`` untimed ones; no sampler. The
    transformer: one step per minibatch drawn afresh. RRR (``spec["case"] == "rrr"``): each step is the full-batch
    loss of this rank's share of ``chains`` chains at once (:func:`rrr_chains_step`), so that its chain-steps/s
    compare with the samplers'. Timed as one block (the sampler's figure is a block too). Under ``torchrun`` it
    is timed as ours is (lib.sgld.sample): every rank starts after a barrier, and the block ends when the
    slowest rank is done; only rank 0 reports, for all ranks' steps."""
    pools = limit_threads(spec["threads"])
    import torch

    from lib.book.device import process_group
    from tiny_transformer import per_sequence_loss

    rank, world = process_group()
    rrr = spec.get("case") == "rrr"
    model, blob = load_case(dict(spec, case="rrr" if rrr else "transformer"))
    per_step = spec["chains"] // world if rrr else 1  # chain-steps of one step on this rank
    if rrr:
        x, y = blob["x"], blob["y"]

        def step():
            rrr_chains_step(model, x, y, per_step)
    else:
        tokens, gen = blob["tokens"], torch.Generator().manual_seed(rank)

        def step():
            batch = tokens[torch.randint(0, tokens.shape[0], (spec["batch_size"],), generator=gen)]
            model.zero_grad(set_to_none=True)
            per_sequence_loss(model, batch).mean().backward()

    for _ in range(spec["warmup"]):  # the allocator and the caches settle
        step()
    if world > 1:
        import torch.distributed as dist

        dist.barrier()
    t0 = time.perf_counter()
    for _ in range(spec["steps"]):
        step()
    if world > 1:
        dist.barrier()
    seconds = time.perf_counter() - t0
    rss = peak_rss_bytes()
    if world > 1:
        everything = [None] * world
        dist.all_gather_object(everything, rss)
        rss = sum(everything)
        if rank != 0:
            return None
    steps = spec["steps"] * world * per_step
    return dict(side="eager ceiling", threads=spec["threads"], thread_pools=pools, ranks=world, chain_steps=steps,
                seconds=seconds, chain_steps_per_s=steps / seconds, peak_rss_bytes=rss)


# ----- where the time goes (--profile) ----------------------------------------------------------

# How `breakdown` classifies the profiler's events. An *op* is an ATen operator (a name "aten::…");
# its self time (its time less its child ops') is counted once, in one category:
# * inside the model's forward (the loss_fn, under record_function("model forward")) or backward
#   (under autograd's "autograd::engine::evaluate_function: …" events): GEMM if named in GEMM_OPS,
#   else "model elementwise & other" (layer norm, softmax, GELU, embedding, cross entropy, …);
# * outside the model, by name: "noise" (NOISE_OPS), "minibatch" (MINIBATCH_OPS: drawing and
#   gathering the indices), "diagnostics" (DIAGNOSTIC_OPS: ops that only the finite checks, the
#   float64 loss trace and the MALA acceptance use), "update" (UPDATE_OPS: the arithmetic of the
#   step; the MALA acceptance's own sub/add/pow/sum are named alike and land here too), else
#   "sampler other" (allocation, views, stacking);
# * "overhead" = wall − Σ op self times: Python, the dispatcher between ops, autograd's engine
#   bookkeeping, torch.func's wrappers and the profiler's own cost (so it overstates an
#   unprofiled run's Python time).
# The window is one whole estimate_llc call, after an unprofiled one of PROFILE_WARMUP_DRAWS
# draws: its input checks and its one no-grad pass for L_n(w*) are in it (a few % of a few
# hundred draws).
PROFILE_WARMUP_DRAWS = 5  # an unprofiled call first: what is profiled is the steady state
GEMM_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::baddbmm", "aten::addbmm",
            "aten::mv", "aten::addmv", "aten::dot", "aten::linear", "aten::_addmm_activation"}
NOISE_OPS = {"aten::randn", "aten::randn_like", "aten::normal_"}
MINIBATCH_OPS = {"aten::randint", "aten::random_", "aten::index", "aten::index_select", "aten::gather"}
DIAGNOSTIC_OPS = {"aten::isfinite", "aten::any", "aten::all", "aten::where", "aten::exp", "aten::clamp",
                  "aten::clamp_max", "aten::nan_to_num", "aten::maximum", "aten::norm", "aten::linalg_vector_norm",
                  "aten::logical_not", "aten::bitwise_not", "aten::bitwise_and", "aten::logical_and", "aten::__and__",
                  "aten::lt", "aten::ge", "aten::eq", "aten::ne", "aten::abs", "aten::full_like", "aten::to",
                  "aten::_to_copy", "aten::copy_", "aten::item", "aten::_local_scalar_dense", "aten::is_nonzero"}
UPDATE_OPS = {"aten::add", "aten::add_", "aten::sub", "aten::sub_", "aten::rsub", "aten::mul", "aten::mul_",
              "aten::div", "aten::div_", "aten::pow", "aten::pow_", "aten::sum", "aten::neg", "aten::sqrt"}
CATEGORIES = ("GEMM", "model elementwise & other", "noise", "minibatch", "update", "diagnostics", "sampler other",
              "overhead")
MODEL_SCOPE = "model forward"


def _in_model(event) -> bool:
    e = event.cpu_parent
    while e is not None:
        if e.name == MODEL_SCOPE or e.name.startswith("autograd::engine::evaluate_function"):
            return True
        e = e.cpu_parent
    return False


def _category(event) -> str:
    name = event.name
    if _in_model(event):
        return "GEMM" if name in GEMM_OPS else "model elementwise & other"
    for category, names in (("noise", NOISE_OPS), ("minibatch", MINIBATCH_OPS), ("diagnostics", DIAGNOSTIC_OPS),
                            ("update", UPDATE_OPS)):
        if name in names:
            return category
    return "sampler other"


def breakdown(events, wall: float) -> dict:
    """Seconds and % of ``wall`` per category (see above), and the ten ops of most self time."""
    seconds, per_op = dict.fromkeys(CATEGORIES, 0.0), defaultdict(float)
    for e in events:
        if e.name.startswith("aten::"):
            s = e.self_cpu_time_total / 1e6
            seconds[_category(e)] += s
            per_op[e.name] += s
    seconds["overhead"] = wall - sum(seconds.values())
    top = sorted(per_op.items(), key=lambda kv: -kv[1])[:10]
    return dict(wall=wall, seconds=seconds, percent={k: 100 * v / wall for k, v in seconds.items()},
                top_ops=[(name, s, 100 * s / wall) for name, s in top])


def profiled(call) -> dict:
    """``call()`` under torch.profiler (CPU); where its wall time went (`breakdown`)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        call()
        wall = time.perf_counter() - t0
    return breakdown(prof.events(), wall)


def in_model_scope(loss_fn):
    """``loss_fn`` with its ops inside record_function(MODEL_SCOPE), for `_in_model`."""
    import torch

    def scoped(model, batch):
        with torch.profiler.record_function(MODEL_SCOPE):
            return loss_fn(model, batch)
    return scoped


def print_profile(r: dict) -> None:
    p = r["profile"] if "profile" in r else r
    print(f"  {r['case']}: {r['chains']} chains × {r['draws']} draws, batching {r['batching']}, {r['threads']} "
          f"threads; profiled wall {p['wall']:.2f} s")
    for k in CATEGORIES:
        print(f"    {k:<28} {p['seconds'][k]:8.3f} s  {p['percent'][k]:5.1f} %")
    print("    ops of most self time: " + ", ".join(f"{n[6:]} {pc:.1f} %" for n, _, pc in p["top_ops"]))


# ----- launching the sides ----------------------------------------------------------------------

def _launch(python: Path, script: Path, spec: dict, threads: int, extra=(), ranks: int = 1, env=None):
    """One side in a subprocess of ``threads`` threads (per process); with ``ranks`` > 1 under ``torchrun``."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               OPENBLAS_NUM_THREADS=str(threads), TQDM_DISABLE="1", PYTHONWARNINGS="ignore", **(env or {}))
    launch = [str(python)]
    if ranks > 1:
        launch += ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}"]
    return subprocess.Popen([*launch, str(script), *extra, json.dumps(dict(spec, threads=threads))],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)


def _collect(proc) -> dict:
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(proc.args[:3])} … failed ({proc.returncode}):\n{err[-4000:]}")
    return json.loads(out.strip().splitlines()[-1])


@dataclass
class Arm:
    """One side at one setting: ``who`` runs it ("ours", "ceiling" or a baseline's name) with ``spec``."""
    label: str  # as printed
    who: str
    spec: dict
    once: bool = False  # informational: run in the first round only
    env: dict = field(default_factory=dict)  # extra environment (e.g. TORCHINDUCTOR_CACHE_DIR)


def run_arm(arm: Arm, threads: int) -> dict:
    """One run of ``arm`` with ``threads`` threads in all, with the 1-minute load average before and after."""
    me = Path(__file__).resolve()
    ranks = arm.spec.get("ranks", 1)
    load = os.getloadavg()[0]
    if arm.who == "ours":
        r = _collect(_launch(Path(sys.executable), me, arm.spec, threads // ranks, ("--worker",), ranks, arm.env))
    elif arm.who == "ceiling":  # like ours: `ranks` processes under torchrun, started together, timed to the slowest
        r = _collect(_launch(Path(sys.executable), me, arm.spec, threads // ranks, ("--plain",), ranks, arm.env))
    else:
        venv, script = BASELINES[arm.who]
        r = _collect(_launch(ROOT / venv / "bin" / "python", HERE / script, arm.spec, threads, env=arm.env))
    r.update(arm=arm.label, load_average_1min=[load, os.getloadavg()[0]])
    return r


def measure(case_label: str, arms: dict[str, Arm], repeats: int, threads: int, max_load: float) -> dict[str, dict]:
    """Every arm ``repeats`` times, interleaved (round after round); per arm its fastest clean run (the fastest
    of all when none is clean), with every run's rate and cleanliness beside it."""
    tries = {key: [] for key in arms}
    for round_ in range(repeats):
        for key, arm in arms.items():
            if arm.once and round_:
                continue
            s = arm.spec
            if "draws" in s:  # a sampler
                size = f"{s['chains']} chains × {s['draws']} draws"
            else:  # an eager ceiling: bare steps, of many chains at once on RRR
                size = f"{s['steps']} steps" + (f" of {s['chains']} chains" if "chains" in s else "")
            print(f"  {case_label}: {arm.label} ({size}) …", flush=True)
            r = run_arm(arm, threads)
            r.update(case_label=case_label, clean=max(r["load_average_1min"]) <= max_load)
            tries[key].append(r)
    best = {}
    for key, runs in tries.items():
        r = max([t for t in runs if t["clean"]] or runs, key=lambda t: t["chain_steps_per_s"])
        r.update(repeats_chain_steps_per_s=[t["chain_steps_per_s"] for t in runs],
                 repeats_clean=[t["clean"] for t in runs])
        best[key] = r
    return best


def supports_compile() -> bool:
    """Whether lib.llc.estimate_llc takes ``compile=`` (the binding raises TypeError where it does not)."""
    import inspect

    from lib.llc import estimate_llc

    try:
        inspect.signature(estimate_llc).bind_partial(compile=True)
    except TypeError:
        return False
    return True


# ----- goals and report ------------------------------------------------------------------------

@dataclass
class Goal:
    name: str
    text: str  # what was measured, as printed
    met: bool
    rows: list  # the runs it reads: gated only when all are clean

    @property
    def gated(self) -> bool:
        return all(r["clean"] for r in self.rows)


def _mib(b) -> str:
    return f"{b / 2**20:.0f} MiB" if b else ""


def _disk(b) -> str:
    if b is None:
        return ""
    return "0" if b == 0 else (f"{b / 2**20:.1f} MiB" if b >= 2**20 else f"{b / 1024:.0f} KiB")


def _rate(v) -> str:
    return "" if v is None else (f"{v:,.0f}" if v >= 100 else f"{v:.1f}")


def print_table(rows: list[dict]) -> None:
    head = ["case", "side", "chains×draws", "s", "chain-steps/s", "with compile", "compile s", "vs devinterp",
            "λ̂ ± std", "peak RSS", "disk", "load"]
    lines = [head]
    for r in rows:
        if "chains" not in r:  # the eager ceiling
            size = f"{r['chain_steps']} steps"
        else:
            size = f"{r['chains']}×" + (f"({r['burn_in']}+{r['draws']})" if r.get("burn_in") else f"{r['draws']}")
        lam = f"{r['llc_mean']:.2f} ± {r['llc_std']:.2f}" if "llc_mean" in r else ""
        compile_s = r.get("compile_seconds")
        lines.append([r["case_label"], r["arm"], size, f"{r['seconds']:.2f}", _rate(r["chain_steps_per_s"]),
                      _rate(r.get("chain_steps_per_s_with_compile")), "" if compile_s is None else f"{compile_s:.1f}",
                      f"{r['ratio']:.2f}×" if r.get("ratio") else "", lam, _mib(r.get("peak_rss_bytes")),
                      _disk(r.get("disk_bytes")),
                      f"{max(r['load_average_1min']):.1f}" + ("" if r["clean"] else " (!)")])
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(head))]
    for i, line in enumerate(lines):
        print("  ".join(str(c).ljust(w) for c, w in zip(line, widths)).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))
    print("s: seconds of sampling only (without a compile, and without canonical-interp's L_0 pass); chain-steps/s "
          "over them; with compile: counting the compile too; disk: bytes the run left (canonical-interp's: "
          "inductor's cold cache); load: the higher 1-minute load average around the run, (!) when not clean")


def _setting(ceiling: dict) -> str:
    """"2 processes × 1 thread" of the arm "eager ceiling (2 processes × 1 thread)"."""
    return ceiling["arm"].split("(", 1)[1].rstrip(")")


def _se(r: dict) -> float:
    return r["llc_std"] / math.sqrt(r["chains"]) if r["chains"] > 1 else math.nan


def _break_even(eager: dict, compiled: dict) -> str:
    """When compiling pays: compile seconds / (eager − compiled seconds per chain-step), in chain-steps and draws."""
    saved = 1 / eager["chain_steps_per_s"] - 1 / compiled["chain_steps_per_s"]
    if saved <= 0:
        return f"compile {compiled['compile_seconds']:.1f} s, never pays (compiled steps are not faster)"
    steps = compiled["compile_seconds"] / saved
    return (f"compile {compiled['compile_seconds']:.1f} s, pays after {steps:,.0f} chain-steps "
            f"(= {steps / compiled['chains']:,.0f} draws × {compiled['chains']} chains)")


# ----- the two cases ---------------------------------------------------------------------------

def _readme_settings(spec: dict, args) -> dict:
    """``spec`` at canonical-interp's README settings (its draws and burn-in as given on the command line)."""
    return dict(spec, **dict(CANONICAL_README, draws=args.canonical_readme_draws,
                             burn_in=args.canonical_readme_burn_in))


def rrr_case(args, tmp: Path, res: dict, goals: list, notes: list, measure_arms) -> None:
    info = make_rrr(tmp / "rrr.pt")
    n = info["n"]
    rrr = dict(case="rrr", data=str(tmp / "rrr.pt"), eps=args.rrr_eps, gamma=1.0, nbeta=n / math.log(n),
               chains=3, draws=args.rrr_draws, batch_size=n, seed=args.seed)
    res["rrr"] = dict(rrr, **info)
    print(f"== RRR (5, 3, 5), ε = {args.rrr_eps:g}, γ = 1, nβ = n/ln n = {rrr['nbeta']:.1f}, full batch")
    many = dict(rrr, chains=args.many_chains)
    split = f"{args.rrr_ranks} ranks × {args.threads // args.rrr_ranks} thread"
    readme = _readme_settings(rrr, args)
    arms = {who: Arm(who, who, rrr) for who in DEVINTERP}
    arms.update(ours3=Arm("ours", "ours", rrr), ours_one=Arm("ours", "ours", many))
    headline_spec = dict(many, ranks=args.rrr_ranks, chunk_size=args.many_chains // args.rrr_ranks)
    if args.rrr_ranks > 1:
        arms["ours_split"] = Arm(f"ours ({split})", "ours", headline_spec)
    compiled = supports_compile()
    if compiled:
        arms["ours_compiled"] = Arm("ours, compiled" + (f" ({split})" if args.rrr_ranks > 1 else ""), "ours",
                                    dict(headline_spec, compile=True))
    else:
        notes.append("RRR: 'ours, compiled' skipped: lib.llc.estimate_llc has no 'compile' parameter yet")
    # the eager ceiling: the same loss's bare forward + backward over the same chains and cores, by hand
    arms["ceiling"] = Arm(f"eager ceiling ({split})" if args.rrr_ranks > 1 else "eager ceiling", "ceiling",
                          dict(case="rrr", data=rrr["data"], chains=args.many_chains, ranks=args.rrr_ranks,
                               steps=args.rrr_ceiling_steps, warmup=args.ceiling_warmup))
    arms.update(canonical=Arm(f"{CANONICAL}, our settings", CANONICAL, many),
                canonical_frozen=Arm(f"{CANONICAL}, our settings, frozen", CANONICAL, dict(many, frozen=True)),
                canonical_readme=Arm(f"{CANONICAL}, README settings", CANONICAL, readme, once=True))
    got = measure_arms("RRR", arms)
    dv = [got[who] for who in DEVINTERP]
    best_dv = max(dv, key=lambda r: r["chain_steps_per_s"])
    ours3, one = got["ours3"], got["ours_one"]
    headline = got.get("ours_split", one)  # the library's torchrun split over the same cores (or one process)
    canon = max((got["canonical"], got["canonical_frozen"]), key=lambda r: r["chain_steps_per_s"])
    for key, r in got.items():
        if key not in DEVINTERP:
            r["ratio"] = r["chain_steps_per_s"] / best_dv["chain_steps_per_s"]
    for r in got.values():
        if "llc_mean" in r:  # every arm but the eager ceiling samples
            r["llc_rel_error"] = abs(r["llc_mean"] - TRUE_RRR_LLC) / TRUE_RRR_LLC
    fast = got.get("ours_compiled", headline)  # against canonical-interp's compiled vmap: ours compiled
    vs_canon = fast["chain_steps_per_s"] / canon["chain_steps_per_s"]
    res.update(rrr_ratio=headline["ratio"], rrr_ratio_3_chains=ours3["ratio"], rrr_ratio_one_process=one["ratio"],
               rrr_ratio_canonical=vs_canon, rrr_ratio_canonical_eager=headline["chain_steps_per_s"] /
               canon["chain_steps_per_s"],
               rrr_ratio_canonical_with_compile=(fast["chain_steps_per_s_with_compile"] or fast["chain_steps_per_s"])
               / canon["chain_steps_per_s_with_compile"])
    if compiled:
        c = got["ours_compiled"]
        notes.append(f"RRR: ours, compiled: {c['chain_steps_per_s']:,.0f} chain-steps/s without its "
                     f"{c['compile_seconds']:.1f} s compile ({c['chain_steps_per_s_with_compile']:,.0f} with it) = "
                     f"{c['chain_steps_per_s'] / headline['chain_steps_per_s']:.2f}× ours eager; against "
                     f"{canon['arm']}: {vs_canon:.2f}× without either compile, "
                     f"{res['rrr_ratio_canonical_with_compile']:.2f}× with both; ours eager "
                     f"{res['rrr_ratio_canonical_eager']:.2f}× its compiled run")

    # how far an eager step could go: to be `goal`× canonical-interp counting both compiles with no compile of
    # its own, an eager sampler needs `goal` times canonical-interp's rate counting its compile
    ceiling = got["ceiling"]
    needed = args.min_canonical_rrr_ratio_with_compile * canon["chain_steps_per_s_with_compile"]
    res.update(rrr_eager_ceiling=ceiling["chain_steps_per_s"], rrr_eager_needed=needed)
    notes.append(f"RRR: eager ceiling ({ceiling['arm']}: {args.rrr_ceiling_steps} bare forward + backward steps "
                 f"of the {args.many_chains} chains by hand, no torch.func, no sampler) "
                 f"{ceiling['chain_steps_per_s']:,.0f} chain-steps/s; ours eager reaches "
                 f"{100 * headline['chain_steps_per_s'] / ceiling['chain_steps_per_s']:.0f} % of it. An eager "
                 f"sampler at {args.min_canonical_rrr_ratio_with_compile:g}× {canon['arm']} counting its compile "
                 f"needs {needed:,.0f}: {needed / ceiling['chain_steps_per_s']:.2f}× this ceiling")
    notes.append(f"RRR: true λ = {TRUE_RRR_LLC}; λ̂ (mean ± std over chains): " + "; ".join(
        f"{r['arm']} ({r['chains']} chains) {r['llc_mean']:.2f} ± {r['llc_std']:.2f}" for r in got.values()
        if "llc_mean" in r))
    notes.append(f"RRR ratios vs the faster devinterp ({best_dv['side']}, {best_dv['chain_steps_per_s']:,.0f} "
                 f"chain-steps/s): 3 chains {ours3['ratio']:.1f}×, {args.many_chains} chains in one process "
                 f"{one['ratio']:.1f}×" + (f", {args.many_chains} chains as {split} {headline['ratio']:.1f}×"
                                          if headline is not one else ""))
    goals.append(Goal("rrr", f"RRR, ours {args.many_chains} chains vs the faster devinterp: {headline['ratio']:.1f}× "
                      f"(goal ≥ {args.min_rrr_ratio:g}×)", headline["ratio"] >= args.min_rrr_ratio,
                      [headline, best_dv]))
    goals.append(Goal("rrr_canonical", f"RRR, {fast['arm']} {args.many_chains} chains vs {canon['arm']} "
                      f"({canon['chain_steps_per_s']:,.0f} chain-steps/s without its {canon['compile_seconds']:.1f} s "
                      f"compile, {canon['chain_steps_per_s_with_compile']:,.0f} with it): {vs_canon:.2f}× "
                      f"(goal ≥ {args.min_canonical_rrr_ratio:g}×, each without its compile)",
                      vs_canon >= args.min_canonical_rrr_ratio, [fast, canon]))
    # what a reader pays: our faster arm, eager or compiled with its compile, against canonical-interp with its own
    paid = max((r for r in (headline, got.get("ours_compiled")) if r is not None),
               key=lambda r: r["chain_steps_per_s_with_compile"] or r["chain_steps_per_s"])
    paid_rate = paid["chain_steps_per_s_with_compile"] or paid["chain_steps_per_s"]
    vs_canon_paid = paid_rate / canon["chain_steps_per_s_with_compile"]
    res.update(rrr_ratio_canonical_paid=vs_canon_paid)
    goals.append(Goal("rrr_canonical_with_compile", f"RRR, {paid['arm']} {args.many_chains} chains counting any "
                      f"compile ({paid_rate:,.0f} chain-steps/s) vs {canon['arm']} counting its compile "
                      f"({canon['chain_steps_per_s_with_compile']:,.0f}): {vs_canon_paid:.2f}× "
                      f"(goal ≥ {args.min_canonical_rrr_ratio_with_compile:g}×)",
                      vs_canon_paid >= args.min_canonical_rrr_ratio_with_compile, [paid, canon]))
    # equal accuracy: our error no larger than canonical-interp's, beyond two standard errors of the difference
    # (every arm of ours compared for speed: eager and compiled)
    plain = got["canonical"]
    err_canon = abs(plain["llc_mean"] - TRUE_RRR_LLC)
    for key, r in (("rrr_accuracy", headline), ("rrr_accuracy_compiled", got.get("ours_compiled"))):
        if r is None:
            continue
        err_ours, slack = abs(r["llc_mean"] - TRUE_RRR_LLC), 2 * math.hypot(_se(r), _se(plain))
        goals.append(Goal(key, f"RRR accuracy at λ = {TRUE_RRR_LLC}, {args.many_chains} chains each: {r['arm']} "
                          f"{r['llc_mean']:.3f} ± {_se(r):.3f} (s.e.), {CANONICAL} "
                          f"{plain['llc_mean']:.3f} ± {_se(plain):.3f}; |error| {err_ours:.3f} vs {err_canon:.3f} "
                          f"(goal: ≤ {err_canon:.3f} + {slack:.3f}, two s.e. of the difference)",
                          err_ours <= err_canon + slack, []))  # not a timing: gated whatever the load


def transformer_case(args, tmp: Path, res: dict, goals: list, notes: list, measure_arms) -> None:
    info = make_transformer(tmp / "transformer.pt", seed=args.seed)
    nt = info["n"]
    tf = dict(case="transformer", data=str(tmp / "transformer.pt"), eps=args.tf_eps, gamma=args.tf_gamma,
              nbeta=nt / math.log(nt), chains=args.tf_chains, draws=args.tf_draws, batch_size=args.tf_batch,
              seed=args.seed)
    print(f"== transformer ({info['params']:,} parameters), ε = {args.tf_eps:g}, γ = {args.tf_gamma:g}, "
          f"batch {args.tf_batch}, nβ = {tf['nbeta']:.1f}")
    flops = flops_per_step(tmp / "transformer.pt", args.tf_batch)
    peak = matmul_peak()
    res.update(transformer=dict(tf, **info), flops_per_chain_step=flops, matmul_peak_flop_per_s=peak)
    ranks = args.tf_ranks
    ours_tf = dict(tf, ranks=ranks, batching=args.tf_batching,
                   chunk_size=args.tf_chains // ranks if ranks > 1 else None)
    bare = dict(data=tf["data"], batch_size=args.tf_batch, steps=args.ceiling_steps, warmup=args.ceiling_warmup)
    split = f"{ranks} processes × {args.threads // ranks} thread"
    whole = f"1 process × {args.threads} threads"
    compiled = supports_compile()
    readme = dict(_readme_settings(tf, args), frozen=True)
    arms = {who: Arm(who, who, tf) for who in DEVINTERP}
    if ranks > 1:  # the ceiling in ours' own setting, interleaved with ours
        arms["ceiling_split"] = Arm(f"eager ceiling ({split})", "ceiling", dict(bare, ranks=ranks))
    arms["ours"] = Arm("ours" + (f" ({split})" if ranks > 1 else ""), "ours", ours_tf)
    arms["ceiling_one"] = Arm(f"eager ceiling ({whole})", "ceiling", dict(bare, ranks=1))
    if compiled:
        arms["ours_compiled"] = Arm("ours, compiled" + (f" ({split})" if ranks > 1 else ""), "ours",
                                    dict(ours_tf, compile=True))
    else:
        notes.append("transformer: 'ours, compiled' skipped: lib.llc.estimate_llc has no 'compile' parameter yet")
    arms.update(canonical=Arm(f"{CANONICAL}, our settings, frozen", CANONICAL, dict(tf, frozen=True)),
                canonical_readme=Arm(f"{CANONICAL}, README settings, frozen", CANONICAL, readme, once=True))
    got = measure_arms("transformer", arms)
    dv = [got[who] for who in DEVINTERP]
    best_dv = max(dv, key=lambda r: r["chain_steps_per_s"])
    ours, canon = got["ours"], got["canonical"]
    ceiling = got.get("ceiling_split", got["ceiling_one"])  # the bare step in ours' own process/thread setting
    for r in got.values():
        if r["arm"].startswith(("ours", CANONICAL)):
            r["ratio"] = r["chain_steps_per_s"] / best_dv["chain_steps_per_s"]
        if "llc_mean" in r:
            r.update(flops_per_chain_step=flops, flop_per_s=flops * r["chain_steps_per_s"],
                     fraction_of_matmul_peak=flops * r["chain_steps_per_s"] / peak)
    vs_canon = ours["chain_steps_per_s"] / canon["chain_steps_per_s_with_compile"]
    overhead = 100 * (ceiling["chain_steps_per_s"] / ours["chain_steps_per_s"] - 1)
    res.update(transformer_ratio=ours["ratio"], transformer_ratio_canonical_with_compile=vs_canon,
               transformer_ratio_canonical=ours["chain_steps_per_s"] / canon["chain_steps_per_s"],
               transformer_overhead_percent=overhead,
               transformer_eager_ceiling=dict(split_steps_per_s=got.get("ceiling_split", {}).get("chain_steps_per_s"),
                                              one_process_steps_per_s=got["ceiling_one"]["chain_steps_per_s"],
                                              steps=args.ceiling_steps, ranks=ranks, threads=args.threads))

    notes.append(f"transformer: {flops / 1e9:.2f} GFLOP per chain-step (forward + backward, batch {args.tf_batch}); "
                 f"fp32 matmul peak {peak / 1e9:.1f} GFLOP/s; " + ", ".join(
                     f"{r['arm']} {100 * r['fraction_of_matmul_peak']:.0f} %" for r in got.values()
                     if "fraction_of_matmul_peak" in r) + " of it")
    notes.append(f"transformer: λ̂ (mean ± std over chains): " + "; ".join(
        f"{r['arm']} {r['llc_mean']:.2f} ± {r['llc_std']:.2f}" for r in got.values() if "llc_mean" in r))
    one = got["ceiling_one"]["chain_steps_per_s"]
    notes.append(f"transformer eager ceiling (bare forward + backward, {args.ceiling_steps} steps after "
                 f"{args.ceiling_warmup}, no sampler): " + ", ".join(
                     f"{_setting(r)} {r['chain_steps_per_s']:.1f} steps/s"
                     for k, r in got.items() if k.startswith("ceiling"))
                 + f"; {best_dv['side']} reaches {100 * best_dv['chain_steps_per_s'] / one:.0f} % of the "
                   f"one-process ceiling, {canon['arm']} {100 * canon['chain_steps_per_s'] / one:.0f} % (without "
                   f"its compile)")
    notes.append(f"transformer: {canon['arm']}: compile {canon['compile_seconds']:.1f} s, L_0 pass "
                 f"{canon['init_seconds']:.1f} s, sampling {canon['seconds']:.1f} s, whole call "
                 f"{canon['call_seconds']:.1f} s; ours vs it: {res['transformer_ratio_canonical']:.2f}× without its "
                 f"compile, {vs_canon:.2f}× with it")
    if compiled:
        c = got["ours_compiled"]
        cs = c.get("compile_seconds")
        notes.append(f"transformer: ours, compiled: {c['chain_steps_per_s']:.1f} chain-steps/s without the compile "
                     f"= {c['chain_steps_per_s'] / ours['chain_steps_per_s']:.2f}× ours eager and "
                     f"{100 * c['chain_steps_per_s'] / ceiling['chain_steps_per_s']:.0f} % of the eager ceiling; "
                     "compile " + (f"{cs:.1f} s" if cs is not None else "time not reported by the library"))
        if args.break_even and cs is not None:
            cache = tmp / "inductor-cache"  # fresh: the first run compiles cold, the second finds it warm
            again = Arm("ours, compiled", "ours", dict(ours_tf, compile=True),
                        env=dict(TORCHINDUCTOR_CACHE_DIR=str(cache)))
            print("  transformer: compile break-even: ours, compiled, cold then warm inductor cache …", flush=True)
            cold, warm = run_arm(again, args.threads), run_arm(again, args.threads)
            res["compile_break_even"] = dict(cold=cold, warm=warm)
            notes.append(f"transformer: compile break-even against ours eager ({ours['chain_steps_per_s']:.1f} "
                         f"chain-steps/s): cold cache: {_break_even(ours, cold)}; warm cache: "
                         f"{_break_even(ours, warm)}")
    elif args.break_even:
        notes.append("transformer: --break-even skipped: there is no compiled arm")

    versus_devinterp = (f"transformer, ours vs the faster devinterp ({best_dv['side']}, "
                        f"{best_dv['chain_steps_per_s']:.1f} chain-steps/s): {ours['ratio']:.2f}×")
    if args.min_tf_ratio is None:  # compute-bound: the goal is the overhead over the hardware's bare step (below)
        notes.append(versus_devinterp + " (reported; on this compute-bound model the goal is the overhead)")
    else:
        goals.append(Goal("transformer", versus_devinterp + f" (goal ≥ {args.min_tf_ratio:g}×)",
                          ours["ratio"] >= args.min_tf_ratio, [ours, best_dv]))
    goals.append(Goal("transformer_canonical", f"transformer, ours vs {canon['arm']} counting its compile "
                      f"({canon['chain_steps_per_s_with_compile']:.1f} chain-steps/s over {tf['chains']} × "
                      f"{tf['draws']} draws): {vs_canon:.2f}× (goal ≥ {args.min_canonical_tf_ratio:g}×)",
                      vs_canon >= args.min_canonical_tf_ratio, [ours, canon]))
    goals.append(Goal("transformer_overhead", f"transformer, our sampler's overhead over the bare forward + backward "
                      f"({_setting(ceiling)}): {overhead:.1f} % per step (goal ≤ "
                      f"{args.max_overhead:g} %)", overhead <= args.max_overhead, [ours, ceiling]))


def profile_cases(args, tmp: Path) -> None:
    """--profile: where the wall time of ours goes, per case, in one process of --threads threads."""
    print(f"Where the time goes: ours under torch.profiler, {args.profile_draws} draws, one process "
          f"(categories: see `breakdown` in {Path(__file__).name})")
    me = Path(__file__).resolve()
    for case in args.cases:
        if case == "rrr":
            info = make_rrr(tmp / "rrr.pt")
            spec = dict(case="rrr", data=str(tmp / "rrr.pt"), eps=args.rrr_eps, gamma=1.0,
                        nbeta=info["n"] / math.log(info["n"]), chains=args.many_chains, batch_size=info["n"])
        else:
            info = make_transformer(tmp / "transformer.pt", seed=args.seed)
            spec = dict(case="transformer", data=str(tmp / "transformer.pt"), eps=args.tf_eps, gamma=args.tf_gamma,
                        nbeta=info["n"] / math.log(info["n"]), chains=args.tf_chains, batch_size=args.tf_batch,
                        batching=args.tf_batching)
        spec.update(draws=args.profile_draws, seed=args.seed, profile=True)
        print_profile(_collect(_launch(Path(sys.executable), me, spec, args.threads, ("--worker",))))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2, help="threads of every side in all (default 2)")
    ap.add_argument("--rrr-eps", type=float, default=6e-4, help="SGLD ε for RRR (devinterp's test: 6e-5)")
    ap.add_argument("--rrr-draws", type=int, default=2000)
    ap.add_argument("--many-chains", type=int, default=256, help="our headline RRR run, and canonical-interp's")
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
    ap.add_argument("--ceiling-steps", type=int, default=200, help="timed steps of the eager ceiling (default 200)")
    ap.add_argument("--ceiling-warmup", type=int, default=20, help="untimed steps before them (default 20)")
    ap.add_argument("--rrr-ceiling-steps", type=int, default=500,
                    help="timed steps of RRR's eager ceiling, each of --many-chains chains (default 500)")
    ap.add_argument("--canonical-readme-draws", type=int, default=CANONICAL_README["draws"])
    ap.add_argument("--canonical-readme-burn-in", type=int, default=CANONICAL_README["burn_in"])
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--min-rrr-ratio", type=float, default=20.0, help="goal: RRR, ours / faster devinterp")
    ap.add_argument("--min-tf-ratio", type=float, default=None,
                    help="goal: transformer, ours / faster devinterp (default: none, reported only; the transformer "
                         "is compute-bound, so its goal is --max-overhead over the bare step)")
    ap.add_argument("--min-canonical-rrr-ratio", type=float, default=1.5,
                    help="goal: RRR, ours / canonical-interp without its compile (default 1.5)")
    ap.add_argument("--min-canonical-rrr-ratio-with-compile", type=float, default=2.0,
                    help="goal: RRR, our faster arm / canonical-interp, each counting its compile (default 2)")
    ap.add_argument("--min-canonical-tf-ratio", type=float, default=1.5,
                    help="goal: transformer, ours / canonical-interp with its compile (default 1.5)")
    ap.add_argument("--max-overhead", type=float, default=5.0,
                    help="goal: transformer, our per-step time over the bare forward + backward's, − 1, in %% "
                         "(default 5)")
    ap.add_argument("--repeats", type=int, default=None,
                    help="runs of every arm, interleaved; each arm's fastest clean run is kept (default 3; 1 with "
                         "--quick)")
    ap.add_argument("--load-margin", type=float, default=0.5,
                    help="a run is clean when the 1-minute load average stays ≤ cores + this (default 0.5)")
    ap.add_argument("--quick", action="store_true", help="smoke test: 10x fewer draws and steps, 32 chains")
    ap.add_argument("--no-gate", action="store_true", help="report only; exit 0 even if a goal is missed")
    ap.add_argument("--cases", type=lambda v: v.split(","), default=["rrr", "transformer"],
                    help="comma-separated subset of rrr,transformer (default both)")
    ap.add_argument("--break-even", action="store_true",
                    help="transformer: when compiling pays, cold and warm inductor cache (two more compiled runs)")
    ap.add_argument("--profile", action="store_true",
                    help="only profile ours on each case (torch.profiler) and print where the time goes")
    ap.add_argument("--profile-draws", type=int, default=200, help="draws of the --profile runs (default 200)")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--plain", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the `finally`s: temporary files go

    if args.plain is not None or args.worker is not None:
        out = plain_worker(json.loads(args.plain)) if args.plain is not None else worker(json.loads(args.worker))
        if out is not None:  # under torchrun only rank 0 reports
            print(json.dumps(out), flush=True)
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():  # a gloo group left open can abort the exit
            dist.destroy_process_group()
        return 0

    unknown = set(args.cases) - {"rrr", "transformer"}
    if unknown:
        ap.error(f"--cases: unknown {sorted(unknown)}")
    if args.rrr_ranks < 1 or args.threads % args.rrr_ranks or args.many_chains % args.rrr_ranks:
        ap.error("--rrr-ranks must divide --threads and --many-chains")
    if args.tf_ranks < 1 or args.threads % args.tf_ranks or args.tf_chains % args.tf_ranks:
        ap.error("--tf-ranks must divide --threads and --tf-chains")
    for flag in ("ceiling_steps", "rrr_ceiling_steps"):  # a rate over zero timed steps is no rate
        if getattr(args, flag) < 1:
            ap.error(f"--{flag.replace('_', '-')} must be an integer >= 1; got {getattr(args, flag)}")
    if args.quick:
        args.rrr_draws, args.tf_draws, args.many_chains = args.rrr_draws // 10, args.tf_draws // 10, 32
        args.canonical_readme_draws //= 10
        args.canonical_readme_burn_in //= 10
        args.ceiling_steps, args.ceiling_warmup = max(args.ceiling_steps // 10, 5), max(args.ceiling_warmup // 10, 2)
        args.profile_draws //= 10
    repeats = args.repeats or (1 if args.quick else 3)

    tmp = Path(tempfile.mkdtemp(prefix="bench-llc-"))
    try:
        if args.profile:
            profile_cases(args, tmp)
            return 0
        missing = [venv for venv, _ in BASELINES.values() if not (ROOT / venv / "bin" / "python").exists()]
        if missing:
            print(f"bench_llc: the baseline venvs are missing ({', '.join(missing)}).\n"
                  f"Create them with `bash scripts/setup_bench.sh` (or run `make bench`, which does).", file=sys.stderr)
            return 2
        import torch

        limit_threads(args.threads)
        from lib.book.timing import machine_info

        cores = os.cpu_count() or args.threads
        rows: list[dict] = []
        goals: list[Goal] = []
        notes: list[str] = []
        res: dict = dict(date=time.strftime("%Y-%m-%d"), threads=args.threads, quick=args.quick, repeats=repeats,
                         cores=cores, max_clean_load=cores + args.load_margin, true_rrr_llc=TRUE_RRR_LLC,
                         torch=torch.__version__, platform=platform.platform(), rows=rows, goals=[], goals_met={})

        def save():
            res["goals"] = [dict(name=g.name, text=g.text, met=g.met, gated=g.gated) for g in goals]
            res["goals_met"] = {g.name: g.met for g in goals}
            if args.json:
                args.json.parent.mkdir(parents=True, exist_ok=True)
                args.json.write_text(json.dumps(dict(res, **machine_info()), indent=2, default=float))

        def measure_arms(label, arms):
            got = measure(label, arms, repeats, args.threads, cores + args.load_margin)
            rows.extend(got.values())
            save()  # partial results survive an interrupted run
            return got

        if "rrr" in args.cases:
            rrr_case(args, tmp, res, goals, notes, measure_arms)
        if "transformer" in args.cases:
            transformer_case(args, tmp, res, goals, notes, measure_arms)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    save()
    print()
    print_table(rows)
    print()
    for line in notes:
        print(line)
    print()
    failures = []
    for g in goals:
        mark = "met" if g.met else "MISSED"
        print(f"{mark:>6}{'' if g.gated else ' (not gated: load)'}: {g.text}")
        if not g.met and g.gated:
            failures.append(g.name)
    dirty = [r for r in rows if not r["clean"]]
    if dirty:
        print(f"note: {len(dirty)} of the kept runs had a 1-minute load average above {cores + args.load_margin:g} "
              f"({cores} cores + {args.load_margin:g}; marked (!)): other work shared the machine, their timings are "
              f"not clean and the goals that read them are not gated")
    if failures:
        print("FAIL: " + ", ".join(failures))
        return 0 if args.no_gate else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
