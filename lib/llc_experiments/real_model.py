"""The chapter "Learning coefficients"'s study of a model no one here trained: λ̂ of one named part of a
released language model's weights, the rest frozen, beside the same part of its untrained twin.

The models are :meth:`lib.models.causal_lm.CausalLM.from_pretrained`'s GGUF models (``"smollm2-135m"``,
``"gemma3-270m"``): revision ``"final"`` is the file's (instruction-tuned, 4-bit quantised) weights and
``"init"`` the untrained twin of the same configuration, drawn with a seed and put through the same
quantisation round trip (:mod:`lib.models.gguf_file`).

**The restriction.** Write w = (u, v) with u the weights of the named part (say block k's MLP
down-projection) and v all the others, held at v*. The estimator of Chen & Murfet Eqs. 10–13 is run on
u ↦ L_n(u, v*): the localised tempered posterior p(u) ∝ exp(−nβ L_n(u, v*) − (γ/2)‖u − u*‖²) and
λ̂(u*) = nβ (E_p[L_n(u, v*)] − L_n(u*, v*)), the learning coefficient of the part at the rest's values
(d = dim u, so λ ≤ d/2). devinterp and canonical-interp offer the same restriction by sampling a chosen
subset of the parameters; here it is :func:`lib.llc.estimate_llc` on a module whose only trainable
parameters are the part's.

**What each step runs.** The blocks below block k do not depend on u, so the hidden state entering
block k is computed once for the sample (:func:`entry_states`: every window, every position but the last,
whose logits no target reads) and each SGLD step runs only blocks k, …, L−1, the final norm and the tied
unembedding (:class:`UpperStack`): the model's own forward on the cached states as ``inputs_embeds``, with
the blocks below left out. :func:`restricted_loss` is the per-window mean next-token cross-entropy, one
window one sample, as :func:`lib.models.causal_lm.sequence_loss` on the whole model.

:func:`part_llc` runs the estimator on one model; :func:`trained_vs_twin` on the trained model and its
twin, with the chapter's mixing rules (:data:`lib.llc_experiments.known_cases.MIXED_RHAT`,
:data:`~lib.llc_experiments.known_cases.MIXED_ESS`) and :func:`lib.llc.estimate_warnings` read off each.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ..book import cache
from ..llc import estimate_llc, estimate_warnings, warnings_to_terminal
from .known_cases import MIXED_ESS, MIXED_RHAT

REAL_MODELS = ("smollm2-135m", "gemma3-270m", "none")
"""The values of the chapters' ``real_model`` parameter: the two GGUF models the pinned packages install,
or ``none`` (the section is skipped and its claims read undecided)."""

PARTS = ("mlp.down_proj", "self_attn.o_proj", "mlp", "self_attn")
"""The parts of a decoder block that can be sampled, by module name inside the block."""

SHAPES = {
    "smollm2-135m": {"hidden_size": 576, "num_hidden_layers": 30, "vocab_size": 49152, "intermediate_size": 1536,
                     "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64},
    "gemma3-270m": {"hidden_size": 640, "num_hidden_layers": 18, "vocab_size": 262144, "intermediate_size": 2048,
                    "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256},
}
"""The shapes of the two GGUF models as their headers give them (:func:`lib.models.hub.model_config`, which a
test compares with these), for pricing a run before any file is read (a header read takes seconds)."""

CORPUS = "default"  # the offline corpus (the Python documentation), tokenized with the model's own tokenizer


class RealModelError(ValueError):
    """A model, part or layer the study cannot take, refused before anything is loaded."""


def check_real_model(name) -> str:
    """``name`` if it is one of :data:`REAL_MODELS`, else :class:`RealModelError` naming the allowed values."""
    if not isinstance(name, str) or name not in REAL_MODELS:
        raise RealModelError(f"parameter 'real_model' must be one of {list(REAL_MODELS)}; got {name!r}")
    return name


def check_part(part) -> str:
    """``part`` if it is one of :data:`PARTS`, else :class:`RealModelError`."""
    if not isinstance(part, str) or part not in PARTS:
        raise RealModelError(f"parameter 'real_part' must be one of {list(PARTS)}; got {part!r}")
    return part


def blocks_of(model: nn.Module) -> nn.ModuleList:
    """The decoder blocks of a ``transformers`` causal LM (Llama, Gemma 3: ``model.model.layers``)."""
    try:
        return model.model.layers
    except AttributeError:
        raise RealModelError(f"{type(model).__name__} has no decoder blocks at model.model.layers") from None


def block_index(model: nn.Module, from_top: int) -> int:
    """The index k of the block ``from_top`` blocks below the top one (0: the top block, L − 1)."""
    L = len(blocks_of(model))
    if isinstance(from_top, bool) or not isinstance(from_top, (int, np.integer)) or not 0 <= from_top < L:
        raise RealModelError(f"parameter 'real_layer_from_top' must be an integer in [0, {L - 1}] for a model of "
                             f"{L} blocks; got {from_top!r}")
    return L - 1 - int(from_top)


def part_parameters(model: nn.Module, layer: int, part: str) -> dict[str, nn.Parameter]:
    """The parameters u of ``part`` in block ``layer``, by their names in ``model``."""
    prefix = f"model.layers.{layer}.{check_part(part)}."
    named = {k: p for k, p in model.named_parameters() if k.startswith(prefix)}
    if not named:
        raise RealModelError(f"block {layer} of {type(model).__name__} has no parameters under {prefix!r}")
    return named


def shape_part_size(config, part: str) -> int:
    """d of ``part`` from a model's shape (``config``), without its weights: as :func:`part_size` counts it."""
    D, F = config.hidden_size, config.intermediate_size
    hd = getattr(config, "head_dim", None) or D // config.num_attention_heads
    q, kv = config.num_attention_heads * hd, config.num_key_value_heads * hd
    sizes = {"mlp.down_proj": F * D, "self_attn.o_proj": q * D, "mlp": 3 * F * D, "self_attn": D * (2 * q + 2 * kv)}
    return sizes[check_part(part)]


