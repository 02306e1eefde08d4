"""The published reference and how a rerun is compared with it (``lowrank-book diff``).

The ``ci`` profile's records and figures are committed under ``reference/ci/`` in the layout
the runner writes them (``<chapter>.json``, ``figures/<chapter>/<name>.png``). A rerun's
records are compared with them value by value and figure by figure, each with a tolerance
of one of four declared classes, every one with its reason (the defaults and :class:`Tolerance` live in
:mod:`lib.book.tolerance`):

* **exact**: booleans, integers, strings, None and lists of them. Counts, choices and labels
  are computed from the same data by the same code; they either reproduce or they moved.
* **float**: a relative tolerance :data:`FLOAT_RTOL`; two values both within
  :data:`ROUNDOFF` of zero are "still at round-off" (an identity checked to 1e-16 that now
  reads 3e-16 has not moved).
* **statistical**: a Monte Carlo estimate recorded with its standard error (``record(...,
  se=...)``) is compared in standard errors: the difference of two estimates may be up to
  :data:`SE_K` times their combined standard error.
* **timing**: wall times and throughputs (``record(..., timing=True)``) depend on the
  machine and its load; they are never compared.

A chapter's declaration may override the class of a record or the RMS tolerance of a
figure, always with a reason::

    reference:
      values:
        "lm_llc_*": {rtol: 0.05, reason: "..."}     # fnmatch patterns allowed
      figures:
        fig_chains: {rms: 6, reason: "drawn from Monte Carlo traces"}
        fig_costs: {timing: true, reason: "one panel plots wall times"}   # never compared

Figures are compared with matplotlib's own :func:`matplotlib.testing.compare.compare_images`
(the root-mean-square difference of the two images' pixels, 0-255, against a tolerance).
"""
from __future__ import annotations

import fnmatch
import json
import math
import shutil
import struct
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import REPO_ROOT
from .chapters import Chapter, chapter_sources, get_chapter
from .tolerance import FIGURE_RMS, FLOAT_RTOL, ROUNDOFF, SE_K, Tolerance  # noqa: F401  (their home; kept importable here)

REFERENCE_DIR = REPO_ROOT / "reference" / "ci"

DIFFER = 4  # exit status of `lowrank-book diff` when something differs


class ReferenceError(ValueError):
    """The records or the reference cannot be compared (no such folder, no records, corrupt JSON,
    another profile); the command line exits 2 with this message."""


@dataclass(frozen=True)
class Difference:
    chapter: str
    what: str        # "record 'x'", "record 'x'[3]", "figure 'fig_y'", "parameter 'seed'"
    reference: Any
    run: Any
    tolerance: str
    name: str = ""   # the record or figure (its glue name)

    def line(self) -> str:
        return f"{self.chapter}: {self.what}: reference {_show(self.reference)}, this run {_show(self.run)} " \
               f"(tolerance: {self.tolerance})"


@dataclass
class Comparison:
    """What :func:`compare` found."""

    differences: list[Difference] = field(default_factory=list)
    values: int = 0
    figures: int = 0
    parameters: list[Difference] = field(default_factory=list)  # reported, not counted as differences
    not_run: list[str] = field(default_factory=list)  # reference chapters the run does not have

    @property
    def ok(self) -> bool:
        return not self.differences

    def moved(self, chapter: str, record: str) -> bool:
        """Whether the record (or figure) ``record`` of ``chapter`` differs from the reference."""
        return any(d.chapter == chapter and d.name == record for d in self.differences)

    @property
    def figures_differing(self) -> int:
        return sum(d.what.startswith("figure ") for d in self.differences)

    def summary(self) -> str:
        return f"{self.values} values and {self.figures} figures compared: {len(self.differences)} differ"


