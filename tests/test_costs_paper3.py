"""The cost estimates of the chapters Learning coefficients, Insensitivity and LLC theorems (``costs:`` in their
declarations, printed by ``lowrank-book plan``), each against an independent count at small sizes.

Floating-point operations are counted by ``torch.utils.flop_counter.FlopCounterMode`` on one real step (it
counts the matrix products, which is what the estimates count); chain-steps and array sizes against what a
real run makes. The factor each estimate is held to is stated, with its reason, at each test.
"""
import math

import numpy as np
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from lib import conditional_models as cm, insensitivity as ins, known_llc, llc, llc_theorems as th
from lib import llc_theorems_experiments as tx, local_quadratic as lq


@pytest.fixture(scope="module")
def ladder():
    return cm.ladder_support(history_length=2, ladder_bigrams=4, ladder_top=0.03, ladder_ratio=0.75,
                             background_size=3, seed=0)


def counted(fn) -> int:
    with FlopCounterMode(display=False) as fc:
        fn()
    return fc.get_total_flops()


@pytest.mark.parametrize("spec", [{"kind": "factored", "hidden": 16}, {"kind": "transformer", "hidden": 8, "layers": 2}])
def test_training_flops_match_a_counted_step(ladder, spec):
    """Exact for the factored model (every product is a Linear); the transformer adds attention's products,
    a few percent at k = 2 tokens: the count is within [1, 1.25] × the estimate."""
    model = cm.build(spec, ladder, 0)
    rows = torch.as_tensor(ladder.modes.rows)
    tokens = ladder.k if spec["kind"] == "transformer" else 1
    measured = counted(lambda: (-model(rows).mean()).backward())
    estimate = ins.training_flops(ins.matmul_weights(model), len(rows), tokens, 1)
    assert estimate <= measured <= 1.25 * estimate, (measured, estimate)
    assert ins.training_flops(100, 10, 2, 3) == 6 * 100 * 10 * 2 * 3


def test_jacobian_peak_is_the_chunk_the_code_forms(ladder):
    """The chunk jacobian_chunks allocates (three times the Jacobian block, its workspace) is the estimate
    exactly, whether the budget splits the histories or holds them all."""
    model = cm.build({"kind": "factored", "hidden": 4}, ladder, 0).double()
    d, (n_x, n_y) = cm.n_params(model), ladder.modes.shape
    for budget in (3 * 8 * n_y * d * 5 + 7, 2 ** 40):
        sl, J = next(ins.jacobian_chunks(model, ladder.modes, max_bytes=budget))
        peak, flops = ins.jacobian_cost(d, n_x, n_y, 1, budget)
        assert peak == 3 * J.numel() * J.element_size(), (peak, J.shape)
    assert J.shape[0] == n_x and flops == 4.0 * d * n_x * n_y


def test_insensitivity_plan_lists_every_model_and_grows_with_steps():
    values = dict(history_length=1, ladder_bigrams=4, ladder_top=0.08, ladder_ratio=0.7, background_size=4, seed=0,
                  factored_hidden=[2, 8], transformer_hidden=[8], transformer_layers=1, train_steps=10,
                  n_checkpoints=2, jacobian_mb=1)
    steps = ins.heavy_steps(values)
    assert [s.name for s in steps] == ["training factored h=2", "Jacobians of factored h=2", "training factored h=8",
                                       "Jacobians of factored h=8", "training transformer d=8",
                                       "Jacobians of transformer d=8"]
    double = ins.heavy_steps({**values, "train_steps": 20})
    assert double[0].flops == pytest.approx(2 * steps[0].flops) and double[1].flops == steps[1].flops
    assert all(s.peak_bytes <= 2 ** 20 + 1e6 for s in steps[1::2])  # the Jacobian chunk stays in its budget


def test_chain_steps_count_what_eps_limits_runs():
    """known_llc.chain_steps against the steps eps_limits actually ran (draws × chains, every run)."""
    problem = known_llc.regular_problem(2, n=20, seed=0)
    nbetas, eps_nbeta, t, chains = [10.0, 30.0], [0.4, 0.2], 0.3, 3
    points = llc.eps_limits(problem.model, known_llc.squared_error, problem.data, nbetas=nbetas, eps_nbeta=eps_nbeta,
                            langevin_time=t, gamma=1.0, chains=chains, batch_size=20, seed=0, progress=False)
    ran = sum(r.settings["draws"] * chains for p in points for r in p.runs)
    assert known_llc.chain_steps(nbetas, eps_nbeta, t, chains) == ran
    assert known_llc.chain_steps(nbetas, eps_nbeta, t, chains + 1) != ran


