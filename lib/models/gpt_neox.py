"""GPT-NeoX (Pythia, the book's mini suite) run for the last position only, after shared histories.

The extended logit matrix (:mod:`lib.logits`) reads one next-token distribution per context
h∘f: the one at the last token of f. With each history's keys and values computed once
(:mod:`lib.models.prefix_reuse`), the passes over futures only need what reaches that
position. :func:`neox_last_hidden` runs the GPT-NeoX layers directly:

* layers 1 … N−1 at every future position (each later position attends to them);
* layer N: keys and values at every position, but its query, attention, output projection,
  MLP and the final norm only at the last real position t* of each future;
* layer 1's token-wise parts (embedding, fused query/key/value projection of its pre-norm and,
  with parallel residual branches, its MLP) computed once per distinct token
  (:class:`NeoxBlock`), since its input is the token's embedding alone.

:func:`lib.models.prefix_reuse.last_position_supported` probes it against the backbone's own
forward on every model before it is used.
"""
from __future__ import annotations

import torch


def neox_backbone(backbone):
    """``backbone`` if it is a GPT-NeoX backbone (``GPTNeoXModel``: Pythia and the book's mini suite)
    with the parts :func:`neox_last_hidden` runs, None for another architecture (those keep the
    generic path through the backbone's own forward)."""
    if backbone is None:
        return None
    if type(backbone).__name__ != "GPTNeoXModel":
        return None
    need = ("embed_in", "layers", "final_layer_norm", "rotary_emb")
    if not all(hasattr(backbone, a) for a in need) or len(backbone.layers) == 0:
        return None
    a = backbone.layers[0].attention
    if not all(hasattr(a, x) for x in ("query_key_value", "dense", "head_size", "rotary_ndims", "scaling")):
        return None
    return backbone


class NeoxBlock:
    """What the passes over futures of one block of G histories share (GPT-NeoX fast path).

    * Per layer the histories' keys (rotated) and values, (G, heads, L_max, head_dim), left-padded,
      and an additive mask (G, L_max): 0 at real positions, −∞ at padding.
    * Layer 1's token-wise parts for the tokens of the futures (its input is the token's
      embedding alone): the embedding, the fused query/key/value projection of its pre-norm,
      and, with parallel residual branches, the MLP of its second norm.
    """

    def __init__(self, backbone, kv, lens_t, keep, tokens: torch.Tensor):
        self.backbone, self.lens_t, self.keep, self.kv = backbone, lens_t, keep, kv
        G, nh, Lmax, hs = kv[0][0].shape
        self.G, self.nh, self.hs, self.Lmax = G, nh, hs, Lmax
        zero = torch.zeros((), dtype=kv[0][0].dtype, device=keep.device)
        self.hist_bias = torch.where(keep, zero, zero - float("inf"))                # (G, L_max)
        layer = backbone.layers[0]
        self.tokens = torch.unique(tokens)
        self.lookup = torch.full((int(self.tokens.max()) + 1,), -1, dtype=torch.long, device=tokens.device)
        self.lookup[self.tokens] = torch.arange(len(self.tokens), device=tokens.device)
        e = backbone.embed_in(self.tokens)
        self.embed = e
        self.qkv1 = layer.attention.query_key_value(layer.input_layernorm(e))
        self.mlp1 = layer.mlp(layer.post_attention_layernorm(e)) if layer.use_parallel_residual else None


