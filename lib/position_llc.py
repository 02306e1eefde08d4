"""Chen & Murfet §7.1: a causal language model as a sequence of models, one per position.

A causal LM with parameter w models p(y_t | y_<t, w) at every position t of a window, all
sharing w; the whole-window loss is the mean of the per-position losses L_t. Each position thus
has its own learning coefficient, and Theorem 7.4 applies position by position.
:func:`per_position_llc` estimates λ̂_t for chosen positions with one SGLD setting (the same
chains, minibatches and noise at every position), so that two positions' estimates differ only
through their losses.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from . import llc


@dataclass
class PerPositionLLC:
    """:func:`per_position_llc`: for each position t (``positions[i]``), ``llc[i]`` = λ̂_t,
    ``se[i]`` its standard error over chains, ``init_loss[i]`` = L_t(w*), and ``results[i]``
    the full :class:`lib.llc.LLCResult` (traces, per-chain λ̂, diagnostics: ESS, split R̂,
    MALA acceptance, divergent chains); ``settings`` the SGLD setting shared by every
    position; ``seconds`` the wall time of all positions."""

    positions: list
    llc: np.ndarray
    se: np.ndarray
    init_loss: np.ndarray
    results: list
    settings: dict
    seconds: float

    def diagnostics(self) -> list[dict]:
        """Per position: R̂, smallest ESS, mean MALA acceptance, number of divergent chains."""
        return [{"position": t, "rhat": float(r.diagnostics["rhat"]), "min_ess": float(np.min(r.diagnostics["ess"])),
                 "mala_acceptance": float(np.nanmean(r.diagnostics["mala_acceptance"])),
                 "divergent": len(r.diagnostics["divergent"])} for t, r in zip(self.positions, self.results)]

    def rows(self) -> list[dict]:
        """The table of the positions: λ̂_t ± s.e., L_t(w*) and the chains' mixing."""
        return [{"t": t, "λ̂_t": lam, "s.e.": se, "L_t(w*)": init, "R̂": d["rhat"], "min ESS": d["min_ess"],
                 "divergent": d["divergent"]}
                for t, lam, se, init, d in zip(self.positions, self.llc, self.se, self.init_loss, self.diagnostics())]

    def spread(self) -> dict:
        """The largest minus the smallest λ̂_t, paired over chains (the positions share chains,
        minibatches and noise): positions, mean difference, its standard error, chains."""
        lo, hi = int(np.argmin(self.llc)), int(np.argmax(self.llc))
        paired = self.results[hi].per_chain - self.results[lo].per_chain
        return {"high": self.positions[hi], "low": self.positions[lo], "difference": float(np.mean(paired)),
                "se": float(np.std(paired, ddof=1) / np.sqrt(len(paired))), "chains": len(paired)}


