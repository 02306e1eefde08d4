"""lib.insensitivity and lib.conditional_models: Defs 6.1–6.4, their identities, and bad input."""
import numpy as np
import pytest
import torch

from lib import conditional_models as cm
from lib import insensitivity as ins
from lib import languages as L


@pytest.fixture(scope="module")
def ladder():
    return cm.Support.of(L.mode_ladder(k=1, n_bigrams=5, rng=0), 1, 1, name="ladder")


@pytest.fixture(scope="module")
def factored(ladder):
    tr = cm.train(ladder, {"kind": "factored", "hidden": 3, "embed_dim": 4}, n=2000, steps=150, seed=1,
                  progress=False, use_cache=False)
    return tr.model(ladder)


def test_mode_ladder_has_the_planted_ladder_of_singular_values():
    lang = L.mode_ladder(k=1, n_bigrams=6, top=0.08, ratio=0.5, rng=0)
    sup = cm.Support.of(lang, 1, 1)
    planted = sorted((m.sigma for m in lang.predicted_modes()), reverse=True)
    assert np.allclose(planted, np.sqrt(0.08 * 0.5 ** np.arange(6)), rtol=1e-10)
    for s in planted:                      # each planted σ is a singular value of the joint
        assert np.min(np.abs(sup.modes.sigma - s)) < 1e-10
    with pytest.raises(ValueError, match="ratio"):
        L.mode_ladder(ratio=1.5)


def test_a_family_that_is_not_a_language_is_refused():
    A1 = np.array([0.5, 0.5])
    A2 = np.array([[0.3, 0.3], [0.3, 0.1]])      # rows sum to 0.6, 0.4: not A_1
    with pytest.raises(cm.SupportError, match="language condition"):
        cm.Support.of(L.TensorLanguage([A1, A2]), 1, 1)
    cm.Support.of(L.TensorLanguage([A1, np.array([[0.3, 0.2], [0.1, 0.4]])]), 1, 1)   # a language passes


def test_tabular_jacobian_matches_the_closed_form(ladder):
    torch.manual_seed(0)
    model = cm.TabularModel(ladder.n_rows, ladder.n_cols).double()
    J = ins.jacobian(model, ladder.modes).numpy()
    p = torch.softmax(model.theta, -1).detach().numpy()
    nx, ny = ladder.modes.shape
    rows = ladder.modes.rows
    want = np.zeros((nx, ny, ladder.n_rows, ny))
    for i, x in enumerate(rows):
        want[i, :, x, :] = np.eye(ny) - p[x][None, :]
    assert np.abs(J - want.reshape(nx, ny, -1)).max() < 1e-12
    want[0, 0, rows[0], 0] += 1e-3                              # the comparison sees a small change
    assert np.abs(J - want.reshape(nx, ny, -1)).max() > 1e-4


def test_tabular_delta_is_the_norm_of_the_difference_at_every_w(ladder):
    """For the fully expressive model, ∇L − ∇L^(χ) = −D_χ entrywise (rows of D sum to 0)."""
    for seed in (0, 1):
        torch.manual_seed(seed)
        model = cm.TabularModel(ladder.n_rows, ladder.n_cols).double()
        for chi in (0, 2, ladder.modes.rank):
            c = ins.constants(model, ladder.modes, chi)
            D = ins.difference_weights(ladder.modes, chi)
            assert c.delta == pytest.approx(np.linalg.norm(D), abs=1e-12)
    assert ins.constants(model, ladder.modes, 0).delta > 0.1


