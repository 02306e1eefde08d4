"""The SGLD LLC estimator (lib.llc): correctness against exact targets, reproducibility,
bad input refused before sampling, divergence, coupling, diagnostics, torchrun."""
import json
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch

from lib import known_llc, llc, sgld
from lib.known_llc import squared_error


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py

SMALL = dict(nbeta=1000.0, gamma=1.0, eps=1e-4, chains=8, draws=300, burn_in=100, batch_size=50, seed=0,
             device="cpu", progress=False)


@pytest.fixture(scope="module")
def regular():
    return known_llc.regular_problem(3, n=50, seed=1)


def test_result_shapes_and_burn_in_excluded(regular):
    res = llc.estimate_llc(regular.model, squared_error, regular.data, **SMALL)
    assert res.loss.shape == (8, 200) and res.per_chain.shape == (8,)
    assert res.llc == pytest.approx(res.per_chain.mean())
    assert res.llc == pytest.approx(1000.0 * (res.loss.mean() - res.init_loss))
    assert res.diagnostics["ess"].shape == (8,) and np.isfinite(res.diagnostics["rhat"])
    assert res.init_loss == pytest.approx(0.0, abs=1e-12)


def test_burn_in_draws_change_nothing_after_them(regular):
    """The kept draws of a run with burn-in are the tail of the run without it (same seed)."""
    a = llc.estimate_llc(regular.model, squared_error, regular.data, **SMALL)
    b = llc.estimate_llc(regular.model, squared_error, regular.data, **{**SMALL, "burn_in": 0})
    np.testing.assert_array_equal(a.loss, b.loss[:, 100:])
    assert not np.array_equal(a.per_chain, b.per_chain)


def test_same_seed_bit_identical_other_seed_differs(regular):
    a = llc.estimate_llc(regular.model, squared_error, regular.data, **SMALL)
    b = llc.estimate_llc(regular.model, squared_error, regular.data, **SMALL)
    c = llc.estimate_llc(regular.model, squared_error, regular.data, **{**SMALL, "seed": 1})
    np.testing.assert_array_equal(a.loss, b.loss)
    assert not np.array_equal(a.loss, c.loss)


def test_regular_matches_exact_euler_target():
    """Full-batch SGLD on a quadratic loss has a closed-form stationary mean (both ways)."""
    p = known_llc.regular_problem(3, n=40, seed=2)
    x = p.data[0]
    sigma = (x.T @ x / 40).numpy()
    settings = dict(nbeta=500.0, gamma=1.0, chains=64, draws=1500, burn_in=300, batch_size=40, seed=3, device="cpu",
                    progress=False)
    for eps in (4e-4, 1e-4):
        res = llc.estimate_llc(p.model, squared_error, p.data, eps=eps, **settings)
        target = known_llc.regular_sgld_mean(sigma, 500.0, 1.0, eps)
        assert abs(res.llc - target) < 4 * res.se, (eps, res.llc, target, res.se)
    # the check can fail: the same run is far from a wrong target (d/2 + 20%)
    assert abs(res.llc - 1.2 * 1.5) > 4 * res.se


def test_minibatch_gradient_still_close(regular):
    res = llc.estimate_llc(regular.model, squared_error, regular.data,
                           **{**SMALL, "batch_size": 10, "chains": 32, "draws": 800, "burn_in": 200})
    assert res.llc == pytest.approx(1.5, rel=0.2)
    assert res.diagnostics["mala_exact"] is False


@pytest.mark.parametrize("change,match", [
    (dict(eps=0.0), "'eps'"), (dict(eps=-1e-3), "'eps'"), (dict(eps=float("nan")), "'eps'"),
    (dict(chains=0), "'chains'"), (dict(draws=100, burn_in=100), "'draws'"), (dict(batch_size=51), "'batch_size'"),
    (dict(gamma=-1.0), "'gamma'"), (dict(nbeta=0.0), "'nbeta'"), (dict(seed=-1), "'seed'")])
def test_bad_settings_refused_before_sampling(regular, change, match):
    calls = []

    def counting_loss(model, batch):
        calls.append(1)
        return squared_error(model, batch)

    with pytest.raises(llc.LLCInputError, match=match):
        llc.estimate_llc(regular.model, counting_loss, regular.data, **{**SMALL, **change})
    assert not calls


def test_bad_loss_and_data_refused(regular):
    with pytest.raises(llc.LLCInputError, match="shape"):
        llc.estimate_llc(regular.model, lambda m, b: squared_error(m, b).mean(), regular.data, **SMALL)
    with pytest.raises(llc.LLCInputError, match="shape"):
        llc.estimate_llc(regular.model, lambda m, b: squared_error(m, b)[:, None], regular.data, **SMALL)
    x, y = regular.data
    with pytest.raises(llc.LLCInputError, match="one length"):
        llc.estimate_llc(regular.model, squared_error, (x, y[:-1]), **SMALL)
    with pytest.raises(llc.LLCInputError, match="non-finite"):
        llc.estimate_llc(regular.model, lambda m, b: squared_error(m, b) * float("nan"), regular.data, **SMALL)
    # the good call passes
    llc.estimate_llc(regular.model, squared_error, regular.data, **{**SMALL, "draws": 3, "burn_in": 1})


