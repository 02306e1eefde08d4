"""The SGLD engine (lib.sgld) behind lib.llc: one step against Eq. 12 computed by hand, the fused update of
batching="loop" against the textbook one, MALA only when asked and never changing the chains, the
coupled targets' MALA independent of their order, the compile options."""
import math

import numpy as np
import pytest
import torch

from lib import known_llc, llc, sgld
from lib.known_llc import squared_error

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py

RUN = dict(gamma=3.0, eps=1e-3, chains=3, burn_in=0, seed=7, device="cpu", progress=False)


@pytest.fixture(scope="module")
def problem():
    return known_llc.regular_problem(4, n=30, seed=5)


def one_step_by_hand(problem, nbeta, gamma, eps, chains, seed):
    """w_1 = w* − (ε/2)(nβ ∇L_n(w*) + γ·0) + √ε ξ in float64, ξ from the generator seeded as lib.sgld documents
    (chunk 0: seed · 1,000,003 + 7919), full batch."""
    w0 = torch.cat([p.detach().reshape(-1) for p in problem.model.parameters()]).double()
    model = problem.model.double()
    try:
        loss = squared_error(model, tuple(t.double() for t in problem.data)).mean()
        grad = torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, list(model.parameters()))])
    finally:
        problem.model.float()
    xi = torch.randn(chains, w0.numel(), generator=torch.Generator().manual_seed(seed * 1_000_003 + 7919))
    return (w0 - 0.5 * eps * nbeta * grad) + math.sqrt(eps) * xi.double()


@pytest.mark.parametrize("batching", ["vmap", "loop"])
def test_one_step_is_eq_12_by_hand(problem, batching):
    """The state after one step (a snapshot of coupled identical targets) is Eq. 12 computed independently."""
    n = problem.data[0].shape[0]
    res = llc.coupled_targets(problem.model, squared_error, [problem.data, problem.data], nbeta=200.0, draws=2,
                              batch_size=n, batching=batching, snapshots=2, **RUN)
    assert res.snapshot_steps == [1, 2]
    want = one_step_by_hand(problem, 200.0, RUN["gamma"], RUN["eps"], RUN["chains"], RUN["seed"])
    np.testing.assert_allclose(res.positions[0, :, 0], want.numpy(), rtol=0, atol=2e-6)
    np.testing.assert_array_equal(res.positions[0], res.positions[1])  # identical targets stay identical


@pytest.mark.parametrize("batching", ["vmap", "loop"])
def test_second_step_pulls_towards_w_star_with_gamma(problem, batching):
    """After two steps the localisation term γ(w_1 − w*) enters with weight ε/2 (a wrong factor moves w_2)."""
    n = problem.data[0].shape[0]
    kw = dict(RUN, gamma=0.0)
    flat = dict(nbeta=1e-9, draws=2, batch_size=n, batching=batching, snapshots=2)
    free = llc.coupled_targets(problem.model, squared_error, [problem.data] * 2, **flat, **kw)
    pulled = llc.coupled_targets(problem.model, squared_error, [problem.data] * 2, **flat, **dict(kw, gamma=50.0))
    w0 = torch.cat([p.detach().reshape(-1) for p in problem.model.parameters()]).numpy()
    w1 = free.positions[0, :, 0]
    np.testing.assert_allclose(pulled.positions[0, :, 0], w1, atol=1e-6)  # w_1 = w* + √ε ξ_0 either way
    # w_2 = w_1 − (ε/2)·γ(w_1 − w*) + √ε ξ_1, and without γ: w_1 + √ε ξ_1
    want = free.positions[0, :, 1] - 0.5 * RUN["eps"] * 50.0 * (w1 - w0)
    np.testing.assert_allclose(pulled.positions[0, :, 1], want, atol=2e-6)


