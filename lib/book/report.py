"""The reproduction report: every registered claim, decided from the executed chapters' records.

Nothing here is typed by hand: the rows come from the chapters' declarations
(:func:`lib.book.chapters.all_claims`), the values from ``_build/records/<chapter>.json``, the
verdicts from :func:`lib.book.claims.evaluate`. Another records folder (a run with ``--out``) is
read with ``lowrank-book report --records DIR`` or the report chapter's ``records_dir``.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from . import tables
from .chapters import all_claims, chapters, claim_sections
from .claims import INCOMPLETE, KINDS, NOT_REPRODUCED, REPRODUCES, UNDECIDED, Result, evaluate
from .records import RECORDS_ENV, load_records, records_dir
from .reference import REFERENCE_DIR, ReferenceError, compare


def records_folder(directory: Path | str | None = None) -> Path:
    """The records folder to read: ``directory`` (or, given a ``lowrank-book run --out DIR`` folder, its
    ``records/``), else the book's (``$BOOK_RECORDS_DIR`` or ``_build/records``).

    Raises FileNotFoundError for a given folder that does not exist, rather than reporting
    every claim "not run".
    """
    if not directory:
        return records_dir()
    directory = Path(directory).expanduser()
    if not directory.is_dir():
        raise FileNotFoundError(f"records folder {str(directory)!r} does not exist (a `lowrank-book run --out DIR` "
                                f"writes its records to DIR/records; the book's are in {records_dir()})")
    if not any(directory.glob("*.json")) and (directory / "records").is_dir():
        return directory / "records"
    return directory


def collect(directory: Path | None = None) -> tuple[list[Result], dict[str, dict]]:
    """Every claim's result and the metadata of each chapter's run (records from :func:`records_folder`)."""
    directory = records_folder(directory)
    claims = all_claims()
    records = {chapter: load_records(chapter, directory) for chapter in {c.chapter for c in claims}}
    results = [evaluate(c, records[c.chapter]) for c in claims]
    meta = {ch: rec["meta"] for ch, rec in records.items() if rec is not None}
    return results, meta


SEED_FOLDER = "seed-{seed}"  # `lowrank-book run --seeds`: one records folder per seed under the output folder


def seed_folders(directory: Path | str) -> dict[int, Path]:
    """The per-seed records folders of a ``run --seeds`` output (``seed-<k>/records`` or ``seed-<k>``), by seed."""
    found = {}
    for sub in Path(directory).expanduser().glob("seed-*"):
        tail = sub.name[len("seed-"):]
        if sub.is_dir() and tail.isdigit():
            found[int(tail)] = sub / "records" if (sub / "records").is_dir() else sub
    return dict(sorted(found.items()))


def collect_seeds(directory: Path | str) -> dict[int, list[Result]]:
    """Each seed's results (see :func:`seed_folders`), the claims of the chapters that ran at every seed."""
    folders = seed_folders(directory)
    if not folders:
        raise FileNotFoundError(f"{str(directory)!r} holds no seed-<k> folders (`lowrank-book run CHAPTER --seeds "
                                "0,1,2` writes them)")
    return {seed: collect(folder)[0] for seed, folder in folders.items()}


def stability(statuses: list[str]) -> str:
    """How a claim's verdict holds over seeds: ``5/5 pass``, or the counts of each verdict (most common first)."""
    n = len(statuses)
    by = {}
    for status in statuses:
        by[status] = by.get(status, 0) + 1
    return ", ".join(f"{k}/{n} {v}" for v, k in sorted(by.items(), key=lambda vk: -vk[1]))


def seeds_table(per_seed: dict[int, list[Result]]) -> list[dict]:
    """One row per claim whose chapter ran: its kind, verdict and value at every seed, and its stability."""
    seeds = list(per_seed)
    rows = []
    for i, first in enumerate(per_seed[seeds[0]]):
        results = [per_seed[s][i] for s in seeds]
        if all(r.status == "not run" for r in results):
            continue
        row = {"claim": first.claim.id, "kind": first.claim.kind}
        for seed, r in zip(seeds, results):
            row[f"seed {seed}"] = f"{r.status} ({_fmt(r.value)})"
        row["stability"] = stability([r.status for r in results])
        row["stable"] = len({r.status for r in results}) == 1
        rows.append(row)
    return rows


