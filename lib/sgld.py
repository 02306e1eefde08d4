"""The SGLD engine behind :mod:`lib.llc`: many chains of one model, K coupled targets, one step at a time.

Chen & Murfet Eq. 12 (after Welling & Teh 2011; Lau et al. 2024): for each chain,

    w_{t+1} = w_t − (ε/2) ( nβ ∇L_{B_t}(w_t) + γ (w_t − w*) ) + N(0, ε I),

with B_t a minibatch of m indices drawn uniformly for each chain. K targets (loss, data) share
the start w*, the minibatch indices and the injected noise (the coupling of Chen & Murfet §7).
:mod:`lib.llc` validates the arguments, calls :func:`sample` and turns its traces into
estimates; this module only runs chains.

How a step is computed:

* **vmap** (default): the gradients of a chunk's chains come from one ``torch.func.vmap`` of
  ``torch.func.grad`` over ``functional_call``; the update is the textbook form above, term by
  term, in place on reused (C, D) buffers. With ``compiled`` the whole vmapped gradient is
  ``torch.compile``d, and on the CPU its tiny per-chain GEMMs become fused loops
  (:func:`lib.batched_gemm.small_products_pass`).
* **loop**: one plain autograd forward + backward per chain, and the update fused into three
  passes,

      w_{t+1} = √ε ξ + (1 − εγ/2) w_t + (εγ/2) w* − (εnβ/2) ∇L_{B_t}(w_t)        (the same Eq. 12),

  the last adding each chain's gradients where autograd left them (one ``_foreach_add_`` per
  chain, no (C, D) copy), so that for a model whose one-chain step keeps the cores busy the
  sampler adds little over a bare forward + backward: the noise (one Gaussian per coordinate,
  drawn already scaled), three passes over the state and a finiteness check. Its chains equal
  vmap's up to float rounding (the two orders of the same sum). With ``compiled`` the per-chain
  loss is a ``torch.compile``d function (:func:`compile_pays` says when that repays its compile).
* **MALA bookkeeping** (the Metropolis-adjusted acceptance of each proposal, a step-size
  diagnostic, exact with full batches) costs about six more passes over the state per step; it
  runs only when asked for (``mala=True``). It never changes the chains.
* **Seeds.** Chunk j draws its minibatches and noise from ``torch.Generator`` seeded with
  ``(seed, j)`` (:func:`chunk_seeds`): the same seed and chunk size give bit-identical chains on
  the CPU, whether the chunks run in one process or are split over ``torchrun`` processes (rank r
  runs chunks r, r + W, …; the traces are gathered so every rank returns the whole result).
* **Divergence.** A chain is flagged at the first step t where its loss or its position is not
  finite; the caller leaves it out of the estimate.

Eq. 12 itself is written once, in the section "Eq. 12, once" below: the seed rule
(:func:`chunk_seeds`, :func:`chunk_generators`), the injected noise (:func:`draw_noise`), the
coefficients (:func:`eq12_coefficients`) and the update in each of the arrangements its callers
step with (:func:`textbook_update`, :func:`fused_update`, :func:`kicked_update_`; floating-point
addition is not associative, so each caller keeps its own order and its chains bit for bit).
:func:`run_chunk` steps with them, and so does the coupled (χ, β) grid of the chapter "LLC
theorems" (:func:`lib.llc_theorems.grid_chains`), whose noise is the stream of chunk 0 here.
"""
from __future__ import annotations

import contextlib
import functools
import math
import os
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch
from torch import nn

from .batched_gemm import small_products_pass
from .book.cache import cache_root
from .book.device import process_group
from .book.parameters import integer_at_least
from .book.progress import progress as progress_bar
from .models.causal_lm import available_memory

LossFn = Callable[[nn.Module, tuple], torch.Tensor]

BATCHING = ("vmap", "loop")

# When a compiled step repays its compile, per device type (benchmarks/bench_llc.py --break-even measures these on
# the book's 0.42M-parameter transformer; benchmarks/README.md has the figures): a cold compile costs about
# COMPILE_SECONDS_COLD, and the compiled step saves COMPILE_SAVING of an eager step that runs at EAGER_FLOP_PER_S
# per thread. On the 2-core CPU (two quiet runs, 2026-11-27, once compiles were timed apart from the sampling) the
# compiled loop step was faster than eager in every run: within each run, each of 4 compiled runs beat each of 2
# eager ones by 1.5-18 % (best against best 1.09x and 1.12x). The saving kept is 3 %, below most of those, since
# the eager runs also carry their first step. A cold compile took 20.1-20.8 s. Devices without a measurement stay
# eager under "auto".
COMPILE_SECONDS_COLD = {"cpu": 21.0}
COMPILE_SAVING = {"cpu": 0.03}
EAGER_FLOP_PER_S = {"cpu": 7.4e10}  # the transformer eager: 66-67 % of 218-223 GFLOP/s over 2 threads


