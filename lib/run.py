"""Run chapters with parameters: check them first, execute with papermill, keep the record.

    python -m lib.run intro -p seed 3 -p train_steps 200
    python -m lib.run --all --profile ci --build

For each chapter the runner

1. reads the MyST notebook with jupytext and finds its ``parameters`` cell;
2. checks every ``-p NAME VALUE`` against the chapter's specification (:mod:`lib.profiles`):
   an unknown name, a wrong type or a value outside the allowed set stops the run with a
   message naming the parameter, what is allowed and what was given, before any cell runs;
3. executes the notebook with papermill (working directory: the chapter's folder; a
   per-cell timeout) into ``_build/src/<chapter>.ipynb`` (or ``--out``);
4. completes the chapter's record (``_build/records/<chapter>.json``: every recorded value
   plus profile, parameters, seed, device, package versions, wall time) and prints the
   verdict on each of the chapter's claims.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import REPO_ROOT
from .book import build_html, executed_path, is_notebook, source_path, toc_files
from .claims import Result, claims_for, evaluate
from .params import ParameterError, parameters_cell_values, parse_cli_value
from .profiles import Chapter, chapters, get_chapter
from .record import RECORDS_ENV, load_records, records_dir


@dataclass
class ChapterRun:
    chapter: Chapter
    notebook: Path
    records: dict[str, Any]
    results: list[Result]
    wall_s: float

    @property
    def failed_claims(self) -> list[Result]:
        return [r for r in self.results if r.status != "pass"]


def find_chapter(ref: str) -> Chapter:
    """A chapter by id (``intro``) or by source path (``chapters/intro.md``)."""
    book = chapters()
    if ref in book:
        return book[ref]
    path = Path(ref).resolve()
    for chapter in book.values():
        if (REPO_ROOT / chapter.path).resolve() == path:
            return chapter
    raise ParameterError(f"unknown chapter {ref!r}; give an id or a path: "
                         + ", ".join(f"{c.id} ({c.path})" for c in book.values()))


def read_notebook(chapter: Chapter):
    """The chapter as an nbformat notebook and the literal values of its parameters cell."""
    import jupytext

    path = REPO_ROOT / chapter.path
    if not path.is_file():
        raise FileNotFoundError(f"chapter source {path} does not exist")
    nb = jupytext.read(path)
    cells = [c for c in nb.cells if c.cell_type == "code" and "parameters" in c.metadata.get("tags", [])]
    if len(cells) != 1:
        raise ParameterError(f"{chapter.path} must have exactly one code cell tagged 'parameters'; found {len(cells)}")
    values = parameters_cell_values(cells[0].source)
    if list(values) != chapter.spec.names:
        raise ParameterError(f"{chapter.path}: the parameters cell ({', '.join(values)}) and lib.profiles "
                             f"({', '.join(chapter.spec.names)}) disagree")
    return nb, values


def check_parameters(chapter: Chapter, given: dict[str, Any]) -> dict[str, Any]:
    """Check given values (unknown names, types, allowed sets); return them, resolved."""
    chapter.spec.check(given)
    return chapter.resolve(given)


def default_timeout(profile: str, chapter: Chapter) -> int:
    return max(600, 3 * chapter.budget_ci_s) if profile == "ci" else 6 * 3600


def execute(chapter: Chapter, given: dict[str, Any], *, out_dir: Path | None = None,
            timeout: int | None = None, verbose: bool = False) -> ChapterRun:
    """Check, execute and record one chapter (see the module docstring)."""
    import papermill

    nb, _ = read_notebook(chapter)
    resolved = check_parameters(chapter, given)
    entry = chapter.path.rsplit(".", 1)[0]
    notebook_out = (out_dir / f"{chapter.id}.ipynb") if out_dir else executed_path(entry)
    rec_dir = (out_dir / "records") if out_dir else records_dir()
    notebook_out.parent.mkdir(parents=True, exist_ok=True)
    rec_dir.mkdir(parents=True, exist_ok=True)
    env_before = {k: os.environ.get(k) for k in (RECORDS_ENV, "PYTHONPATH")}
    os.environ[RECORDS_ENV] = str(rec_dir)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env_before["PYTHONPATH"]]))
    start = time.perf_counter()
    try:
        import nbformat

        with tempfile.TemporaryDirectory() as tmp:
            source_nb = Path(tmp) / f"{chapter.id}.ipynb"
            nbformat.write(nb, source_nb)
            papermill.execute_notebook(
                str(source_nb), str(notebook_out), parameters=given, cwd=str((REPO_ROOT / chapter.path).parent),
                kernel_name="python3", execution_timeout=timeout or default_timeout(resolved["profile"], chapter),
                progress_bar=verbose, log_output=verbose, request_save_on_cell_execute=False)
    finally:
        for key, value in env_before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    wall = time.perf_counter() - start
    records = load_records(chapter.id, rec_dir)
    if records is None:
        raise RuntimeError(f"{chapter.path} ran but wrote no record: does it call lib.chapter.setup({chapter.id!r}, ...)?")
    records["meta"].update(wall_s=round(wall, 2), parameters_given=given, notebook=str(notebook_out),
                           finished=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    path = rec_dir / f"{chapter.id}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(records, indent=1, sort_keys=True))
    os.replace(tmp, path)
    results = [evaluate(c, records) for c in claims_for(chapter.id)]
    return ChapterRun(chapter, notebook_out, records, results, wall)


def book_chapters() -> list[Chapter]:
    """The executable chapters in reading order of ``_toc.yml``."""
    out = []
    for entry in toc_files():
        path = source_path(entry)
        if is_notebook(path):
            out.append(find_chapter(str(path)))
    return out


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m lib.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("chapters", nargs="*", help="chapter ids or source paths")
    parser.add_argument("--all", action="store_true", help="every chapter of _toc.yml, in order")
    parser.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                        help="set a parameter (a Python literal, else a string); repeatable")
    parser.add_argument("--profile", choices=None, help="shorthand for -p profile VALUE")
    parser.add_argument("--out", type=Path, help="write executed notebooks and records here instead of _build/")
    parser.add_argument("--timeout", type=int, help="per-cell timeout in seconds")
    parser.add_argument("--build", action="store_true", help="build the HTML book afterwards")
    parser.add_argument("--strict", action="store_true", help="exit 2 if any claim fails or is not decided")
    parser.add_argument("--verbose", action="store_true", help="stream cell output")
    parser.add_argument("--list", action="store_true", help="list chapters and their parameters")
    return parser.parse_args(argv)


def _list() -> None:
    for chapter in chapters().values():
        print(f"{chapter.id}  ({chapter.path}; ci budget {chapter.budget_ci_s} s)")
        for p in chapter.spec.params:
            print(f"    {p.name} = {p.default!r}: {p.describe()}. {p.help}")
        for profile, preset in chapter.presets.items():
            print(f"    preset {profile}: {preset}")


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    if args.list:
        _list()
        return 0
    given = {name: parse_cli_value(value) for name, value in args.parameter}
    if args.profile is not None:
        given["profile"] = args.profile
    try:
        selected = book_chapters() if args.all else [find_chapter(ref) for ref in args.chapters]
        if not selected and not args.build:
            raise ParameterError("name at least one chapter (or --all); `--list` shows them")
        plans = []
        for chapter in selected:
            mine = {k: v for k, v in given.items() if k in chapter.spec.names} if args.all else given
            if args.all:
                unknown = [k for k in given if not any(k in c.spec.names for c in selected)]
                if unknown:
                    raise ParameterError(f"no chapter has the parameter(s) {', '.join(map(repr, unknown))}")
            read_notebook(chapter)
            check_parameters(chapter, mine)
            plans.append((chapter, mine))
    except (ParameterError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1

    verdicts = []
    for chapter, mine in plans:
        print(f"[run] {chapter.id}: executing {chapter.path} with {mine or 'default parameters'}", flush=True)
        try:
            run = execute(chapter, mine, out_dir=args.out, timeout=args.timeout, verbose=args.verbose)
        except Exception as err:  # papermill's execution error carries the failing cell's traceback
            print(f"error: {chapter.id} failed: {err.__class__.__name__}: {str(err)[-3000:]}", file=sys.stderr)
            return 1
        status = "within" if run.wall_s <= chapter.budget_ci_s else "OVER"
        budget = f" ({status} the ci budget of {chapter.budget_ci_s} s)" if run.records["meta"]["profile"] == "ci" else ""
        print(f"[run] {chapter.id}: done in {run.wall_s:.1f} s{budget}; notebook {run.notebook}", flush=True)
        for r in run.results:
            print(f"    [{r.status:>7}] {r.claim.id}: {r.value!r} ({r.claim.check.describe()})")
        verdicts.extend(run.results)
    if args.build:
        try:
            index = build_html()
        except (RuntimeError, FileNotFoundError) as err:
            print(f"error: {err}", file=sys.stderr)
            return 1
        print(f"[run] the book is built: open {index}")
    bad = [r for r in verdicts if r.status != "pass"]
    if bad:
        print(f"[run] {len(bad)} of {len(verdicts)} claims did not pass: " + ", ".join(r.claim.id for r in bad))
        if args.strict:
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