def _causal_logits(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """(B, T, V) logits of a causal LM: a ``transformers`` model (called with ``input_ids`` and
    no key/value cache) or any module mapping ids to logits (a tensor or an output with ``.logits``)."""
    config = getattr(model, "config", None)
    out = model(input_ids=ids, use_cache=False) if config is not None and hasattr(config, "vocab_size") else model(ids)
    return getattr(out, "logits", out)


def last_token_loss(model: nn.Module, batch) -> torch.Tensor:
    """Per-window −log p(ids[:, −1] | ids[:, :−1], w): the loss of the last token of each
    (truncated) window, shape (B,). With windows truncated to ids[:, :t+1] this is the
    per-position loss ℓ_t of :func:`per_position_llc`."""
    (ids,) = batch
    logits = _causal_logits(model, ids[:, :-1])[:, -1]
    return torch.nn.functional.cross_entropy(logits.float() if logits.dtype in (torch.float16, torch.bfloat16)
                                             else logits, ids[:, -1], reduction="none")


def _check_positions(positions, T: int) -> list[int]:
    msg = (f"parameter 'positions' must be a non-empty list of distinct integers t in [1, {T - 1}] "
           f"(the predicted token's index in windows of length T = {T}; t = 0 has no history); got {positions!r}")
    if isinstance(positions, (int, np.integer)) or not isinstance(positions, (list, tuple, np.ndarray, range)):
        raise llc.LLCInputError(msg)
    out = list(positions)
    if not out or len(set(out)) != len(out) or any(
            isinstance(t, bool) or not isinstance(t, (int, np.integer)) or not 1 <= t <= T - 1 for t in out):
        raise llc.LLCInputError(msg)
    return [int(t) for t in out]


def per_position_llc(model: nn.Module, data, positions, **sgld) -> PerPositionLLC:
    """The LLC of each position's model of a causal language model (Chen & Murfet §7.1).

    A causal LM with parameter w is a sequence of conditional models, one per position: for
    windows y = (y_0, …, y_{T−1}), position t ∈ [1, T−1] is the model p(y_t | y_<t, w) of the
    t-th token given the t tokens before it, all sharing w. Its empirical loss on the n windows
    of ``data`` (a (n, T) token tensor, or the 1-tuple ``(ids,)`` of :func:`lib.llc.estimate_llc`) is

        L_t(w) = −(1/n) Σ_i log p(y_t^(i) | y_<t^(i), w),

    and the whole-window loss of ``lib.models.causal_lm.sequence_loss`` is their mean over
    t = 1..T−1. For each t in ``positions`` this estimates λ̂_t = nβ (E[L_t] − L_t(w*)) with
    :func:`lib.llc.estimate_llc` at the model's parameters w*: the data of position t are the
    windows truncated to y_0..y_t (a causal model's prediction of y_t reads no later token) and
    the loss is :func:`last_token_loss`.

    ``sgld``: the keyword arguments of :func:`lib.llc.estimate_llc` (``gamma``, ``eps``,
    ``chains``, ``draws``, ``burn_in``, ``batch_size``, ``seed``; optional ``nbeta``, default
    n/log n with n the number of windows, ``device``, ``progress``, …), one setting for every
    position: the same n, nβ, γ, ε, chains, draws and seed, hence the same minibatch indices
    and the same injected noise at every position, so the positions differ only in their loss.
    ``positions`` is checked before any sampling (:class:`lib.llc.LLCInputError`). The estimates'
    quality warnings (:attr:`lib.llc.LLCResult.warnings`) go to the terminal that runs the book, not a
    page; each result holds them. A
    ``transformers`` model should use eager attention under ``vmap``
    (``model.set_attn_implementation("eager")``, as the chapter "Learning coefficients" does).
    """
    ids = data[0] if isinstance(data, (tuple, list)) and len(data) == 1 else data
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.dtype.is_floating_point or ids.shape[1] < 2:
        shape = tuple(ids.shape) if isinstance(ids, torch.Tensor) else type(ids).__name__
        raise llc.LLCInputError(f"parameter 'data' must be an integer token tensor of shape (n, T), T >= 2, or the "
                                f"tuple (ids,); got {shape}")
    positions = _check_positions(positions, ids.shape[1])
    if "loss_fn" in sgld or "data" in sgld:
        raise llc.LLCInputError("per_position_llc sets 'loss_fn' and 'data' itself; pass only SGLD settings")
    sgld = {"progress": False, "mala": True, **sgld}  # its table reports the MALA acceptance, minibatches or not
    t0 = time.perf_counter()
    with llc.warnings_to_terminal(llc.LLCWarning):  # each result holds its own (LLCResult.warnings)
        results = [llc.estimate_llc(model, last_token_loss, (ids[:, :t + 1].contiguous(),), **sgld) for t in positions]
    return PerPositionLLC(positions, np.array([r.llc for r in results]), np.array([r.se for r in results]),
                          np.array([r.init_loss for r in results]), results, dict(results[0].settings),
                          time.perf_counter() - t0)