@pytest.mark.parametrize("batch_size", [30, 8])
def test_loop_fused_update_matches_vmap_textbook(problem, batch_size):
    a = llc.estimate_llc(problem.model, squared_error, problem.data, nbeta=300.0, draws=200, batch_size=batch_size,
                         batching="vmap", **RUN)
    b = llc.estimate_llc(problem.model, squared_error, problem.data, nbeta=300.0, draws=200, batch_size=batch_size,
                         batching="loop", **RUN)
    np.testing.assert_allclose(a.loss, b.loss, rtol=1e-4, atol=1e-7)
    assert a.llc == pytest.approx(b.llc, rel=1e-3)


@pytest.mark.parametrize("batching", ["vmap", "loop"])
def test_mala_only_when_asked_and_never_changes_the_chains(problem, batching):
    kw = dict(nbeta=300.0, draws=100, batch_size=8, batching=batching, **RUN)
    off = llc.estimate_llc(problem.model, squared_error, problem.data, **kw)  # default: minibatches, no MALA
    on = llc.estimate_llc(problem.model, squared_error, problem.data, mala=True, **kw)
    assert np.isnan(off.diagnostics["mala_acceptance"]).all()
    acc = on.diagnostics["mala_acceptance"]
    assert np.isfinite(acc).all() and ((acc > 0) & (acc <= 1)).all()
    np.testing.assert_array_equal(off.loss, on.loss)
    full = llc.estimate_llc(problem.model, squared_error, problem.data, **dict(kw, batch_size=30))
    assert np.isfinite(full.diagnostics["mala_acceptance"]).all()  # full batches: computed by default (exact)
    with pytest.raises(llc.LLCInputError, match="'mala'"):
        llc.estimate_llc(problem.model, squared_error, problem.data, mala="yes", **kw)


@pytest.mark.parametrize("batching", ["vmap", "loop"])
def test_mala_of_coupled_targets_is_each_targets_own(problem, batching):
    """Target k of a coupled run is the chain a run on data k alone makes with the same seed (same indices and
    noise), so its MALA acceptance is that run's, whatever the targets' order."""
    x, y = problem.data
    datas = [(x, y), (x, 1.3 * y), (x, 0.7 * y)]
    kw = dict(nbeta=300.0, draws=60, batch_size=8, batching=batching, mala=True, **RUN)
    both = llc.coupled_targets(problem.model, squared_error, datas, **kw)
    flipped = llc.coupled_targets(problem.model, squared_error, datas[::-1], **kw)
    for k, data in enumerate(datas):
        alone = llc.estimate_llc(problem.model, squared_error, data, **kw)
        np.testing.assert_array_equal(both.results[k].loss, alone.loss)
        np.testing.assert_allclose(both.results[k].diagnostics["mala_acceptance"],
                                   alone.diagnostics["mala_acceptance"], rtol=1e-12)
        np.testing.assert_allclose(flipped.results[len(datas) - 1 - k].diagnostics["mala_acceptance"],
                                   alone.diagnostics["mala_acceptance"], rtol=1e-12)


def test_noise_drawn_scaled_is_randn_times_sqrt_eps():
    """The engine draws √ε ξ with normal_(0, √ε); it is bit-equal to randn · √ε from the same generator, which
    keeps the vmap path's chains those of the textbook form."""
    a = torch.randn(3, 1000, generator=torch.Generator().manual_seed(11)).mul_(math.sqrt(3e-4))
    b = torch.empty(3, 1000).normal_(0.0, math.sqrt(3e-4), generator=torch.Generator().manual_seed(11))
    assert torch.equal(a, b)
    # sgld.draw_noise is that draw; at scale 1 it is torch.randn itself (the coupled grid's unit noise)
    c = sgld.draw_noise(torch.empty(3, 1000), torch.Generator().manual_seed(11), math.sqrt(3e-4))
    assert torch.equal(a, c)
    for dtype in (torch.float32, torch.float64):
        unit = sgld.draw_noise(torch.empty(3, 17, dtype=dtype), torch.Generator().manual_seed(5))
        assert torch.equal(unit, torch.randn(3, 17, dtype=dtype, generator=torch.Generator().manual_seed(5)))


