"""lib.models.prefix_reuse and lib.models.gpt_neox: each history encoded once and reused for its futures
(left-padded caches of unequal lengths, the GPT-NeoX last-position path), against one forward pass
of every h∘f, and the probes that decide, per model, which path is trusted."""
import numpy as np
import pytest
import torch

from lib import logits as lg
from lib.models import gpt_neox, prefix_reuse
from lib.models.causal_lm import CausalLM
from tests.test_logits import seqs, tiny_lm

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def lm():
    return tiny_lm()


def test_next_token_rows_are_one_forward_pass_each(lm):
    """The reference rows: log-softmax of the head at each context's own last token (right padding
    in a batch changes nothing), against the model's plain forward one context at a time."""
    rng = np.random.default_rng(0)
    ctx = seqs(rng, 7, 1, 9)
    rows = prefix_reuse.next_token_rows(lm, ctx, batch_tokens=20)
    for i, c in enumerate(ctx):
        with torch.inference_mode():
            logits = lm.model(input_ids=torch.tensor([c])).logits[0, -1]
        assert torch.abs(rows[i] - torch.log_softmax(logits, -1)).max() < 1e-5
    # centring: every row sums to zero afterwards, and it is the row minus its mean
    c = prefix_reuse.centre(rows, True)
    assert torch.abs(c.sum(-1)).max() < 1e-3 and torch.equal(prefix_reuse.centre(rows, False), rows)
    assert np.allclose(prefix_reuse.centre(rows.numpy(), True), rows.numpy() - rows.numpy().mean(-1, keepdims=True))


def test_history_blocks_and_future_batches():
    H = [(1,) * n for n in (3, 1, 3, 2, 1, 3)]
    eq = prefix_reuse.history_blocks(H, 2)
    assert eq == [[1, 4], [3], [0, 2], [5]]                        # equal lengths only, sorted by length
    pad = prefix_reuse.history_blocks(H, 4, padded=True)
    assert pad == [[1, 4, 3, 0], [2, 5]]                            # any lengths, in length order
    lengths = [1, 2, 2, 3, 9]
    batches = prefix_reuse.future_batches(lengths, [0, 1, 2, 3, 4], G=2, L=4, batch_tokens=60)
    assert sorted(j for b in batches for j in b) == [0, 1, 2, 3, 4]
    for b in batches:                                               # each pass within the token budget
        assert len(b) == 1 or 2 * len(b) * (4 + max(lengths[j] for j in b)) <= 60
    assert [4] in batches                                           # the long future is padded alone
    # the budget counts each pass's history and future tokens: G·B·(L + T_max) ≤ batch_tokens
    tight = prefix_reuse.future_batches([2] * 6, list(range(6)), G=2, L=10, batch_tokens=60)
    assert tight == [[0, 1], [2, 3], [4, 5]]                        # 2·2·12 = 48 fits, 2·3·12 = 72 does not


def test_histories_of_unequal_lengths_share_a_pass(lm, monkeypatch):
    """Left-padded history caches (attention mask, position ids) give the unpadded entries."""
    rng = np.random.default_rng(7)
    H, F = seqs(rng, 14, 1, 12), seqs(rng, 10, 0, 8)
    F[4] = ()
    assert prefix_reuse.padding_supported(lm)
    blocks = prefix_reuse.history_blocks(H, 5, padded=True)
    assert any(len({len(H[i]) for i in b}) > 1 for b in blocks)             # mixed lengths in one block
    assert sorted(i for b in blocks for i in b) == list(range(14))
    cols = lg.select_columns(lm, [f if f else (1,) for f in F], 6)
    for kw in ({}, {"columns": cols}, {"centered": False}, {"columns": cols, "centered": False},
               {"last_position_only": False}, {"columns": cols, "last_position_only": False}):
        padded = lg.extended_logit_matrix(lm, H, F, rows_per_block=5, batch_tokens=300, **kw)
        equal = lg.extended_logit_matrix(lm, H, F, rows_per_block=5, batch_tokens=300, pad_histories=False, **kw)
        naive = lg.naive_extended_logit_matrix(lm, H, F, columns=kw.get("columns"), centered=kw.get("centered", True))
        assert np.abs(padded - equal).max() <= 1e-5
        assert np.abs(padded - naive).max() <= 1e-5
    # the comparison can fail: the histories of a block in another order give another matrix
    swapped = [H[i] for i in np.roll(np.arange(14), 1)]
    assert np.abs(lg.naive_extended_logit_matrix(lm, swapped, F) - lg.extended_logit_matrix(lm, H, F)).max() > 1e-2
    # both the attention mask and the position ids are needed: without either the check fails (the
    # backbone's own forward, last_position_only=False; the GPT-NeoX path builds both itself)
    parts, ref = prefix_reuse.lm_parts, lg.naive_extended_logit_matrix(lm, H, F)
    for drop, at_least in (("attention_mask", 1e-2), ("position_ids", 1e-3)):
        def without(model, drop=drop):
            backbone, head = parts(model)

            def forward(**kw):
                kw.pop(drop, None)
                return backbone(**kw)
            return forward, head
        monkeypatch.setattr(prefix_reuse, "lm_parts", without)
        assert np.abs(lg.extended_logit_matrix(lm, H, F, rows_per_block=5, last_position_only=False)
                      - ref).max() > at_least
    monkeypatch.setattr(prefix_reuse, "lm_parts", parts)
    # every budget gives the same matrix
    big = lg.extended_logit_matrix(lm, H, F, rows_per_block=14, batch_tokens=10 ** 6)
    assert np.abs(big - lg.extended_logit_matrix(lm, H, F)).max() <= 1e-5


