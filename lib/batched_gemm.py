"""Faster CPU layouts for the batched matrix products that ``torch.func.vmap`` makes of many chains.

Under ``vmap`` over C parameter vectors, each ``Linear`` layer of a model becomes one batched
product ``bmm(a, b)`` of a (C, M, K) and a (C, K, N) tensor: one small GEMM per chain. On the
CPU, MKL's kernels run such a product up to 8x slower when N is small and M large (e.g. the
(1000 × 3) @ (3 × 5) products of reduced-rank regression on a full batch of n = 1000) than the
same product laid out the other way round. Two rewrites give the same matrices (to float
rounding) in fewer cycles:

* **a shared operand** (``a`` has batch stride 0: ``vmap`` broadcast one input, such as the
  full batch of data, to every chain): one GEMM ``a₀ @ [b₁ … b_C]`` of shape
  (M × K) @ (K × CN), whose (M, C, N) result is returned as a (C, M, N) view;
* **few output columns** (N ≤ 8 and N < M): the transposed product ``(bᵀ aᵀ)ᵀ``, whose
  output rows are long.

:func:`batched_product` is the rule; :class:`CpuBatchedGemm` a dispatch mode that applies
it to every ``aten.bmm`` run on the CPU inside its ``with`` block (autograd's backward
included), and :func:`worth_it` says, from one probed step, whether the products are large
enough for the mode to pay. The rule depends only on shapes and strides, never on timings, so a run is
bit-identical from one execution to the next.

A *compiled* step needs no dispatch mode: :func:`small_products_pass` is an Inductor graph pass that
rewrites, once at compile time, every CPU product with at least two of M, K, N at most
:data:`SMALL_DIM` into the sum Σ_k a[c, m, k] b[c, k, n] of a broadcast product, which Inductor
fuses into one loop with the surrounding elementwise work instead of one tiny GEMM call per chain
(:func:`decompose_small_products`).
"""
from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_BMM = torch.ops.aten.bmm.default
FEW_COLUMNS = 8  # N at or below which the transposed product is used (when N < M)


def layout(a: torch.Tensor, b: torch.Tensor) -> str:
    """Which layout :func:`batched_product` uses for a (C, M, K) @ (C, K, N): "shared", "transposed" or "bmm"."""
    if a.shape[0] > 1 and a.stride(0) == 0:
        return "shared"
    if b.shape[2] <= FEW_COLUMNS and b.shape[2] < a.shape[1]:
        return "transposed"
    return "bmm"


def batched_product(a: torch.Tensor, b: torch.Tensor, how: str | None = None) -> torch.Tensor:
    """``torch.bmm(a, b)`` for a (C, M, K) and b (C, K, N), in the layout :func:`layout` picks."""
    how = layout(a, b) if how is None else how
    if how == "shared":  # one a for every chain: a single GEMM a₀ @ [b₁ … b_C]
        chains, rows, inner = a.shape
        cols = b.shape[2]
        stacked = b.permute(1, 0, 2).reshape(inner, chains * cols)
        return torch.mm(a[0], stacked).view(rows, chains, cols).permute(1, 0, 2)
    if how == "transposed":  # long output rows: compute (bᵀ aᵀ)ᵀ
        return torch.bmm(b.mT, a.mT).mT
    return torch.bmm(a, b)


class CpuBatchedGemm(TorchDispatchMode):
    """Inside ``with CpuBatchedGemm():`` every CPU ``aten.bmm`` goes through :func:`batched_product`.

    ``rewritten`` counts the products that took another layout than ``bmm``'s own and
    ``largest`` the most output elements (C·M·N) of one of them. With ``rewrite=False`` the
    mode only counts (every product stays ``bmm``'s): a probe of whether the rewrites pay.
    The mode sees every operation in its block from Python, about 15 µs each, so on small
    problems it costs more than it saves (see :data:`WORTH_ELEMENTS`)."""

    def __init__(self, rewrite: bool = True):
        super().__init__()
        self.rewrite = rewrite
        self.rewritten = 0
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is _BMM and not kwargs and args[0].device.type == "cpu":
            how = layout(*args)
            if how != "bmm":
                self.rewritten += 1
                self.largest = max(self.largest, args[0].shape[0] * args[0].shape[1] * args[1].shape[2])
                if self.rewrite:
                    return batched_product(*args, how)
        return func(*args, **(kwargs or {}))


# Output elements of the largest rewritable product above which the rewrites pay for the mode's
# per-operation cost. Measured on reduced-rank regression (5, 3, 5), one thread: 16 chains × 100
# samples (8·10³ elements) ran 0.63× as fast with the mode, 256 × 100 (1.3·10⁵) 1.17× and
# 128 × 1000 (6.4·10⁵) 1.41× as fast.
WORTH_ELEMENTS = 1 << 16


def worth_it(probe: CpuBatchedGemm) -> bool:
    """Whether a step probed by ``CpuBatchedGemm(rewrite=False)`` should run with the rewrites."""
    return probe.largest >= WORTH_ELEMENTS


class ProbedLayouts:
    """The rewrites where they pay, decided once from a probe: enter it around every vmapped step. Until
    :meth:`settle` the steps run plain while a ``CpuBatchedGemm(rewrite=False)`` counts their products; from
    then on they run with the rewrites if :func:`worth_it` says so, else plain. With ``enabled=False`` every
    step runs plain. ``rewriting`` says what was decided."""

    def __init__(self, enabled: bool = True):
        self.mode = CpuBatchedGemm(rewrite=False) if enabled else None
        self.probing = enabled
        self.rewriting = False

    def __enter__(self):
        if self.mode is not None:
            self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        if self.mode is not None:
            return self.mode.__exit__(*exc)
        return None

    def settle(self) -> bool:
        """Decide from what was probed so far (once; later calls change nothing); returns ``rewriting``."""
        if self.probing:
            self.rewriting = worth_it(self.mode)
            self.mode = CpuBatchedGemm() if self.rewriting else None
            self.probing = False
        return self.rewriting


# A compiled graph's (C, M, K) @ (C, K, N) with at least two of M, K, N at most this is summed in a fused loop
# (decompose_small_products). Measured on reduced-rank regression (5, 3, 5), 128 chains × 1000 samples, one
# thread: the compiled vmapped step spent 94 % of its time in five such products (K or N of 3 or 5, 0.73 ms
# each); with them decomposed the whole step took 2.1 ms instead of 3.9 ms (eager: 6.7 ms).
SMALL_DIM = 8


def small_product(m: int, k: int, n: int) -> bool:
    """Whether a (·, m, k) @ (·, k, n) product is summed in a loop rather than called as a GEMM (two of m, k, n at
    most :data:`SMALL_DIM`)."""
    return sum(int(d) <= SMALL_DIM for d in (m, k, n)) >= 2


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


__all__ = ["CpuBatchedGemm", "FEW_COLUMNS", "ProbedLayouts", "SMALL_DIM", "WORTH_ELEMENTS", "batched_product",
           "decompose_small_products", "layout", "small_product", "small_products_pass", "worth_it"]
