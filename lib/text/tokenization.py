"""Tokenizers and token streams: text in, integer sequences out, and back again.

One :class:`Tokenizer` interface covers three kinds:

* ``"bpe"`` -- byte-level BPE trained here on a corpus (:func:`train_bpe`). Text is first
  turned into UTF-8 bytes, each byte is one of the 256 initial tokens, and BPE only ever
  *merges* adjacent tokens. Every string therefore has an encoding (no unknown token)
  and decoding concatenates the bytes back: ``decode(encode(s)) == s`` exactly, for any
  string, including whitespace, emoji and control characters. There are no special
  tokens (a literal ``"<|endoftext|>"`` in the text stays text); document boundaries live
  in :attr:`TokenStream.doc_offsets` instead.
* ``"byte"`` -- the 256 UTF-8 bytes themselves (:func:`byte_tokenizer`), the fallback.
* ``"hf"`` -- any Hugging Face tokenizer (:func:`load_hf_tokenizer`), from the hub or a
  local directory.

A :class:`TokenStream` is a corpus encoded: all documents' tokens concatenated in one
int32 array, with the start offset of each document, so that a split by document
(:func:`train_heldout`) is a cheap re-indexing. Trained tokenizers and encoded corpora
are cached (:mod:`lib.book.cache`).

Determinism: BPE training with ``tokenizers`` was checked to give the same JSON in
separate processes and for 1 or 2 Rayon threads (``RAYON_NUM_THREADS``), so no thread
setting is forced; ``tests/text/test_tokenization.py`` keeps checking it.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from . import corpus as _corpus
from ..book.cache import cached
from .corpus import Corpus

# Bump when the training or encoding recipe changes (the cache key also covers this file).
BUILDER_VERSION = 1

KINDS = ("bpe", "byte", "hf")
MIN_BPE_VOCAB = 257          # the 256 byte tokens plus at least one merge
MAX_BPE_VOCAB = 2 ** 18      # far beyond what the book's corpora support
_ENCODE_CHUNK_BYTES = 4_000_000  # documents per encode_batch call, bounded by size (memory)
_SPEC_FORMS = ("'bpe:<vocab_size>' (trained on the corpus, e.g. 'bpe:4096')", "'byte'",
               "'hf:<hub name or local path>' (e.g. 'hf:EleutherAI/pythia-70m')",
               "a local directory holding a saved Hugging Face tokenizer")


class TokenizerUnavailable(RuntimeError):
    """A tokenizer cannot be obtained from here (a hub name while offline)."""


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


# --------------------------------------------------------------------------- byte rendering


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from the 256 bytes to printable characters (used by ByteLevel)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) \
        + list(range(ord("®"), ord("ÿ") + 1))
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(printable, chars)}


BYTE_TO_CHAR = _bytes_to_unicode()
CHAR_TO_BYTE = {c: b for b, c in BYTE_TO_CHAR.items()}

_VISIBLE = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"}


def render_token(data: bytes) -> str:
    """A token's bytes as readable text for tables: spaces as '␣', newlines as '↵', tabs
    as '⇥'; bytes that are not complete UTF-8 (part of a multi-byte character) as ``\\xNN``."""
    text = data.decode("utf-8", errors="backslashreplace")
    out = []
    for ch in text:
        if ch in _VISIBLE:
            out.append(_VISIBLE[ch])
        elif ch.isprintable():
            out.append(ch)
        else:
            out.append(ch.encode("unicode_escape").decode("ascii"))
    return "".join(out)


# --------------------------------------------------------------------------- Tokenizer


class Tokenizer:
    """One interface over byte-level BPE, raw bytes and Hugging Face tokenizers.

    ``encode(text)`` gives a 1-D int32 array, ``decode(ids)`` the text back,
    ``token_strings(ids)`` a readable rendering of each token. ``identity`` is a stable
    fingerprint (hash of the tokenizer's full definition) used in cache keys.
    """

    def __init__(self, name: str, kind: str, backend=None, identity: str | None = None):
        if kind not in KINDS:
            raise ValueError(f"parameter 'kind' must be one of {KINDS}; got {kind!r}")
        self.name, self.kind, self.backend = name, kind, backend
        self._identity = identity

    # ---- properties
    @property
    def vocab_size(self) -> int:
        """Number of distinct ids (every id produced is below it)."""
        if self.kind == "byte":
            return 256
        if self.kind == "bpe":
            return self.backend.get_vocab_size(with_added_tokens=True)
        return len(self.backend)

    @property
    def identity(self) -> str:
        """SHA-256 of the tokenizer's definition (its JSON for BPE / fast HF tokenizers)."""
        if self._identity is None:
            if self.kind == "byte":
                definition = "byte-utf8-v1"
            elif self.kind == "bpe":
                definition = self.backend.to_str()
            else:
                fast = getattr(self.backend, "backend_tokenizer", None)
                definition = type(self.backend).__name__ + "\n" + (
                    fast.to_str() if fast is not None else json.dumps(sorted(self.backend.get_vocab().items())))
            self._identity = hashlib.sha256(definition.encode("utf-8")).hexdigest()
        return self._identity

    def to_json(self) -> str:
        """The ``tokenizers`` JSON definition (BPE and fast HF tokenizers)."""
        if self.kind == "bpe":
            return self.backend.to_str()
        fast = getattr(self.backend, "backend_tokenizer", None)
        if fast is None:
            raise ValueError(f"tokenizer {self.name!r} of kind {self.kind!r} has no tokenizers-JSON definition")
        return fast.to_str()

    # ---- encoding
    def encode(self, text: str) -> np.ndarray:
        """Token ids of ``text`` (no special tokens added), as int32."""
        if not isinstance(text, str):
            raise TypeError(f"parameter 'text' must be a str; got {type(text).__name__}")
        if self.kind == "byte":
            return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int32)
        if self.kind == "bpe":
            return np.asarray(self.backend.encode(text, add_special_tokens=False).ids, dtype=np.int32)
        return np.asarray(self.backend(text, add_special_tokens=False, verbose=False)["input_ids"], dtype=np.int32)

    def encode_batch(self, texts: Sequence[str]) -> list[np.ndarray]:
        """``[encode(t) for t in texts]``, in parallel threads for BPE and fast HF tokenizers."""
        texts = list(texts)
        bad = next((i for i, t in enumerate(texts) if not isinstance(t, str)), None)
        if bad is not None:
            raise TypeError(f"parameter 'texts' must hold strings; item {bad} is a {type(texts[bad]).__name__}")
        if not texts:
            return []
        if self.kind == "byte":
            return [self.encode(t) for t in texts]
        if self.kind == "bpe":
            batch = getattr(self.backend, "encode_batch_fast", self.backend.encode_batch)
            return [np.asarray(e.ids, dtype=np.int32) for e in batch(texts, add_special_tokens=False)]
        ids = self.backend(texts, add_special_tokens=False, verbose=False)["input_ids"]
        return [np.asarray(x, dtype=np.int32) for x in ids]

    def decode(self, ids: Iterable[int]) -> str:
        """Text of a sequence of ids (exact inverse of :meth:`encode` for valid text)."""
        ids = np.asarray(ids, dtype=np.int64).ravel()
        if ids.size and (ids.min() < 0 or ids.max() >= self.vocab_size):
            raise ValueError(f"token ids must lie in [0, {self.vocab_size}) for tokenizer {self.name!r}; "
                             f"got min {ids.min()}, max {ids.max()}")
        if self.kind == "byte":
            return ids.astype(np.uint8).tobytes().decode("utf-8", errors="replace")
        if self.kind == "bpe":
            return self.backend.decode(ids.tolist(), skip_special_tokens=False)
        return self.backend.decode(ids.tolist(), skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def token_bytes(self, token_id: int) -> bytes | None:
        """The bytes a token stands for (None for special/added tokens of an HF tokenizer)."""
        token_id = int(token_id)
        if self.kind == "byte":
            return bytes([token_id])
        if self.kind == "bpe":
            token = self.backend.id_to_token(token_id)
            if token is None or not all(c in CHAR_TO_BYTE for c in token):
                return None
            return bytes(CHAR_TO_BYTE[c] for c in token)
        if token_id in getattr(self.backend, "added_tokens_decoder", {}):
            return None
        fast = getattr(self.backend, "backend_tokenizer", None)
        token = self.backend.convert_ids_to_tokens(token_id)
        if fast is not None and type(fast.decoder).__name__ == "ByteLevel" and all(c in CHAR_TO_BYTE for c in token):
            return bytes(CHAR_TO_BYTE[c] for c in token)
        return None

    def token_strings(self, ids: Iterable[int]) -> list[str]:
        """Readable rendering of each token (see :func:`render_token`), for the book's tables.

        Special tokens of HF tokenizers appear verbatim; tokens of non-byte-level HF
        tokenizers (SentencePiece) as their vocabulary entry with '▁' shown as '␣'.
        """
        out = []
        for i in np.asarray(ids, dtype=np.int64).ravel():
            data = self.token_bytes(int(i))
            if data is not None:
                out.append(render_token(data))
            else:
                token = (self.backend.convert_ids_to_tokens(int(i)) if self.kind == "hf"
                         else self.backend.id_to_token(int(i)))
                out.append(str(token).replace("▁", "␣"))
        return out

    def __repr__(self) -> str:
        return f"Tokenizer(name={self.name!r}, kind={self.kind!r}, vocab_size={self.vocab_size})"


def byte_tokenizer() -> Tokenizer:
    """The byte-level fallback: ids are the UTF-8 bytes of the text (vocab 256)."""
    return Tokenizer("byte", "byte")


# --------------------------------------------------------------------------- BPE


def _check_vocab_size(vocab_size) -> int:
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, (int, np.integer)) \
            or not MIN_BPE_VOCAB <= vocab_size <= MAX_BPE_VOCAB:
        raise ValueError(f"parameter 'vocab_size' must be an integer in [{MIN_BPE_VOCAB}, {MAX_BPE_VOCAB}] "
                         f"(256 byte tokens plus at least one merge); got {vocab_size!r}")
    return int(vocab_size)


