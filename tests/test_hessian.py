"""lib.hessian: Hessian-vector products, Lanczos extremes and Hutchinson's trace, against a closed-form
quadratic and the dense Hessian of a small model (numpy.linalg.eigvalsh, its trace)."""
import numpy as np
import pytest
import torch
from torch import nn
from torch.func import functional_call

from lib import hessian as hs


def quadratic(seed=0, d=12):
    """L(w) = ½ wᵀAw + bᵀw over two parts a (d−4) and c (2 × 2): H = A, known."""
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    ev = np.concatenate([[9.0, -7.0, 5.0], np.linspace(-1, 1, d - 3)])
    A = torch.as_tensor((Q * ev) @ Q.T)
    b = torch.as_tensor(rng.standard_normal(d))
    params = {"a": torch.as_tensor(rng.standard_normal(d - 4)), "c": torch.as_tensor(rng.standard_normal((2, 2)))}

    def loss(p):
        w = torch.cat([p["a"], p["c"].reshape(-1)])
        return 0.5 * w @ A @ w + b @ w

    return loss, params, A.numpy(), ev


@pytest.mark.parametrize("method", ["forward", "reverse"])
def test_products_equal_the_closed_form(method):
    loss, params, A, _ = quadratic()
    v = {"a": torch.arange(8.0, dtype=torch.float64), "c": torch.ones(2, 2, dtype=torch.float64)}
    hv = hs.hessian_vector_product(loss, params, v, method=method)
    flat = np.concatenate([v["a"].numpy(), v["c"].numpy().ravel()])
    got = np.concatenate([hv["a"].numpy(), hv["c"].numpy().ravel()])
    np.testing.assert_allclose(got, A @ flat, rtol=1e-12, atol=1e-12)
    # a list of parts in the same order
    hl = hs.hessian_vector_product(lambda ps: loss({"a": ps[0], "c": ps[1]}), [params["a"], params["c"]],
                                   [v["a"], v["c"]], method=method)
    np.testing.assert_allclose(hl[1].numpy(), hv["c"].numpy(), rtol=1e-12)


def test_lanczos_finds_the_closed_form_extremes():
    loss, params, _, ev = quadratic()
    np.testing.assert_allclose(hs.top_eigenvalues(loss, params, k=3), [9.0, -7.0, 5.0], rtol=1e-9)
    np.testing.assert_allclose(hs.top_eigenvalues(loss, params, k=2, which="LA"), [9.0, 5.0], rtol=1e-9)
    np.testing.assert_allclose(hs.top_eigenvalues(loss, params, k=1, which="SA"), [-7.0], rtol=1e-9)
    # deterministic given the seed
    assert np.array_equal(hs.top_eigenvalues(loss, params, k=2, seed=3), hs.top_eigenvalues(loss, params, k=2, seed=3))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Linear(5, 7)
        self.b = nn.Linear(7, 3)

    def forward(self, x):
        return self.b(torch.tanh(self.a(x)))


@pytest.fixture
def net():
    model = Net().double()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(40, 5, generator=g, dtype=torch.float64)
    y = torch.randint(0, 3, (40,), generator=g)
    return model, x, y


def part_loss(model, x, y, names):
    """The loss as a closure of a named part of the weights (the rest held at their values), and that part."""
    frozen = {k: v.detach() for k, v in model.named_parameters()}
    part = {k: frozen[k] for k in names}

    def loss(p):
        return nn.functional.cross_entropy(functional_call(model, {**frozen, **p}, (x,)), y)

    return loss, part


def dense_hessian(loss, part):
    keys = list(part)
    sizes = [part[k].numel() for k in keys]

    def flat_loss(w):
        ps = [t.view(part[k].shape) for t, k in zip(torch.split(w, sizes), keys)]
        return loss(dict(zip(keys, ps)))

    w = torch.cat([part[k].reshape(-1) for k in keys])
    return torch.autograd.functional.hessian(flat_loss, w).numpy()


@pytest.mark.parametrize("names", [["a.weight", "a.bias", "b.weight", "b.bias"], ["a.weight"]])
def test_spectrum_and_trace_match_the_dense_hessian(net, names):
    model, x, y = net
    loss, part = part_loss(model, x, y, names)
    H = dense_hessian(loss, part)
    ev = np.linalg.eigvalsh(H)
    want = ev[np.argsort(-np.abs(ev))][:4]
    np.testing.assert_allclose(hs.top_eigenvalues(loss, part, k=4), want, rtol=1e-7, atol=1e-10)
    np.testing.assert_allclose(hs.top_eigenvalues(loss, part, k=2, which="SA"), np.sort(ev)[:2], rtol=1e-6, atol=1e-9)
    # Hutchinson: unbiased, its error within 4 standard errors; the standard error itself close to the
    # exact one, sqrt(2 Σ_{i≠j} H_ij² / samples)
    est, se = hs.hutchinson_trace(loss, part, samples=400, seed=2)
    exact_se = np.sqrt(2 * (np.sum(H ** 2) - np.sum(np.diag(H) ** 2)) / 400)
    assert abs(est - np.trace(H)) < 4 * exact_se
    assert 0.7 < se / exact_se < 1.3
    # forward and reverse products agree
    v = {k: torch.ones_like(t) for k, t in part.items()}
    f, r = (hs.hessian_vector_product(loss, part, v, method=m) for m in ("forward", "reverse"))
    for k in part:
        np.testing.assert_allclose(f[k].numpy(), r[k].numpy(), rtol=1e-10, atol=1e-13)


def test_hutchinson_is_exact_for_a_diagonal_hessian_and_fails_a_wrong_trace():
    h = torch.tensor([3.0, -1.0, 0.5, 2.0], dtype=torch.float64)
    loss = lambda p: 0.5 * (h * p["w"] ** 2).sum()
    est, se = hs.hutchinson_trace(loss, {"w": torch.zeros(4, dtype=torch.float64)}, samples=5)
    assert est == pytest.approx(4.5, rel=1e-14) and se == pytest.approx(0.0, abs=1e-14)
    # a planted bug: Gaussian z scaled by 2 would give 4 tr H; the estimator above must not
    assert abs(est - 4 * 4.5) > 1


def test_bad_parameters_are_refused():
    loss, params, _, _ = quadratic()
    with pytest.raises(ValueError, match="'k'"):
        hs.top_eigenvalues(loss, params, k=12)
    with pytest.raises(ValueError, match="'which'"):
        hs.top_eigenvalues(loss, params, which="BE")
    with pytest.raises(ValueError, match="'samples'"):
        hs.hutchinson_trace(loss, params, samples=0)
    with pytest.raises(ValueError, match="'method'"):
        hs.hessian_vector_product(loss, params, params, method="dense")
    with pytest.raises(ValueError, match="'vectors'"):
        hs.hessian_vector_product(loss, params, {"a": torch.zeros(3), "c": torch.zeros(2, 2)})
