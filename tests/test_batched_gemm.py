"""lib.batched_gemm: every layout gives bmm's product; the mode rewrites what vmap makes of a Linear."""
import numpy as np
import pytest
import torch

from lib import batched_gemm
from lib.batched_gemm import CpuBatchedGemm, batched_product, layout


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


CASES = {  # (chains, M, K, N, options) -> the layout the rule must pick
    "shared input (full batch)": ((16, 200, 5, 3, dict(shared_a=True)), "shared"),
    "few output columns": ((16, 200, 3, 5, {}), "transposed"),
    "few columns, aᵀ view": ((16, 5, 200, 3, dict(a_transposed=True)), "transposed"),
    "shared b stays bmm": ((16, 3, 200, 5, dict(shared_b=True)), "bmm"),
    "wide output stays bmm": ((16, 200, 8, 64, {}), "bmm"),
    "square stays bmm": ((4, 32, 32, 32, {}), "bmm"),
    "one chain, shared stride": ((1, 50, 4, 2, dict(shared_a=True)), "transposed"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_every_layout_gives_bmm_product(name):
    (c, m, k, n, opts), expected = CASES[name]
    a, b = _operands(c, m, k, n, **opts)
    assert layout(a, b) == expected
    out = batched_product(a, b)
    assert out.shape == (c, m, n)
    torch.testing.assert_close(out, torch.bmm(a, b), rtol=1e-5, atol=1e-5)


def test_wrong_layout_is_caught(monkeypatch):
    """The comparison above fails on a mutant that forgets to transpose back, or misorders the stack."""
    a, b = _operands(16, 200, 3, 5)

    def forgets(a, b, how=None):
        return torch.bmm(b.mT, a.mT).reshape(a.shape[0], a.shape[1], b.shape[2])

    with pytest.raises(AssertionError):
        torch.testing.assert_close(forgets(a, b), torch.bmm(a, b), rtol=1e-5, atol=1e-5)
    a, b = _operands(16, 200, 5, 3, shared_a=True)
    c, m, k = a.shape
    misordered = torch.mm(a[0], b.permute(1, 0, 2).reshape(k, c * 3)).view(c, m, 3)  # (M, C, N) read as (C, M, N)
    with pytest.raises(AssertionError):
        torch.testing.assert_close(misordered, torch.bmm(a, b), rtol=1e-5, atol=1e-5)


def test_mode_rewrites_vmapped_linear_and_keeps_gradients():
    """vmap(grad) of a two-layer linear model on a shared full batch: same gradients, products rewritten."""
    from torch.func import functional_call, grad, vmap

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 3, bias=False), torch.nn.Linear(3, 5, bias=False))
    x, y = torch.randn(300, 5), torch.randn(300, 5)
    params = {k: v.detach() + 0.1 * torch.randn(16, *v.shape) for k, v in model.named_parameters()}

    def loss(p, x, y):
        return ((functional_call(model, p, (x,)) - y) ** 2).mean()

    step = vmap(grad(loss), in_dims=(0, None, None))
    plain = step(params, x, y)
    mode = CpuBatchedGemm()
    with mode:
        fast = step(params, x, y)
    assert mode.rewritten >= 3  # the forward's shared input and two few-column products of the backward
    for k in plain:
        torch.testing.assert_close(fast[k], plain[k], rtol=1e-5, atol=1e-6)
    with mode:  # and bit-identical from one call to the next: the rule never looks at timings
        again = step(params, x, y)
    for k in plain:
        assert torch.equal(again[k], fast[k])


def test_estimator_same_llc_with_and_without_layouts(monkeypatch):
    from lib import known_llc, llc, sgld

    p = known_llc.rrr_problem(5, 3, 5, 0, n=1000)  # 16 chains × 1000 × 5 outputs: above WORTH_ELEMENTS, so rewritten
    assert 16 * 1000 * 5 >= batched_gemm.WORTH_ELEMENTS
    kw = dict(gamma=1.0, eps=5e-5, chains=16, draws=120, burn_in=20, batch_size=1000, seed=0, device="cpu",
              progress=False)
    decisions = []
    real = batched_gemm.worth_it
    monkeypatch.setattr(batched_gemm, "worth_it", lambda probe: decisions.append(real(probe)) or decisions[-1])
    fast = llc.estimate_llc(p.model, known_llc.squared_error, p.data, **kw)
    assert decisions == [True]  # the run did take the rewritten layouts
    monkeypatch.setattr(sgld, "CPU_GEMM_LAYOUT", False)
    plain = llc.estimate_llc(p.model, known_llc.squared_error, p.data, **kw)
    np.testing.assert_allclose(fast.per_chain, plain.per_chain, rtol=1e-4)
    assert fast.llc == pytest.approx(plain.llc, rel=1e-5)
    assert batched_gemm.FEW_COLUMNS == 8