def test_the_seed_rule_is_one_closed_form():
    """Chunk j of a run seeded s draws its minibatches from s·1,000,003 + j and its noise from s·1,000,003 + j + 7919
    (sgld.chunk_seeds), through the generators of sgld.chunk_generators."""
    for seed, j in [(0, 0), (7, 0), (7, 3), (2 ** 40 + 1, 11)]:
        assert sgld.chunk_seeds(seed, j) == (seed * 1_000_003 + j, seed * 1_000_003 + j + 7919)
        gen, noise_gen = sgld.chunk_generators(seed, j, "cpu")
        assert gen.initial_seed() == seed * 1_000_003 + j and noise_gen.initial_seed() == seed * 1_000_003 + j + 7919


def test_the_sampler_draws_through_the_seed_rule(problem, monkeypatch):
    """run_chunk takes its generators from sgld.chunk_seeds itself: a rule shifted by one seed gives the chains
    of the next seed, bit for bit."""
    n = problem.data[0].shape[0]
    kw = dict(RUN, nbeta=200.0, draws=4, batch_size=8)
    real = sgld.chunk_seeds
    nxt = llc.estimate_llc(problem.model, squared_error, problem.data, **{**kw, "seed": RUN["seed"] + 1})
    monkeypatch.setattr(sgld, "chunk_seeds", lambda seed, j: real(seed + 1, j))
    shifted = llc.estimate_llc(problem.model, squared_error, problem.data, **kw)
    assert np.array_equal(shifted.loss, nxt.loss) and n > kw["batch_size"]


def test_eq12_coefficients_and_the_update_arrangements_agree():
    """(keep, pull, push) = (1 − εγ/2, εγ/2, εnβ/2); the fused, kicked and textbook arrangements of Eq. 12 are one
    update up to rounding."""
    half_eps, gamma, nbeta = 0.5 * 1e-3, 40.0, 300.0
    keep, pull, push = sgld.eq12_coefficients(half_eps, gamma, nbeta)
    assert (keep, pull, push) == (1 - half_eps * gamma, half_eps * gamma, half_eps * nbeta)
    g = torch.Generator().manual_seed(0)
    w0, w, grad = (torch.randn(n, 6, generator=g, dtype=torch.float64) for n in (1, 4, 4))
    sqrt_eps = torch.tensor(math.sqrt(2 * half_eps), dtype=torch.float64)
    xi = sgld.draw_noise(torch.empty(4, 6, dtype=torch.float64), g)
    noise = sqrt_eps * xi
    textbook = sgld.textbook_update(w, half_eps * (nbeta * grad + gamma * (w - w0)), noise, out=torch.empty_like(w))
    fused = sgld.fused_update(w, grad, noise, w0, keep, pull, push, out=torch.empty_like(w))
    kicked = sgld.kicked_update_(w.clone(), grad, sgld.kick(pull * w0, sqrt_eps, xi), keep,
                                 torch.tensor(push, dtype=torch.float64))
    torch.testing.assert_close(fused, textbook, rtol=0, atol=1e-13)
    torch.testing.assert_close(kicked, textbook, rtol=0, atol=1e-13)


def test_compile_options_refused_before_sampling(problem):
    kw = dict(nbeta=300.0, draws=10, batch_size=8, **RUN)
    with pytest.raises(llc.LLCInputError, match="'compile'"):
        llc.estimate_llc(problem.model, squared_error, problem.data, compile="always", **kw)


