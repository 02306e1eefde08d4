"""Tests of lib.text.tokenization: exact round trips, determinism, token streams, HF tokenizers, errors."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest

from lib import REPO_ROOT
from lib.text import tokenization as T
from lib.text.corpus import load_corpus

DEFAULT_CACHE = "default-corpus-cache"  # shared with tests/text/test_corpus.py (same pytest session)

TRICKY = [
    "",
    " ",
    "hello world",
    "  leading and trailing spaces  ",
    "tabs\tand\nnewlines\n\n\r\nwindows line ends\r\n",
    "ünïcödé — “quotes” … café naïve",
    "emoji 😀👩‍👩‍👧 flags 🇫🇷 and CJK 日本語テキスト, Ελληνικά, עברית",
    "\x00 control \x07 bytes \x7f",
    "numbers 12345 3.14159 -1e-10 0xDEADBEEF",
    "<|endoftext|> looks special but is text",
    "    def f(x):\n        return x ** 2  # code\n",
    "a" * 1000,
]

SMALL_TEXT = """The quick brown fox jumps over the lazy dog. Linear algebra studies vector spaces.

A matrix of rank r can be written as a sum of r outer products of vectors.

Singular values measure how much a matrix stretches space along orthogonal directions.

Recurrent networks carry a hidden state forward; transformers attend over the whole context.

The low-rank structure of attention maps is a recurring theme of this book.
"""


@pytest.fixture(autouse=True)
def _tmp_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BOOK_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A small local corpus and a byte-level BPE (vocab 500) trained on it."""
    base = tmp_path_factory.mktemp("small")
    path = base / "small.txt"
    path.write_text(SMALL_TEXT * 3 + "\n\nExtra: ünïcode and emoji 😀.\n", encoding="utf-8")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BOOK_CACHE_DIR", str(base / "cache"))
        corpus = load_corpus(str(path))
        tokenizer = T.train_bpe(corpus, 500)
    return corpus, tokenizer


