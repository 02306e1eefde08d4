"""Models p(y|x, w) on the finite support Σ^k × Σ^l of an exact language, and their training.

The chapters "Insensitivity" and "LLC theorems" study parametric models of the conditional
q(y|x) of one exact language (Chen & Murfet §6–7). Because histories x ∈ Σ^k
and continuations y ∈ Σ^l are finite, every population quantity is an exact sum:

    L(w) = −Σ_x q(x) Σ_y q(y|x) log p(y|x, w)                      (Chen & Murfet §2.3)

* :class:`Support` - one language at one (k, l): the joint q(xy), its modes
  (:class:`lib.modes.Modes`, histories with q(x) = 0 dropped), the tokens of every history,
  and exact sampling of training pairs.
* A *conditional model* is a ``torch.nn.Module`` mapping a batch of history indices (B,) -
  rows of the joint the :class:`~lib.modes.Modes` was built from - to log-probabilities over
  the continuations (B, |Σ^l|). Two kinds:
  :class:`FactoredModel` (embedding → MLP → logits; its hidden width bounds the rank of its
  centred logit matrix, hence how many modes it can hold) and :class:`TransformerModel` (a
  GPT-NeoX from the book's model code reading the k history tokens; l = 1).
* :func:`history_nll` - the per-history loss of a conditional model: one evaluation per distinct
  history, every continuation weighted (the loss of the chapter "LLC theorems"' chains).
* :func:`train` - full-batch Adam on the empirical loss of n pairs sampled from q, checkpoints at log-spaced steps and the
  model's whole conditional p(·|·, w_t) at every evaluation step, cached by
  :mod:`lib.book.cache` under a hash of everything that produced it.
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from .book import cache
from .book.device import resolve_device, torch_threads
from .book.parameters import integer_at_least
from .book.progress import progress as progress_bar
from .languages import Language, decode, is_language, mode_ladder
from .models.causal_lm import quiet_transformers
from .modes import Modes

KINDS = ("tabular", "factored", "transformer")
TRANSFORMER_HEADS = 4  # attention heads of the GPT-NeoX models (the hidden size is a multiple of it)


class SupportError(ValueError):
    """A model, a language or a request that does not fit the finite support Σ^k × Σ^l."""


# ---------------------------------------------------------------------------
# The finite support of one language
# ---------------------------------------------------------------------------

@dataclass
class Support:
    """A language on Σ^k × Σ^l with its modes.

    ``joint`` is the full (|Σ|^k, |Σ|^l) array q(xy); ``modes = Modes.from_joint(joint)`` keeps
    the histories with q(x) > 0 (``modes.rows``); ``history_tokens[i]`` are the k tokens of
    joint row i. ``language_error`` is the largest violation of Def 3.2 up to length k + l."""

    language: Language
    k: int
    l: int
    joint: np.ndarray
    modes: Modes
    history_tokens: np.ndarray
    language_error: float
    name: str = ""

    @classmethod
    def of(cls, language: Language, k: int, l: int, name: str = "", tol: float = 1e-10) -> "Support":
        """The support of ``language`` at (k, l); refuses a family that fails the language condition."""
        check = is_language(language, k + l, tol=tol)
        if not check.ok:
            raise SupportError(f"{name or language.describe()} fails the language condition (Def 3.2): "
                               f"summing A_(n+1) over its last position misses A_n by {check.max_violation:.2e} > {tol:g}")
        joint = np.asarray(language.joint(k, l, sparse=False), dtype=np.float64)
        modes = Modes.from_joint(joint, zero_rows="drop")
        tokens = decode(np.arange(joint.shape[0]), language.alphabet_size, k)
        return cls(language, k, l, joint, modes, np.atleast_2d(tokens).reshape(joint.shape[0], k),
                   check.max_violation, name or language.describe())

    @property
    def alphabet_size(self) -> int:
        return self.language.alphabet_size

    @property
    def n_rows(self) -> int:
        """|Σ^k|: rows of the joint (a model takes indices in [0, n_rows))."""
        return self.joint.shape[0]

    @property
    def n_cols(self) -> int:
        """|Σ^l|: the continuations a model scores."""
        return self.joint.shape[1]

    def full_conditional(self, conditional=None) -> np.ndarray:
        """A conditional over the kept histories (default q(y|x)) as a (|Σ^k|, |Σ^l|) array over
        all joint rows (rows with q(x) = 0 are zero)."""
        cond = self.modes.conditional if conditional is None else conditional
        cond = cond.toarray() if hasattr(cond, "toarray") else np.asarray(cond, dtype=np.float64)
        if cond.shape != self.modes.shape:
            raise SupportError(f"a conditional over the kept histories has shape {self.modes.shape}; got {cond.shape}")
        out = np.zeros((self.n_rows, self.n_cols))
        out[self.modes.rows] = cond
        return out

    def _uniforms(self, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """Histories x_i ~ q(x) (joint rows) and one uniform u_i per pair, from ``seed``."""
        rng = np.random.default_rng(seed)
        q_x = self.joint.sum(axis=1)
        rows = rng.choice(self.n_rows, size=int(n), p=q_x / q_x.sum())
        return rows, rng.random(int(n))

    def _inverse_cdf(self, rows: np.ndarray, u: np.ndarray, full_cond: np.ndarray) -> np.ndarray:
        cdf = np.cumsum(full_cond[rows], axis=1)
        cdf /= cdf[:, -1:]
        return np.minimum((u[:, None] >= cdf).sum(axis=1), self.n_cols - 1)

    def sample(self, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """n i.i.d. pairs (row of x, column of y) ~ q(xy): x from q(x), then y = F⁻¹(u | x) by the
        inverse conditional CDF of a uniform u (so :meth:`coupled_sample` can reuse the u)."""
        rows, u = self._uniforms(n, seed)
        return rows, self._inverse_cdf(rows, u, self.full_conditional())

    def coupled_sample(self, n: int, seed: int, conditional) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The pairs of :meth:`sample` (same ``seed``: the same x_i, y_i) and, with common random
        numbers, y'_i = F⁻¹(u_i | x_i) under another conditional over the kept histories (e.g.
        q^(χ)): (rows, y, y'). The x-marginal is q's for both, and y'_i = y_i wherever the two
        CDFs agree on u_i, so P(y ≠ y') is small when the conditionals are close."""
        rows, u = self._uniforms(n, seed)
        return (rows, self._inverse_cdf(rows, u, self.full_conditional()),
                self._inverse_cdf(rows, u, self.full_conditional(conditional)))

    def describe(self) -> str:
        return (f"{self.name}: |Σ| = {self.alphabet_size}, k = {self.k}, l = {self.l}, "
                f"{self.modes.shape[0]} histories with q(x) > 0, rank {self.modes.rank}")