def _show(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# --- reading -----------------------------------------------------------------------------------

def run_folder(directory: Path | str) -> Path:
    """A run's records folder: ``directory`` itself, or the ``records/`` of a ``run --out DIR`` folder."""
    directory = Path(directory).expanduser()
    if directory.is_dir() and not any(directory.glob("*.json")) and (directory / "records").is_dir():
        return directory / "records"
    return directory


def read_folder(directory: Path | str, what: str) -> dict[str, dict]:
    """Every chapter record in ``directory`` (``<chapter>.json``), by chapter id.

    Raises :class:`ReferenceError` for a folder that does not exist, one without records, or
    a record that is not valid JSON of the runner's shape.
    """
    directory = Path(directory)
    if directory.is_file():
        raise ReferenceError(f"{what} folder {str(directory)!r} is a file, not a folder of chapter records")
    if not directory.is_dir():
        raise ReferenceError(f"{what} folder {str(directory)!r} does not exist")
    records = {}
    for path in sorted(directory.glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise ReferenceError(f"{what} {str(path)!r} is not valid JSON: {err}") from None
        if not (isinstance(data, dict) and isinstance(data.get("values"), dict) and isinstance(data.get("meta"), dict)):
            raise ReferenceError(f"{what} {str(path)!r} is not a chapter record (no 'values' and 'meta')")
        records[path.stem] = data
    if not records:
        raise ReferenceError(f"{what} folder {str(directory)!r} holds no chapter records (<chapter>.json)")
    return records


def records_folder_problem(directory: Path | str | None) -> str | None:
    """Why ``directory`` (or the ``records/`` of a ``run --out`` folder) holds no run the book can report on, or
    None: it does not exist, is a file, holds no record (``<chapter>.json``), a corrupt one, or records of no
    chapter of the book. The check of ``lowrank-book report --records`` and of the report chapter's
    ``records_dir`` (its ``validate:``; ``''``, the book's own records, passes), before any work."""
    if directory is None or str(directory) == "":
        return None
    folder = run_folder(directory)
    try:
        records = read_folder(folder, "records")
    except ReferenceError as err:
        return str(err)
    book = chapter_sources()
    if not set(records) & set(book):
        return (f"records folder {str(folder)!r} holds records of {', '.join(sorted(records))}, none of them a "
                f"chapter of the book ({', '.join(book)})")
    return None


def figure_files(directory: Path, chapter: str) -> dict[str, Path]:
    folder = Path(directory) / "figures" / chapter
    return {p.stem: p for p in sorted(folder.glob("*.png"))} if folder.is_dir() else {}


# --- tolerances ----------------------------------------------------------------------------------

def _declared(chapter: str) -> Chapter | None:
    """The book's chapter of that id (its declaration alone is read), or None if the book has none."""
    return get_chapter(chapter) if chapter in chapter_sources() else None


def declared_tolerances(chapter: str) -> tuple[dict[str, Tolerance], dict[str, float]]:
    """The chapter's overrides (its declaration's ``reference:``): record patterns → Tolerance,
    figure patterns → RMS. Empty for a chapter the book does not have."""
    declared = _declared(chapter)
    if declared is None:
        return {}, {}
    return dict(declared.reference_values), dict(declared.reference_figures)


def tolerance_for(name: str, entry: dict, overrides: dict[str, Tolerance]) -> Tolerance:
    """The tolerance of the record ``name``: the first matching override, else the defaults
    (timing if the record says so)."""
    for pattern, tol in overrides.items():
        if fnmatch.fnmatchcase(name, pattern):
            return tol
    return Tolerance(timing=bool(entry.get("timing")))


def figure_rms(name: str, overrides: dict[str, float | None]) -> float | None:
    """The RMS tolerance of the figure ``name`` (None: a figure of timings, never compared)."""
    for pattern, rms in overrides.items():
        if fnmatch.fnmatchcase(name, pattern):
            return rms
    return FIGURE_RMS


# --- comparing values ---------------------------------------------------------------------------------

def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _float_differs(ref: float, run: float, tol: Tolerance, se_ref: Any, se_run: Any) -> str | None:
    """The tolerance used if ``run`` differs from ``ref``, else None."""
    if not (math.isfinite(ref) and math.isfinite(run)):
        return None if ref == run or (math.isnan(ref) and math.isnan(run)) else tol.describe(False)
    se = [s for s in (se_ref, se_run) if _is_number(s)]
    if se:
        band = tol.se_k * math.sqrt(sum(s * s for s in se))
        return None if abs(run - ref) <= band else f"{tol.describe(True)} = {band:.3g}"
    if abs(ref) <= tol.roundoff and abs(run) <= tol.roundoff:
        return None  # still at round-off
    return None if abs(run - ref) <= tol.rtol * abs(ref) else tol.describe(False)


def compare_values(ref: Any, run: Any, tol: Tolerance, se_ref: Any = None, se_run: Any = None,
                   path: str = "") -> tuple[str, Any, Any, str] | None:
    """The first place where ``run`` differs from ``ref``: (path, reference, run, tolerance), else None.

    Exact for booleans, strings, None and integer pairs; floats by :func:`_float_differs`;
    lists and dicts item by item (a list's standard errors, one per item, go with the items).
    """
    if _is_number(ref) and _is_number(run) and (isinstance(ref, float) or isinstance(run, float)):
        used = _float_differs(float(ref), float(run), tol, se_ref, se_run)
        return None if used is None else (path, ref, run, used)
    if isinstance(ref, list) and isinstance(run, list):
        if len(ref) != len(run):
            return (path, f"{len(ref)} items", f"{len(run)} items", "exact length")
        for i, (a, b) in enumerate(zip(ref, run)):
            sa = se_ref[i] if isinstance(se_ref, list) and i < len(se_ref) else None
            sb = se_run[i] if isinstance(se_run, list) and i < len(se_run) else None
            found = compare_values(a, b, tol, sa, sb, f"{path}[{i}]")
            if found:
                return found
        return None
    if isinstance(ref, dict) and isinstance(run, dict):
        if set(ref) != set(run):
            return (path, sorted(ref), sorted(run), "exact keys")
        for key in ref:
            found = compare_values(ref[key], run[key], tol, None, None, f"{path}[{key!r}]")
            if found:
                return found
        return None
    if type(ref) is not type(run) or ref != run:
        return (path, ref, run, "exact")
    return None


def compare_chapter(chapter: str, ref: dict, run: dict, comparison: Comparison) -> None:
    """Compare one chapter's values (in ``comparison``); its figures are compared by :func:`compare_figures`."""
    overrides, _ = declared_tolerances(chapter)
    ref_values, run_values = ref["values"], run["values"]
    for name in sorted(set(ref_values) | set(run_values)):
        a, b = ref_values.get(name), run_values.get(name)
        if a is None or b is None:
            comparison.values += 1
            comparison.differences.append(Difference(
                chapter, f"record {name!r}", "—" if a is None else a["value"], "—" if b is None else b["value"],
                "present in both" + (" (a new record: accept it into the reference)" if a is None else ""), name))
            continue
        tol = tolerance_for(name, b, overrides)
        if tol.timing or not tol.compare or a.get("timing"):
            continue
        comparison.values += 1
        if bool(a.get("undecided")) != bool(b.get("undecided")):
            comparison.differences.append(Difference(
                chapter, f"record {name!r}", a.get("undecided") and "undecided" or a["value"],
                b.get("undecided") and "undecided" or b["value"], "decided in both or undecided in both", name))
            continue
        found = compare_values(a["value"], b["value"], tol, a.get("se"), b.get("se"))
        if found:
            path, x, y, used = found
            comparison.differences.append(Difference(chapter, f"record {name!r}{path}", x, y, used, name))
    params_ref, params_run = ref["meta"].get("parameters", {}), run["meta"].get("parameters", {})
    for name in sorted(set(params_ref) | set(params_run)):
        if params_ref.get(name) != params_run.get(name):
            comparison.parameters.append(Difference(chapter, f"parameter {name!r}", params_ref.get(name),
                                                    params_run.get(name), "same parameters"))


def compare_figures(chapter: str, ref_dir: Path, run_dir: Path, comparison: Comparison) -> None:
    """Compare the chapter's figures with :func:`matplotlib.testing.compare.compare_images`."""
    from matplotlib.testing.compare import compare_images
    from matplotlib.testing.exceptions import ImageComparisonFailure

    _, overrides = declared_tolerances(chapter)
    ref_figs, run_figs = figure_files(ref_dir, chapter), figure_files(run_dir, chapter)
    for name in sorted(set(ref_figs) | set(run_figs)):
        rms_tol = figure_rms(name, overrides)
        if rms_tol is None:
            continue
        comparison.figures += 1
        what = f"figure {name!r}"
        if name not in ref_figs or name not in run_figs:
            comparison.differences.append(Difference(chapter, what, "present" if name in ref_figs else "—",
                                                     "present" if name in run_figs else "—", "present in both", name))
            continue
        with tempfile.TemporaryDirectory() as tmp:  # compare_images writes a diff image beside `actual`
            expected, actual = Path(tmp) / "expected.png", Path(tmp) / "actual.png"
            shutil.copyfile(ref_figs[name], expected)
            shutil.copyfile(run_figs[name], actual)
            try:
                failed = compare_images(str(expected), str(actual), tol=rms_tol, in_decorator=True)
            except ImageComparisonFailure:  # the sizes differ
                comparison.differences.append(Difference(chapter, what, _png_size(ref_figs[name]),
                                                         _png_size(run_figs[name]), "the same size", name))
                continue
        if failed:
            comparison.differences.append(Difference(chapter, what, "the published image",
                                                     f"an image at RMS {failed['rms']:.3g} from it", f"RMS {rms_tol:g}",
                                                     name))


def _png_size(path: Path) -> str:
    """``width×height px`` from a PNG's header."""
    width, height = struct.unpack(">II", Path(path).read_bytes()[16:24])
    return f"{width}×{height} px"


def compare(records: Path | str, reference: Path | str = REFERENCE_DIR, *, exclude: tuple[str, ...] = ()) -> Comparison:
    """Compare every chapter of ``records`` that the reference has (values, then figures), except the
    chapters in ``exclude`` (the report, whose own record is still being written when it compares).

    Raises :class:`ReferenceError` when the two cannot be compared: a missing folder, no
    records, corrupt JSON, a run of another profile than the reference's, an incomplete run, or no
    chapter in both (a chapter of the run that the reference lacks is a difference when others are
    compared).
    """
    records, reference = run_folder(records), Path(reference)
    run = {c: d for c, d in read_folder(records, "records").items() if c not in exclude}
    ref = {c: d for c, d in read_folder(reference, "reference").items() if c not in exclude}
    if not set(run) & set(ref):
        raise ReferenceError(f"no chapter to compare: this run's records ({str(records)!r}) are of "
                             f"{', '.join(sorted(run)) or 'no chapter'}, the reference's ({str(reference)!r}) of "
                             f"{', '.join(sorted(ref)) or 'no chapter'}; compare a run with a reference of its "
                             "chapters (--reference DIR)")
    for chapter, data in run.items():
        if data["meta"].get("incomplete"):
            raise ReferenceError(f"{chapter}: this run's record is incomplete ({data['meta']['incomplete']}); "
                                 "rerun the chapter to the end before comparing it")
    comparison = Comparison()
    for chapter in sorted(run):
        if chapter not in ref:
            comparison.differences.append(Difference(chapter, "chapter", "—", "ran", "present in both (a new "
                                                     "chapter: accept it into the reference)"))
            continue
        ref_profile, run_profile = ref[chapter]["meta"].get("profile"), run[chapter]["meta"].get("profile")
        if ref_profile != run_profile:
            raise ReferenceError(f"{chapter}: the reference in {str(reference)!r} is of profile {ref_profile!r} and "
                                 f"this run of profile {run_profile!r}; compare runs with a reference of their own "
                                 "profile (--reference DIR)")
    comparison.not_run = sorted(set(ref) - set(run))
    for chapter in sorted(set(run) & set(ref)):
        compare_chapter(chapter, ref[chapter], run[chapter], comparison)
        compare_figures(chapter, reference, records, comparison)
    return comparison


# --- accepting a run as the reference --------------------------------------------------------------

def accept(records: Path | str, reference: Path | str = REFERENCE_DIR, *, chapters_expected: list[str] | None = None,
           profile: str = "ci") -> list[str]:
    """Make the run in ``records`` the published reference: its records and figures replace the
    reference's. The run must be complete: every expected chapter, of ``profile``, finished.

    Returns the chapters written.
    """
    records, reference = run_folder(records), Path(reference)
    run = read_folder(records, "records")
    missing = [c for c in chapters_expected or [] if c not in run]
    if missing:
        raise ReferenceError(f"the reference is written from a full {profile} run; {str(records)!r} lacks "
                             f"{', '.join(missing)} (run `lowrank-book run --all --profile {profile}` first)")
    for chapter, data in run.items():
        if data["meta"].get("profile") != profile:
            raise ReferenceError(f"{chapter}: this run is of profile {data['meta'].get('profile')!r}; the reference "
                                 f"in {str(reference)!r} holds the {profile!r} profile")
        if not data["meta"].get("finished"):
            raise ReferenceError(f"{chapter}: its record is incomplete (the run did not finish); rerun it first")
    staging = reference.with_name(reference.name + ".partial")
    if staging.exists():
        shutil.rmtree(staging)
    (staging / "figures").mkdir(parents=True)
    for chapter in sorted(run):
        shutil.copyfile(records / f"{chapter}.json", staging / f"{chapter}.json")
        figs = figure_files(records, chapter)
        if figs:
            (staging / "figures" / chapter).mkdir()
            for name, path in figs.items():
                shutil.copyfile(path, staging / "figures" / chapter / f"{name}.png")
    if reference.exists():
        shutil.rmtree(reference)
    staging.rename(reference)
    return sorted(run)
