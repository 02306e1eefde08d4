"""lib.lenses_experiments against a model that learned nothing: each verdict tried both ways (a planted effect
reproduces; step 0, permuted or identical inputs, or a null that shows the effect too, do not or are undecided for
a stated reason), the modes carried above their sampling error, the mixing gate of λ̂, and the sentences."""
from types import SimpleNamespace

import numpy as np
import pytest

from lib import lenses_experiments as LX
from lib.book import decide_effect
from lib.llc_experiments import MIXED_ESS, MIXED_RHAT
from lib.modes import Modes
from tests.test_lenses_experiments import aligned_study


def reading(step, *, words_p=0.5, contexts_cos=None, logits=None, llc=None, words=0.0, contexts=0.0):
    return LX.Reading(step=step, conditional={}, link_error=0.0, readout_error=0.0, singular_values=np.ones(2),
                      alpha={"original": {1.0: 0.9}, "literal": {1.0: 0.6}}, cosines={},
                      context_cos=np.eye(2) if contexts_cos is None else contexts_cos, word_cos=np.eye(2),
                      geometry={"words": words, "words_p": words_p, "contexts": contexts, "contexts_p": 0.5},
                      llc=llc or {}, logits=logits)


def lam(value, se, rhat=1.0, ess=1000.0):
    return {"llc": value, "se": se, "rhat": rhat, "total_ess": ess, "min_ess": ess / 4, "divergent": 0}


# ----- the combining rule, by hand

def test_learned_verdict_four_ways():
    res = 1.0
    shows, lacks = decide_effect(5.0, 1.0, resolution=res), decide_effect(0.0, 0.1, resolution=res)
    vague = decide_effect(1.0, 1.0, resolution=res)
    yes = LX.learned_verdict(shows, lacks)
    assert yes.reproduces is True and yes.value == pytest.approx(min(5 - 3, 8 - 1, 1 - 0.3))
    no = LX.learned_verdict(lacks, lacks)                       # the trained model does not show it
    assert no.reproduces is False and no.value == pytest.approx(0.3 - 1.0)
    too = LX.learned_verdict(shows, shows)                      # learning nothing shows it too
    assert too.reproduces is False and too.value == pytest.approx(-2.0)
    assert LX.learned_verdict(vague, lacks).undecided.startswith("the trained model")
    assert "shuffled stream" in LX.learned_verdict(shows, vague).undecided
    assert LX.learned_verdict(shows, None, null_missing="no null here").undecided == "no null here"


def test_all_of_is_the_weakest_link():
    yes, no = decide_effect(5.0, 1.0, resolution=1.0), decide_effect(0.0, 0.0, resolution=1.0)
    vague = decide_effect(1.0, 1.0, resolution=1.0)
    assert LX.all_of({"a": yes, "b": no, "c": vague}) is no
    assert LX.all_of({"a": yes, "b": vague}) is vague
    weaker = decide_effect(4.0, 1.0, resolution=1.0)
    assert LX.all_of({"a": yes, "b": weaker}) is weaker


# ----- Lens 1: modes carried above noise

def planted_view(seed=0, m=12, S=6, n=200_000):
    """A corpus view whose counts come from a conditional with two strong modes and a noisy tail."""
    rng = np.random.default_rng(seed)
    groups = np.arange(m) % 3
    cond = np.full((m, S), 0.05)
    cond[np.arange(m), groups] += 1.0
    cond /= cond.sum(1, keepdims=True)
    q_x = np.full(m, 1 / m)
    counts = rng.multinomial(n, (q_x[:, None] * cond).ravel()).reshape(m, S)
    data = SimpleNamespace(counts=counts.T.astype(float))
    modes = Modes.from_joint(counts.astype(float), zero_rows="raise", normalize=True)
    return SimpleNamespace(data=data, modes=modes, q_x=counts.sum(1) / counts.sum(),
                           conditional=counts / counts.sum(1, keepdims=True)), cond