def ladder_support(*, history_length: int, ladder_bigrams: int, ladder_top: float, ladder_ratio: float,
                   background_size: int, seed: int) -> Support:
    """The mode ladder (:func:`lib.languages.mode_ladder`, background drawn from ``seed``) on
    Σ^k × Σ with k = ``history_length``: the setting of the chapters "Insensitivity" and "LLC
    theorems" (their parameters by name)."""
    try:
        lang = mode_ladder(k=history_length, n_bigrams=ladder_bigrams, top=ladder_top, ratio=ladder_ratio,
                           background=background_size, rng=seed)
    except ValueError as err:
        raise SupportError(f"parameters 'ladder_top', 'ladder_ratio', 'ladder_bigrams', 'history_length' do not "
                           f"give a mode ladder: {err}") from None
    return Support.of(lang, history_length, 1, name="mode ladder")


# ---------------------------------------------------------------------------
# Conditional models
# ---------------------------------------------------------------------------

class TabularModel(nn.Module):
    """p(·|x, θ) = softmax(θ[x, ·]): one free logit per (x, y), the fully expressive model.

    Its Jacobian is known by hand: ∂ log p(y|x) / ∂θ[x', y'] = 1[x = x'] (1[y = y'] − p(y'|x))."""

    def __init__(self, n_rows: int, n_cols: int):
        super().__init__()
        self.n_rows, self.n_cols = int(n_rows), int(n_cols)
        self.theta = nn.Parameter(0.1 * torch.randn(self.n_rows, self.n_cols))

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(self.theta[rows], dim=-1)


