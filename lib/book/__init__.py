"""The machinery that runs the book (none of the papers' mathematics lives here).

What a chapter calls is exported here, and a chapter imports it from here::

    from lib.book import record, record_meta, setup, show_figure
    cfg = setup("modes")          # first cell: parameters checked, seeded, record started

``cfg.device`` is the device as the reader gave it (``auto``, ``cpu``, ``cuda``), which a chapter passes
to the library; ``cfg.torch_device`` is the one ``setup`` resolved, for a chapter that needs the device
itself.

The modules, by role:

* chapters and their parameters: :mod:`.chapters` (each chapter's declaration beside its
  notebook, discovered from ``_toc.yml``), :mod:`.parameters` (types, bounds, allowed values),
  :mod:`.chapter_setup` (the first cell's :func:`setup`);
* results: :mod:`.records` (``record(name, value)``: glued for the text, written as JSON;
  ``show_figure``), :mod:`.figures` (legible at the page's width), :mod:`.tables` (Markdown tables),
  :mod:`.claims` (checks that decide a claim from a record; :func:`verdict_words`, a verdict for the prose), :mod:`.report` (the
  reproduction report's tables), :mod:`.reference` with :mod:`.tolerance` (a rerun compared with
  the published values);
* running and building: :mod:`.runner` (check, execute with papermill, decide claims),
  :mod:`.cli` (the ``lowrank-book`` command), :mod:`.costs` (a run's heavy steps and the device's
  memory), :mod:`.pages` (table of contents, HTML build), :mod:`.page_fit` (what does not fit the
  page's column), :mod:`.standins` (small offline stand-ins of the hub's models and data);
* compute services every part of ``lib`` uses: :mod:`.cache` (artefacts keyed by a hash of
  what made them), :mod:`.device` (CPU/GPU, seeding), :mod:`.threads` (BLAS, OpenMP and
  torch thread counts), :mod:`.progress`, :mod:`.timing` (benchmarks only); :mod:`.moved`
  (old names of moved functions).

The modules import each other in layers, each only from the layers below it (every import
counts, also one inside a function; there is no cycle):

0. leaves, importing nothing of ``lib.book``: ``claims``, ``device``, ``figures``, ``moved``,
   ``parameters``, ``progress``, ``timing``, ``tolerance``;
1. ``cache`` (progress), ``pages`` (moved), ``threads`` (device);
2. ``chapters`` (claims, pages, parameters, tolerance), ``costs`` (cache);
3. ``records`` (chapters, figures), ``reference`` (chapters, tolerance), ``standins`` (chapters);
4. ``tables`` (figures, records), ``chapter_setup`` (chapters, device, parameters, records),
   ``runner`` (chapters, claims, costs, pages, parameters, progress, records);
5. ``page_fit`` (figures, pages, tables), ``report`` (chapters, claims, records, reference, tables);
6. ``cli`` (chapters, costs, pages, parameters, records, reference, report, runner).

This package itself exports from cache, chapter_setup, chapters, claims, figures, records and tables
(``tests/book/test_layers.py`` holds the modules to this order).

A function-local import is left only where it defers a heavy or optional package (torch,
matplotlib, transformers, papermill, nbformat, jupytext, myst, IPython).
"""
from .cache import cached
from .chapter_setup import setup
from .chapters import get_claim
from .claims import Z_FINDING, decide_effect, verdict_words
from .figures import panels
from .records import record, record_meta, show_figure
from .tables import Raw, table

__all__ = ["Raw", "cached", "get_claim", "panels", "record", "record_meta", "setup", "show_figure", "table",
           "verdict_words", "decide_effect", "Z_FINDING"]
