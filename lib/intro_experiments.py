"""The Introduction's verdicts and cost declaration (``chapters/intro.yml``'s ``costs:``).

The substrate the Introduction builds (corpus, tokenizer, token streams, the mini-Pythia suite) is
:mod:`lib.substrate`; here is what the chapter says about it: when its claims can be read at the settings
of a run (:func:`corpus_size_undecided`, :func:`training_undecided`) and what training the suite costs
(:func:`heavy_steps`).
"""
from __future__ import annotations

import inspect

from .book.costs import HeavyStep
from .models import mini_pythia
from .models.causal_lm import estimate_training_bytes
from .substrate import training_step_flops
from .text.tokenization import tokenizer_vocab_size


# --------------------------------------------------------------------------- when the Introduction's claims can be read

MIN_CORPUS_MB = 10.0         # the corpus-size claim's threshold (chapters/intro.yml, intro.corpus-size)
MIN_DECIDING_STEPS = 100     # fewer optimizer steps test the training code, not what training reaches


def corpus_size_undecided(corpus: str, max_corpus_mb: float) -> str | None:
    """Why the corpus-size claim cannot be read at these settings, or None when it can.

    A hub dataset is streamed up to ``max_corpus_mb``: a cap below :data:`MIN_CORPUS_MB` decides
    the size before any text is read, so the run says nothing about the corpus itself."""
    if corpus.startswith("hf:") and max_corpus_mb < MIN_CORPUS_MB:
        return (f"the streamed corpus is capped at max_corpus_mb = {max_corpus_mb:g} MB, below the "
                f"{MIN_CORPUS_MB:g} MB the claim reads")
    return None


def training_undecided(train_steps: int) -> str | None:
    """Why the training claims (held-out loss below the unigram entropy, a loss drop of a nat) cannot be
    read at these settings, or None when they can.

    They state what training reaches, which the book reads at the ci profile's 400 steps and the
    paper's 20000; a run of fewer than :data:`MIN_DECIDING_STEPS` optimizer steps (a smoke run of the
    paper path) exercises the training code and leaves them undecided."""
    if train_steps < MIN_DECIDING_STEPS:
        return (f"train_steps = {train_steps} is below the {MIN_DECIDING_STEPS} optimizer steps at which the "
                "book reads what training reaches")
    return None


# --------------------------------------------------------------------------- what training the suite costs

def heavy_steps(values: dict) -> list:
    """The Introduction's heavy steps for its resolved parameters ``values``: training each mini-Pythia
    size (:func:`lib.substrate.train_book_suite`), with its peak memory (weights, AdamW state, float32
    activations and logits: :func:`lib.models.causal_lm.estimate_training_bytes`) and its arithmetic
    (:func:`lib.substrate.training_step_flops`), ``train_steps`` optimizer steps plus the held-out evaluations
    at every checkpoint (a third of a step per window)."""
    defaults = inspect.signature(mini_pythia.train_suite).parameters
    n_checkpoints, eval_batches = defaults["n_checkpoints"].default, defaults["eval_batches"].default
    vocab = tokenizer_vocab_size(values["tokenizer"], look_up_local=False)
    steps, batch, context = values["train_steps"], values["batch_size"], values["context_length"]
    evaluated = min(n_checkpoints, steps + 1) * eval_batches  # batches of held-out windows, forward only
    found = []
    for size in values["model_sizes"]:
        config = mini_pythia.mini_pythia_config(size, vocab, context)
        step = training_step_flops(size, vocab, batch, context)
        found.append(HeavyStep(
            name=f"training {size}",
            sizes=f"{steps} steps of {batch} windows × {context} tokens, vocabulary {vocab}",
            peak_bytes=float(estimate_training_bytes(config, batch, context, 4)),
            flops=step * (steps + evaluated / 3),
            shrink="batch_size, context_length or model_sizes (memory); train_steps (time)"))
    return found


__all__ = ["MIN_CORPUS_MB", "MIN_DECIDING_STEPS", "corpus_size_undecided", "heavy_steps", "training_undecided"]