def test_compile_pays_only_for_long_runs_on_measured_devices(monkeypatch):
    gflop = 1e9
    assert sgld.COMPILE_SAVING["cpu"] > 0  # measured: the compiled loop step a few % faster on the CPU
    assert sgld.compile_pays(gflop, 10 ** 12, "cpu", threads=1) and not sgld.compile_pays(gflop, 10, "cpu")
    assert not sgld.compile_pays(gflop, 10 ** 12, "meta")  # nothing measured there: eager
    never = lambda: pytest.fail("the FLOPs were counted where no saving was measured")  # noqa: E731
    assert not sgld.compile_pays(never, 10 ** 12, "meta")
    monkeypatch.setitem(sgld.COMPILE_SAVING, "cpu", -0.06)  # a measured loss: never, and nothing counted
    assert not sgld.compile_pays(never, 10 ** 12, "cpu", threads=1)
    # where a saving was measured, compile pays when saving · predicted eager seconds > the cold compile
    monkeypatch.setitem(sgld.COMPILE_SAVING, "cpu", 0.1)
    threshold = sgld.COMPILE_SECONDS_COLD["cpu"] / 0.1 * sgld.EAGER_FLOP_PER_S["cpu"] / gflop
    assert not sgld.compile_pays(gflop, int(0.9 * threshold), "cpu", threads=1)
    assert sgld.compile_pays(gflop, int(1.1 * threshold) + 1, "cpu", threads=1)
    assert sgld.compile_pays(lambda: gflop, int(1.1 * threshold) + 1, "cpu", threads=1)
    assert not sgld.compile_pays(gflop, int(1.1 * threshold) + 1, "cpu", threads=2)  # twice the rate: not yet


def test_step_flops_of_a_linear_model_by_hand():
    """y = W x (2 × 3), squared error on m = 5 rows: forward 2·m·3·2 FLOPs, backward (grad of W only) the same."""
    model = torch.nn.Linear(3, 2, bias=False)
    data = (torch.randn(10, 3), torch.randn(10, 2))
    flops = sgld.step_flops(model, lambda m, b: ((m(b[0]) - b[1]) ** 2).sum(-1), data, 5)
    assert flops == 2 * (2 * 5 * 3 * 2)


