"""The book's shared substrate as the Introduction builds it: corpus → BPE tokenizer → token
streams → the miniature Pythia suite, each step cached by :mod:`lib.book.cache`.

Chapters that study the trained models (e.g. "Learning coefficients") call
:func:`book_suite`, which resolves the Introduction's declared parameters for a profile
and replays the same pipeline, so it reads the cache the Introduction filled. What the
Introduction says of this substrate (its verdicts, its cost declaration) is
:mod:`lib.intro_experiments`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from .book.chapters import get_chapter
from .book.moved import forward_moved
from .models import mini_pythia
from .models.causal_lm import estimate_param_count
from .models.hub import ModelSeries
from .text import corpus as corpora, tokenization
from .text.tokenization import GPT_NEOX_VOCAB, tokenizer_vocab_size  # noqa: F401  (old names: the twin moved there)

HELDOUT_FRACTION = 0.1


def load_text(corpus: str, max_corpus_mb: float):
    """The corpus ``corpus`` (a hub dataset ``hf:…`` is streamed up to ``max_corpus_mb``)."""
    streamed = corpus.startswith("hf:")
    return corpora.load_corpus(corpus, **({"max_bytes": int(max_corpus_mb * 1e6)} if streamed else {}))


def tokenized_corpus(text, tokenizer: str, seed: int):
    """(tokenizer, train stream, held-out stream, held-out document indices) of ``text``.

    The documents are split 90/10 with ``seed``; a BPE tokenizer sees the training
    documents only.
    """
    train_idx, held_idx = text.split(heldout_fraction=HELDOUT_FRACTION, seed=seed)
    tok = tokenization.get_tokenizer(tokenizer, corpus=text.subset(train_idx))
    train, held = tokenization.train_heldout(text, tok, heldout_fraction=HELDOUT_FRACTION, seed=seed)
    return tok, train, held, held_idx


def train_book_suite(train, held, tok, *, profile: str, model_sizes, context_length: int, train_steps: int,
                     batch_size: int, seed: int, device):
    """The mini-Pythia suite on these streams: peak lr 1e-3 (ci) or 6e-4 (paper), 5% warm-up."""
    return mini_pythia.train_suite(
        train.tokens, held.tokens, sizes=model_sizes, vocab_size=tok.vocab_size, context_length=context_length,
        steps=train_steps, batch_size=batch_size, lr=1e-3 if profile == "ci" else 6e-4,
        warmup_steps=max(1, train_steps // 20), seed=seed, device=device)


def intro_settings(profile: str = "ci", seed: int = 0, device="auto", smoke: bool = False) -> dict:
    """The Introduction's parameters at ``profile`` (its presets): what :func:`book_suite` replays.

    ``smoke`` (with ``profile="paper"``): its ``smoke`` presets on top, the sizes a smoke run of the
    paper path cuts (``lowrank-book run intro --profile paper --smoke`` trains the same suite).
    """
    return get_chapter("intro").settings(profile, seed, device, smoke)


def book_streams(profile: str = "ci", seed: int = 0, device="auto", smoke: bool = False):
    """(tokenizer, train stream, held-out stream) of the Introduction at ``profile`` (``smoke``: its smoke
    sizes), without training any model: for chapters that read the token stream only."""
    p = intro_settings(profile, seed, device, smoke)
    tok, train, held, _ = tokenized_corpus(load_text(p["corpus"], p["max_corpus_mb"]), p["tokenizer"], seed)
    return tok, train, held


def book_suite(profile: str = "ci", seed: int = 0, device="auto", smoke: bool = False, model_sizes=None):
    """(suite, tokenizer, train stream, held-out stream) of the Introduction at ``profile`` (``smoke``: its
    smoke sizes). ``model_sizes`` (default: the Introduction's) trains or loads those sizes only, with the
    Introduction's recipe: each size is its own cache entry, so a size the Introduction trains is read
    from its cache, and another is trained the same way."""
    p = intro_settings(profile, seed, device, smoke)
    tok, train, held = book_streams(profile, seed, device, smoke)
    suite = train_book_suite(train, held, tok, profile=profile, model_sizes=model_sizes or p["model_sizes"],
                             context_length=p["context_length"], train_steps=p["train_steps"],
                             batch_size=p["batch_size"], seed=seed, device=device)
    return suite, tok, train, held


@dataclass
class ModelSource:
    """The models a chapter reads and their tokenizer, from the book's suite or from a hub model
    (:func:`model_source`).

    ``sizes`` and ``steps`` (checkpoint labels, step 0 first, the final one last); ``load(size, step)``
    → :class:`lib.models.causal_lm.CausalLM` and ``model_id(size, step)``, its name for the book's
    cache; ``encode`` (text → a tuple of token ids), ``decode`` (ids → text) and ``encode_documents``
    (texts → one id array each). For the suite: ``suite``, its tokenizer ``tokenizer`` and its
    training and held-out streams ``train``, ``held``; for a hub model: ``series``
    (:class:`lib.models.hub.ModelSeries`) and its ``tokenizer``."""
    name: str
    sizes: list
    steps: list
    load: Callable[[Any, Any], Any]
    model_id: Callable[[Any, Any], str]
    encode: Callable[[str], tuple]
    decode: Callable[[Sequence[int]], str]
    encode_documents: Callable[[Sequence[str]], list]
    tokenizer: Any
    suite: Any = None
    train: Any = None
    held: Any = None
    series: Any = None


def model_source(hub_model: str = "suite", hub_revisions=(), *, profile: str = "ci", seed: int = 0, device="cpu",
                 model_sizes=None, train_device=None) -> ModelSource:
    """The models a chapter reads: the book's suite or one hub model at its revisions (:class:`ModelSource`).

    ``hub_model = "suite"``: the Introduction's suite at ``profile`` and ``seed`` (its settings and
    streams, :func:`intro_settings` and :func:`tokenized_corpus`; trained by :func:`train_book_suite`
    on ``train_device``, default ``device``, or read from the cache), at the sizes ``model_sizes``
    (default: the Introduction's), its models loaded on ``device``. Otherwise a hub name or local
    directory at ``hub_revisions`` (:class:`lib.models.hub.ModelSeries` on ``device``, every revision
    resolved before any work): one size, named ``hub_model``, whose steps are the revisions. A GGUF
    model (``smollm2-135m``, ``gemma3-270m``, ``gguf:<path>``) has the revisions ``init`` (its untrained
    twin, drawn with ``seed``) and ``final`` (:mod:`lib.models.gguf_file`)."""
    if hub_model == "suite":
        train_device = device if train_device is None else train_device
        if train_device == "auto":
            settings_device = train_device
        else:
            import torch

            settings_device = torch.device(train_device).type     # "cuda:0" → "cuda", as the parameter allows
        p = intro_settings(profile, seed, settings_device)
        text = load_text(p["corpus"], p["max_corpus_mb"])
        tok, train, held, _ = tokenized_corpus(text, p["tokenizer"], seed)
        suite = train_book_suite(train, held, tok, profile=profile, model_sizes=model_sizes or p["model_sizes"],
                                 context_length=p["context_length"], train_steps=p["train_steps"],
                                 batch_size=p["batch_size"], seed=seed, device=train_device)
        return ModelSource(
            "suite", list(suite.sizes), list(suite.checkpoint_steps),
            load=lambda size, step: suite.load(size, step, device),
            model_id=lambda size, step: str(suite.checkpoint_dir(size, step)),
            encode=lambda s: tuple(int(t) for t in tok.encode(s)), decode=tok.decode,
            encode_documents=lambda docs: [np.asarray(t) for t in tok.encode_batch(docs)],
            tokenizer=tok, suite=suite, train=train, held=held)
    series = ModelSeries(hub_model, hub_revisions, device=device, init_seed=seed)
    return ModelSource(
        str(hub_model), [hub_model], list(series.revisions),
        load=lambda size, step: series.load(step), model_id=lambda size, step: series.model_id(step),
        encode=series.encode, decode=series.decode,
        encode_documents=lambda docs: [np.asarray(series.encode(d)) for d in docs],
        tokenizer=series.tokenizer, series=series)


@dataclass
class NullModel:
    """A model that learned nothing but the unigram law (:func:`shuffled_null_model`): the mini-Pythia
    ``size`` trained with the Introduction's recipe on the token stream in a random order.

    ``suite`` (:class:`lib.models.mini_pythia.Suite`, one size), ``steps`` (its checkpoints, step 0 first),
    ``tokens`` (the shuffled training stream it saw), ``shuffle_seed``; ``load(step=None, device)`` →
    :class:`lib.models.causal_lm.CausalLM` (None: the final checkpoint)."""
    size: str
    suite: Any
    steps: list
    tokens: np.ndarray
    shuffle_seed: int
    device: Any = "cpu"

    def load(self, step=None, device=None):
        return self.suite.load(self.size, step, self.device if device is None else device)


def shuffled_null_model(profile: str = "ci", seed: int = 0, device="cpu", *, model_size: str = "p-tiny",
                        shuffle_seed: int | None = None, train=None, held=None, vocab_size: int | None = None,
                        smoke: bool = False, train_device=None) -> NullModel:
    """The learned-nothing null of every finding about learning: the mini-Pythia ``model_size`` trained with
    the Introduction's recipe at ``profile`` and ``seed`` (:func:`intro_settings`, :func:`train_book_suite`:
    same context, steps, batches, learning rate, initialisation) on its training stream in a uniformly
    random order (:func:`lib.empirical_modes.shuffle_tokens` with ``shuffle_seed``, default ``seed``).

    The shuffled stream keeps every token count and loses every sequence: the best such a model can do
    is the unigram law, whatever its history, so an effect it shows too is not learned structure. Its
    held-out loss is read on the unshuffled held-out stream, beside the trained model's.

    ``train``, ``held`` (token streams or arrays) and ``vocab_size``: another training stream, such as a
    hub model's corpus under its tokenizer (default: the Introduction's, :func:`book_streams`). It is one
    cache entry of ``mini-pythia/``, keyed like the trained model's by the hash of its (shuffled) token
    arrays and every hyperparameter; at ``ci`` (p-tiny, 400 steps) it trains in about 90 s on one CPU
    core, once. Models load on ``device``; it trains on ``train_device`` (default ``device``)."""
    from .empirical_modes import shuffle_tokens

    if model_size not in mini_pythia.SIZES:
        raise ValueError(f"parameter 'model_size' must be one of {sorted(mini_pythia.SIZES)}; got {model_size!r}")
    shuffle_seed = seed if shuffle_seed is None else shuffle_seed
    if isinstance(shuffle_seed, bool) or not isinstance(shuffle_seed, (int, np.integer)) or shuffle_seed < 0:
        raise ValueError(f"parameter 'shuffle_seed' must be an integer >= 0; got {shuffle_seed!r}")
    train_device = device if train_device is None else train_device
    if train_device == "auto":
        settings_device = train_device
    else:
        import torch

        settings_device = torch.device(train_device).type
    p = intro_settings(profile, seed, settings_device, smoke)
    if train is None or held is None:
        if train is not None or held is not None:
            raise ValueError("parameters 'train' and 'held' go together: give both streams or neither")
        tok, train, held = book_streams(profile, seed, settings_device, smoke)
        vocab_size = tok.vocab_size
    elif vocab_size is None:
        raise ValueError("parameter 'vocab_size' is needed with streams 'train' and 'held'")
    tokens = np.asarray(getattr(train, "tokens", train))
    held_tokens = np.asarray(getattr(held, "tokens", held))
    shuffled = shuffle_tokens(tokens, int(shuffle_seed))
    from types import SimpleNamespace

    suite = train_book_suite(SimpleNamespace(tokens=shuffled), SimpleNamespace(tokens=held_tokens),
                             SimpleNamespace(vocab_size=int(vocab_size)), profile=profile, model_sizes=[model_size],
                             context_length=p["context_length"], train_steps=p["train_steps"],
                             batch_size=p["batch_size"], seed=seed, device=train_device)
    return NullModel(model_size, suite, list(suite.checkpoint_steps), shuffled, int(shuffle_seed), device)


def training_windows(stream, n: int, context: int, seed: int):
    """``n`` windows of ``context`` tokens from a token stream, at uniformly drawn starts.

    The windows on which the chapters "Learning coefficients" and "LLC theorems" measure a
    language model's loss L_n (a (n, context) int64 tensor): starts drawn with
    ``numpy.random.default_rng(seed).integers(0, len − context − 1, n)``.
    """
    import numpy as np
    import torch

    tokens = np.asarray(stream.tokens if hasattr(stream, "tokens") else stream)
    if tokens.shape[0] <= context + 1:
        raise ValueError(f"the stream has {tokens.shape[0]} tokens, too few for windows of {context}")
    starts = np.random.default_rng(seed).integers(0, tokens.shape[0] - context - 1, size=n)
    return torch.as_tensor(np.stack([tokens[s:s + context] for s in starts]).astype(np.int64))


# --------------------------------------------------------------------------- what training the suite costs

def training_step_flops(size: str, vocab_size: int, batch_size: int, context_length: int) -> float:
    """Floating-point operations of one AdamW step of the mini-Pythia ``size`` on ``batch_size`` windows.

    Forward and backward are 3 forward passes; a forward pass costs 2 FLOPs per weight of every matrix
    product per token (all parameters but the input embedding, a lookup) and 4·T·d per token and layer
    for the attention scores and their weighted sum (Kaplan et al. 2020, Table 1):
    ``6·B·T·(N − V·d + 2·L·T·d)``."""
    config = mini_pythia.mini_pythia_config(size, vocab_size, context_length)
    d, layers = config.hidden_size, config.num_hidden_layers
    n_matmul = estimate_param_count(config) - vocab_size * d
    tokens = batch_size * context_length
    return 6.0 * tokens * (n_matmul + 2 * layers * context_length * d)


# The Introduction's verdicts and cost declaration moved to lib.intro_experiments; their old names here answer
# from there, on first use.
__getattr__ = forward_moved(__name__, {name: "lib.intro_experiments" for name in (
    "MIN_CORPUS_MB", "MIN_DECIDING_STEPS", "corpus_size_undecided", "heavy_steps", "training_undecided")})
