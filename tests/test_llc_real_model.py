"""lib.llc_experiments.real_model: the restricted forward (cached states + upper blocks) against the whole model,
the restriction of the sampled weights, λ̂ on the restriction against λ̂ on the whole model, the verdict helpers."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from lib.llc import estimate_llc
from lib.llc_experiments import real_model as rm
from lib.models.causal_lm import sequence_loss

V, D, FF, LAYERS = 40, 16, 24, 3


def tiny_llama(seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=V, hidden_size=D, intermediate_size=FF, num_hidden_layers=LAYERS,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                         tie_word_embeddings=True)
    model = LlamaForCausalLM(config).eval()
    model.set_attn_implementation("eager")
    with torch.no_grad():  # larger weights than the default init, so that the blocks do something
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.3)
    return model


def tiny_ids(n=6, T=8, seed=1):
    return torch.randint(0, V, (n, T), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("layer", [0, 1, 2])
def test_entry_states_are_the_models_own_hidden_states(layer):
    model, ids = tiny_llama(), tiny_ids()
    with torch.no_grad():
        hidden = model(input_ids=ids, output_hidden_states=True).hidden_states[layer]
    states = rm.entry_states(model, ids, layer, batch_size=4)
    assert states.shape == (ids.shape[0], ids.shape[1] - 1, D)
    torch.testing.assert_close(states, hidden[:, :-1], rtol=0, atol=0)


@pytest.mark.parametrize("layer,part", [(2, "mlp.down_proj"), (2, "self_attn.o_proj"), (1, "mlp"), (0, "self_attn")])
def test_restricted_loss_equals_the_whole_models_loss(layer, part):
    model, ids = tiny_llama(), tiny_ids()
    with torch.no_grad():
        full = sequence_loss(model, (ids,))
    states = rm.entry_states(model, ids, layer)
    stack = rm.restrict(model, layer, part)
    with torch.no_grad():
        restricted = rm.restricted_loss(stack, (states, ids[:, 1:]))
    torch.testing.assert_close(restricted, full, rtol=1e-5, atol=1e-6)


def test_restrict_leaves_only_the_part_trainable_and_counts_it():
    model = tiny_llama()
    stack = rm.restrict(model, 2, "mlp")
    trainable = {k for k, p in model.named_parameters() if p.requires_grad}
    assert trainable == {f"model.layers.2.mlp.{m}.weight" for m in ("gate_proj", "up_proj", "down_proj")}
    assert sum(p.numel() for p in stack.parameters() if p.requires_grad) == 3 * D * FF
    assert rm.part_size(model, 2, "mlp") == 3 * D * FF
    for part in rm.PARTS:
        assert rm.shape_part_size(model.config, part) == rm.part_size(model, 1, part)
    # the stack holds the model's own modules (no copies); a forward leaves the model's blocks as they were
    blocks = list(model.model.layers)
    stack(torch.zeros(1, 3, D))
    assert stack.lm is model and list(model.model.layers) == blocks and len(blocks) == LAYERS


def test_gradient_norm_against_the_whole_models_gradient():
    model, ids = tiny_llama(), tiny_ids()
    stack = rm.restrict(model, 2, "mlp.down_proj")
    data = (rm.entry_states(model, ids, 2), ids[:, 1:])
    w = model.model.layers[2].mlp.down_proj.weight
    (g,) = torch.autograd.grad(sequence_loss(model, (ids,)).mean(), [w])
    assert rm.gradient_norm(stack, data, batch_size=4) == pytest.approx(float(g.norm()), rel=1e-5)


@pytest.mark.filterwarnings("ignore::lib.llc.LLCWarning")  # a random tiny model is no minimum: λ̂ < 0 is expected
def test_llc_of_the_restriction_equals_llc_of_the_whole_model_with_the_rest_frozen():
    """The cached-state chains and the whole-model chains see the same loss, minibatches and noise: the same λ̂
    up to float rounding."""
    ids = tiny_ids(n=8)
    settings = dict(gamma=100.0, eps=1e-3, chains=3, draws=12, burn_in=4, batch_size=2, seed=3, device="cpu",
                    progress=False, batching="loop", compile=False)
    model = tiny_llama()
    data = (rm.entry_states(model, ids, 2), ids[:, 1:])
    stack = rm.restrict(model, 2, "mlp.down_proj")
    restricted = estimate_llc(stack, rm.restricted_loss, data, **settings)
    whole = tiny_llama()
    for name, p in whole.named_parameters():
        p.requires_grad_(name == "model.layers.2.mlp.down_proj.weight")
    reference = estimate_llc(whole, sequence_loss, (ids,), **settings)
    assert restricted.init_loss == pytest.approx(reference.init_loss, rel=1e-6)
    np.testing.assert_allclose(restricted.per_chain, reference.per_chain, rtol=1e-3, atol=1e-4)


def _estimate(revision="final", llc=1.0, se=0.1, rhat=1.0, ess=500.0):
    return rm.PartEstimate(revision, llc, se, rhat, ess, 100, 2.0, 0.5, 0.0, [], {"nbeta": 5.0})


def test_difference_and_mixing_rules():
    a, b = _estimate(llc=3.0, se=0.3), _estimate("init", llc=1.0, se=0.4)
    diff, se = rm.difference(a, b)
    assert diff == pytest.approx(2.0) and se == pytest.approx(0.5)
    assert rm.undecided_reason(a, b) is None
    bad_rhat, bad_ess = _estimate(rhat=1.06), _estimate("init", ess=399.0)
    assert "final" in rm.undecided_reason(bad_rhat, b) and "init" not in rm.undecided_reason(bad_rhat, b)
    assert "init" in rm.undecided_reason(a, bad_ess)
    assert _estimate(rhat=1.05, ess=400.0).mixed  # the chapter's bounds are inclusive
    assert _estimate().row()["λ̂/(d/2)"] == pytest.approx(1.0 / 50)


def test_refusals_name_the_parameter():
    model = tiny_llama()
    with pytest.raises(rm.RealModelError, match="real_model"):
        rm.check_real_model("smollm2")
    with pytest.raises(rm.RealModelError, match="real_part"):
        rm.restrict(model, 0, "mlp.up")
    with pytest.raises(rm.RealModelError, match="real_layer_from_top"):
        rm.block_index(model, LAYERS)
    assert rm.block_index(model, 0) == LAYERS - 1 and rm.block_index(model, LAYERS - 1) == 0


def test_text_windows_are_pieces_of_the_tokenized_stream(tmp_path):
    (tmp_path / "a.txt").write_text("the quick brown fox jumps over the lazy dog " * 20, encoding="utf-8")

    def tokenizer(text, add_special_tokens=False):
        return {"input_ids": [ord(c) for c in text]}

    w = rm.text_windows(tokenizer, 5, 7, seed=2, corpus=str(tmp_path))
    assert w.shape == (5, 7) and w.dtype == torch.int64
    stream = "".join(chr(int(c)) for c in w[0])
    assert stream in "the quick brown fox jumps over the lazy dog " * 20
    assert torch.equal(w, rm.text_windows(tokenizer, 5, 7, seed=2, corpus=str(tmp_path)))


def test_cost_counts_the_unembedding_of_every_step_by_hand():
    shape = rm.model_shape("smollm2-135m")
    _, one = rm.real_model_cost(shape, part_d=1, from_top=0, windows=0, context=5, chains=1, draws=1, batch_size=1,
                                models=1)
    block = 576 * 64 * (2 * 9 + 2 * 3) + 3 * 576 * 1536
    assert one == 3 * 4 * 2 * (block + 576 * 49152)  # 3 passes × 4 positions × 2 FLOPs per multiply-add
    _, two = rm.real_model_cost(shape, part_d=1, from_top=0, windows=0, context=5, chains=2, draws=3, batch_size=1,
                                models=2)
    assert two == 12 * one


@pytest.mark.slow
@pytest.mark.parametrize("name", ["smollm2-135m", "gemma3-270m"])
def test_shapes_are_the_gguf_headers(name):
    from lib.models.hub import model_config

    config = model_config(name)
    for key, value in rm.SHAPES[name].items():
        assert getattr(config, key) == value, key
    assert math.isfinite(rm.real_model_cost(config, part_d=1, from_top=0, windows=1, context=4, chains=1, draws=1,
                                            batch_size=1)[1])


def test_the_chapters_cost_declaration_prices_the_section_and_none_skips_it():
    from lib.llc_experiments import real_model_steps

    values = {"real_model": "smollm2-135m", "real_part": "mlp.down_proj", "real_layer_from_top": 0,
              "real_windows": 32, "real_context": 16, "real_chains": 4, "real_draws": 170, "real_batch_size": 2}
    (step,) = real_model_steps(values)
    assert "884736" in step.sizes and step.flops > 0 and step.peak_bytes > 4 * 49152 * 576
    longer = real_model_steps(values | {"real_draws": 340})[0]
    assert step.flops < longer.flops < 2 * step.flops  # the SGLD steps double, the states' one forward does not
    assert real_model_steps(values | {"real_model": "none"}) == []
    assert rm.check_real_model("none") == "none" and rm.check_real_model("gemma3-270m") == "gemma3-270m"


@pytest.mark.parametrize("layer", [0, 1, 2])
def test_restricted_loss_on_gemma3_keeps_each_blocks_attention_type(layer):
    """Gemma 3 picks a block's mask and rotary table by its index: a sliding window of 2 tokens (below the window
    length) makes a wrong pick change the loss."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(0)
    config = Gemma3TextConfig(vocab_size=V, hidden_size=D, intermediate_size=FF, num_hidden_layers=3,
                              num_attention_heads=2, num_key_value_heads=1, head_dim=8, sliding_window=2,
                              layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                              max_position_embeddings=32)
    model = Gemma3ForCausalLM(config).eval()
    model.set_attn_implementation("eager")
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.3)
    ids = tiny_ids()
    with torch.no_grad():
        full = sequence_loss(model, (ids,))
    states = rm.entry_states(model, ids, layer)
    stack = rm.restrict(model, layer, "mlp.down_proj")
    with torch.no_grad():
        restricted = rm.restricted_loss(stack, (states, ids[:, 1:]))
    torch.testing.assert_close(restricted, full, rtol=1e-5, atol=1e-6)
    assert model.config.layer_types == ["sliding_attention", "full_attention", "sliding_attention"]