def part_size(model: nn.Module, layer: int, part: str) -> int:
    """d = dim u, the number of weights of the part."""
    return int(sum(p.numel() for p in part_parameters(model, layer, part).values()))


# ----- the restricted forward --------------------------------------------------------------------

@torch.no_grad()
def entry_states(model: nn.Module, ids: torch.Tensor, layer: int, batch_size: int = 8) -> torch.Tensor:
    """The hidden state entering block ``layer`` for every window of ``ids`` (n, T) at positions 0..T−2,
    an (n, T − 1, d) float tensor: the input the blocks below give it, captured by a forward pre-hook on
    the model's own forward (which stops there). The last position is dropped: causal attention lets no
    earlier position read it, and no target is predicted from it."""
    blocks = blocks_of(model)
    captured = []

    class _Stop(Exception):
        pass

    def grab(module, args, kwargs):
        h = args[0] if args else kwargs["hidden_states"]
        captured.append(h.detach()[:, :-1].clone())
        raise _Stop

    handle = blocks[layer].register_forward_pre_hook(grab, with_kwargs=True)
    try:
        for start in range(0, ids.shape[0], batch_size):
            try:
                model(input_ids=ids[start:start + batch_size], use_cache=False)
            except _Stop:
                pass
    finally:
        handle.remove()
    return torch.cat(captured)


class UpperStack(nn.Module):
    """Blocks ``layer``, …, L − 1 of ``model``, its final norm and its (tied) unembedding, run on cached
    hidden states: the model's own forward called with ``inputs_embeds``, its block list (and, where the config
    has one, its list of block types) cut to those blocks for the call and restored after. Every module is the model's own (no weights are copied), so parameter names are
    the model's, prefixed ``lm.``; the trainable parameters are the part's alone (set by :func:`restrict`)."""

    def __init__(self, model: nn.Module, layer: int):
        super().__init__()
        blocks_of(model)
        self.lm = model
        self.layer = layer

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        """Logits (B, T − 1, V) at the cached positions."""
        inner = self.lm.model
        every, types = inner.layers, getattr(inner.config, "layer_types", None)
        inner.layers = nn.ModuleList(list(every)[self.layer:])
        if types is not None:  # Gemma 3 picks each block's mask and rotary table by its index in the list
            inner.config.layer_types = list(types)[self.layer:]
        try:
            return self.lm(inputs_embeds=states, use_cache=False).logits
        finally:
            inner.layers = every
            if types is not None:
                inner.config.layer_types = types


