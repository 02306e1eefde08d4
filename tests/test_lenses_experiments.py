"""lib.lenses_experiments: the chapter "Three lenses on one model": its study on a tiny model, its verdicts
against their nulls both ways, its sentences, its rules and its cost."""
import numpy as np
import pytest
import torch

from lib import lenses as LZ, lenses_experiments as LX
from lib.models.causal_lm import CausalLM
from lib.modes import Modes

torch.set_num_threads(1)


def tiny_lm(seed=0, vocab=8, ctx=16):
    from transformers import AutoModelForCausalLM

    from lib.models.mini_pythia import mini_pythia_config

    torch.manual_seed(seed)
    return CausalLM(AutoModelForCausalLM.from_config(mini_pythia_config("p-tiny", vocab, ctx)), "cpu")


@pytest.fixture(scope="module")
def lm():
    return tiny_lm()


def random_chain(rng, V):
    P = rng.random((V, V)) + 0.05
    return P / P.sum(1, keepdims=True)


def test_learning_order_both_ways():
    rng = np.random.default_rng(4)
    q = rng.random((12, 9)) ** 3
    modes = Modes.from_joint(q / q.sum())
    r = modes.rank
    steps = np.arange(r + 1, dtype=float)
    # the naive truncation keeping t modes carries modes 0..t−1 whole: mode α is learned at step α + 1
    early = np.array([modes.naive_truncation(t) for t in range(r + 1)])
    verdict = LX.learning_order(steps, modes, early, 0.5, 300, 0)
    assert verdict.undecided is None and verdict.value < 0 and verdict.detail["rho"] == pytest.approx(-1)
    # the complement, smallest modes first: mode α is learned at step r − α
    late = np.array([modes.naive_truncation(r) - modes.naive_truncation(r - t) for t in range(r + 1)])
    verdict = LX.learning_order(steps, modes, late, 0.5, 300, 0)
    assert verdict.undecided is None and verdict.detail["low"] > 0 and verdict.detail["rho"] == pytest.approx(1)
    # two carried modes are too few to decide
    two = np.array([modes.naive_truncation(min(t, 2)) for t in range(r + 1)])
    assert LX.learning_order(steps, modes, two, 0.5, 300, 0).undecided


def test_heavy_steps_scale_with_their_sizes():
    values = {"hub_model": "suite", "model_size": "p-tiny", "n_histories": 100, "n_symbols": 32, "llc_chains": 4,
              "llc_draws": 120, "llc_batch_size": 4, "llc_windows": 1024, "llc_context": 64}
    steps = LX.heavy_steps(values)
    assert [s.name for s in steps] == ["extended logit matrices", "SGLD chains of λ̂"]
    double = LX.heavy_steps({**values, "n_histories": 200, "llc_draws": 240})
    assert double[0].flops == pytest.approx(2 * steps[0].flops)
    assert double[1].flops > 1.5 * steps[1].flops
    hub = LX.heavy_steps({**values, "hub_model": "EleutherAI/pythia-70m", "hub_revisions": ["step0", "step1", "step2"]})
    assert hub[0].flops > steps[0].flops


def fake_readings():
    def reading(step, words, contexts, lam, se, alpha):
        return LX.Reading(step=step, conditional={}, link_error=0.0, readout_error=0.0, singular_values=np.ones(2),
                          alpha={"original": {1.0: alpha}, "literal": {1.0: alpha}}, cosines={},
                          context_cos=np.eye(2), word_cos=np.eye(2),
                          geometry={"words": words, "words_p": 0.5, "contexts": contexts, "contexts_p": 0.5},
                          llc={"llc": lam, "se": se, "rhat": 1.0, "min_ess": 50.0})
    return [reading(0, -0.04, 0.36, 3.8, 1.0, 0.88), reading(400, 0.60, 0.66, 155.6, 3.0, 1.32)]


