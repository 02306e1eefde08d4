"""Next-token distributions of every context h∘f, each history h encoded once and reused for its futures.

The extended logit matrix of :mod:`lib.logits` (Golowich, Liu & Shetty, Def 2.2) needs the
next-token distribution after h∘f for every history h and future f: |H|·|F| contexts that
share |H| prefixes. :func:`block_rows` computes the rows of a block of histories:

* the histories are encoded once; histories of unequal length share a block with their
  key/value caches left-padded to the longest, an attention mask hiding the padding and
  position ids counting from each history's own length (where the model's cache is a plain
  ``DynamicCache`` and a probe, :func:`padding_supported`, finds padded and unpadded entries
  equal; otherwise only histories of equal length share a block, :func:`history_blocks`);
* the futures run on top of the shared caches in passes of about ``batch_tokens`` tokens
  (:func:`future_batches`), right-padded (under causal attention the last real token never
  attends to padding after it);
* on GPT-NeoX, where :func:`last_position_supported` finds it equal to the backbone's own
  forward, the passes run :func:`lib.models.gpt_neox.neox_last_hidden` (the last layer only
  where it is read);
* the head is evaluated only at the selected columns: centred logits need no softmax,
  L[z] = (W_z − W̄)·x + (b_z − b̄) for the head (W, b) and final hidden state x.

:func:`next_token_rows` is the plain computation (one forward pass per context), the
reference the reuse is tested against.
"""
from __future__ import annotations

import copy
from typing import Sequence

import numpy as np
import torch

from . import gpt_neox

DEFAULT_BATCH_TOKENS = 2 ** 13   # tokens of one future pass (batch × padded future length)


class ModelStructureError(ValueError):
    """A model without the parts the history reuse needs (a separate backbone and output head)."""


def centre(logp: np.ndarray | torch.Tensor, centered: bool):
    """Mean-centred over the last axis (Def 2.1 of Golowich, Liu & Shetty), or ``logp`` itself."""
    if not centered:
        return logp
    return logp - logp.mean(-1, keepdims=True) if isinstance(logp, np.ndarray) else logp - logp.mean(-1, keepdim=True)


def lm_parts(model):
    """(backbone, output head) of a :class:`lib.models.causal_lm.CausalLM`."""
    net = model.model
    backbone, head = net.base_model, net.get_output_embeddings()
    if backbone is None or head is None or backbone is net:
        raise ModelStructureError(f"{type(net).__name__} has no separate backbone and output head; history reuse needs both")
    return backbone, head


