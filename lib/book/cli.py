"""The book's command line: ``lowrank-book`` (installed by ``pip install -e .``) or ``python -m lib``.

    lowrank-book list                                  # chapters in reading order, parameters, presets
    lowrank-book run modes -p seed 3                   # -p NAME VALUE (a Python literal, else a string)
    lowrank-book run intro -p model_sizes "['p-tiny']" --out /tmp/myrun
    lowrank-book run --all --profile ci --build        # what `make book` does
    lowrank-book report --records /tmp/myrun/records   # every claim's verdict from a records folder
    lowrank-book run llc --seeds 0,1,2,3,4 --out /tmp/s # one run (and record) per seed
    lowrank-book report --records /tmp/s               # each claim's verdict per seed and its stability
    lowrank-book diff                                  # every value and figure against reference/ci/
    lowrank-book diff --accept                         # a full ci run becomes the published reference
    lowrank-book plan logit_rank --profile paper       # heavy steps: memory, arithmetic, time on this device
    lowrank-book run --all --profile paper --smoke     # the paper path at CPU sizes (stand-ins for the hub)
    lowrank-book build                                 # render the executed chapters to HTML
    lowrank-book check                                 # do toc, notebooks and declarations agree?

Every value is checked against the chapter's declaration before any kernel starts; a bad
value or name exits with status 2 and one line naming the parameter, what is allowed and
what was given. A command reads only the declarations it needs (``run modes`` reads one;
``list``, ``report`` and ``check`` the book's), and nothing heavy is imported before a
command needs it, so that a refusal comes within a second.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

from .chapters import ChapterDeclarationError, chapter_sources, chapters, discover
from .costs import heavy_steps, named_gpu, plan_lines, this_device
from .pages import BUILD_DIR, build_html
from .parameters import ParameterError, parse_cli_value
from .reference import REFERENCE_DIR, ReferenceError, accept, compare, records_folder_problem
from .report import SEED_FOLDER, collect, collect_seeds, counts, seed_folders, seeds_markdown, seeds_table, tally
from .claims import evaluate
from .records import load_records, records_dir
from .runner import (ChapterInterrupted, book_chapters, check_parameters, execute, execute_in_parallel, find_chapter,
                     plan)

PROG = "lowrank-book"
# exit status: 1 a chapter failed while running; 2 a bad command line (argparse's status too), a name or value
# refused before any work; 3 (with --strict) a claim did not pass; 4 (diff) a value or figure differs
USAGE = 2
CLAIMS_FAILED = 3
DIFFERS = 4
INTERRUPTED = 130  # Ctrl-C: the shell's status for SIGINT


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0],
                                     epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawTextHelpFormatter)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    commands.add_parser("list", help="chapters in reading order, their parameters and presets")
    commands.add_parser("check", help="check that _toc.yml, the notebooks and their declarations agree")
    commands.add_parser("build", help="build the HTML book from the executed chapters")
    report = commands.add_parser("report", help="every claim's verdict, decided from a folder of chapter records")
    report.add_argument("--records", type=Path, help="records folder (a `run --out DIR` writes DIR/records; "
                                                     "a `run --seeds` folder gives each seed's verdict; "
                                                     "default: _build/records)")
    report.add_argument("--markdown", type=Path, help="also write the seeds table (Markdown) to this file")
    plan = commands.add_parser("plan", help="each heavy step's memory and arithmetic, and the time on this device, "
                                            "before a run")
    plan.add_argument("chapters", nargs="*", help="chapter ids or source paths")
    plan.add_argument("--all", action="store_true", help="every chapter of _toc.yml")
    plan.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                      help="set a parameter, as for run")
    plan.add_argument("--profile", help="shorthand for -p profile VALUE")
    plan.add_argument("--smoke", action="store_true", help="with --profile paper: the smoke sizes")
    plan.add_argument("--gpu", nargs=2, type=float, metavar=("MEMORY_GB", "TFLOPS"),
                      help="plan for a GPU of this memory and throughput instead of this machine")
    plan.add_argument("--host-gb", type=float, metavar="MEMORY_GB",
                      help="with --gpu: the memory of that machine's host, for the steps that run on the CPU "
                           "(default: this machine's available memory; the throughput is this CPU's)")
    diff = commands.add_parser("diff", help="compare every recorded value and figure with the published reference")
    diff.add_argument("--records", type=Path, help="this run's records folder (default: _build/records)")
    diff.add_argument("--reference", type=Path, help="the reference folder (default: reference/ci)")
    diff.add_argument("--accept", action="store_true", help="make this (full, finished) run the reference instead")
    run = commands.add_parser("run", help="check parameters, execute chapters, decide their claims")
    run.add_argument("chapters", nargs="*", help="chapter ids or source paths")
    run.add_argument("--all", action="store_true", help="every chapter of _toc.yml, in reading order")
    run.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                     help="set a parameter (a Python literal, else a string); repeatable")
    run.add_argument("--profile", help="shorthand for -p profile VALUE")
    run.add_argument("--smoke", action="store_true", help="with --profile paper: the paper path at the sizes "
                                                          "each chapter's `smoke` presets cut it to (minutes on a CPU)")
    run.add_argument("--seeds", help="comma-separated seeds (e.g. 0,1,2,3,4): one run and record per seed, in "
                                     "OUT/seed-<k>/ (OUT: --out, default _build/seeds)")
    run.add_argument("--out", type=Path, help="write executed notebooks and records here instead of _build/")
    run.add_argument("--timeout", type=int, help="per-cell timeout in seconds")
    run.add_argument("--build", action="store_true", help="build the HTML book afterwards")
    run.add_argument("--strict", action="store_true", help="exit 3 if any claim fails or is not decided")
    run.add_argument("--verbose", action="store_true", help="stream cell output")
    run.add_argument("--jobs", type=int, default=1, help="run up to this many chapters at once, each in its own "
                     "process (the longest first; the report after the others); numbers do not change")
    return parser


def _list() -> None:
    for chapter in chapters().values():
        print(f"{chapter.id}: {chapter.title}  ({chapter.path}, declared in {chapter.declaration}; "
              f"ci budget {chapter.budget_ci_s} s; {len(chapter.claims)} claims)")
        for p in chapter.spec.params:
            print(f"    {p.name} = {p.default!r}: {p.describe()}. {p.help}")
        for profile, preset in chapter.presets.items():
            print(f"    preset {profile}: {preset}")


def parse_seeds(text: str) -> list[int]:
    """``--seeds 0,1,2`` as a list of distinct integers >= 0 (ParameterError naming the flag otherwise)."""
    parts = [p.strip() for p in str(text).split(",")]
    if not all(p.isdigit() for p in parts):
        raise ParameterError(f"--seeds: allowed values are comma-separated integers >= 0 such as 0,1,2,3,4; got {text!r}")
    seeds = [int(p) for p in parts]
    if len(set(seeds)) != len(seeds):
        raise ParameterError(f"--seeds: each seed once; got {text!r}")
    return seeds


def parameters_given(args: argparse.Namespace) -> dict:
    """The reader's ``-p NAME VALUE`` values and ``--profile`` of a ``run`` or ``plan``; ParameterError when the
    command names no chapter (and no ``--all``) or gives a parameter twice."""
    if not args.chapters and not args.all:
        raise ParameterError("name at least one chapter (or --all); `lowrank-book list` shows them")
    names = [name for name, _ in args.parameter]
    for name in names:
        if names.count(name) > 1:
            values = ", ".join(v for n, v in args.parameter if n == name)
            raise ParameterError(f"-p {name}: each parameter once; got it {names.count(name)} times ({values})")
    given = {name: parse_cli_value(value) for name, value in args.parameter}
    if args.profile is not None:
        if "profile" in given:
            raise ParameterError(f"--profile and -p profile: give the profile once; got --profile {args.profile} "
                                 f"and -p profile {given['profile']}")
        given["profile"] = args.profile
    return given


def out_folder_problem(out: Path) -> str | None:
    """Why ``--out`` cannot be the run's output folder (a file; under a file; a place this user cannot write),
    or None."""
    if out.exists() and not out.is_dir():
        return f"{str(out)!r} is a file"
    above = out.absolute()
    while not above.exists():
        above = above.parent
    if not above.is_dir():
        return f"{str(above)!r}, on its path, is a file"
    if not os.access(above, os.W_OK | os.X_OK):
        return f"this user cannot write in {str(above)!r}"
    return None


def _run(args: argparse.Namespace) -> int:
    try:
        given = parameters_given(args)
        if args.timeout is not None and args.timeout <= 0:
            raise ParameterError(f"--timeout: allowed values are seconds > 0 (a per-cell limit); got {args.timeout}")
        if args.out is not None and (why := out_folder_problem(args.out)):
            raise ParameterError(f"--out: allowed values are a folder (existing or new); {why}")
        seeds = None
        if args.seeds is not None:
            seeds = parse_seeds(args.seeds)
            if "seed" in given:
                raise ParameterError("--seeds and -p seed: give the seeds once (--seeds 0,1,2 runs each)")
            if args.build:
                raise ParameterError("--seeds and --build: the book is built from one run, not from several seeds")
        if args.jobs < 1:
            raise ParameterError(f"--jobs: allowed values are an integer >= 1 (chapters at once); got {args.jobs}")
        if args.jobs > 1 and args.verbose:
            raise ParameterError("--jobs and --verbose: cell output is streamed from one chapter at a time; "
                                 "give --jobs 1 to stream it")
        if args.smoke and given.get("profile") != "paper":
            raise ParameterError(f"--smoke runs the paper profile's code path at small sizes: give --profile paper "
                                 f"(got profile {given.get('profile', 'ci')!r})")
        plans = plan(args.chapters, {**given, **({"seed": seeds[0]} if seeds else {})}, every=args.all,
                     smoke=args.smoke)
        if seeds is not None:  # every seed is checked before the first one runs (a seed's rule is its bounds)
            for chapter, mine in plans:
                check_parameters(chapter, {**mine, "seed": max(seeds)})
    except (ParameterError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return USAGE

    runs = [(None, args.out)] if seeds is None else \
        [(seed, (args.out or BUILD_DIR / "seeds") / SEED_FOLDER.format(seed=seed)) for seed in seeds]
    verdicts = []
    for seed, out in runs:
        if args.jobs > 1:
            seeded = [(c, {**m, "seed": seed} if seed is not None else m) for c, m in plans]
            try:
                ran = execute_in_parallel(seeded, args.jobs, out_dir=out, timeout=args.timeout, smoke=args.smoke)
            except KeyboardInterrupt:
                print("[run] interrupted; the records of the chapters still running are marked incomplete, and a "
                      "rerun resumes from the cache", file=sys.stderr, flush=True)
                return INTERRUPTED
            failed = [c.id for c, code in ran if code != 0]
            if any(code == INTERRUPTED for _, code in ran):
                return INTERRUPTED
            if failed:
                print(f"error: {', '.join(failed)} failed (see the output above)", file=sys.stderr)
                return 1
            rec_dir = (Path(out).resolve() / "records") if out else records_dir()
            verdicts.extend(evaluate(claim, load_records(c.id, rec_dir)) for c, _ in ran for claim in c.claims)
            continue
        for chapter, mine in plans:
            if seed is not None:
                mine = {**mine, "seed": seed}
            print(f"[run] {chapter.id}: executing {chapter.path} with {mine or 'default parameters'}", flush=True)
            try:
                run = execute(chapter, mine, out_dir=out, timeout=args.timeout, verbose=args.verbose,
                              smoke=args.smoke)
            except ChapterInterrupted as err:
                print(f"[run] {err}", file=sys.stderr, flush=True)
                return INTERRUPTED
            except Exception as err:  # papermill's execution error carries the failing cell's traceback
                print(f"error: {chapter.id} failed: {err.__class__.__name__}: {str(err)[-3000:]}", file=sys.stderr)
                return 1
            status = "within" if run.wall_s <= chapter.budget_ci_s else "OVER"
            budget = f" ({status} the ci budget of {chapter.budget_ci_s} s)" if run.records["meta"]["profile"] == "ci" else ""
            print(f"[run] {chapter.id}: done in {run.wall_s:.1f} s{budget}; notebook {run.notebook}", flush=True)
            for r in run.results:
                print("    " + _verdict_line(r))
            verdicts.extend(run.results)
    if seeds is not None:
        print(f"[run] records of each seed in {(args.out or BUILD_DIR / 'seeds')}/seed-<k>/records; "
              f"`lowrank-book report --records {args.out or BUILD_DIR / 'seeds'}` shows each claim per seed")
    if args.build and _build() != 0:
        return 1
    bad = [r for r in verdicts if not r.ok]
    if bad:
        print(f"[run] {len(bad)} of {len(verdicts)} claims did not pass: " + ", ".join(r.claim.id for r in bad))
        if args.strict:
            return CLAIMS_FAILED
    return 0


def _verdict_line(r) -> str:
    why = f" ({r.reason})" if r.reason else f" ({r.claim.check.describe()})"
    return f"[{r.status}] {r.claim.id} ({r.claim.kind}): {r.value!r}{why}"


def _report(records: Path | None, markdown: Path | None = None) -> int:
    try:
        if markdown is not None and not Path(markdown).expanduser().absolute().parent.is_dir():
            raise FileNotFoundError(f"--markdown: allowed values are a file in an existing folder; "
                                    f"{str(Path(markdown).parent)!r} is not a folder")
        if records is not None and seed_folders(records):
            per_seed = collect_seeds(records)
            rows = seeds_table(per_seed)
            for row in rows:
                print(f"[{row['stability']}] {row['claim']} ({row['kind']}): "
                      + "; ".join(f"{k}: {v}" for k, v in row.items() if k.startswith("seed ")))
            unstable = [r["claim"] for r in rows if not r["stable"]]
            print(f"{len(rows)} claims at seeds {', '.join(map(str, per_seed))}: "
                  f"{len(rows) - len(unstable)} with one verdict at every seed"
                  + (f"; the verdict changes between seeds for {', '.join(unstable)}" if unstable else ""))
            if markdown:
                Path(markdown).write_text(seeds_markdown(rows) + "\n")
                print(f"[report] the seeds table is in {markdown}")
            return 0
        if markdown:
            raise FileNotFoundError("--markdown writes the seeds table of a `run --seeds` folder; "
                                    f"{str(records)!r} holds no seed-<k> folders")
        why = records_folder_problem(records if records is not None else records_dir())
        if why:
            raise FileNotFoundError(f"{why}; `lowrank-book run CHAPTER --out DIR` writes records to DIR/records"
                                    + ("" if records is not None else " (or run without --out for _build/records)"))
        results, _ = collect(records)
    except FileNotFoundError as err:
        print(f"error: {err}", file=sys.stderr)
        return USAGE
    ran = [r for r in results if r.status != "not run" or _chapter_ran(r, results)]
    for r in ran:
        print(_verdict_line(r))
    idle = sorted({r.claim.chapter for r in results} - {r.claim.chapter for r in ran})
    if idle:
        n_idle = sum(r.claim.chapter in idle for r in results)
        print(f"not run: {n_idle} claims of {len(idle)} chapters ({', '.join(idle)})")
    print(f"{len(ran)} claims of the chapters that ran: {tally(counts(ran)) if ran else 'none'}")
    return 0


def _chapter_ran(result, results) -> bool:
    """Whether the claim's chapter wrote a record (some claim of it was decided or is undecided)."""
    return any(r.claim.chapter == result.claim.chapter and r.status != "not run" for r in results)