def test_memory_check(regular, monkeypatch):
    monkeypatch.setattr(sgld, "available_bytes", lambda device: 1000)
    with pytest.raises(llc.LLCMemoryError, match="batch_size"):
        llc.estimate_llc(regular.model, squared_error, regular.data, **SMALL)
    monkeypatch.setattr(sgld, "available_bytes", lambda device: 10**6)
    with pytest.raises(llc.LLCMemoryError, match="chunk_size"):
        llc.estimate_llc(regular.model, squared_error, regular.data, chunk_size=10**6, **SMALL)
    llc.estimate_llc(regular.model, squared_error, regular.data, chunk_size=2, **{**SMALL, "draws": 3, "burn_in": 1})


def test_divergent_chains_flagged_and_excluded():
    """On y = x w² (quartic loss) explicit Euler blows up once a chain wanders past |w| ~ 1/√(ε nβ)."""
    p = known_llc.normal_crossing_problem([2], n=50)
    kw = {**SMALL, "chains": 16}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = llc.estimate_llc(p.model, squared_error, p.data, **{**kw, "eps": 1.2e-2})
    flagged = res.diagnostics["divergent"]
    assert 0 < len(flagged) < 16
    assert all(d["eps"] == 1.2e-2 and 0 <= d["step"] < 300 for d in flagged)
    assert np.isfinite(res.llc) and any("diverged" in str(w.message) for w in caught)
    bad = [d["chain"] for d in flagged]
    assert not np.any(np.isfinite(res.per_chain[bad]))
    good = np.setdiff1d(np.arange(16), bad)
    assert res.llc == pytest.approx(res.per_chain[good].mean())
    # the s.e. is over the chains kept: sd/√(finite chains), not /√(all chains)
    assert res.se == pytest.approx(res.per_chain[good].std(ddof=1) / np.sqrt(len(good)), rel=1e-12)
    assert len(good) < 16 and abs(res.se - res.per_chain[good].std(ddof=1) / 4.0) > 1e-6 * res.se
    calm = llc.estimate_llc(p.model, squared_error, p.data, **{**kw, "eps": 1e-3})
    assert calm.diagnostics["divergent"] == []
    with pytest.raises(llc.LLCDivergenceError, match="eps"):
        llc.estimate_llc(p.model, squared_error, p.data, **{**kw, "eps": 2e-2})


def test_chunking_splits_work_not_results_per_chunk(regular):
    a = llc.estimate_llc(regular.model, squared_error, regular.data, **{**SMALL, "chunk_size": 4})
    b = llc.estimate_llc(regular.model, squared_error, regular.data, **{**SMALL, "chunk_size": 4})
    np.testing.assert_array_equal(a.loss, b.loss)
    assert a.loss.shape == (8, 200)


def test_coupled_chains():
    p = known_llc.rrr_problem(4, 2, 3, 1, n=40)
    kw = {**SMALL, "batch_size": 40}
    same = llc.coupled_chains(p.model, squared_error, p.data, p.data, **kw)
    assert same.max_separation.max() == 0.0
    np.testing.assert_array_equal(same.a.loss, same.b.loss)
    single = llc.estimate_llc(p.model, squared_error, p.data, **kw)
    x, y = p.data
    other = llc.coupled_chains(p.model, squared_error, p.data, (x, y + 0.1), **kw)
    assert other.max_separation.max() > 0 and other.separation.shape == (8, 200)
    with pytest.raises(llc.LLCInputError, match="same number"):
        llc.coupled_chains(p.model, squared_error, p.data, (x[:-1], y[:-1]), **kw)
    assert single.loss.shape == same.a.loss.shape


def test_ess_and_rhat_both_ways():
    rng = np.random.default_rng(0)
    iid = rng.standard_normal((4, 4000))
    assert np.all(np.abs(llc.effective_sample_size(iid) / 4000 - 1) < 0.15)
    ar = np.zeros((4, 4000))
    for t in range(1, 4000):
        ar[:, t] = 0.9 * ar[:, t - 1] + rng.standard_normal(4)
    ess = llc.effective_sample_size(ar)
    assert np.all((ess > 4000 * 0.1 / 1.9 * 0.5) & (ess < 4000 * 0.1 / 1.9 * 1.6))
    assert llc.split_rhat(iid) < 1.01
    shifted = iid + np.array([0, 0, 0, 3.0])[:, None]
    assert llc.split_rhat(shifted) > 1.1
    drifting = iid + np.linspace(0, 3, 4000)
    assert llc.split_rhat(drifting) > 1.1


def _fake(eps, per_chain, seed=0, se=None):
    """An LLCResult holding only what the extrapolations read (per-chain estimates at one ε)."""
    per_chain = np.asarray(per_chain, dtype=float)
    good = per_chain[np.isfinite(per_chain)]
    se = float(good.std(ddof=1) / np.sqrt(len(good))) if se is None else se
    return llc.LLCResult(llc=float(good.mean()), se=se, per_chain=per_chain, loss=np.zeros((len(per_chain), 1)),
                         init_loss=0.0, nbeta=1.0, diagnostics={"divergent": []},
                         settings={"eps": eps, "seed": seed, "chains": len(per_chain)})