def test_the_pairing_identity_in_float64(ladder, factored):
    chis = list(range(ladder.modes.rank + 1))
    via_jacobian = ins.pairings(factored, ladder.modes, chis)
    via_vjp = ins.constants_all(factored, ladder.modes, chis, max_bytes=10_000)   # cutoffs in several groups
    for chi, pr, c in zip(chis, via_jacobian, via_vjp):
        direct = ins.constants(factored, ladder.modes, chi)
        assert np.abs(direct.grad_diff + pr.grad).max() < 1e-10          # ∇L − ∇L^(χ) = −g
        assert abs(direct.loss_diff + pr.value) < 1e-10                  # L − L^(χ) = −e
        assert np.abs(direct.grad_diff - c.grad_diff).max() < 1e-10
        assert direct.delta == pytest.approx(c.delta, abs=1e-10)
        assert direct.loss == pytest.approx(c.loss, abs=1e-12) and direct.loss_chi == pytest.approx(c.loss_chi, abs=1e-10)
    # the comparison is not vacuous: a different cutoff gives a different vector
    assert np.abs(via_jacobian[0].grad - via_jacobian[1].grad).max() > 1e-3


def test_constants_vanish_once_q_chi_is_q(ladder, factored):
    r = ladder.modes.rank
    at_rank = ins.constants(factored, ladder.modes, r)
    assert at_rank.delta < 1e-8 and at_rank.eps < 1e-8
    # the constant function is in H_χ for every χ, so q^(χ) = q can happen below the rank
    exact = ladder.modes.truncation_curve().first_exact()
    below = ins.constants(factored, ladder.modes, exact - 1)
    assert below.delta > 1e-4 and below.eps > 1e-4


def test_chunked_jacobian_equals_one_chunk(ladder, factored):
    whole = ins.jacobian(factored, ladder.modes)
    d = whole.shape[-1]
    tiny = 3 * ladder.n_cols * d * 8 * 2                       # two histories per chunk
    assert torch.allclose(ins.jacobian(factored, ladder.modes, max_bytes=tiny), whole, rtol=0, atol=1e-14)  # rounding only


def test_transformer_identity_in_float64(ladder):
    torch.manual_seed(0)
    model = cm.build({"kind": "transformer", "hidden": 8, "layers": 1, "heads": 2}, ladder, seed=0).double()
    c_direct = ins.constants(model, ladder.modes, 2)
    c_vjp = ins.constants_all(model, ladder.modes, [2])[0]
    c_jac = ins.pairing(model, ladder.modes, 2)
    assert np.abs(c_direct.grad_diff - c_vjp.grad_diff).max() < 1e-10
    assert np.abs(c_direct.grad_diff + c_jac.grad).max() < 1e-10
    assert c_direct.delta > 0


@pytest.mark.parametrize("chi", [-1, 99, 1.5, True, "2"])
def test_chi_outside_the_range_is_refused(ladder, factored, chi):
    with pytest.raises(ins.InsensitivityError, match="parameter 'chi'"):
        ins.constants(factored, ladder.modes, chi)


def test_a_model_of_another_support_is_refused(ladder):
    wrong_rows = cm.FactoredModel(ladder.n_rows + 1, ladder.n_cols).double()
    with pytest.raises(ins.InsensitivityError, match="support does not match"):
        ins.constants(wrong_rows, ladder.modes, 1)
    wrong_cols = cm.FactoredModel(ladder.n_rows, ladder.n_cols + 2).double()
    with pytest.raises(ins.InsensitivityError, match="support does not match"):
        ins.constants(wrong_cols, ladder.modes, 1)

    class Logits(torch.nn.Module):                 # logits, not log-probabilities
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(ladder.n_rows, ladder.n_cols, dtype=torch.float64))

        def forward(self, rows):
            return self.w[rows]

    with pytest.raises(ins.InsensitivityError, match="not log-probabilities"):
        ins.constants(Logits(), ladder.modes, 1)


def test_a_jacobian_too_large_is_refused_before_work(ladder, factored):
    with pytest.raises(ins.InsensitivityError, match="does not fit"):
        next(ins.jacobian_chunks(factored, ladder.modes, max_bytes=100))


def test_coordinates_of_q_are_its_singular_values(ladder):
    modes = ladder.modes
    cond = modes.conditional
    C = ins.coordinates(modes, cond)
    k = len(modes.sigma)
    assert np.abs(C[:k, :k] - np.diag(modes.sigma)).max() < 1e-12
    bumped = cond.copy()
    bumped[0] += 0.01 * (np.arange(cond.shape[1]) == 0) - 0.01 / cond.shape[1]
    assert np.abs(ins.coordinates(modes, bumped)[:k, :k] - np.diag(modes.sigma)).max() > 1e-4