@pytest.mark.slow
@pytest.mark.parametrize("batching, batch_size", [("loop", 16), ("vmap", 16), ("vmap", 64)])
def test_compiled_and_eager_estimates_agree(tmp_path, monkeypatch, batching, batch_size):
    """A torch.compile'd step gives the eager chains up to float rounding (so λ̂ within its s.e.): the per-chain
    loss (loop), and the whole vmapped gradient, whose (rows × 6) @ (6 × 3) and (3 × 1) products the CPU pass
    sums in loops (minibatches and the full batch, where the data are one operand shared by every chain)."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 3), torch.nn.Tanh(), torch.nn.Linear(3, 1))
    x = torch.randn(64, 6)
    data = (x, torch.sin(x.sum(-1, keepdim=True)))
    kw = dict(nbeta=100.0, gamma=10.0, eps=1e-4, chains=4, draws=150, burn_in=50, batch_size=batch_size, seed=1,
              device="cpu", progress=False, batching=batching)
    eager = llc.estimate_llc(model, squared_error, data, compile=False, **kw)
    compiled = llc.estimate_llc(model, squared_error, data, compile=True, **kw)
    assert compiled.diagnostics["compile_seconds"] > 0 and eager.diagnostics["compile_seconds"] == 0
    np.testing.assert_allclose(compiled.loss, eager.loss, rtol=1e-3, atol=1e-6)
    assert abs(compiled.llc - eager.llc) < eager.se


@pytest.mark.slow
def test_compiled_vmap_step_sums_the_small_products(tmp_path, monkeypatch):
    """On the CPU the compiled vmapped step of reduced-rank regression (5, 3, 5) on minibatches of 16 rows per chain
    has all five of its products rewritten by lib.batched_gemm's pass (two forward, three backward) and keeps the
    eager gradients; on a full batch of 200 rows none is (the rows exceed LONGEST_DIM)."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    seen = []
    original = sgld.small_products_pass

    def recording():
        seen.append(original())
        return seen[-1]

    monkeypatch.setattr(sgld, "small_products_pass", recording)
    sgld.inductor_backend.cache_clear()  # a backend made with the recording pass, dropped at the end
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 3, bias=False), torch.nn.Linear(3, 5, bias=False))
    wrapper = sgld.LossModule(model, squared_error)
    flat = sgld.FlatParameters(model)
    w = flat.w0.expand(8, -1) + 0.1 * torch.randn(8, flat.w0.numel())
    for full_batch, x, y in ((False, torch.randn(8, 16, 5), torch.randn(8, 16, 5)),
                             (True, torch.randn(200, 5), torch.randn(200, 5))):
        g_eager, loss_eager = sgld.vmap_step(wrapper, flat, full_batch, 2)(w, x, y)
        g, loss = sgld.vmap_step(wrapper, flat, full_batch, 2, compile_on="cpu")(w, x, y)
        torch.testing.assert_close(g, g_eager, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(loss, loss_eager, rtol=1e-5, atol=1e-6)
    sgld.inductor_backend.cache_clear()
    assert [p.rewritten for p in seen] == [5]  # one backend: the minibatch graph's five, the full batch's none


@pytest.mark.parametrize("batching", ["vmap", "loop"])
def test_compiling_is_done_and_timed_before_the_sampling(problem, monkeypatch, batching):
    """With compile=True every compile happens before the sampling clock: building the compiled step (a process's
    first build imports the compiler, seconds) and its first call at each chunk's shape (vmap: 2 and 1 rows for
    chains = 5 in chunks of 2; the loop: one chain) are in compile_seconds, not in the sampling seconds."""
    calls, chunk_starts, build_delay = [], [], 1.0

    def slow_compile(fn, device):  # a stand-in for torch.compile: slow to build, then records each call's rows
        import time

        time.sleep(build_delay)

        def compiled(*args, **kwargs):
            first = args[0]
            calls.append(len(first) if isinstance(first, torch.Tensor) and first.dim() == 2 else 1)
            return fn(*args, **kwargs)
        return compiled

    original_run_chunk = sgld.run_chunk

    def recording_run_chunk(*args, **kwargs):
        chunk_starts.append(sorted(set(calls)))
        return original_run_chunk(*args, **kwargs)

    monkeypatch.setattr(sgld, "compile_step", slow_compile)
    monkeypatch.setattr(sgld, "run_chunk", recording_run_chunk)
    monkeypatch.setattr(sgld, "compile_cache", lambda key: __import__("contextlib").nullcontext())
    n = problem.data[0].shape[0]
    res = llc.estimate_llc(problem.model, squared_error, problem.data, **dict(RUN, chains=5), draws=3, nbeta=n,
                           batch_size=n, chunk_size=2, batching=batching, compile=True)
    assert res.diagnostics["compile_seconds"] >= build_delay
    assert res.seconds < build_delay
    assert chunk_starts and all(seen == ([1] if batching == "loop" else [1, 2]) for seen in chunk_starts)


@pytest.mark.slow
@pytest.mark.parametrize("batching", ["vmap", "loop"])
def test_compiled_steps_of_new_models_reuse_the_compile(tmp_path, monkeypatch, batching):
    """Every compiled step shares one Inductor backend (lib.sgld.inductor_backend), so a new model of the same
    architecture and loss reuses the compiled graph instead of recompiling: five calls stay under a recompile
    limit of 2, which a new backend per torch.compile exceeded (and then ran eager without saying so), and their
    chains still match eager ones."""
    import torch._dynamo

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    torch._dynamo.reset()
    assert sgld.inductor_backend("cpu") is sgld.inductor_backend("cpu")
    limits = torch._dynamo.config.patch(recompile_limit=2, fail_on_recompile_limit_hit=True)
    for i in range(5):
        torch.manual_seed(i)
        model = torch.nn.Sequential(torch.nn.Linear(6, 3), torch.nn.Tanh(), torch.nn.Linear(3, 1))
        x = torch.randn(64, 6)
        data = (x, torch.sin(x.sum(-1, keepdim=True)))
        kw = dict(nbeta=100.0, gamma=10.0, eps=1e-4, chains=4, draws=20, burn_in=0, batch_size=64, seed=i,
                  device="cpu", progress=False, batching=batching)
        with limits:
            compiled = llc.estimate_llc(model, squared_error, data, compile=True, **kw)
        eager = llc.estimate_llc(model, squared_error, data, compile=False, **kw)
        np.testing.assert_allclose(compiled.loss, eager.loss, rtol=1e-4, atol=1e-7)
    torch._dynamo.reset()