def _new_bpe():
    from tokenizers import Tokenizer as HFTokenizer, decoders, models, pre_tokenizers

    tok = HFTokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return tok


def _train_bpe_json(documents: list[str], vocab_size: int) -> str:
    from tokenizers import pre_tokenizers, trainers

    tok = _new_bpe()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False, special_tokens=[],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(documents, trainer, length=len(documents))
    return tok.to_str()


def train_bpe(corpus: Corpus, vocab_size: int, refresh: bool = False) -> Tokenizer:
    """Byte-level BPE with (up to) ``vocab_size`` tokens trained on ``corpus`` (cached).

    The 256 bytes are the initial alphabet and BPE adds merges of frequent adjacent pairs
    (within pre-tokenized words: GPT-2's split into words, numbers, punctuation and
    spaces). Training is deterministic, so there is no seed. A small corpus may run out
    of pairs before ``vocab_size``; :attr:`Tokenizer.vocab_size` reports the real size.
    """
    if not isinstance(corpus, Corpus):
        raise TypeError(f"parameter 'corpus' must be a Corpus; got {type(corpus).__name__}")
    vocab_size = _check_vocab_size(vocab_size)
    params = {"corpus_sha256": corpus.sha256(), "vocab_size": vocab_size,
              "tokenizers": _version("tokenizers"), "builder_version": BUILDER_VERSION}

    def produce(workdir: Path) -> None:
        text = _train_bpe_json(corpus.documents, vocab_size)
        (workdir / "tokenizer.json").write_text(text, encoding="utf-8")
        (workdir / "info.json").write_text(json.dumps({"corpus": corpus.name, "requested_vocab_size": vocab_size,
                                                        "n_documents": corpus.n_documents}))

    directory = cached("bpe-tokenizer", params, produce, fmt="dir", refresh=refresh)
    from tokenizers import Tokenizer as HFTokenizer

    backend = HFTokenizer.from_file(str(directory / "tokenizer.json"))
    return Tokenizer(f"bpe{vocab_size}@{corpus.name}", "bpe", backend)