def test_sentences_follow_the_verdicts():
    first, last = fake_readings()
    up = LX.Verdict(40.0, None, {"rho_with_modes": 0.9})
    flat = LX.Verdict(0.5, "the chains' spread is too large to say", {"rho_with_modes": float("nan")})
    down = LX.Verdict(-3.0, None, {"rho_with_modes": -0.5})
    assert "a rise of 40.0 s.e." in LX.llc_sentence([first, last], up)
    assert "whether it rises is undecided at these settings. The chains' spread" in LX.llc_sentence([first, last], flat)
    assert "no rise (-3.0 s.e.)" in LX.llc_sentence([first, last], down)
    assert "s.e.." not in LX.llc_sentence([first, last], up)
    assert "3.8 ± 1.0 at step 0 and 155.6 ± 3.0" in LX.llc_sentence([first, last], up)
    order_yes, order_no = LX.Verdict(-0.2, None, {"rho": -0.8}), LX.Verdict(0.9, None, {"rho": 0.6})
    assert "come first (ρ = -0.80)" in LX.modes_sentence([0, 1, 2], [1, 1, 4], order_yes)
    assert "first added by step 2" in LX.modes_sentence([0, 1, 2], [1, 1, 4], order_yes)
    assert "do not come first" in LX.modes_sentence([0, 1, 2], [1, 1, 4], order_no)
    undecided = LX.Verdict(0.0, "the 90% interval of ρ, [-0.97, +0.00], contains 0 (7 modes over 8 checkpoints)",
                           {"rho": -0.5})
    text = LX.modes_sentence([0, 1, 2], [1, 1, 4], undecided)
    # the verdict in words, the run's diagnostics in a sentence of their own after it
    assert "first added by step 2. Whether the larger modes come first is undecided at these settings. " \
           "The 90% interval of ρ" in text and "(the 90%" not in text
    detail = {"overlap": 0.4, "step0_overlap": 0.3, "random_mean": 0.2,
              "z": {"step-0 model": 2.5, "shuffled corpus": 3.0, "random subspaces": 7.0}}
    assert "the closest, the step-0 model, by 2.5 s.e." in LX.logits_sentence([0, 400], [first, last],
                                                                               LX.Verdict(2.5, None, detail))
    assert "not more aligned than the step-0 model" in LX.logits_sentence([0, 400], [first, last],
                                                                           LX.Verdict(1.0, None, {**detail, "z": {**detail["z"], "step-0 model": 1.0}}))
    geo = {"words": LX.Verdict(0.001), "approach": LX.Verdict(6.8)}
    text = LX.geometry_sentence(first, last, geo)
    assert "r = 0.60 at the end (step 0: -0.04; the permutation null is rejected)" in text
    assert "a gain of 6.8 s.e." in text
    text = LX.geometry_sentence(first, last, {"words": LX.Verdict(0.2), "approach": LX.Verdict(0.5)})
    assert "is not rejected" in text and "no gain beyond step 0" in text
    # plain text (a glued text holds no math): the NTP-SVM solution is named in words, not as L^mm
    assert "L^mm" not in text and "NTP-SVM solution" in text


def test_sentences_start_upper_case_and_end_with_a_stop():
    first, last = fake_readings()
    detail = {"overlap": 0.38, "step0_overlap": 0.28, "random_mean": 0.19,
              "z": {"step-0 model": 1.26, "shuffled corpus": 3.0, "random subspaces": 7.0}}
    undecided = LX.Verdict(1.26, "against the step-0 model the difference is 1.26 s.e. with 2 s.e. = 0.162 > 0.1 "
                                 "in mean cosine", detail)
    texts = [LX.modes_sentence([0, 1, 2], [1, 1, 4], LX.Verdict(-0.2, None, {"rho": -0.8})),
             LX.logits_sentence([0, 400], [first, last], undecided),
             LX.geometry_sentence(first, last, {"words": LX.Verdict(0.001), "approach": LX.Verdict(6.8)}),
             LX.llc_sentence([first, last], LX.Verdict(40.0, None, {"rho_with_modes": 0.9}))]
    for text in texts:
        assert text[0].isupper() and text.endswith(".") and ".." not in text, text
    # the diagnostics of an undecided verdict stand after the sentence, not inside it
    assert "undecided at these settings. Against the step-0 model the difference is 1.26 s.e." in texts[1]
    assert "(against" not in texts[1]


RULES = [
    ({"align_rank": 26}, "parameter 'align_rank'", "4 * align_rank <= n_histories", {"align_rank": 25}),
    ({"history_lengths": [2, 3]}, "parameter 'history_lengths'", "history_lengths[0] == 1", {"history_lengths": [1, 3]}),
    ({"history_lengths": [1, 1]}, "parameter 'history_lengths'", "the items repeat", {"history_lengths": [1, 2]}),
    ({"history_lengths": [1, 5]}, "parameter 'history_lengths'", "5 is above 4", {"history_lengths": [1, 4]}),
    ({"hub_model": "EleutherAI/pythia-70m", "hub_revisions": ["step0"]}, "parameter 'hub_revisions'",
     "len(hub_revisions) >= 2", {"hub_model": "EleutherAI/pythia-70m", "hub_revisions": ["step0", "step143000"]}),
    ({"model_size": "p-huge"}, "parameter 'model_size'", "p-tiny", {"model_size": "p-small"}),
    ({"llc_batch_size": 1025}, "parameter 'llc_windows'", "llc_batch_size <= llc_windows", {"llc_batch_size": 1024}),
    ({"n_symbols": 2}, "parameter 'n_symbols'", "3", {"n_symbols": 3}),
    ({"alpha_factors": [1.0, 0.5]}, "parameter 'alpha_factors'", "", {"alpha_factors": [1.0, 2.0]}),
]


