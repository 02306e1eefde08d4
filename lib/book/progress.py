"""Progress bars and housekeeping messages for long loops: for the person running the book.

A chapter executed by the book's runner (``lowrank-book run``) sends them to the terminal
the runner was started from (the kernel's own stderr), so the rendered page keeps only what
a reader needs; in an interactive notebook, or under plain papermill, they go to the cell's
stderr as usual, throttled off a terminal.
"""
from __future__ import annotations

import os
import sys

TERMINAL_ENV = "BOOK_PROGRESS_TO_TERMINAL"  # set to "1" by lib.book.runner for the kernels it starts


def log_stream():
    """Where progress and cache messages go: the process's terminal under the runner, else stderr."""
    if os.environ.get(TERMINAL_ENV) == "1" and sys.__stderr__ is not None:
        return sys.__stderr__
    return sys.stderr


def progress(iterable=None, *, desc: str, total: int | None = None, initial: int = 0, disable: bool = False):
    """A tqdm bar on :func:`log_stream`; refreshes every second on a terminal, every 15 s otherwise.

    Executed notebooks keep every refresh as text, so off a terminal the bar is
    throttled to keep a notebook readable while a long run still shows it is alive.
    """
    from tqdm import tqdm

    stream = log_stream()
    interactive = hasattr(stream, "isatty") and stream.isatty()
    return tqdm(iterable, desc=desc, total=total, initial=initial, disable=disable, file=stream,
                mininterval=1.0 if interactive else 15.0, dynamic_ncols=interactive)
