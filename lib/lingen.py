"""LinGen (Golowich, Liu & Shetty, Algorithm 1, §3.3) and the bound of their Lemma C.18 (App. C.4).

LinGen generates a continuation of a target history h_targ from other histories H alone: with
coefficients v solving L_M(h_targ, F) ≈ vᵀ L_M(H, F) over futures F (:func:`lingen_coefficients`),
each next token is sampled from softmax(Σ_h v_h L_M[· | h∘z]), the model's logits after the other
histories followed by what was generated so far (:func:`lingen`). Its baselines sample from a
short-context model or an earlier checkpoint (:func:`generate_baseline`, :func:`short_context`), and
Lemma C.18 bounds D_KL(P_truth ‖ P_LinGen) by quantities measured on the model
(:func:`lemma_c18_estimates`, :func:`lemma_c18_bound`). The matrices come from :mod:`lib.logits`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch

from .logits import (LogitsError, as_model, as_sequences, as_tensor, extended_logit_matrix, least_squares,
                     next_token_logprobs, vocab_size)


def lingen_coefficients(L_H, L_target, ridge: float = 0.0) -> np.ndarray:
    """v minimising ‖L(h_targ, F) − vᵀ L(H, F)‖² (+ ridge·‖v‖²): the regression of §3.3. ``L_target``
    one target's row, or a matrix with one row per target (then one row of v per target, from one
    factorisation of L_H: the paper's 50 targets cost one least-squares solve, not 50)."""
    A = np.asarray(L_H, dtype=np.float64)
    B = np.asarray(L_target, dtype=np.float64)
    rows = B.reshape(-1, B.shape[-1]) if B.ndim == 2 else B.reshape(1, -1)
    if A.shape[1] != rows.shape[1]:
        raise LogitsError(f"L_target has {rows.shape[1]} columns but L_H has {A.shape[1]}")
    if ridge > 0:
        v = torch.linalg.solve(as_tensor(A @ A.T + ridge * np.eye(A.shape[0])), as_tensor(A @ rows.T)).numpy().T
    else:
        v = least_squares(A.T, rows.T).T
    return v if B.ndim == 2 else v[0]


def _kl_rows(p_log: np.ndarray, q_log: np.ndarray) -> np.ndarray:
    """KL(p ‖ q) row-wise from log-probabilities."""
    return (np.exp(p_log) * (p_log - q_log)).sum(-1)


def _log_softmax(x):
    import scipy.special as sp

    return sp.log_softmax(np.asarray(x, dtype=np.float64), axis=-1)


@dataclass
class Generation:
    """Generated tokens (G, m) and the per-position KL(generator ‖ model) (G, m)."""
    tokens: np.ndarray
    kl: np.ndarray


LINGEN_BLOCK_BYTES = 2 ** 28   # the full-vocabulary rows L_M(H_block, {z_g}) LinGen holds at once (256 MB)


