"""Progress bars for long loops: lively in a terminal, a few lines in a notebook or a log."""
from __future__ import annotations

import sys


def progress(iterable=None, *, desc: str, total: int | None = None, initial: int = 0, disable: bool = False):
    """A tqdm bar on stderr; refreshes every second on a terminal, every 15 s otherwise.

    Executed notebooks keep every refresh as text, so off a terminal the bar is
    throttled to keep the rendered book readable while a long run still shows it is alive.
    """
    from tqdm import tqdm

    interactive = hasattr(sys.stderr, "isatty") and sys.stderr.isatty()
    return tqdm(iterable, desc=desc, total=total, initial=initial, disable=disable, file=sys.stderr,
                mininterval=1.0 if interactive else 15.0, dynamic_ncols=interactive)
