"""``python -m lib``: the book's command line, the same as ``lowrank-book`` (see :mod:`lib.book.cli`)."""
import sys

from lib.book.cli import main

sys.exit(main(prog="python -m lib"))
