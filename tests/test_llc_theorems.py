"""lib.llc_theorems: coupled data, curvature by Lanczos, the derived bounds of Theorems 7.3–7.4, the quadratic
prediction of λ̂, and the resolution dial's decision rules."""
import numpy as np
import pytest
import torch
from hypothesis import example, given, settings, strategies as st

from lib import conditional_models as cm
from lib import insensitivity as ins
from lib import languages as L
from lib import llc, llc_theorems as th
from lib import local_quadratic as lq


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
    f, w0 = lq.flat_loss(model, th.nll, (x, y))
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
    f_a, w0 = lq.flat_loss(model, th.nll, data_a)
    f_b, _ = lq.flat_loss(model, th.nll, data_b)
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
        per_history = [float(cm.history_nll(small_model, (rows, W[j])).mean()) for j in range(2)]
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


def test_a_grid_chain_is_stepped_by_lib_sgld(ladder, small_model):
    """The grid has no SGLD of its own: with nβ = 0 (no gradient force) its chains are Eq. 12 stepped by lib.sgld
    alone, the seed rule of chunk 0 (sgld.chunk_generators), the unit noise (sgld.draw_noise), the coefficients
    (sgld.eq12_coefficients) and the kicked update (sgld.kick, sgld.kicked_update_), equal bit for bit at every
    step. With nβ > 0 the gradient enters through the same update (the grid equals lib.llc's chains up to
    rounding: test_the_grid_reproduces_lib_llc_coupled_targets)."""
    import math

    from lib import sgld
    rows, W = th.history_data(ladder, [1, 2], 300, _DIAL["seed"])
    draws, eps, C = 6, 1e-3, 3
    run = th.grid_chains(small_model, rows, W, nbetas=[0.0], eps=[eps], chains=C, draws=draws, burn_in=1,
                         gamma=_DIAL["gamma"], seed=_DIAL["seed"], snapshots=draws, measure=False)
    assert run["snapshot_steps"] == list(range(1, draws + 1))
    w0 = sgld.FlatParameters(small_model).w0
    w = w0.expand(1, 1, C, -1).clone()                              # (B, K, C, D) of one temperature and target
    half_eps = torch.as_tensor([0.5 * eps], dtype=w0.dtype)
    keep, pull, push = sgld.eq12_coefficients(half_eps, _DIAL["gamma"], torch.as_tensor([0.0], dtype=w0.dtype))
    anchor, sqrt_eps = pull.view(1, 1, 1) * w0, torch.as_tensor([math.sqrt(eps)], dtype=w0.dtype).view(1, 1, 1)
    _, noise_gen = sgld.chunk_generators(_DIAL["seed"], 0, "cpu")
    xi = torch.empty(C, w0.numel(), dtype=w0.dtype)
    for t in range(draws):
        xi = sgld.draw_noise(xi, noise_gen)
        sgld.kicked_update_(w, torch.zeros_like(w), sgld.kick(anchor, sqrt_eps, xi)[:, None], keep.view(1, 1, 1, 1),
                            push.view(1, 1, 1, 1))
        for k in range(W.shape[0]):                                 # every target: the same noise, no force
            assert np.array_equal(run["positions"][0, k, :, t], w[0, 0].numpy())
    assert np.abs(run["positions"][0, 0, :, -1] - w0.numpy()).max() > 1e-3  # the chains did move