def test_learning_steps_and_rank_correlation():
    steps = np.arange(11) * 10
    fast = np.minimum(steps / 20, 1.0)             # reaches half its way at step 10
    slow = np.minimum(steps / 80, 1.0)             # at step 40
    never = np.zeros_like(fast)
    got, learned = ins.learning_steps(steps, np.stack([fast, slow, never], 1), sigma=[1.0, 1.0, 1.0])
    assert got[0] == 10 and got[1] == 40 and np.isnan(got[2])
    assert learned.tolist() == [True, True, False]
    x = np.arange(10.0)
    assert ins.rank_correlation(x, -x)["high"] < 0
    assert ins.rank_correlation(x, x)["low"] > 0


def test_rank_correlation_se_is_the_spread_of_its_own_replicates():
    """``se=True`` adds only the s.d. of the bootstrap replicates, checked against a bootstrap by hand;
    the other keys are those of the call without it."""
    from scipy.stats import spearmanr
    rng = np.random.default_rng(3)
    x = rng.normal(size=12)
    y = x + rng.normal(size=12)
    plain = ins.rank_correlation(x, y, n_boot=300, seed=5)
    with_se = ins.rank_correlation(x, y, n_boot=300, seed=5, se=True)
    assert {k: with_se[k] for k in plain} == plain and set(with_se) - set(plain) == {"se"}
    draw = np.random.default_rng(5)
    reps = []
    for _ in range(300):
        i = draw.integers(0, 12, 12)
        if np.ptp(x[i]) > 0 and np.ptp(y[i]) > 0:
            reps.append(spearmanr(x[i], y[i]).statistic)
    assert with_se["se"] == pytest.approx(np.std(reps, ddof=1), rel=1e-12)
    assert np.isnan(ins.rank_correlation(x[:2], y[:2], se=True)["se"])


def test_plausibility_quantities(ladder, factored):
    modes = ladder.modes
    logp = ins.log_prob_map(factored, modes).detach().numpy()
    for chi in range(modes.rank + 1):
        pl = ins.plausibility(modes, chi, logp)
        assert pl["parseval_tail"] == pytest.approx(pl["parseval_direct"], abs=1e-12)
        assert pl["value"] == pytest.approx(pl["term_tail"] + pl["term_family"], abs=1e-12)
        assert abs(pl["value"]) <= pl["bound"] + 1e-12
        assert -pl["value"] == pytest.approx(ins.constants(factored, modes, chi).loss_diff, abs=1e-10)
    one, two = ins.plausibility(modes, 1, logp), ins.plausibility(modes, 2, logp)
    assert abs(one["parseval_tail"] - two["parseval_direct"]) > 1e-4     # the checks above can fail
    assert abs(one["value"] - two["term_tail"] - two["term_family"]) > 1e-4
    q2 = ins.effective(modes, 2)                   # q^(χ) lies in H_χ: projecting leaves it
    assert np.abs(ins.project_family(modes, q2, 2) - q2).max() < 1e-10
    assert np.abs(ins.project_family(modes, modes.conditional, 2) - modes.conditional).max() > 1e-3


def test_training_is_deterministic_and_validated(ladder):
    spec = {"kind": "factored", "hidden": 2, "embed_dim": 3}
    a = cm.train(ladder, spec, n=500, steps=20, seed=3, progress=False, use_cache=False)
    b = cm.train(ladder, spec, n=500, steps=20, seed=3, progress=False, use_cache=False)
    assert np.array_equal(a.conditionals, b.conditionals)
    assert a.population_loss[-1] < a.population_loss[0]
    with pytest.raises(cm.SupportError, match="kind"):
        cm.train(ladder, {"kind": "rnn"}, n=10, steps=1, use_cache=False)
    with pytest.raises(cm.SupportError, match="'hidden'"):
        cm.train(ladder, {"kind": "factored", "hidden": 0}, n=10, steps=1, use_cache=False)
    with pytest.raises(cm.SupportError, match="unknown keys"):
        cm.train(ladder, {"kind": "factored", "width": 3}, n=10, steps=1, use_cache=False)
    with pytest.raises(cm.SupportError, match="'lr'"):
        cm.train(ladder, spec, n=10, steps=1, lr=-1.0, use_cache=False)