def test_extrapolate_eps_independent_runs_closed_form():
    """Independent runs (different seeds): the weighted line's intercept and its s.e. by the normal equations
    written out by hand, Var(intercept) = Σwε² / (Σw Σwε² − (Σwε)²); the slope's s.e. differs."""
    eps, ys, ses = np.array([0.2, 0.1, 0.05]), np.array([3.9, 3.5, 3.2]), np.array([0.05, 0.08, 0.12])
    runs = [_fake(e, [y - 1, y + 1], seed=k, se=s) for k, (e, y, s) in enumerate(zip(eps, ys, ses))]
    value, se = llc.extrapolate_eps(runs)
    w = 1 / ses ** 2
    det = w.sum() * (w * eps ** 2).sum() - (w * eps).sum() ** 2
    slope = (w.sum() * (w * eps * ys).sum() - (w * eps).sum() * (w * ys).sum()) / det
    intercept = ((w * ys).sum() - slope * (w * eps).sum()) / w.sum()
    assert value == pytest.approx(intercept, rel=1e-12)
    assert se == pytest.approx(np.sqrt((w * eps ** 2).sum() / det), rel=1e-12)
    assert se != pytest.approx(np.sqrt(w.sum() / det), rel=1e-3)  # the slope's s.e.
    # two points: the line through them, s.e. sqrt(ε₂²s₁² + ε₁²s₂²) / (ε₁ − ε₂)
    value, se = llc.extrapolate_eps(runs[:2])
    assert value == pytest.approx((0.2 * 3.5 - 0.1 * 3.9) / 0.1)
    assert se == pytest.approx(np.sqrt(0.1 ** 2 * 0.05 ** 2 + 0.2 ** 2 * 0.08 ** 2) / 0.1)
    with pytest.raises(llc.LLCInputError):
        llc.extrapolate_eps(runs[:1])
    with pytest.raises(llc.LLCInputError):
        llc.extrapolate_eps([runs[0], _fake(0.2, [1.0, 2.0], seed=5)])


def test_extrapolate_eps_paired_runs_chain_by_chain():
    """Runs sharing seed and chains: each chain's own line, (ε₁ y₂ − ε₂ y₁)/(ε₁ − ε₂), then mean ± sd/√C over
    the chains finite at both ε."""
    rng = np.random.default_rng(0)
    common = rng.normal(0, 1, 40)  # the shared noise: strongly correlated per-chain estimates
    a = 3.0 + 0.2 * 2.0 + common + 0.1 * rng.normal(size=40)
    b = 3.0 + 0.1 * 2.0 + common + 0.1 * rng.normal(size=40)
    b[7] = np.nan  # a chain that diverged at one step size only is left out of both
    value, se = llc.extrapolate_eps([_fake(0.2, a), _fake(0.1, b)])
    z = (0.2 * b - 0.1 * a) / (0.2 - 0.1)
    z = z[np.isfinite(z)]
    assert value == pytest.approx(z.mean(), rel=1e-12) and se == pytest.approx(z.std(ddof=1) / np.sqrt(39), rel=1e-12)
    independent = llc.extrapolate_eps([_fake(0.2, a), _fake(0.1, b)], paired=False)
    assert independent[1] > 1.5 * se  # ignoring the pairing overstates the s.e. here
    with pytest.raises(llc.LLCInputError, match="paired"):
        llc.extrapolate_eps([_fake(0.2, a, seed=0), _fake(0.1, b, seed=1)], paired=True)


def test_independent_seed():
    seeds = {llc.independent_seed(s, i) for s in range(4) for i in range(4)}
    assert len(seeds) == 16 and llc.independent_seed(3, 1) == llc.independent_seed(3, 1)
    with pytest.raises(llc.LLCInputError, match="seed"):
        llc.independent_seed(-1, 0)


def test_mala_acceptance_falls_with_step_size(regular):
    small = llc.estimate_llc(regular.model, squared_error, regular.data, **SMALL)
    large = llc.estimate_llc(regular.model, squared_error, regular.data, **{**SMALL, "eps": 2.5e-3})
    assert small.diagnostics["mala_acceptance"].mean() > 0.95
    assert large.diagnostics["mala_acceptance"].mean() < small.diagnostics["mala_acceptance"].mean() - 0.05


def test_sweep_and_plot(regular):
    import matplotlib

    matplotlib.use("Agg")
    out = llc.sweep(regular.model, squared_error, regular.data, grid={"eps": [1e-4, 2e-4]},
                    **{k: v for k, v in SMALL.items() if k not in ("eps", "progress")})
    assert [p["eps"] for p, _ in out] == [1e-4, 2e-4] and all(r is not None for _, r in out)
    ax_traces, _ = llc.plot_sweep(out, vary="eps", truth=1.5, chosen=1e-4)
    from lib.book.figures import legibility

    assert legibility(ax_traces.figure).ok  # its own figure fits the page with every text readable
    with pytest.raises(llc.LLCInputError, match="grid"):
        llc.sweep(regular.model, squared_error, regular.data, grid={"lr": [1]}, **SMALL)


