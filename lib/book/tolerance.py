"""How closely a rerun's recorded value must repeat the published one: :class:`Tolerance` and its defaults.

The classes of tolerance, and how ``lowrank-book diff`` applies them, are described in
:mod:`lib.book.reference`; a chapter's declaration overrides them (``reference:``, read by
:mod:`lib.book.chapters`). This module imports nothing of :mod:`lib.book`, so both can use it.
"""
from __future__ import annotations

from dataclasses import dataclass

FLOAT_RTOL = 1e-6
"""Relative tolerance of a float without a standard error. The book is deterministic given its
seed, packages and machine: a rerun of the same code repeats every value bit for bit. What may
legitimately move a value is a different summation order (another thread count or BLAS kernel),
whose effect on a float32 pipeline is of order a few float32 rounding errors per step (1.2e-7
each); 1e-6 admits that and still flags a value that moved by one part in a million."""

ROUNDOFF = 1e-9
"""Two values both within this of zero are "still at round-off": the residuals of identities
computed in float64 (1e-16 to 1e-12) and in float32 sums (up to ~1e-10 for the book's sizes)."""

SE_K = 4.0
"""A Monte Carlo estimate reproduces when it lies within SE_K combined standard errors
(sqrt(se_ref² + se_run²)) of the published one: for independent estimates a 4σ band is left
by chance with probability 6e-5, so across the book's ~100 such values a false alarm is rarer
than one run in a hundred, while a shift of a few standard errors is still caught."""

FIGURE_RMS = 0.1
"""RMS tolerance of a figure (pixel values 0-255). Agg renders the same figure to the same
pixels given the same matplotlib and FreeType; matplotlib's own image tests allow a few tenths
for FreeType builds that anti-alias text differently. A moved data point, a changed label or
another figure gives an RMS of several units."""


@dataclass(frozen=True)
class Tolerance:
    """How one record is compared: see :mod:`lib.book.reference`. ``reason`` says why when a
    chapter's declaration overrides the defaults."""

    rtol: float = FLOAT_RTOL
    roundoff: float = ROUNDOFF
    se_k: float = SE_K
    timing: bool = False
    compare: bool = True  # False: a value that says something about the comparison itself, never compared
    reason: str = ""

    def describe(self, statistical: bool) -> str:
        if statistical:
            return f"{self.se_k:g} combined s.e."
        return f"rel {self.rtol:g}, round-off {self.roundoff:g}"
