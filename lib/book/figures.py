"""Figures a reader can read at the page's width.

The book glues each figure as a PNG rendered at ``DPI`` dots per inch (bounding box cut
to what is drawn). The HTML page shows an image at its natural size, one PNG pixel per
CSS pixel, unless it is wider than the article column, in which case it is scaled down
to the column's width. A text of ``s`` points in a PNG ``w`` pixels wide therefore
appears

    s · DPI / 72 · min(1, PAGE_PX / w)   CSS pixels (its em size),

and the book asks every text of every figure (tick labels, legends, titles, annotations)
to be at least the body text's size, ``BODY_PX``. ``PAGE_PX`` and ``BODY_PX`` are the
article column and the body font of the book's theme in a 1400 px browser window
(measured with ``scripts/screenshots.py``'s Chromium; the column is narrower in a narrower
window, where the browser's own zoom takes over).

:func:`legibility` measures the texts that are actually drawn (by listening to the
renderer while the PNG is written), so a figure is judged by what a reader sees, not by
the font sizes it asked for. :func:`panels` lays ``n`` panels out in rows of at most
``ncols``, the usual cure for a figure that is too wide.
"""
from __future__ import annotations

import io
import math
import struct
from contextlib import contextmanager
from dataclasses import dataclass, field

DPI = 120
PAGE_PX = 756  # a figure's width on the page at a 1400 px window (sphinx-book-theme; measured in Chromium)
BODY_PX = 16.0  # the body text's font size (1rem)


@dataclass(frozen=True)
class Legibility:
    """What a reader sees of a figure at the page's width.

    ``width_px``: the PNG's natural width; ``scale``: the factor the page shrinks it by;
    ``smallest_px``: the smallest drawn text's em size on the page, ``smallest_text`` that
    text; ``small``: every text below ``BODY_PX`` as (text, px), smallest first.
    """

    width_px: int
    scale: float
    smallest_px: float
    smallest_text: str
    small: list[tuple[str, float]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.small

    def message(self, name: str) -> str:
        shown = ", ".join(f"{t!r} {px:.1f} px" for t, px in self.small[:4])
        return (f"figure {name!r}: {len(self.small)} text(s) below the body size {BODY_PX:g} px at the page's "
                f"width ({PAGE_PX} px; the {self.width_px} px image is shown at {self.scale:.2f}x): {shown}. "
                f"Use fewer panels per row (lib.book.figures.panels), a narrower figure or larger fonts.")


@contextmanager
def _drawn_texts(sizes: list[tuple[str, float]]):
    """Record (text, size in points) of every text the Agg renderer draws meanwhile."""
    from matplotlib.backends.backend_agg import RendererAgg

    original = RendererAgg.draw_text

    def draw_text(self, gc, x, y, s, prop, angle, ismath=False, mtext=None):
        if str(s).strip():
            sizes.append((str(s), float(prop.get_size_in_points())))
        return original(self, gc, x, y, s, prop, angle, ismath=ismath, mtext=mtext)

    RendererAgg.draw_text = draw_text
    try:
        yield
    finally:
        RendererAgg.draw_text = original


def _png_width(png: bytes) -> int:
    return struct.unpack(">I", png[16:20])[0]  # IHDR width


def render(fig, dpi: int = DPI) -> tuple[bytes, Legibility]:
    """The figure as PNG bytes (cut to what is drawn) and its :class:`Legibility`."""
    sizes: list[tuple[str, float]] = []
    buffer = io.BytesIO()
    with _drawn_texts(sizes):
        fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    png = buffer.getvalue()
    width = _png_width(png)
    scale = min(1.0, PAGE_PX / width)
    shown = sorted((s * dpi / 72 * scale, t) for t, s in sizes)
    if not shown:
        return png, Legibility(width, scale, math.inf, "", [])
    small = [(t, px) for px, t in shown if px < BODY_PX - 1e-9]
    return png, Legibility(width, scale, shown[0][0], shown[0][1], small)


def legibility(fig, dpi: int = DPI) -> Legibility:
    """How legible ``fig`` is at the page's width (see the module's docstring)."""
    return render(fig, dpi)[1]


def panels(n: int, *, ncols: int = 2, panel: tuple[float, float] = (3.1, 2.8), **kwargs):
    """``plt.subplots`` for ``n`` panels in rows of at most ``ncols``, each ``panel`` inches.

    Unused cells of the last row are removed. Returns (fig, axes) with ``axes`` a flat list
    of the ``n`` axes. ``kwargs`` go to ``plt.subplots`` (``sharex``, ``sharey``, ...);
    the layout is constrained unless given. The default panel puts two panels side by side
    within the page's width at natural size (2 × 3.1 in at 120 dpi, with margins, < 756 px).
    """
    import matplotlib.pyplot as plt

    if n < 1:
        raise ValueError(f"panels: n must be at least 1, got {n}")
    ncols = max(1, min(ncols, n))
    nrows = math.ceil(n / ncols)
    kwargs.setdefault("layout", "constrained")
    fig, grid = plt.subplots(nrows, ncols, figsize=(panel[0] * ncols, panel[1] * nrows), squeeze=False, **kwargs)
    axes = list(grid.ravel())
    for ax in axes[n:]:
        ax.remove()
    return fig, axes[:n]