def test_transformer_language_model_under_vmap():
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    from lib.models.causal_lm import sequence_loss

    torch.manual_seed(0)
    cfg = GPTNeoXConfig(vocab_size=32, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=16)
    model = GPTNeoXForCausalLM(cfg).eval()
    ids = torch.randint(0, 32, (64, 16))
    res = llc.estimate_llc(model, sequence_loss, (ids,), gamma=100.0, eps=1e-5, chains=2, draws=6, burn_in=2,
                           batch_size=4, seed=0, device="cpu", progress=False)
    assert res.loss.shape == (2, 4) and np.isfinite(res.llc)


class _Wide(torch.nn.Module):
    """Linear layers with biases on a 3-d input, a shared-weight input layer and a batched one."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = torch.nn.Linear(4, 6)
        self.b = torch.nn.Linear(6, 3, bias=False)
        self.frozen = torch.nn.Linear(3, 3)
        self.frozen.requires_grad_(False)

    def forward(self, x):
        return self.frozen(self.b(torch.tanh(self.a(x))))


def _wide_loss(model, batch):
    x, y = batch
    return ((model(x) - y) ** 2).mean(dim=(1, 2))


@pytest.mark.parametrize("problem", ["rrr", "wide"])
def test_full_batch_vmap_matches_per_chain_autograd(problem):
    """Full batches enter vmap unbatched (every chain sees the same data); the chains equal
    one plain autograd pass per chain up to float rounding, also for 3-d inputs and frozen layers."""
    if problem == "rrr":
        p = known_llc.rrr_problem(4, 2, 3, 1, n=40)
        model, loss_fn, data = p.model, squared_error, p.data
    else:
        model, loss_fn = _Wide(), _wide_loss
        data = (torch.randn(30, 5, 4), torch.randn(30, 5, 3))
    kw = {**SMALL, "batch_size": data[0].shape[0], "draws": 120, "burn_in": 20}
    vmapped = llc.estimate_llc(model, loss_fn, data, **kw)
    np.testing.assert_array_equal(vmapped.loss, llc.estimate_llc(model, loss_fn, data, **kw).loss)
    looped = llc.estimate_llc(model, loss_fn, data, batching="loop", **kw)
    np.testing.assert_allclose(vmapped.loss, looped.loss, rtol=1e-4, atol=1e-7)
    assert vmapped.llc == pytest.approx(looped.llc, rel=1e-3, abs=1e-4)


@pytest.mark.parametrize("batch_size", [10, 50])
def test_loop_batching_matches_vmap(batch_size):
    """batching="loop" (plain autograd per chain) samples the same chains as vmap, up to float rounding."""
    p = known_llc.rrr_problem(4, 2, 3, 1, n=50)
    kw = {**SMALL, "batch_size": batch_size, "draws": 120, "burn_in": 20}
    a = llc.estimate_llc(p.model, squared_error, p.data, **kw)
    b = llc.estimate_llc(p.model, squared_error, p.data, batching="loop", **kw)
    np.testing.assert_allclose(a.loss, b.loss, rtol=1e-4, atol=1e-7)
    c = llc.estimate_llc(p.model, squared_error, p.data, batching="loop", **kw)
    np.testing.assert_array_equal(b.loss, c.loss)
    coupled = llc.coupled_chains(p.model, squared_error, p.data, p.data, batching="loop", **kw)
    np.testing.assert_array_equal(coupled.a.loss, b.loss)


@pytest.mark.parametrize("bad", ["Loop", "python", 1, None])
def test_bad_batching_refused_before_sampling(regular, bad):
    calls = []

    def counting_loss(model, batch):
        calls.append(1)
        return squared_error(model, batch)

    with pytest.raises(llc.LLCInputError, match="'batching'"):
        llc.estimate_llc(regular.model, counting_loss, regular.data, batching=bad, **SMALL)
    with pytest.raises(llc.LLCInputError, match="'batching'"):
        llc.coupled_chains(regular.model, counting_loss, regular.data, regular.data, batching=bad, **SMALL)
    assert not calls


WORKER = r"""
import json, sys, torch
from lib import known_llc, llc, sgld
p = known_llc.regular_problem(3, n=50, seed=1)
res = llc.estimate_llc(p.model, known_llc.squared_error, p.data, nbeta=1000.0, gamma=1.0, eps=1e-4, chains=8,
                       draws=60, burn_in=10, batch_size=10, seed=0, device="cpu", progress=False, chunk_size=2)
import torch.distributed as dist
rank = dist.get_rank() if dist.is_initialized() else 0
loop = llc.estimate_llc(p.model, known_llc.squared_error, p.data, nbeta=1000.0, gamma=1.0, eps=1e-4, chains=8,
                        draws=60, burn_in=10, batch_size=10, seed=0, device="cpu", progress=False, chunk_size=4,
                        batching="loop")
if rank == 0:
    json.dump({"loss": res.loss.tolist(), "llc": res.llc, "loop": loop.loss.tolist()}, open(sys.argv[1], "w"))
