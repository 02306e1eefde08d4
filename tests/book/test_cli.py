"""The command line refuses bad parameters before any cell runs, with a message naming them."""
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lib import REPO_ROOT
from lib.book.chapters import chapters
from lib.book.pages import is_notebook, source_path, toc_files
from lib.book.parameters import ParameterError
from lib.book.runner import book_chapters, check_parameters, find_chapter, read_notebook


def run_cli(*args, command=(sys.executable, "-m", "lib")):
    start = time.perf_counter()
    proc = subprocess.run([*command, *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    return proc, time.perf_counter() - start


@pytest.mark.parametrize("args, message", [
    (["intro", "-p", "seeed", "1"], "unknown parameter 'seeed'; this chapter's parameters are: profile, seed"),
    (["intro", "-p", "sed", "1"], "(did you mean 'seed'?)"),
    (["intro", "-p", "seed", "abc"], "parameter 'seed': allowed values are int >= 0; got 'abc' (str)"),
    (["intro", "-p", "profile", "cpi"], "parameter 'profile': allowed values are one of 'ci', 'paper'; got 'cpi'"),
    (["intro", "-p", "train_steps", "0"], "parameter 'train_steps'"),
    (["intro", "-p", "model_sizes", "['p-huge']"], "parameter 'model_sizes'"),
    (["--all", "-p", "nonsense", "1"], "no chapter has the parameter(s) 'nonsense'"),
    (["chapters/missing.md"], "unknown chapter"),
    (["modse"], "unknown chapter 'modse' (did you mean 'modes'?)"),
])
def test_cli_refuses_before_running(args, message, tmp_path):
    proc, wall = run_cli("run", *args, "--out", str(tmp_path))
    assert proc.returncode == 1, proc.stderr
    assert message in proc.stderr
    assert not any(tmp_path.iterdir())  # nothing executed, nothing written
    assert wall < 60


def test_list_shows_parameters_in_reading_order():
    proc, _ = run_cli("list")
    assert proc.returncode == 0 and "intro" in proc.stdout and "train_steps" in proc.stdout
    heads = [line.split(":")[0] for line in proc.stdout.splitlines() if not line.startswith(" ")]
    assert heads == [c.id for c in book_chapters()]


def test_installed_console_script_is_the_same_command():
    """`pip install -e .` installs `lowrank-book` beside the interpreter (what the README and Makefile use)."""
    script = Path(sys.executable).parent / "lowrank-book"
    assert script.is_file(), "run `pip install -e .` (make setup) to install the console script"
    proc, _ = run_cli("check", command=(str(script),))
    assert proc.returncode == 0 and "the book agrees with itself" in proc.stdout, proc.stderr
    proc, _ = run_cli("run", "intro", "-p", "seeed", "1", command=(str(script),))
    assert proc.returncode == 1 and "unknown parameter 'seeed'" in proc.stderr


def test_a_command_is_required():
    proc, _ = run_cli()
    assert proc.returncode == 2 and "COMMAND" in proc.stderr
    proc, _ = run_cli("run")
    assert proc.returncode == 1 and "name at least one chapter" in proc.stderr


def test_parameters_cells_agree_with_declarations_and_toc():
    toc = [str(source_path(e).relative_to(REPO_ROOT)) for e in toc_files() if is_notebook(source_path(e))]
    assert toc == [c.path for c in chapters().values()]  # every listed notebook is a chapter, in order
    assert [c.id for c in book_chapters()][-1] == "report"  # the report reads the others' records
    for chapter in chapters().values():
        assert read_notebook(chapter).cells
        assert find_chapter(chapter.path) is chapter
    with pytest.raises(ParameterError):
        check_parameters(chapters()["intro"], {"device": "tpu"})