def test_known_llc_plan_counts_each_family():
    values = dict(n_samples=100, nbeta=300.0, gamma=1.0, eps_nbeta=[0.2, 0.1], relax=3.0, chains=4, regular_d=4,
                  regular_eps_nbeta=[0.4, 0.2], regular_time=0.5, rrr_cases=[[5, 4, 5, 0], [5, 3, 5, 0]],
                  rrr_limit_nbetas=[100.0, 300.0, 1000.0], nc_cases=[[1], [1, 2]], nc_nbetas=[10.0, 30.0, 100.0],
                  nc_chains=8, noisy_case=[5, 3, 5, 1], noisy_n=1000, noisy_batch_size=100)
    steps = {s.name: s for s in known_llc.heavy_steps(values)}
    rrr = steps["SGLD on the reduced-rank regression"]
    # (5, 4, 5, 0) has multiplicity one (one nβ), (5, 3, 5, 0) two (the three nβ of the limit), by hand:
    by_hand = sum(4 * math.ceil(3.0 * nb / f) for nb in [300.0] for f in [0.2, 0.1]) * 6.0 * 40 * 100 \
        + sum(4 * math.ceil(3.0 * nb / f) for nb in [100.0, 300.0, 1000.0] for f in [0.2, 0.1]) * 6.0 * 30 * 100
    assert rrr.flops == pytest.approx(by_hand)
    assert len(steps) == 4


def test_lm_sgld_flops_match_a_counted_step():
    """One SGLD step on a causal LM: the counted products against 6 per parameter per token. The estimate
    counts the input embedding (a lookup) as a product and the count adds attention's T² products: at
    vocab 64, width 32, T = 16 the count is within [0.6, 1.1] × the estimate."""
    from lib.models import mini_pythia
    from lib.models.causal_lm import quiet_transformers, sequence_loss
    from transformers import GPTNeoXForCausalLM

    config = mini_pythia.mini_pythia_config("p-tiny", 64, 16)
    config.hidden_size, config.intermediate_size, config.num_hidden_layers = 32, 128, 1
    with quiet_transformers():
        model = GPTNeoXForCausalLM(config)
    batch = torch.randint(0, 64, (4, 16))
    measured = counted(lambda: sequence_loss(model, (batch,)).sum().backward())
    _, estimate = llc.lm_sgld_cost(config, chains=1, steps=1, batch_size=4, windows=0)
    assert 0.6 * estimate <= measured <= 1.1 * estimate, (measured, estimate)
    peak, _ = llc.lm_sgld_cost(config, chains=8, steps=1, batch_size=4, windows=0)
    assert peak > llc.lm_sgld_cost(config, chains=1, steps=1, batch_size=4, windows=0)[0]


def test_dial_flops_match_a_counted_gradient(ladder):
    """One step of a dial is one gradient of the per-history loss for every chain and probe: for a factored
    model the counted products equal the estimate (every product a Linear)."""
    model = cm.build({"kind": "factored", "hidden": 8}, ladder, 0)
    rows = torch.as_tensor(ladder.modes.rows)
    per_row = counted(lambda: (-model(rows).mean()).backward())
    kw = dict(n_betas=2, n_chis=3, chains=2, draws=5, snapshots=0, n_params=cm.n_params(model),
              weights=ins.matmul_weights(model), histories=len(rows), n_cols=ladder.n_cols, tokens=1)
    _, flops = th.dial_cost(**kw)
    rows_and_probes = 2 * 4 * 2 + 2 * 3 * 2
    assert flops == pytest.approx(per_row * rows_and_probes * 5)
    _, unmeasured = th.dial_cost(**kw, measure=False)
    assert unmeasured == pytest.approx(per_row * 2 * 4 * 2 * 5)


def test_dial_peak_holds_the_kept_positions():
    """The kept positions (R × snapshots × d float64) dominate at the paper's sizes: the estimate holds them."""
    peak, _ = th.dial_cost(n_betas=7, n_chis=13, chains=64, draws=1000, snapshots=100, n_params=44338, weights=1,
                           histories=1, n_cols=1, tokens=1)
    positions = 7 * 14 * 64 * 100 * 44338 * 8
    assert positions <= peak <= 1.1 * positions


def test_dial_steps_are_the_schedule_at_zero_curvature():
    """The plan's steps per chain are dial_schedule's at a vanishing curvature (a lower bound of the real one)."""
    sched = tx.dial_schedule(1e-12, [10.0, 100.0], 100.0, step_scale=0.25, burn_in_relaxations=1.0, relaxations=2.0)
    tau = 2 / 0.25
    planned = math.ceil(1.0 * tau) + math.ceil(2.0 * tau)
    assert planned <= sched["draws"] <= planned + 2  # the same steps, up to the rounding of 1e-12 · nβ
    stiffer = tx.dial_schedule(1.0, [10.0, 100.0], 100.0, step_scale=0.25, burn_in_relaxations=1.0, relaxations=2.0)
    assert stiffer["draws"] > sched["draws"]


def test_cutoffs_read_chi_at_or_above_the_rank_as_the_rank():
    assert th.cutoffs([1, 3, 500], 10) == [1, 3, 10]
    assert th.cutoffs([10], 10) == [10]
    assert th.cutoffs([2, 2, 11], 10) == [2, 10]
    assert th.cutoffs([9], 10) == [9, 10]