def history_blocks_within(n_histories: int, row_entries: int, max_bytes: float) -> list[list[int]]:
    """Consecutive blocks of the indices 0..n_histories−1 whose float64 rows of ``row_entries`` entries
    each take at most ``max_bytes`` (at least one history a block)."""
    size = max(1, int(max_bytes // (8 * max(row_entries, 1))))
    return [list(range(i, min(i + size, n_histories))) for i in range(0, n_histories, size)]


def lingen(model, histories, v, targets, m: int, seed: int = 0, **kwargs) -> Generation:
    """Algorithm 1 for several targets at once: generation g has coefficients ``v[g]`` over
    ``histories``; at step t it samples z_t ~ softmax(v[g]ᵀ L_M(H, {z_{1:t−1}})) (full vocabulary,
    mean-centred logits), querying M only at h∘z for h ∈ H, a block of histories at a time
    (:data:`LINGEN_BLOCK_BYTES`: the paper's |H| = 40000 rows of a 50k vocabulary would take
    terabytes at once). Beside each step the KL of this
    distribution from the model's own p(· | h_targ∘z_{1:t−1}) (KL(LinGen ‖ M), the direction
    of Corollary C.19) is recorded; h_targ itself is queried only for that measurement.
    ``model`` as :func:`as_model` reads it."""
    model = as_model(model)
    rng = np.random.default_rng(seed)
    histories, targets = as_sequences("histories", histories), as_sequences("targets", targets)
    v = np.asarray(v, dtype=np.float64)
    G = len(targets)
    toks = np.zeros((G, m), dtype=np.int64)
    kls = np.zeros((G, m))
    row_entries = G * vocab_size(model, histories[0]) if histories else 0
    for t in range(m):
        fut = [tuple(int(x) for x in toks[g, :t]) for g in range(G)]
        logits = 0.0
        for block in history_blocks_within(len(histories), row_entries, LINGEN_BLOCK_BYTES):
            L = extended_logit_matrix(model, [histories[i] for i in block], fut, None, True, **kwargs)
            L = L.astype(np.float64).reshape(len(block), G, -1)
            logits = logits + np.einsum("gh,hgv->gv", v[:, block], L)  # Σ_h v[g, h] L_M[· | h∘z_g], a block at a time
        V = logits.shape[1]
        q = _log_softmax(logits)
        p = next_token_logprobs(model, [targets[g] + fut[g] for g in range(G)])
        kls[:, t] = _kl_rows(q, p)
        for g in range(G):
            toks[g, t] = rng.choice(V, p=np.exp(q[g]) / np.exp(q[g]).sum())
    return Generation(toks, kls)


def generate_baseline(sampler: Callable[[list[tuple[int, ...]]], np.ndarray], model, targets, m: int,
                      seed: int = 0) -> Generation:
    """Generation from a baseline next-token sampler (contexts -> log-probs, e.g. a short
    context window or an earlier checkpoint), with KL(baseline ‖ M) at each position.
    ``model`` as :func:`as_model` reads it."""
    model = as_model(model)
    rng = np.random.default_rng(seed)
    targets = as_sequences("targets", targets)
    G = len(targets)
    toks = np.zeros((G, m), dtype=np.int64)
    kls = np.zeros((G, m))
    for t in range(m):
        ctx = [targets[g] + tuple(int(x) for x in toks[g, :t]) for g in range(G)]
        q = _log_softmax(sampler(ctx))
        p = next_token_logprobs(model, ctx)
        kls[:, t] = _kl_rows(q, p)
        for g in range(G):
            toks[g, t] = rng.choice(q.shape[1], p=np.exp(q[g]) / np.exp(q[g]).sum())
    return Generation(toks, kls)


def short_context(model, window: int) -> Callable:
    """The model reading only the last ``window`` tokens of each context (baseline (b) of §3.3);
    ``model`` as :func:`as_model` reads it."""
    model = as_model(model)
    return lambda ctx: next_token_logprobs(model, [c[-window:] for c in ctx])


def lemma_c18_bound(S1: np.ndarray, S2: np.ndarray, delta: float, v_norm_sq: float, k: int,
                    alphas: Sequence[float] | None = None) -> dict:
    """Lemma C.18: D_KL(P_truth ‖ P_LinGen) ≤ 2k √(αΔ + γ(1 + ‖v‖²)) whenever S2 ⪯ α S1 + γ I.

    ``S1``, ``S2``: the second-moment matrices E[L(H₀,{f}) L(H₀,{f})ᵀ] under P1 (random
    futures) and P2 (continuations of h₀ by M). For each α on a grid the smallest γ is
    λ_max(S2 − α S1)⁺; the bound is minimised over the grid. Returns alpha, gamma, bound."""
    alphas = np.geomspace(1e-3, 1e3, 121) if alphas is None else np.asarray(alphas, dtype=float)
    best = None
    for a in alphas:
        gamma = max(float(torch.linalg.eigvalsh(as_tensor(S2 - a * S1))[-1]), 0.0)
        b = 2 * k * np.sqrt(a * delta + gamma * (1 + v_norm_sq))
        if best is None or b < best["bound"]:
            best = {"alpha": float(a), "gamma": gamma, "bound": float(b)}
    return best


def lemma_c18_estimates(model, histories, v, target, m: int, n_paths: int, seed: int = 0, **kwargs) -> dict:
    """The quantities of Lemma C.18 for one target h₀ and coefficients v, from samples:

    * S1 = E_{P1}[X_f X_fᵀ] and Δ = E_{P1} ‖L_M(h₀, f) − vᵀ L_M(H, f)‖² with f a uniformly random
      string of uniform length t ∈ {0..m−1} (``n_paths`` random strings, every prefix);
    * S2 = E_{P2}[X_f X_fᵀ] with f a continuation of h₀ sampled from M (``n_paths`` paths, every
      prefix), X_f = L_M(H ∪ {h₀}, {f}) over the full vocabulary (mean-centred);
    * the measured D_KL(P_truth ‖ P_LinGen) over m tokens: along the same sampled continuations,
      Σ_t KL(M(· | h₀∘z_{<t}) ‖ softmax(vᵀ L_M(H, {z_{<t}}))), averaged over paths (chain rule).

    ``model`` as :func:`as_model` reads it.
    """
    model = as_model(model)
    rng = np.random.default_rng(seed)
    histories, target = as_sequences("histories", histories), tuple(int(x) for x in target)
    v = np.asarray(v, dtype=np.float64)
    n = len(histories)
    S = {"truth": np.zeros((n + 1, n + 1)), "random": np.zeros((n + 1, n + 1))}
    delta, kl = 0.0, np.zeros(n_paths)
    V = None
    paths = {"truth": np.zeros((n_paths, m), dtype=np.int64), "random": None}
    for kind in ("truth", "random"):
        if kind == "random":
            paths["random"] = rng.integers(0, V, size=(n_paths, m))
        for t in range(m):
            fut = [tuple(int(x) for x in paths[kind][g, :t]) for g in range(n_paths)]
            L = extended_logit_matrix(model, histories, fut, None, True, **kwargs).astype(np.float64)
            V = L.shape[1] // n_paths
            LH = L.reshape(n, n_paths, V)
            p0 = next_token_logprobs(model, [target + f for f in fut]).astype(np.float64)
            L0 = p0 - p0.mean(-1, keepdims=True)
            for g in range(n_paths):
                X = np.vstack([L0[g][None], LH[:, g]])
                S[kind] += X @ X.T / (n_paths * m)
            lin = np.einsum("h,hgv->gv", v, LH)
            if kind == "truth":
                kl += _kl_rows(p0, _log_softmax(lin))
                for g in range(n_paths):
                    pg = np.exp(p0[g])
                    paths["truth"][g, t] = rng.choice(V, p=pg / pg.sum())
            else:
                delta += float(((L0 - lin) ** 2).sum()) / (n_paths * m)
    return {"S1": S["random"], "S2": S["truth"], "delta": delta, "measured_kl": float(kl.mean()),
            "v_norm_sq": float(v @ v)}