"""


def test_torchrun_two_processes_match_one(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = {"PYTHONPATH": str(__import__("lib").REPO_ROOT), "OMP_NUM_THREADS": "1"}
    import os

    env = {**os.environ, **env}
    one = subprocess.run([sys.executable, str(script), str(tmp_path / "one.json")], env=env, capture_output=True,
                         text=True, timeout=300)
    assert one.returncode == 0, one.stderr
    two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_port=29517",
                          str(script), str(tmp_path / "two.json")], env=env, capture_output=True, text=True,
                         timeout=300)
    assert two.returncode == 0, two.stderr[-3000:]
    a = json.loads((tmp_path / "one.json").read_text())
    b = json.loads((tmp_path / "two.json").read_text())
    assert a == b


def test_eps_limits_runs_of_equal_langevin_time(regular):
    """eps_limits makes, per nβ, the runs estimate_llc makes by hand: ceil(T nβ / f) steps at ε = f / nβ (equal
    Langevin time, draws ∝ 1/ε), a third burn-in, one seed per nβ shared by its step sizes; paired extrapolation."""
    kw = {**SMALL, "chains": 4, "seed": 2}
    points = llc.eps_limits(regular.model, squared_error, regular.data, nbetas=[300.0, 1000.0], eps_nbeta=[0.2, 0.1],
                            langevin_time=0.05, **kw)  # SMALL's nbeta, eps, draws, burn_in are replaced
    for key in ("nbeta", "eps", "draws", "burn_in", "seed"):
        kw.pop(key)
    assert [p.nbeta for p in points] == [300.0, 1000.0]
    for i, p in enumerate(points):
        assert [r.settings["draws"] for r in p.runs] == [int(np.ceil(0.05 * p.nbeta / f)) for f in (0.2, 0.1)]
        by_hand = [llc.estimate_llc(regular.model, squared_error, regular.data, nbeta=p.nbeta, eps=f / p.nbeta,
                                    draws=int(np.ceil(0.05 * p.nbeta / f)), burn_in=int(np.ceil(0.05 * p.nbeta / f)) // 3,
                                    seed=llc.independent_seed(2, i), **kw) for f in (0.2, 0.1)]
        for run, mine in zip(by_hand, p.runs):
            np.testing.assert_array_equal(run.loss, mine.loss)
        assert (p.llc, p.se) == llc.extrapolate_eps(by_hand, paired=True)
        assert p.divergent_fraction == 0.0 and p.max_rhat == max(r.diagnostics["rhat"] for r in by_hand)
    assert points[0].runs[0].settings["seed"] != points[1].runs[0].settings["seed"]  # independent points in nβ
    with pytest.raises(llc.LLCInputError, match="eps_nbeta"):
        llc.eps_limits(regular.model, squared_error, regular.data, nbetas=[300.0], eps_nbeta=[0.1, 0.1],
                       langevin_time=0.05, **SMALL)


@pytest.mark.parametrize("batching", ["vmap", "loop"])
def test_first_nonfinite_step_is_flagged(batching):
    """The step recorded for a divergent chain is its first non-finite one: a run cut just before it (the same
    seed replays the same prefix) keeps the chain finite, a run one step longer flags it there."""
    p = known_llc.normal_crossing_problem([2], n=50)
    kw = {**SMALL, "chains": 16, "eps": 1.2e-2, "burn_in": 0, "batching": batching}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        full = llc.estimate_llc(p.model, squared_error, p.data, **kw)
        flagged = full.diagnostics["divergent"]
        assert flagged
        for d in flagged[:3]:
            before = llc.estimate_llc(p.model, squared_error, p.data, **{**kw, "draws": d["step"]}) if d["step"] else None
            assert before is None or d["chain"] not in [e["chain"] for e in before.diagnostics["divergent"]]
            after = llc.estimate_llc(p.model, squared_error, p.data, **{**kw, "draws": d["step"] + 1})
            assert {"chain": d["chain"], "step": d["step"], "eps": 1.2e-2} in after.diagnostics["divergent"]
            longer = llc.estimate_llc(p.model, squared_error, p.data, **{**kw, "draws": d["step"] + 5})
            assert {"chain": d["chain"], "step": d["step"], "eps": 1.2e-2} in longer.diagnostics["divergent"]
    assert full.divergent_fraction == len(flagged) / 16


def test_extrapolate_nbeta_residual():
    """chi2 = Σ ((y − fit)/s.e.)² with dof = values − coefficients; the weighted line by numpy's lstsq."""
    nbs = np.array([10.0, 30.0, 100.0, 300.0])
    y = 0.7 - 0.4 * nbs ** -0.5 + np.array([0.0, 0.01, -0.01, 0.0])
    ses = np.array([0.01, 0.02, 0.01, 0.02])
    fit = llc.extrapolate_nbeta(nbs, y, ses, gap=0.5)
    X = np.stack([np.ones(4), nbs ** -0.5], axis=1) / ses[:, None]
    coef, res, *_ = np.linalg.lstsq(X, y / ses, rcond=None)
    assert fit.llc == pytest.approx(coef[0], rel=1e-10) and fit.dof == 2
    assert fit.chi2 == pytest.approx(res[0], rel=1e-8) and fit.chi2 > 0.1
    exact = llc.extrapolate_nbeta(nbs, 0.7 - 1.0 / (np.log(nbs) + 0.8), ses, multiplicity=2)
    assert exact.chi2 < 1e-12 and exact.dof == 2 and exact.llc == pytest.approx(0.7, abs=1e-6)