def test_model_propensities_split_p_and_reduce_to_def_4_9(ladder, factored):
    modes = ladder.modes
    rho_q = ins.model_propensities(modes, modes.conditional, np.arange(modes.n_modes))
    assert np.abs(rho_q - modes.propensity()).max() < 1e-12          # p = q: Def 4.9
    p = np.exp(ins.log_prob_map(factored, modes).detach().numpy())
    assert np.abs(ins.model_propensities(modes, p).sum(axis=0) - p).max() < 1e-12
    assert np.abs(ins.model_propensities(modes, p, np.arange(modes.n_modes)) - modes.propensity()).max() > 1e-3
    coords = ins.mode_coordinates(factored, modes)
    assert coords["propensities"].shape == (modes.rank, *modes.shape)


def test_sampling_is_exact_and_coupled_by_common_random_numbers(ladder):
    n = 200_000
    rows, y = ladder.sample(n, seed=5)
    freq = np.zeros(ladder.joint.shape)
    np.add.at(freq, (rows, y), 1.0 / n)
    assert np.abs(freq - ladder.joint).max() < 5 * np.sqrt(ladder.joint.max() / n)    # ~5 standard errors
    same = ladder.coupled_sample(1000, 5, ladder.modes.conditional)
    assert np.array_equal(same[1], same[2]) and np.array_equal(same[1], ladder.sample(1000, 5)[1])
    q3 = ins.effective(ladder.modes, 3)
    r, y1, y2 = ladder.coupled_sample(n, 5, q3)
    freq2 = np.zeros(ladder.joint.shape)
    np.add.at(freq2, (r, y2), 1.0 / n)
    want = ladder.full_conditional(q3) * ladder.joint.sum(axis=1, keepdims=True)
    assert np.abs(freq2 - want).max() < 5 * np.sqrt(want.max() / n)
    # the inverse-CDF coupling differs at least as often as the total variation distance
    tv = 0.5 * np.sum(ladder.modes.q_x[:, None] * np.abs(ladder.modes.conditional - q3))
    assert tv - 0.01 <= np.mean(y1 != y2) < 1.0
    with pytest.raises(cm.SupportError, match="shape"):
        ladder.coupled_sample(10, 0, q3[:-1])


# ----- the model's own coordinates (the chapter's studies: test_insensitivity_experiments.py) -----

def _tabular_at(ladder, cond_full):
    """The tabular model with θ = log q (zeros of q at a large negative logit): p(·|x, θ) = q(·|x) exactly."""
    model = cm.TabularModel(ladder.n_rows, ladder.n_cols).double()
    with torch.no_grad():
        model.theta.copy_(torch.as_tensor(np.log(np.maximum(cond_full, 1e-300))))
        model.theta[torch.as_tensor(cond_full == 0)] = -800.0          # exp(−800) = 0 in float64
    return model


def test_mode_coordinates_of_q_itself_are_its_singular_values(ladder):
    """A model whose conditional is q carries every mode fully: ⟨p, e_αβ⟩_H = σ_α δ_αβ (eq. 41), learned = 1."""
    modes = ladder.modes
    exact = ins.mode_coordinates(_tabular_at(ladder, ladder.full_conditional()), modes)
    k = len(modes.sigma)
    assert np.abs(exact["prob"][:k, :k] - np.diag(modes.sigma)).max() < 1e-12
    assert np.allclose(exact["learned"], 1.0, rtol=0, atol=1e-10)
    # a model that predicts the uniform conditional carries none of them fully
    flat = ins.mode_coordinates(_tabular_at(ladder, np.full(ladder.joint.shape, 1.0 / ladder.n_cols)), modes)
    assert np.abs(flat["learned"] - 1.0).min() > 0.5


