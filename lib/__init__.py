"""Shared library of the book *Low-rank and mode structure of sequence models*.

Every chapter imports this package; the chapters hold narrative, parameters and figures.
The tree shows the architecture:

* the mathematics, one module per concept of the papers, at the top:
  :mod:`lib.languages` (exact languages), :mod:`lib.hilbert` (the Hilbert space),
  :mod:`lib.modes` (modes and effective distributions), :mod:`lib.perturbation`,
  :mod:`lib.empirical_modes` (modes of real text), :mod:`lib.llc` with :mod:`lib.known_llc` (learning
  coefficients), :mod:`lib.conditional_models` and :mod:`lib.insensitivity` (mode insensitivity),
  :mod:`lib.llc_theorems` (coupled chains for q and q^(χ), Theorems 7.3–7.4, the resolution dial),
  :mod:`lib.isan` (ISANs and logit rank)
  with :mod:`lib.isan_experiments`;
* :mod:`lib.text`: the text pipeline (corpora, tokenizers, n-gram counts);
* :mod:`lib.models`: the language models (one causal-LM interface, the mini-Pythia suite);
* :mod:`lib.book`: the machinery that runs the book (chapters and their declarations,
  parameters, records, claims, the report, the runner and command line, caches, devices).

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