@pytest.mark.parametrize("bad, name, why, good", RULES, ids=[",".join(r[0]) for r in RULES])
def test_each_rule_refuses_a_wrong_value_and_passes_a_near_one(bad, name, why, good):
    from lib.book.chapters import chapters
    from lib.book.parameters import ParameterError
    from lib.book.runner import check_parameters

    c = chapters()["lenses"]
    with pytest.raises(ParameterError) as err:
        check_parameters(c, bad)
    assert str(err.value).startswith(name) and why in str(err.value), str(err.value)
    check_parameters(c, good)


def test_llc_verdict_both_ways():
    first, last = fake_readings()                                            # 3.8 ± 1.0, then 155.6 ± 3.0
    up = LX.llc_verdict([first, last], [1, 7])
    assert up.undecided is None and up.value == pytest.approx((155.6 - 3.8) / np.hypot(1.0, 3.0))
    assert up.detail["max_rhat"] == 1.0 and up.detail["min_ess"] == 50.0
    last.llc = {**last.llc, "llc": 6.0}                                      # 2.2 / 3.16 = 0.70 s.e.: too close
    assert LX.llc_verdict([first, last], [1, 7]).undecided
    last.llc = {**last.llc, "llc": -20.0}                                    # a fall of 7.5 s.e.: decided, below −2
    down = LX.llc_verdict([first, last], [1, 7])
    assert down.undecided is None and down.value < -LX.ALIGNMENT_Z


def aligned_study(m=40, seed=0):
    """A study whose data conditional has a clear history structure, and logit matrices that carry it (or not)."""
    from types import SimpleNamespace

    rng = np.random.default_rng(seed)
    groups = np.arange(m) % 4
    cond = np.full((m, 6), 0.02)
    cond[np.arange(m), groups] = 0.9
    cond /= cond.sum(1, keepdims=True)
    shuffled = np.tile(cond.mean(0), (m, 1)) + rng.random((m, 6)) * 0.01
    long = SimpleNamespace(q_x=np.full(m, 1 / m), conditional=cond)
    study = SimpleNamespace(long=long, shuffled=shuffled / shuffled.sum(1, keepdims=True), align_rank=3)
    mix = rng.standard_normal((6, 30))
    carried = np.log(cond) @ mix + 0.05 * rng.standard_normal((m, 30))       # logits that carry the groups
    unrelated = rng.standard_normal((m, 30))
    return study, carried, unrelated


def test_alignment_verdict_both_ways():
    study, carried, unrelated = aligned_study()
    first, last = fake_readings()
    first.logits, last.logits = unrelated, carried
    yes = LX.alignment_verdict(study, first, last, n_boot=100, null_trials=50, seed=0, resolution=0.1)
    assert yes.undecided is None and yes.value >= LX.ALIGNMENT_Z
    assert yes.detail["overlap"] > 0.95 > yes.detail["step0_overlap"]
    first.logits, last.logits = carried, unrelated                           # training that forgets: z < 0
    no = LX.alignment_verdict(study, first, last, n_boot=100, null_trials=50, seed=0, resolution=1.0)
    assert no.undecided is None and no.value < LX.ALIGNMENT_Z
    vague = LX.alignment_verdict(study, first, last, n_boot=100, null_trials=50, seed=0, resolution=1e-6)
    assert vague.undecided is not None
    first.logits = None
    with pytest.raises(LZ.LensesError, match="keep_logits"):
        LX.alignment_verdict(study, first, last, n_boot=10, null_trials=5, seed=0, resolution=0.1)


