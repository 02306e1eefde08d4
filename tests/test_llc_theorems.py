"""lib.llc_theorems: coupled data, curvature by Lanczos, and the derived bounds of Theorems 7.3–7.4."""
import numpy as np
import pytest
import torch

from lib import conditional_models as cm
from lib import insensitivity as ins
from lib import languages as L
from lib import llc, llc_theorems as th


@pytest.fixture(scope="module")
def ladder():
    return cm.Support.of(L.mode_ladder(k=1, n_bigrams=4, rng=0), 1, 1)


def test_coupled_data_share_histories_and_agree_at_the_rank(ladder):
    (x, y), (x2, y2) = th.coupled_data(ladder, 2, 500, seed=1)
    assert torch.equal(x, x2) and 0 < (y != y2).float().mean() < 1
    (_, y), (_, y_r) = th.coupled_data(ladder, ladder.modes.rank, 500, seed=1)
    assert torch.equal(y, y_r)                      # q^(rank) = q: the same continuations


def test_curvature_matches_a_dense_hessian(ladder):
    model = cm.build({"kind": "factored", "hidden": 3, "embed_dim": 2}, ladder, seed=0).double()
    (x, y), _ = th.coupled_data(ladder, 1, 300, seed=0)
    c = th.curvature(model, th.nll, (x, y), tol=1e-10, smallest=True)
    f, w0 = th._flat_loss(model, th.nll, (x, y))
    H = torch.autograd.functional.hessian(f, w0).numpy()
    ev = np.linalg.eigvalsh(0.5 * (H + H.T))
    top = ev[np.argmax(np.abs(ev))]
    assert c.extreme == pytest.approx(top, rel=1e-6) and c.spectral_norm == pytest.approx(abs(top), rel=1e-6)
    assert c.smallest == pytest.approx(ev[0], rel=1e-4, abs=1e-6)
    assert c.grad_norm == pytest.approx(float(torch.linalg.norm(torch.func.grad(f)(w0))), rel=1e-12)
    second = np.sort(np.abs(ev))[-2]
    assert abs(c.spectral_norm - second) > 1e-6 * abs(top)   # the check tells neighbouring eigenvalues apart


def test_separation_bound_recursion_and_limits():
    kw = dict(eps=1e-3, gamma=100.0, nbeta=10.0, M=2.0, delta=0.5)
    bound = th.separation_bound(np.arange(50), **kw)
    a = abs(1 - kw["eps"] * kw["gamma"] / 2) + kw["eps"] * kw["nbeta"] * kw["M"] / 2
    b = kw["eps"] * kw["nbeta"] * kw["delta"] / 2
    rec = [0.0]
    for _ in range(49):
        rec.append(a * rec[-1] + b)
    assert np.allclose(bound, rec, rtol=1e-12, atol=0)
    far = th.separation_bound([10 ** 7], **kw)[0]
    assert far == pytest.approx(kw["nbeta"] * kw["delta"] / (kw["gamma"] - kw["nbeta"] * kw["M"]), rel=1e-9)
    hyp = th.contraction(eps=1e-3, gamma=100.0, nbeta=10.0, M=2.0)
    assert hyp["contracts"] and hyp["nbeta_M_below_gamma"]
    bad = th.contraction(eps=1e-3, gamma=10.0, nbeta=10.0, M=2.0)
    assert not bad["contracts"] and not bad["nbeta_M_below_gamma"]
    assert th.separation_bound([100], eps=1e-3, gamma=10.0, nbeta=10.0, M=2.0, delta=0.5)[0] > b * 100  # grows


