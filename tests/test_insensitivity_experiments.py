"""lib.insensitivity_experiments: the chapter "Insensitivity"'s studies as calls, against closed forms and
trajectories made by hand."""
import numpy as np
import pytest

from lib import conditional_models as cm
from lib import insensitivity as ins
from lib import insensitivity_experiments as ix
from lib import languages as L


@pytest.fixture(scope="module")
def ladder():
    return cm.Support.of(L.mode_ladder(k=1, n_bigrams=5, rng=0), 1, 1, name="ladder")


@pytest.fixture(scope="module")
def factored(ladder):
    tr = cm.train(ladder, {"kind": "factored", "hidden": 3, "embed_dim": 4}, n=2000, steps=150, seed=1,
                  progress=False, use_cache=False)
    return tr.model(ladder)


def test_tabular_check_against_its_closed_forms(ladder):
    tab = ix.tabular_check(ladder, (0, 1))
    assert tab.jacobian_error < 1e-12 and tab.delta_error < 1e-12
    want = [np.linalg.norm(ladder.modes.q_x[:, None] * (ins.dense_conditional(ladder.modes) - ins.effective(ladder.modes, c)))
            for c in range(ladder.modes.rank + 1)]
    assert np.allclose(tab.delta, want, rtol=0, atol=1e-14)
    assert tab.delta[0] > tab.delta[2] > 0 and tab.delta[-1] < 1e-8          # the data's own insensitivity falls with χ


def test_final_constants_first_below_and_relative(ladder, factored):
    fc = ix.final_constants({"f": factored}, ladder.modes)
    assert fc.identity_error < 1e-10 and fc.zero_at_rank < 1e-8
    at_rank, at_zero = ins.constants(factored, ladder.modes, ladder.modes.rank), ins.constants(factored, ladder.modes, 0)
    assert fc.zero_at_rank == pytest.approx(max(at_rank.delta / at_zero.delta, at_rank.eps / at_zero.eps), rel=1e-6)
    assert [c.chi for c in fc.constants["f"]] == list(range(ladder.modes.rank + 1))
    fake = ix.FinalConstants({"m": [ins.Constants(c, d, 0.0, None, 0.0, 0.0, 0.0) for c, d in
                                     enumerate([1.0, 0.5, 0.05, 0.2, 0.08, 0.0])]}, 0.0, 0.0)
    assert fake.first_below("m", 0.1, 5) == 4                 # 0.2 at χ = 3 breaks the run from χ = 2
    assert fake.first_below("m", 0.1, 2) == 2
    assert fake.first_below("m", 0.01, 4) is None
    assert fake.relative_delta(3) == {"m": pytest.approx(0.2)}