def test_the_grid_and_the_sampler_draw_through_one_seed_rule(ladder, small_model, monkeypatch):
    """grid_chains takes its noise from lib.sgld's seed rule itself (no copy of it): a rule shifted by one seed
    gives the grid of the next seed, bit for bit."""
    from lib import sgld
    rows, W = th.history_data(ladder, [1], 300, _DIAL["seed"])
    kw = dict(_DIAL, nbetas=[60.0], eps=[5e-5], draws=8, burn_in=2, measure=False, snapshots=1)
    nxt = th.grid_chains(small_model, rows, W, **{**kw, "seed": kw["seed"] + 1})
    real = sgld.chunk_seeds
    monkeypatch.setattr(sgld, "chunk_seeds", lambda seed, j: real(seed + 1, j))
    shifted = th.grid_chains(small_model, rows, W, **kw)
    monkeypatch.undo()
    same = th.grid_chains(small_model, rows, W, **kw)
    assert np.array_equal(shifted["positions"], nxt["positions"]) and np.array_equal(shifted["per_chain"], nxt["per_chain"])
    assert not np.array_equal(same["positions"], nxt["positions"])


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
    assert th.one_step_violations(small_dial) == 0
    import copy
    shrunk = copy.deepcopy(small_dial)
    shrunk.steps["delta"] *= 0.5                             # a δ_t too small for what the chains did
    assert th.one_step_violations(shrunk) > 0
    noisy = copy.deepcopy(small_dial)
    noisy.steps["sep_all"][..., 1:] *= 1.5                  # separations an uncoupled pair would show
    assert th.one_step_violations(noisy) > 0


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


# ----- hand-made numbers: the paired z, the one-step inequality, the secant quotient ---------

def test_paired_z_by_hand():
    """mean 1.0, sample sd sqrt(0.02/3) = 0.08165, se = sd/√4 = 0.040825: z = 24.4949."""
    assert th._z(np.array([1.0, 1.1, 0.9, 1.0])) == pytest.approx(24.494897, rel=1e-6)
    assert th._z(np.array([0.0, 0.0, 0.0])) == 0.0                     # identical chains: 0, not NaN
    assert th._z(np.array([[2.0, 4.0, np.nan]]))[0] == pytest.approx(3.0 / (np.sqrt(2.0) / np.sqrt(2.0)))


def _fake_dial(sep, delta, lip, *, nbeta=10.0, eps=0.01, gamma=4.0):
    """A Dial with one temperature, one cutoff, one chain and the given per-step series."""
    sep = np.asarray(sep, float)[None, None, None]
    T = sep.shape[-1] - 1
    steps = {"sep_all": sep, "delta": np.asarray(delta, float)[None, None, None],
             "lipschitz": np.asarray(lip, float)[None, None, None], "gap": np.zeros((1, 1, 1, T)),
             "grad_q": np.zeros((1, 1, T))}
    return th.Dial([1], [nbeta], np.zeros((1, 1, 1)), np.zeros(1), np.zeros((1, 1)), sep[..., 1:], None, [],
                   np.zeros((1, 2)), {"gamma": gamma, "burn_in": 0, "draws": T}, 0.0, None, steps, None, [eps])


def test_one_step_inequality_by_hand():
    """a = |1 − εγ/2| = 0.98, c = εnβ/2 = 0.05: from ‖Δ_0‖ = 1 with δ_0 + s_0 = 2, the bound is 0.98 + 0.1 = 1.08."""
    assert th.one_step_violations(_fake_dial([1.0, 1.08], [1.5], [0.5])) == 0
    assert th.one_step_violations(_fake_dial([1.0, 1.0801], [1.5], [0.5])) == 1
    assert th.one_step_violations(_fake_dial([1.0, 1.0799], [1.5], [0.5], gamma=4.2)) == 1   # a = 0.979: 1.079
    with pytest.raises(ValueError, match="measure=True"):
        d = _fake_dial([1.0, 1.0], [1.0], [1.0])
        d.steps["delta"] = None
        th.one_step_violations(d)