def test_measured_separation_lies_below_the_bound_on_a_small_case(ladder):
    """The derived Theorem 7.3 with δ and M measured on the visited region, on a tiny model."""
    torch.manual_seed(0)
    tr = cm.train(ladder, {"kind": "factored", "hidden": 3, "embed_dim": 2}, n=400, steps=300, seed=0,
                  progress=False, use_cache=False)
    model = tr.model(ladder)
    data_a, data_b = th.coupled_data(ladder, 2, 400, seed=0)
    kw = dict(nbeta=20.0, gamma=2000.0, eps=1e-4, chains=4, draws=200, burn_in=0, batch_size=400, seed=0,
              progress=False)
    res = llc.coupled_chains(model, th.nll, data_a, data_b, **kw)
    # full batch: δ is the gradient difference of the two empirical losses and M the Hessian's norm, both at
    # w*; twice each stands in for their sup over the small region these short, strongly localised chains visit
    c = th.curvature(model, th.nll, data_b)
    f_a, w0 = th._flat_loss(model, th.nll, data_a)
    f_b, _ = th._flat_loss(model, th.nll, data_b)
    delta = float(torch.linalg.norm(torch.func.grad(f_a)(w0) - torch.func.grad(f_b)(w0)))
    bound = th.separation_bound(np.arange(1, kw["draws"] + 1), eps=kw["eps"], gamma=kw["gamma"],
                                nbeta=kw["nbeta"], M=2 * c.spectral_norm, delta=2 * delta)
    assert (res.separation <= bound[None, :]).all()
    assert res.separation.max() > 0
    too_small = th.separation_bound(np.arange(1, kw["draws"] + 1), eps=kw["eps"], gamma=kw["gamma"],
                                    nbeta=kw["nbeta"], M=0.0, delta=1e-3 * delta)
    assert not (res.separation <= too_small[None, :]).all()   # a bound with too small a δ is violated


def test_llc_difference_bound():
    assert th.llc_difference_bound(nbeta=10.0, K=2.0, mean_separation=0.1, eps_insensitivity=0.05) == pytest.approx(3.0)


def test_coupled_targets_share_noise_and_reduce_to_coupled_chains(ladder):
    model = cm.build({"kind": "factored", "hidden": 3, "embed_dim": 2}, ladder, seed=0).double()
    x, y, w = th.weighted_pairs(ladder, [1, ladder.modes.rank], 300, seed=0)
    kw = dict(nbeta=30.0, gamma=500.0, eps=1e-4, chains=3, draws=40, burn_in=10, batch_size=len(x), seed=2,
              progress=False)
    datas = [(x, y, w[0]), (x, y, w[1]), (x, y, w[2])]          # q, q^(1), q^(rank) = q
    res = llc.coupled_targets(model, th.weighted_nll, datas, snapshots=4, **kw)
    assert res.separation.shape == (2, 3, 30)
    assert np.all(res.separation[1] == 0) and np.all(res.max_separation[1] == 0)   # identical data, identical chains
    assert res.separation[0].max() > 0
    assert res.snapshot_steps == [10, 20, 30, 40] and res.positions.shape == (3, 3, 4, cm.n_params(model))
    assert np.array_equal(res.positions[0], res.positions[2]) and not np.array_equal(res.positions[0], res.positions[1])
    pair = llc.coupled_chains(model, th.weighted_nll, datas[0], datas[1], **kw)
    assert np.array_equal(pair.a.per_chain, res.results[0].per_chain)
    assert np.array_equal(pair.b.per_chain, res.results[1].per_chain)
    assert np.array_equal(pair.separation, res.separation[0])
    with pytest.raises(llc.LLCInputError, match="same number of samples"):
        llc.coupled_targets(model, th.weighted_nll, [datas[0], (x[:5], y[:5], w[0][:5])], **kw)
    with pytest.raises(llc.LLCInputError, match="at least two"):
        llc.coupled_targets(model, th.weighted_nll, [datas[0]], **kw)