def test_the_data_carries_its_strong_modes_and_a_unigram_model_only_the_first():
    view, cond = planted_view()
    unigram = np.repeat(view.conditional.mean(0, keepdims=True), len(cond), axis=0)
    noise = LX.carried_above_noise(view, np.array([unigram, cond, unigram, view.conditional]), level=0.5,
                                   n_boot=60, seed=0)
    # q̂ itself: every share is 1 (eq. 41), its sampling-noise tail included
    assert np.allclose(noise.shares[3], 1.0)
    # the law q̂ was counted from carries the three planted modes and none of the tail that sampling made
    assert noise.carried[1, :3].all() and not noise.carried[1, 3:].any()
    # a model that ignores the history carries the first (marginal) mode only
    assert noise.counts[0] == noise.counts[2] == 1
    assert noise.sd[1, -1] > noise.sd[1, 0]                     # tail modes are the noisy ones
    gain = LX.carried_verdict(noise, first=0, last=1, null=2)
    assert gain.reproduces is True and gain.detail["final"] == 3 and gain.detail["shuffled"] == 1
    # identical first and last models: no gain, and it does not reproduce
    same = LX.carried_verdict(noise, first=0, last=2, null=None)
    assert same.reproduces is False
    # the learned-nothing model carries as much as the trained one: does not reproduce
    assert LX.carried_verdict(noise, first=0, last=1, null=1).reproduces is False


def test_a_random_conditional_carries_no_mode_beyond_noise_that_the_old_rule_counted():
    view, cond = planted_view(m=40, S=8, n=4000)          # few counts: a noisy tail
    rng = np.random.default_rng(1)
    dirichlet = rng.dirichlet(np.ones(cond.shape[1]), size=cond.shape[0])
    noise = LX.carried_above_noise(view, dirichlet[None], level=0.5, n_boot=100, seed=0)
    old = int((noise.shares[0] >= 0.5).sum())
    assert noise.counts[0] <= 1 < old or noise.counts[0] < old


# ----- learning order

def test_learning_order_both_ways():
    rng = np.random.default_rng(4)
    q = rng.random((12, 9)) ** 3
    modes = Modes.from_joint(q / q.sum())
    r = modes.rank
    steps = np.arange(r + 1, dtype=float)
    early = np.array([modes.naive_truncation(t) for t in range(r + 1)])      # mode α learned at step α + 1
    late = np.array([modes.naive_truncation(r) - modes.naive_truncation(r - t) for t in range(r + 1)])
    flat = np.repeat(early[:1], r + 1, axis=0)                                 # learns nothing: no mode carried
    yes = LX.learning_order(steps, modes, early, 0.5, 300, 0, null_conditionals=flat)
    assert yes.reproduces is True and yes.detail["rho"] == pytest.approx(-1)
    no = LX.learning_order(steps, modes, late, 0.5, 300, 0, null_conditionals=flat)
    assert no.reproduces is False and no.detail["rho"] == pytest.approx(1)
    # the null learns in order too: the order is not evidence of learning
    assert LX.learning_order(steps, modes, early, 0.5, 300, 0, null_conditionals=early).reproduces is False
    two = np.array([modes.naive_truncation(min(t, 2)) for t in range(r + 1)])
    assert "needs 3" in LX.learning_order(steps, modes, two, 0.5, 300, 0).undecided


# ----- Lens 2: alignment

def test_alignment_both_ways():
    study, carried, unrelated = aligned_study(m=100)
    kw = dict(n_boot=100, null_trials=50, seed=0)
    # step 0 already half-aligned; the learned-nothing model, whose logits ignore the history, falls below it
    partial = carried + 2.0 * np.random.default_rng(5).standard_normal(carried.shape) * carried.std()
    yes = LX.alignment_verdict(study, reading(0, logits=partial), reading(1, logits=carried),
                               null=reading("s", logits=unrelated), **kw)
    assert yes.reproduces is True, yes
    assert yes.detail["overlap"] > 0.95 > yes.detail["step0_overlap"] > yes.detail["null_overlap"]
    # the learned-nothing model aligns as well: does not reproduce
    too = LX.alignment_verdict(study, reading(0, logits=unrelated), reading(1, logits=carried),
                               null=reading("s", logits=carried), **kw)
    assert too.reproduces is False
    # identical first and last models: a difference of 0 ± 0 (the bootstrap is paired), does not reproduce
    same = LX.alignment_verdict(study, reading(0, logits=unrelated), reading(1, logits=unrelated),
                                null=reading("s", logits=unrelated), **kw)
    assert same.reproduces is False and same.detail["effects"]["step-0 model"]["estimate"] == 0
    assert same.detail["effects"]["step-0 model"]["se"] == 0
    # rows permuted: the history structure is gone, and so is the finding
    perm = np.random.default_rng(3).permutation(len(carried))
    assert LX.alignment_verdict(study, reading(0, logits=unrelated), reading(1, logits=carried[perm]),
                                null=reading("s", logits=unrelated), **kw).reproduces is not True
    assert LX.alignment_verdict(study, reading(0, logits=unrelated), reading(1, logits=carried),
                                **kw).undecided is not None     # no null model: undecided
    with pytest.raises(LX.LensesError, match="keep_logits"):
        LX.alignment_verdict(study, reading(0), reading(1, logits=carried), **kw)


