"""What every chapter calls first: check parameters, seed, pick the device, start the record."""
from __future__ import annotations

import os
import platform
import sys
import time
from importlib import metadata
from types import SimpleNamespace
from typing import Any

from . import records as _records
from .chapters import Chapter, get_chapter
from .device import describe_device, resolve_device, seed_everything
from .parameters import ParameterError, parameters_cell_values

PACKAGES = ("numpy", "scipy", "torch", "transformers", "tokenizers", "matplotlib", "myst-nb", "jupyter-book")

# papermill writes the parameters a reader passes (-p NAME VALUE) into a cell that starts so
PAPERMILL_CELL_HEADER = "# Parameters"


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def _assigned_names(source: str) -> list[str] | None:
    """The names a cell of literal assignments sets (None when the cell is anything else)."""
    try:
        return list(parameters_cell_values(source))
    except (ParameterError, SyntaxError, ValueError):
        return None


def notebook_parameters(chapter: Chapter, namespace: dict[str, Any]) -> dict[str, Any]:
    """The chapter's parameters as the notebook's cells left them in ``namespace``.

    Reads the value of every declared parameter. In a kernel, IPython keeps the source of
    each executed cell (``In``): the chapter's parameters cell (the last literal-only cell
    that sets ``profile``) and papermill's injected cells after it must assign only declared
    names, so that ``papermill ... -p sed 3`` stops here instead of running with defaults.
    """
    history = [src for src in namespace.get("In", []) or [] if isinstance(src, str)]
    assigned = {i: names for i, src in enumerate(history) if (names := _assigned_names(src))}
    injected = {i for i in assigned if history[i].startswith(PAPERMILL_CELL_HEADER)}
    since = max((i for i, names in assigned.items() if "profile" in names and i not in injected), default=0)
    for i, names in assigned.items():
        if i == since or (i > since and i in injected):
            for name in names:
                chapter.spec[name]  # raises for a name the chapter does not declare, with a suggestion
    missing = [name for name in chapter.spec.names if name not in namespace]
    if missing:
        raise ParameterError(f"{chapter.path}: the parameters cell must assign {', '.join(missing)} "
                             "(run it before the setup cell)")
    return {name: namespace[name] for name in chapter.spec.names}


def setup(chapter_id: str, **given: Any) -> SimpleNamespace:
    """Check the chapter's parameters (each, together, and what they need of this machine),
    fill presets, seed everything, resolve the device.

    In a chapter's first cell, ``cfg = setup("modes")`` reads the parameters from the
    notebook (see :func:`notebook_parameters`); outside a notebook, pass them by name
    (``setup("modes", seed=3)``). Returns the resolved configuration (attribute access),
    with ``rng`` (a seeded NumPy Generator), ``torch_device`` and ``chapter`` added. Starts
    the chapter's record with the metadata (profile, parameters, seed, device, package
    versions).
    """
    chapter = get_chapter(chapter_id)
    if not given:
        given = notebook_parameters(chapter, sys._getframe(1).f_globals)
    values = chapter.resolve(given)
    chapter.preflight(values)  # a GPU for 'cuda', local corpus and tokenizer paths: before any work
    rng = seed_everything(values["seed"])
    device = resolve_device(values["device"])
    _records.start(chapter_id, {
        "profile": values["profile"],
        "parameters": values,
        "seed": values["seed"],
        "device": describe_device(device),
        "versions": package_versions(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "budget_ci_s": chapter.budget_ci_s,
        "cpu_count": os.cpu_count(),
    })
    return SimpleNamespace(**values, rng=rng, torch_device=device, chapter=chapter)
