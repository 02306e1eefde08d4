"""The tiny batched matrix products that ``torch.func.vmap`` makes of many chains, in a compiled step.

Under ``vmap`` over C parameter vectors, each ``Linear`` layer of a model becomes one batched
product ``bmm(a, b)`` of a (C, M, K) and a (C, K, N) tensor: one small GEMM per chain. When
the GEMMs are tiny, an Inductor graph pass, :func:`small_products_pass`, rewrites them once at
compile time into the sum Σ_k a[c, m, k] b[c, k, n] of a broadcast product, which Inductor fuses
into one loop with the surrounding elementwise work instead of one GEMM call per chain
(:func:`decompose_small_products`). Which products count as tiny (:func:`small_product`) was
measured on torch 2.13's CPU kernels (``benchmarks/HISTORY.md``, "RRR after the eager layouts were
dropped").

Eager steps are left as ``vmap`` lays them out: on torch 2.13 the layouts this module used to
apply to eager steps (one GEMM for a shared operand, the transposed product for few columns,
through a dispatch mode) made the sampler's step slower, not faster, at every size measured.
"""
from __future__ import annotations

import torch

_BMM = torch.ops.aten.bmm.default

# A compiled graph's (C, M, K) @ (C, K, N) is summed in a fused loop (decompose_small_products) when two of M, K, N
# are at most SMALL_DIM and none exceeds LONGEST_DIM. Measured on reduced-rank regression (5, 3, 5), 128 chains,
# one thread, torch 2.13, whole compiled vmapped step with and without the rewrite: with M rows per chain's
# minibatch, M = 16 and 32 ran 1.35x and 1.37x as fast rewritten, M = 48 and 64 0.9x and 1.0x, M = 100 and 128
# 0.55x and 0.7x, and the full batch M = 1000 0.5x (Inductor's own GEMMs: 2.0-2.7 ms against 4.7-5.7 ms).
SMALL_DIM = 8
LONGEST_DIM = 32


def small_product(m: int, k: int, n: int) -> bool:
    """Whether a (·, m, k) @ (·, k, n) product is summed in a loop rather than called as a GEMM: two of m, k, n at
    most :data:`SMALL_DIM` and the third at most :data:`LONGEST_DIM`."""
    dims = (int(m), int(k), int(n))
    return sum(d <= SMALL_DIM for d in dims) >= 2 and max(dims) <= LONGEST_DIM


def decompose_small_products(graph) -> int:
    """Rewrite, in an ATen-level ``torch.fx.Graph``, every CPU ``aten.bmm`` (C, M, K) @ (C, K, N) for which
    :func:`small_product` holds into ``(a[..., None] * b[:, None]).sum(2)``; returns how many were rewritten.
    The rewrite is the same matrix product (summed in another order, so equal to float rounding)."""
    rewritten = 0
    for node in list(graph.nodes):
        if node.target is not _BMM:
            continue
        a, b = node.args
        va, vb = a.meta.get("val"), b.meta.get("val")
        if va is None or vb is None or va.device.type != "cpu":
            continue
        _, m, k = va.shape
        if not small_product(m, k, vb.shape[2]):
            continue
        with graph.inserting_before(node):
            wide_a = graph.call_function(torch.ops.aten.unsqueeze.default, (a, 3))  # (C, M, K, 1)
            wide_b = graph.call_function(torch.ops.aten.unsqueeze.default, (b, 1))  # (C, 1, K, N)
            terms = graph.call_function(torch.ops.aten.mul.Tensor, (wide_a, wide_b))
            total = graph.call_function(torch.ops.aten.sum.dim_IntList, (terms, [2]))
        node.replace_all_uses_with(total)
        graph.erase_node(node)
        rewritten += 1
    return rewritten


def small_products_pass():
    """:func:`decompose_small_products` as an Inductor post-grad pass, for
    ``torch.compile(fn, options={"post_grad_custom_pre_pass": small_products_pass()})``. Its cache key is this
    file's contents, so Inductor's on-disk cache stays valid across processes. ``rewritten`` counts the
    products it rewrote in the graphs it compiled."""
    from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files

    class SmallProducts(CustomGraphPass):
        rewritten = 0

        def __call__(self, graph):
            self.rewritten += decompose_small_products(graph)

        def uuid(self):
            return get_hash_for_files((__file__,))

    return SmallProducts()


__all__ = ["LONGEST_DIM", "SMALL_DIM", "decompose_small_products", "small_product", "small_products_pass"]