def test_caches_that_cannot_be_padded_keep_equal_lengths(monkeypatch):
    rng = np.random.default_rng(8)
    H, F = seqs(rng, 9, 1, 6), seqs(rng, 5, 1, 5)
    model = tiny_lm(1)
    ref = lg.naive_extended_logit_matrix(model, H, F)
    monkeypatch.setattr(prefix_reuse, "plain_kv_cache", lambda cache: False)   # e.g. a sliding-window cache
    assert not prefix_reuse.padding_supported(model)
    assert np.abs(lg.extended_logit_matrix(model, H, F, rows_per_block=2) - ref).max() <= 1e-5
    with pytest.raises(lg.LogitsError, match="pad_histories=True"):
        lg.extended_logit_matrix(model, H, F, pad_histories=True)
    assert np.abs(lg.extended_logit_matrix(model, H, F, pad_histories=False) - ref).max() <= 1e-5


def test_padding_probe_catches_a_backbone_that_ignores_position_ids(monkeypatch):
    rng = np.random.default_rng(9)
    H, F = seqs(rng, 9, 1, 6), seqs(rng, 5, 1, 5)
    model = tiny_lm(2)
    ref = lg.naive_extended_logit_matrix(model, H, F)
    parts = prefix_reuse.lm_parts

    def no_positions(m):
        backbone, head = parts(m)

        def forward(**kw):
            kw.pop("position_ids", None)                  # as a model that silently swallows it would
            return backbone(**kw)
        return forward, head
    monkeypatch.setattr(prefix_reuse, "lm_parts", no_positions)
    assert not prefix_reuse.padding_supported(model)        # the probe sees padded != unpadded
    assert np.abs(lg.extended_logit_matrix(model, H, F, rows_per_block=3) - ref).max() <= 1e-5


def neox_lm(seed=0, vocab=40, ctx=48, **overrides):
    """A tiny random GPT-NeoX with config overrides (sequential residual, no attention bias, one layer)."""
    from transformers import AutoModelForCausalLM

    from lib.models.causal_lm import CausalLM
    from lib.models.mini_pythia import mini_pythia_config

    cfg = mini_pythia_config("p-tiny", vocab, ctx)
    for key, value in overrides.items():
        setattr(cfg, key, value)
    torch.manual_seed(seed)
    return CausalLM(AutoModelForCausalLM.from_config(cfg), "cpu")


@pytest.mark.parametrize("overrides", [{}, {"use_parallel_residual": False}, {"attention_bias": False},
                                       {"num_hidden_layers": 1}, {"num_hidden_layers": 3, "rotary_pct": 1.0}])
def test_last_position_path_matches_one_pass_per_context(overrides):
    """GPT-NeoX: the layers run directly, layer 1 looked up per token, the last layer only at each
    future's last position: the same matrix as a forward pass of every h∘f."""
    rng = np.random.default_rng(11)
    model = neox_lm(3, **overrides)
    H, F = seqs(rng, 13, 1, 11), seqs(rng, 11, 0, 9)
    F[2] = ()
    assert prefix_reuse.last_position_supported(model)
    cols = lg.select_columns(model, [f if f else (1,) for f in F], 5)
    for kw in ({}, {"columns": cols}, {"centered": False}, {"pad_histories": False}):
        ref = lg.naive_extended_logit_matrix(model, H, F, columns=kw.get("columns"), centered=kw.get("centered", True))
        fast = lg.extended_logit_matrix(model, H, F, rows_per_block=4, batch_tokens=250, last_position_only=True, **kw)
        slow = lg.extended_logit_matrix(model, H, F, rows_per_block=4, batch_tokens=250, last_position_only=False, **kw)
        assert np.abs(fast - ref).max() <= 1e-4 and np.abs(slow - ref).max() <= 1e-4
        assert np.abs(fast - slow).max() <= 1e-5


