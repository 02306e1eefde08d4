"""The machinery that runs the book (none of the papers' mathematics lives here).

What a chapter calls is exported here::

    from lib.book import record, record_meta, setup, show_figure
    cfg = setup("modes")          # first cell: parameters checked, seeded, record started

The modules, by role:

* chapters and their parameters: :mod:`.chapters` (each chapter's declaration beside its
  notebook, discovered from ``_toc.yml``), :mod:`.parameters` (types, bounds, allowed values),
  :mod:`.chapter_setup` (the first cell's :func:`setup`);
* results: :mod:`.records` (``record(name, value)``: glued for the text, written as JSON;
  ``show_figure``), :mod:`.figures` (legible at the page's width), :mod:`.tables` (Markdown tables),
  :mod:`.claims` (checks that decide a claim from a record), :mod:`.report` (the
  reproduction report's tables);
* running and building: :mod:`.runner` (check, execute with papermill, decide claims),
  :mod:`.cli` (the ``lowrank-book`` command), :mod:`.pages` (table of contents, HTML build);
* compute services every part of ``lib`` uses: :mod:`.cache` (artefacts keyed by a hash of
  what made them), :mod:`.device` (CPU/GPU, seeding), :mod:`.threads` (BLAS, OpenMP and
  torch thread counts), :mod:`.progress`, :mod:`.timing` (benchmarks only).
"""
from .chapter_setup import setup
from .figures import panels
from .records import record, record_meta, show_figure
from .tables import table

__all__ = ["panels", "record", "record_meta", "setup", "show_figure", "table"]
