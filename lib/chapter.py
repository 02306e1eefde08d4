"""What every chapter calls first: check parameters, seed, pick the device, start the record."""
from __future__ import annotations

import os
import platform
import time
from importlib import metadata
from types import SimpleNamespace
from typing import Any

from . import record as _record
from .device import describe_device, resolve_device, seed_everything
from .profiles import get_chapter

PACKAGES = ("numpy", "scipy", "torch", "transformers", "tokenizers", "matplotlib", "myst-nb", "jupyter-book")


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def setup(chapter_id: str, **given: Any) -> SimpleNamespace:
    """Check the chapter's parameters, fill presets, seed everything, resolve the device.

    Returns the resolved configuration (attribute access), with ``rng`` (a seeded NumPy
    Generator) and ``torch_device`` added. Starts the chapter's record with the metadata
    (profile, parameters, seed, device, package versions).
    """
    chapter = get_chapter(chapter_id)
    values = chapter.resolve(given)
    rng = seed_everything(values["seed"])
    device = resolve_device(values["device"])
    _record.start(chapter_id, {
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