@pytest.mark.parametrize("values", [[0.60, 0.55, 0.50], [0.600, 0.601, 0.600]])
def test_multiplicity_two_fit_refuses_a_runaway(values):
    """Values falling with nβ, or flat within their s.e., leave λ and a of λ − 1/(log nβ + a) undetermined:
    refused; values that rise as the form says are fitted (both ways)."""
    nbs = [100.0, 300.0, 1000.0]
    with pytest.raises(llc.LLCFitError):
        llc.extrapolate_nbeta(nbs, values, [0.01] * 3, multiplicity=2)
    rising = 0.7 - 1.0 / (np.log(nbs) + 1.0)
    fit = llc.extrapolate_nbeta(nbs, rising + np.array([0.002, -0.002, 0.001]), [0.01] * 3, multiplicity=2)
    assert abs(fit.llc - 0.7) < 0.05 and np.isfinite(fit.se)


def test_multiplicity_two_se_is_the_gauss_newton_se_with_absolute_sigma():
    """The s.e. of λ̂₀ from λ − 1/(log s + a): with J = [1, 1/(log s + a)²] at the fit and W = diag(1/s.e.²), the
    Gauss–Newton covariance (JᵀWJ)⁻¹, the given s.e. taken as absolute, not rescaled by χ²/dof (far from 1 here)."""
    nbs = np.array([100.0, 300.0, 1000.0, 3000.0])
    ses = np.array([0.004, 0.006, 0.005, 0.008])
    y = 0.7 - 1.0 / (np.log(nbs) + 1.0) + np.array([0.03, -0.03, 0.025, -0.02])  # χ²/dof ≫ 1
    fit = llc.extrapolate_nbeta(nbs, y, ses, multiplicity=2)
    lam, a = fit.params
    r = (y - (lam - 1.0 / (np.log(nbs) + a))) / ses
    J = np.stack([np.ones(4), 1.0 / (np.log(nbs) + a) ** 2], axis=1) / ses[:, None]
    assert np.abs(J.T @ r).max() < 1e-6 * np.abs(J).max()  # the fit is at the least-squares optimum
    gauss_newton = np.sqrt(np.linalg.inv(J.T @ J)[0, 0])
    assert fit.chi2 / fit.dof > 20  # a rescaled s.e. would differ by √(χ²/dof) > 4
    assert fit.se == pytest.approx(gauss_newton, rel=1e-4)


def test_init_loss_and_standard_error_by_hand():
    """L_n(w*) is the mean per-sample loss (a noisy problem: not 0); s.e. = sd(per-chain, ddof 1)/√C."""
    p = known_llc.regular_problem(3, n=50, seed=1, noise=0.5)
    res = llc.estimate_llc(p.model, squared_error, p.data, **{**SMALL, "batch_size": 20})
    with torch.no_grad():
        assert res.init_loss == pytest.approx(float(squared_error(p.model, p.data).double().mean()), rel=1e-12)
    assert res.init_loss > 0.05
    assert res.se == pytest.approx(res.per_chain.std(ddof=1) / np.sqrt(8), rel=1e-12)


def test_eps_limit_diagnostics_by_hand():
    a, b = _fake(0.2, [1.0, 2.0, np.nan, 3.0]), _fake(0.1, [1.0, np.nan, 2.0, 3.0])
    a.diagnostics.update(rhat=1.02, ess=np.array([10.0, 20.0, 30.0]))
    b.diagnostics.update(rhat=1.07, ess=np.array([5.0, 5.0, 5.0]))
    limit = llc.EpsLimit(100.0, 0.0, 1.0, [a, b])
    assert limit.divergent_fraction == 0.5  # chains 1 and 2: each lost at one step size
    assert limit.max_rhat == 1.07 and limit.min_total_ess == 15.0


def test_warnings_go_to_the_terminal(capsys, monkeypatch):
    from lib.book import progress

    monkeypatch.setenv(progress.TERMINAL_ENV, "0")  # log_stream() is then sys.stderr
    with warnings.catch_warnings(record=True) as outside:
        warnings.simplefilter("always")
        with llc.warnings_to_terminal():
            warnings.warn("3 of 16 SGLD chains diverged", RuntimeWarning)
    assert not outside and "3 of 16 SGLD chains diverged" in capsys.readouterr().err


def test_split_rhat_by_hand():
    """Two chains of 8 draws cut into four halves of 4: R̂ = sqrt(((n−1)/n W + B/n) / W) written out."""
    x = np.array([[0.0, 1, 0, 1, 2, 3, 2, 3], [1.0, 1, 2, 2, 0, 0, 1, 1]])
    halves = [x[0, :4], x[0, 4:], x[1, :4], x[1, 4:]]
    w = np.mean([h.var(ddof=1) for h in halves])
    b_over_n = np.var([h.mean() for h in halves], ddof=1)
    assert llc.split_rhat(x) == pytest.approx(np.sqrt((3 / 4 * w + b_over_n) / w), rel=1e-12)