def test_rotary_and_shared_prefix_attention_by_hand():
    """rope_into against the rotation written out (pairs (x_j, x_{j+half}) turned by the angle), the
    other dimensions copied; shared_prefix_attention against one softmax over the concatenated keys."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 6, generator=g)
    theta = torch.rand(2, 3, 2, generator=g) * 3
    cos, sin = torch.cat([theta.cos()] * 2, -1), torch.cat([theta.sin()] * 2, -1)     # rd = 4, half = 2
    out = gpt_neox.rope_into(torch.empty_like(x), x, cos, sin)
    want = x.clone()
    for j in range(2):
        c, s = theta[..., j].cos(), theta[..., j].sin()
        want[..., j] = x[..., j] * c - x[..., j + 2] * s
        want[..., j + 2] = x[..., j + 2] * c + x[..., j] * s
    assert torch.allclose(out, want, atol=1e-6) and torch.equal(out[..., 4:], x[..., 4:])
    G, nh, B, Q, hs, L, T = 2, 3, 4, 2, 5, 6, 2
    q, k, v = (torch.randn(G, nh, B, n, hs, generator=g) for n in (Q, T, T))
    K_h, V_h = torch.randn(G, nh, L, hs, generator=g), torch.randn(G, nh, L, hs, generator=g)
    bias = torch.zeros(G, 1, 1, Q, L + T)
    bias[0, ..., 1] = -float("inf")                                       # one padded history key
    o = gpt_neox.shared_prefix_attention(q, k, v, K_h, V_h, bias, 0.5)
    keys = torch.cat([K_h[:, :, None].expand(G, nh, B, L, hs), k], -2)
    vals = torch.cat([V_h[:, :, None].expand(G, nh, B, L, hs), v], -2)
    p = torch.softmax(q @ keys.transpose(-1, -2) * 0.5 + bias, -1)
    assert torch.allclose(o, p @ vals, atol=1e-5)
    assert not torch.allclose(o, gpt_neox.shared_prefix_attention(q, k, v, K_h, V_h, bias, 1.0), atol=1e-3)


def test_last_position_path_fails_at_the_wrong_position(monkeypatch):
    """The check can fail: reading the last layer at the padded end of each pass, or one token early,
    gives another matrix; the probe then sees it and the default falls back to the backbone."""
    rng = np.random.default_rng(12)
    H, F = seqs(rng, 9, 1, 8), seqs(rng, 10, 1, 9)
    ref = lg.naive_extended_logit_matrix(tiny_lm(4), H, F)
    right = gpt_neox.neox_last_hidden
    for wrong in (lambda blk, f_ids, last: right(blk, f_ids, torch.full_like(last, f_ids.shape[1] - 1)),
                  lambda blk, f_ids, last: right(blk, f_ids, (last - 1).clamp(min=0))):
        monkeypatch.setattr(gpt_neox, "neox_last_hidden", wrong)
        model = tiny_lm(4)
        bad = np.vstack([prefix_reuse.block_rows(model, H, F, [i], None, True, 200, fast=True)
                         for i in range(len(H))])
        assert np.abs(bad - ref).max() > 1e-2
        assert not prefix_reuse.last_position_supported(model)      # the probe catches it
        assert np.abs(lg.extended_logit_matrix(model, H, F, batch_tokens=200) - ref).max() <= 1e-5
        with pytest.raises(lg.LogitsError, match="last_position_only=True"):
            lg.extended_logit_matrix(model, H, F, last_position_only=True)
    monkeypatch.setattr(gpt_neox, "neox_last_hidden", right)
    model = tiny_lm(4)
    assert prefix_reuse.last_position_supported(model)
    monkeypatch.setattr(gpt_neox, "neox_backbone", lambda backbone: None)   # another architecture
    other = tiny_lm(4)
    assert not prefix_reuse.last_position_supported(other)
    assert np.abs(lg.extended_logit_matrix(other, H, F) - ref).max() <= 1e-5


def test_a_head_with_a_bias_is_centred_too():
    """The selected columns of a head with a bias: L[z] = (W_z − W̄)·x + (b_z − b̄), as a forward pass gives."""
    model = tiny_lm(6)
    head = model.model.get_output_embeddings()
    biased = torch.nn.Linear(head.in_features, head.out_features, bias=True)
    with torch.no_grad():
        biased.weight.copy_(head.weight)
        biased.bias.copy_(torch.linspace(-2, 3, head.out_features) ** 2)
    model.model.set_output_embeddings(biased)
    rng = np.random.default_rng(13)
    H, F = seqs(rng, 5, 1, 6), seqs(rng, 4, 1, 5)
    cols = lg.select_columns(model, F, 6)
    ref = lg.naive_extended_logit_matrix(model, H, F, columns=cols)
    assert np.abs(lg.extended_logit_matrix(model, H, F, columns=cols) - ref).max() <= 1e-4
    model.model.set_output_embeddings(head)                            # without the bias: another matrix
    assert np.abs(lg.extended_logit_matrix(model, H, F, columns=cols) - ref).max() > 1e-2


def test_only_a_plain_dynamic_cache_counts_as_plain(lm):
    from transformers.cache_utils import DynamicCache

    backbone, _ = prefix_reuse.lm_parts(lm)
    with torch.inference_mode():
        cache = backbone(input_ids=torch.zeros(1, 3, dtype=torch.long), use_cache=True).past_key_values
    assert type(cache) is DynamicCache and prefix_reuse.plain_kv_cache(cache)

    class OtherCache:                                                # the same layers, another cache type
        layers = cache.layers
    assert not prefix_reuse.plain_kv_cache(OtherCache())
    empty = DynamicCache()
    empty.layers = []
    assert not prefix_reuse.plain_kv_cache(empty)


# ------------------------------------------------------------------ other architectures: Llama, Gemma 3

def tiny_llama(seed=0, vocab=40):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    return CausalLM(LlamaForCausalLM(LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64,
                                                 num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                                 max_position_embeddings=64)), "cpu")


def tiny_gemma3(seed=0, vocab=40):
    """Gemma 3 with a sliding window of 4 tokens on two of its three layers, shorter than the contexts: its
    cache is not a plain DynamicCache (sliding-window layers), so histories of equal length share a pass."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(seed)
    config = Gemma3TextConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=8, sliding_window=4,
                              layer_types=["sliding_attention", "sliding_attention", "full_attention"],
                              max_position_embeddings=64)
    return CausalLM(Gemma3ForCausalLM(config), "cpu")


