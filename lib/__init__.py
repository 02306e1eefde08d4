"""Shared library of the book *Low-rank and mode structure of sequence models*.

Every chapter imports this package; the chapters hold narrative, parameters and figures.
The tree shows the architecture:

* the mathematics, one module per concept of the papers: :mod:`lib.languages` (exact languages),
  :mod:`lib.hilbert`, :mod:`lib.modes` (modes and effective distributions) on :mod:`lib.linalg`,
  :mod:`lib.perturbation`, :mod:`lib.empirical_modes` (modes of real text), :mod:`lib.llc` with
  :mod:`lib.known_llc` (learning coefficients), :mod:`lib.sgld` with :mod:`lib.batched_gemm` (the one
  SGLD sampler), :mod:`lib.conditional_models`, :mod:`lib.insensitivity`, :mod:`lib.llc_theorems`,
  :mod:`lib.local_quadratic` with :mod:`lib.hessian` (Hessian-vector products, Lanczos, Hutchinson),
  :mod:`lib.position_llc`, :mod:`lib.logits`, :mod:`lib.isan`,
  :mod:`lib.ntp_data` and :mod:`lib.ntp`, :mod:`lib.lenses`, and :mod:`lib.substrate` (the
  Introduction's corpus → tokenizer → mini-Pythia pipeline, replayed for later chapters);
* each chapter's studies, verdicts, sentences and heavy steps: ``lib.<chapter>_experiments``
  (``intro``, ``modes``, ``examples``, ``llc``, ``insensitivity``, ``llc_theorems``, ``logit_rank``,
  ``isan``, ``ntp``, ``lenses``);
* :mod:`lib.text`: the text pipeline (corpora, tokenizers, n-gram counts);
* :mod:`lib.models`: the language models (one causal-LM interface, the mini-Pythia suite);
* :mod:`lib.book`: the machinery that runs the book (chapters and their declarations,
  parameters, records, claims, the report, the runner and command line, caches, devices).

Imports run downwards only: ``lib.book`` < ``lib.text``, ``lib.models`` < the mathematics < the
chapter studies (``tests/test_lib_layout.py``).

Sub-modules are imported explicitly (``from lib import modes``) so that importing ``lib``
itself stays cheap. ``python -m lib`` is the book's command line (``lowrank-book``).
"""
import warnings
from pathlib import Path

# tqdm.auto (imported by transformers/datasets) warns in kernels without ipywidgets; the
# book's progress bars are plain text (lib.book.progress), so the warning is noise.
warnings.filterwarnings("ignore", message="IProgress not found")

REPO_ROOT = Path(__file__).resolve().parent.parent

__all__ = ["REPO_ROOT"]