def seeds_markdown(rows: list[dict]) -> str:
    """The seeds table as Markdown: every must-hold and consistency claim, then the findings
    (those whose verdict changes between seeds named first)."""
    if not rows:
        return "(no claims of the chapters that ran)"
    headers = [h for h in rows[0] if h != "stable"]
    order = sorted(rows, key=lambda r: (r["kind"] == "finding", r["stable"]))
    return tables.markdown_table(headers, [[r[h] for h in headers] for r in order])


def _fmt(value) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.4g}"  # short enough for its column: a number is never broken across lines
    return str(value)


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


KIND_TITLES = {"must_hold": "Must hold", "consistency": "Consistency checks",
               "finding": "The papers' empirical findings"}
VERDICTS = {"must_hold": ("pass", "fail", UNDECIDED, INCOMPLETE, "not run"),
            "consistency": ("pass", "fail", UNDECIDED, INCOMPLETE, "not run"),
            "finding": (REPRODUCES, NOT_REPRODUCED, UNDECIDED, "invalid", INCOMPLETE, "not run")}


def counts(results: list[Result]) -> dict[str, dict[str, int]]:
    """Verdict counts per kind of claim: ``{kind: {verdict: n}}`` (every verdict of the kind listed)."""
    return {kind: {v: sum(r.claim.kind == kind and r.status == v for r in results) for v in VERDICTS[kind]}
            for kind in KINDS}


def claim_links(built_from_notebooks: bool | None = None) -> dict[str, str]:
    """A MyST link per claim to the section of its chapter where its value is measured.

    The link names the chapter's source file, which is the executed notebook
    (``.ipynb``) when the book is built by ``lowrank-book`` (whose runner sets
    ``$BOOK_RECORDS_DIR``), and the chapter's own source when Jupyter Book executes the
    sources itself. Anchors are MyST heading anchors, so a wrong one fails the build.
    """
    if built_from_notebooks is None:
        built_from_notebooks = bool(os.environ.get(RECORDS_ENV))
    links = {}
    for chapter in chapters().values():
        page = chapter.path.rsplit(".", 1)[0]
        target = f"/{page}" + (".ipynb" if built_from_notebooks else "." + chapter.path.rsplit(".", 1)[1])
        for claim_id, (title, slug) in claim_sections(chapter).items():
            links[claim_id] = f"[{chapter.title} § {_cell(title).replace('[', '(').replace(']', ')')}]({target}#{slug})"
    return links


PUBLISHED_YES, PUBLISHED_NO = "yes", "no"


def against_reference(directory: Path | str | None = None, exclude: tuple[str, ...] = ("report",)
                      ) -> tuple[Any, str | None]:
    """The run's records compared with the published reference (:func:`lib.book.reference.compare`), the
    report itself left out (its record is being written as it compares): (comparison, None), or (None, why
    they cannot be compared)."""
    try:
        return compare(records_folder(directory), REFERENCE_DIR, exclude=exclude), None
    except (ReferenceError, FileNotFoundError) as err:
        return None, str(err)


def published(results: list[Result], comparison) -> dict[str, str]:
    """Per claim: whether its recorded value reproduces the published one ("yes", "no"), or "—" where it
    was not compared (no reference of this profile, a chapter that did not run, a timing)."""
    if comparison is None:
        return {}
    out = {}
    for r in results:
        if r.status in ("not run", INCOMPLETE) or r.claim.chapter in comparison.not_run:
            continue
        out[r.claim.id] = PUBLISHED_NO if comparison.moved(r.claim.chapter, r.claim.record) else PUBLISHED_YES
    return out


def published_summary(comparison) -> str:
    """One sentence: how many recorded numbers and figures reproduce the published values."""
    if comparison is None:
        return "not compared"
    values = comparison.values - sum(d.what.startswith("record ") for d in comparison.differences)
    figures = comparison.figures - comparison.figures_differing
    return (f"{values:,} of {comparison.values:,} recorded numbers and {figures} of {comparison.figures} figures "
            "reproduce the published values")


