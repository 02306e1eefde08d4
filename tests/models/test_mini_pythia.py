"""Tests of lib.models.mini_pythia: mini Pythia configs, checkpoint schedule, and the cached, resumable suite training."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from lib.models import mini_pythia
from lib.models.mini_pythia import SIZES, log_spaced_steps, mini_pythia_config, train_suite

pytestmark = pytest.mark.usefixtures("offline_private_cache")

V = 8  # tokens of the synthetic Markov chain


def markov_stream(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A random order-1 Markov chain on V tokens with peaked transitions, and its transition matrix."""
    rng = np.random.default_rng(seed)
    transitions = rng.dirichlet(np.full(V, 0.2), size=V)
    cumulative = transitions.cumsum(axis=1)
    u = rng.random(n)
    x = np.zeros(n, dtype=np.int64)
    for i in range(1, n):
        x[i] = min(np.searchsorted(cumulative[x[i - 1]], u[i]), V - 1)
    return x, transitions


STREAM, TRANSITIONS = markov_stream(12_000)
TRAIN, HELDOUT = STREAM[:10_000], STREAM[10_000:]
SMALL = dict(sizes=["p-tiny"], vocab_size=V, context_length=16, steps=24, batch_size=8, lr=3e-3,
             warmup_steps=4, seed=3, n_checkpoints=5, eval_batches=1, progress=False)


def _comparable(history: dict) -> dict:
    return {k: v for k, v in history.items() if k not in {"checkpoint_wall_s", "wall_s", "steps_per_s"}}


def _weights(suite, size, step) -> dict[str, torch.Tensor]:
    return load_file(suite.checkpoint_dir(size, step) / "model.safetensors")


def _assert_same_weights(a, b, size):
    assert a.checkpoint_steps == b.checkpoint_steps
    for step in a.checkpoint_steps:
        wa, wb = _weights(a, size, step), _weights(b, size, step)
        assert wa.keys() == wb.keys()
        assert all(torch.equal(wa[k], wb[k]) for k in wa), f"weights differ at step {step}"


# ---- configs and schedule ----------------------------------------------------------------

def test_config_follows_pythia_conventions():
    for size, shape in SIZES.items():
        config = mini_pythia_config(size, vocab_size=100, context_length=32)
        assert config.model_type == "gpt_neox"
        assert config.hidden_size == shape["hidden_size"] and config.num_hidden_layers == shape["num_hidden_layers"]
        assert config.intermediate_size == 4 * config.hidden_size
        assert config.rope_parameters["partial_rotary_factor"] == 0.25
        assert config.use_parallel_residual and not config.tie_word_embeddings
        assert config.vocab_size == 100 and config.max_position_embeddings == 32
    assert SIZES["p-70m"] == {"num_hidden_layers": 6, "hidden_size": 512, "num_attention_heads": 8}


@pytest.mark.parametrize("kwargs, match", [
    (dict(size="p-huge", vocab_size=10, context_length=8), r"'size' must be one of \['p-70m', 'p-base'"),
    (dict(size="p-tiny", vocab_size=0, context_length=8), "'vocab_size' must be an integer >= 2"),
    (dict(size="p-tiny", vocab_size=10, context_length=-1), "'context_length' must be an integer >= 1"),
    (dict(size="p-tiny", vocab_size=10.0, context_length=8), "'vocab_size'"),
])
def test_config_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        mini_pythia_config(**kwargs)


def test_log_spaced_steps():
    assert log_spaced_steps(1000, 6) == [0, 1, 6, 32, 178, 1000]
    assert log_spaced_steps(3, 8) == [0, 1, 2, 3]
    assert log_spaced_steps(1, 2) == [0, 1]
    for total in (1, 2, 5, 17, 100, 143_000):
        for n in (2, 3, 8, 20):
            steps = log_spaced_steps(total, n)
            assert steps[0] == 0 and steps[-1] == total
            assert steps == sorted(set(steps)) and len(steps) == min(n, total + 1)
    gaps = np.diff(log_spaced_steps(100_000, 12))
    assert np.all(np.diff(gaps) >= 0)  # denser early
    with pytest.raises(ValueError, match="n_checkpoints"):
        log_spaced_steps(10, 1)
    with pytest.raises(ValueError, match="total_steps"):
        log_spaced_steps(0, 5)


def test_batches_depend_only_on_seed_and_step():
    a = mini_pythia.get_batch(TRAIN, 7, seed=1, batch_size=4, context_length=16)
    assert a.shape == (4, 17) and a.dtype == torch.int64
    assert torch.equal(a, mini_pythia.get_batch(TRAIN, 7, seed=1, batch_size=4, context_length=16))
    assert not torch.equal(a, mini_pythia.get_batch(TRAIN, 8, seed=1, batch_size=4, context_length=16))