def test_per_chain_estimate_subtracts_the_loss_at_w_star():
    """λ̂_c = nβ (mean_t L_B(w_t) − L_n(w*)) on a problem whose L_n(w*) is far from 0."""
    p = known_llc.regular_problem(3, n=50, seed=1, noise=2.0)
    res = llc.estimate_llc(p.model, squared_error, p.data, **{**SMALL, "draws": 60, "burn_in": 20})
    assert res.init_loss > 1.0
    np.testing.assert_allclose(res.per_chain, 1000.0 * (res.loss.mean(axis=1) - res.init_loss), rtol=1e-12)


def test_localisation_enters_the_drift_fully():
    """At small nβ the localisation γ dominates the curvature a = nβσ + γ: the exact Euler target with the
    right γ is met, and the one with γ/2 (a drift with half the localisation) is not."""
    p = known_llc.regular_problem(2, n=40, seed=2)
    sigma = (p.data[0].T @ p.data[0] / 40).numpy()
    res = llc.estimate_llc(p.model, squared_error, p.data, nbeta=5.0, gamma=10.0, eps=0.01, chains=256, draws=800,
                           burn_in=200, batch_size=40, seed=0, device="cpu", progress=False)
    assert abs(res.llc - known_llc.regular_sgld_mean(sigma, 5.0, 10.0, 0.01)) < 4 * res.se
    assert abs(res.llc - known_llc.regular_sgld_mean(sigma, 5.0, 5.0, 0.01)) > 4 * res.se


def test_minibatches_are_drawn_from_every_sample():
    """With m < n, each step's indices are uniform over all n samples: over 8 chains × 100 steps of 5 indices every
    one of the 50 samples is seen (plain autograd per chain, so the loss sees the rows themselves)."""
    p = known_llc.regular_problem(3, n=50, seed=1)
    x, y = p.data
    ids = torch.arange(50, dtype=x.dtype)[:, None]
    seen = set()

    def loss_recording_rows(model, batch):
        xb, yb, tag = batch
        seen.update(int(v) for v in tag[:, 0].tolist())
        return squared_error(model, (xb, yb))

    llc.estimate_llc(p.model, loss_recording_rows, (x, y, ids), batching="loop",
                     **{**SMALL, "batch_size": 5, "draws": 100, "burn_in": 10})
    assert seen == set(range(50))


# ----- defaults: the chapter "Learning coefficients"'s validated settings -------------------------------------

def test_defaults_are_the_chapters_validated_settings():
    """The documented defaults are the ci preset of chapters/llc.yml: γ, chains, relax, the smaller ε·nβ."""
    import yaml

    from lib import REPO_ROOT

    ci = yaml.safe_load((REPO_ROOT / "chapters" / "llc.yml").read_text())["presets"]["ci"]
    assert llc.DEFAULT_GAMMA == ci["gamma"] and llc.DEFAULT_CHAINS == ci["chains"]
    assert llc.DEFAULT_RELAX == ci["relax"] and llc.DEFAULT_EPS_NBETA == min(ci["eps_nbeta"])
    assert llc.DEFAULT_BURN_IN_FRACTION == pytest.approx(1 / 3) and llc.DEFAULT_SEED == 0