def test_local_quadratics_flops_cover_a_counted_hessian(ladder):
    """The Hessian of one target, counted, against the estimate's differentiation term (12 per weight per
    token per parameter): reverse-over-reverse through a Linear costs 2 to 3 gradients, so the count lies
    within [0.5, 2] × that term; the peak holds the d × d Hessian four times over."""
    from lib.local_quadratic import local_quadratics_cost

    model = cm.build({"kind": "factored", "hidden": 4}, ladder, 0).double()
    rows, W = th.history_data(ladder, [1], 200, 0)
    d, weights = cm.n_params(model), ins.matmul_weights(model)
    f, w0 = lq.flat_loss(model, cm.history_nll, (rows, W[0]))
    measured = counted(lambda: torch.func.jacrev(torch.func.jacrev(f))(w0.detach().double()))
    peak, flops = local_quadratics_cost(d, weights, len(rows), 1, 1)
    differentiation = flops - 9 * d ** 3
    assert 0.5 * differentiation <= measured <= 2 * differentiation, (measured, differentiation)
    assert peak == 4 * 8 * d * d


def test_insensitivity_settings_take_its_smoke_presets_on_the_paper_profile_only():
    from lib.book.chapters import chapters

    presets = chapters()["insensitivity"].presets
    smoke = tx.insensitivity_settings("paper", 0, "cpu", smoke=True)
    paper = tx.insensitivity_settings("paper", 0, "cpu")
    assert all(smoke[k] == v for k, v in presets["smoke"].items())
    assert paper["n_samples"] == presets["paper"]["n_samples"] != smoke["n_samples"]
    with pytest.raises(ValueError, match="paper"):
        tx.insensitivity_settings("ci", 0, "cpu", smoke=True)


def test_tokenizer_vocab_size_reads_the_spec():
    assert llc.tokenizer_vocab_size("bpe:2048") == 2048
    assert llc.tokenizer_vocab_size("hf:no-such-org/no-such-model-anywhere") == 50_304  # Pythia's, when not cached


def test_intro_settings_take_its_smoke_presets_on_the_paper_profile_only():
    """What a smoke run of Learning coefficients, Insensitivity and LLC theorems replays: the Introduction's
    paper presets with its smoke cuts on top (the hub corpus and tokenizer kept)."""
    from lib import substrate
    from lib.book.chapters import chapters

    presets = chapters()["intro"].presets
    smoke = substrate.intro_settings("paper", 0, "cpu", smoke=True)
    assert all(smoke[k] == v for k, v in presets["smoke"].items())
    assert smoke["corpus"] == presets["paper"]["corpus"] and smoke["tokenizer"] == presets["paper"]["tokenizer"]
    assert substrate.intro_settings("paper", 0, "cpu")["train_steps"] == presets["paper"]["train_steps"]
    with pytest.raises(ValueError, match="paper"):
        substrate.intro_settings("ci", 0, "cpu", smoke=True)


def test_taylor_quadratics_flops_cover_a_counted_product_and_the_peak_counts_the_chains(ladder):
    """One forward-over-reverse Hessian-vector product, counted, against the estimate's per-product term (12 per
    weight per token: about twice a gradient): within [0.5, 2] of it; the peak counted by hand."""
    model = cm.build({"kind": "factored", "hidden": 4}, ladder, 0).double()
    rows, W = th.history_data(ladder, [1], 200, 0)
    d, weights = cm.n_params(model), ins.matmul_weights(model)
    f, w0 = lq.flat_loss(model, cm.history_nll, (rows, W[0]))
    w0 = w0.detach().double()
    measured = counted(lambda: torch.func.jvp(torch.func.grad(f), (w0,), (torch.ones_like(w0),)))
    _, flops = lq.taylor_quadratics_cost(d, weights, len(rows), 1, ladder.n_cols, 1, n_betas=1, chains=1, draws=1,
                                         lanczos_products=0)
    assert 0.5 * flops <= measured <= 2 * flops, (measured, flops)
    peak, _ = lq.taylor_quadratics_cost(100, 1, 10, 1, 4, 3, n_betas=2, chains=5, draws=7)
    assert peak == 8 * (4 * 10 * 100 + 6 * 10 * 10 * 4)


def test_llc_theorems_paper_plan_fits_a_24_gb_gpu():
    """The paper profile's heavy steps, each within 24 GB: the factored models (16,000-44,000 parameters) take the
    Hessian-vector path, the dials run in chunks of chains."""
    from lib.book.chapters import chapters

    ch = chapters()["llc_theorems"]
    values = ch.settings("paper", 0, "cpu")
    steps = tx.heavy_steps(values)
    assert all(s.peak_bytes < 24e9 for s in steps), [(s.name, s.peak_bytes) for s in steps if s.peak_bytes >= 24e9]
    assert any("Hessian-vector" in s.sizes for s in steps if s.name.startswith("local quadratics of factored h=64"))
