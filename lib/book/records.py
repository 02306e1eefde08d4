"""Recorded values: one number, two readers.

``record(name, value)`` does two things with a chapter's key number:

1. glues it with myst-nb, so the text can show it with ``{glue:text}`name```;
2. writes it to the chapter's machine-readable record, ``<records dir>/<chapter>.json``,
   which the tests and the reproduction report read.

So the book's prose, the tests and the report always show the same value. The records
directory is ``$BOOK_RECORDS_DIR`` (set by the runner) or ``<repo>/_build/records``.
"""
from __future__ import annotations

import json
import math
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from .. import REPO_ROOT
from .chapters import get_claim
from .figures import DPI, render

RECORDS_ENV = "BOOK_RECORDS_DIR"
RUNNER_ENV = "BOOK_RUNNER"  # set to "1" by lib.book.runner: its kernels' records start marked incomplete
RUNNING = "running: the runner marks the record finished when the chapter ends"

_state: dict[str, Any] = {"chapter": None, "values": {}, "meta": {}}


def records_dir() -> Path:
    return Path(os.environ.get(RECORDS_ENV) or REPO_ROOT / "_build" / "records")


def records_path(chapter: str) -> Path:
    return records_dir() / f"{chapter}.json"


def plain(value: Any) -> Any:
    """Convert NumPy/torch scalars and arrays to plain Python values (JSON-able)."""
    if hasattr(value, "detach"):  # torch tensor
        value = value.detach().cpu().numpy()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"record() takes numbers, strings, booleans, lists and dicts of them; got {type(value).__name__}")


def _in_kernel() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def _write() -> None:
    chapter = _state["chapter"]
    if chapter is None:
        return
    path = records_path(chapter)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".json.tmp{os.getpid()}")
    payload = {"chapter": chapter, "values": _state["values"], "meta": _state["meta"]}
    tmp.write_text(json.dumps(payload, indent=1, sort_keys=True))
    os.replace(tmp, path)


def start(chapter: str, meta: dict[str, Any]) -> None:
    """Begin a fresh record for ``chapter`` (called by :func:`lib.book.setup`).

    Under the runner the record is marked ``incomplete`` until the chapter has run to its end
    (the runner then removes the mark and adds ``finished``), so an interrupted or failed run's
    record is never read as a result."""
    _state.update(chapter=chapter, values={}, meta=plain(meta))
    if os.environ.get(RUNNER_ENV) == "1":  # until the runner sees the chapter end: no report counts its claims
        _state["meta"]["incomplete"] = RUNNING
    stale = figures_dir(chapter)
    if stale.is_dir():  # this run's figures only: an earlier run's must not be compared as this one's
        for png in stale.glob("*.png"):
            png.unlink()
    _write()


UNDECIDED = "undecided"  # what the page shows for a record its run's settings leave undecided


def record(name: str, value: Any, claim: str | None = None, glue: bool = True, *, se: Any = None,
           timing: bool = False, undecided: str | None = None) -> None:
    """Record ``value`` under ``name`` (glued for the text, written for tests and the report).

    ``claim`` names the declared claim (``chapters/<id>.yml``) this value decides; the
    declaration must expect exactly this record name, so a typo fails loudly here.

    Three keywords tell a reader of the record (and ``lowrank-book diff``) what kind of number it is:

    * ``se``: the standard error of a Monte Carlo estimate (a number, or one per item of a
      list value); a rerun is then compared with the published value in standard errors;
    * ``timing``: a wall time or a throughput, which depends on the machine and is never
      compared with the published value;
    * ``undecided``: the reason this run's settings leave nothing to decide (no case the
      claim needs, standard errors too large for the statement). ``value`` may then be
      None; the claim reads "undecided at these settings" with the reason, never "fail",
      and the page shows "undecided" where the value would be glued.

    Returns None, so that a cell ending in ``record(...)`` prints nothing.
    """
    value = plain(value)
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"record {name!r}: value is {value}; a recorded number must be finite")
    if undecided is not None and (not isinstance(undecided, str) or not undecided.strip()):
        raise ValueError(f"record {name!r}: undecided takes the reason as a non-empty string; got {undecided!r}")
    se = _standard_error(name, value, se)
    if claim is not None:
        expected = get_claim(claim).record
        if expected != name:
            raise ValueError(f"claim {claim!r} is decided by the record {expected!r}, not {name!r}")
    entry: dict[str, Any] = {"value": value}
    if claim:
        entry["claim"] = claim
    if se is not None:
        entry["se"] = se
    if timing:
        entry["timing"] = True
    if undecided is not None:
        entry["undecided"] = undecided.strip()
    _state["values"][name] = entry
    _state["meta"]["last_record"] = name  # where an interrupted run stopped
    _write()
    if glue and _in_kernel():
        from myst_nb import glue as nb_glue

        nb_glue(name, UNDECIDED if undecided is not None else value, display=False)