def test_lr_schedule():
    f = [mini_pythia.lr_factor(i, steps=100, warmup_steps=10) for i in range(100)]
    assert f[0] < f[5] < f[9] < f[10] == pytest.approx(1.0)
    assert f[-1] == pytest.approx(0.1, abs=1e-3) and all(0.1 <= x <= 1 for x in f[10:])


# ---- training -----------------------------------------------------------------------------

def test_train_suite_learns_checkpoints_and_caches(monkeypatch):
    kwargs = dict(sizes="p-tiny", vocab_size=V, context_length=32, steps=150, batch_size=16, lr=3e-3,
                  warmup_steps=10, seed=0, n_checkpoints=6, eval_batches=2, progress=False)
    suite = train_suite(TRAIN, HELDOUT, device="auto", **kwargs)
    assert suite.sizes == ["p-tiny"] and suite.checkpoint_steps == log_spaced_steps(150, 6)
    history = suite.history["p-tiny"]
    assert history["checkpoint_step"] == suite.checkpoint_steps and history["step"] == list(range(1, 151))
    assert len(history["train_loss"]) == 150 and history["n_params"] > 0 and history["complete"]
    directory = suite.directory["p-tiny"]
    assert sorted(p.name for p in (directory / "checkpoints").iterdir()) == [
        f"step-{s:06d}" for s in suite.checkpoint_steps]
    assert not (directory / "resume.pt").exists()

    # learning: from ~log V at initialisation to clearly below the unigram entropy
    counts = np.bincount(STREAM, minlength=V) / len(STREAM)
    unigram_entropy = -(counts * np.log(counts)).sum()
    initial, final = history["heldout_loss"][0], suite.final_heldout_loss("p-tiny")
    assert abs(initial - math.log(V)) < 0.3
    assert final < initial - 0.3
    assert final < unigram_entropy - 0.2

    # the checkpoints load through lib.models.causal_lm and reproduce the recorded held-out loss
    model = suite.load("p-tiny", device="auto")
    assert model.n_params == history["n_params"]
    recomputed = model.heldout_loss(HELDOUT, 32, 2 * 16, seed=mini_pythia.HELDOUT_SEED)
    assert recomputed == pytest.approx(final, abs=1e-5)
    assert suite.load("p-tiny", step=0).heldout_loss(HELDOUT, 32, 32, seed=mini_pythia.HELDOUT_SEED) == \
        pytest.approx(initial, abs=1e-5)
    with pytest.raises(ValueError, match="checkpoint steps"):
        suite.checkpoint_dir("p-tiny", 4)
    with pytest.raises(ValueError, match="suite's sizes"):
        suite.load("p-base")

    # a second call is a cache hit: no training, same directory, files untouched
    calls = []
    original = mini_pythia._train_one
    monkeypatch.setattr(mini_pythia, "_train_one", lambda *a, **k: calls.append(1) or original(*a, **k))
    mtime = (directory / "history.json").stat().st_mtime_ns
    again = train_suite(TRAIN, HELDOUT, device="auto", **kwargs)
    assert calls == [] and again.directory["p-tiny"] == directory
    assert (directory / "history.json").stat().st_mtime_ns == mtime
    assert again.history == suite.history
    # ... while other data is a different entry
    other = train_suite(TRAIN[:-1], HELDOUT, **{**kwargs, "steps": 2, "warmup_steps": 1, "n_checkpoints": 2})
    assert calls == [1] and other.directory["p-tiny"] != directory


def test_determinism_and_resume(tmp_path, monkeypatch):
    runs = {}
    for name in ("a", "b"):
        monkeypatch.setenv("BOOK_CACHE_DIR", str(tmp_path / name))
        runs[name] = train_suite(TRAIN, HELDOUT, **SMALL)
    a, b = runs["a"], runs["b"]
    assert a.directory["p-tiny"] != b.directory["p-tiny"]
    assert _comparable(a.history["p-tiny"]) == _comparable(b.history["p-tiny"])
    _assert_same_weights(a, b, "p-tiny")

    # interrupted after step 11, then resumed: from the last checkpoint (step 8) when the resume state is
    # saved at checkpoints only, from step 11 itself when it is saved every step (resume_every_s = 0)
    assert a.checkpoint_steps == [0, 1, 3, 8, 24]
    for folder, every, resumed_from in (("c", float("inf"), 8), ("d", 0.0, 11)):
        monkeypatch.setenv("BOOK_CACHE_DIR", str(tmp_path / folder))
        with pytest.raises(mini_pythia._Interrupted):
            train_suite(TRAIN, HELDOUT, **SMALL, resume_every_s=every, _stop_after=11)
        partial = next((tmp_path / folder / "mini-pythia").glob("*.partial"))
        state = torch.load(partial / "resume.pt", weights_only=False)
        assert state["step"] == resumed_from and len(state["history"]["train_loss"]) == resumed_from
        resumed = train_suite(TRAIN, HELDOUT, **SMALL)
        assert not partial.exists() and not (resumed.directory["p-tiny"] / "resume.pt").exists()
        assert _comparable(resumed.history["p-tiny"]) == _comparable(a.history["p-tiny"])
        _assert_same_weights(a, resumed, "p-tiny")