def next_token_rows(model, contexts: list[tuple[int, ...]], batch_tokens: int = DEFAULT_BATCH_TOKENS) -> torch.Tensor:
    """log Pr_M[· | c] for every context (float32, CPU): right-padded batches, last real position."""
    backbone, head = lm_parts(model)
    out = torch.empty(len(contexts), model.vocab_size)
    order = sorted(range(len(contexts)), key=lambda i: len(contexts[i]))
    with torch.inference_mode():
        i = 0
        while i < len(order):
            T = len(contexts[order[min(len(order) - 1, i)]])
            b = max(1, batch_tokens // max(T, 1))
            idx = order[i:i + b]
            T = max(len(contexts[j]) for j in idx)
            ids = torch.zeros(len(idx), T, dtype=torch.long)
            last = torch.empty(len(idx), dtype=torch.long)
            for r, j in enumerate(idx):
                ids[r, :len(contexts[j])] = torch.tensor(contexts[j])
                last[r] = len(contexts[j]) - 1
            hid = backbone(input_ids=ids.to(model.device), use_cache=False).last_hidden_state
            hid = hid[torch.arange(len(idx)), last.to(model.device)]
            out[idx] = torch.log_softmax(head(hid).float(), -1).cpu()
            i += len(idx)
    return out



def history_blocks(histories, rows_per_block: int, padded: bool = False) -> list[list[int]]:
    """Histories cut into blocks of at most ``rows_per_block``, sorted by token length.

    ``padded=False``: only histories of equal length share a block (one unpadded batched pass);
    ``padded=True``: consecutive histories in length order share a block whatever their lengths
    (their key/value caches are left-padded to the longest, see :func:`block_rows`)."""
    order = sorted(range(len(histories)), key=lambda i: (len(histories[i]), i))
    if padded:
        return [order[a:a + rows_per_block] for a in range(0, len(order), rows_per_block)]
    by_len: dict[int, list[int]] = {}
    for i in order:
        by_len.setdefault(len(histories[i]), []).append(i)
    blocks = []
    for L in sorted(by_len):
        ids = by_len[L]
        blocks += [ids[a:a + rows_per_block] for a in range(0, len(ids), rows_per_block)]
    return blocks


def plain_kv_cache(cache) -> bool:
    """Whether ``cache`` is a plain ``DynamicCache`` of ``DynamicLayer`` s holding (batch, heads, length,
    head_dim) keys and values: then histories of unequal lengths can share a pass, their caches
    left-padded (:func:`block_rows`). Other caches (sliding windows, quantised, state-space, legacy
    tuples) keep the equal-length path."""
    try:
        from transformers.cache_utils import DynamicCache, DynamicLayer
    except ImportError:  # pragma: no cover - very old transformers
        return False
    return (type(cache) is DynamicCache and len(cache.layers) > 0
            and all(type(layer) is DynamicLayer and getattr(layer, "keys", None) is not None
                    and layer.keys.ndim == 4 and layer.values.ndim == 4 for layer in cache.layers))


def remember_probe(model, key: str, ok: bool) -> bool:
    """Keep a probe's verdict on the model (as attribute ``key``), where the model takes attributes."""
    try:
        setattr(model, key, ok)
    except AttributeError:  # pragma: no cover - a frozen wrapper
        pass
    return ok


def padding_supported(model) -> bool:
    """Probe once per model: a plain key/value cache, and left-padded histories that give the same
    entries as unpadded ones on a two-history example (so a backbone that ignored the attention
    mask or the position ids would be caught, not trusted)."""
    key = "_lib_logitspadding_supported"
    known = getattr(model, key, None)
    if known is not None:
        return known
    backbone, _ = lm_parts(model)
    ok = False
    try:
        with torch.inference_mode():
            enc = backbone(input_ids=torch.zeros(1, 2, dtype=torch.long, device=model.device), use_cache=True)
        if plain_kv_cache(enc.past_key_values):
            a, b = 1 % model.vocab_size, 2 % model.vocab_size
            hs, fs = [(a,), (b, a, b)], [(b,), (a, b)]
            padded = block_rows(model, hs, fs, [0, 1], None, True, 10 ** 6)
            alone = np.vstack([block_rows(model, hs, fs, [i], None, True, 10 ** 6) for i in (0, 1)])
            ok = bool(np.isfinite(padded).all() and np.abs(padded - alone).max() <= 1e-4)
    except (TypeError, ValueError, RuntimeError, AttributeError, IndexError):
        ok = False
    return remember_probe(model, key, ok)


def shared_history_cache(kv, B: int):
    """A ``DynamicCache`` whose row g·B + r holds the keys and values ``kv`` of history g (G rows), for
    B futures per history, written once per layer straight into the concatenation the attention
    reads (no repeated copy of the history's cache before it)."""
    from transformers.cache_utils import DynamicCache, DynamicLayer

    class _SharedHistoryLayer(DynamicLayer):
        def update(self, key_states, value_states, *args, **kwargs):
            out = []
            for past, new in ((self.keys, key_states), (self.values, value_states)):
                G, L = past.shape[0], past.shape[-2]
                buf = new.new_empty((G, B) + new.shape[1:-2] + (L + new.shape[-2], new.shape[-1]))
                buf[..., :L, :] = past[:, None]                                   # broadcast over B futures
                buf[..., L:, :] = new.view((G, B) + new.shape[1:])
                out.append(buf.view((G * B,) + buf.shape[2:]))
            self.keys, self.values = out
            return self.keys, self.values

    cache = DynamicCache()
    cache.layers = []
    for K, Vv in kv:
        layer = _SharedHistoryLayer()
        layer.lazy_initialization(K, Vv)
        layer.keys, layer.values = K, Vv
        cache.layers.append(layer)
    return cache


def future_batches(lengths: Sequence[int], order: Sequence[int], G: int, L: int, batch_tokens: int,
                    slack: float = 0.1) -> list[list[int]]:
    """Futures (``order``: indices sorted by length) cut into passes of G·B·(L + T_max) ≤ ``batch_tokens``
    tokens (L: the history length, T_max the longest future in the pass), at most ``slack`` of the
    future tokens right padding."""
    batches, cur, real = [], [], 0
    for j in order:
        T = lengths[j]                       # ≥ every length in cur (sorted)
        if cur and (G * (len(cur) + 1) * (L + T) > batch_tokens or (len(cur) + 1) * T > (1 + slack) * (real + T)):
            batches.append(cur)
            cur, real = [], 0
        cur.append(j)
        real += T
    if cur:
        batches.append(cur)
    return batches



def last_position_supported(model) -> bool:
    """Probe once per model: a GPT-NeoX backbone with a plain key/value cache whose
    :func:`gpt_neox.neox_last_hidden` gives the same entries (to 1e-4) as the backbone's own forward on
    a small example (histories of two lengths, futures of three), so a variant of the
    architecture that the hand-written layer loop does not follow is caught, not trusted."""
    key = "_lib_logitslast_position_supported"
    known = getattr(model, key, None)
    if known is not None:
        return known
    ok = False
    if gpt_neox.neox_backbone(lm_parts(model)[0]) is not None:
        try:
            V = model.vocab_size
            a, b, c = 1 % V, 2 % V, 3 % V
            # futures of 10 and 11 tokens share a pass (right padding inside it), one token has its own
            hs = [(a, c), (b, a, b, c)]
            fs = [(b,), tuple((7 * i + 1) % V for i in range(10)), tuple((5 * i + 2) % V for i in range(11))]
            limit = getattr(model.config, "max_position_embeddings", None)
            if limit is not None and limit < 15:
                fs = [f[:limit - 4] for f in fs]
            blocks = [[0, 1]] if padding_supported(model) else [[0], [1]]
            for idx in blocks:
                with torch.inference_mode():
                    enc = lm_parts(model)[0](input_ids=torch.zeros(1, 2, dtype=torch.long, device=model.device),
                                              use_cache=True)
                if not plain_kv_cache(enc.past_key_values):
                    raise ValueError("not a plain cache")
                fast = block_rows(model, hs, fs, idx, None, True, 10 ** 6, fast=True)
                slow = block_rows(model, hs, fs, idx, None, True, 10 ** 6, fast=False)
                ok = bool(np.isfinite(fast).all() and np.abs(fast - slow).max() <= 1e-4)
                if not ok:
                    break
        except (TypeError, ValueError, RuntimeError, AttributeError, IndexError):
            ok = False
    return remember_probe(model, key, ok)


def block_rows(model, histories, futures, idx, cols, centered, batch_tokens, fast: bool = False) -> np.ndarray:
    """Rows ``idx`` of the matrix, by history reuse.

    The histories of the block are encoded once (equal lengths in one unpadded pass each). If
    they differ in length, their key/value caches are left-padded with zeros to the longest,
    L_max, and every pass over futures gets an attention mask hiding the padding and position
    ids counting from each history's own length, so each h∘f sees exactly the keys, values and
    positions of its unpadded forward pass. Futures are batched by length (right padding is never
    attended to by the last real token under causal attention); row g·B + r of a pass is future r
    after history g. ``fast`` (GPT-NeoX with a plain cache, see :func:`last_position_supported`):
    the passes over futures run :func:`gpt_neox.neox_last_hidden`, the last layer only where it is read."""
    backbone, head = lm_parts(model)
    G, nF = len(idx), len(futures)
    width = cols.shape[1] if cols is not None else model.vocab_size
    out = np.empty((G, nF, width), dtype=np.float32)
    dev = model.device
    lens = [len(histories[i]) for i in idx]
    Lmax = max(lens)
    f_len = [len(f) for f in futures]
    order = sorted(range(nF), key=lambda j: (f_len[j], j))
    with torch.inference_mode():
        if len(set(lens)) == 1:
            enc = backbone(input_ids=torch.tensor([histories[i] for i in idx], dtype=torch.long, device=dev),
                           use_cache=True)
            cache, h_last, kv = enc.past_key_values, enc.last_hidden_state[:, -1], None
            if plain_kv_cache(cache):
                kv = [(layer.keys, layer.values) for layer in cache.layers]
        else:  # left-padded caches of unequal lengths (only when padding_supported)
            parts: dict[int, list[int]] = {}
            for r, L in enumerate(lens):
                parts.setdefault(L, []).append(r)
            kv, h_last = None, None
            for L, rs in parts.items():
                enc = backbone(input_ids=torch.tensor([histories[idx[r]] for r in rs], dtype=torch.long,
                                                      device=dev), use_cache=True)
                layers = enc.past_key_values.layers
                if kv is None:
                    kv = [(l.keys.new_zeros((G,) + l.keys.shape[1:-2] + (Lmax, l.keys.shape[-1])),
                           l.values.new_zeros((G,) + l.values.shape[1:-2] + (Lmax, l.values.shape[-1])))
                          for l in layers]
                    h_last = enc.last_hidden_state.new_empty(G, enc.last_hidden_state.shape[-1])
                rt = torch.tensor(rs, device=dev)
                for (K, Vv), l in zip(kv, layers):
                    K[rt, ..., Lmax - L:, :] = l.keys
                    Vv[rt, ..., Lmax - L:, :] = l.values
                h_last[rt] = enc.last_hidden_state[:, -1]
            cache = None
        lens_t = torch.tensor(lens, dtype=torch.long, device=dev)
        keep = torch.arange(Lmax, device=dev)[None] >= (Lmax - lens_t)[:, None]     # (G, Lmax) real keys

        W = getattr(head, "weight", None)
        direct = centered and cols is not None and isinstance(head, torch.nn.Linear)
        if direct:  # centred logits need no softmax: L[z] = (W_z − W̄)·x + (b_z − b̄) (Def 2.1)
            Wc = (W - W.mean(0, keepdim=True)).float()
            bc = (head.bias - head.bias.mean()).float() if head.bias is not None else None
            cols_t = torch.from_numpy(cols).to(dev)
        elif cols is not None:
            cols_t = torch.from_numpy(cols).to(dev)

        def emit(js, hidden):  # hidden: (G, len(js), d)
            jt = torch.tensor(js, device=dev)
            if direct:  # only the selected columns of the head
                sel = cols_t[jt]                                                 # (B, k)
                vals = torch.einsum("gbd,bkd->gbk", hidden.float(), Wc[sel])
                if bc is not None:
                    vals = vals + bc[sel][None]
            else:
                vals = centre(torch.log_softmax(head(hidden).float(), -1), centered)
                if cols is not None:
                    vals = torch.gather(vals, 2, cols_t[jt][None].expand(G, -1, -1))
            out[:, js] = vals.cpu().numpy()

        nulls = [j for j in order if f_len[j] == 0]
        if nulls:
            emit(nulls, h_last[:, None, :].expand(G, len(nulls), h_last.shape[-1]))
        rest = [j for j in order if f_len[j] > 0]
        batches = future_batches(f_len, rest, G, Lmax, batch_tokens)
        blk = None
        if fast and kv is not None and batches:
            toks = torch.tensor([0] + [t for j in rest for t in futures[j]], dtype=torch.long, device=dev)
            blk = gpt_neox.NeoxBlock(backbone, kv, lens_t, keep, toks)
        for js in batches:
            B, Tf = len(js), max(f_len[j] for j in js)
            f_ids = torch.zeros(B, Tf, dtype=torch.long)
            for r, j in enumerate(js):
                f_ids[r, :f_len[j]] = torch.tensor(futures[j])
            last = torch.tensor([f_len[j] - 1 for j in js], device=dev)
            ids = f_ids.to(dev).repeat(G, 1)                  # row g·B + r: future r after history g
            if blk is not None:                               # GPT-NeoX: the last layer at t* only
                emit(js, gpt_neox.neox_last_hidden(blk, f_ids.to(dev), last))
                continue
            kwargs = {}
            if kv is not None:                                # plain cache: no deepcopy, no repeated copy
                c = shared_history_cache(kv, B)
                if Lmax != min(lens):
                    mask = torch.cat([keep, keep.new_ones(G, Tf)], 1).repeat_interleave(B, 0)
                    kwargs = {"attention_mask": mask.long(),
                              "position_ids": (lens_t[:, None] + torch.arange(Tf, device=dev)).repeat_interleave(B, 0)}
            else:
                c = copy.deepcopy(cache)
                c.batch_repeat_interleave(B)                  # history g's cache repeated for each of its B futures
            hid = backbone(input_ids=ids, past_key_values=c, use_cache=True, **kwargs).last_hidden_state
            hid = hid.reshape(G, B, Tf, -1)[:, torch.arange(B, device=dev), last]   # (G, B, d)
            emit(js, hid)
    return out.reshape(G, nF * width)



__all__ = ["DEFAULT_BATCH_TOKENS", "ModelStructureError", "centre", "lm_parts", "next_token_rows", "history_blocks",
           "plain_kv_cache", "padding_supported", "shared_history_cache", "future_batches",
           "last_position_supported", "block_rows"]