@pytest.mark.parametrize("make, padded", [(tiny_lm, True), (tiny_llama, True), (tiny_gemma3, False)],
                         ids=["gpt-neox", "llama", "gemma3"])
def test_history_reuse_on_any_causal_lm_equals_one_pass_per_context(make, padded):
    """The same matrix, full vocabulary and k selected columns, as one forward pass per h∘f, on GPT-NeoX,
    Llama (left-padded shared caches) and Gemma 3 (sliding-window cache: equal-length blocks, the cache
    copied and repeated over the futures with transformers' own batch_repeat_interleave)."""
    model = make()
    assert prefix_reuse.padding_supported(model) is padded
    rng = np.random.default_rng(3)
    H, F = seqs(rng, 9, 1, 7), seqs(rng, 7, 0, 6)
    F[2] = ()
    full = lg.extended_logit_matrix(model, H, F, rows_per_block=4, batch_tokens=60)
    assert np.abs(full - lg.naive_extended_logit_matrix(model, H, F)).max() <= 1e-4
    cols = lg.select_columns(model, [f for f in F if f], 5)
    Fk = [f for f in F if f]
    fast = lg.extended_logit_matrix(model, H, Fk, columns=cols, rows_per_block=4, batch_tokens=60)
    assert np.abs(fast - lg.naive_extended_logit_matrix(model, H, Fk, columns=cols)).max() <= 1e-4


def test_a_cache_repeated_in_the_wrong_order_is_caught(monkeypatch):
    """The comparison above can fail: Gemma 3's cache tiled (h1 h2 h1 h2 …) instead of interleaved
    (h1 h1 … h2 h2 …) over the futures gives rows of the wrong histories."""
    from transformers.cache_utils import DynamicCache

    model = tiny_gemma3(1)
    rng = np.random.default_rng(4)
    H = [tuple(int(x) for x in rng.integers(0, 40, 5)) for _ in range(4)]       # equal lengths: one block
    F = seqs(rng, 3, 1, 4)
    ref = lg.naive_extended_logit_matrix(model, H, F)
    assert np.abs(lg.extended_logit_matrix(model, H, F) - ref).max() <= 1e-4

    def tiled(self, repeats):
        for layer in self.layers:
            if getattr(layer, "keys", None) is not None and layer.keys.numel():
                layer.keys = layer.keys.repeat(repeats, *([1] * (layer.keys.ndim - 1)))
                layer.values = layer.values.repeat(repeats, *([1] * (layer.values.ndim - 1)))

    monkeypatch.setattr(DynamicCache, "batch_repeat_interleave", tiled)
    assert np.abs(lg.extended_logit_matrix(model, H, F) - ref).max() > 1e-3
