"""The reproduction report: every registered claim, decided from the executed chapters' records.

Nothing here is typed by hand: the rows come from the chapters' declarations
(:func:`lib.book.chapters.all_claims`), the values from ``_build/records/<chapter>.json``, the
verdicts from :func:`lib.book.claims.evaluate`. Another records folder (a run with ``--out``) is
read with ``lowrank-book report --records DIR`` or the report chapter's ``records_dir``.
"""
from __future__ import annotations

from pathlib import Path

from .chapters import all_claims
from .claims import Result, evaluate
from .records import load_records, records_dir


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


def _fmt(value) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown_table(results: list[Result], chapter_docs: dict[str, str]) -> str:
    """A MyST table: id, statement, source, paper value, our value, check, verdict, chapter link."""
    mark = {"pass": "✅ pass", "fail": "❌ fail", "not run": "⚪ not run"}
    lines = ["| id | claim | source | paper | ours | check | verdict | chapter |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        c = r.claim
        doc = chapter_docs.get(c.chapter)
        link = f"{{doc}}`{c.chapter} <{doc}>`" if doc else c.chapter
        lines.append("| " + " | ".join(_cell(x) for x in (
            f"`{c.id}`", c.statement, c.source, c.paper_value or "—", _fmt(r.value),
            c.check.describe(), mark[r.status], link)) + " |")
    return "\n".join(lines)


def runs_table(meta: dict[str, dict]) -> str:
    """One row per executed chapter: profile, seed, device, wall time, versions."""
    lines = ["| chapter | profile | seed | device | wall time (s) | ci budget (s) | torch | finished |",
             "|---|---|---|---|---|---|---|---|"]
    for chapter, m in sorted(meta.items()):
        lines.append("| " + " | ".join(_cell(x) for x in (
            chapter, m.get("profile"), m.get("seed"), m.get("device"), _fmt(m.get("wall_s")),
            m.get("budget_ci_s"), m.get("versions", {}).get("torch"), m.get("finished", "—"))) + " |")
    return "\n".join(lines)
