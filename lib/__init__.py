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
import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from pathlib import Path

# tqdm.auto (imported by transformers/datasets) warns in kernels without ipywidgets; the
# book's progress bars are plain text (lib.book.progress), so the warning is noise.
warnings.filterwarnings("ignore", message="IProgress not found")

REPO_ROOT = Path(__file__).resolve().parent.parent

# Modules that moved when lib was grouped by concern: their old paths still import the
# same module objects, so code written against the flat layout keeps working.
MOVED = {
    "lib.cache": "lib.book.cache", "lib.device": "lib.book.device", "lib.progress": "lib.book.progress",
    "lib.timing": "lib.book.timing", "lib.record": "lib.book.records", "lib.claims": "lib.book.claims",
    "lib.report": "lib.book.report", "lib.params": "lib.book.parameters", "lib.profiles": "lib.book.chapters",
    "lib.chapter": "lib.book.chapter_setup", "lib.run": "lib.book.runner",
    "lib.corpus": "lib.text.corpus", "lib.tokenization": "lib.text.tokenization", "lib.ngrams": "lib.text.ngrams",
    "lib.textstats": "lib.text.textstats", "lib.lm": "lib.models.causal_lm",
}


class _MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Import ``lib.<old>`` as the module now at ``MOVED[old]`` (one module object, two names)."""

    def __init__(self):
        self._own_specs = {}  # old name -> the moved module's own spec, between the two calls below

    def find_spec(self, fullname, path=None, target=None):
        return importlib.util.spec_from_loader(fullname, self) if fullname in MOVED else None

    def create_module(self, spec):
        module = importlib.import_module(MOVED[spec.name])
        self._own_specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module):
        # the import system stamped the old name's spec on the module: give it back its own
        module.__spec__ = self._own_specs.pop(module.__spec__.name)


if not any(isinstance(finder, _MovedModuleFinder) for finder in sys.meta_path):
    sys.meta_path.append(_MovedModuleFinder())

__all__ = ["REPO_ROOT"]
