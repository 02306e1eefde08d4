"""Shared library of the book *Low-rank and mode structure of sequence models*.

Every chapter imports this package; it holds the mathematics and the machinery
(data, models, caches, execution harness), the chapters hold narrative and figures.
Sub-modules are imported explicitly (``from lib import corpus``) so that importing
``lib`` itself stays cheap.
"""
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

__all__ = ["REPO_ROOT"]