def test_secant_quotient_from_positions_kept_at_every_step(ladder, small_model):
    """M_secant = max over t ≥ 1 of ‖∇L^(χ)(w_t) − ∇L^(χ)(w'_t)‖ / ‖w_t − w'_t‖, recomputed here from the positions
    themselves (kept at every step) and the two target losses: an off-by-one pairing of s_t with ‖Δ_{t±1}‖ differs."""
    draws = 12
    dial = th.resolution_dial(small_model, ladder, chis=[2, ladder.modes.rank], nbetas=[40.0], n=300, eps_nbeta=3e-3,
                              snapshots=draws, **{**_DIAL, "draws": draws, "burn_in": 2})
    assert dial.snapshot_steps == list(range(1, draws + 1))
    fs = th._target_losses(small_model, dial.data)
    g = torch.func.grad(fs[1])
    best = 0.0
    for i, t in enumerate(dial.snapshot_steps[:-1]):                 # steps 1..draws − 1 carry measurements
        for c in range(_DIAL["chains"]):
            w_q = torch.as_tensor(dial.positions[0, 0, c, i])
            w_chi = torch.as_tensor(dial.positions[0, 1, c, i])
            best = max(best, float((g(w_q) - g(w_chi)).norm() / (w_q - w_chi).norm()))
    cst = th.measure_constants(small_model, dial)
    assert cst["M_secant"] == pytest.approx(best, rel=1e-8)
    assert cst["M"] == max(cst["M_secant"], cst["M_lanczos"])


# ----- the quadratic prediction of λ̂ -------------------------------------------------------------

def test_local_quadratics_match_a_dense_hessian(ladder, small_model):
    rows, W = th.history_data(ladder, [1, ladder.modes.rank], 300, seed=0)
    quad = lq.local_quadratics(small_model, [(rows, W[k]) for k in range(W.shape[0])])
    for k in range(W.shape[0]):
        f, w0 = lq.flat_loss(small_model, cm.history_nll, (rows, W[k]))
        H = torch.autograd.functional.hessian(f, w0).numpy()
        g = torch.func.grad(f)(w0).numpy()
        ev, Q = np.linalg.eigh(H)
        assert np.allclose(quad.eigenvalues[k], ev, rtol=0, atol=1e-10)
        assert np.allclose(np.sort(np.abs(quad.gradient[k])), np.sort(np.abs(Q.T @ g)), rtol=0, atol=1e-10)
        assert np.linalg.norm(quad.gradient[k]) == pytest.approx(np.linalg.norm(g), rel=1e-10)
    assert quad.dimension == small_model_dimension(small_model)
    assert quad.curvature == pytest.approx(np.max(np.abs(quad.eigenvalues)))
    with pytest.raises(ValueError, match="max_dimension"):
        lq.local_quadratics(small_model, [(rows, W[0])], max_dimension=5)


def small_model_dimension(model):
    return sum(p.numel() for p in model.parameters())


# ----- the dial's schedule and decision rules ----------------------------------------------------

def test_resolve_against_a_fixed_tolerance():
    """Differences of 0.3 ± 0.05 (s.e. 0.05/√... by hand): inside ±0.5 with z = 2 → indistinguishable; 0.45 ± 0.05
    straddles → undecided; 0.7 ± 0.05 → distinguishable; the sign does not matter."""
    spread = np.array([-0.1, 0.1, -0.1, 0.1])                      # sd 0.11547, se 0.057735
    cells = np.stack([0.3 + spread, 0.45 + spread, 0.7 + spread, -0.7 + spread, np.zeros(4)])
    codes = th.resolve(cells, tolerance=0.5, z=2.0)
    assert codes.tolist() == [th.INDISTINGUISHABLE, th.UNDECIDED, th.DISTINGUISHABLE, th.DISTINGUISHABLE,
                              th.INDISTINGUISHABLE]
    # the edges, by hand: |D| + 2 se ≤ tol and |D| − 2 se > tol
    se = 0.1 * np.sqrt(4 / 3) / 2
    assert th.resolve((0.5 - 2 * se - 1e-9) + spread, 0.5).item() == th.INDISTINGUISHABLE
    assert th.resolve((0.5 - 2 * se + 1e-9) + spread, 0.5).item() == th.UNDECIDED
    assert th.resolve((0.5 + 2 * se + 1e-9) + spread, 0.5).item() == th.DISTINGUISHABLE
    assert th.resolve((0.5 + 2 * se - 1e-9) + spread, 0.5).item() == th.UNDECIDED
    # exactly at the tolerance with no spread: within it (≤), not beyond it (>)
    assert th.resolve(np.full(4, 0.5), 0.5).item() == th.INDISTINGUISHABLE
    assert th.resolve(np.full(4, -0.5), 0.5).item() == th.INDISTINGUISHABLE
    # more draws of the same difference settle it, never flip a decided cell
    many = 0.3 + np.tile(spread, 100)
    assert th.resolve(many, 0.5).item() == th.INDISTINGUISHABLE
    assert th.resolve(np.array([0.3, np.nan, np.nan]), 0.5).item() == th.UNDECIDED       # one finite chain
    with pytest.raises(ValueError, match="tolerance"):
        th.resolve(cells, tolerance=0.0)