@pytest.fixture(scope="module")
def default_corpus(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BOOK_CACHE_DIR", str(tmp_path_factory.getbasetemp() / DEFAULT_CACHE))
        return load_corpus()


# --------------------------------------------------------------------------- round trips


def test_bpe_round_trip_tricky(small):
    _, tok = small
    assert tok.kind == "bpe" and 257 <= tok.vocab_size <= 500
    for text in TRICKY:
        ids = tok.encode(text)
        assert ids.dtype == np.int32 and ids.ndim == 1
        assert tok.decode(ids) == text, repr(text)
    assert tok.encode("").size == 0
    batch = tok.encode_batch(TRICKY)
    assert all(np.array_equal(a, tok.encode(t)) for a, t in zip(batch, TRICKY))
    # merges were learned: common words take fewer tokens than bytes
    assert tok.encode(" the matrix").size < len(" the matrix")


def test_bpe_round_trip_default_heldout(small, default_corpus):
    _, tok = small
    _, held = default_corpus.split(0.1, seed=0)
    docs = [default_corpus.documents[i] for i in held]
    for doc, ids in zip(docs, tok.encode_batch(docs)):
        assert tok.decode(ids) == doc


def test_train_heldout_on_default_corpus(default_corpus):
    """The book's path: BPE trained on the training documents, held-out documents decode exactly."""
    train, held = T.train_heldout(default_corpus, "bpe:1024", heldout_fraction=0.05, seed=1)
    train_idx, held_idx = default_corpus.split(0.05, seed=1)
    assert train.n_documents == len(train_idx) and held.n_documents == len(held_idx)
    tok = T.get_tokenizer("bpe:1024", default_corpus.subset(train_idx))  # cached: same tokenizer
    assert held.vocab_size == tok.vocab_size == 1024
    for k, i in enumerate(held_idx):
        assert tok.decode(held.document(k)) == default_corpus.documents[i]
    assert default_corpus.n_bytes / (train.n_tokens + held.n_tokens) > 2.5  # real compression


def test_byte_tokenizer():
    tok = T.byte_tokenizer()
    assert tok.vocab_size == 256 and tok.kind == "byte"
    for text in TRICKY:
        ids = tok.encode(text)
        assert np.array_equal(ids, np.frombuffer(text.encode(), np.uint8)) and tok.decode(ids) == text
    assert T.get_tokenizer("byte").vocab_size == 256


def test_token_strings(small):
    _, tok = small
    ids = tok.encode(" the\tmatrix\n")
    strings = tok.token_strings(ids)
    assert "".join(strings) == "␣the⇥matrix↵"
    assert T.byte_tokenizer().token_strings(T.byte_tokenizer().encode("é")) == ["\\xc3", "\\xa9"]


# --------------------------------------------------------------------------- determinism and cache


def test_bpe_training_deterministic(small):
    corpus, tok = small
    first = T._train_bpe_json(corpus.documents, 500)
    assert T._train_bpe_json(corpus.documents, 500) == first == tok.to_json()
    # another process, one Rayon thread, another hash seed
    code = ("import sys; from lib.text.tokenization import _train_bpe_json; from lib.text.corpus import load_corpus; "
            "sys.stdout.write(_train_bpe_json(load_corpus(sys.argv[1]).documents, 500))")
    env = {**os.environ, "RAYON_NUM_THREADS": "1", "PYTHONHASHSEED": "7"}
    path = corpus.provenance["path"]
    out = subprocess.run([sys.executable, "-c", code, path], cwd=REPO_ROOT, env=env, capture_output=True,
                         text=True, timeout=120, check=True).stdout
    assert out == first


def test_train_bpe_cached(small):
    corpus, tok = small
    start = time.perf_counter()
    again = T.train_bpe(corpus, 500)  # fresh cache dir: trains
    assert again.identity == tok.identity
    assert T.train_bpe(corpus, 500).identity == tok.identity  # cache hit
    assert time.perf_counter() - start < 30


# --------------------------------------------------------------------------- token streams


def test_encode_corpus_offsets(small):
    corpus, tok = small
    stream = T.encode_corpus(corpus, tok)
    per_doc = [tok.encode(d) for d in corpus.documents]
    assert stream.n_documents == corpus.n_documents and stream.doc_offsets[0] == 0
    assert stream.doc_offsets.dtype == np.int64 and stream.tokens.dtype == np.int32
    assert np.array_equal(stream.tokens, np.concatenate(per_doc))
    for i, ids in enumerate(per_doc):
        assert np.array_equal(stream.document(i), ids)
        assert tok.decode(stream.document(i)) == corpus.documents[i]
    assert stream.vocab_size == tok.vocab_size and stream.tokenizer_name == tok.name
    cached = T.encode_corpus(corpus, tok)
    assert np.array_equal(cached.tokens, stream.tokens) and np.array_equal(cached.doc_offsets, stream.doc_offsets)
    sub = stream.subset([3, 0])
    assert np.array_equal(sub.tokens, np.concatenate([per_doc[3], per_doc[0]]))
    assert np.array_equal(sub.doc_offsets, [0, per_doc[3].size])


def test_train_heldout_split(small):
    corpus, tok = small
    train, held = T.train_heldout(corpus, tok, heldout_fraction=0.25, seed=0)
    train_idx, held_idx = corpus.split(0.25, seed=0)
    assert train.n_documents + held.n_documents == corpus.n_documents
    assert [tok.decode(held.document(k)) for k in range(held.n_documents)] == [corpus.documents[i] for i in held_idx]
    assert train.n_tokens + held.n_tokens == T.encode_corpus(corpus, tok).n_tokens


def test_token_stream_validation():
    with pytest.raises(ValueError):
        T.TokenStream(np.array([1, 2, 3]), np.array([1]), 10, "x")  # first offset not 0
    with pytest.raises(ValueError):
        T.TokenStream(np.array([1, 20]), np.array([0]), 10, "x")  # id beyond vocab
    stream = T.TokenStream(np.array([1, 2, 3]), np.array([0, 2, 2]), 10, "x")
    assert stream.document(1).size == 0 and list(stream.doc_lengths) == [2, 0, 1]
    with pytest.raises(IndexError):
        stream.document(3)


# --------------------------------------------------------------------------- Hugging Face tokenizers


def test_hf_tokenizer_from_local_directory(small, tmp_path):
    from transformers import PreTrainedTokenizerFast

    corpus, bpe = small
    directory = tmp_path / "hf-tokenizer"
    PreTrainedTokenizerFast(tokenizer_object=bpe.backend).save_pretrained(str(directory))
    for spec in (str(directory), f"hf:{directory}"):
        tok = T.get_tokenizer(spec)
        assert tok.kind == "hf" and tok.vocab_size == bpe.vocab_size
        for text in TRICKY:
            ids = tok.encode(text)
            assert np.array_equal(ids, bpe.encode(text)) and tok.decode(ids) == text, repr(text)
        assert tok.token_strings(tok.encode(" the\n")) == bpe.token_strings(bpe.encode(" the\n"))
    stream = T.encode_corpus(corpus, tok)
    assert np.array_equal(stream.tokens, T.encode_corpus(corpus, bpe).tokens)


def test_hf_hub_name_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(T.TokenizerUnavailable) as info:
        T.get_tokenizer("hf:book-tests/no-such-tokenizer")
    message = str(info.value)
    assert "unreachable" in message and "'byte'" in message and "local directory" in message


# --------------------------------------------------------------------------- errors


def test_invalid_specs_and_vocab_sizes(small):
    corpus, _ = small
    for spec in ("wordpiece", "bpe", "hf:", "", "/no/such/dir"):
        with pytest.raises(ValueError, match="'tokenizer'") as info:
            T.get_tokenizer(spec, corpus)
        assert "bpe:<vocab_size>" in str(info.value) or "integer" in str(info.value)
    with pytest.raises(ValueError, match="'tokenizer'"):
        T.get_tokenizer("bpe:many", corpus)
    with pytest.raises(ValueError, match="'corpus'"):
        T.get_tokenizer("bpe:512")
    for bad in (256, 100, 10 ** 9, True, 512.0, "512"):
        with pytest.raises(ValueError, match="'vocab_size'"):
            T.train_bpe(corpus, bad)
    with pytest.raises(ValueError, match="'vocab_size'"):
        T.get_tokenizer("bpe:100", corpus)
    with pytest.raises(TypeError):
        T.train_bpe("not a corpus", 512)
    with pytest.raises(ValueError, match="token ids"):
        T.byte_tokenizer().decode([300])


# --------------------------------------------------------------------------- a spec's vocabulary, without building it


def test_tokenizer_vocab_size_reads_the_spec_both_ways(monkeypatch):
    """bpe:N and byte read off the spec; a hub name found nowhere gives Pythia's 50,304 whether or not it is
    looked up locally (never a download: offline)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for look_up_local in (False, True):
        assert T.tokenizer_vocab_size("bpe:2048", look_up_local=look_up_local) == 2048
        assert T.tokenizer_vocab_size("bpe:300", look_up_local=look_up_local) == 300
        assert T.tokenizer_vocab_size("byte", look_up_local=look_up_local) == 256 == T.byte_tokenizer().vocab_size
        assert T.tokenizer_vocab_size("hf:book-tests/no-such-tokenizer", look_up_local=look_up_local) == 50_304
        assert T.tokenizer_vocab_size("/no/such/dir", look_up_local=look_up_local) == 50_304
    assert T.tokenizer_vocab_size("hf:book-tests/no-such-tokenizer") == T.GPT_NEOX_VOCAB == 50_304  # the default
    with pytest.raises(ValueError):
        T.tokenizer_vocab_size("bpe:many")


def test_tokenizer_vocab_size_looks_up_a_local_folder_only_when_asked(small, tmp_path):
    """A tokenizer saved in a folder: its own length when looked up, Pythia's vocabulary otherwise."""
    from transformers import PreTrainedTokenizerFast

    _, bpe = small
    directory = tmp_path / "hf-tokenizer"
    PreTrainedTokenizerFast(tokenizer_object=bpe.backend).save_pretrained(str(directory))
    for spec in (str(directory), f"hf:{directory}"):
        assert T.tokenizer_vocab_size(spec, look_up_local=True) == bpe.vocab_size != 50_304
        assert T.tokenizer_vocab_size(spec, look_up_local=False) == 50_304
        assert T.tokenizer_vocab_size(spec) == 50_304
