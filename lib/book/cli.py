"""The book's command line: ``lowrank-book`` (installed by ``pip install -e .``) or ``python -m lib``.

    lowrank-book list                                  # chapters in reading order, parameters, presets
    lowrank-book run modes -p seed 3                   # -p NAME VALUE (a Python literal, else a string)
    lowrank-book run intro -p model_sizes "['p-tiny']" --out /tmp/myrun
    lowrank-book run --all --profile ci --build        # what `make book` does
    lowrank-book report --records /tmp/myrun/records   # every claim's verdict from a records folder
    lowrank-book build                                 # render the executed chapters to HTML
    lowrank-book check                                 # do toc, notebooks and declarations agree?

Every value is checked against the chapter's declaration before any kernel starts; a bad
value or name exits with status 2 and one line naming the parameter, what is allowed and
what was given.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .chapters import ChapterDeclarationError, chapters
from .pages import build_html
from .parameters import ParameterError, parse_cli_value

PROG = "lowrank-book"
# exit status: 1 a chapter failed while running; 2 a bad command line (argparse's status too), a name or value
# refused before any work; 3 (with --strict) a claim did not pass
USAGE = 2
CLAIMS_FAILED = 3


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0],
                                     epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawTextHelpFormatter)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    commands.add_parser("list", help="chapters in reading order, their parameters and presets")
    commands.add_parser("check", help="check that _toc.yml, the notebooks and their declarations agree")
    commands.add_parser("build", help="build the HTML book from the executed chapters")
    report = commands.add_parser("report", help="every claim's verdict, decided from a folder of chapter records")
    report.add_argument("--records", type=Path, help="records folder (a `run --out DIR` writes DIR/records; "
                                                     "default: _build/records)")
    run = commands.add_parser("run", help="check parameters, execute chapters, decide their claims")
    run.add_argument("chapters", nargs="*", help="chapter ids or source paths")
    run.add_argument("--all", action="store_true", help="every chapter of _toc.yml, in reading order")
    run.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                     help="set a parameter (a Python literal, else a string); repeatable")
    run.add_argument("--profile", help="shorthand for -p profile VALUE")
    run.add_argument("--out", type=Path, help="write executed notebooks and records here instead of _build/")
    run.add_argument("--timeout", type=int, help="per-cell timeout in seconds")
    run.add_argument("--build", action="store_true", help="build the HTML book afterwards")
    run.add_argument("--strict", action="store_true", help="exit 3 if any claim fails or is not decided")
    run.add_argument("--verbose", action="store_true", help="stream cell output")
    return parser


def _list() -> None:
    for chapter in chapters().values():
        print(f"{chapter.id}: {chapter.title}  ({chapter.path}, declared in {chapter.declaration}; "
              f"ci budget {chapter.budget_ci_s} s; {len(chapter.claims)} claims)")
        for p in chapter.spec.params:
            print(f"    {p.name} = {p.default!r}: {p.describe()}. {p.help}")
        for profile, preset in chapter.presets.items():
            print(f"    preset {profile}: {preset}")


def _run(args: argparse.Namespace) -> int:
    from .runner import execute, plan

    given = {name: parse_cli_value(value) for name, value in args.parameter}
    if args.profile is not None:
        given["profile"] = args.profile
    if not args.chapters and not args.all:
        print("error: name at least one chapter (or --all); `lowrank-book list` shows them", file=sys.stderr)
        return USAGE
    try:
        plans = plan(args.chapters, given, every=args.all)
    except (ParameterError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return USAGE

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
            print(f"    [{r.status}] {r.claim.id}: {r.value!r} ({r.claim.check.describe()})")
        verdicts.extend(run.results)
    if args.build and _build() != 0:
        return 1
    bad = [r for r in verdicts if not r.ok]
    if bad:
        print(f"[run] {len(bad)} of {len(verdicts)} claims did not pass: " + ", ".join(r.claim.id for r in bad))
        if args.strict:
            return CLAIMS_FAILED
    return 0


def _report(records: Path | None) -> int:
    from .report import collect, counts

    try:
        results, _ = collect(records)
    except FileNotFoundError as err:
        print(f"error: {err}", file=sys.stderr)
        return USAGE
    for r in results:
        print(f"[{r.status}] {r.claim.id} ({r.claim.kind}): {r.value!r} ({r.claim.check.describe()})")
    summary = "; ".join(f"{kind}: " + ", ".join(f"{n} {v}" for v, n in by.items())
                        for kind, by in counts(results).items())
    print(f"{len(results)} claims ({summary})")
    return 0


def _build() -> int:
    try:
        index = build_html()
    except (RuntimeError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"[run] the book is built: open {index}")
    return 0


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    args = _parser(prog).parse_args(argv)
    try:
        book = chapters()  # every command needs a book whose parts agree
    except ChapterDeclarationError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if args.command == "list":
        _list()
        return 0
    if args.command == "check":
        claims = sum(len(c.claims) for c in book.values())
        print(f"the book agrees with itself: {len(book)} chapters, {claims} claims, every claim's record written")
        return 0
    if args.command == "build":
        return _build()
    if args.command == "report":
        return _report(args.records)
    return _run(args)


if __name__ == "__main__":
    sys.exit(main())
