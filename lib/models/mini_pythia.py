"""A miniature Pythia suite: small GPT-NeoX language models trained with saved checkpoints.

The Pythia suite (Biderman et al. 2023) trains one GPT-NeoX architecture at several sizes
on the same data in the same order, and publishes checkpoints at log-spaced steps
(0, 1, 2, 4, ..., 512, then every 1000), so that how a model's structure develops in
training can be studied across scale. This module does the same at miniature scale:

* :data:`SIZES` / :func:`mini_pythia_config` - GPT-NeoX configs with Pythia's conventions;
* :func:`log_spaced_steps` - the checkpoint schedule;
* :func:`train_suite` - trains every size on one token stream, with the same batches in
  the same order for every size, saving ``save_pretrained`` checkpoints and a
  crash-safe resume state into the book's cache (:mod:`lib.book.cache`);
* :class:`Suite` - the result: histories, checkpoint directories, and
  :meth:`Suite.load` returning a :class:`lib.models.causal_lm.CausalLM`.

The training loop is deliberately short and direct (in the spirit of nanoGPT).
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..book import cache
from ..book.device import default_dtype, describe_device, resolve_device, seed_everything, torch_threads
from ..book.parameters import integer_at_least
from ..book.progress import progress as progress_bar
from . import causal_lm
from .causal_lm import CausalLM

# name -> (layers, hidden size, attention heads)
SIZES: dict[str, dict[str, int]] = {
    "p-tiny": {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4},
    "p-small": {"num_hidden_layers": 4, "hidden_size": 128, "num_attention_heads": 4},
    "p-base": {"num_hidden_layers": 6, "hidden_size": 256, "num_attention_heads": 8},
    # Pythia-70m's shape; with the book's small vocabularies it has far fewer than 70M
    # parameters (Pythia-70m's 50k-token embeddings alone hold 51M).
    "p-70m": {"num_hidden_layers": 6, "hidden_size": 512, "num_attention_heads": 8},
}

WEIGHT_DECAY = 0.1
BETAS = (0.9, 0.95)        # Pythia's AdamW betas
GRAD_CLIP = 1.0            # Pythia's gradient clipping
MIN_LR_FRACTION = 0.1      # cosine decay to 10% of the peak learning rate, as in Pythia
HELDOUT_SEED = 0           # the held-out windows are the same for every size and seed
# torch's intra-op threads while a suite trains on a CPU, whatever the caller set. float32 sums split over
# threads round differently (the weights moved by up to 3e-4 between one and two threads), and one cached
# suite serves every chapter, so its weights must not depend on which chapter, with which threads, trained it
# first. The count is part of the cache key. One: the suite's models are small, and with two threads on a
# machine that runs two chapters at once (`run --jobs 2`) each step waited for a free core, 10x slower.
TRAIN_THREADS = 1


_positive_int = integer_at_least


def _check_size(size) -> str:
    if not isinstance(size, str) or size not in SIZES:
        raise ValueError(f"parameter 'size' must be one of {sorted(SIZES)}; got {size!r}")
    return size


def mini_pythia_config(size: str, vocab_size: int, context_length: int):
    """A ``transformers.GPTNeoXConfig`` for the preset ``size`` with Pythia's conventions.

    As in Pythia: rotary embeddings on 25% of each head's dimensions (``rotary_pct=0.25``,
    base 10000), parallel attention and MLP residual branches (``use_parallel_residual``),
    MLP width 4 x hidden, GeLU, LayerNorm eps 1e-5, biases, untied input and output
    embeddings, no dropout. ``max_position_embeddings`` is ``context_length``. Unlike
    Pythia, weights use transformers' plain N(0, 0.02) initialisation.
    """
    from transformers import GPTNeoXConfig

    shape = SIZES[_check_size(size)]
    vocab_size = _positive_int("vocab_size", vocab_size, 2)
    context_length = _positive_int("context_length", context_length, 1)
    return GPTNeoXConfig(
        vocab_size=vocab_size, max_position_embeddings=context_length,
        hidden_size=shape["hidden_size"], num_hidden_layers=shape["num_hidden_layers"],
        num_attention_heads=shape["num_attention_heads"], intermediate_size=4 * shape["hidden_size"],
        rotary_pct=0.25, rotary_emb_base=10000, use_parallel_residual=True, tie_word_embeddings=False,
        hidden_act="gelu", layer_norm_eps=1e-5, initializer_range=0.02,
        attention_dropout=0.0, hidden_dropout=0.0, bos_token_id=0, eos_token_id=0,
    )


def log_spaced_steps(total_steps: int, n_checkpoints: int) -> list[int]:
    """Checkpoint steps: 0, then log-spaced steps up to and including ``total_steps``.

    Returns ``min(n_checkpoints, total_steps + 1)`` unique sorted ints: step 0 (the
    initialisation), and ``n_checkpoints - 1`` steps spaced geometrically from 1 to
    ``total_steps`` - dense early, where training changes the model fastest, like Pythia's
    0, 1, 2, 4, ..., 512. Where rounding would repeat a step the next free one is used.

    >>> log_spaced_steps(1000, 6)
    [0, 1, 6, 32, 178, 1000]
    """
    total_steps = _positive_int("total_steps", total_steps, 1)
    n_checkpoints = _positive_int("n_checkpoints", n_checkpoints, 2)
    want = min(n_checkpoints - 1, total_steps)
    steps = [0]
    for x in np.geomspace(1, total_steps, want):
        steps.append(max(int(round(x)), steps[-1] + 1))
    steps[-1] = total_steps  # exact despite float round-off
    for i in range(len(steps) - 2, 0, -1):  # bumping can collide with the end: push back down
        steps[i] = min(steps[i], steps[i + 1] - 1)
    return steps


def _hash_tokens(tokens: np.ndarray) -> str:
    digest = hashlib.sha256(str(tokens.dtype).encode() + str(tokens.shape).encode())
    digest.update(np.ascontiguousarray(tokens).tobytes())
    return digest.hexdigest()


def _check_tokens(name: str, tokens, vocab_size: int, context_length: int) -> np.ndarray:
    if not isinstance(tokens, np.ndarray):
        raise ValueError(f"parameter '{name}' must be a 1-D NumPy integer array; got {type(tokens).__name__}")
    if tokens.ndim != 1 or not np.issubdtype(tokens.dtype, np.integer):
        raise ValueError(f"parameter '{name}' must be a 1-D integer array; got shape {tokens.shape}, dtype {tokens.dtype}")
    if len(tokens) < context_length + 1:
        raise ValueError(f"parameter '{name}' needs at least context_length + 1 = {context_length + 1} tokens "
                         f"for one training window; got {len(tokens)}")
    low, high = int(tokens.min()), int(tokens.max())
    if low < 0:
        raise ValueError(f"parameter '{name}' holds a negative token id ({low}); token ids must be >= 0")
    if high >= vocab_size:
        raise ValueError(f"parameter '{name}' holds token id {high} but vocab_size is {vocab_size} "
                         f"(ids must be < vocab_size)")
    return tokens


def get_batch(tokens: np.ndarray, step: int, *, seed: int, batch_size: int, context_length: int) -> torch.Tensor:
    """The training batch of ``step``: ``batch_size`` random windows of ``context_length + 1`` tokens.

    A pure function of (seed, step) - the same for every model size, and the same after a
    resume.
    """
    starts = np.random.default_rng([seed, step]).integers(0, len(tokens) - context_length, size=batch_size)
    return torch.from_numpy(tokens[starts[:, None] + np.arange(context_length + 1)].astype(np.int64))


def lr_factor(i: int, *, steps: int, warmup_steps: int) -> float:
    """Multiplier of the peak learning rate for update ``i + 1`` (i updates done so far).

    Linear warm-up over ``warmup_steps`` updates, then cosine decay to 10% at the end.
    """
    if i < warmup_steps:
        return (i + 1) / (warmup_steps + 1)
    progress = min((i - warmup_steps) / max(steps - warmup_steps, 1), 1.0)
    return MIN_LR_FRACTION + (1 - MIN_LR_FRACTION) * 0.5 * (1 + math.cos(math.pi * progress))


class _Interrupted(RuntimeError):
    """Raised by the private ``_stop_after`` option to simulate a crash (tests)."""


def _atomic_json(path: Path, obj) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1))
    os.replace(tmp, path)


def _train_one(workdir: Path, *, size: str, train_tokens: np.ndarray, heldout_tokens: np.ndarray,
               vocab_size: int, context_length: int, steps: int, batch_size: int, lr: float,
               warmup_steps: int, seed: int, device: torch.device, checkpoint_steps: list[int],
               eval_batches: int, progress: bool, stop_after: int | None, resume_every_s: float) -> None:
    """Train one size into ``workdir`` (the cache's partial directory), resuming if it can."""
    from transformers import GPTNeoXForCausalLM

    workdir = Path(workdir)
    history_path, resume_path = workdir / "history.json", workdir / "resume.pt"
    if history_path.exists() and json.loads(history_path.read_text()).get("complete"):
        resume_path.unlink(missing_ok=True)  # finished before a crash between cleanup and the cache's commit
        return

    config = mini_pythia_config(size, vocab_size, context_length)
    seed_everything(seed, deterministic=device.type == "cuda")  # CPU kernels are deterministic as they are
    model = GPTNeoXForCausalLM(config).to(device)
    decay = [p for p in model.parameters() if p.ndim >= 2]       # matrices (incl. embeddings)
    no_decay = [p for p in model.parameters() if p.ndim < 2]     # biases, LayerNorm gains
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=BETAS, eps=1e-8)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda i: lr_factor(i, steps=steps, warmup_steps=warmup_steps))
    amp_dtype = default_dtype(device)
    autocast = (torch.autocast(device.type, dtype=amp_dtype) if amp_dtype != torch.float32 else nullcontext())
    evaluator = CausalLM(model, device)
    n_windows = eval_batches * batch_size

    if resume_path.exists():
        state = torch.load(resume_path, map_location=device, weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["torch_rng"].cpu())
        history, start = state["history"], state["step"]
        for stale in (workdir / "checkpoints").glob("step-*"):   # written after the resume state
            if int(stale.name.split("-")[1]) > start:
                shutil.rmtree(stale)
    else:
        history = {"size": size, "n_params": evaluator.n_params, "device": describe_device(device),
                   "train_dtype": str(amp_dtype).replace("torch.", ""),
                   "step": [], "train_loss": [], "checkpoint_step": [], "heldout_loss": [],
                   "checkpoint_wall_s": [], "complete": False}
        start = None  # step 0 still to be checkpointed

    last_save = [time.perf_counter()]

    def save_resume_state(step: int) -> None:
        """Everything a resumed run needs to continue after ``step`` exactly as an uninterrupted one."""
        tmp = resume_path.with_name("resume.pt.tmp")
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(), "torch_rng": torch.get_rng_state(),
                    "history": history, "step": step}, tmp)
        os.replace(tmp, resume_path)
        last_save[0] = time.perf_counter()

    def checkpoint(step: int, wall: float) -> None:
        model.eval()
        history["checkpoint_step"].append(step)
        history["heldout_loss"].append(evaluator.heldout_loss(heldout_tokens, context_length, n_windows, HELDOUT_SEED))
        history["checkpoint_wall_s"].append(wall)
        model.train()
        with causal_lm.quiet_transformers():
            model.save_pretrained(workdir / "checkpoints" / f"step-{step:06d}")
        _atomic_json(history_path, history)
        save_resume_state(step)

    wall0 = time.perf_counter() - (history["checkpoint_wall_s"][-1] if history["checkpoint_wall_s"] else 0.0)
    if start is None:
        checkpoint(0, 0.0)
        start = 0
    model.train()
    todo = set(checkpoint_steps)
    bar = progress_bar(range(start + 1, steps + 1), desc=f"train {size}", initial=start, total=steps,
                       disable=not progress)
    for step in bar:
        batch = get_batch(train_tokens, step, seed=seed, batch_size=batch_size,
                          context_length=context_length).to(device)
        with autocast:
            logits = model(input_ids=batch[:, :-1], use_cache=False).logits
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                                                 batch[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        optimizer.step()
        scheduler.step()
        history["step"].append(step)
        history["train_loss"].append(loss.item())
        if progress:
            bar.set_postfix(loss=f"{history['train_loss'][-1]:.3f}", refresh=False)
        if step in todo:
            checkpoint(step, time.perf_counter() - wall0)
        elif time.perf_counter() - last_save[0] >= resume_every_s:  # an interrupt loses at most this much
            save_resume_state(step)
        if stop_after is not None and step >= stop_after:
            bar.close()
            raise _Interrupted(f"training of {size} stopped after step {step} (simulated interruption)")
    bar.close()
    history["wall_s"] = history["checkpoint_wall_s"][-1]
    history["steps_per_s"] = steps / max(history["wall_s"], 1e-9)
    history["complete"] = True
    _atomic_json(history_path, history)
    resume_path.unlink()  # the entry keeps the checkpoints, not the optimizer state


@dataclass
class Suite:
    """A trained mini suite: every size, checkpoints at ``checkpoint_steps``.

    ``history[size]`` holds ``step``/``train_loss`` (every update),
    ``checkpoint_step``/``heldout_loss`` (held-out loss in nats at each checkpoint,
    step 0 = initialisation), ``n_params``, wall times; ``directory[size]`` is the cache
    entry with ``checkpoints/step-XXXXXX/`` directories loadable by
    ``CausalLM.from_pretrained``.
    """

    sizes: list[str]
    checkpoint_steps: list[int]
    history: dict[str, dict] = field(default_factory=dict)
    directory: dict[str, Path] = field(default_factory=dict)

    def checkpoint_dir(self, size: str, step: int | None = None) -> Path:
        """The ``save_pretrained`` directory of ``size`` at ``step`` (None = the final one)."""
        if size not in self.directory:
            raise ValueError(f"parameter 'size' must be one of this suite's sizes {self.sizes}; got {size!r}")
        step = self.checkpoint_steps[-1] if step is None else step
        if step not in self.checkpoint_steps:
            raise ValueError(f"parameter 'step' must be one of the checkpoint steps {self.checkpoint_steps} "
                             f"(or None for the final one); got {step!r}")
        return self.directory[size] / "checkpoints" / f"step-{step:06d}"

    def load(self, size: str, step: int | None = None, device="auto") -> CausalLM:
        """The model ``size`` at checkpoint ``step`` (None = final) as a :class:`lib.models.causal_lm.CausalLM`."""
        return CausalLM.from_pretrained(self.checkpoint_dir(size, step), device=device)

    def final_heldout_loss(self, size: str) -> float:
        """Held-out loss (nats per token) of ``size`` at the end of training."""
        if size not in self.history:
            raise ValueError(f"parameter 'size' must be one of this suite's sizes {self.sizes}; got {size!r}")
        return float(self.history[size]["heldout_loss"][-1])


def train_suite(train_tokens: np.ndarray, heldout_tokens: np.ndarray, *, sizes, vocab_size: int,
                context_length: int, steps: int, batch_size: int = 32, lr: float = 1e-3,
                warmup_steps: int = 10, seed: int = 0, device="auto", n_checkpoints: int = 8,
                eval_batches: int = 4, progress: bool = True, resume_every_s: float = 30.0,
                _stop_after: int | None = None) -> Suite:
    """Train a mini Pythia suite on one token stream, or load it from the cache.

    ``train_tokens``/``heldout_tokens``: 1-D integer arrays, each a concatenated token
    stream. Every size sees the same batches in the same order: the batch of step s is
    ``batch_size`` windows of ``context_length + 1`` tokens at starts drawn from
    ``np.random.default_rng([seed, s])``; model initialisation uses ``torch.manual_seed(seed)``.

    Optimisation (Pythia's recipe, small): AdamW, betas (0.9, 0.95), weight decay 0.1 on
    weight matrices (embeddings included) and none on biases and LayerNorm gains,
    gradient clipping at 1.0, linear warm-up over ``warmup_steps`` then cosine decay to
    10% of ``lr``. On CUDA the forward pass runs under bf16 autocast (float32 master
    weights); on the CPU everything is float32, and two runs with the same seed give
    bit-identical weights and losses.

    Each size is one cache entry ``mini-pythia/`` keyed by the hash of both token arrays,
    every hyperparameter, the training dtype and the library versions. In it:
    ``checkpoints/step-XXXXXX/`` (``save_pretrained``, safetensors) at every step of
    :func:`log_spaced_steps` (step 0 included) and ``history.json``. While training, a
    resume state ``resume.pt`` (model, optimizer, scheduler, random state, step) is rewritten
    atomically at every checkpoint and at least every ``resume_every_s`` seconds of training,
    so an interrupt loses at most that much; a crashed run resumes from it on the next call and
    ends with the same weights and history as an uninterrupted one. The held-out loss at each
    checkpoint is :meth:`lib.models.causal_lm.CausalLM.heldout_loss` on ``eval_batches * batch_size``
    fixed windows.

    Everything is validated, and the memory of the largest size is estimated
    (:func:`lib.models.causal_lm.estimate_training_bytes`), before any training starts.
    """
    import transformers

    # ---- validate everything first
    if isinstance(sizes, str):
        sizes = [sizes]
    sizes = list(sizes)
    if not sizes:
        raise ValueError(f"parameter 'sizes' must name at least one of {sorted(SIZES)}")
    for size in sizes:
        if not isinstance(size, str) or size not in SIZES:
            raise ValueError(f"parameter 'sizes' must hold names among {sorted(SIZES)}; got {size!r}")
    if len(set(sizes)) != len(sizes):
        raise ValueError(f"parameter 'sizes' must not repeat a size; got {sizes}")
    vocab_size = _positive_int("vocab_size", vocab_size, 2)
    context_length = _positive_int("context_length", context_length, 1)
    steps = _positive_int("steps", steps, 1)
    batch_size = _positive_int("batch_size", batch_size, 1)
    warmup_steps = _positive_int("warmup_steps", warmup_steps, 0)
    if warmup_steps > steps:
        raise ValueError(f"parameter 'warmup_steps' must be <= steps ({steps}); got {warmup_steps}")
    seed = _positive_int("seed", seed, 0)
    n_checkpoints = _positive_int("n_checkpoints", n_checkpoints, 2)
    eval_batches = _positive_int("eval_batches", eval_batches, 1)
    if isinstance(resume_every_s, bool) or not isinstance(resume_every_s, (int, float)) or not resume_every_s >= 0:
        raise ValueError(f"parameter 'resume_every_s' must be a number of seconds >= 0; got {resume_every_s!r}")
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr <= 0:
        raise ValueError(f"parameter 'lr' must be a positive finite number; got {lr!r}")
    lr = float(lr)
    train_tokens = _check_tokens("train_tokens", train_tokens, vocab_size, context_length)
    heldout_tokens = _check_tokens("heldout_tokens", heldout_tokens, vocab_size, context_length)
    device = resolve_device(device)
    amp_dtype = default_dtype(device)
    act_bytes = torch.empty((), dtype=amp_dtype).element_size()
    for size in sizes:
        need = causal_lm.estimate_training_bytes(mini_pythia_config(size, vocab_size, context_length), batch_size,
                                          context_length, act_bytes)
        causal_lm.check_fits_in_memory(need, device, f"training {size} with batch_size={batch_size}, "
                                f"context_length={context_length}, vocab_size={vocab_size}",
                                hint="lower batch_size or context_length, or train a smaller size")

    checkpoint_steps = log_spaced_steps(steps, n_checkpoints)
    threads = TRAIN_THREADS if device.type == "cpu" else None
    data = {"train_tokens": _hash_tokens(train_tokens), "heldout_tokens": _hash_tokens(heldout_tokens)}
    suite = Suite(sizes=sizes, checkpoint_steps=checkpoint_steps)
    for size in sizes:
        params = {"size": size, **data, "vocab_size": vocab_size, "context_length": context_length,
                  "steps": steps, "batch_size": batch_size, "lr": lr, "warmup_steps": warmup_steps,
                  "seed": seed, "n_checkpoints": n_checkpoints, "eval_batches": eval_batches,
                  "train_dtype": str(amp_dtype), "torch": torch.__version__.split("+")[0],
                  "transformers": transformers.__version__, "cpu_threads": threads}

        def compute(workdir, size=size):
            with torch_threads(threads) if threads else nullcontext():
                _train_one(workdir, size=size, train_tokens=train_tokens, heldout_tokens=heldout_tokens,
                           vocab_size=vocab_size, context_length=context_length, steps=steps,
                           batch_size=batch_size, lr=lr, warmup_steps=warmup_steps, seed=seed, device=device,
                           checkpoint_steps=checkpoint_steps, eval_batches=eval_batches, progress=progress,
                           stop_after=_stop_after, resume_every_s=resume_every_s)

        directory = cache.cached("mini-pythia", params, compute, fmt="dir", sources=[sys.modules[__name__], causal_lm])
        suite.directory[size] = Path(directory)
        suite.history[size] = json.loads((Path(directory) / "history.json").read_text())
    return suite


__all__ = ["SIZES", "Suite", "get_batch", "log_spaced_steps", "lr_factor", "mini_pythia_config", "train_suite"]