def test_chi_star_band_and_the_monotone_verdict():
    I, U, Dd = th.INDISTINGUISHABLE, th.UNDECIDED, th.DISTINGUISHABLE
    chis = [1, 3, 5, 12]
    codes = np.array([[I, I, I, I],          # everything indistinguishable: χ* = 1
                      [Dd, U, I, I],         # χ* between 3 (U counted I) and 5
                      [Dd, Dd, Dd, I]])      # only the rank: χ* = 12
    assert th.chi_star(codes == I, chis) == [1, 5, 12]
    assert th.chi_star(np.array([[True, False, True, False]]), chis) == [None]
    assert th.chi_star_band(codes, chis) == [(1, 1), (3, 5), (12, 12)]
    assert th.monotone_verdict([(1, 1), (3, 5), (12, 12)]) == "supported"
    assert th.monotone_verdict([(3, 5), (1, 1), (12, 12)]) == "contradicted"
    assert th.monotone_verdict([(3, 5), (4, 6), (5, 5)]) == "inconclusive"       # overlapping bands only
    assert th.monotone_verdict([(3, 3), (3, 3)]) == "inconclusive"               # a dial that does not move
    assert th.monotone_verdict([(3, 4), (5, 6)]) == "supported"                  # disjoint, adjacent
    assert th.monotone_verdict([(3, 5), (5, 6)]) == "inconclusive"               # touching is not disjoint


# ----- bounds: the derived Theorem 7.3 dominates every sequence the one-step inequality allows -----

@settings(max_examples=80, deadline=None)
@given(st.floats(1e-5, 1e-2), st.floats(1.0, 1e4), st.floats(1.0, 1e3), st.floats(0.0, 20.0),
       st.one_of(st.just(0.0), st.floats(1e-100, 2.0)), st.integers(0, 2 ** 31 - 1))
@example(eps=1e-5, gamma=1.0, nbeta=1.0, M=0.99999, delta=1.0, seed=0)  # a − 1 = −5e-11: the closed form cancelled
def test_separation_bound_dominates_the_one_step_recursion(eps, gamma, nbeta, M, delta, seed):
    """Any x_t with x_0 = 0 and x_{t+1} ≤ |1 − εγ/2| x_t + (εnβ/2)(δ_t + s_t), δ_t ≤ δ, s_t ≤ M x_t, stays below the bound.
    (δ = 0 or at least 1e-100: near 1e-300 the subnormal floats round more coarsely than any relative tolerance.)"""
    rng = np.random.default_rng(seed)
    T = 60
    bound = th.separation_bound(np.arange(T + 1), eps=eps, gamma=gamma, nbeta=nbeta, M=M, delta=delta)
    x = 0.0
    for t in range(T):
        assert x <= bound[t] * (1 + 1e-12) + 1e-300
        x = abs(1 - eps * gamma / 2) * x + eps * nbeta / 2 * (delta * rng.uniform() + M * x * rng.uniform())
        x *= rng.uniform(0.9, 1.0) if rng.uniform() < 0.5 else 1.0
    # the bound is attained by the extreme sequence δ_t = δ, s_t = M x_t
    x = 0.0
    for t in range(T):
        x = (abs(1 - eps * gamma / 2) + eps * nbeta * M / 2) * x + eps * nbeta * delta / 2
    assert bound[T] == pytest.approx(x, rel=1e-9, abs=1e-300)