# --------------------------------------------------------------------------- Hugging Face


def _offline_help(name: str, reason: str) -> TokenizerUnavailable:
    return TokenizerUnavailable(
        f"cannot load tokenizer {name!r} from the Hugging Face hub: the hub is unreachable ({reason}) and it is "
        "not in the local Hugging Face cache. Offline, these work: 'byte', 'bpe:<vocab_size>' (trained on a local "
        "corpus), or a local directory holding a saved tokenizer (tokenizer.save_pretrained(dir) where a network "
        "is available, then pass the directory).")


def load_hf_tokenizer(name_or_path: str | os.PathLike) -> Tokenizer:
    """A Hugging Face tokenizer (``transformers.AutoTokenizer``) by hub name or local directory.

    A path that exists is loaded with ``local_files_only=True`` (works offline). A hub
    name is looked up in the local Hugging Face cache first and downloaded only if it is
    not there and the hub answers.
    """
    from transformers import AutoTokenizer

    path = Path(name_or_path).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ValueError(f"tokenizer path {str(path)!r} is not a directory (expected a save_pretrained folder)")
        try:
            backend = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        except (OSError, ValueError) as err:
            raise ValueError(f"cannot load a Hugging Face tokenizer from directory {str(path)!r}: {err}") from err
        return Tokenizer(f"hf:{path.resolve()}", "hf", backend)
    name = str(name_or_path)
    try:
        backend = AutoTokenizer.from_pretrained(name, local_files_only=True)
        return Tokenizer(f"hf:{name}", "hf", backend)
    except (OSError, ValueError):
        pass
    var = _corpus.offline_env()
    if var:
        raise _offline_help(name, f"offline mode is on: {var}={os.environ[var]}")
    if not _corpus.hub_reachable():
        raise _offline_help(name, f"no answer from {os.environ.get('HF_ENDPOINT', 'https://huggingface.co')}")
    try:
        backend = AutoTokenizer.from_pretrained(name)
    except Exception as err:  # noqa: BLE001 - classify network failures
        if _corpus.is_network_error(err):
            raise _offline_help(name, f"{type(err).__name__}: {err}") from err
        raise
    return Tokenizer(f"hf:{name}", "hf", backend)


