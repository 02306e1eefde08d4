"""The old path of :mod:`lib.logit_rank_experiments`, the studies of the chapter "Logit rank".

The module was renamed after the chapter's id (``logit_rank``); code written as
``from lib.logit_experiments import overlap_against_control`` or ``lib.logit_experiments.heavy_steps``
keeps working: every attribute is read, on first use, from :mod:`lib.logit_rank_experiments`.
Import the new path in new code.
"""
from __future__ import annotations

import importlib
from typing import Any


def __getattr__(name: str) -> Any:
    return getattr(importlib.import_module("lib.logit_rank_experiments"), name)
