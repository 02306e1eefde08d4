"""SGLD LLC estimation on an accelerator: chain-steps/s of lib.llc.estimate_llc, eager and compiled, beside a
bare forward + backward and canonical-interp, for the transformer of bench_llc.py and the mini-Pythia shapes.

    python benchmarks/bench_llc_device.py [--device cuda] [--models transformer,p-small,p-70m]
                                          [--arms ...] [--quick] [--json PATH]   (--help: all)

Where ``bench_llc.py`` compares the sampler with its baselines on the 2-core CPU, each in its own
venv, this script measures it where the book's ``paper`` profile runs: one process, one device,
every arm in turn, so that a GPU lease of a few minutes covers every model.

Models (random initialisation: a step's speed does not depend on the weights):

* ``transformer``: the 417,280-parameter model of ``tiny_transformer.py`` on sequences of 33
  tokens over a vocabulary of 64, batch 32 (bench_llc.py's case b);
* ``p-tiny`` … ``p-70m``: ``lib.models.mini_pythia`` GPT-NeoX shapes at the Introduction's paper
  vocabulary (Pythia's 50,304 rows) and context (256), batch 32, attention in plain ops (the
  LLC chapter's setting, which vmap needs): the LLC chapter's paper profile samples p-small.

Settings of every sampler arm: 8 chains, ε = 1e-4, γ = 300, nβ = n/ln n over n = 1024 windows
(the chapter's paper ``lm_*`` values, fewer windows: n sets nβ only), float32.

Arms, per model: ``bare`` (one chain's forward + backward on a fresh minibatch, no sampler:
steps/s; ``bare-flat-loss`` and ``bare-transposed-loss`` the same with the cross entropy handed the
logits as (B·T, V) rows, and as their (B, V, T) transpose: the mini-Pythia models' ``bare`` is the
first, lib.models.causal_lm.sequence_loss's layout, the transformer's the second), ``vmap`` and
``loop`` (estimate_llc eager), ``loop-compiled`` and ``vmap-compiled`` (``compile=True``; only for
--compiled-models, since a cold compile of a large model takes minutes), and ``canonical``
(canonical-interp's LLCEstimator, compiled as by default, when it is importable: put its package
on PYTHONPATH). A sampler arm's rate is marginal:
after one warm-up call (which compiles, where anything compiles), two calls of ``draws_short``
and ``draws_long`` draws are timed whole, and chain-steps/s = chains × (long − short) /
(t_long − t_short), so that start-up work (the loss at w*, canonical-interp's pass over the
whole data, a warm recompile) cancels and only steps are counted, the same way for every
arm. Each arm's compile is the warm-up call's time less a timed call's of the same length.
FLOPs per chain-step are counted by ``torch.utils.flop_counter`` (lib.sgld.step_flops), and the
matmul peaks (fp32, TF32 off as in the sampler, and bf16) are measured in the same run, so
each arm's fraction of either peak is stated.

Results go to stdout as they come and, after every arm, to --json (partial results survive a
time limit).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE)]

from llc_side import matmul_peak, supply_itertools_batched, synchronize  # noqa: E402

CHAINS, EPS, GAMMA, BATCH, N_WINDOWS = 8, 1e-4, 300.0, 32, 1024
PYTHIA_VOCAB, PYTHIA_CONTEXT = 50304, 256
# (short, long) draws per model: long enough that the difference is many steps, short enough for a lease
DRAWS = {"transformer": (50, 300), "p-tiny": (10, 60), "p-small": (10, 60), "p-base": (5, 25), "p-70m": (4, 16)}
ARMS = ("bare", "vmap", "loop", "canonical", "loop-compiled", "vmap-compiled", "bare-flat-loss",
        "bare-transposed-loss")


def build(name: str, device, vocab: int, context: int):
    """(model, data tuple, {arm: per-sample loss} for the bare arms (the samplers use "bare"'s), (model returning
    logits, x, y) for canonical-interp, parameters)."""
    import torch
    from torch import nn

    g = torch.Generator().manual_seed(0)
    if name == "transformer":
        from tiny_transformer import TinyTransformer, per_sequence_loss

        torch.manual_seed(0)
        model = TinyTransformer()
        ids = torch.randint(0, 64, (N_WINDOWS, 33), generator=g)
        canonical = (model, ids[:, :-1], ids[:, 1:])  # the model predicts tokens 1..32 from 0..31
        flat_loss = flat_layout_loss(lambda m, ids: m(ids[:, :-1]))
        transposed_loss = transposed_layout_loss(lambda m, ids: m(ids[:, :-1]))

        def loss_fn(m, batch):
            return per_sequence_loss(m, batch[0])
    else:
        from transformers import GPTNeoXForCausalLM

        from lib.models.causal_lm import sequence_loss
        from lib.models.mini_pythia import mini_pythia_config

        config = mini_pythia_config(name, vocab, context)
        torch.manual_seed(0)
        model = GPTNeoXForCausalLM(config)
        model.set_attn_implementation("eager")  # plain attention ops batch under vmap (as llc_over_training)
        ids = torch.randint(0, vocab, (N_WINDOWS, context), generator=g)
        loss_fn = sequence_loss
        flat_loss = sequence_loss  # the library's loss is the (B·T, V) layout
        transposed_loss = transposed_layout_loss(lambda m, ids: m(input_ids=ids, use_cache=False).logits[:, :-1])

        class Logits(nn.Module):  # canonical-interp calls model(x) and hands the output to its criterion
            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, x):
                return self.inner(input_ids=x, use_cache=False).logits

        canonical = (Logits(model), ids[:, :-1], ids[:, 1:])  # logits at 0..T−2 predict tokens 1..T−1, as ours
    model = model.to(device)
    losses = {"bare": loss_fn, "bare-flat-loss": flat_loss, "bare-transposed-loss": transposed_loss}
    return model, (ids.to(device),), losses, canonical, sum(p.numel() for p in model.parameters())


def flat_layout_loss(logits_of):
    """The per-sequence mean next-token cross entropy with the logits laid out (B·T, V), the layout of
    ``F.cross_entropy``'s fast path (``lib.models.causal_lm.sequence_loss``'s since 2026-11-27), instead of the
    (B, V, T) transpose (the same numbers up to float rounding): ``logits_of(model, ids)`` gives the logits of
    positions 0..T−2."""
    import torch.nn.functional as F

    def loss(model, batch):
        ids = batch[0]
        logits = logits_of(model, ids)
        b, t, v = logits.shape
        return F.cross_entropy(logits.reshape(b * t, v), ids[:, 1:].reshape(b * t), reduction="none").view(b, t).mean(-1)

    return loss


def transposed_layout_loss(logits_of):
    """The same loss with the cross entropy handed the (B, V, T) transpose of the logits: the book's loss
    functions' layout before 2026-11-27, and still ``tiny_transformer.per_sequence_loss``'s."""
    import torch.nn.functional as F

    def loss(model, batch):
        ids = batch[0]
        return F.cross_entropy(logits_of(model, ids).transpose(1, 2), ids[:, 1:], reduction="none").mean(-1)

    return loss


def bare_rate(model, data, loss_fn, device, steps: int) -> float:
    """Steps/s of one chain's forward + backward on fresh minibatches, no sampler (after 3 untimed steps)."""
    import torch

    (ids,) = data
    gen = torch.Generator(device=ids.device).manual_seed(0)

    def step():
        batch = ids[torch.randint(0, ids.shape[0], (BATCH,), generator=gen, device=ids.device)]
        model.zero_grad(set_to_none=True)
        loss_fn(model, (batch,)).mean().backward()

    for _ in range(3):
        step()
    synchronize(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    synchronize(device)
    model.zero_grad(set_to_none=True)
    return steps / (time.perf_counter() - t0)


def ours_call(model, data, loss_fn, device, batching: str, compile_: bool, draws: int):
    from lib.llc import estimate_llc

    n = data[0].shape[0]
    return estimate_llc(model, loss_fn, data, nbeta=n / math.log(n), gamma=GAMMA, eps=EPS, chains=CHAINS,
                        draws=draws, burn_in=0, batch_size=BATCH, seed=0, device=str(device), progress=False,
                        batching=batching, compile=compile_)


def canonical_call(canonical, device, draws: int, n: int):
    """canonical-interp's LLCEstimator at our settings (its compile on, as by default), frozen model (see
    canonical_baseline.py, "Memory"), on (x, y) pairs: the mean next-token cross entropy of x's logits on y."""
    import torch
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, TensorDataset

    supply_itertools_batched()
    import canonical_interp.slt as slt

    logits_model, x, y = canonical
    loader = DataLoader(TensorDataset(x, y), batch_size=BATCH, shuffle=True,
                        generator=torch.Generator().manual_seed(0))

    def criterion(logits, targets):
        return F.cross_entropy(logits.transpose(1, 2), targets)

    logits_model.requires_grad_(False)
    try:
        estimator = slt.LLCEstimator(draws=draws, chains=CHAINS, burnin_steps=0, steps_bw_draws=1,
                                     learning_rate=EPS, localization=GAMMA, nbeta=n / math.log(n))
        estimator.estimate_llc(logits_model, loader, criterion_fn=criterion, devices=device, seed=0, compile=True,
                               show_progress=False)
    finally:
        logits_model.requires_grad_(True)
    return estimator.get_metrics()


def marginal(call, device, short: int, long_: int) -> dict:
    """Chain-steps/s from two timed calls (``short`` and ``long_`` draws) after an untimed warm-up call of
    ``short`` draws; the warm-up's excess over the timed short call is its one-off cost (a compile)."""
    def timed(draws):
        synchronize(device)
        t0 = time.perf_counter()
        out = call(draws)
        synchronize(device)
        return time.perf_counter() - t0, out

    t_warm, _ = timed(short)
    t_short, _ = timed(short)
    t_long, out = timed(long_)
    rate = CHAINS * (long_ - short) / (t_long - t_short)
    return dict(chain_steps_per_s=rate, warmup_seconds=t_warm, first_call_extra_seconds=t_warm - t_short,
                short_seconds=t_short, long_seconds=t_long, draws=[short, long_], last=out)


def llc_of(out) -> float | None:
    if hasattr(out, "llc"):
        return float(out.llc)
    if isinstance(out, dict) and "llc_mean" in out:
        return float(out["llc_mean"])
    return None


def run_model(name: str, device, arms, peaks: dict, quick: bool, record, vocab: int, context: int) -> None:
    import torch

    from lib.sgld import step_flops

    torch._dynamo.reset()  # every model's compiles start from a clean slate (the on-disk cache stays)
    model, data, losses, canonical, params = build(name, device, vocab, context)
    loss_fn = losses["bare"]
    short, long_ = DRAWS[name]
    if quick:
        short, long_ = 2, 4
    flops = step_flops(model, loss_fn, data, BATCH)
    row = dict(model=name, parameters=params, flops_per_chain_step=flops, chains=CHAINS, batch=BATCH)
    print(f"== {name}: {params:,} parameters, {flops / 1e9:.2f} GFLOP per chain-step", flush=True)
    for arm in arms:
        t0 = time.perf_counter()
        try:
            if arm.startswith("bare"):
                rate = bare_rate(model, data, losses[arm], device,
                                 steps=4 if quick else 5 * long_)
                r = dict(chain_steps_per_s=rate)
            elif arm == "canonical":
                if importlib.util.find_spec("canonical_interp") is None:
                    print("   canonical: canonical_interp is not importable: skipped", flush=True)
                    continue
                r = marginal(lambda d: canonical_call(canonical, device, d, data[0].shape[0]), device, short, long_)
            else:
                batching, _, compiled = arm.partition("-")
                r = marginal(lambda d: ours_call(model, data, loss_fn, device, batching, bool(compiled), d),
                             device, short, long_)
        except Exception as exc:  # one arm failing (memory, a compile error) must not lose the others
            r = dict(error=f"{type(exc).__name__}: {exc}"[:600])
            traceback.print_exc()
            if device.type == "cuda":
                torch.cuda.empty_cache()
        last = r.pop("last", None)
        if last is not None:
            r["llc"] = llc_of(last)
        if "chain_steps_per_s" in r:
            fps = flops * r["chain_steps_per_s"]
            r.update(flop_per_s=fps, **{f"fraction_of_{k}_peak": fps / v for k, v in peaks.items()})
        r["arm_seconds"] = time.perf_counter() - t0
        row[arm] = r
        if "error" in r:
            print(f"   {arm}: FAILED {r['error'][:200]}", flush=True)
        else:
            print(f"   {arm}: {r['chain_steps_per_s']:,.1f} chain-steps/s"
                  + "".join(f", {100 * r[f'fraction_of_{k}_peak']:.1f} % of {k}" for k in peaks)
                  + (f", first call +{r['first_call_extra_seconds']:.1f} s" if "first_call_extra_seconds" in r else "")
                  + (f", λ̂ {r['llc']:.1f}" if r.get("llc") is not None else "")
                  + f" ({r['arm_seconds']:.0f} s)", flush=True)
        record(row)
    if "bare" in row and "chain_steps_per_s" in row["bare"]:
        for arm in arms:
            if arm != "bare" and "chain_steps_per_s" in row.get(arm, {}):
                row[arm]["of_bare_step"] = row[arm]["chain_steps_per_s"] / row["bare"]["chain_steps_per_s"]
    record(row)
    del model, data, canonical
    if device.type == "cuda":
        torch.cuda.empty_cache()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda", help="torch device (default cuda)")
    ap.add_argument("--models", type=lambda v: v.split(","), default=["transformer", "p-small", "p-70m"],
                    help=f"comma-separated, from {', '.join(DRAWS)}")
    ap.add_argument("--arms", type=lambda v: v.split(","), default=list(ARMS), help=f"from {', '.join(ARMS)}")
    ap.add_argument("--compiled-models", type=lambda v: v.split(","), default=["transformer", "p-small"],
                    help="models whose compiled arms run (default transformer,p-small: a compile is minutes)")
    ap.add_argument("--quick", action="store_true", help="smoke test: 2 and 4 draws")
    ap.add_argument("--vocab", type=int, default=PYTHIA_VOCAB, help=f"mini-Pythia vocabulary (default {PYTHIA_VOCAB})")
    ap.add_argument("--context", type=int, default=PYTHIA_CONTEXT,
                    help=f"mini-Pythia window length (default {PYTHIA_CONTEXT})")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    bad = [m for m in args.models if m not in DRAWS] + [a for a in args.arms if a not in ARMS]
    if bad:
        ap.error(f"unknown models or arms {bad}; models: {', '.join(DRAWS)}; arms: {', '.join(ARMS)}")
    import logging
    import warnings

    import torch

    warnings.simplefilter("ignore")
    logging.getLogger("canonical_interp").setLevel(logging.ERROR)  # its advice on loaders and burn-in
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("bench_llc_device: no CUDA device here; use --device cpu for a smoke test", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False  # the sampler's float32, as the library leaves it
    # room for canonical-interp's compiled steps too (ours share one backend, lib.sgld.inductor_backend)
    torch._dynamo.config.cache_size_limit = 64
    torch._dynamo.config.accumulated_cache_size_limit = 512
    size = dict(size=8192, repeats=10, warmup=2) if device.type == "cuda" else dict(size=2048, repeats=3, warmup=2)
    peaks = {"fp32": matmul_peak(device, torch.float32, **size)}
    if device.type == "cuda":
        peaks["bf16"] = matmul_peak(device, torch.bfloat16, **size)
    result = dict(date=time.strftime("%Y-%m-%d"), torch=torch.__version__, device=str(device),
                  device_name=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                  matmul_peak_flop_per_s=peaks, chains=CHAINS, eps=EPS, gamma=GAMMA, batch=BATCH,
                  windows=N_WINDOWS, models=[])
    try:
        from importlib.metadata import version

        result["canonical_interp"] = version("canonical-interp")
    except Exception:  # not installed, or on PYTHONPATH as a bare package without its metadata
        result["canonical_interp"] = "on PYTHONPATH" if importlib.util.find_spec("canonical_interp") else None
    print(f"device {result['device_name']}, torch {torch.__version__}; matmul peaks "
          + ", ".join(f"{k} {v / 1e12:.1f} TFLOP/s" for k, v in peaks.items()), flush=True)

    def record(row):
        rows = [r for r in result["models"] if r["model"] != row["model"]] + [row]
        result["models"] = rows
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(result, indent=2, default=float))

    for name in args.models:
        arms = [a for a in args.arms if name in args.compiled_models or not a.endswith("-compiled")]
        try:
            run_model(name, device, arms, peaks, args.quick, record, args.vocab, args.context)
        except Exception as exc:  # a model that cannot be built or counted must not lose the others
            traceback.print_exc()
            record(dict(model=name, error=f"{type(exc).__name__}: {exc}"[:600]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