def test_llc_difference_bound_by_hand():
    assert th.llc_difference_bound(nbeta=10.0, K=2.0, mean_separation=0.5, eps_insensitivity=0.1) == pytest.approx(12.0)


def test_measure_false_runs_the_same_chains(ladder, small_model, small_dial):
    """Without the probe rows the chains are the same (only δ_t and s_t are not recorded)."""
    kw = dict(chis=[1, 2, ladder.modes.rank], nbetas=[30.0, 60.0], n=300, eps_nbeta=3e-3, **_DIAL)
    lean = th.resolution_dial(small_model, ladder, measure=False, **kw)
    assert np.allclose(lean.diff, small_dial.diff, rtol=0, atol=1e-9)
    assert lean.steps["delta"] is None and lean.steps["lipschitz"] is None
    assert np.allclose(lean.steps["gap"], small_dial.steps["gap"], rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="measure=True"):
        th.one_step_violations(lean)


def test_fixed_step_and_per_temperature_step(ladder, small_model):
    kw = dict(chis=[1, ladder.modes.rank], nbetas=[30.0, 60.0], n=300, **{**_DIAL, "draws": 12, "burn_in": 2})
    fixed = th.resolution_dial(small_model, ladder, eps=1e-4, **kw)
    assert fixed.eps == [1e-4, 1e-4] and fixed.settings["eps"] == [1e-4, 1e-4]
    scaled = th.resolution_dial(small_model, ladder, eps_nbeta=3e-3, **kw)
    assert scaled.eps == pytest.approx([1e-4, 5e-5])
    assert np.allclose(fixed.diff[0], scaled.diff[0], rtol=0, atol=1e-12)      # the same step at nβ = 30
    assert not np.allclose(fixed.diff[1], scaled.diff[1])
    with pytest.raises(ValueError, match="exactly one"):
        th.resolution_dial(small_model, ladder, eps=1e-4, eps_nbeta=3e-3, **kw)
    with pytest.raises(ValueError, match="exactly one"):
        th.resolution_dial(small_model, ladder, **kw)
    with pytest.raises(ValueError, match="'eps'"):
        th.resolution_dial(small_model, ladder, eps=-1.0, **kw)


def test_mixing_diagnostics_of_the_grid(small_dial):
    assert small_dial.rhat.shape == (2, 4) and small_dial.ess.shape == (2, 4, 3)
    assert np.all(np.isfinite(small_dial.rhat)) and np.all(small_dial.ess > 0)
    assert np.all(small_dial.ess <= small_dial.settings["draws"] - small_dial.settings["burn_in"] + 1e-9)
    assert np.allclose(small_dial.llc_se[:, 0], np.std(small_dial.per_chain[:, 0], axis=-1, ddof=1) / np.sqrt(3))


def test_critical_points_best_ratio_and_rows():
    cp = th.CriticalPoints([1, 3, 12], np.array([0.5, 0.2, 0.05]), np.array([-1.0, 0.0, 0.5]), np.zeros(3), 1.0, 0.5, 0.0)
    assert cp.best_ratio == pytest.approx(0.2)                        # the rank (12), smaller here, is left out
    assert [r["ratio to L's"] for r in cp.rows()] == pytest.approx([0.5, 0.2, 0.05])


# ----- the quadratic model without a dense Hessian; the dial in chunks ----------------------------

