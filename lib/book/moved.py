"""Old names of moved functions: a module keeps answering for a name that moved elsewhere.

When a chapter's study moved out of a mathematics module into the chapter's ``*_experiments``
module, code written as ``from lib.llc import heavy_steps`` should keep working. The mathematics
module cannot import its study module (that import would run upwards and close a cycle), so it
forwards the name on first use instead (PEP 562's module ``__getattr__``)::

    __getattr__ = forward_moved(__name__, {"heavy_steps": "lib.llc_experiments"})

The new home is imported only when an old name is asked for, never when the module loads.
"""
from __future__ import annotations

import importlib
from typing import Any, Callable


def forward_moved(module: str, moved: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that answers each name of ``moved`` from the module it moved to.

    ``moved`` maps an old public name to the dotted name of its new module; any other name raises
    ``AttributeError`` as a module without ``__getattr__`` would."""
    def __getattr__(name: str) -> Any:
        if name in moved:
            return getattr(importlib.import_module(moved[name]), name)
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__