def test_probe_counts_without_rewriting_and_decides_by_size():
    """rewrite=False leaves bmm's own products; worth_it says no on a small step, yes on a large one."""
    from torch.func import functional_call, grad, vmap

    from lib.batched_gemm import WORTH_ELEMENTS, worth_it

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 3, bias=False), torch.nn.Linear(3, 5, bias=False))

    def probe(chains, n):
        x, y = torch.randn(n, 5), torch.randn(n, 5)
        params = {k: v.detach() + 0.1 * torch.randn(chains, *v.shape) for k, v in model.named_parameters()}
        step = vmap(grad(lambda p, x, y: ((functional_call(model, p, (x,)) - y) ** 2).mean()), in_dims=(0, None, None))
        mode = CpuBatchedGemm(rewrite=False)
        with mode:
            counted = step(params, x, y)
        plain = step(params, x, y)
        for k in plain:
            assert torch.equal(counted[k], plain[k])  # counting changes no product
        return mode

    small, large = probe(16, 100), probe(128, 1000)
    assert small.rewritten >= 3 and small.largest == 16 * 100 * 5 < WORTH_ELEMENTS and not worth_it(small)
    assert large.largest == 128 * 1000 * 5 >= WORTH_ELEMENTS and worth_it(large)


def test_coupled_identical_targets_stay_identical_with_the_layouts():
    """The probe spans every target's first step, so two identical targets take the same layouts throughout."""
    from lib import known_llc, llc, sgld

    p = known_llc.rrr_problem(5, 3, 5, 1, n=1000)  # w* ≠ 0: the first step's products are not all zeros
    out = llc.coupled_chains(p.model, known_llc.squared_error, p.data, p.data, gamma=1.0, eps=5e-5, chains=16, draws=40,
                             burn_in=10, batch_size=1000, seed=0, device="cpu", progress=False)
    assert float(np.max(out.max_separation)) == 0.0
    np.testing.assert_array_equal(out.a.loss, out.b.loss)
    x, y = p.data  # and the same check sees a difference of 1e-3 in one target's data
    apart = llc.coupled_chains(p.model, known_llc.squared_error, p.data, (x, y + 1e-3), gamma=1.0, eps=5e-5, chains=16,
                               draws=40, burn_in=10, batch_size=1000, seed=0, device="cpu", progress=False)
    assert float(np.max(apart.max_separation)) > 0.0


# ----- the compiled steps' rewrite: small products summed in a loop ------------------------------

@pytest.mark.parametrize("m, k, n, small", [(1000, 5, 3, True), (1000, 3, 5, True), (3, 1000, 5, True),
                                            (8, 8, 64, True), (9, 9, 2, False), (32, 32, 32, False),
                                            (200, 16, 4, False), (1, 100, 100, False)])
def test_small_product_rule_by_hand(m, k, n, small):
    """Two of M, K, N at most SMALL_DIM = 8."""
    assert batched_gemm.SMALL_DIM == 8
    assert batched_gemm.small_product(m, k, n) is small


def _traced_bmm(a, b):
    from torch.fx.experimental.proxy_tensor import make_fx

    return make_fx(lambda x, y: torch.bmm(x, y).sin(), tracing_mode="fake")(a, b)


@pytest.mark.parametrize("name", ["shared input (full batch)", "few output columns", "few columns, aᵀ view",
                                  "shared b stays bmm", "wide output stays bmm", "square stays bmm"])
def test_decomposed_graph_computes_the_same_product(name):
    """The rewritten ATen graph gives bmm's product (to float rounding) on every layout vmap makes, and rewrites
    exactly the products the rule names."""
    (chains, m, k, n, options), _ = CASES[name]
    a, b = _operands(chains, m, k, n, **options)
    gm = _traced_bmm(a, b)
    count = batched_gemm.decompose_small_products(gm.graph)
    gm.recompile()
    assert count == int(batched_gemm.small_product(m, k, n))
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
