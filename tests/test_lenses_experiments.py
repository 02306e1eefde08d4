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


def test_heavy_steps_scale_with_their_sizes():
    values = {"hub_model": "suite", "model_size": "p-tiny", "n_histories": 100, "n_symbols": 32, "llc_chains": 4,
              "llc_draws": 120, "llc_batch_size": 4, "llc_windows": 1024, "llc_context": 64}
    steps = LX.heavy_steps(values)
    assert [s.name for s in steps][:2] == ["extended logit matrices", "SGLD chains of λ̂"]
    assert steps[2].name.startswith("training p-tiny on the shuffled stream")
    # the learned-nothing model is trained as the Introduction trains its p-tiny: 400 steps of 16 × 64 tokens
    from lib.substrate import training_step_flops
    assert steps[2].flops == pytest.approx(400 * training_step_flops("p-tiny", 2048, 16, 64))
    double = LX.heavy_steps({**values, "n_histories": 200, "llc_draws": 240})
    assert double[0].flops == pytest.approx(2 * steps[0].flops)
    assert double[1].flops > 1.5 * steps[1].flops
    hub = LX.heavy_steps({**values, "hub_model": "EleutherAI/pythia-70m", "hub_revisions": ["step0", "step1", "step2"]})
    assert hub[0].flops > steps[0].flops and len(hub) == 2          # no learned-nothing model beside a hub model


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


def test_old_names_still_answer_from_lib_lenses():
    for name in ("heavy_steps", "lens_models", "LensModels", "prepare_study", "read_checkpoint", "Verdict",
                 "ALIGNMENT_Z", "alignment_verdict", "llc_sentence"):
        assert getattr(LZ, name) is getattr(LX, name)
    with pytest.raises(AttributeError):
        LZ.no_such_name