def get_tokenizer(spec: str | Tokenizer, corpus: Corpus | None = None) -> Tokenizer:
    """A tokenizer from a short spec: ``"bpe:<vocab_size>"`` (trained on ``corpus``),
    ``"byte"``, ``"hf:<name or path>"`` or a local directory; a Tokenizer is returned as is."""
    if isinstance(spec, Tokenizer):
        return spec
    forms = ", ".join(_SPEC_FORMS)
    if isinstance(spec, os.PathLike):
        spec = str(spec)
    if not isinstance(spec, str):
        raise ValueError(f"parameter 'tokenizer' must be a string spec, one of: {forms}; got {type(spec).__name__}")
    if spec == "byte":
        return byte_tokenizer()
    if spec.startswith("bpe:"):
        try:
            vocab_size = int(spec[4:])
        except ValueError:
            raise ValueError(f"parameter 'tokenizer' is {spec!r}: the part after 'bpe:' must be an integer "
                             f"vocab_size in [{MIN_BPE_VOCAB}, {MAX_BPE_VOCAB}]") from None
        if corpus is None:
            raise ValueError(f"parameter 'corpus' is needed to train tokenizer {spec!r} (pass the training Corpus)")
        return train_bpe(corpus, vocab_size)
    if spec.startswith("hf:") and len(spec) > 3:
        return load_hf_tokenizer(spec[3:])
    if spec and Path(spec).expanduser().is_dir():
        return load_hf_tokenizer(spec)
    hint = " (no such directory)" if spec and (os.sep in spec or spec.startswith((".", "~"))) else ""
    raise ValueError(f"parameter 'tokenizer' is {spec!r}{hint}; allowed forms: {forms}")