def restrict(model: nn.Module, layer: int, part: str) -> UpperStack:
    """:class:`UpperStack` from block ``layer`` with only ``part``'s parameters trainable (``requires_grad``),
    every other parameter of ``model`` frozen. Changes ``model``'s ``requires_grad`` flags."""
    keep = set(part_parameters(model, layer, part).values())
    for p in model.parameters():
        p.requires_grad_(any(p is q for q in keep))
    return UpperStack(model, layer)


def restricted_loss(stack: nn.Module, batch) -> torch.Tensor:
    """Per-window mean next-token cross-entropy (nats per token) from cached states: ``batch`` =
    (states (B, T − 1, d), targets (B, T − 1)); returns (B,). The loss ℓ_i of :func:`lib.llc.estimate_llc`."""
    states, targets = batch
    logits = stack(states)
    B, T1, V = logits.shape
    logits = logits.reshape(B * T1, V)
    if logits.dtype in (torch.float16, torch.bfloat16):  # a half-precision model's loss in float32; float64 stays
        logits = logits.float()
    per_token = nn.functional.cross_entropy(logits, targets.reshape(B * T1), reduction="none")
    return per_token.view(B, T1).mean(-1)


def gradient_norm(stack: nn.Module, data, batch_size: int = 8) -> float:
    """‖∇_u L_n(u*, v*)‖, the full-sample gradient of the part (K of Chen & Murfet Remark 7.5 at u*)."""
    params = [p for p in stack.parameters() if p.requires_grad]
    grads = [torch.zeros_like(p) for p in params]
    n = data[0].shape[0]
    for start in range(0, n, batch_size):
        batch = tuple(t[start:start + batch_size] for t in data)
        g = torch.autograd.grad(restricted_loss(stack, batch).sum() / n, params)
        for acc, gi in zip(grads, g):
            acc += gi
    return float(torch.sqrt(sum((g.double() ** 2).sum() for g in grads)))


# ----- the sample ----------------------------------------------------------------------------------

def text_windows(tokenizer, n: int, context: int, seed: int, corpus: str = CORPUS) -> torch.Tensor:
    """``n`` windows of ``context`` tokens (n, T) of the offline corpus, tokenized with the model's own
    tokenizer: documents in the corpus's order are tokenized until the stream holds 4·n·T tokens, then the
    windows' starts are drawn as :func:`lib.substrate.training_windows` draws them (``seed``)."""
    from .. import substrate

    text = substrate.load_text(corpus, 0.0)
    need, tokens = 4 * n * context, []
    for doc in text.documents:
        tokens.extend(tokenizer(doc, add_special_tokens=False)["input_ids"])
        if len(tokens) >= need:
            break
    return substrate.training_windows(np.asarray(tokens, dtype=np.int64), n, context, seed)


def load_real_model(name: str, revision: str, seed: int, device="cpu"):
    """(model, tokenizer) of the GGUF model ``name`` at ``revision`` (``"final"`` or ``"init"``, the twin drawn
    with ``seed``), from the book's cache of dequantised weights, float32, in eval mode."""
    from transformers import AutoTokenizer

    from ..models import gguf_file
    from ..models.causal_lm import CausalLM

    folder = gguf_file.dequantised_dir(check_real_model(name), revision, seed=seed)
    lm = CausalLM.from_pretrained(str(folder), device=device)
    lm.model.set_attn_implementation("eager")  # plain ops: the same numbers under loop, vmap and double backward
    tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    return lm.model.eval(), tokenizer


def cached_entry_states(name: str, revision: str, seed: int, windows: torch.Tensor, layer: int, model) -> torch.Tensor:
    """:func:`entry_states` kept in the book's cache, keyed by model, revision, seed, layer and the windows'
    digest (the chapters "Learning coefficients" and "LLC theorems" read the same states)."""
    import hashlib

    digest = hashlib.sha256(windows.numpy().tobytes()).hexdigest()[:16]
    params = {"model": name, "revision": revision, "seed": int(seed) if revision == "init" else None,
              "layer": int(layer), "windows": list(windows.shape), "digest": digest}
    out = cache.cached("real-model-states", params,
                       lambda: {"states": entry_states(model, windows, layer).numpy()}, fmt="npz")
    return torch.from_numpy(np.asarray(out["states"]))