class LLCInputError(ValueError):
    """An argument of the estimator is invalid (raised before any sampling)."""


class LLCMemoryError(MemoryError):
    """Not even one chain fits in the device's memory."""


@dataclass
class SamplerSettings:
    """nβ, γ, ε, chains, draws (steps per chain), burn-in, minibatch size m, seed and n, validated by
    :mod:`lib.llc`."""

    nbeta: float
    gamma: float
    eps: float
    chains: int
    draws: int
    burn_in: int
    batch_size: int
    seed: int
    n: int

    def as_dict(self) -> dict:
        return dict(self.__dict__)


# ----- the functional model -----------------------------------------------------------------

class LossModule(nn.Module):
    """The per-sample loss ℓ_i(w) of (model, loss_fn) as a module, so that ``functional_call`` can swap in
    any parameter vector w (one per chain under ``vmap``)."""

    def __init__(self, model: nn.Module, loss_fn: LossFn):
        super().__init__()
        self.model = model
        self.loss_fn = loss_fn

    def forward(self, *batch):
        return self.loss_fn(self.model, batch)


class FlatParameters:
    """The model's trainable parameters w as one flat vector (the coordinates SGLD moves), and back to
    named tensors."""

    def __init__(self, model: nn.Module):
        named = [(k, p) for k, p in model.named_parameters() if p.requires_grad]
        if not named:
            raise LLCInputError("parameter 'model' has no trainable parameters")
        self.names = ["model." + k for k, _ in named]
        self.shapes = [p.shape for _, p in named]
        self.sizes = [p.numel() for _, p in named]
        self.w0 = torch.cat([p.detach().reshape(-1) for _, p in named])

    def views(self, flat: torch.Tensor) -> list[torch.Tensor]:
        """The parameter tensors as views of ``flat`` (no copy), in ``names`` order."""
        return [part.view(shape) for part, shape in zip(torch.split(flat, self.sizes), self.shapes)]

    def unflatten(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        return dict(zip(self.names, self.views(flat)))


def activation_bytes(model: nn.Module, loss_fn: LossFn, data, batch_size: int) -> int:
    """Check ``loss_fn`` on one minibatch at w*; return the bytes saved for its backward."""
    batch = tuple(t[:batch_size] for t in data)
    saved = [0]

    def pack(t):
        saved[0] += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = loss_fn(model, batch)
    if not isinstance(out, torch.Tensor) or out.shape != (batch_size,):
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise LLCInputError(f"parameter 'loss_fn' must return per-sample losses of shape (batch,) = ({batch_size},); "
                            f"got {shape}")
    if not torch.isfinite(out).all():
        raise LLCInputError("parameter 'loss_fn' gives non-finite losses at w* (the model as passed)")
    return saved[0]


def available_bytes(device) -> int:
    """Free memory on ``device`` (:func:`lib.models.causal_lm.available_memory`)."""
    return available_memory(device)


def chains_per_chunk(flat: FlatParameters, activation: int, chains: int, device, requested, targets: int = 1) -> int:
    """Chains per chunk: what half the free memory holds (state ~8 vectors of D per chain per target)."""
    per_chain = targets * (8 * flat.w0.numel() * flat.w0.element_size() + 3 * activation)
    available = available_bytes(device)
    fit = int(0.5 * available // max(per_chain, 1))
    if fit < 1:
        raise LLCMemoryError(f"one SGLD chain needs about {per_chain / 2**20:.1f} MiB ({flat.w0.numel()} parameters, "
                             f"{activation / 2**20:.1f} MiB of activations per minibatch) but only "
                             f"{available / 2**20:.1f} MiB are free on {device}: lower 'batch_size'")
    if requested is not None:
        requested = integer_at_least("chunk_size", requested, 1, LLCInputError)
        if requested > fit:
            raise LLCMemoryError(f"parameter 'chunk_size' = {requested} chains need about "
                                 f"{requested * per_chain / 2**20:.0f} MiB; at most {fit} fit on {device}")
        return min(requested, chains)
    return min(chains, fit)


# ----- Eq. 12, once: the seed rule, the noise, the coefficients and the update -------------------

SEED_STRIDE = 1_000_003  # chunk j of a run seeded s draws its minibatches from s·SEED_STRIDE + j
NOISE_OFFSET = 7919      # and its injected noise from s·SEED_STRIDE + j + NOISE_OFFSET


def chunk_seeds(seed: int, chunk_index: int) -> tuple[int, int]:
    """The seed rule of every SGLD chain: (minibatch seed, noise seed) of chunk j of a run seeded s,
    (s·1,000,003 + j, s·1,000,003 + j + 7919)."""
    base = int(seed) * SEED_STRIDE + int(chunk_index)
    return base, base + NOISE_OFFSET


def chunk_generators(seed: int, chunk_index: int, device) -> tuple[torch.Generator, torch.Generator]:
    """The generators of chunk j seeded by :func:`chunk_seeds`: minibatch indices (on the CPU) and injected
    noise (on ``device``)."""
    batch_seed, noise_seed = chunk_seeds(seed, chunk_index)
    return (torch.Generator(device="cpu").manual_seed(batch_seed),
            torch.Generator(device=device).manual_seed(noise_seed))


def draw_noise(noise: torch.Tensor, generator: torch.Generator, scale: float = 1.0) -> torch.Tensor:
    """``noise`` filled in place with N(0, scale²) from ``generator``: with scale = √ε the √ε ξ of Eq. 12,
    drawn already scaled (bit-equal to randn·√ε); with scale = 1 the ξ of ``torch.randn``, bit for bit."""
    return noise.normal_(0.0, scale, generator=generator)


def eq12_coefficients(half_eps, gamma, nbeta) -> tuple:
    """The coefficients of Eq. 12 rearranged, w_{t+1} = keep·w_t + pull·w* − push·∇L + √ε ξ, from ε/2:
    (keep, pull, push) = (1 − εγ/2, εγ/2, εnβ/2). Numbers, or tensors (one entry per temperature)."""
    return 1 - half_eps * gamma, half_eps * gamma, half_eps * nbeta


def textbook_update(w: torch.Tensor, half_drift: torch.Tensor, noise: torch.Tensor, *, out) -> torch.Tensor:
    """Eq. 12 term by term: w − (ε/2)(nβ ∇L + γ (w − w*)) + √ε ξ, the drift (ε/2)(…) and ``noise`` = √ε ξ
    given (``run_chunk``'s vmap batching, whose drift MALA also reads), into ``out``."""
    return torch.sub(w, half_drift, out=out).add_(noise)


def fused_update(w: torch.Tensor, grad, noise: torch.Tensor, w0: torch.Tensor, keep: float, pull: float, push: float,
                 *, out, views=None) -> torch.Tensor:
    """Eq. 12 in three passes, √ε ξ + keep·w + pull·w* − push·∇L (:func:`eq12_coefficients`; ``noise`` = √ε ξ),
    into ``out``. ``grad``: a (C, D) tensor or, per chain, autograd's per-parameter tensors, added where they
    lie (one ``_foreach_add_`` per chain into ``views`` of its row, no (C, D) copy)."""
    new = torch.add(noise, w, alpha=keep, out=out).add_(w0, alpha=pull)
    if isinstance(grad, torch.Tensor):
        return new.add_(grad, alpha=-push)
    for c, chain_grads in enumerate(grad):
        torch._foreach_add_(views(new[c]), chain_grads, alpha=-push)
    return new


def kick(anchor: torch.Tensor, sqrt_eps, xi: torch.Tensor) -> torch.Tensor:
    """The part of Eq. 12 that does not depend on w: pull·w* + √ε ξ, from ``anchor`` = pull·w* and unit
    noise ξ (one kick serves every target coupled to the same noise)."""
    return torch.addcmul(anchor, sqrt_eps, xi)


def kicked_update_(w: torch.Tensor, grad: torch.Tensor, shift: torch.Tensor, keep, push) -> torch.Tensor:
    """Eq. 12 in place, w ← keep·w − push·∇L + shift, ``shift`` the :func:`kick` pull·w* + √ε ξ
    (:func:`eq12_coefficients`); ``push`` a tensor, the coefficients broadcast over w (one per temperature
    in the coupled grid)."""
    return w.mul_(keep).addcmul_(grad, push, value=-1).add_(shift)


# ----- compiling the per-chain step -----------------------------------------------------------

def step_flops(model: nn.Module, loss_fn: LossFn, data, batch_size: int) -> int:
    """Floating-point operations of one chain's step: the forward and backward of its mean loss on one
    minibatch at w* (``torch.utils.flop_counter``)."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    params = [p for p in model.parameters() if p.requires_grad]
    with counter:
        loss = loss_fn(model, tuple(t[:batch_size] for t in data)).mean()
        torch.autograd.grad(loss, params, allow_unused=True)
    return int(counter.get_total_flops())


def compile_pays(flops_per_chain_step, chain_steps: int, device, threads: int | None = None) -> bool:
    """Whether a ``torch.compile``d step repays a cold compile over ``chain_steps`` steps: the predicted eager
    time (FLOPs at :data:`EAGER_FLOP_PER_S` per thread) times the measured saving :data:`COMPILE_SAVING` exceeds
    :data:`COMPILE_SECONDS_COLD` (never where the compiled step was measured no faster, as on the CPU).
    ``flops_per_chain_step``: a number, or a function giving it (called only where a saving was measured, so
    that the forward and backward it costs are spent only where they can decide something). Decided from the run's size alone, so the same call always makes the same
    choice (a warm compile cache makes it cheaper, never different); False on devices where nothing was
    measured."""
    kind = torch.device(device).type
    rate, saving = EAGER_FLOP_PER_S.get(kind), COMPILE_SAVING.get(kind)
    if rate is None or saving is None or saving <= 0:
        return False
    flops = flops_per_chain_step() if callable(flops_per_chain_step) else flops_per_chain_step
    threads = torch.get_num_threads() if threads is None else threads
    eager_seconds = flops * chain_steps / (rate * max(threads, 1))
    return eager_seconds * saving > COMPILE_SECONDS_COLD[kind]


@contextlib.contextmanager
def compile_cache(key: str):
    """Inductor's on-disk cache (``TORCHINDUCTOR_CACHE_DIR``) under the book's cache, one folder per ``key``
    (torch version, device, thread count), unless the caller set one already."""
    if os.environ.get("TORCHINDUCTOR_CACHE_DIR"):
        yield os.environ["TORCHINDUCTOR_CACHE_DIR"]
        return
    folder = cache_root() / "inductor" / key
    folder.mkdir(parents=True, exist_ok=True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(folder)
    try:
        yield str(folder)
    finally:
        os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)


def compile_key(device) -> str:
    """What a compiled step depends on beside the model's code: torch's version, the device and the threads."""
    return f"torch-{torch.__version__}-{torch.device(device).type}-threads-{torch.get_num_threads()}"


# ----- one chunk of chains ------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def inductor_backend(kind: str):
    """The Inductor backend of every compiled step on one device type, made once per process: on the CPU with
    :func:`lib.batched_gemm.small_products_pass`, so that the tiny per-chain GEMMs of a vmapped step are
    summed in fused loops. One object, because dynamo keys its cache on the backend too: a new one per
    ``torch.compile`` made every build a recompile of the same function (vmap's and our per-chain loss), and after
    ``torch._dynamo.config.recompile_limit`` (8) builds the steps ran eager. ``kind``: "cpu", "cuda", ..."""
    options = {"post_grad_custom_pre_pass": small_products_pass()} if kind == "cpu" else None
    return torch._TorchCompileInductorWrapper(None, options, False)


def compile_step(fn, device):
    """``torch.compile(fn)`` for fixed shapes, with :func:`inductor_backend`."""
    return torch.compile(fn, backend=inductor_backend(torch.device(device).type), dynamic=False)


def vmap_step(wrapper: LossModule, flat: FlatParameters, full_batch: bool, n_data: int, compile_on=None):
    """(w (C, D), *batch) -> (∇ mean loss (C, D), mean loss (C,)), one vmapped forward + backward
    (``torch.compile``d for ``compile_on`` a device, see :func:`compile_step`)."""
    from torch.func import functional_call, grad, vmap

    def mean_loss(w, *batch):
        losses = functional_call(wrapper, flat.unflatten(w), batch)
        return losses.mean(), losses.mean().detach()

    batch_dims = (None if full_batch else 0,) * n_data
    step = vmap(grad(mean_loss, has_aux=True), in_dims=(0, *batch_dims))
    return step if compile_on is None else compile_step(step, compile_on)


def loop_step(wrapper: LossModule, flat: FlatParameters, full_batch: bool, compile_on=None):
    """(w (C, D), *batch, out) -> (gradients, mean loss (C,)): one plain autograd forward + backward per chain
    (the parameters are leaves that share w's memory, so nothing is copied on the way in). With ``out`` a
    (C, D) tensor each chain's gradient is written into its row and ``out`` is returned; with ``out=None``
    the gradients are returned as autograd made them, one list of per-parameter tensors per chain (no copy;
    :func:`run_chunk` adds them to the state with one ``_foreach_add_`` per chain). The per-chain loss is
    ``torch.compile``d for ``compile_on`` a device (:func:`compile_step`)."""
    from torch.func import functional_call

    def mean_loss(params, batch):
        return functional_call(wrapper, dict(zip(flat.names, params)), batch).mean()

    loss_of = mean_loss if compile_on is None else compile_step(mean_loss, compile_on)

    def step(w, *batch, out):
        losses = torch.empty(w.shape[0], dtype=w.dtype, device=w.device)
        per_chain = []
        for c in range(w.shape[0]):
            params = [p.detach().requires_grad_(True) for p in flat.views(w[c])]
            loss = loss_of(params, tuple(t if full_batch else t[c] for t in batch))
            grads = torch.autograd.grad(loss, params, allow_unused=True, materialize_grads=True)
            if out is None:
                per_chain.append(grads)
            else:
                torch.cat([g.reshape(-1) for g in grads], out=out[c])
            losses[c] = loss.detach()
        return (per_chain if out is None else out), losses

    return step


def build_steps(wrappers: Sequence[LossModule], flat: FlatParameters, full_batch: bool, n_data: int, batching: str,
                compile_on=None) -> list:
    """One gradient step per target: :func:`loop_step` for ``batching="loop"``, else :func:`vmap_step`
    (``torch.compile``d for ``compile_on`` a device). Built once per :func:`sample` and shared by its chunks."""
    if batching == "loop":
        return [loop_step(w, flat, full_batch, compile_on) for w in wrappers]
    return [vmap_step(w, flat, full_batch, n_data, compile_on) for w in wrappers]


def warm_up(steps: Sequence, datas, flat: FlatParameters, s: SamplerSettings, chunk_sizes, batching: str,
            device) -> None:
    """Call each compiled step once per input shape the chunks will give it (the loop's one-chain function once;
    vmap's whole-chunk function once per distinct chunk size), so that every compile happens here and none
    during sampling."""
    fused = batching == "loop"
    w0 = flat.w0.to(device)
    full_batch = s.batch_size == s.n
    for rows in ({1} if fused else sorted(set(chunk_sizes))):
        first_idx = torch.zeros((rows, s.batch_size), dtype=torch.long, device=datas[0][0].device)
        for step, data in zip(steps, datas):
            first = data if full_batch else tuple(t[first_idx] for t in data)
            w_first = w0.expand(rows, -1).clone()
            step(w_first, *first, out=None) if fused else step(w_first, *first)


def run_chunk(steps: Sequence, datas, flat: FlatParameters, s: SamplerSettings, chain_ids: np.ndarray,
              chunk_index: int, device, bar, batching: str = "vmap", snapshot_steps: Sequence[int] = (),
              mala: bool = False) -> dict:
    """SGLD for one chunk of chains, for K targets sharing start, minibatch indices and noise; ``steps`` from
    :func:`build_steps` (compiled ones already warmed up by :func:`warm_up`).

    Returns the loss traces after burn-in (K, C, draws − burn_in), each chain's first non-finite step
    (−1: none), the mean MALA acceptance (NaN unless ``mala``), and for K ≥ 2 the separations from target 0."""
    C, K = len(chain_ids), len(steps)
    w0 = flat.w0.to(device)
    D = w0.numel()
    gen, noise_gen = chunk_generators(s.seed, chunk_index, device)
    full_batch = s.batch_size == s.n
    sqrt_eps, half_eps = math.sqrt(s.eps), 0.5 * s.eps
    fused = batching == "loop"
    if fused:  # MALA reads the gradient as one (C, D) tensor; otherwise autograd's own tensors are added to the state
        grads = [torch.empty(C, D, dtype=w0.dtype, device=device) if mala else None for _ in range(K)]
    squares = [torch.empty(C, D, dtype=w0.dtype, device=device) for _ in range(K)] if mala or not fused else None

    def gradient(k, w, idx):
        batch = datas[k] if full_batch else tuple(t[idx] for t in datas[k])
        if fused:
            return steps[k](w, *batch, out=grads[k])
        return steps[k](w, *batch)

    def textbook_half_drift(k, w, g, in_place: bool):
        """(ε/2)(nβ ∇L + γ (w − w*)) term by term (in g's buffer when ``in_place``), and ‖w − w*‖² per chain."""
        diff = w - w0
        sq = torch.pow(diff, 2, out=squares[k]).sum(-1)
        drift = (g.mul_(s.nbeta) if in_place else g * s.nbeta).add_(diff.mul_(s.gamma))
        return drift.mul_(half_eps), sq

    keep = s.draws - s.burn_in
    trace = torch.empty(K, C, keep, dtype=torch.float64, device=device)
    first_bad = torch.full((K, C), -1, dtype=torch.long, device=device)
    accept_sum = torch.zeros(K, C, dtype=torch.float64, device=device)
    # separations ‖w^0 − w^k‖ of every further target from the first, and kept positions
    sep = torch.empty(K - 1, C, keep, dtype=torch.float64, device=device) if K >= 2 else None
    max_sep = torch.zeros(K - 1, C, dtype=torch.float64, device=device) if K >= 2 else None
    snap = {int(t): i for i, t in enumerate(snapshot_steps)}
    positions = torch.empty(K, C, len(snap), D, dtype=w0.dtype, device=device) if snap else None

    w = [w0.expand(C, -1).clone() for _ in range(K)]
    prev = [None] * K  # with MALA: (w, (ε/2) drift, potential u) of the previous step
    noise = torch.empty(C, D, dtype=w0.dtype, device=device)
    keep_w, pull_w0, push_g = eq12_coefficients(half_eps, s.gamma, s.nbeta)  # (1 − εγ/2, εγ/2, εnβ/2)
    cheap_finite_check = torch.device(device).type == "cpu"
    data_device = datas[0][0].device
    for t in range(s.draws + 1):
        if t in snap:  # the state after t steps
            for k in range(K):
                positions[k, :, snap[t]] = w[k]
        idx = None
        if not full_batch:
            # a fresh minibatch per chain: m indices drawn uniformly (with replacement)
            idx = torch.randint(0, s.n, (C, s.batch_size), generator=gen).to(data_device)
        if t < s.draws:
            draw_noise(noise, noise_gen, sqrt_eps)  # √ε ξ
        for k in range(K):
            g, loss = gradient(k, w[k], idx)
            half_drift = sq = None
            if not fused or mala:
                half_drift, sq = textbook_half_drift(k, w[k], g, in_place=not fused)
            new = w[k]  # the state is updated in place, except that MALA keeps the previous one
            if mala:
                u = s.nbeta * loss + 0.5 * s.gamma * sq
                new = None
                if prev[k] is not None:  # MALA acceptance of the proposal w_prev -> w
                    w_prev, half_drift_prev, u_prev = prev[k]
                    dw = torch.sub(w[k], w_prev, out=squares[k])
                    fwd = torch.add(dw, half_drift_prev).pow_(2).sum(-1)
                    bwd = torch.sub(half_drift, dw, out=dw).pow_(2).sum(-1)  # (w_prev − w) + (ε/2) drift
                    log_a = (u_prev - u) + (fwd - bwd) / (2 * s.eps)
                    accept_sum[k] += torch.exp(torch.clamp(log_a, max=0.0)).double().nan_to_num(0.0)
                    new = w_prev  # its buffer takes the next state
                prev[k] = (w[k], half_drift, u)
                new = torch.empty_like(w[k]) if new is None else new
            if t == s.draws:
                continue
            total = sq if sq is not None else w[k].sum(-1)  # finite iff every coordinate is (bar overflow: then look)
            w_bad = ~torch.isfinite(total)
            if not cheap_finite_check or w_bad.any():
                w_bad = ~torch.isfinite(w[k]).all(-1)
            bad = ~torch.isfinite(loss) | w_bad
            first_bad[k] = torch.where((first_bad[k] < 0) & bad, torch.full_like(first_bad[k], t), first_bad[k])
            if t >= s.burn_in:
                trace[k, :, t - s.burn_in] = loss.double()
            if fused:  # √ε ξ + (1 − εγ/2) w + (εγ/2) w* − (εnβ/2) ∇L
                w[k] = fused_update(w[k], g, noise, w0, keep_w, pull_w0, push_g, out=new, views=flat.views)
            else:  # w − (ε/2) drift + √ε ξ
                w[k] = textbook_update(w[k], half_drift, noise, out=new)
        if K >= 2 and t < s.draws:
            d = torch.stack([(w[0] - w[k]).double().norm(dim=-1) for k in range(1, K)])
            max_sep = torch.maximum(max_sep, d.nan_to_num(float("inf")))
            if t >= s.burn_in:
                sep[:, :, t - s.burn_in] = d
        if bar is not None and t < s.draws:
            bar.update(C)
    accept = (accept_sum / s.draws) if mala else torch.full_like(accept_sum, float("nan"))
    out = {"trace": trace.cpu().numpy(), "first_bad": first_bad.cpu().numpy(), "accept": accept.cpu().numpy(),
           "chain_ids": chain_ids}
    if K >= 2:
        out["sep"], out["max_sep"] = sep.cpu().numpy(), max_sep.cpu().numpy()
    if snap:
        out["positions"] = positions.cpu().numpy()
    return out


def _gather(parts: list[dict]) -> list[dict]:
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return parts
    everything = [None] * dist.get_world_size()
    dist.all_gather_object(everything, parts)
    return [p for rank_parts in everything for p in rank_parts]


def sample(model: nn.Module, targets, s: SamplerSettings, *, device, chunk_size, progress, desc,
           batching: str = "vmap", snapshot_steps: Sequence[int] = (), mala: bool = False,
           compiled: bool = False) -> tuple[list, float, float]:
    """Run ``s.chains`` chains of every target (loss_fn, data) in chunks that fit ``device``; the chunks of this
    process's rank under ``torchrun``. Returns every chunk's :func:`run_chunk` output (gathered over the ranks,
    in chain order), the seconds of sampling (under ``torchrun`` from a barrier every rank reaches to the end of
    the slowest) and the seconds of compiling (0 when eager): building the compiled steps, which on a process's
    first compile includes importing the compiler, and their first calls (:func:`warm_up`), on every rank
    before that barrier, so that no rank samples while another compiles."""
    flat = FlatParameters(model)
    activation = max(activation_bytes(model, fn, data, s.batch_size) for fn, data in targets)
    chunk = chains_per_chunk(flat, activation, s.chains, device, chunk_size, len(targets))
    rank, world = process_group()
    model = model.to(device)
    flat.w0 = flat.w0.to(device)
    wrappers = [LossModule(model, fn) for fn, _ in targets]
    datas = [tuple(t.to(device) for t in data) for _, data in targets]
    chunks = [np.arange(a, min(a + chunk, s.chains)) for a in range(0, s.chains, chunk)]
    mine = [(j, ids) for j, ids in enumerate(chunks) if j % world == rank]
    total = sum(len(ids) for _, ids in mine) * s.draws
    bar = progress_bar(desc=desc, total=total, disable=not progress) if progress else None
    full_batch = s.batch_size == s.n
    parts, compile_seconds = [], 0.0
    with compile_cache(compile_key(device)) if compiled else contextlib.nullcontext():
        start = time.perf_counter()
        steps = build_steps(wrappers, flat, full_batch, len(datas[0]), batching, device if compiled else None)
        if compiled:
            warm_up(steps, datas, flat, s, [len(ids) for _, ids in mine], batching, device)
            if device.type == "cuda":  # the warm-up's kernels finish before the sampling clock starts
                torch.cuda.synchronize(device)
        if world > 1:  # the sampling starts when every rank is ready (and ends when the slowest is done)
            import torch.distributed as dist

            dist.barrier()
        if compiled:
            compile_seconds = time.perf_counter() - start
        start = time.perf_counter()
        for j, ids in mine:
            parts.append(run_chunk(steps, datas, flat, s, ids, j, device, bar, batching, snapshot_steps,
                                   mala=mala))
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    if world > 1:  # the sampling ends when the slowest rank is done
        import torch.distributed as dist

        dist.barrier()
    seconds = time.perf_counter() - start
    if bar is not None:
        bar.close()
    parts = sorted(_gather(parts), key=lambda p: p["chain_ids"][0])
    return parts, seconds, compile_seconds
