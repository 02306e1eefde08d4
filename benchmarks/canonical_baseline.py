"""canonical-interp's LLC estimator on one case of ``bench_llc.py``; runs INSIDE ``.venv-canonical``.

    .venv-canonical/bin/python benchmarks/canonical_baseline.py SPEC.json   (or '-' for stdin)

SPEC (JSON; written by ``bench_llc.py``): as for ``devinterp_baseline.py`` (``case``,
``data``, ``eps``, ``gamma``, ``nbeta``, ``chains``, ``draws``, ``batch_size``, ``seed``,
``threads``), and optionally ``burn_in`` (default 0), ``compile`` (default true, the
library's own default), ``shuffle`` (default true) and ``frozen`` (default false: the
model is passed as trained, its parameters requiring grad).

canonical-interp 0.1.5 (``canonical_interp.slt.LLCEstimator``, as read in its source): the
chains' parameters are stacked (``torch.func.stack_module_state``) and one
``vmap(grad_and_value(forward))`` over them, wrapped in ``torch.compile`` unless
``compile=False``, gives every chain's gradient and minibatch loss in one call; the update
``canonical_interp.optim.sgld_step`` is compiled always (a ``@torch.compile()`` decorator):

    Δw = −(lr/2) (nβ ∇L_B(w) + γ (w − w*)) + √lr · N(0, 1),

the same step as devinterp's and ours, with the draw at step t the minibatch loss before the
step (draw 0 is at w*), and λ̂_c = nβ (mean_t L_{B_t}(w_t) − L_0), L_0 the mean over *every*
minibatch of the loader of the loss at w*, computed by the same compiled gradient function
(a forward and backward of every chain over the whole data set before sampling). The data
is a ``DataLoader`` over (inputs, targets) and the loss ``criterion_fn(model(x), y)``; the
loader is cycled with ``itertools.cycle``, which replays the first epoch's batches (so a
shuffled loader repeats its first order). Every 0.1.x release imports ``itertools.batched``
(Python ≥ 3.12) although it declares Python ≥ 3.10; this script supplies it on 3.11 (the
recipe of the Python docs) before the import.

**Memory.** ``stack_module_state`` keeps the parameters' ``requires_grad``, so with a model
as trained the gradient function's outputs carry an autograd graph (``grad_and_value``
builds its backward with ``create_graph``), and the L_0 pass sums the losses of every
minibatch into one tensor, keeping every minibatch's graph alive: on the transformer case,
165 MiB per minibatch of 4 chains × 32 sequences, 128 minibatches, about 21 GB (a run here
was killed for memory at 22 GB). ``frozen: true`` calls ``model.requires_grad_(False)``
first: ``torch.func.grad`` still differentiates the stacked parameters it is given, but
nothing outside it holds a graph (the same λ̂, and no double-backward bookkeeping per step).

Where its time goes is read off the call, not guessed: ``torch.compile`` is wrapped so that
every call of each compiled function is timed. The first call of a compiled function
compiles it; its **compile seconds** are that call's time less the median of its later calls.
The first ``len(loader)`` calls of the gradient function are the L_0 pass. So:

* ``seconds``: sampling only (burn-in and draws), without the L_0 pass and without the
  compile (the like-for-like figure to ours and devinterp's ``seconds``);
* ``compile_seconds``: both compiled functions' first-call overheads together;
* ``init_seconds``: model copies, stacking and the L_0 pass, without the compile;
* ``call_seconds``: the whole ``estimate_llc`` call, what a user waits for;
* ``chain_steps_per_s`` (= chain-steps / ``seconds``) and
  ``chain_steps_per_s_with_compile`` (= chain-steps / (``seconds`` + ``compile_seconds``)).

Prints one JSON object with the fields of ``devinterp_baseline.py`` and these.
"""

from __future__ import annotations

import json
import logging
import statistics
import sys
import time
from pathlib import Path

T_START = time.perf_counter()
sys.path.insert(0, str(Path(__file__).resolve().parent))  # llc_side, tiny_transformer (torch only)

from llc_side import Sandbox, llc_summary, load_case, peak_rss_bytes, start_side, supply_itertools_batched  # noqa: E402

supply_itertools_batched()


class TimedCall:
    """A compiled function whose every call is timed (start and end, perf_counter seconds)."""

    def __init__(self, fn):
        self.fn, self.calls = fn, []

    def __call__(self, *args, **kwargs):
        t0 = time.perf_counter()
        out = self.fn(*args, **kwargs)
        self.calls.append((t0, time.perf_counter()))
        return out

    def durations(self) -> list[float]:
        return [b - a for a, b in self.calls]

    def first_call_overhead(self) -> float:
        """The first call's time less the median of the later calls (what compiling cost)."""
        d = self.durations()
        return max(0.0, d[0] - statistics.median(d[1:])) if len(d) > 1 else (d[0] if d else 0.0)