@dataclass
class RestrictedProblem:
    """One model's part set up for sampling: the module, the data (cached states, targets) and the part."""

    name: str
    revision: str
    layer: int
    part: str
    stack: UpperStack
    data: tuple
    d: int


def restricted_problem(name: str, revision: str, *, part: str, from_top: int, windows: torch.Tensor, seed: int,
                       model=None) -> RestrictedProblem:
    """The part ``part`` of block ``from_top`` below the top of model ``name`` at ``revision``, on ``windows``
    (token ids of the model's tokenizer): :func:`restrict` and :func:`cached_entry_states`. ``model``: the
    model already loaded (else :func:`load_real_model`)."""
    if model is None:
        model, _ = load_real_model(name, revision, seed)
    layer = block_index(model, from_top)
    states = cached_entry_states(name, revision, seed, windows, layer, model)
    stack = restrict(model, layer, part)
    return RestrictedProblem(name, revision, layer, part, stack, (states, windows[:, 1:].contiguous()),
                             part_size(model, layer, part))


# ----- λ̂ of the part --------------------------------------------------------------------------------

@dataclass
class PartEstimate:
    """λ̂ of one model's part (:func:`part_llc`): the estimate, its diagnostics against the chapter's mixing
    rules, d and ‖∇L_n(u*)‖."""

    revision: str
    llc: float
    se: float
    rhat: float
    ess: float            # the loss trace's ESS summed over chains (the chapter's pooled ESS)
    d: int
    init_loss: float
    grad_norm: float
    diverged: float
    warnings: list
    settings: dict

    @property
    def mixed(self) -> bool:
        """Split R̂ ≤ :data:`MIXED_RHAT` and pooled ESS ≥ :data:`MIXED_ESS`, the chapter's precondition."""
        return self.rhat <= MIXED_RHAT and self.ess >= MIXED_ESS

    @property
    def half_d(self) -> float:
        return self.d / 2

    def row(self) -> dict:
        return {"model": self.revision, "d": self.d, "d/2": self.half_d, "λ̂": self.llc, "s.e.": self.se,
                "λ̂/(d/2)": self.llc / self.half_d, "split R̂": self.rhat, "ESS": self.ess, "L_n(w*)": self.init_loss,
                "‖∇L_n(w*)‖": self.grad_norm, "diverged": self.diverged}


def part_llc(problem: RestrictedProblem, *, gamma: float, eps: float, chains: int, draws: int, burn_in: int,
             batch_size: int, seed: int, device="cpu") -> PartEstimate:
    """λ̂ of ``problem``'s part by :func:`lib.llc.estimate_llc` (nβ = n/log n, one window one sample, plain
    autograd per chain), with split R̂, the pooled ESS, :func:`lib.llc.estimate_warnings` and ‖∇L_n(u*)‖."""
    with warnings_to_terminal():
        res = estimate_llc(problem.stack, restricted_loss, problem.data, gamma=gamma, eps=eps, chains=chains,
                           draws=draws, burn_in=burn_in, batch_size=batch_size, seed=seed, device=device,
                           progress=False, batching="loop", compile=False)
    rhat = float(res.diagnostics["rhat"])
    return PartEstimate(problem.revision, res.llc, res.se, rhat, float(np.sum(res.diagnostics["ess"])), problem.d,
                        res.init_loss, gradient_norm(problem.stack, problem.data), res.divergent_fraction,
                        estimate_warnings(res.llc, rhat, res.se, problem.d), res.settings)


def undecided_reason(*estimates: PartEstimate) -> str | None:
    """Why a finding on these estimates is undecided: a run whose split R̂ exceeds :data:`MIXED_RHAT` or whose
    pooled ESS is below :data:`MIXED_ESS` (the chapter's rules for every run entering a claim); None if all
    mixed."""
    bad = [f"{e.revision}: split R̂ {e.rhat:.3f}, ESS {e.ess:.0f}" for e in estimates if not e.mixed]
    if not bad:
        return None
    return f"not mixed (split R̂ > {MIXED_RHAT} or pooled ESS < {MIXED_ESS:g}): " + "; ".join(bad)