def test_taylor_quadratics_run_the_dense_models_chains(ladder, small_model):
    """The Hessian-vector path against the dense one on a model where both run: the same Taylor chains (the dense
    H from local_quadratics' eigenpairs) to float rounding, the Lanczos extremes equal the dense spectrum's, and
    the chains' mean prediction within 4 standard errors of the closed form."""
    rows, W = th.history_data(ladder, [1, ladder.modes.rank], 300, seed=0)
    datas = [(rows, W[k]) for k in range(W.shape[0])]
    dense = lq.local_quadratics(small_model, datas)
    taylor = lq.taylor_quadratics(small_model, datas, top=3)
    assert isinstance(lq.quadratic_model(small_model, datas, dense_limit=5), lq.TaylorQuadratic)
    assert isinstance(lq.quadratic_model(small_model, datas), lq.LocalQuadratic)
    for k in range(W.shape[0]):
        ev = dense.eigenvalues[k]
        np.testing.assert_allclose(taylor.eigenvalues[k], ev[np.argsort(-np.abs(ev))][:3], rtol=1e-6)
    assert taylor.curvature == pytest.approx(dense.curvature, rel=1e-6)
    f, w0 = lq.flat_loss(small_model, cm.history_nll, datas[0])
    H = torch.autograd.functional.hessian(f, w0)
    g = torch.as_tensor(taylor.gradients[0])
    kw = dict(nbetas=[30.0, 300.0], gamma=100.0, eps=1e-3, chains=3, draws=40, burn_in=10, seed=2)
    np.testing.assert_allclose(lq.taylor_chains(taylor.hvp(0), g, **kw), lq.taylor_chains(lambda U: U @ H, g, **kw),
                               rtol=1e-9, atol=1e-12)
    kw = dict(nbetas=[30.0, 300.0], gamma=100.0, eps=2e-3, burn_in=100, draws=600)
    per = np.stack([lq.taylor_chains(taylor.hvp(k), torch.as_tensor(taylor.gradients[k]), chains=64, seed=1, **kw)
                    for k in range(W.shape[0])], axis=1)                              # (B, K, C)
    np.testing.assert_allclose(taylor.predict(chains=64, seed=1, **kw), per.mean(-1), rtol=1e-12)
    closed = dense.predict(**kw)
    se = per.std(axis=-1, ddof=1) / np.sqrt(64)
    assert np.all(np.abs(per.mean(-1) - closed) < 4 * se)


def test_the_dial_in_chunks_equals_the_dial_at_once(ladder, small_model):
    rows, W = th.history_data(ladder, [1, 2, ladder.modes.rank], 300, seed=0)
    kw = dict(nbetas=[30.0, 60.0], gamma=100.0, eps=[1e-4, 5e-5], chains=5, draws=30, burn_in=10, seed=3,
              device="cpu", snapshots=2)
    whole = th.grid_chains(small_model, rows, W, **kw)
    parts = th.grid_chains(small_model, rows, W, chunk_chains=2, **kw)
    for key in ("per_chain", "sep_all", "grad_q", "delta", "lipschitz", "gap", "ess", "positions", "rhat"):
        np.testing.assert_allclose(parts[key], whole[key], rtol=1e-9, atol=1e-12, err_msg=key)
    assert np.array_equal(parts["first_bad"], whole["first_bad"])