# ---------------------------------------------------------------------------
# q^(χ) at k = 2: the paper preset's mode ladder (chapters/insensitivity.yml, profile paper)
# ---------------------------------------------------------------------------

PAPER_LADDER = dict(history_length=2, ladder_bigrams=12, ladder_top=0.03, ladder_ratio=0.75, background_size=6)


@pytest.fixture(scope="module")
def paper_ladder():
    return cm.ladder_support(**PAPER_LADDER, seed=0).modes


def frank_wolfe_gap(modes, p, chi):
    """An upper bound on F(p) − min F over P_χ, F(p) = −Σ q(xy) log p(y|x), independent of the
    barrier solver: by convexity F(p) − F* ≤ max_{p' ∈ P_χ} ⟨∇F(p), p − p'⟩, and the maximum is a linear
    programme (HiGHS) over W with p' = ΦW, Φ = [1, v_α/q(x) (α < χ)] on every history, ΦW ≥ 0 and rows
    of p' summing to 1. Returns (gap, the LP's p')."""
    from scipy.optimize import linprog
    import scipy.sparse as sp

    J = modes.joint.toarray() if sp.issparse(modes.joint) else modes.joint
    cols = np.flatnonzero(modes.q_y > 0)
    Q, P = J[:, cols], p[:, cols]
    n_x, m = Q.shape
    F = np.column_stack([np.ones(n_x), modes.v[:, :chi] / modes.q_x[:, None]])
    d = F.shape[1]
    G = np.where(Q > 0, -Q / np.where(P > 0, P, 1.0), 0.0)            # ∇F on the support, 0 where q(xy) = 0
    res = linprog((F.T @ G).T.ravel(), A_ub=-sp.kron(sp.identity(m), sp.csr_matrix(F)), b_ub=np.zeros(n_x * m),
                  A_eq=sp.hstack([sp.csr_matrix(F)] * m), b_eq=np.ones(n_x), bounds=(None, None), method="highs",
                  options={"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10})
    assert res.status == 0, res.message
    p_lp = F @ res.x.reshape(m, d).T
    return float((G * P).sum() - res.fun), p_lp


def family_residual(modes, p, chi):
    """Distance of p from the affine family: rows' sums − 1, the most negative entry, and the largest
    least-squares residual of p's columns on the features [1, v_α/q(x) (α < χ)] (in L²(q))."""
    F = np.column_stack([np.ones(len(modes.q_x)), modes.v[:, :chi] / modes.q_x[:, None]]) * np.sqrt(modes.q_x)[:, None]
    target = p * np.sqrt(modes.q_x)[:, None]
    coef, *_ = np.linalg.lstsq(F, target, rcond=None)
    return max(np.abs(p.sum(axis=1) - 1).max(), max(0.0, -p.min()), np.abs(F @ coef - target).max())


# Thresholds, fixed by what the chapter needs and by double precision, not by these runs:
# FEASIBLE: the iterate keeps ΦW and its row sums to rounding (ε times a few thousand operations);
# GAP: one micro-nat, far below every KL(q ‖ q^(χ)) the chapter records at χ below the first exact cutoff
# (the smallest is checked against it below), so a suboptimality within it cannot move a recorded value.
# (The solver's own certificate is tighter, 2·tol = 2e-10; the LP bound pins the multipliers on the
# support at q/p, so it is looser wherever p is known only to its relative accuracy.)
FEASIBLE, GAP = 1e-12, 1e-6


def test_effective_at_k2_is_certified_at_every_cutoff(paper_ladder):
    """The paper preset's k = 2 ladder (524 histories, 50 tokens, rank 34) at seed 0, where the solver
    used to end 'inaccurate' (χ = 2 and 18: the row sums drifted by up to 4e-7). Every cutoff must now
    be 'optimal' by the solver's own KKT certificate and lie in the family to rounding."""
    import warnings

    modes = paper_ladder
    assert modes.shape == (524, 50) and modes.rank == 34
    kls = []
    for chi in range(1, modes.rank + 1):
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)                      # an 'inaccurate' status warns
            p, info = modes.effective(chi, return_info=True)
        assert info.status == "optimal" and info.kkt_residual < 1e-6, (chi, info)
        assert family_residual(modes, p, info.chi_used) < FEASIBLE, chi
        kls.append(info.kl)
    below_exact = [kl for kl in kls if kl > 1e-9]     # Modes.first_exact's tolerance
    assert len(below_exact) >= modes.rank - 2 and min(below_exact) > 100 * GAP   # GAP is small against each


@pytest.mark.parametrize("chi", [2, 18])
def test_effective_at_k2_agrees_with_an_independent_lp_bound(paper_ladder, chi):
    """At the two cutoffs that used to fail, the Frank–Wolfe gap (a linear programme, not the barrier)
    bounds F(q^(χ)) − min F, so |KL(q‖q^(χ)) − min KL| ≤ gap ≤ GAP; the LP's own optimum is a member of
    the family, and a point moved off the optimum by 0.1% towards the uniform conditional is caught."""
    modes = paper_ladder
    p = modes.effective(chi)
    assert family_residual(modes, p, chi) < FEASIBLE
    gap, p_lp = frank_wolfe_gap(modes, p, chi)
    assert -GAP < gap < GAP
    assert family_residual(modes, p_lp, chi) < 1e-9                  # the LP's vertex is in P_χ (HiGHS tolerance)
    assert modes.kl_to(np.clip(p_lp, 0, None)) >= modes.kl_to(p) - 1e-9   # no member of P_χ beats q^(χ)
    u = np.zeros_like(p)
    u[:, modes.q_y > 0] = 1.0 / np.count_nonzero(modes.q_y > 0)
    assert frank_wolfe_gap(modes, 0.999 * p + 0.001 * u, chi)[0] > 100 * GAP   # planted: suboptimal
    drift = p.copy()
    drift[:, 0] += 4e-7                                              # planted: the old row-sum drift
    assert family_residual(modes, drift, chi) > 100 * FEASIBLE


def k2_transformer(seed: int):
    """A two-layer GPT-NeoX in float64 on a small k = 2 ladder, its weights scaled ×4 so that attention logits
    are of order 1, far from uniform weights."""
    sup = cm.ladder_support(history_length=2, ladder_bigrams=2, ladder_top=0.03, ladder_ratio=0.75,
                            background_size=4, seed=0)
    torch.manual_seed(seed)
    model = cm.build({"kind": "transformer", "hidden": 8, "layers": 2}, sup, 0).double()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(4.0)
    return sup, model


def test_transformer_attention_keeps_float64_at_k2():
    """At k = 2 a history has two positions, so attention weights matter (at k = 1 they are exactly 1). The
    model's eager attention keeps the softmax in float64; PyTorch's scaled_dot_product_attention (transformers'
    "sdpa", in the input's dtype) is the independent reference. transformers' own "eager" attention computes
    the softmax in float32 and is caught (the planted bug: it made the pairing identity fail by 1e-8)."""
    sup, model = k2_transformer(seed=0)
    rows = torch.as_tensor(sup.modes.rows)
    with torch.no_grad():
        ours = model(rows)
        model.lm.set_attn_implementation("sdpa")
        reference = model(rows)
        model.lm.set_attn_implementation("eager")
        float32_softmax = model(rows)
    assert torch.abs(ours - reference).max() < 1e-13
    assert torch.abs(float32_softmax - reference).max() > 1e-10


def test_pairing_identity_holds_for_a_transformer_at_k2():
    """(52)–(53) through J_w against the direct gradient, for a GPT-NeoX reading two-token histories."""
    sup, model = k2_transformer(seed=1)
    for chi, pr in zip(range(sup.modes.rank + 1), ins.pairings(model, sup.modes)):
        direct = ins.constants(model, sup.modes, chi)
        assert np.abs(direct.grad_diff + pr.grad).max() < 1e-10 * max(1.0, np.abs(direct.grad_diff).max())
        assert abs(direct.loss_diff + pr.value) < 1e-12
