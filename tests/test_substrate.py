"""lib.substrate: the windows two chapters measure a language model's loss on, and what a training step costs."""
import numpy as np
import pytest
import torch

from lib import substrate


def test_windows_are_slices_of_the_stream_at_seeded_starts():
    stream = np.arange(1000)
    w = substrate.training_windows(stream, 6, 8, seed=3)
    assert w.shape == (6, 8) and w.dtype == torch.int64
    assert torch.all(w[:, 1:] - w[:, :-1] == 1)  # contiguous slices of an increasing stream
    starts = np.random.default_rng(3).integers(0, 1000 - 8 - 1, size=6)
    assert w[:, 0].tolist() == starts.tolist()
    assert torch.equal(w, substrate.training_windows(stream, 6, 8, seed=3))
    assert not torch.equal(w, substrate.training_windows(stream, 6, 8, seed=4))


def test_a_stream_too_short_for_the_windows_is_refused():
    with pytest.raises(ValueError, match="too few for windows of 8"):
        substrate.training_windows(np.arange(9), 2, 8, seed=0)


# --------------------------------------------------------------------------- what training the suite costs

@pytest.mark.parametrize("size", ["p-tiny", "p-small"])
def test_training_step_flops_agree_with_torchs_flop_counter(size):
    """An independent count: torch's FlopCounterMode over one forward and backward pass. The estimate
    counts every matrix product (2 FLOPs a multiply-add, backward twice forward); the counter's
    attention and head products match it to within 10% (measured 0.93 and 0.96), so 1.15 either way."""
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import GPTNeoXForCausalLM

    from lib.models import mini_pythia

    V, B, T = 512, 4, 32
    torch.manual_seed(0)
    model = GPTNeoXForCausalLM(mini_pythia.mini_pythia_config(size, V, T))
    x = torch.randint(0, V, (B, T + 1))
    with FlopCounterMode(display=False) as counter:
        logits = model(input_ids=x[:, :-1], use_cache=False).logits
        torch.nn.functional.cross_entropy(logits.float().reshape(-1, V), x[:, 1:].reshape(-1)).backward()
    ratio = counter.get_total_flops() / substrate.training_step_flops(size, V, B, T)
    assert 1 / 1.15 <= ratio <= 1.15


def test_old_names_answer_from_the_new_homes():
    """The Introduction's verdicts and cost declaration moved to lib.intro_experiments, the twin
    tokenizer_vocab_size to lib.text.tokenization: the old names here are those."""
    from lib import intro_experiments
    from lib.text import tokenization

    for name in ["heavy_steps", "corpus_size_undecided", "training_undecided", "MIN_CORPUS_MB", "MIN_DECIDING_STEPS"]:
        assert getattr(substrate, name) is getattr(intro_experiments, name), name
    assert substrate.tokenizer_vocab_size is tokenization.tokenizer_vocab_size
    assert substrate.GPT_NEOX_VOCAB == tokenization.GPT_NEOX_VOCAB == 50304
    with pytest.raises(AttributeError, match="no_such_name"):
        substrate.no_such_name  # noqa: B018


def test_tokenizer_vocabularies_are_read_off_the_spec():
    assert substrate.tokenizer_vocab_size("bpe:2048") == 2048
    assert substrate.tokenizer_vocab_size("byte") == 256
    assert substrate.tokenizer_vocab_size("hf:EleutherAI/pythia-70m") == 50304
