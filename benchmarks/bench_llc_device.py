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
``loop`` (estimate_llc eager), ``loop-compiled`` and ``vmap-compiled`` (``compile=True``; for
--compiled-models, by default all three), and ``canonical``
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

Every sampler arm and canonical-interp use the same loss, the library's: the per-sequence mean next-token
cross entropy with the logits laid out as (B·T, V) rows (``lib.models.causal_lm.sequence_loss``; for the
transformer, ``flat_layout_loss`` of its logits), so ``bare`` and ``bare-flat-loss`` coincide, and
``bare-transposed-loss`` prices the old (B, V, T) layout. The arms run in the order of ``ARMS`` (the
comparisons first), every arm on every model by default; ``--budget-s`` gives each model an equal share
of the time left when it starts and skips, saying so, an arm whose expected time (:func:`arm_estimate`)
does not fit. scripts/gpu_check.sh runs it so within one 10-minute device call.

Results go to stdout as they come and, after every arm, to --json (partial results survive a
time limit). At the end, :func:`summary` prints per model the ratios (ours compiled and eager against
canonical-interp compiled, eager against compiled, vmap against loop), each arm's share of the fp32
matmul peak, and the lib.sgld entries for the device that the measured loop saving proposes
(``COMPILE_SAVING``: the smallest 1 − eager/compiled over the models; ``COMPILE_SECONDS_COLD``: the
largest first-call extra; ``EAGER_FLOP_PER_S``: the slowest eager rate per thread).
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
# in the order they run within a model (the comparisons first, should the budget run out)
ARMS = ("bare", "loop", "vmap", "canonical", "loop-compiled", "vmap-compiled", "bare-flat-loss",
        "bare-transposed-loss")
COMPILE_ALLOWANCE_S = 90.0  # a compile's guess until one is measured in this run (the budget's arithmetic only)


def build(name: str, device, vocab: int, context: int):
    """(model, data tuple, {arm: per-sample loss} for the bare arms (the samplers use "bare"'s), (model returning
    logits, x, y) for canonical-interp, parameters)."""
    import torch
    from torch import nn

    g = torch.Generator().manual_seed(0)
    if name == "transformer":
        from tiny_transformer import TinyTransformer

        torch.manual_seed(0)
        model = TinyTransformer()
        ids = torch.randint(0, 64, (N_WINDOWS, 33), generator=g)
        canonical = (model, ids[:, :-1], ids[:, 1:])  # the model predicts tokens 1..32 from 0..31
        flat_loss = flat_layout_loss(lambda m, ids: m(ids[:, :-1]))
        transposed_loss = transposed_layout_loss(lambda m, ids: m(ids[:, :-1]))
        loss_fn = flat_loss  # the samplers' loss: the library's (B·T, V) row layout (per_sequence_loss's numbers)
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
    # "bare" is the samplers' loss (the row layout for every model since 2026-11-27, so "bare-flat-loss" repeats it)
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

    def criterion(logits, targets):  # the mean over tokens, in the row layout the samplers use
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

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
    if t_long <= t_short:  # the difference is below the calls' jitter: no rate to report
        raise RuntimeError(f"timing not resolved: {long_} draws took {t_long:.3f} s, {short} took {t_short:.3f} s")
    rate = CHAINS * (long_ - short) / (t_long - t_short)
    return dict(chain_steps_per_s=rate, warmup_seconds=t_warm, first_call_extra_seconds=t_warm - t_short,
                short_seconds=t_short, long_seconds=t_long, draws=[short, long_], last=out)


def llc_of(out) -> float | None:
    if hasattr(out, "llc"):
        return float(out.llc)
    if isinstance(out, dict) and "llc_mean" in out:
        return float(out["llc_mean"])
    return None


def arm_estimate(arm: str, row: dict) -> float:
    """Seconds an arm is expected to take, from the arms of this model already run: an eager sampler arm as the
    slowest eager one so far, a compiled one that plus the longest compile seen in the run
    (``COMPILE_ALLOWANCE_S`` before any), canonical-interp's plus three such compiles, a bare arm as the first."""
    done = {a: r for a, r in row.items() if isinstance(r, dict) and "arm_seconds" in r}
    eager = max([r["arm_seconds"] for a, r in done.items() if a in ("loop", "vmap")], default=0.0)
    if arm.startswith("bare"):
        return done.get("bare", {}).get("arm_seconds", 0.0)
    if arm in ("loop", "vmap"):
        return eager
    compiles = [r["first_call_extra_seconds"] for r in COMPILES if "first_call_extra_seconds" in r]
    compile_s = max(compiles) if compiles else COMPILE_ALLOWANCE_S
    # canonical-interp compiles again in each of its three calls (a new estimator each time: on the CPU every
    # call of 2 or 4 draws took 25 s)
    return eager + (3 if arm == "canonical" else 1) * compile_s


COMPILES: list = []  # the compiled arms' results so far (their first-call extra is the compile)