def markdown_table(results: list[Result], chapter_docs: dict[str, str], kind: str | None = None,
                   links: dict[str, str] | None = None, published_values: dict[str, str] | None = None) -> str:
    """A MyST table (a ``table`` directive of class ``claims-table``) that fits the page, verdict first:
    verdict, claim (statement, source, id and the check that decides it), ours, paper, whether our value
    reproduces the published one, and where it is measured (``links``: a link to the chapter's section,
    else ``chapter_docs``: the chapter's page).

    ``kind`` keeps the claims of one kind; in each chapter (reading order), problems are listed first.
    """
    order = {c: i for i, c in enumerate(chapters())}
    rows = [r for r in results if kind is None or r.claim.kind == kind]
    rows.sort(key=lambda r: (order.get(r.claim.chapter, len(order)), r.ok))  # stable: problems first
    lines = [":::{table}", ":class: claims-table", "",  # fits the page: _static/book.css sets its column widths
             "| verdict | claim | ours | paper | repro&shy;duces the pub&shy;lished value | measured in |",
             "|---|---|---|---|---|---|"]
    links, published_values = links or {}, published_values or {}
    for r in rows:
        c = r.claim
        doc = chapter_docs.get(c.chapter)
        where = links.get(c.id) or (f"{{doc}}`{c.chapter} <{doc}>`" if doc else c.chapter)
        verdict = f"**{r.status}**" if not r.ok else r.status
        why = f" ({_cell(r.reason)})" if r.reason and r.status == UNDECIDED else ""
        claim = f"{c.statement} ({breakable(c.source)}) <br>`{c.id}`: {c.check.describe()}"
        mark = published_values.get(c.id, "—")
        lines.append("| " + " | ".join(_cell(x) for x in (
            verdict + why, claim, _fmt(r.value), c.paper_value or "—",
            f"**{mark}**" if mark == PUBLISHED_NO else mark, where)) + " |")
    return "\n".join(lines + [":::"])


def breakable(source: str) -> str:
    """A claim's source with a line-break opportunity (``<wbr>``) after each dot or underscore of a dotted
    name (``lib.isan.rarebranchisan``), so that a long name wraps in the report's narrow column; a source
    holding code or maths is left as it is."""
    if "`" in source or "$" in source:
        return source
    return re.sub(r"(?<=[A-Za-z0-9][._])(?=[A-Za-z])", "<wbr>", source)


KIND_ANCHORS = {"must_hold": "must-hold", "consistency": "consistency-checks", "finding": "the-papers-empirical-findings"}


def summary_table(results: list[Result], published_values: dict[str, str] | None = None) -> str:
    """Counts per chapter (reading order) and kind, each linking to the kind's table, with a total row."""
    published_values = published_values or {}
    by_chapter = {cid: [r for r in results if r.claim.chapter == cid] for cid in chapters()}
    by_chapter = {cid: rs for cid, rs in by_chapter.items() if rs}

    def cell(rs: list[Result], kind: str) -> str:
        mine = [r for r in rs if r.claim.kind == kind]
        if not mine:
            return "—"
        tally = {v: n for v, n in counts(mine)[kind].items() if n}
        text = ", ".join(f"{n} {v}" for v, n in tally.items())
        return f"[{text}](#{KIND_ANCHORS[kind]})"

    def pub(rs: list[Result]) -> str:
        marks = [published_values[r.claim.id] for r in rs if r.claim.id in published_values]
        return f"{marks.count(PUBLISHED_YES)} of {len(marks)}" if marks else "—"

    lines = ["| chapter | must hold | consistency | findings | claims reproducing the published value |",
             "|---|---|---|---|---|"]
    for cid, rs in by_chapter.items():
        lines.append("| " + " | ".join([_cell(chapters()[cid].title)] + [cell(rs, k) for k in KINDS] + [pub(rs)]) + " |")
    lines.append("| " + " | ".join(["**all chapters**"] + [cell(results, k) for k in KINDS] + [pub(results)]) + " |")
    return "\n".join([":::{table}", ":class: summary-table", ""] + lines + [":::"])


def runs_table(meta: dict[str, dict]) -> str:
    """One row per executed chapter: profile, seed, device, wall time against the ci budget, when it finished
    (the package versions, the same for every chapter of a run, are in :func:`versions_line`)."""
    lines = ["| chapter | profile | seed | device | wall time (s) | ci budget (s) | finished |",
             "|---|---|---|---|---|---|---|"]
    for chapter, m in sorted(meta.items()):
        lines.append("| " + " | ".join(_cell(x) for x in (
            chapter, m.get("profile"), m.get("seed"), m.get("device"), _fmt(m.get("wall_s")),
            m.get("budget_ci_s"), str(m.get("finished", "—"))[:10])) + " |")
    return "\n".join(lines)


def versions_line(meta: dict[str, dict]) -> str:
    """The package versions the chapters ran with, once (each distinct set, if they differ)."""
    seen = []
    for m in meta.values():
        v = m.get("versions") or {}
        text = ", ".join(f"{k} {v[k]}" for k in sorted(v))
        if text and text not in seen:
            seen.append(text)
    return "; ".join(seen) or "—"