def test_chunk_sizes_against_a_count_by_hand(monkeypatch):
    """Chains per chunk with K = 3 coupled targets, counted by hand: the SGLD engine's 8 state vectors plus 3
    activations per chain per target, and the dial's dial_cost of one chain index, each into half the free memory."""
    from lib import sgld

    monkeypatch.setattr(sgld, "available_bytes", lambda device: 10 ** 9)
    flat = sgld.FlatParameters(torch.nn.Linear(99, 10).double())          # D = 1000 float64: 8000 bytes a vector
    per_chain = 3 * (8 * 8000 + 3 * 4000)                                 # K = 3 targets × (state + activations)
    assert sgld.chains_per_chunk(flat, 4000, 10 ** 6, "cpu", None, targets=3) == 5 * 10 ** 8 // per_chain   # 2192
    assert sgld.chains_per_chunk(flat, 4000, 10 ** 6, "cpu", None, targets=1) == 5 * 10 ** 8 // (per_chain // 3)
    # the dial: B = 2 temperatures × K = 3 targets per chain index, 2 × 2 probes, d = 1000, 10 histories × 4
    # columns, 2 snapshots, 50 draws: 8 bytes × (6·2·1000 + 3·4·50 + 4·10·1000 + 3·10·10·4)
    one = 8 * (6 * 2 * 1000 + 3 * 4 * 50 + 4 * 10 * 1000 + 3 * 10 * 10 * 4)
    got = th.dial_chunk(n_betas=2, n_targets=3, chains=10 ** 6, draws=50, snapshots=2, n_params=1000, histories=10,
                        n_cols=4, measure=True, device="cpu")
    assert got == 5 * 10 ** 8 // one
    assert th.dial_chunk(n_betas=2, n_targets=3, chains=7, draws=50, snapshots=2, n_params=1000, histories=10,
                         n_cols=4, measure=True, device="cpu") == 7
    monkeypatch.setattr(sgld, "available_bytes", lambda device: one)
    with pytest.raises(MemoryError, match="one chain of the dial"):
        th.dial_chunk(n_betas=2, n_targets=3, chains=7, draws=50, snapshots=2, n_params=1000, histories=10,
                      n_cols=4, measure=True, device="cpu")


def test_the_dial_in_chunks_resumes_chunk_by_chunk(ladder, small_model, tmp_path):
    rows, W = th.history_data(ladder, [1, ladder.modes.rank], 300, seed=0)
    kw = dict(nbetas=[30.0], gamma=100.0, eps=[1e-4], chains=4, draws=12, burn_in=4, seed=5, device="cpu",
              chunk_chains=2)
    first = th.grid_chains(small_model, rows, W, workdir=tmp_path, **kw)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chunk0", "chunk1"]
    assert all((tmp_path / c / "run.pkl").exists() and not (tmp_path / c / "resume.pt").exists()
               for c in ("chunk0", "chunk1"))
    (tmp_path / "chunk1" / "run.pkl").unlink()                   # the second chunk to run again
    again = th.grid_chains(small_model, rows, W, workdir=tmp_path, **kw)
    np.testing.assert_array_equal(again["per_chain"], first["per_chain"])


def test_curvature_trace_matches_the_dense_hessian_and_the_prior_dominated_llc(ladder, small_model):
    """nβ tr(H)/2γ by Hutchinson against the dense Hessian's trace (within 4 exact standard errors), and against
    quadratic_llc's curvature part where nβ‖H‖ ≪ γ (g = 0: ½ Σ nβh/(nβh + γ) → nβ tr H / 2γ)."""
    rows, W = th.history_data(ladder, [ladder.modes.rank], 300, seed=0)
    f, w0 = lq.flat_loss(small_model, cm.history_nll, (rows, W[0]))
    H = torch.autograd.functional.hessian(f, w0).numpy()
    nbeta, gamma, samples = 10.0, 1e5, 300
    est, se = th.curvature_trace(small_model, cm.history_nll, (rows, W[0]), nbeta=nbeta, gamma=gamma, samples=samples)
    scale = nbeta / (2 * gamma)
    exact_se = scale * np.sqrt(2 * (np.sum(H ** 2) - np.sum(np.diag(H) ** 2)) / samples)
    assert abs(est - scale * np.trace(H)) < 4 * exact_se and 0.7 < se / exact_se < 1.3
    h = np.linalg.eigvalsh(H)
    assert scale * np.trace(H) == pytest.approx(lq.quadratic_llc(h, 0 * h, nbeta=nbeta, gamma=gamma), rel=1e-3)
    with pytest.raises(ValueError, match="'gamma'"):
        th.curvature_trace(small_model, cm.history_nll, (rows, W[0]), nbeta=1.0, gamma=0.0)
