"""The way back to the papers: references.bib, the chapters' citations and the citation files.

references.bib holds the four papers the book reproduces (with their arXiv identifiers) and every
work a chapter cites with a ``{cite...}`key``` role; each chapter cites the paper(s) it reproduces
near its top; CITATION.cff names the same four papers. A citation key missing from references.bib
would be a warning in the build (and the -W build fails on it): this test names it first.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from pybtex.database import parse_file
from sphinxcontrib.bibtex.citation_target import parse_citation_targets

from lib.book.pages import source_path, toc_files

REPO_ROOT = Path(__file__).resolve().parents[2]
BIB = REPO_ROOT / "references.bib"

#: The papers the book reproduces: key -> arXiv identifier.
REPRODUCED = {
    "chen2025modes": "2504.18048",
    "golowich2026sequences": "2510.24966",
    "thrampoulidis2024implicit": "2402.18551",
    "zhao2024implicit": "2408.15417",
}

#: How far into a chapter (lines of its source, front matter included) its first citation must be.
FIRST_LINES = 40

#: A MyST citation role, ``{cite}`k` ``, ``{cite:t}`k1,k2` `` or ``{cite:p}`{see}k{p. 3}` ``.
CITE_ROLE = re.compile(r"\{cite(?::[a-z]+)?\}`([^`]*)`")


def cited_keys(text: str) -> list[str]:
    """The keys of every citation role in ``text``, in order, read as sphinxcontrib-bibtex reads them
    (pre- and post-texts in braces dropped; a malformed role is a ValueError)."""
    return [target.key for body in CITE_ROLE.findall(text) for target in parse_citation_targets(body)]


def missing_keys(texts: dict[str, str], known: set[str]) -> list[str]:
    """``"path: key"`` for each citation in ``texts`` (path -> text) whose key is not in ``known``."""
    return [f"{path}: {key}" for path, text in texts.items() for key in cited_keys(text) if key not in known]


def uncited_chapters(pages: dict[str, str], known: set[str], first_lines: int = FIRST_LINES) -> list[str]:
    """The pages (toc entry -> text) with no citation of a known key in their first lines."""
    return [page for page, text in pages.items()
            if not any(key in known for key in cited_keys("\n".join(text.splitlines()[:first_lines])))]


@pytest.fixture(scope="module")
def bibliography():
    return parse_file(str(BIB), bib_format="bibtex")


@pytest.fixture(scope="module")
def bib_keys(bibliography) -> set[str]:
    return set(bibliography.entries)


def chapter_sources() -> dict[str, str]:
    paths = sorted((REPO_ROOT / "chapters").glob("*.md")) + sorted((REPO_ROOT / "chapters" / "appendix").glob("*.md"))
    return {str(p.relative_to(REPO_ROOT)): p.read_text(encoding="utf-8") for p in paths}


@pytest.mark.parametrize("key, arxiv", sorted(REPRODUCED.items()))
def test_the_reproduced_papers_are_in_the_bibliography_with_their_arxiv_ids(bibliography, key, arxiv):
    assert key in bibliography.entries, f"references.bib has no entry {key!r}"
    fields = bibliography.entries[key].fields
    assert fields.get("eprint") == arxiv, f"{key}: eprint {fields.get('eprint')!r}, expected {arxiv}"
    assert fields.get("archivePrefix") == "arXiv", f"{key}: archivePrefix should be arXiv"
    assert fields.get("url") == f"https://arxiv.org/abs/{arxiv}", f"{key}: url {fields.get('url')!r}"


def test_every_entry_has_authors_title_and_year(bibliography):
    for key, entry in bibliography.entries.items():
        assert entry.persons.get("author"), f"{key}: no author"
        assert entry.fields.get("title") and re.fullmatch(r"(19|20)\d\d", entry.fields.get("year", "")), \
            f"{key}: title and a four-digit year are needed"
        if "eprint" in entry.fields:
            assert entry.fields["url"] == f"https://arxiv.org/abs/{entry.fields['eprint']}", f"{key}: url and eprint disagree"


def test_every_cited_key_is_in_the_bibliography(bib_keys):
    sources = chapter_sources()
    assert set(REPRODUCED) <= {key for text in sources.values() for key in cited_keys(text)}, \
        "a paper the book reproduces is cited by no chapter"
    missing = missing_keys(sources, bib_keys)
    assert not missing, "cited but not in references.bib: " + "; ".join(missing)


def test_a_key_missing_from_the_bibliography_is_named():
    texts = {"chapters/x.md": "As {cite:t}`chen2025modes` and {cite:p}`{see}nosuchkey2099{, §2}, chen2025modes` say."}
    assert cited_keys(texts["chapters/x.md"]) == ["chen2025modes", "nosuchkey2099", "chen2025modes"]
    assert missing_keys(texts, {"chen2025modes"}) == ["chapters/x.md: nosuchkey2099"]
    assert missing_keys(texts, {"chen2025modes", "nosuchkey2099"}) == []


def test_every_chapter_cites_its_papers_near_the_top(bib_keys):
    pages = {page: source_path(page).read_text(encoding="utf-8")
             for page in toc_files() if not page.startswith("chapters/appendix/")}
    assert len(pages) >= 10
    uncited = uncited_chapters(pages, bib_keys)
    assert not uncited, f"no citation in the first {FIRST_LINES} lines of: {', '.join(uncited)}"
    assert uncited_chapters({"chapters/x": "# X\n\nNo citation here.\n"}, bib_keys) == ["chapters/x"]
    late = "# X\n" + "\n" * FIRST_LINES + "{cite:t}`chen2025modes`\n"
    assert uncited_chapters({"chapters/x": late}, bib_keys) == ["chapters/x"]


def test_the_bibliography_page_and_config_use_references_bib():
    config = yaml.safe_load((REPO_ROOT / "_config.yml").read_text())
    assert config.get("bibtex_bibfiles") == ["references.bib"]
    assert "chapters/appendix/bibliography" in toc_files()
    page = source_path("chapters/appendix/bibliography").read_text(encoding="utf-8")
    assert re.search(r"^```\{bibliography\}", page, re.M), "the bibliography page has no {bibliography} directive"


def test_citation_cff_names_the_reproduced_papers():
    cff = yaml.safe_load((REPO_ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["type"] == "software" and cff["license"] == "MIT"
    config = yaml.safe_load((REPO_ROOT / "_config.yml").read_text())
    assert cff["title"] == config["title"]
    urls = {ref["url"] for ref in cff["references"]}
    assert urls == {f"https://arxiv.org/abs/{arxiv}" for arxiv in REPRODUCED.values()}
    assert all(ref["type"] == "article" and ref["authors"] and ref["year"] for ref in cff["references"])
    assert (REPO_ROOT / "LICENSE").read_text().startswith("MIT License")