def rope_into(dst: torch.Tensor, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """dst ← rotary embedding of x on its first ``cos.shape[-1]`` dimensions per head (GPT-NeoX's
    partial rotary: x_rot·cos + rotate_half(x_rot)·sin), the other dimensions copied."""
    rd = cos.shape[-1]
    half = rd // 2
    xr = x[..., :rd]
    dst[..., rd:] = x[..., rd:]
    dst[..., :half] = xr[..., :half] * cos[..., :half] - xr[..., half:] * sin[..., :half]
    dst[..., half:rd] = xr[..., half:] * cos[..., half:] + xr[..., :half] * sin[..., half:]
    return dst


def shared_prefix_attention(q, k, v, K_h, V_h, bias, scale: float) -> torch.Tensor:
    """Softmax attention of queries q (G, heads, B, Q, hs) over history g's keys K_h[g] (G, heads,
    L, hs), shared by its B futures, followed by each future's own keys k (G, heads, B, T, hs);
    ``bias`` (G, 1, ·, Q, L + T) is added to the scores (0 or −∞). The history part is one
    batched product per history for all its futures' queries (no copy of its keys per future);
    both parts share one softmax. Returns (G, heads, B, Q, hs)."""
    G, nh, B, Q, hs = q.shape
    L = K_h.shape[-2]
    s_h = torch.matmul(q.view(G, nh, B * Q, hs), K_h.transpose(-1, -2)).view(G, nh, B, Q, L)
    s = torch.cat([s_h, torch.matmul(q, k.transpose(-1, -2))], -1).mul_(scale).add_(bias)
    p = torch.softmax(s, -1)
    o = torch.matmul(p[..., :L].reshape(G, nh, B * Q, L), V_h).view(G, nh, B, Q, hs)
    return o + torch.matmul(p[..., L:], v)


def neox_last_hidden(blk: NeoxBlock, f_ids: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
    """Final-normed hidden states (G, B, d) at the last real position t* of each future, GPT-NeoX.

    ``blk``: the block's histories (:class:`NeoxBlock`); ``f_ids`` (B, T_f): the pass's futures,
    right-padded; ``last`` (B,): the index t* of each future's last real token. Every h∘f gets
    the computation of the backbone's forward at the positions that reach t*:

    * layers 1 … N−1 at every future position t: pre-norm, fused query/key/value projection,
      partial rotary at position |h| + t, attention over the history's keys (padding hidden)
      and the future's own keys up to t (:func:`shared_prefix_attention`), output projection
      and MLP (parallel or sequential residual as configured). Layer 1's projection and
      (parallel) MLP read the token's embedding alone, so they are looked up per token
      (:class:`NeoxBlock`);
    * layer N: its keys and values at every position (t* attends to them), but its query,
      attention, output projection, MLP and the final norm only at t*.
    """
    bb = blk.backbone
    layers = bb.layers
    G, nh, hs, Lmax = blk.G, blk.nh, blk.hs, blk.Lmax
    B, Tf = f_ids.shape
    dev = f_ids.device
    scale = layers[0].attention.scaling

    r = blk.lookup[f_ids]                                                        # (B, Tf) rows of layer 1's tables
    x = blk.embed[r][None].expand(G, B, Tf, -1)                                  # (G, B, Tf, d), shared over g
    d = x.shape[-1]
    pos = blk.lens_t[:, None] + torch.arange(Tf, device=dev)[None]                # (G, Tf): |h| + t
    cos, sin = bb.rotary_emb(blk.embed[:1], position_ids=pos)                    # (G, Tf, rd)
    cos_f, sin_f = cos[:, None, None], sin[:, None, None]                        # over (G, heads, B, Tf, ·)
    zero = torch.zeros((), dtype=x.dtype, device=dev)
    causal = torch.where(torch.ones(Tf, Tf, dtype=torch.bool, device=dev).tril(), zero, zero - float("inf"))
    bias = torch.cat([blk.hist_bias[:, None, :].expand(G, Tf, Lmax), causal[None].expand(G, Tf, Tf)], -1)  # (G, Tf, S)

    def heads(t, n):                                                            # (G, B, n, heads·hs) -> (G, heads, B, n, hs)
        return t.reshape(G, B, n, nh, -1).permute(0, 3, 1, 2, 4)

    for li, layer in enumerate(layers[:-1]):
        att = layer.attention
        if li == 0:
            qkv = blk.qkv1[r][None].expand(G, B, Tf, 3 * d)
        else:
            qkv = att.query_key_value(layer.input_layernorm(x))
        q, k, v = heads(qkv, Tf).split(hs, dim=-1)                               # (G, heads, B, Tf, hs)
        q = rope_into(q.new_empty((G, nh, B, Tf, hs)), q, cos_f, sin_f)
        k = rope_into(k.new_empty((G, nh, B, Tf, hs)), k, cos_f, sin_f)
        o = shared_prefix_attention(q, k, v, blk.kv[li][0], blk.kv[li][1], bias[:, None, None], scale)
        o = att.dense(o.permute(0, 2, 3, 1, 4).reshape(G, B, Tf, d))
        if li == 0 and blk.mlp1 is not None:
            x = x + o + blk.mlp1[r][None]
        elif layer.use_parallel_residual:
            x = x + o + layer.mlp(layer.post_attention_layernorm(x))
        else:
            x = x + o
            x = x + layer.mlp(layer.post_attention_layernorm(x))

    li, layer = len(layers) - 1, layers[-1]
    att = layer.attention
    W = att.query_key_value.weight.view(nh, 3, hs, d)
    b_qkv = att.query_key_value.bias
    bq = b_qkv.view(nh, 3, hs)[:, 0].reshape(-1) if b_qkv is not None else None
    bkv = b_qkv.view(nh, 3, hs)[:, 1:].reshape(-1) if b_qkv is not None else None
    rows = torch.arange(B, device=dev)
    h = layer.input_layernorm(x)                                                  # (G, B, Tf, d)
    kvp = heads(torch.nn.functional.linear(h, W[:, 1:].reshape(nh * 2 * hs, d), bkv), Tf)   # (G, heads, B, Tf, 2hs)
    k = rope_into(h.new_empty((G, nh, B, Tf, hs)), kvp[..., :hs], cos_f, sin_f)
    v = kvp[..., hs:]
    x_l = x[:, rows, last]                                                        # (G, B, d) at t*
    h_l = h[:, rows, last]
    q = heads(torch.nn.functional.linear(h_l, W[:, 0].reshape(nh * hs, d), bq), 1)        # (G, heads, B, 1, hs)
    cl, sl = cos[:, last][:, None, :, None], sin[:, last][:, None, :, None]       # (G, 1, B, 1, rd)
    q = rope_into(q.new_empty(q.shape), q, cl, sl)
    o = shared_prefix_attention(q, k, v, blk.kv[li][0], blk.kv[li][1], bias[:, last][:, None, :, None], scale)
    o = att.dense(o.permute(0, 2, 3, 1, 4).reshape(G, B, d))                      # row t* of each
    if layer.use_parallel_residual:
        x_l = x_l + o + layer.mlp(layer.post_attention_layernorm(x_l))
    else:
        x_l = x_l + o
        x_l = x_l + layer.mlp(layer.post_attention_layernorm(x_l))
    return bb.final_layer_norm(x_l)                                               # (G, B, d)


__all__ = ["neox_backbone", "NeoxBlock", "rope_into", "shared_prefix_attention", "neox_last_hidden"]