def test_geometry_verdicts_both_ways():
    from types import SimpleNamespace

    rng = np.random.default_rng(1)
    X = rng.standard_normal((30, 4))
    target = ntp_cos(X)
    study = SimpleNamespace(context_mm=target)
    first, last = fake_readings()
    first.context_cos, last.context_cos = ntp_cos(rng.standard_normal((30, 4))), ntp_cos(X + 0.1 * rng.standard_normal(X.shape))
    out = LX.geometry_verdicts(study, first, last, level=0.01, n_boot=100, seed=0, resolution=0.1)
    assert out["approach"].undecided is None and out["approach"].value >= LX.ALIGNMENT_Z
    assert out["words"].value == last.geometry["words_p"] and out["contexts"].detail["r"] == last.geometry["contexts"]
    first.context_cos, last.context_cos = last.context_cos, first.context_cos        # moving away
    away = LX.geometry_verdicts(study, first, last, level=0.01, n_boot=100, seed=0, resolution=1.0)
    assert away["approach"].undecided is None and away["approach"].value < 0
    vague = LX.geometry_verdicts(study, first, last, level=0.01, n_boot=100, seed=0, resolution=1e-6)
    assert vague["approach"].undecided is not None


def ntp_cos(X):
    X = np.asarray(X, float)
    Y = X / np.linalg.norm(X, axis=1, keepdims=True)
    return Y @ Y.T


def test_prepare_study_and_read_checkpoint_on_a_tiny_model(lm):
    rng = np.random.default_rng(0)
    P = random_chain(rng, 8) ** 3
    P /= P.sum(1, keepdims=True)
    tokens = [0]
    for _ in range(3999):
        tokens.append(int(rng.choice(8, p=P[tokens[-1]])))
    study = LX.prepare_study(np.array(tokens), np.array([0, 2000]), 8, n_symbols=5, history_lengths=[1, 2],
                             n_histories=12, align_rank=3, alpha_factors=[1.0, 4.0], llc_windows=8, llc_context=8,
                             seed=0)
    assert study.long_k == 2 and study.kept.size == 4 and study.long.data.m == 12
    assert study.futures == [()] + [(int(t),) for t in study.kept]
    # the data's conditional at the long histories, recounted by hand
    k2 = study.long
    for j, h in enumerate(k2.histories):
        nxt = [tokens[i + 2] for i in range(len(tokens) - 2)                  # within one document
               if (tokens[i], tokens[i + 1]) == h and not i < 2000 <= i + 2]
        sym = study.table[np.array(nxt)]
        assert np.allclose(k2.conditional[j], np.bincount(sym, minlength=5) / len(sym))
    reading = LX.read_checkpoint(lm, study, 0, n_perm=50, seed=0, keep_logits=True)
    assert reading.link_error < 1e-4 and reading.readout_error < 1e-4
    assert set(reading.conditional) == {1, 2} and np.allclose(reading.conditional[2].sum(1), 1)
    assert reading.logits.shape == (12, len(study.futures) * 8)
    assert set(reading.cosines) == set(LX.ALIGNED_PAIRS) and all(c.shape == (3,) for c in reading.cosines.values())
    assert reading.llc == {}


def test_alignment_verdict_resolution_is_two_standard_errors():
    study, carried, unrelated = aligned_study()
    first, last = fake_readings()
    first.logits, last.logits = carried, unrelated
    probe = LX.alignment_verdict(study, first, last, n_boot=100, null_trials=50, seed=0, resolution=1e-6)
    weakest = min(probe.detail["z"], key=probe.detail["z"].get)
    se = probe.detail["se"][weakest]
    assert LX.alignment_verdict(study, first, last, n_boot=100, null_trials=50, seed=0,
                                resolution=1.5 * se).undecided is not None
    assert LX.alignment_verdict(study, first, last, n_boot=100, null_trials=50, seed=0,
                                resolution=2.5 * se).undecided is None


def test_geometry_verdict_of_an_unchanged_model_is_undecided_not_nan():
    from types import SimpleNamespace

    X = np.random.default_rng(2).standard_normal((12, 3))
    first, last = fake_readings()
    first.context_cos = last.context_cos = ntp_cos(X)
    out = LX.geometry_verdicts(SimpleNamespace(context_mm=ntp_cos(X + 1)), first, last, level=0.01, n_boot=50, seed=0,
                               resolution=0.1)
    assert out["approach"].value is None and "no spread" in out["approach"].undecided


def test_old_names_still_answer_from_lib_lenses():
    for name in ("heavy_steps", "lens_models", "LensModels", "prepare_study", "read_checkpoint", "Verdict",
                 "ALIGNMENT_Z", "alignment_verdict", "llc_sentence"):
        assert getattr(LZ, name) is getattr(LX, name)
    with pytest.raises(AttributeError):
        LZ.no_such_name
