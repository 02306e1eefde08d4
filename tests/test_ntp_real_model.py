"""§7 of the chapter "Geometry of next-token prediction": a released model against the prediction, with its
untrained twin (lib.ntp_experiments: real_readout, real_geometry, real_verdict and their helpers). The fast
tests run on hand-made data and on a tiny Llama written as a GGUF file (tests/models/gguf_standins.py)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from lib import ntp
from lib import ntp_experiments as E
from lib.book import decide_effect
from lib.ntp_data import NTPData

pytestmark = pytest.mark.usefixtures("offline_private_cache")


def small_data() -> NTPData:
    """Four contexts of two words over V = 5 (the last symbol OTHER); word 3 follows no context."""
    labels = ["the", "cat", ".", "dog", "OTHER"]
    counts = np.zeros((5, 4))
    counts[[0, 1], 0] = [2, 1]          # after "the cat": the, cat
    counts[[1, 4], 1] = [1, 1]          # after "cat .": cat, OTHER
    counts[[0, 2], 2] = [1, 3]          # after ". the": the, .
    counts[2, 3] = 2                    # after "the the": .
    n = counts.sum(0)
    contexts = np.array([[0, 1], [1, 2], [2, 0], [0, 0]])
    return NTPData(pi=n / n.sum(), P=counts / n, counts=counts, contexts=contexts, labels=labels)


def upper_corr(A, B):
    """Pearson r of the strictly upper-triangular entries, computed here with np.corrcoef."""
    iu = np.triu_indices(len(A), 1)
    return float(np.corrcoef(A[iu], B[iu])[0, 1])


def test_texts_read_as_words_do():
    assert E.word_text("cat") == " cat" and E.word_text(".") == "."
    assert E.context_text(["the", "cat", ".", "a"]) == "the cat. a"


def test_support_words_leave_out_other_and_unseen_words():
    assert E.support_words(small_data()).tolist() == [0, 1, 2]      # 3 follows nothing, 4 is OTHER


def test_check_real_model_refuses_other_names():
    assert E.check_real_model("none") == "none"
    with pytest.raises(ntp.NTPError, match="real_model.*smollm2-135m, gemma3-270m, none.*'gpt2'"):
        E.check_real_model("gpt2")


def test_real_model_steps_price_the_section_only_when_a_model_is_read():
    values = {"contexts": 100, "context_length": 3, "n_perm": 1000, "real_boot": 200}
    assert E.real_model_steps({**values, "real_model": "none"}) == []
    steps = E.real_model_steps({**values, "real_model": "smollm2-135m"})
    assert len(steps) == 2 and steps[0].flops > 0
    bigger = E.real_model_steps({**values, "real_model": "smollm2-135m", "contexts": 400})
    assert bigger[0].flops > steps[0].flops


def null_of(values):
    return np.asarray(values, float)


def test_real_verdict_each_branch():
    null = np.linspace(-0.1, 0.1, 1000)                      # r_α = the (1 − 0.00135) quantile, ≈ 0.0997
    good = decide_effect(0.5, 0.05, resolution=0.1)          # reproduces: lower 0.35
    v = E.real_verdict(0.5, null, good)
    assert v.reproduces is True
    assert v.value == pytest.approx(min(0.35, 0.5 - np.quantile(null, 1 - E.PERM_ALPHA)))
    below = E.real_verdict(0.05, null, good)                 # fails relabelling, whatever the twin says
    assert below.reproduces is False and below.value == pytest.approx(0.05 - np.quantile(null, 1 - E.PERM_ALPHA))
    none = decide_effect(0.0, 0.01, resolution=0.1)          # the twin does as well: upper 0.03 < 0.1
    v = E.real_verdict(0.5, null, none)
    assert v.reproduces is False and v.value == pytest.approx(0.03 - 0.1)
    unsure = decide_effect(0.1, 0.05, resolution=0.1)
    v = E.real_verdict(0.5, null, unsure)
    assert v.reproduces is None and "twin" in v.undecided
    short = E.real_verdict(0.5, null[:500], good)            # 500 relabellings cannot resolve 0.00135
    assert short.reproduces is None and "741" in short.undecided


def readout(H, W, words):
    return E.RealReadout(np.asarray(H, float), np.asarray(W, float), np.asarray(words), np.asarray(words),
                         len(words), True)


def test_real_geometry_against_a_direct_computation():
    data = small_data()
    L = ntp.solve_ntp_svm(data.S, "CLARABEL").L
    W_mm, H_mm = ntp.ufm_factors(L)
    words = E.support_words(data)
    rng = np.random.default_rng(0)
    final = readout(H_mm.T, W_mm[words], words)                  # a model whose geometry is L^mm's
    init = readout(rng.standard_normal((4, 6)), rng.standard_normal((3, 6)), words)
    g = E.real_geometry(data, L, final, init, n_perm=200, n_boot=50, seed=0)
    # the context cosines of a model with H = H^mm correlate perfectly with the L^mm factors'
    assert g.rows["mm_contexts"]["r"] == pytest.approx(1.0)
    # independent: cosines by hand, centred word rows, np.corrcoef on the upper triangle
    def cos(X):
        X = X / np.linalg.norm(X, axis=1, keepdims=True)
        return X @ X.T
    Wc = init.W - init.W.mean(0)
    S_words = data.S[words].astype(float)
    assert g.rows["support_words"]["r_twin"] == pytest.approx(upper_corr(cos(Wc), cos(S_words)))
    assert g.rows["support_contexts"]["r_twin"] == pytest.approx(upper_corr(cos(init.H), cos(data.S.T.astype(float))))
    row = g.rows["mm_contexts"]
    assert row["d"] == pytest.approx(row["r"] - row["r_twin"])
    # 200 relabellings cannot resolve the level: every verdict is undecided, and says why
    assert all(v.undecided and "relabellings" in v.undecided for v in g.verdicts.values())
    assert len(g.table_rows()) == len(E.REAL_PAIRS)


def test_real_geometry_a_model_equal_to_its_twin_does_not_reproduce():
    data = small_data()
    L = ntp.solve_ntp_svm(data.S, "CLARABEL").L
    words = E.support_words(data)
    rng = np.random.default_rng(1)
    same = readout(rng.standard_normal((4, 6)), rng.standard_normal((3, 6)), words)
    g = E.real_geometry(data, L, same, same, n_perm=1000, n_boot=20, seed=0)
    for key, v in g.verdicts.items():
        assert g.rows[key]["d"] == 0.0 and g.rows[key]["se"] == 0.0
        assert v.reproduces is False, key            # either r is below r_α, or the gain 0 ± 0 is below 0.1


def test_real_readout_on_a_tiny_gguf_model(tiny_file):
    """The context embeddings are the final hidden states: with the whole output embedding they give the
    model's own last-position logits; the word rows are the output embedding's rows of the first tokens."""
    data = small_data()
    name = f"gguf:{tiny_file}"
    models, tok = E.load_real_model(name)
    assert set(models) == {"final", "init"}
    ro = E.real_readout(models["final"], tok, data)
    assert ro.H.shape == (data.m, 64) and ro.W.shape == (3, 64)
    net = models["final"].model
    head = net.get_output_embeddings().weight.detach().double().numpy()
    for j, row in enumerate(data.contexts):
        ids = tok(E.context_text([data.labels[t] for t in row]), add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            logits = net(input_ids=torch.tensor([ids])).logits[0, -1].double().numpy()
        assert np.abs(ro.H[j] @ head.T - logits).max() < 1e-4
    first = [tok(E.word_text(data.labels[z]), add_special_tokens=False)["input_ids"][0] for z in ro.words]
    assert np.array_equal(ro.token_ids, first)
    assert np.allclose(ro.W, head[first])
    twin = E.real_readout(models["init"], tok, data)
    assert not np.allclose(twin.H, ro.H)                 # the twin is another model
    arrays = E.real_readouts(name, data)
    assert np.allclose(E.readout_of(arrays, "final").H, ro.H) and np.allclose(E.readout_of(arrays, "init").H, twin.H)


def test_real_geometry_reproduces_for_a_model_that_carries_the_prediction():
    """Planted: a 'trained' model whose context embeddings are the L^mm factors' plus a little noise, against a
    random twin, reproduces the contexts~L^mm finding; the same noise alone (as the trained model) does not."""
    data = ntp.synthetic_data(V=10, m=50, k=6, n=5000, seed=0)
    L = ntp.solve_ntp_svm(data.S, "CLARABEL").L
    W_mm, H_mm = ntp.ufm_factors(L)
    words = np.arange(data.V - 1)
    rng = np.random.default_rng(2)
    noise_H, noise_W = rng.standard_normal(H_mm.T.shape), rng.standard_normal(W_mm[words].shape)
    carried = readout(H_mm.T + 0.05 * noise_H, W_mm[words], words)
    twin = readout(rng.standard_normal(H_mm.T.shape), rng.standard_normal(W_mm[words].shape), words)
    g = E.real_geometry(data, L, carried, twin, n_perm=1000, n_boot=100, seed=0)
    assert g.verdicts["mm_contexts"].reproduces is True
    blind = readout(noise_H, noise_W, words)
    g = E.real_geometry(data, L, blind, twin, n_perm=1000, n_boot=100, seed=0)
    assert g.verdicts["mm_contexts"].reproduces is not True
