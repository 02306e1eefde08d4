"""lib.batched_gemm: the compiled steps' rewrite of tiny per-chain products into fused sums."""
import pytest
import torch

from lib import batched_gemm


def _operands(chains, rows, inner, cols, *, shared_a=False, shared_b=False, a_transposed=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    if shared_a:
        a = torch.randn(rows, inner, generator=g).expand(chains, rows, inner)
    elif a_transposed:  # a column-major view, as autograd's aᵀ in a backward
        a = torch.randn(chains, inner, rows, generator=g).mT
    else:
        a = torch.randn(chains, rows, inner, generator=g)
    b = torch.randn(inner, cols, generator=g).expand(chains, inner, cols) if shared_b else \
        torch.randn(chains, inner, cols, generator=g)
    return a, b


CASES = {  # (chains, M, K, N, options): layouts vmap makes of a Linear's products, forward and backward
    "shared input, tiny": (16, 24, 5, 3, dict(shared_a=True)),
    "minibatch rows, tiny": (16, 32, 3, 5, {}),
    "backward aᵀ view, tiny": (16, 5, 32, 3, dict(a_transposed=True)),
    "shared b, tiny": (16, 3, 20, 5, dict(shared_b=True)),
    "full batch stays bmm": (4, 200, 5, 3, dict(shared_a=True)),
    "wide output stays bmm": (16, 20, 8, 64, {}),
    "square stays bmm": (4, 32, 32, 32, {}),
}


# ----- the compiled steps' rewrite: small products summed in a loop ------------------------------

@pytest.mark.parametrize("m, k, n, small", [(32, 5, 3, True), (16, 3, 5, True), (3, 32, 5, True), (8, 8, 32, True),
                                            (1, 1, 1, True), (33, 5, 3, False), (1000, 5, 3, False),
                                            (3, 1000, 5, False), (8, 8, 64, False), (9, 9, 2, False),
                                            (32, 32, 32, False), (200, 16, 4, False), (1, 100, 100, False)])
def test_small_product_rule_by_hand(m, k, n, small):
    """Two of M, K, N at most SMALL_DIM = 8, none above LONGEST_DIM = 32."""
    assert (batched_gemm.SMALL_DIM, batched_gemm.LONGEST_DIM) == (8, 32)
    assert batched_gemm.small_product(m, k, n) is small


def _traced_bmm(a, b):
    from torch.fx.experimental.proxy_tensor import make_fx

    return make_fx(lambda x, y: torch.bmm(x, y).sin(), tracing_mode="fake")(a, b)


@pytest.mark.parametrize("name", list(CASES))
def test_decomposed_graph_computes_the_same_product(name):
    """The rewritten ATen graph gives bmm's product (to float rounding) on every layout vmap makes, and rewrites
    exactly the products the rule names."""
    chains, m, k, n, options = CASES[name]
    a, b = _operands(chains, m, k, n, **options)
    gm = _traced_bmm(a, b)
    count = batched_gemm.decompose_small_products(gm.graph)
    gm.recompile()
    assert count == int("tiny" in name)
    assert sum(node.target is torch.ops.aten.bmm.default for node in gm.graph.nodes) == 1 - count
    # float32 sums of k products in another order: rounding grows with k
    torch.testing.assert_close(gm(a, b), torch.bmm(a, b).sin(), rtol=1e-5, atol=2e-6 * k)


def test_decomposition_leaves_other_devices_alone():
    a, b = torch.randn(4, 100, 3, device="meta"), torch.randn(4, 3, 5, device="meta")
    gm = _traced_bmm(a, b)
    assert batched_gemm.decompose_small_products(gm.graph) == 0


def test_small_products_pass_has_a_stable_cache_key():
    """Inductor reuses a compiled graph across processes only when a custom pass names itself: by this file."""
    one, two = batched_gemm.small_products_pass(), batched_gemm.small_products_pass()
    assert one.uuid() == two.uuid() and one.uuid()
    assert one.rewritten == 0