# --------------------------------------------------------------------------- token streams


@dataclass(repr=False)
class TokenStream:
    """An encoded corpus: all documents' tokens concatenated, and where each document starts.

    ``tokens`` is 1-D int32; ``doc_offsets[i]`` (int64, ``doc_offsets[0] == 0``) is the
    position of document ``i``'s first token, which ends where document ``i + 1`` starts
    (or at the end). Every token id is below ``vocab_size``.
    """

    tokens: np.ndarray
    doc_offsets: np.ndarray
    vocab_size: int
    tokenizer_name: str

    def __post_init__(self) -> None:
        self.tokens = np.ascontiguousarray(self.tokens, dtype=np.int32)
        self.doc_offsets = np.ascontiguousarray(self.doc_offsets, dtype=np.int64)
        self.vocab_size = int(self.vocab_size)
        self.tokenizer_name = str(self.tokenizer_name)
        if self.tokens.ndim != 1 or self.doc_offsets.ndim != 1:
            raise ValueError("TokenStream: 'tokens' and 'doc_offsets' must be 1-D arrays")
        off = self.doc_offsets
        if off.size and (off[0] != 0 or np.any(np.diff(off) < 0) or off[-1] > self.tokens.size):
            raise ValueError("TokenStream: 'doc_offsets' must start at 0, be non-decreasing and stay within the tokens")
        if not off.size and self.tokens.size:
            raise ValueError("TokenStream: tokens without any document offset")
        if self.tokens.size and (self.tokens.min() < 0 or self.tokens.max() >= self.vocab_size):
            raise ValueError(f"TokenStream: token ids must lie in [0, {self.vocab_size})")

    @property
    def n_tokens(self) -> int:
        return int(self.tokens.size)

    @property
    def n_documents(self) -> int:
        return int(self.doc_offsets.size)

    @property
    def doc_ends(self) -> np.ndarray:
        """End offset (exclusive) of each document."""
        return np.append(self.doc_offsets[1:], self.tokens.size).astype(np.int64)

    @property
    def doc_lengths(self) -> np.ndarray:
        return self.doc_ends - self.doc_offsets

    def document(self, i: int) -> np.ndarray:
        """Tokens of document ``i`` (a view)."""
        n = self.n_documents
        if not -n <= i < n:
            raise IndexError(f"document index {i} out of range for {n} documents")
        i %= n
        return self.tokens[self.doc_offsets[i]:self.doc_ends[i]]

    def subset(self, doc_indices) -> "TokenStream":
        """A new stream holding the documents ``doc_indices``, in that order."""
        idx = np.asarray(doc_indices, dtype=np.int64).ravel()
        n = self.n_documents
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            raise IndexError(f"document indices must lie in [0, {n})")
        starts, ends = self.doc_offsets[idx], self.doc_ends[idx]
        lengths = ends - starts
        offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) if idx.size else np.zeros(0, np.int64)
        pieces = [self.tokens[s:e] for s, e in zip(starts, ends)]
        tokens = np.concatenate(pieces) if pieces else np.zeros(0, np.int32)
        return TokenStream(tokens, offsets, self.vocab_size, self.tokenizer_name)

    def __repr__(self) -> str:
        return (f"TokenStream(n_tokens={self.n_tokens:,}, n_documents={self.n_documents}, "
                f"vocab_size={self.vocab_size}, tokenizer_name={self.tokenizer_name!r})")


def _encode_documents(tokenizer: Tokenizer, documents: list[str]) -> tuple[np.ndarray, np.ndarray]:
    pieces: list[np.ndarray] = []
    chunk: list[str] = []
    size = 0
    for doc in documents + [None]:
        if doc is not None:
            chunk.append(doc)
            size += len(doc)
        if chunk and (doc is None or size >= _ENCODE_CHUNK_BYTES):
            pieces += tokenizer.encode_batch(chunk)
            chunk, size = [], 0
    lengths = np.array([p.size for p in pieces], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) if pieces else np.zeros(0, np.int64)
    tokens = np.concatenate(pieces).astype(np.int32) if pieces else np.zeros(0, np.int32)
    return tokens, offsets