def _standard_error(name: str, value: Any, se: Any) -> Any:
    """``se`` checked against ``value``: a finite number >= 0 for a number, one per item for a list."""
    if se is None:
        return None
    se = plain(se)

    def one(s: Any) -> bool:
        return isinstance(s, (int, float)) and not isinstance(s, bool) and math.isfinite(s) and s >= 0

    if isinstance(value, list):
        if not (isinstance(se, list) and len(se) == len(value) and all(one(s) for s in se)):
            raise ValueError(f"record {name!r}: se of a list value is one finite number >= 0 per item; got {se!r}")
    elif not one(se):
        raise ValueError(f"record {name!r}: se is a finite number >= 0; got {se!r}")
    return se


def record_meta(**items: Any) -> None:
    """Add metadata (device, sizes used, timings) to the chapter's record."""
    _state["meta"].update(plain(items))
    _write()


def figure_png(fig, dpi: int | None = None) -> bytes:
    """The figure rendered to PNG bytes (independent of the matplotlib backend in use)."""
    return render(fig, dpi or DPI)[0]


def show_figure(name: str, fig) -> None:
    """Glue a matplotlib figure under ``name`` (shown by ``{glue:figure}``), keep its PNG beside the
    record (``<records dir>/figures/<chapter>/<name>.png``, compared by ``lowrank-book diff``) and close it.

    The figure is glued as a PNG image, so it renders whatever the backend (a kernel
    started with ``MPLBACKEND=Agg`` has no inline image formatter for figures). How legible
    it is at the page's width (:mod:`lib.book.figures`) goes into the chapter's record under
    ``meta["figures"][name]``, which the book's tests hold to the body text's size; a figure
    below it is reported here with a warning naming its smallest texts.
    """
    import matplotlib.pyplot as plt

    png, seen = render(fig)
    figures = dict(_state["meta"].get("figures", {}))
    figures[name] = {"width_px": seen.width_px, "scale": round(seen.scale, 4),
                     "smallest_px": round(seen.smallest_px, 2) if math.isfinite(seen.smallest_px) else None,
                     "smallest_text": seen.smallest_text[:60], "small": len(seen.small)}
    record_meta(figures=figures)
    _write_figure(name, png)
    if not seen.ok:
        warnings.warn(seen.message(name), stacklevel=2)
    if _in_kernel():
        from IPython.display import Image
        from myst_nb import glue as nb_glue

        nb_glue(name, Image(data=png, format="png"), display=False)
    plt.close(fig)


def figures_dir(chapter: str, directory: Path | None = None) -> Path:
    """Where a chapter's figures are kept beside its record: ``<records dir>/figures/<chapter>/``."""
    return (Path(directory) if directory else records_dir()) / "figures" / chapter


def _write_figure(name: str, png: bytes) -> None:
    """The figure's PNG at ``figures_dir(chapter)/<name>.png`` (atomically), named by its glue name."""
    chapter = _state["chapter"]
    if chapter is None:
        return
    path = figures_dir(chapter) / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".png.tmp{os.getpid()}")
    tmp.write_bytes(png)
    os.replace(tmp, path)


def load_records(chapter: str, directory: Path | None = None) -> dict[str, Any] | None:
    """The record JSON of ``chapter`` (None if the chapter has not been run)."""
    path = (Path(directory) if directory else records_dir()) / f"{chapter}.json"
    if not path.is_file():
        return None
    return json.loads(path.read_text())