def difference(trained: PartEstimate, twin: PartEstimate) -> tuple[float, float]:
    """λ̂(trained) − λ̂(twin) and its standard error (independent chains: the s.e.s add in quadrature)."""
    return trained.llc - twin.llc, math.hypot(trained.se, twin.se)


@dataclass
class TrainedVsTwin:
    """:func:`trained_vs_twin`: λ̂ of the same part of the trained model and of its untrained twin."""

    name: str
    layer: int
    part: str
    n: int
    context: int
    trained: PartEstimate
    twin: PartEstimate

    @property
    def difference(self) -> tuple[float, float]:
        return difference(self.trained, self.twin)

    @property
    def undecided(self) -> str | None:
        return undecided_reason(self.trained, self.twin)


def trained_vs_twin(name: str, *, part: str, from_top: int, windows: int, context: int, gamma: float, eps: float,
                    chains: int, draws: int, burn_in: int, batch_size: int, seed: int,
                    device="cpu") -> TrainedVsTwin:
    """λ̂ of ``part`` of block ``from_top`` below the top (:func:`part_llc`) of the model ``name`` (revision
    ``"final"``) and of its twin (``"init"``, drawn with ``seed``), on the same ``windows`` windows of
    ``context`` tokens of the offline corpus (the trained model's tokenizer; the twin shares it) and with the
    same SGLD settings and seed."""
    model, tokenizer = load_real_model(name, "final", seed, device)
    ids = text_windows(tokenizer, windows, context, seed)
    out = {}
    for revision in ("final", "init"):
        if revision == "init":
            del model
            model, _ = load_real_model(name, "init", seed, device)
        problem = restricted_problem(name, revision, part=part, from_top=from_top, windows=ids, seed=seed, model=model)
        out[revision] = part_llc(problem, gamma=gamma, eps=eps, chains=chains, draws=draws, burn_in=burn_in,
                                 batch_size=batch_size, seed=seed, device=device)
    return TrainedVsTwin(name, problem.layer, part, windows, context, out["final"], out["init"])


def model_shape(name: str):
    """The configuration-like shape of the GGUF model ``name`` (:data:`SHAPES`), for :func:`real_model_cost`."""
    from types import SimpleNamespace

    if name not in SHAPES:
        raise RealModelError(f"no shape for {name!r}; known: {sorted(SHAPES)}")
    return SimpleNamespace(**SHAPES[name])


def real_model_cost(config, *, part_d: int, from_top: int, windows: int, context: int, chains: int, draws: int,
                    batch_size: int, models: int = 2) -> tuple[float, float]:
    """(peak bytes, FLOPs) of the study on a model of ``config``: the states entering the block (one forward of
    every window), then ``chains`` × ``draws`` SGLD steps on ``batch_size`` windows through the upper blocks,
    the final norm and the unembedding (forward and backward: 3 forward passes), for each of ``models``."""
    d_model, V = config.hidden_size, config.vocab_size
    layers = getattr(config, "num_hidden_layers")
    inter = getattr(config, "intermediate_size", 4 * d_model)
    heads, kv = config.num_attention_heads, getattr(config, "num_key_value_heads", config.num_attention_heads)
    hd = getattr(config, "head_dim", None) or d_model // heads
    block = d_model * hd * (2 * heads + 2 * kv) + 3 * d_model * inter
    per_token_upper = 2 * ((from_top + 1) * block + d_model * V)
    per_token_full = 2 * (layers * block + d_model * V)
    tokens = context - 1
    flops = models * (windows * context * per_token_full
                      + 3 * chains * draws * batch_size * tokens * per_token_upper)
    weights = 4 * (layers * block + V * d_model)
    peak = weights + 4 * windows * tokens * d_model + 4 * 3 * batch_size * tokens * V + 4 * 10 * part_d
    return float(peak), float(flops)


__all__ = ["CORPUS", "PARTS", "PartEstimate", "REAL_MODELS", "RealModelError", "RestrictedProblem", "TrainedVsTwin", "UpperStack",
           "block_index", "blocks_of", "cached_entry_states", "check_part", "check_real_model", "difference",
           "entry_states", "gradient_norm", "load_real_model", "model_shape", "part_llc", "part_parameters", "part_size",
           "real_model_cost", "restrict", "SHAPES", "shape_part_size", "restricted_loss", "restricted_problem", "text_windows",
           "trained_vs_twin", "undecided_reason"]