COMPILED: list[TimedCall] = []


def _time_torch_compile() -> None:
    """Make every ``torch.compile`` (call or decorator) return a :class:`TimedCall` of the compiled function."""
    import torch

    original = torch.compile

    def timed_compile(model=None, **kwargs):
        if model is None:  # @torch.compile(...) used as a decorator factory
            return lambda fn: timed_compile(fn, **kwargs)
        timed = TimedCall(original(model, **kwargs))
        COMPILED.append(timed)
        return timed

    torch.compile = timed_compile


def run(spec, model, blob) -> dict:
    import torch
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, TensorDataset

    import canonical_interp.slt as slt

    if spec["case"] == "rrr":
        dataset, criterion = TensorDataset(blob["x"], blob["y"]), F.mse_loss  # mean over batch and outputs
    else:
        tokens = blob["tokens"]
        dataset = TensorDataset(tokens[:, :-1], tokens[:, 1:])

        def criterion(logits, targets):  # mean next-token cross entropy over batch and positions
            return F.cross_entropy(logits.transpose(1, 2), targets)
    if spec.get("frozen", False):  # see "Memory" above
        model.requires_grad_(False)
    loader = DataLoader(dataset, batch_size=spec["batch_size"], shuffle=spec.get("shuffle", True),
                        generator=torch.Generator().manual_seed(spec["seed"]))
    estimator = slt.LLCEstimator(draws=spec["draws"], chains=spec["chains"], burnin_steps=spec.get("burn_in", 0),
                                 steps_bw_draws=1, learning_rate=spec["eps"], localization=spec["gamma"],
                                 nbeta=spec["nbeta"])
    t0 = time.perf_counter()
    estimator.estimate_llc(model, loader, criterion_fn=criterion, seed=spec["seed"],
                           compile=spec.get("compile", True), show_progress=False)
    t1 = time.perf_counter()
    metrics = estimator.get_metrics()

    update = slt.sgld_step  # compiled when canonical_interp was imported; the other one is the gradient function
    gradient = next(c for c in COMPILED if c is not update and c.calls)
    init_end = gradient.calls[len(loader) - 1][1]  # the L_0 pass: the first len(loader) calls
    compile_grad, compile_update = gradient.first_call_overhead(), update.first_call_overhead()
    return dict(per_chain=metrics["llcs"].tolist(), canonical_llc_mean=float(metrics["llc_mean"]),
                canonical_llc_std=float(metrics["llc_std"]), init_loss=float(estimator.original_loss.mean()),
                call_seconds=t1 - t0, seconds=(t1 - init_end) - compile_update,
                init_seconds=(init_end - t0) - compile_grad, compile_seconds=compile_grad + compile_update,
                compile_seconds_parts=dict(gradient=compile_grad, update=compile_update),
                first_call_seconds=dict(gradient=gradient.durations()[0], update=update.durations()[0]),
                median_call_seconds=dict(gradient=statistics.median(gradient.durations()),
                                         update=statistics.median(update.durations())))


def main(argv=None) -> int:
    started = start_side(sys.argv[1:] if argv is None else argv, __doc__)
    if started is None:
        return 2
    spec, pools = started
    logging.getLogger("canonical_interp").setLevel(logging.ERROR)  # its DataLoader advice is for GPUs
    import torch
    from importlib.metadata import version

    with Sandbox() as box:  # everything the run writes (inductor's cache too) lands here, measured and removed
        t_imp = time.perf_counter()
        _time_torch_compile()
        import canonical_interp.slt  # noqa: F401

        import_seconds = time.perf_counter() - t_imp
        model, blob = load_case(spec)
        out = run(spec, model, blob)

    steps = spec["chains"] * (spec.get("burn_in", 0) + spec["draws"])
    result = dict(
        side=f"canonical-interp {version('canonical-interp')}", canonical_interp=version("canonical-interp"),
        torch=torch.__version__, threads=spec["threads"], thread_pools=pools, case=spec["case"],
        chains=spec["chains"], draws=spec["draws"], burn_in=spec.get("burn_in", 0), batch_size=spec["batch_size"],
        eps=spec["eps"], gamma=spec["gamma"], nbeta=spec["nbeta"], seed=spec["seed"],
        compile=spec.get("compile", True), frozen=spec.get("frozen", False), chain_steps=steps,
        chain_steps_per_s=steps / out["seconds"],
        chain_steps_per_s_with_compile=steps / (out["seconds"] + out["compile_seconds"]),
        **llc_summary(out.pop("per_chain")), peak_rss_bytes=peak_rss_bytes(), disk_bytes=box.disk_bytes,
        io_write_bytes=box.io["write_bytes"], io_wchar=box.io["wchar"], import_seconds=import_seconds,
        process_seconds=time.perf_counter() - T_START, **out)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