class FactoredModel(nn.Module):
    """p(·|x, w) = softmax(W₂ tanh(W₁ E[x] + b₁) + b₂): embedding → one-hidden-layer MLP → logits.

    The centred logit matrix (histories × continuations) is W₂ H with H = tanh(·) of shape
    (hidden, histories), so its rank is at most ``hidden``: a model with hidden < the number
    of planted bigrams cannot hold every bigram's mode (the capacity argument of §6.1)."""

    def __init__(self, n_rows: int, n_cols: int, embed_dim: int = 16, hidden: int = 16):
        super().__init__()
        self.n_rows, self.n_cols = int(n_rows), int(n_cols)
        self.embed = nn.Embedding(self.n_rows, embed_dim)
        self.hidden = nn.Linear(embed_dim, hidden)
        self.out = nn.Linear(hidden, self.n_cols)

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(self.out(torch.tanh(self.hidden(self.embed(rows)))), dim=-1)


def _eager_attention_in_dtype(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """GPT-NeoX's eager attention (plain ops, which ``torch.func`` can batch) with the softmax in the
    query's dtype: transformers' own computes it in float32, which caps a float64 model's attention
    weights at float32 precision (harmless at k = 1, where a history has one position and the weight
    is exactly 1; at k = 2 the Jacobian and autograd paths then disagree by ~1e-8)."""
    weights = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        weights = weights + attention_mask
    weights = nn.functional.dropout(torch.softmax(weights, dim=-1), p=dropout, training=module.training)
    return torch.matmul(weights, value).transpose(1, 2).contiguous(), weights


def _native_dtype_attention() -> str:
    """The name under which :func:`_eager_attention_in_dtype` is registered with transformers."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, eager_mask

    AttentionInterface.register("eager_native_dtype", _eager_attention_in_dtype)
    ALL_MASK_ATTENTION_FUNCTIONS.register("eager_native_dtype", eager_mask)   # the causal mask, as for "eager"
    return "eager_native_dtype"


class TransformerModel(nn.Module):
    """A GPT-NeoX (the book's mini-Pythia conventions) reading the k tokens of history x and
    returning log p(y|x, w) for the next token y (l = 1) at the last position.

    ``history_tokens`` (|Σ^k|, k) maps a joint row to its tokens; it is a buffer, not a
    parameter. Attention runs in the eager implementation, which ``torch.func`` can batch, with its
    softmax in the model's dtype (:func:`_eager_attention_in_dtype`)."""

    def __init__(self, history_tokens, vocab_size: int, hidden: int = 32, layers: int = 2, heads: int = TRANSFORMER_HEADS):
        super().__init__()
        from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

        tokens = torch.as_tensor(np.asarray(history_tokens), dtype=torch.long)
        self.register_buffer("history_tokens", tokens, persistent=False)
        self.n_rows, self.n_cols = tokens.shape[0], int(vocab_size)
        config = GPTNeoXConfig(
            vocab_size=self.n_cols, max_position_embeddings=max(tokens.shape[1], 2), hidden_size=hidden,
            num_hidden_layers=layers, num_attention_heads=heads, intermediate_size=4 * hidden, rotary_pct=0.25,
            use_parallel_residual=True, tie_word_embeddings=False, hidden_act="gelu", layer_norm_eps=1e-5,
            attention_dropout=0.0, hidden_dropout=0.0, bos_token_id=0, eos_token_id=0,
            attn_implementation=_native_dtype_attention())
        with quiet_transformers():
            self.lm = GPTNeoXForCausalLM(config)

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        logits = self.lm(input_ids=self.history_tokens[rows], use_cache=False).logits[:, -1, :]
        return torch.log_softmax(logits, dim=-1)


def _positive(name: str, value, minimum: int = 1) -> int:
    return integer_at_least(name, value, minimum, SupportError)


def check_spec(spec: dict, support: Support) -> dict:
    """A model spec {"kind": "tabular"}, {"kind": "factored", "embed_dim", "hidden"} or
    {"kind": "transformer", "hidden", "layers", "heads"}, validated against the support; returns it with defaults filled."""
    if not isinstance(spec, dict) or spec.get("kind") not in KINDS:
        raise SupportError(f"a model spec is a mapping with 'kind' in {KINDS}; got {spec!r}")
    if spec["kind"] == "tabular":
        out, names = {**spec}, ()
    elif spec["kind"] == "factored":
        out = {"kind": "factored", "embed_dim": 16, "hidden": 16, **spec}
        names = ("embed_dim", "hidden")
    else:
        if support.l != 1:
            raise SupportError(f"the transformer model predicts one next token (l = 1); the support has l = {support.l}")
        out = {"kind": "transformer", "hidden": 32, "layers": 2, "heads": TRANSFORMER_HEADS, **spec}
        names = ("hidden", "layers", "heads")
        if _positive("hidden", out["hidden"]) % _positive("heads", out["heads"]):
            raise SupportError(f"transformer 'hidden' ({out['hidden']}) must be a multiple of 'heads' ({out['heads']})")
    extra = set(out) - {"kind", *names}
    if extra:
        raise SupportError(f"unknown keys {sorted(extra)} in the {out['kind']} spec; allowed: {list(names)}")
    for name in names:
        _positive(name, out[name])
    return out


def build(spec: dict, support: Support, seed: int) -> nn.Module:
    """The model of ``spec`` on ``support``, initialised from ``seed`` (float32)."""
    spec = check_spec(spec, support)
    torch.manual_seed(seed)
    if spec["kind"] == "tabular":
        return TabularModel(support.n_rows, support.n_cols)
    if spec["kind"] == "factored":
        return FactoredModel(support.n_rows, support.n_cols, spec["embed_dim"], spec["hidden"])
    return TransformerModel(support.history_tokens, support.alphabet_size, spec["hidden"], spec["layers"], spec["heads"])


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def history_nll(model: nn.Module, batch) -> torch.Tensor:
    """Per-history losses −Σ_y W[h, y] log p(y|x_h, w) for ``batch`` = (rows (H,), W (H, |Σ^l|)), W a
    target's per-history weights (:func:`lib.llc_theorems.history_data`); their mean over h is the empirical
    loss L_n of W's target: the conditional model is evaluated once per distinct history."""
    rows, W = batch
    logp = model(rows)
    return -(W.to(logp.dtype) * logp).sum(-1)


# ---------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------

def log_spaced(total: int, count: int) -> list[int]:
    """0, then ``count − 1`` steps spaced geometrically up to ``total`` (unique, sorted)."""
    steps = {0, total} | {int(round(s)) for s in np.geomspace(1, total, max(count - 1, 1))}
    return sorted(s for s in steps if 0 <= s <= total)


@dataclass
class Training:
    """The result of :func:`train`.

    ``checkpoints`` maps a step to a state dict (float32 tensors); ``eval_steps`` (about
    ``n_evals``, half evenly and half log-spaced, plus the checkpoints) are the steps at which ``conditionals[i]`` = p(·|·, w_t) over all joint rows (|Σ^k|, |Σ^l|) and
    ``population_loss[i]`` = L(w_t) (exact) were taken; ``train_loss`` the empirical loss on the
    n samples at the same steps."""

    spec: dict
    settings: dict
    checkpoints: dict[int, dict]
    eval_steps: np.ndarray
    conditionals: np.ndarray
    population_loss: np.ndarray
    train_loss: np.ndarray
    seconds: float
    n_params: int = 0
    extra: dict = field(default_factory=dict)

    @property
    def final_step(self) -> int:
        return max(self.checkpoints)

    def model(self, support: Support, step: int | None = None, dtype=torch.float64) -> nn.Module:
        """The model at checkpoint ``step`` (default: the last), in ``dtype``, in eval mode."""
        step = self.final_step if step is None else step
        if step not in self.checkpoints:
            raise KeyError(f"no checkpoint at step {step}; checkpoints: {sorted(self.checkpoints)}")
        m = build(self.spec, support, seed=0)
        m.load_state_dict(self.checkpoints[step])
        return m.to(dtype).eval()


def exact_loss(logp: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """−Σ_{xy} weights[x, y] log p(y|x): the population loss for weights q(xy) (Chen & Murfet §2.3)."""
    return -(weights * logp).sum()


def _train(support: Support, spec: dict, n: int, steps: int, lr: float, seed: int,
           n_checkpoints: int, n_evals: int, progress: bool, device: torch.device) -> Training:
    import time

    t0 = time.perf_counter()
    model = build(spec, support, seed).to(device)
    xs, ys = support.sample(n, seed)
    counts = np.zeros(support.joint.shape)
    np.add.at(counts, (xs, ys), 1.0)
    seen = np.flatnonzero(counts.sum(axis=1))                       # histories in the sample
    seen_t = torch.as_tensor(seen, device=device)
    empirical = torch.as_tensor(counts[seen] / n, dtype=torch.float32, device=device)
    all_rows = torch.arange(support.n_rows, device=device)
    weights = torch.as_tensor(support.joint, dtype=torch.float32, device=device)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    ckpt_steps = set(log_spaced(steps, n_checkpoints))
    half = max(n_evals // 2, 2)                 # evaluations: half evenly spaced, half log-spaced (early detail)
    eval_steps = sorted(set(np.linspace(0, steps, half).round().astype(int).tolist())
                        | set(np.geomspace(1, steps, half).round().astype(int).tolist()) | ckpt_steps)
    checkpoints, conds, pop, emp = {}, [], [], []
    for step in progress_bar(range(steps + 1), desc=f"train {spec['kind']}", disable=not progress):
        if step in ckpt_steps:
            checkpoints[step] = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
        if step in eval_steps:
            with torch.no_grad():
                logp = model(all_rows)
                conds.append(logp.exp().cpu().numpy().astype(np.float64))
                pop.append(float(exact_loss(logp, weights)))
                emp.append(float(exact_loss(logp[seen_t], empirical)))
        if step < steps:
            loss = exact_loss(model(seen_t), empirical)               # L_n(w), full batch
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    settings = dict(n=n, steps=steps, lr=lr, seed=seed)
    return Training(spec, settings, checkpoints, np.array(eval_steps), np.stack(conds), np.array(pop),
                    np.array(emp), time.perf_counter() - t0, n_params(model))


def train(support: Support, spec: dict, *, n: int, steps: int, lr: float = 3e-3,
          seed: int = 0, n_checkpoints: int = 12, n_evals: int = 200, progress: bool = True,
          use_cache: bool = True, device="cpu") -> Training:
    """Train the model of ``spec`` on n pairs drawn from q for ``steps`` full-batch Adam steps on
    the empirical loss L_n(w) = −(1/n) Σ_i log p(y_i|x_i, w) (an exact sum over the distinct
    pairs in the sample); ``seed`` fixes the sample and the initialisation. ``device``: "cpu"
    (default: these models are small enough that a GPU's launch latency dominates), "auto",
    or a torch device; the result is on the CPU either way.

    Cached under a hash of the joint, the spec and every setting (and the source of this
    module and of :mod:`lib.languages`), so a chapter rerun reads it back."""
    spec = check_spec(spec, support)
    n, steps = _positive("n", n), _positive("steps", steps)
    n_checkpoints = _positive("n_checkpoints", n_checkpoints, 2)
    n_evals = _positive("n_evals", n_evals, 2)
    if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
        raise SupportError(f"parameter 'lr' must be a positive number; got {lr!r}")

    device = resolve_device(device)

    def compute():
        with torch_threads(1):        # a few thousand parameters: threads only add overhead
            return _train(support, spec, n, steps, float(lr), seed, n_checkpoints, n_evals, progress, device)

    if not use_cache:
        return compute()
    import hashlib

    params = dict(joint=hashlib.sha256(np.ascontiguousarray(support.joint).tobytes()).hexdigest(), k=support.k,
                  l=support.l, spec=spec, n=n, steps=steps, lr=float(lr), seed=seed,
                  n_checkpoints=n_checkpoints, n_evals=n_evals, torch=torch.__version__,
                  device=device.type)
    return cache.cached("conditional-model", params, compute, sources=[sys.modules[__name__]])


def transformer_hidden_problem(hidden_sizes) -> str | None:
    """Why a list of GPT-NeoX hidden sizes cannot be trained, in a sentence, or None: each must be a
    multiple of :data:`TRANSFORMER_HEADS`, the attention heads. Named by the Insensitivity chapter's
    declaration (``validate:``), so that a wrong size is refused before any work."""
    for i, h in enumerate(hidden_sizes):
        if h % TRANSFORMER_HEADS:
            return (f"item [{i}] = {h} is not a multiple of {TRANSFORMER_HEADS}, the attention heads "
                    f"(the hidden size is split evenly among them)")
    return None