def encode_corpus(corpus: Corpus, tokenizer: Tokenizer | str, refresh: bool = False) -> TokenStream:
    """Encode every document of ``corpus`` (cached by corpus hash and tokenizer identity)."""
    if not isinstance(corpus, Corpus):
        raise TypeError(f"parameter 'corpus' must be a Corpus; got {type(corpus).__name__}")
    tokenizer = get_tokenizer(tokenizer, corpus)
    params = {"corpus_sha256": corpus.sha256(), "n_documents": corpus.n_documents,
              "tokenizer": tokenizer.identity, "tokenizer_name": tokenizer.name, "kind": tokenizer.kind,
              "tokenizers": _version("tokenizers"),
              "transformers": _version("transformers") if tokenizer.kind == "hf" else None,
              "builder_version": BUILDER_VERSION}

    def produce() -> dict:
        tokens, offsets = _encode_documents(tokenizer, corpus.documents)
        return {"tokens": tokens, "doc_offsets": offsets, "vocab_size": np.array(tokenizer.vocab_size, np.int64)}

    data = cached("token-stream", params, produce, fmt="npz", refresh=refresh)
    return TokenStream(data["tokens"], data["doc_offsets"], int(data["vocab_size"]), tokenizer.name)


def train_heldout(corpus: Corpus, tokenizer: Tokenizer | str, heldout_fraction: float = 0.1,
                  seed: int = 0) -> tuple[TokenStream, TokenStream]:
    """(train, held-out) token streams, split by document with :meth:`Corpus.split`.

    A ``"bpe:<vocab_size>"`` spec is trained on the training documents only, so the
    held-out text has not shaped the vocabulary.
    """
    train_idx, heldout_idx = corpus.split(heldout_fraction, seed)
    if isinstance(tokenizer, str) and tokenizer.startswith("bpe:"):
        tokenizer = get_tokenizer(tokenizer, corpus.subset(train_idx))
    stream = encode_corpus(corpus, tokenizer)
    return stream.subset(train_idx), stream.subset(heldout_idx)


__all__ = ["Tokenizer", "TokenizerUnavailable", "TokenStream", "train_bpe", "byte_tokenizer", "load_hf_tokenizer",
           "get_tokenizer", "encode_corpus", "train_heldout", "render_token", "KINDS", "MIN_BPE_VOCAB",
           "MAX_BPE_VOCAB"]


# --------------------------------------------------------------------------- a spec's vocabulary, without building it

GPT_NEOX_VOCAB = 50304   # Pythia's embedding rows: the vocabulary assumed for a hub or folder tokenizer


def tokenizer_vocab_size(spec: str, *, look_up_local: bool = False) -> int:
    """The vocabulary a tokenizer spec (:func:`get_tokenizer`'s forms) gives, without training, building or
    downloading anything: ``bpe:<V>`` → V, ``byte`` → its alphabet (256), and for a hub (``hf:<name>``) or
    folder tokenizer Pythia's :data:`GPT_NEOX_VOCAB` (an upper bound for the GPT-NeoX one). ``look_up_local``:
    first look the hub or folder tokenizer up where it already is (the local Hugging Face cache, the folder)
    and give its length, Pythia's vocabulary only when it is not found there."""
    if spec.startswith("bpe:"):
        return int(spec[4:])
    if spec == "byte":
        return byte_tokenizer().vocab_size
    if look_up_local:
        try:
            from transformers import AutoTokenizer

            return len(AutoTokenizer.from_pretrained(spec[3:] if spec.startswith("hf:") else spec,
                                                     local_files_only=True))
        except Exception:  # noqa: BLE001 - not found here: plan for Pythia's vocabulary
            pass
    return GPT_NEOX_VOCAB
