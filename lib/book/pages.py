"""The book's table of contents and the HTML build from already-executed chapters.

Chapters are executed once, by the runner (:mod:`lib.book.runner`), into a mirror of the book
(``_build/src``) that holds ``_config.yml`` with execution switched off, ``_toc.yml``
and each chapter as an executed ``.ipynb``. Jupyter Book then renders that mirror with
``-W -n --keep-going``: a warning or a broken reference fails the build, and nothing is
executed twice. (``jupyter-book build .`` on the sources also works and executes every
chapter itself, with the default parameters; ``_config.yml`` makes any cell error fatal.)

What a page shows that does not fit the reader's column is checked by :mod:`lib.book.page_fit`.
This module imports nothing of :mod:`lib.book`: the chapters' declarations (:mod:`lib.book.chapters`)
read the table of contents from here.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from .. import REPO_ROOT
from .moved import forward_moved

BUILD_DIR = REPO_ROOT / "_build"
MIRROR_DIR = BUILD_DIR / "src"
HTML_DIR = BUILD_DIR / "html"
SOURCE_SUFFIXES = (".md", ".ipynb")

# The fit-to-page check moved to lib.book.page_fit, which reads the toc from here: its old names answer on
# first use (an import of lib.book.page_fit here would close a cycle). Inside lib, import them from there.
__getattr__ = forward_moved(__name__, {name: "lib.book.page_fit" for name in (
    "OUTPUT_PADDING_PX", "MATHJAX_DISPLAY_PX", "MATHTEXT_TO_MATHJAX", "PageProblem", "output_char_px", "output_chars",
    "notebook_problems", "executed_notebooks", "page_problems", "equation_lines", "line_width", "equation_width",
    "display_equations", "equation_problems")})


def toc_files(root: Path = REPO_ROOT) -> list[str]:
    """Every file entry of ``_toc.yml`` (root first), in reading order, without suffix."""
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    files = [toc["root"]]

    def walk(node):
        if isinstance(node, dict):
            if "file" in node:
                files.append(node["file"])
            for key in ("parts", "chapters", "sections"):
                for child in node.get(key, []) or []:
                    walk(child)
        elif isinstance(node, list):
            for child in node:
                walk(child)

    walk(toc)
    return files


def source_path(entry: str, root: Path = REPO_ROOT) -> Path:
    """The source file of a toc entry (``chapters/intro`` → ``chapters/intro.md``)."""
    for suffix in SOURCE_SUFFIXES:
        path = root / f"{entry}{suffix}"
        if path.is_file():
            return path
    raise FileNotFoundError(f"_toc.yml lists {entry!r} but no {entry}.md or {entry}.ipynb exists")


def is_notebook(path: Path) -> bool:
    """A MyST Markdown file is an executable chapter when it has jupytext front matter."""
    if path.suffix == ".ipynb":
        return True
    head = path.read_text(encoding="utf-8")[:2000]
    return head.startswith("---") and "jupytext" in head.split("---", 2)[1]


def prepare_mirror() -> Path:
    """Write ``_build/src`` with the book's config (execution off), toc and static files."""
    MIRROR_DIR.mkdir(parents=True, exist_ok=True)
    config = yaml.safe_load((REPO_ROOT / "_config.yml").read_text())
    config.setdefault("execute", {})["execute_notebooks"] = "off"
    (MIRROR_DIR / "_config.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    shutil.copy2(REPO_ROOT / "_toc.yml", MIRROR_DIR / "_toc.yml")
    for path in (REPO_ROOT / "chapters").rglob("*"):
        rel = path.relative_to(REPO_ROOT)
        declaration = path.suffix == ".yml" and any(path.with_suffix(s).is_file() for s in SOURCE_SUFFIXES)
        if path.is_file() and not declaration and not (path.suffix in SOURCE_SUFFIXES and is_notebook(path)) \
                and ".ipynb_checkpoints" not in rel.parts:
            (MIRROR_DIR / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, MIRROR_DIR / rel)
    for extra in ("references.bib", "logo.png"):
        if (REPO_ROOT / extra).is_file():
            shutil.copy2(REPO_ROOT / extra, MIRROR_DIR / extra)
    if (REPO_ROOT / "_static").is_dir():  # the book's style sheets (Jupyter Book includes every _static/*.css)
        shutil.copytree(REPO_ROOT / "_static", MIRROR_DIR / "_static", dirs_exist_ok=True)
    return MIRROR_DIR


def executed_path(entry: str) -> Path:
    """Where the runner writes the executed notebook of a toc entry."""
    return MIRROR_DIR / f"{entry}.ipynb"


def build_html() -> Path:
    """Render the mirror to ``_build/html`` (warnings are errors). Returns the index page."""
    missing = [e for e in toc_files() if is_notebook(source_path(e)) and not executed_path(e).is_file()]
    if missing:
        raise FileNotFoundError("these chapters have not been executed yet (run `lowrank-book run --all`): "
                                + ", ".join(missing))
    prepare_mirror()
    cmd = [sys.executable, "-c", "from jupyter_book.cli.main import main; main()", "build", str(MIRROR_DIR), "--path-output", str(BUILD_DIR / "jb"),
           "--all", "-W", "-n", "--keep-going"]
    result = subprocess.run(cmd, cwd=REPO_ROOT)
    if result.returncode != 0:
        raise RuntimeError(f"the book build failed (exit {result.returncode}); see the warnings above")
    if HTML_DIR.exists():
        shutil.rmtree(HTML_DIR)
    shutil.copytree(BUILD_DIR / "jb" / "_build" / "html", HTML_DIR)
    return HTML_DIR / "index.html"
