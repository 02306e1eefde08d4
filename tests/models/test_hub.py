"""lib.models.hub: a model by hub name or local directory at a revision, offline from the local
Hugging Face cache; refused, naming the revision, before any weights are read."""
import numpy as np
import pytest
import torch

from lib import logits as lg
from lib.models import hub
from lib.models.causal_lm import ModelUnavailableError
from tests.test_logits import tiny_lm

torch.set_num_threads(1)


def word_tokenizer(words):
    """A small word-level fast tokenizer (saved and loaded like a hub model's)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(words)}}
    t = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=t, unk_token="[UNK]")


def save_revision(folder, seed, tok):
    model = tiny_lm(seed)
    model.model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return model


def test_model_series_offline_by_path_and_from_the_hub_cache(tmp_path, monkeypatch):
    """The paper profile's loading path (ModelSeries: hub name or directory, with revisions) runs
    offline: one save_pretrained folder per revision, and a hub name whose revisions are in a local
    Hugging Face cache (refs/<revision> -> snapshots/<commit>)."""
    import shutil

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    tok = word_tokenizer(["the", "cat", "sat", "on", "mat", "a", "dog"])
    local = tmp_path / "pythia-tiny"
    saved = {r: save_revision(local / r, seed, tok) for r, seed in (("step0", 11), ("step143000", 12))}
    ctx = np.array([[1, 2, 3, 4], [5, 6, 7, 1]])
    want = {r: m.last_token_logprobs(ctx) for r, m in saved.items()}

    series = hub.ModelSeries(local, ["step0", "step143000"])
    assert series.encode("the cat sat") == (1, 2, 3) and series.decode((1, 2, 3)) == "the cat sat"
    for r in ("step0", "step143000"):                       # each revision is its own model, read back exactly
        assert torch.equal(series.load(r).last_token_logprobs(ctx), want[r])
    assert not torch.allclose(want["step0"], want["step143000"], atol=1e-3)
    assert series.model_id("step0") != series.model_id("step143000")
    with pytest.raises(hub.ModelSourceError, match="no revision 'step7'.*step0"):
        hub.ModelSeries(local, ["step7", "step143000"])        # refused when the series is made, before any work
    with pytest.raises(hub.ModelSourceError, match="at least two distinct revisions"):
        hub.ModelSeries(local, ["step143000"])
    with pytest.raises(hub.ModelSourceError, match="not one of"):
        series.load("step1")
    assert torch.equal(hub.load_model(local / "step0").last_token_logprobs(ctx), want["step0"])
    assert torch.equal(hub.load_model(local, "step143000").last_token_logprobs(ctx), want["step143000"])
    assert hub.load_tokenizer(local, "step0")("the mat", add_special_tokens=False)["input_ids"] == [1, 5]
    with pytest.raises(hub.ModelSourceError, match="revision"):
        hub.load_model(local, "")

    # a hub name resolved in a local Hugging Face cache, revision by revision
    cache = tmp_path / "hf-cache"
    repo = cache / "models--EleutherAI--pythia-tiny"
    for i, r in enumerate(("step0", "step143000")):
        commit = f"{i + 1:040x}"
        shutil.copytree(local / r, repo / "snapshots" / commit)
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / r).write_text(commit)
    cached = hub.ModelSeries("EleutherAI/pythia-tiny", ["step0", "step143000"], cache_dir=cache)
    for r in ("step0", "step143000"):
        assert torch.equal(cached.load(r).last_token_logprobs(ctx), want[r])
    assert cached.encode("a dog") == (6, 7) and cached.model_id("step0") == "EleutherAI/pythia-tiny@step0"
    with pytest.raises(ModelUnavailableError, match="revision 'step1'"):   # a revision that is not cached
        hub.ModelSeries("EleutherAI/pythia-tiny", ["step1", "step143000"], cache_dir=cache)
    with pytest.raises(ModelUnavailableError, match="revision 'step0'"):   # a model that is not cached
        hub.load_model("EleutherAI/pythia-none", "step0", cache_dir=cache)
    # online (as far as the loader knows) the name and revision are passed on to from_pretrained
    assert hub.resolve_model_source("EleutherAI/pythia-70m", "step0", local_files_only=False) == (
        "EleutherAI/pythia-70m", {"revision": "step0"})


def test_unknown_hub_model_is_refused_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelUnavailableError, match="revision 'step0'"):
        hub.ModelSeries("no-such-org/no-such-model-xyz", ["step0", "step1"])
    with pytest.raises(FileNotFoundError, match="not a hub name"):
        hub.resolve_model_source("./no/such/dir/here")


def test_old_names_in_lib_logits_are_the_moved_objects():
    for name in ("ModelSeries", "load_model", "load_tokenizer", "resolve_model_source", "ModelSourceError"):
        assert getattr(lg, name) is getattr(hub, name)


def test_hub_model_problem_offline_names_the_model_and_what_works(tmp_path, monkeypatch):
    from huggingface_hub import constants

    from lib.models.hub import hub_model_problem

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    why = hub_model_problem("EleutherAI/pythia-70m")
    assert "'EleutherAI/pythia-70m'" in why and "offline" in why and "suite" in why
    assert hub_model_problem("suite") is None
    refs = tmp_path / "models--EleutherAI--pythia-70m" / "refs"
    refs.mkdir(parents=True)
    (refs / "step0").write_text("0" * 40)
    assert hub_model_problem("EleutherAI/pythia-70m") is None


def test_model_config_of_a_known_model_without_a_cache(monkeypatch, tmp_path):
    from lib.models.hub import KNOWN_SHAPES, model_config

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    cfg = model_config("EleutherAI/pythia-70m", "step0")
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.vocab_size) == (512, 6, 50304)
    assert set(KNOWN_SHAPES) >= {"EleutherAI/pythia-70m"}