def _plan(args: argparse.Namespace) -> int:
    try:
        given = parameters_given(args)
        if args.smoke and given.get("profile") != "paper":
            raise ParameterError("--smoke plans the paper profile at small sizes: give --profile paper")
        if args.gpu and (args.gpu[0] <= 0 or args.gpu[1] <= 0):
            raise ParameterError(f"--gpu: allowed values are a memory in GB > 0 and a throughput in TFLOP/s > 0; "
                                 f"got {args.gpu[0]:g} {args.gpu[1]:g}")
        selected = book_chapters() if args.all else [find_chapter(ref) for ref in args.chapters]
        planned = []
        for chapter in selected:
            mine = {k: v for k, v in given.items() if k in chapter.spec.names} if args.all else dict(given)
            if args.smoke:
                mine = chapter.with_smoke(mine)
            planned.append((chapter, chapter.resolve(mine)))  # no preflight: plan for a device this machine lacks
        if args.host_gb is not None and not args.gpu:
            raise ParameterError("--host-gb describes the host of a GPU planned with --gpu MEMORY_GB TFLOPS; "
                                 "without --gpu the plan is for this machine")
        if args.gpu:
            cpu = this_device("cpu")
            if args.host_gb is not None:
                if not args.host_gb > 0:
                    raise ParameterError(f"--host-gb: allowed values are gigabytes > 0; got {args.host_gb:g}")
                cpu = dataclasses.replace(cpu, name=f"a host with {args.host_gb:g} GB (stated)",
                                          memory_bytes=args.host_gb * 1e9)
            device = named_gpu(*args.gpu, host=cpu)
        else:
            wants_cuda = any(values["device"] == "cuda" for _, values in planned)
            import torch

            if wants_cuda and not torch.cuda.is_available():
                raise ParameterError("-p device cuda: this machine has no GPU; plan for one with --gpu MEMORY_GB TFLOPS")
            device = this_device(planned[0][1]["device"] if planned else "auto")
    except (ParameterError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return USAGE
    for chapter, values in planned:
        for line in plan_lines(chapter.id, heavy_steps(chapter, values), device):
            print(line)
    return 0


def _diff(args: argparse.Namespace) -> int:
    records = args.records or records_dir()
    reference = args.reference or REFERENCE_DIR
    try:
        if args.accept:
            written = accept(records, reference, chapters_expected=list(chapter_sources()))
            print(f"[diff] the reference in {reference} now holds the records and figures of {len(written)} "
                  f"chapters from {records}; commit it to publish")
            return 0
        comparison = compare(records, reference)
    except ReferenceError as err:
        print(f"error: {err}", file=sys.stderr)
        return USAGE
    for d in comparison.parameters:
        print(f"{d.chapter}: this run's {d.what} is {d.run!r}; the reference's is {d.reference!r} (still compared)")
    for d in comparison.differences:
        print(d.line())
    if comparison.not_run:
        print(f"not in this run (not compared): {', '.join(comparison.not_run)}")
    print(comparison.summary())
    return 0 if comparison.ok else DIFFERS


def _build() -> int:
    try:
        index = build_html()
    except (RuntimeError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"[run] the book is built: open {index}")
    return 0


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    try:
        return _main(argv, prog)
    except KeyboardInterrupt:  # between chapters, or while building: one line, no traceback
        print(f"[{prog}] interrupted", file=sys.stderr, flush=True)
        return INTERRUPTED


def _main(argv: list[str] | None, prog: str) -> int:
    args = _parser(prog).parse_args(argv)
    try:
        return _command(args)
    except ChapterDeclarationError as err:  # a declaration the command read disagrees with its notebook
        print(f"error: {err}", file=sys.stderr)
        return 1


def _command(args: argparse.Namespace) -> int:
    """The command, reading only the declarations it needs: ``list``, ``check`` and ``build`` the whole book
    (``check`` with the validators the declarations name in the library), ``run`` and ``plan`` the chapters
    they name, ``report`` every claim, ``diff`` the chapters it compares."""
    if args.command == "list":
        _list()
        return 0
    if args.command == "check":
        book = discover()
        claims = sum(len(c.claims) for c in book.values())
        print(f"the book agrees with itself: {len(book)} chapters, {claims} claims, every claim's record written")
        return 0
    if args.command == "build":
        chapters()  # the book's parts agree before it is built
        return _build()
    if args.command == "report":
        return _report(args.records, args.markdown)
    if args.command == "diff":
        return _diff(args)
    if args.command == "plan":
        return _plan(args)
    return _run(args)


if __name__ == "__main__":
    sys.exit(main())
