"""The runner refuses bad parameters before any cell runs, with a message naming them."""
import subprocess
import sys
import time

import pytest

from lib import REPO_ROOT
from lib.book import is_notebook, source_path, toc_files
from lib.params import ParameterError
from lib.profiles import chapters
from lib.run import book_chapters, check_parameters, find_chapter, read_notebook


def run_cli(*args):
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "lib.run", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=120)
    return proc, time.perf_counter() - start


@pytest.mark.parametrize("args, message", [
    (["intro", "-p", "seeed", "1"], "unknown parameter 'seeed'; this chapter's parameters are: profile, seed"),
    (["intro", "-p", "seed", "abc"], "parameter 'seed': allowed values are int >= 0; got 'abc' (str)"),
    (["intro", "-p", "profile", "cpi"], "parameter 'profile': allowed values are one of 'ci', 'paper'; got 'cpi'"),
    (["intro", "-p", "train_steps", "0"], "parameter 'train_steps'"),
    (["intro", "-p", "model_sizes", "['p-huge']"], "parameter 'model_sizes'"),
    (["--all", "-p", "nonsense", "1"], "no chapter has the parameter(s) 'nonsense'"),
    (["chapters/missing.md"], "unknown chapter"),
])
def test_cli_refuses_before_running(args, message, tmp_path):
    proc, wall = run_cli(*args, "--out", str(tmp_path))
    assert proc.returncode == 1, proc.stderr
    assert message in proc.stderr
    assert not any(tmp_path.iterdir())  # nothing executed, nothing written
    assert wall < 60


def test_list_shows_parameters():
    proc, _ = run_cli("--list")
    assert proc.returncode == 0 and "intro" in proc.stdout and "train_steps" in proc.stdout


def test_parameters_cells_agree_with_specs_and_toc():
    toc = [str(source_path(e).relative_to(REPO_ROOT)) for e in toc_files() if is_notebook(source_path(e))]
    assert sorted(toc) == sorted(c.path for c in chapters().values())
    assert [c.id for c in book_chapters()][-1] == "report"  # the report reads the others' records
    for chapter in chapters().values():
        _, values = read_notebook(chapter)
        assert values == chapter.spec.defaults(), chapter.id
        assert find_chapter(chapter.path) is chapter
    with pytest.raises(ParameterError):
        check_parameters(chapters()["intro"], {"device": "tpu"})
