"""The table of contents: its entries in reading order, their sources, which of them are notebooks; and the
fit-to-page check's old names (moved to lib.book.page_fit) still answering here."""
from lib.book import page_fit, pages


def test_toc_entries_are_read_in_order_with_their_sources(tmp_path):
    (tmp_path / "chapters").mkdir()
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: chapters/a\nparts:\n  - chapters:\n"
                                       "      - file: chapters/b\n        sections:\n          - file: chapters/c\n")
    (tmp_path / "chapters" / "a.md").write_text("# A\n")
    (tmp_path / "chapters" / "b.md").write_text("---\njupytext:\n  text_representation: {}\n---\n# B\n")
    (tmp_path / "chapters" / "c.ipynb").write_text("{}")
    assert pages.toc_files(tmp_path) == ["chapters/a", "chapters/b", "chapters/c"]
    paths = [pages.source_path(e, tmp_path) for e in pages.toc_files(tmp_path)]
    assert [p.name for p in paths] == ["a.md", "b.md", "c.ipynb"]
    assert [pages.is_notebook(p) for p in paths] == [False, True, True]


def test_the_fit_to_page_names_answer_from_their_old_module():
    for name in ("PageProblem", "page_problems", "equation_problems", "notebook_problems", "output_chars",
                 "equation_width", "OUTPUT_PADDING_PX"):
        assert getattr(pages, name) is getattr(page_fit, name)
