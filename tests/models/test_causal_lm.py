"""Tests of lib.models.causal_lm: the causal-LM interface (next-token log-probabilities) and its memory checks."""
from __future__ import annotations

import math
import time

import numpy as np
import pytest
import torch

from lib.models import causal_lm
from lib.models.causal_lm import CausalLM, ModelUnavailableError

VOCAB, CONTEXT = 11, 16


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    """Never touch the real cache or the network."""
    monkeypatch.setenv("BOOK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))


@pytest.fixture
def tiny(tmp_path):
    """A randomly initialised p-tiny GPT-NeoX, in memory and saved with save_pretrained."""
    from transformers import GPTNeoXForCausalLM

    from lib.models.mini_pythia import mini_pythia_config

    torch.manual_seed(0)
    model = GPTNeoXForCausalLM(mini_pythia_config("p-tiny", VOCAB, CONTEXT))
    path = tmp_path / "tiny-model"
    with causal_lm.quiet_transformers():
        model.save_pretrained(path)
    return CausalLM(model, device="auto"), path


def _sequences(n=5, t=12, seed=1):
    return np.random.default_rng(seed).integers(0, VOCAB, size=(n, t))


def test_save_load_round_trip_and_normalisation(tiny):
    model, path = tiny
    loaded = CausalLM.from_pretrained(path)  # device="auto": the CPU here
    assert loaded.device == model.device
    assert loaded.vocab_size == VOCAB and loaded.n_params == model.n_params
    seqs = _sequences()
    a, b = model.next_token_logprobs(seqs), loaded.next_token_logprobs(seqs)
    assert a.shape == (5, 12, VOCAB) and a.dtype == torch.float32 and a.device.type == "cpu"
    assert torch.equal(a, b)
    assert torch.allclose(a.exp().sum(-1), torch.ones(5, 12), atol=1e-5, rtol=0)


def test_last_token_and_batching(tiny):
    model, _ = tiny
    seqs = _sequences(n=70, t=9)
    full = model.next_token_logprobs(seqs, batch_size=64)
    last = model.last_token_logprobs(seqs)
    assert last.shape == (70, VOCAB)
    torch.testing.assert_close(full[:, -1], last, atol=1e-6, rtol=0)
    torch.testing.assert_close(model.next_token_logprobs(seqs, batch_size=1), full, atol=1e-6, rtol=0)
    torch.testing.assert_close(model.last_token_logprobs(seqs, batch_size=1), last, atol=1e-6, rtol=0)
    # the three input forms agree
    torch.testing.assert_close(model.last_token_logprobs(torch.as_tensor(seqs)), last, atol=0, rtol=0)
    torch.testing.assert_close(model.last_token_logprobs(seqs.tolist()), last, atol=0, rtol=0)


def test_causality(tiny):
    model, _ = tiny
    seqs = _sequences(n=3, t=10)
    changed = seqs.copy()
    changed[:, 6] = (changed[:, 6] + 1) % VOCAB
    a, b = model.next_token_logprobs(seqs), model.next_token_logprobs(changed)
    torch.testing.assert_close(a[:, :6], b[:, :6], atol=1e-6, rtol=0)
    assert (a[:, 6:] - b[:, 6:]).abs().max() > 1e-4


def test_sequence_logprob_is_sum_of_gathered(tiny):
    model, _ = tiny
    seqs = _sequences(n=4, t=8)
    logp = model.next_token_logprobs(seqs)
    expected = logp[:, :-1].gather(-1, torch.as_tensor(seqs)[:, 1:, None]).squeeze(-1).double().sum(1)
    got = model.sequence_logprob(seqs)
    assert got.shape == (4,)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
    assert torch.equal(model.sequence_logprob(seqs[:, :1]), torch.zeros(4, dtype=torch.float64))


def test_sequence_loss_is_each_windows_mean_negative_log_probability_and_its_gradient(tiny):
    """sequence_loss against a float64 computation by hand: per window, the mean over positions 1..T−1 of
    −log softmax(logits)[next token]; and its gradient against the same by-hand loss's gradient."""
    model, _ = tiny
    net = model.model
    ids = torch.as_tensor(_sequences(n=3, t=9, seed=4))
    got = causal_lm.sequence_loss(net, (ids,))
    logits = net(input_ids=ids, use_cache=False).logits.double()
    by_hand = torch.stack([torch.stack([-torch.log_softmax(logits[b, t - 1], -1)[ids[b, t]] for t in range(1, 9)]).mean()
                           for b in range(3)])
    assert got.shape == (3,) and got.dtype == torch.float32
    torch.testing.assert_close(got.double(), by_hand, atol=1e-6, rtol=0)
    weights = torch.tensor([0.2, 1.0, -0.7])                          # unequal weights: a mix-up of windows shows
    grads = torch.autograd.grad((weights * causal_lm.sequence_loss(net, (ids,))).sum(), list(net.parameters()))
    ref = torch.autograd.grad((weights.double() * by_hand).sum(), list(net.parameters()))
    for g, r in zip(grads, ref):
        torch.testing.assert_close(g.double(), r.double(), atol=1e-6, rtol=1e-4)


def test_heldout_loss_is_mean_cross_entropy(tiny):
    model, _ = tiny
    tokens = np.random.default_rng(3).integers(0, VOCAB, size=500)
    windows = causal_lm.heldout_windows(tokens, CONTEXT, 6, seed=5)
    assert windows.shape == (6, CONTEXT + 1)
    assert np.array_equal(windows, causal_lm.heldout_windows(tokens, CONTEXT, 6, seed=5))
    logp = model.next_token_logprobs(windows[:, :-1])
    expected = -logp.gather(-1, torch.as_tensor(windows)[:, 1:, None]).mean().item()
    assert model.heldout_loss(tokens, CONTEXT, 6, seed=5) == pytest.approx(expected, abs=1e-5)
    assert model.heldout_loss(tokens, CONTEXT, 6, seed=5, batch_size=2) == pytest.approx(expected, abs=1e-5)
    # an untrained model is near the uniform distribution's log V
    assert abs(expected - math.log(VOCAB)) < 0.5


@pytest.mark.parametrize("bad, match", [
    ([[1, 2, 3], [1, 2]], "ragged"),
    (np.array([[0.5, 1.0]]), "integer"),
    (np.array([1, 2, 3]), r"\(B, T\)"),
    (np.array([[1, VOCAB]]), "vocabulary"),
    (np.array([[-1, 2]]), "vocabulary"),
])
def test_sequence_validation(tiny, bad, match):
    model, _ = tiny
    with pytest.raises(ValueError, match=match):
        model.next_token_logprobs(bad)
    with pytest.raises(ValueError, match="batch_size"):
        model.last_token_logprobs(_sequences(), batch_size=0)


def test_missing_local_path_and_offline_hub(tmp_path):
    t0 = time.perf_counter()
    with pytest.raises(FileNotFoundError, match="no such local model directory"):
        CausalLM.from_pretrained(tmp_path / "does-not-exist")
    with pytest.raises(FileNotFoundError, match="config.json"):
        CausalLM.from_pretrained(tmp_path)  # exists, but is no saved model
    with pytest.raises(ModelUnavailableError, match="no network") as info:
        CausalLM.from_pretrained("EleutherAI/pythia-70m")
    assert "local path" in str(info.value) and "lib.models.mini_pythia" in str(info.value)
    assert time.perf_counter() - t0 < 10  # offline mode fails at once, no retries


def test_estimate_param_count_is_exact(tiny):
    model, _ = tiny
    assert causal_lm.estimate_param_count(model.config) == model.n_params


def test_memory_check_refuses_absurd_model(tmp_path):
    from transformers import GPTNeoXConfig

    huge = GPTNeoXConfig(vocab_size=50304, hidden_size=32768, num_hidden_layers=80, num_attention_heads=64,
                         intermediate_size=4 * 32768)
    assert causal_lm.estimate_param_count(huge) > 10**12
    huge.save_pretrained(tmp_path / "huge")  # config only: loading weights would fail differently
    with pytest.raises(MemoryError, match=r"needs about [\d.]+ GiB but only [\d.]+ GiB is available"):
        CausalLM.from_pretrained(tmp_path / "huge")
    with pytest.raises(MemoryError, match="the thing"):
        causal_lm.check_fits_in_memory(16 * 10**12, "cpu", "the thing")
    assert causal_lm.check_fits_in_memory(1024, "cpu", "a kilobyte") >= 1024
    assert causal_lm.available_memory("cpu") > 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")
def test_cuda_without_cuda_is_a_clear_error(tiny):
    model, path = tiny
    with pytest.raises(ValueError, match="no CUDA device"):
        CausalLM(model.model, device="cuda")
    with pytest.raises(ValueError, match="no CUDA device"):
        CausalLM.from_pretrained(path, device="cuda")
    with pytest.raises(ValueError, match="device"):
        CausalLM.from_pretrained(path, device="tpu")


def test_a_bare_transformers_model_is_recognised_and_wrapped_where_it_is(tiny):
    bare = tiny[0].model
    bare.train()
    assert causal_lm.is_transformers_model(bare) and causal_lm.reads_input_ids(bare)
    assert not causal_lm.is_transformers_model(torch.nn.Linear(2, 2)) and not causal_lm.reads_input_ids(torch.nn.Linear(2, 2))
    assert not causal_lm.is_transformers_model(lambda ids: ids) and not causal_lm.reads_input_ids(lambda input_ids: 0)
    lm = causal_lm.as_causal_lm(bare)
    assert isinstance(lm, CausalLM) and lm.model is bare and lm.device == bare.device and not bare.training
    assert causal_lm.as_causal_lm(lm) is lm
    ids = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        want = torch.log_softmax(bare(input_ids=ids).logits[0, -1].float(), -1)
    assert torch.allclose(lm.last_token_logprobs(ids)[0], want, atol=1e-6)
    assert causal_lm.causal_lm_problem(bare) is None
    with pytest.raises(TypeError, match="parameter 'model' must be a CausalLM or a transformers causal LM"):
        causal_lm.as_causal_lm(lambda context: context)
    from transformers import AutoModel

    with pytest.raises(TypeError, match="no language-model head"):
        causal_lm.as_causal_lm(AutoModel.from_config(bare.config))