def test_weighted_pairs_reproduce_the_empirical_losses(ladder):
    model = cm.build({"kind": "factored", "hidden": 3, "embed_dim": 2}, ladder, seed=0).double()
    n = 500
    x, y, w = th.weighted_pairs(ladder, [2], n, seed=3)
    rows, y_q, y_2 = ladder.coupled_sample(n, 3, ins.effective(ladder.modes, 2))
    with torch.no_grad():
        direct = [float(th.nll(model, (torch.as_tensor(rows), torch.as_tensor(c))).mean()) for c in (y_q, y_2)]
        weighted = [float(th.weighted_nll(model, (x, y, w[j])).mean()) for j in range(2)]
    assert np.allclose(direct, weighted, rtol=0, atol=1e-12)
    assert abs(direct[0] - direct[1]) > 1e-4


def test_chi_star_and_the_monotone_verdict():
    chis = [1, 2, 3, 4]
    z = np.array([[5.0, 1.0, 0.5, 0.0], [5.0, 4.0, 1.0, 0.0], [5.0, 4.0, 3.0, 2.5]])
    assert th.chi_star(z, chis) == [2, 3, None]
    assert th.monotone_verdict([2, 3, None], [(2, 2), (3, 3), (5, 5)]) == "supported"
    assert th.monotone_verdict([3, 2], [(3, 3), (2, 2)]) == "contradicted"
    assert th.monotone_verdict([3, 2], [(2, 3), (2, 3)]) == "inconclusive"
    assert th.monotone_verdict([3, 3], [(3, 3), (3, 3)]) == "inconclusive"      # χ* does not move
    diff = np.zeros((1, 2, 4))
    diff[0, 0] = [1.0, 1.1, 0.9, 1.0]                                          # distinguishable; identical chains
    assert th._z(diff)[0, 1] == 0.0 and th._z(diff)[0, 0] > 10


def test_population_data_gives_the_population_loss(ladder):
    """The weighted full batch's mean is −Σ q(x) q^(χ)(y|x) log p(y|x, w): equal to L at χ = rank
    and different from it below (the ladder's truncations are visible)."""
    model = cm.build({"kind": "factored", "hidden": 3, "embed_dim": 2}, ladder, seed=0).double()
    rows = ladder.modes.rows
    with torch.no_grad():
        logp = model(torch.as_tensor(rows)).numpy()

    def direct(cond):
        return float(-(ladder.modes.q_x[:, None] * cond * logp).sum())

    def batch_mean(chi):
        with torch.no_grad():
            return float(th.weighted_nll(model, th.population_data(ladder, chi)).mean())

    L_q = direct(ins.dense_conditional(ladder.modes))
    assert batch_mean(None) == pytest.approx(L_q, rel=1e-12)
    assert batch_mean(ladder.modes.rank) == pytest.approx(L_q, rel=1e-9)
    assert batch_mean(1) == pytest.approx(direct(ins.effective(ladder.modes, 1)), rel=1e-12)
    assert abs(batch_mean(1) - L_q) > 1e-4


def test_critical_points_at_the_rank_are_those_of_L(ladder):
    model = cm.build({"kind": "factored", "hidden": 3, "embed_dim": 2}, ladder, seed=0).double()
    cp = th.critical_points(model, ladder, [1, ladder.modes.rank])
    assert cp.grad_norm[-1] == pytest.approx(cp.grad_norm_q, rel=1e-8)
    assert cp.extreme[-1] == pytest.approx(cp.extreme_q, rel=1e-4)
    assert abs(cp.grad_norm[0] - cp.grad_norm_q) > 1e-6 * cp.grad_norm_q
    assert np.all(cp.smallest <= cp.extreme + 1e-9)


# ----- §7.1: per-position LLCs of a causal language model -----------------------------------