# ----- Lens 3: geometry

def cos(X):
    Y = X / np.linalg.norm(X, axis=1, keepdims=True)
    return Y @ Y.T


def test_geometry_approach_both_ways_and_identical_models_do_not_reproduce():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((30, 4))
    study = SimpleNamespace(context_mm=cos(X))
    start = cos(rng.standard_normal((30, 4)))
    near = cos(X + 0.1 * rng.standard_normal(X.shape))
    out = LX.geometry_verdicts(study, reading(0, contexts_cos=start), reading(1, contexts_cos=near), n_boot=100,
                               seed=0, null=reading("s", contexts_cos=start))
    assert out["approach"].reproduces is True
    too = LX.geometry_verdicts(study, reading(0, contexts_cos=start), reading(1, contexts_cos=near), n_boot=100,
                               seed=0, null=reading("s", contexts_cos=near))
    assert too["approach"].reproduces is False
    away = LX.geometry_verdicts(study, reading(0, contexts_cos=near), reading(1, contexts_cos=start), n_boot=100,
                                seed=0, null=reading("s", contexts_cos=near))
    assert away["approach"].reproduces is False
    # hand-made readings: first and last identical, so the gain is 0 ± 0
    same = LX.geometry_verdicts(study, reading(0, contexts_cos=start), reading(1, contexts_cos=start), n_boot=50,
                                seed=0, null=reading("s", contexts_cos=start))
    assert same["approach"].reproduces is False and same["approach"].undecided is None
    assert same["approach"].detail["trained"]["estimate"] == 0 and same["approach"].detail["trained"]["se"] == 0


def test_geometry_words_needs_the_null_to_fail():
    rng = np.random.default_rng(2)
    study = SimpleNamespace(context_mm=cos(rng.standard_normal((8, 3))))
    c0, c1 = cos(rng.standard_normal((8, 3))), cos(rng.standard_normal((8, 3)))
    f = lambda p_last, p_null: LX.geometry_verdicts(                       # noqa: E731
        study, reading(0, contexts_cos=c0), reading(1, words_p=p_last, contexts_cos=c1), n_boot=10, seed=0,
        null=None if p_null is None else reading("s", words_p=p_null, contexts_cos=c0))["words"]
    assert f(0.001, 0.5).reproduces is True and f(0.001, 0.5).value == pytest.approx(0.009)
    assert f(0.001, 0.001).reproduces is False                              # learning nothing gives it too
    assert f(0.3, 0.5).reproduces is False
    assert f(0.001, None).undecided is not None


# ----- Lens 4: λ̂ and its mixing gate

def test_llc_verdict_both_ways_and_gated_by_mixing():
    up = LX.llc_verdict(lam(3.8, 0.1), lam(155.6, 3.0), lam(3.9, 0.1))
    assert up.reproduces is True and up.detail["difference"] == pytest.approx(151.8)
    assert LX.llc_verdict(lam(3.8, 0.1), lam(3.8, 0.1), lam(3.8, 0.1)).reproduces is False      # identical
    assert "cannot tell" in LX.llc_verdict(lam(3.8, 0.5), lam(3.8, 0.5), lam(3.8, 0.5)).undecided  # too noisy
    assert LX.llc_verdict(lam(3.8, 0.5), lam(155.6, 3.0), lam(150.0, 3.0)).reproduces is False  # null rises too
    assert "shuffled" in LX.llc_verdict(lam(3.8, 0.5), lam(155.6, 3.0), lam(6.0, 1.0)).undecided
    # the referee's case: a rise, but chains that have not mixed (R̂ 1.07, ESS far below the floor)
    gated = LX.llc_verdict(lam(3.8, 1.0, rhat=1.07, ess=60), lam(14.8, 2.0), lam(4.0, 0.5))
    assert gated.reproduces is None and "not mixed" in gated.undecided and "R̂ 1.070" in gated.undecided
    assert "ESS 60" in gated.undecided
    assert LX.mixing_problem(lam(1, 1, rhat=MIXED_RHAT, ess=MIXED_ESS), "x") is None
    assert LX.mixing_problem(lam(1, 1, rhat=MIXED_RHAT + 1e-3, ess=MIXED_ESS), "x")
    assert LX.mixing_problem(lam(1, 1, ess=MIXED_ESS - 1), "x")