def test_defaults_resolve_by_hand_and_equal_the_settings_passed_explicitly():
    p = known_llc.regular_problem(2, n=30, seed=4)
    base = dict(device="cpu", progress=False)
    default = llc.estimate_llc(p.model, squared_error, p.data, **base)
    nbeta = 30 / np.log(30)                                   # n / log n
    eps = 0.1 / nbeta                                         # ε·nβ = 0.1
    draws = int(np.ceil(3 / (1.0 * eps)))                     # three relaxation times 1/γ of Langevin time
    assert default.settings == pytest.approx(dict(nbeta=nbeta, gamma=1.0, eps=eps, chains=64, draws=draws,
                                                  burn_in=draws // 3, batch_size=30, seed=0, n=30))
    assert llc.default_draws(1.0, eps) == draws == 265
    explicit = llc.estimate_llc(p.model, squared_error, p.data, nbeta=nbeta, gamma=1.0, eps=eps, chains=64, draws=draws,
                                burn_in=draws // 3, batch_size=30, seed=0, **base)
    np.testing.assert_array_equal(default.loss, explicit.loss)
    # given settings are used as given: another γ moves the default draws with it, a given draws does not
    assert llc.estimate_llc(p.model, squared_error, p.data, gamma=4.0, **base).settings["draws"] == int(np.ceil(draws / 4))
    short = llc.estimate_llc(p.model, squared_error, p.data, draws=30, chains=2, **base)
    assert short.settings["draws"] == 30 and short.settings["burn_in"] == 10 and short.settings["chains"] == 2
    # γ = 0 has no relaxation time: draws must then be given
    with pytest.raises(llc.LLCInputError, match="'draws' has no default at gamma = 0"):
        llc.estimate_llc(p.model, squared_error, p.data, gamma=0.0, **base)
    assert llc.estimate_llc(p.model, squared_error, p.data, gamma=0.0, draws=20, chains=2, **base).settings["burn_in"] == 6
    with pytest.raises(llc.LLCInputError, match="'draws' \\(20\\) must exceed 'burn_in' \\(20\\)"):
        llc.estimate_llc(p.model, squared_error, p.data, draws=20, burn_in=20, **base)


# ----- warnings: what the numbers say against reading λ̂ as λ(w*) -------------------------------------------

def _wide_regression(n=200, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 2, generator=g)
    y = torch.sin(2 * x[:, :1]) + x[:, 1:] ** 2
    return x, y


def test_an_untrained_mlp_gives_a_negative_estimate_and_says_so():
    """w* a random initialisation (not a minimum) and a large step: the chains go downhill, λ̂ < 0."""
    x, y = _wide_regression()
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(2, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    kw = dict(eps=1e-2, chains=8, draws=200, burn_in=50, device="cpu", progress=False)
    with pytest.warns(llc.LLCWarning, match="< 0: .*w\\* is not a local minimum; train w\\* to a minimum"):
        res = llc.estimate_llc(mlp, squared_error, (x, y), **kw)
    assert res.llc < 0 and any("< 0" in w for w in res.warnings)
    assert "warning: λ̂" in res.summary() and "warning: λ̂" in repr(res)
    # the warning changes no number: the same run with warnings silenced is bit-identical
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quiet = llc.estimate_llc(mlp, squared_error, (x, y), **kw)
    np.testing.assert_array_equal(res.loss, quiet.loss)
    assert res.llc == quiet.llc and res.se == quiet.se


def test_a_trained_linear_regression_at_the_defaults_gives_no_warning():
    """w* the least-squares fit (a minimum) of a regular model: λ̂ near d/2, mixed, no warning."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(300, 3, generator=g)
    y = x @ torch.randn(3, 1, generator=g) + torch.randn(300, 1, generator=g)
    model = known_llc.LinearRegression(3)
    with torch.no_grad():
        model.w.copy_(torch.linalg.lstsq(x, y).solution[:, 0])
    with warnings.catch_warnings():
        warnings.simplefilter("error", llc.LLCWarning)
        res = llc.estimate_llc(model, squared_error, (x, y), device="cpu", progress=False)
    assert res.warnings == [] and "warning" not in res.summary()
    assert res.diagnostics["rhat"] <= llc.RHAT_WARN and abs(res.llc - 1.5) < 0.1


def test_hand_made_results_warn_both_ways(capsys, monkeypatch):
    def made(value, rhat, se=0.1, n_params=None):
        res = _fake(0.1, [value - 0.1, value + 0.1], se=se)
        res.diagnostics.update(rhat=rhat, ess=np.array([50.0, 60.0]), mala_acceptance=np.array([0.9, 0.95]))
        if n_params is not None:
            res.diagnostics["n_params"] = n_params
        return res

    unmixed = made(2.0, 1.2)
    assert len(unmixed.warnings) == 1 and "split R̂ = 1.200 > 1.05" in unmixed.warnings[0]
    assert "more draws" in unmixed.warnings[0] and "warning: split R̂" in unmixed.summary()
    assert "warning: split R̂" in repr(unmixed)
    with pytest.warns(llc.LLCWarning, match="not mixed"):
        unmixed.warn()
    assert made(2.0, 1.04).warnings == [] and made(2.0, float("nan")).warnings == []
    assert made(2.0, 1.0501).warnings != []
    both = made(-0.5, 1.2).warnings
    assert len(both) == 2 and both[0].startswith("λ̂ = -0.5 < 0") and both[1].startswith("split R̂ = 1.200")
    assert made(0.0, 1.0).warnings == []
    # λ̂ above d/2 by more than the step's bias (4/3) and 3 s.e.; d/2 itself is no warning
    assert made(3.0, 1.0, se=0.01, n_params=4).warnings[0].startswith("λ̂ = 3 ± 0.01 exceeds d/2 = 2")
    assert made(2.6, 1.0, se=0.01, n_params=4).warnings == []            # within 4/3 · d/2
    assert made(3.0, 1.0, se=0.3, n_params=4).warnings == []             # within 3 s.e.
    assert made(3.0, 1.0, se=0.01).warnings == []                       # d unknown: nothing to compare
    # the estimates' numbers are not touched by reading the warnings
    assert unmixed.llc == 2.0 and unmixed.diagnostics["rhat"] == 1.2
    # to the terminal: only the category asked for; other warnings come out as they were
    from lib.book import progress

    monkeypatch.setenv(progress.TERMINAL_ENV, "0")  # log_stream() is then sys.stderr
    with warnings.catch_warnings(record=True) as outside:
        warnings.simplefilter("always")
        with llc.warnings_to_terminal(llc.LLCWarning):
            unmixed.warn()
            warnings.warn("3 of 16 SGLD chains diverged", RuntimeWarning)
    assert [str(w.message) for w in outside] == ["3 of 16 SGLD chains diverged"]
    assert "LLCWarning: split R̂ = 1.200" in capsys.readouterr().err