class _Bigram(torch.nn.Module):
    """A causal LM whose logits at each position read only the current token: p(y_t | y_<t) = p(y_t | y_{t−1})."""

    def __init__(self, V: int, seed: int = 0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.table = torch.nn.Parameter(torch.randn(V, V, generator=g, dtype=torch.float64))
        self.calls = 0

    def forward(self, ids):
        self.calls += 1
        return self.table[ids]


def _windows(n=64, T=8, V=5, seed=0):
    return torch.randint(0, V, (n, T), generator=torch.Generator().manual_seed(seed))


_SGLD = dict(gamma=100.0, eps=1e-3, chains=3, draws=40, burn_in=10, batch_size=16, seed=0)


def test_per_position_llc_shapes_and_the_loss_it_defines():
    ids, model = _windows(), _Bigram(5)
    res = th.per_position_llc(model, (ids,), [1, 4, 7], **_SGLD)
    assert res.positions == [1, 4, 7] and res.llc.shape == res.se.shape == res.init_loss.shape == (3,)
    assert len(res.results) == 3 and all(r.per_chain.shape == (3,) and r.loss.shape == (3, 30) for r in res.results)
    assert [d["position"] for d in res.diagnostics()] == [1, 4, 7] and np.all(np.isfinite(res.llc))
    assert res.settings["n"] == 64 and res.settings["nbeta"] == pytest.approx(64 / np.log(64))
    with torch.no_grad():
        logp = torch.log_softmax(model.table[ids[:, :-1]], -1)                    # (n, T − 1, V): predicts ids[:, 1:]
        direct = -logp.gather(-1, ids[:, 1:, None])[..., 0].mean(0)               # L_t(w*) for t = 1..T − 1
    assert np.allclose(res.init_loss, direct[[0, 3, 6]].numpy(), rtol=1e-12, atol=0)
    every = th.per_position_llc(model, ids, range(1, 8), **{**_SGLD, "draws": 11})
    assert np.mean(every.init_loss) == pytest.approx(float(direct.mean()), rel=1e-12)   # the sequence loss: their mean


def test_per_position_llc_is_deterministic():
    ids, model = _windows(), _Bigram(5)
    a = th.per_position_llc(model, (ids,), [2, 5], **_SGLD)
    b = th.per_position_llc(model, (ids,), [2, 5], **_SGLD)
    assert all(np.array_equal(x.per_chain, y.per_chain) for x, y in zip(a.results, b.results))
    c = th.per_position_llc(model, (ids,), [2, 5], **{**_SGLD, "seed": 1})
    assert not np.array_equal(a.results[0].per_chain, c.results[0].per_chain)


@pytest.mark.parametrize("positions", [[0, 3], [3, 8], [2, 2], [], [1.5], 3, [True]])
def test_per_position_llc_rejects_invalid_positions_before_sampling(positions):
    ids, model = _windows(), _Bigram(5)
    with pytest.raises(llc.LLCInputError, match=r"parameter 'positions' must .* \[1, 7\]"):
        th.per_position_llc(model, (ids,), positions, **_SGLD)
    assert model.calls == 0                                                       # nothing was run


def test_positions_with_the_same_bigrams_have_the_same_llc():
    """By construction: the bigram model's L_t depends on the columns (t − 1, t) of the windows only. Copy
    columns (1, 2) into (5, 6): L_2 ≡ L_6 as functions of w, and with the same chains, minibatches and noise
    at every position λ̂_2 = λ̂_6 chain by chain, bit for bit. Positions 3 and 7 (their neighbours, which an
    off-by-one would compare) and position 4 keep different data and get different estimates."""
    ids = _windows(n=64, T=8, V=5, seed=3)
    ids[:, 5:7] = ids[:, 1:3]
    assert not torch.equal(ids[:, 2:4], ids[:, 6:8]) and not torch.equal(ids[:, 0:2], ids[:, 4:6])
    res = th.per_position_llc(_Bigram(5, seed=1), (ids,), [2, 6, 3, 7, 4], **_SGLD)
    same, other = res.results[0].per_chain, res.results[1].per_chain
    assert np.array_equal(same, other) and res.init_loss[0] == res.init_loss[1]
    assert not np.array_equal(res.results[2].per_chain, res.results[3].per_chain)
    assert not np.array_equal(res.results[4].per_chain, same)


# ----- the (χ, β) grid: per-history loss, one batched state, measurements along the run ------

_DIAL = dict(gamma=500.0, chains=3, draws=40, burn_in=10, seed=2)


@pytest.fixture(scope="module")
def small_model(ladder):
    return cm.build({"kind": "factored", "hidden": 3, "embed_dim": 2}, ladder, seed=0).double()


@pytest.fixture(scope="module")
def small_dial(ladder, small_model):
    return th.resolution_dial(small_model, ladder, chis=[1, 2, ladder.modes.rank], nbetas=[30.0, 60.0], n=300,
                              eps_nbeta=3e-3, snapshots=4, **_DIAL)


def test_history_data_reproduce_the_empirical_losses(ladder, small_model):
    n = 500
    rows, W = th.history_data(ladder, [2], n, seed=3)
    r, y_q, y_2 = ladder.coupled_sample(n, 3, ins.effective(ladder.modes, 2))
    assert torch.equal(rows, torch.as_tensor(np.unique(r))) and W.shape == (2, len(rows), ladder.n_cols)
    with torch.no_grad():
        direct = [float(th.nll(small_model, (torch.as_tensor(r), torch.as_tensor(c))).mean()) for c in (y_q, y_2)]
        per_history = [float(th.history_nll(small_model, (rows, W[j])).mean()) for j in range(2)]
    assert np.allclose(direct, per_history, rtol=0, atol=1e-12)
    assert abs(direct[0] - direct[1]) > 1e-4


def test_the_grid_reproduces_lib_llc_coupled_targets(ladder, small_model, small_dial):
    """Same start, same noise, same chains as lib.llc's coupled sampler (per temperature, on the pairs
    loss), up to rounding: the per-history loss and the batching change nothing else."""
    chis = small_dial.chis
    x, y, w = th.weighted_pairs(ladder, chis, 300, seed=_DIAL["seed"])
    datas = [(x, y, w[k]) for k in range(len(chis) + 1)]
    for b, nb in enumerate(small_dial.nbetas):
        res = llc.coupled_targets(small_model, th.weighted_nll, datas, nbeta=nb, eps=3e-3 / nb, batch_size=len(x),
                                  progress=False, snapshots=4, **_DIAL)
        ref = np.stack([res.results[0].per_chain - r.per_chain for r in res.results[1:]])
        assert np.allclose(small_dial.diff[b], ref, rtol=0, atol=1e-9)
        assert np.allclose(small_dial.separation[b], res.separation, rtol=0, atol=1e-12)
        assert np.allclose(small_dial.positions[b], res.positions, rtol=0, atol=1e-12)
        assert small_dial.llc_q[b] == pytest.approx(res.results[0].llc, abs=1e-9)
    assert small_dial.snapshot_steps == res.snapshot_steps
    # χ = rank: q itself; the two chains sit in different rows of one batched state, whose vectorised
    # transcendental functions may round differently by an ulp, so identical up to rounding
    assert small_dial.separation[:, -1].max() < 1e-14 and small_dial.separation[:, 0].max() > 1e-6
    assert np.all(small_dial.divergent == 0)


def test_one_chain_of_the_grid_alone(ladder, small_model, small_dial):
    """chain_ids runs chain c of a larger run by itself, with that chain's noise."""
    rows, W = th.history_data(ladder, [1], 300, _DIAL["seed"])
    kw = {k: v for k, v in _DIAL.items() if k != "chains"}
    r = th.grid_chains(small_model, rows, W, nbetas=[60.0], eps=[3e-3 / 60.0], chains=1, chain_ids=[2],
                       noise_chains=3, **kw)
    assert r["per_chain"][0, 0, 0] - r["per_chain"][0, 1, 0] == pytest.approx(small_dial.diff[1, 0, 2], abs=1e-9)
    with pytest.raises(ValueError, match="chain_ids"):
        th.grid_chains(small_model, rows, W, nbetas=[60.0], eps=[5e-5], chains=1, chain_ids=[3], noise_chains=3, **kw)


def test_measurements_along_the_run_are_the_gradients_they_name(ladder, small_model, small_dial):
    """δ_t, s_t and the gap at a kept step equal the quantities computed directly at the kept positions."""
    fs = th._target_losses(small_model, small_dial.data)
    b, j, c, i = 1, 0, 1, 1
    t = small_dial.snapshot_steps[i]
    w_q = torch.as_tensor(small_dial.positions[b, 0, c, i])
    w_chi = torch.as_tensor(small_dial.positions[b, j + 1, c, i])
    g = torch.func.grad
    delta = float((g(fs[0])(w_q) - g(fs[j + 1])(w_q)).norm())
    s = float((g(fs[j + 1])(w_q) - g(fs[j + 1])(w_chi)).norm())
    gap = abs(float(fs[0](w_chi) - fs[j + 1](w_chi)))
    st = small_dial.steps
    assert st["delta"][b, j, c, t] == pytest.approx(delta, rel=1e-9)
    assert st["lipschitz"][b, j, c, t] == pytest.approx(s, rel=1e-9)
    assert st["gap"][b, j, c, t] == pytest.approx(gap, rel=1e-9, abs=1e-15)
    assert st["sep_all"][b, j, c, t] == pytest.approx(float((w_q - w_chi).norm()), rel=1e-12)
    assert st["delta"][:, -1].max() < 1e-12 and st["delta"][:, 0].min() > 1e-6
    assert np.array_equal(st["sep_all"][..., small_dial.settings["burn_in"] + 1:], small_dial.separation)


def test_one_step_inequality_holds_and_fails_when_broken(small_dial):
    gamma, eps_nbeta = _DIAL["gamma"], 3e-3
    assert th.one_step_violations(small_dial, gamma, eps_nbeta) == 0
    import copy
    shrunk = copy.deepcopy(small_dial)
    shrunk.steps["delta"] *= 0.5                             # a δ_t too small for what the chains did
    assert th.one_step_violations(shrunk, gamma, eps_nbeta) > 0
    noisy = copy.deepcopy(small_dial)
    noisy.steps["sep_all"][..., 1:] *= 1.5                  # separations an uncoupled pair would show
    assert th.one_step_violations(noisy, gamma, eps_nbeta) > 0


def test_measure_constants_takes_the_run_maxima(small_model, small_dial):
    cst = th.measure_constants(small_model, small_dial)
    st = small_dial.steps
    assert np.allclose(cst["delta"], st["delta"].max(axis=(2, 3)), rtol=0, atol=0)
    assert np.allclose(cst["eps"], st["gap"].max(axis=(2, 3)), rtol=0, atol=0)
    assert cst["K"] >= st["grad_q"].max() and cst["M"] > 0 and 0 < cst["M_secant"] < np.inf


@pytest.mark.parametrize("bad, match", [({"chis": [0]}, "chis"), ({"burn_in": 40}, "burn_in"),
                                        ({"nbetas": [-1.0]}, "nbetas"), ({"chains": 1}, "chains")])
def test_resolution_dial_rejects_bad_input_before_sampling(ladder, small_model, bad, match):
    kw = dict(chis=[1], nbetas=[30.0], n=300, eps_nbeta=3e-3, **_DIAL)
    with pytest.raises(ValueError, match=f"parameter '{match}'"):
        th.resolution_dial(small_model, ladder, **{**kw, **bad})


def test_the_grid_runs_a_transformer(ladder):
    """The dial's sampler on the GPT-NeoX conditional model (buffers, eager attention under vmap)."""
    model = cm.build({"kind": "transformer", "hidden": 4, "layers": 1, "heads": 2}, ladder, seed=0).double()
    d = th.resolution_dial(model, ladder, chis=[1, ladder.modes.rank], nbetas=[30.0], n=200, eps_nbeta=3e-3,
                           gamma=500.0, chains=2, draws=6, burn_in=2, seed=0)
    assert np.all(np.isfinite(d.diff)) and d.separation[0, 1].max() < 1e-14 and d.separation[0, 0].max() > 1e-8


def _grid_kwargs():
    return dict(nbetas=[30.0, 60.0], eps=[3e-3 / 30.0, 3e-3 / 60.0], snapshots=4, **_DIAL)


def _same_run(a, b):
    keys = ("per_chain", "first_bad", "sep_all", "grad_q", "delta", "lipschitz", "gap", "positions")
    return all(np.array_equal(a[k], b[k]) for k in keys)


def test_an_interrupted_grid_resumes_bit_identically(ladder, small_model, tmp_path, monkeypatch):
    """The grid saves its whole state every checkpoint_every steps, atomically; killed while writing the
    second checkpoint (step 20), a rerun continues from the last complete one (step 10) and ends
    bit-identical to an uninterrupted run."""
    rows, W = th.history_data(ladder, [1, 2], 300, _DIAL["seed"])
    whole = th.grid_chains(small_model, rows, W, **_grid_kwargs())
    assert whole["resumed_from"] == 0
    real_save, saves = torch.save, []

    def crash_after_two(obj, path, *a, **k):
        real_save(obj, path, *a, **k)
        saves.append(obj["t"])
        if len(saves) == 2:
            raise KeyboardInterrupt
    monkeypatch.setattr(torch, "save", crash_after_two)
    with pytest.raises(KeyboardInterrupt):
        th.grid_chains(small_model, rows, W, workdir=tmp_path, checkpoint_every=10, **_grid_kwargs())
    monkeypatch.setattr(torch, "save", real_save)
    assert saves == [10, 20] and (tmp_path / "resume.pt").exists()
    resumed = th.grid_chains(small_model, rows, W, workdir=tmp_path, checkpoint_every=10, **_grid_kwargs())
    assert resumed["resumed_from"] == 10
    assert _same_run(resumed, whole)
    # must fail: a run resumed from a state whose noise generator was not restored differs
    state = torch.load(tmp_path / "resume.pt", weights_only=True)
    state["noise_gen"] = torch.Generator().manual_seed(123).get_state()
    torch.save(state, tmp_path / "resume.pt")
    other = th.grid_chains(small_model, rows, W, workdir=tmp_path, checkpoint_every=10, **_grid_kwargs())
    assert other["resumed_from"] > 0 and not _same_run(other, whole)


def test_a_resume_state_of_another_run_is_refused(ladder, small_model, tmp_path):
    rows, W = th.history_data(ladder, [1, 2], 300, _DIAL["seed"])
    kw = _grid_kwargs()
    th.grid_chains(small_model, rows, W, workdir=tmp_path, checkpoint_every=10, **{**kw, "draws": 25})
    assert (tmp_path / "resume.pt").exists()   # the finished run's last checkpoint, at step 20
    with pytest.raises(ValueError, match="another run"):
        th.grid_chains(small_model, rows, W, workdir=tmp_path, checkpoint_every=10, **kw)
    with pytest.raises(ValueError, match="checkpoint_every"):
        th.grid_chains(small_model, rows, W, checkpoint_every=0, **kw)


def test_a_resumable_dial_equals_the_plain_one_and_is_kept(ladder, small_model, small_dial, tmp_path, monkeypatch):
    monkeypatch.setenv("BOOK_CACHE_DIR", str(tmp_path))
    kw = dict(chis=[1, 2, ladder.modes.rank], nbetas=[30.0, 60.0], n=300, eps_nbeta=3e-3, snapshots=4, **_DIAL)
    first = th.resolution_dial(small_model, ladder, resume=True, checkpoint_every=15, **kw)
    assert np.array_equal(first.diff, small_dial.diff) and np.array_equal(first.separation, small_dial.separation)
    entries = list((tmp_path).rglob("run.pkl"))
    assert len(entries) == 1 and not list(tmp_path.rglob("resume.pt"))
    again = th.resolution_dial(small_model, ladder, resume=True, checkpoint_every=15, **kw)
    assert again.seconds == first.seconds and np.array_equal(again.diff, first.diff)   # read back, not rerun