@pytest.mark.parametrize("change, match", [
    (dict(sizes=["p-tiny", "p-gigantic"]), "'sizes' must hold names among"),
    (dict(sizes=[]), "'sizes' must name at least one"),
    (dict(steps=0), "'steps' must be an integer >= 1"),
    (dict(batch_size=0), "'batch_size' must be an integer >= 1"),
    (dict(lr=-1.0), "'lr' must be a positive"),
    (dict(warmup_steps=100), "'warmup_steps' must be <= steps"),
    (dict(seed=-2), "'seed'"),
    (dict(vocab_size=5), "'train_tokens' holds token id 7 but vocab_size is 5"),
    (dict(context_length=10_000), r"'train_tokens' needs at least context_length \+ 1 = 10001 tokens"),
    (dict(train_tokens=TRAIN.astype(np.float32)), "'train_tokens' must be a 1-D integer array"),
    (dict(train_tokens=TRAIN.reshape(2, -1)), "'train_tokens' must be a 1-D integer array"),
    (dict(train_tokens=list(TRAIN)), "'train_tokens' must be a 1-D NumPy integer array"),
    (dict(heldout_tokens=HELDOUT - 1), "'heldout_tokens' holds a negative token id"),
    (dict(heldout_tokens=HELDOUT[:5]), "'heldout_tokens' needs at least"),
    (dict(device="tpu"), "'device' must be one of"),
    (dict(resume_every_s=-1), "'resume_every_s' must be a number of seconds >= 0"),
])
def test_validation_before_training(tmp_path, change, match):
    kwargs = {**SMALL, "train_tokens": TRAIN, "heldout_tokens": HELDOUT, **change}
    train, heldout = kwargs.pop("train_tokens"), kwargs.pop("heldout_tokens")
    with pytest.raises(ValueError, match=match):
        train_suite(train, heldout, **kwargs)
    assert not (tmp_path / "cache").exists()  # nothing was trained or cached


def test_memory_check_refuses_before_training(tmp_path):
    with pytest.raises(MemoryError, match=r"training p-tiny with batch_size=10000000.*GiB.*lower batch_size"):
        train_suite(TRAIN, HELDOUT, **{**SMALL, "batch_size": 10_000_000})
    assert not (tmp_path / "cache").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")
def test_cuda_without_cuda_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="no CUDA device is available"):
        train_suite(TRAIN, HELDOUT, **{**SMALL, "device": "cuda"})
    assert not (tmp_path / "cache").exists()


def test_a_suite_trains_with_its_own_thread_count_whatever_the_caller_set(monkeypatch, tmp_path):
    """The cached suite is shared by every chapter: trained under a caller's 1 or 3 torch threads it is the same
    suite, trained at TRAIN_THREADS (seen inside the training step), and the caller's count is restored."""
    from safetensors.torch import load_file

    seen = []
    original = mini_pythia._train_one
    monkeypatch.setattr(mini_pythia, "_train_one",
                        lambda *a, **k: seen.append(torch.get_num_threads()) or original(*a, **k))
    kwargs = dict(sizes="p-tiny", vocab_size=V, context_length=16, steps=6, batch_size=4, lr=3e-3,
                  warmup_steps=1, seed=0, n_checkpoints=2, eval_batches=1, progress=False)
    weights = []
    before = torch.get_num_threads()
    for caller_threads, cache_dir in ((1, "a"), (3, "b")):
        monkeypatch.setenv("BOOK_CACHE_DIR", str(tmp_path / cache_dir))
        torch.set_num_threads(caller_threads)
        try:
            suite = train_suite(TRAIN, HELDOUT, device="cpu", **kwargs)
            assert torch.get_num_threads() == caller_threads
        finally:
            torch.set_num_threads(before)
        final = suite.checkpoint_dir("p-tiny", suite.checkpoint_steps[-1]) / "model.safetensors"
        weights.append(load_file(final))
    assert seen == [mini_pythia.TRAIN_THREADS] * 2
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