def test_the_mixing_floor_is_the_learning_coefficients_chapters():
    import lib.llc_experiments as llc_x

    assert LX.MIXED_RHAT is llc_x.MIXED_RHAT and LX.MIXED_ESS is llc_x.MIXED_ESS


def test_the_resolutions_are_stated_in_the_declaration():
    from lib.book.chapters import get_chapter

    claims = {c.id: c.statement for c in get_chapter("lenses").claims}
    assert "resolution of 1 mode" in claims["lenses.modes-carried"]
    assert "resolution of 0.3 in ρ" in claims["lenses.learning-order"]
    assert "resolution of 0.1" in claims["lenses.logit-modes-alignment"]
    assert "resolution of 0.1 in correlation" in claims["lenses.geometry-approach"]
    assert "resolution of 1 in λ̂" in claims["lenses.llc-grows"]
    assert LX.RESOLUTION == {"modes": 1.0, "rho": 0.3, "cosine": 0.1, "corr": 0.1, "llc": 1.0}


# ----- sentences

def test_sentences_follow_the_verdicts():
    rng = np.random.default_rng(0)
    c0, c1 = cos(rng.standard_normal((8, 3))), cos(rng.standard_normal((8, 3)))
    first = reading(0, words=-0.04, contexts=0.36, llc=lam(3.8, 0.1), contexts_cos=c0)
    last = reading(1, words=0.6, contexts=0.66, llc=lam(155.6, 3.0), contexts_cos=c1)
    null = reading("s", words=0.1, contexts=0.3, llc=lam(3.9, 0.1), contexts_cos=c0)
    up = LX.llc_verdict(first.llc, last.llc, null.llc)
    text = LX.llc_sentence(first.llc, last.llc, null.llc, up)
    assert "3.8 ± 0.1 at step 0 and 155.6 ± 3.0 at the end, and 3.9 ± 0.1 for the shuffled" in text
    assert "rises with training and not without it" in text and text.endswith(".") and ".." not in text
    too = LX.llc_verdict(first.llc, last.llc, lam(150.0, 3.0))
    assert "shuffled stream shows it too" in LX.llc_sentence(first.llc, last.llc, lam(150.0, 3.0), too)
    gated = LX.llc_verdict(lam(3.8, 1.0, rhat=1.2), last.llc, null.llc)
    text = LX.llc_sentence(first.llc, last.llc, null.llc, gated)
    assert "is undecided at these settings. The chains have not mixed" in text
    study = SimpleNamespace(context_mm=cos(rng.standard_normal((8, 3))))
    geo = LX.geometry_verdicts(study, first, last, n_boot=10, seed=0, null=null)
    text = LX.geometry_sentence(first, last, geo, null)
    assert "L^mm" not in text and "NTP-SVM solution" in text and "shuffled-trained model: 0.10" in text
    assert text[0].isupper() and text.endswith(".")


# ----- the learned-nothing model's readings

def test_null_conditionals_read_every_checkpoint_of_the_null_on_the_studys_histories():
    import torch
    from transformers import AutoModelForCausalLM

    from lib import lenses as LZ
    from lib.models.causal_lm import CausalLM
    from lib.models.mini_pythia import mini_pythia_config

    def lm(seed):
        torch.manual_seed(seed)
        return CausalLM(AutoModelForCausalLM.from_config(mini_pythia_config("p-tiny", 8, 16)), "cpu")
    nets = {0: lm(0), 5: lm(1)}
    null = SimpleNamespace(steps=[0, 5], load=lambda step=None: nets[5 if step is None else step])
    view = SimpleNamespace(histories=[(1, 2), (3, 4), (2, 2)])
    table = LZ.symbol_table(np.array([1, 2, 3, -1]), 8)
    study = SimpleNamespace(views={2: view}, long_k=2, table=table)
    out = LX.null_conditionals(SimpleNamespace(null=null), study)
    assert out.shape == (2, 3, 4) and np.allclose(out.sum(-1), 1)
    for i, step in enumerate(null.steps):
        assert np.allclose(out[i], LZ.model_conditional(nets[step], view.histories, 1, table))
    assert LX.null_conditionals(SimpleNamespace(null=None), study) is None
    assert LX.read_null(SimpleNamespace(null=None), study, n_perm=10, seed=0, llc_settings=None) is None