def test_learning_order_on_a_trajectory_made_by_hand(ladder):
    """Conditionals moving from uniform to q mode by mode, the larger σ first: ρ < 0, "agrees"; the reverse order
    "disagrees"."""
    modes = ladder.modes
    r = modes.rank
    Vf, Uf = modes.full_bases()
    uniform = np.full(modes.shape, 1.0 / modes.shape[1])
    steps = np.arange(0, 2001, 10)

    def run_for(order):
        class Run:
            eval_steps = steps
        C0, C1 = ins.coordinates(modes, uniform), ins.coordinates(modes, modes.conditional)
        conds = []
        for t in steps:
            C = C0.copy()
            for rank_pos, a in enumerate(order):          # mode a switches on at step 100 (rank_pos + 1)
                if t >= 100 * (rank_pos + 1):
                    C[a, a] = C1[a, a]
            left = Vf * np.sqrt(modes.q_x)[:, None]       # invert C = leftᵀ F Uf on the diagonal moves only
            F = uniform + np.linalg.solve(left.T, (C - C0)) @ Uf.T
            full = np.zeros((ladder.n_rows, ladder.n_cols))
            full[modes.rows] = F
            conds.append(full)
        Run.conditionals = np.array(conds)
        return ix.learning_order(modes, Run, level=0.5, n_boot=300, seed=0)

    forward = run_for(list(range(r)))
    assert forward["verdict"] == "agrees" and forward["rho"] < -0.9
    backward = run_for(list(range(r))[::-1])
    assert backward["verdict"] == "disagrees" and backward["rho"] > 0.9
    scrambled = run_for([r // 2, 0, r - 1, 2, r - 3, 1, r - 2, 3, r - 4][:r])   # no order: the interval holds 0
    assert scrambled["low"] < 0 < scrambled["high"] and scrambled["verdict"] == "inconclusive"


def test_plausibility_checks_count_and_take_the_worst():
    rows = [{"parseval_tail": 4.0, "parseval_direct": 4.0, "projection_gap": 0.0, "value": 1.0, "term_tail": 0.5,
             "term_family": 0.5, "bound": 2.0},
            {"parseval_tail": 1.0, "parseval_direct": 1.0 + 1e-9, "projection_gap": 2.0, "value": 0.3, "term_tail": 0.1,
             "term_family": 0.1, "bound": 0.25},
            {"parseval_tail": 0.04, "parseval_direct": 0.04, "projection_gap": 0.1, "value": 0.0, "term_tail": 0.0,
             "term_family": 0.0, "bound": 1.0},
            {"parseval_tail": 0.0, "parseval_direct": 0.0, "projection_gap": 0.0, "value": 0.0, "term_tail": 0.0,
             "term_family": 0.0, "bound": 0.0}]
    pc = ix.plausibility_checks({"case": rows})
    assert pc["parseval"] == pytest.approx(1e-9)
    assert pc["split"] == pytest.approx(0.1)                  # |0.3 − 0.2| beats 0.3 − 0.25
    assert pc["family_dominates"] == {"case": (1, 2)}          # χ = 1: 2 > √1; χ = 2: 0.1 < √0.04 = 0.2


def test_entropy_rate_comparison_by_hand(ladder):
    modes = ladder.modes
    out = ix.entropy_rate_comparison(modes, 2, 1.5)
    assert out["typical_q_lm"] == pytest.approx(np.exp(-3.0))
    assert out["typical_q_chain"] == pytest.approx(np.exp(-2 * modes.conditional_entropy()))
    r = modes.rank
    assert out["median_tail_sigma2"] == pytest.approx(np.median(modes.sigma[r // 2:r] ** 2))
    assert out["orders"]["lm"] == pytest.approx(np.log10(out["median_tail_sigma2"]) + 3.0 / np.log(10))


def test_delta_along_training_at_every_checkpoint(ladder):
    run = cm.train(ladder, {"kind": "factored", "hidden": 2, "embed_dim": 3}, n=500, steps=30, seed=2, n_checkpoints=4,
                   progress=False, use_cache=False)
    steps, D = ix.delta_along_training(run, ladder)
    assert steps == sorted(run.checkpoints) and steps[0] == 0 and D.shape == (len(steps), ladder.modes.rank + 1)
    for i in (0, len(steps) - 1):
        direct = [ins.constants(run.model(ladder, steps[i]), ladder.modes, chi).delta for chi in (0, 2)]
        assert D[i, [0, 2]] == pytest.approx(direct, rel=1e-9)
    assert not np.allclose(D[0], D[-1])                               # training moved δ


def test_the_old_names_in_lib_insensitivity_still_answer():
    """The studies moved here from lib.insensitivity; their old names forward (lib.book.moved), and the
    mathematics that lib.llc_theorems imports stays where it was."""
    for name in ("heavy_steps", "tabular_check", "final_constants", "learning_order", "model_specs"):
        assert getattr(ins, name) is getattr(ix, name)
    from lib.insensitivity import constants, constants_all, effective, matmul_weights  # noqa: F401
    with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
        ins.not_a_name