def run_model(name: str, device, arms, peaks: dict, quick: bool, record, vocab: int, context: int,
              deadline: float = math.inf) -> None:
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
        need = arm_estimate(arm, row)
        if t0 + need > deadline:
            row[arm] = dict(skipped=f"budget: needs about {need:.0f} s, {max(deadline - t0, 0):.0f} s left")
            print(f"   {arm}: skipped ({row[arm]['skipped']})", flush=True)
            record(row)
            continue
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
        if arm == "canonical" or arm.endswith("-compiled"):
            COMPILES.append(r)
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
    ap.add_argument("--compiled-models", type=lambda v: v.split(","), default=["transformer", "p-small", "p-70m"],
                    help="models whose compiled arms run (default all three)")
    ap.add_argument("--budget-s", type=float, default=math.inf,
                    help="wall-clock budget of the whole run (s): each model gets an equal share of what is left "
                         "when it starts, and an arm whose expected time (arm_estimate) does not fit is skipped "
                         "and said so (scripts/gpu_check.sh: 540)")
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
                  windows=N_WINDOWS, quick=args.quick, budget_s=args.budget_s, models=[])
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

    start = time.perf_counter()
    for i, name in enumerate(args.models):
        arms = [a for a in ARMS if a in args.arms and (name in args.compiled_models or not a.endswith("-compiled"))]
        now = time.perf_counter()
        deadline = now + (start + args.budget_s - now) / (len(args.models) - i)
        try:
            run_model(name, device, arms, peaks, args.quick, record, args.vocab, args.context, deadline)
        except Exception as exc:  # a model that cannot be built or counted must not lose the others
            traceback.print_exc()
            record(dict(model=name, error=f"{type(exc).__name__}: {exc}"[:600]))
    print(summary(result), flush=True)
    return 0


def rate_of(row: dict, arm: str):
    r = row.get(arm)
    return r.get("chain_steps_per_s") if isinstance(r, dict) else None


def summary(result: dict) -> str:
    """The ratios between arms per model (chain-steps/s over chain-steps/s at equal chains and batch), each arm's
    share of the fp32 matmul peak, and the entries for lib.sgld's compile tables these measurements propose."""
    lines = ["", "== summary (ratios of chain-steps/s; equal chains and batch within a model)"]
    pairs = [("loop-compiled", "canonical", "ours loop compiled / canonical-interp compiled"),
             ("vmap-compiled", "canonical", "ours vmap compiled / canonical-interp compiled"),
             ("loop", "canonical", "ours loop eager / canonical-interp compiled"),
             ("vmap", "canonical", "ours vmap eager / canonical-interp compiled"),
             ("loop", "loop-compiled", "loop eager / loop compiled"),
             ("vmap", "vmap-compiled", "vmap eager / vmap compiled"),
             ("vmap", "loop", "vmap / loop, eager"),
             ("vmap-compiled", "loop-compiled", "vmap / loop, compiled"),
             ("loop-compiled", "bare", "loop compiled / one chain's bare step")]
    savings, colds, eager_rates = [], [], []
    for row in result["models"]:
        name = row["model"]
        if "error" in row:
            lines.append(f"{name}: failed ({row['error'][:120]})")
            continue
        lines.append(f"{name} ({row['parameters']:,} parameters, {row['flops_per_chain_step'] / 1e9:.2f} GFLOP "
                     f"per chain-step):")
        for a, b, label in pairs:
            ra, rb = rate_of(row, a), rate_of(row, b)
            lines.append(f"   {label}: " + (f"{ra / rb:.2f}x" if ra and rb else "not measured"))
        for arm in ARMS:
            r = row.get(arm, {})
            if "fraction_of_fp32_peak" in r:
                lines.append(f"   {arm}: {100 * r['fraction_of_fp32_peak']:.1f} % of the fp32 peak")
        eager, compiled = rate_of(row, "loop"), rate_of(row, "loop-compiled")
        if eager and compiled:
            savings.append((name, 1.0 - eager / compiled))
            colds.append(row["loop-compiled"].get("first_call_extra_seconds", math.nan))
            eager_rates.append(eager * row["flops_per_chain_step"])
    kind = result["device"].split(":")[0]
    lines.append("")
    if result.get("quick"):
        lines.append("--quick: 2 and 4 draws per call, so the rates below are noise, not measurements")
    if savings:
        lines.append("measured saving of the compiled loop step (1 - eager/compiled): "
                     + ", ".join(f"{n} {s:+.1%}" for n, s in savings))
        low = min(s for _, s in savings)
        lines.append(f"proposed lib.sgld entries for {kind!r} (the smallest saving; the largest compile; the slowest eager "
                     "rate, per thread as compile_pays divides by torch.get_num_threads()):")
        lines.append(f"   COMPILE_SAVING[{kind!r}] = {max(low, 0.0):.2f}"
                     + ("   (no saving measured: leave the device out, so 'auto' stays eager)" if low <= 0 else ""))
        lines.append(f"   COMPILE_SECONDS_COLD[{kind!r}] = {max(colds):.1f}   (a first call's extra: cold only on a "
                     "fresh inductor cache)")
        import torch

        lines.append(f"   EAGER_FLOP_PER_S[{kind!r}] = {min(eager_rates) / torch.get_num_threads():.3g}   "
                     f"({min(eager_rates):.3g} FLOP/s over {torch.get_num_threads()} threads)")
    else:
        lines.append("no loop eager / loop compiled pair measured: no COMPILE_SAVING entry proposed")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
