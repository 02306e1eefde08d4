"""Shared library of the book *Low-rank and mode structure of sequence models*.

Every chapter imports this package; it holds the mathematics and the machinery
(data, models, caches, execution harness), the chapters hold narrative and figures.
Sub-modules are imported explicitly (``from lib import corpus``) so that importing
``lib`` itself stays cheap.
"""
import warnings
from pathlib import Path

# tqdm.auto (imported by transformers/datasets) warns in kernels without ipywidgets; the
# book's progress bars are plain text (lib.progress), so the warning is noise.
warnings.filterwarnings("ignore", message="IProgress not found")

REPO_ROOT = Path(__file__).resolve().parent.parent

__all__ = ["REPO_ROOT"]
