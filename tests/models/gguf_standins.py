"""A tiny Llama written as a GGUF file, the stand-in of the GGUF tests: quantised as SmolLM2's file is
(token embedding Q8_0, the block matrices Q4_1, norms float32), with a byte-level BPE tokenizer."""
from __future__ import annotations

from pathlib import Path

import numpy as np

D, FF, LAYERS, HEADS, KV_HEADS = 64, 128, 2, 4, 2
LETTERS = "abcdefghijklmnopqrstuvwxyz"
MERGES = ["t h", "th e", "Ġ t", "Ġ the", "a n", "o n"]


def tiny_vocabulary() -> list[str]:
    """Byte-level BPE tokens: the letters, the space 'Ġ', a few punctuation marks, the merged tokens, and
    the special tokens <s> and </s> (64 in all)."""
    tokens = ["<s>", "</s>", *LETTERS, "Ġ", ".", ",", *("".join(m.split()) for m in MERGES)]
    tokens += [f"<extra_{i}>" for i in range(64 - len(tokens))]
    return tokens


def write_tiny_llama_gguf(path, seed: int = 0, architecture: str = "llama") -> Path:
    """A 2-layer Llama (d = 64, d_ff = 128, 4 heads, 2 key-value heads, vocabulary 64) with weights drawn
    from N(0, 0.05²) under ``seed``, written to ``path`` with gguf's GGUFWriter."""
    import gguf

    tokens = tiny_vocabulary()
    V = len(tokens)
    rng = np.random.default_rng(seed)
    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_block_count(LAYERS)
    writer.add_context_length(128)
    writer.add_embedding_length(D)
    writer.add_feed_forward_length(FF)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(V)
    writer.add_rope_dimension_count(D // HEADS)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([3, 3] + [1] * (V - 2))
    writer.add_token_merges(MERGES)
    writer.add_name("tiny-llama")          # a string after the token arrays (the header reader skips them)
    writer.add_bos_token_id(0)
    writer.add_eos_token_id(1)

    def add(name, shape, qtype):
        w = rng.normal(0.0, 0.05, size=shape).astype(np.float32)
        if qtype == "F32":
            writer.add_tensor(name, 1.0 + w if name.endswith("norm.weight") else w)
        else:
            q = gguf.GGMLQuantizationType[qtype]
            writer.add_tensor(name, gguf.quants.quantize(w, q), raw_dtype=q)   # shape read from the bytes

    hd = D // HEADS
    add("token_embd.weight", (V, D), "Q8_0")
    for i in range(LAYERS):
        add(f"blk.{i}.attn_norm.weight", (D,), "F32")
        add(f"blk.{i}.attn_q.weight", (D, D), "Q4_1")
        add(f"blk.{i}.attn_k.weight", (KV_HEADS * hd, D), "Q4_1")
        add(f"blk.{i}.attn_v.weight", (KV_HEADS * hd, D), "Q4_1")
        add(f"blk.{i}.attn_output.weight", (D, D), "Q4_1")
        add(f"blk.{i}.ffn_norm.weight", (D,), "F32")
        add(f"blk.{i}.ffn_gate.weight", (FF, D), "Q4_1")
        add(f"blk.{i}.ffn_up.weight", (FF, D), "Q4_1")
        add(f"blk.{i}.ffn_down.weight", (D, FF), "Q4_1")
    add("output_norm.weight", (D,), "F32")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return Path(path)
