"""The first cell, ``cfg = setup("<chapter>")``, reads the notebook's parameters and refuses unknown ones."""
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from lib import REPO_ROOT
from lib.book import records
from lib.book.chapter_setup import notebook_parameters, setup
from lib.book.chapters import chapters
from lib.book.parameters import ParameterError

HILBERT = chapters()["hilbert"]
OWN_CELL = "\n".join(f"{name} = {value!r}" for name, value in HILBERT.spec.defaults().items())


def namespace(*cells, **values):
    """What a kernel holds after running ``cells``: IPython's input history ``In`` and the values."""
    return {"In": ["", *cells], **HILBERT.spec.defaults(), **values}


def test_reads_every_declared_parameter_after_papermills_cell():
    ns = namespace(OWN_CELL, "# Parameters\nseed = 3\nblock_length = 1\n", seed=3, block_length=1)
    assert notebook_parameters(HILBERT, ns) == {**HILBERT.spec.defaults(), "seed": 3, "block_length": 1}


@pytest.mark.parametrize("cells", [
    (OWN_CELL, "# Parameters\nsed = 3\n"),                        # papermill -p sed 3
    (OWN_CELL + "\nsed = 3",),                                     # the parameters cell edited by hand
    (OWN_CELL, "# Parameters\nprofile = 'paper'\nseeed = 1\n"),  # papermill with the profile and a typo
])
def test_refuses_a_name_the_chapter_does_not_declare(cells):
    with pytest.raises(ParameterError, match=r"unknown parameter '(sed|seeed)'.*did you mean 'seed'\?"):
        notebook_parameters(HILBERT, namespace(*cells))


def test_other_cells_and_older_runs_are_not_parameters():
    # an interactive session: later cells of literals, and an earlier run of the parameters cell with a typo
    ns = namespace(OWN_CELL + "\nsed = 3", OWN_CELL, "cfg = setup('hilbert')", "n = 10\nlabel = 'x'")
    assert notebook_parameters(HILBERT, ns)["seed"] == 0


def test_a_parameter_the_cells_did_not_assign_is_named():
    ns = namespace(OWN_CELL)
    del ns["mc_samples"]
    with pytest.raises(ParameterError, match="the parameters cell must assign mc_samples"):
        notebook_parameters(HILBERT, ns)


def test_setup_reads_the_callers_namespace_or_named_values(tmp_path, monkeypatch):
    monkeypatch.setenv(records.RECORDS_ENV, str(tmp_path))
    ns = namespace(OWN_CELL, "# Parameters\nseed = 4\n", seed=4, setup=setup)
    exec("cfg = setup('hilbert')", ns)  # as the first cell of the chapter runs it
    assert ns["cfg"].seed == 4 and ns["cfg"].alphabet_size == HILBERT.presets["ci"]["alphabet_size"]
    assert records.load_records("hilbert", tmp_path)["meta"]["parameters"]["seed"] == 4
    assert setup("hilbert", seed=5, profile="paper").block_length == HILBERT.presets["paper"]["block_length"]
    ns = namespace(OWN_CELL, "# Parameters\nsed = 4\n", setup=setup)
    with pytest.raises(ParameterError, match="unknown parameter 'sed'"):
        exec("cfg = setup('hilbert')", ns)


def test_plain_papermill_refuses_a_misspelt_parameter(tmp_path):
    """End to end: papermill injects ``sed = 3`` and the chapter's first cell stops with the name."""
    import jupytext
    import papermill

    nb = jupytext.read(REPO_ROOT / HILBERT.path)
    source = tmp_path / "hilbert.ipynb"
    nbformat.write(nb, source)
    with pytest.raises(papermill.PapermillExecutionError, match="unknown parameter 'sed'"):
        papermill.execute_notebook(str(source), str(tmp_path / "out.ipynb"), parameters={"sed": 3},
                                   cwd=str(REPO_ROOT / "chapters"), kernel_name="python3", progress_bar=False,
                                   execution_timeout=300)


def test_setup_checks_what_the_machine_must_provide_before_any_work(tmp_path, monkeypatch):
    import torch

    monkeypatch.setenv(records.RECORDS_ENV, str(tmp_path))
    with pytest.raises(ParameterError, match=r"parameter 'corpus'.*got '/no/such/texts' \(str\): no such file"):
        setup("modes", corpus="/no/such/texts")
    (tmp_path / "texts.txt").write_text("Some text.\n")
    assert setup("modes", corpus=str(tmp_path / "texts.txt")).corpus == str(tmp_path / "texts.txt")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ParameterError, match=r"parameter 'device'.*got 'cuda'.*no CUDA GPU"):
        setup("hilbert", device="cuda")
    assert setup("hilbert", device="cpu").torch_device.type == "cpu"


def papermill_cli(tmp_path, *parameters):
    """The README's command for plain papermill: jupytext turns the MyST source into .ipynb, papermill runs it."""
    bin_ = Path(sys.executable).parent
    source = tmp_path / "hilbert.ipynb"
    subprocess.run([bin_ / "jupytext", "--to", "ipynb", REPO_ROOT / HILBERT.path, "-o", source], check=True,
                   capture_output=True, timeout=60)
    env = {**os.environ, records.RECORDS_ENV: str(tmp_path / "records")}
    return subprocess.run([bin_ / "papermill", source, tmp_path / "out.ipynb", *parameters], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=600, env=env)


def test_plain_papermill_cli_refuses_a_misspelt_parameter(tmp_path):
    proc = papermill_cli(tmp_path, "-p", "sed", "3")
    assert proc.returncode != 0
    assert ("ParameterError: unknown parameter 'sed'; this chapter's parameters are: profile, seed, device"
            in proc.stderr) and "(did you mean 'seed'?)" in proc.stderr


@pytest.mark.slow
def test_plain_papermill_cli_runs_a_chapter_with_a_parameter(tmp_path):
    proc = papermill_cli(tmp_path, "-p", "seed", "3")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert records.load_records("hilbert", tmp_path / "records")["meta"]["seed"] == 3


def test_one_parameters_cell_is_shown(tmp_path):
    """The rendered page shows papermill's injected cell only when it changes a default, folded."""
    import nbformat

    from lib.book.runner import show_one_parameters_cell

    def notebook(injected):
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell('profile = "ci"\nseed = 0', metadata={"tags": ["parameters"]}),
                    nbformat.v4.new_code_cell(f"# Parameters\n{injected}\n", metadata={"tags": ["injected-parameters"]}),
                    nbformat.v4.new_code_cell("x = 1")]
        path = tmp_path / "nb.ipynb"
        nbformat.write(nb, path)
        show_one_parameters_cell(path, "chapters/x.md")
        return [c.metadata.get("tags", []) for c in nbformat.read(path, as_version=4).cells], path

    tags, _ = notebook('profile = "ci"')
    assert tags == [["parameters", "hide-input"], ["injected-parameters", "remove-cell"], []]
    tags, path = notebook("seed = 3")
    assert tags == [["parameters", "remove-cell"], ["injected-parameters", "hide-input"], []]
    shown = nbformat.read(path, as_version=4).cells[1].source
    assert shown.startswith("# Parameters of this run (the defaults are in chapters/x.md)") and "seed = 3" in shown


def test_a_published_notebook_names_no_machine_path(tmp_path):
    """papermill's input and output paths (a temporary folder, the build folder) become repository paths."""
    import json

    import nbformat

    from lib import REPO_ROOT
    from lib.book.runner import without_machine_paths

    nb = nbformat.v4.new_notebook()
    nb.metadata["papermill"] = {"input_path": "/tmp/tmpab12/modes.ipynb", "output_path": f"{tmp_path}/src/modes.ipynb",
                                "parameters": {"seed": 3}}
    nb.cells = [nbformat.v4.new_code_cell("x = 1")]
    path = tmp_path / "modes.ipynb"
    nbformat.write(nb, path)
    for source in ("chapters/modes.md", str(REPO_ROOT / "chapters" / "modes.md")):
        without_machine_paths(path, source)
        meta = nbformat.read(path, as_version=4).metadata["papermill"]
        assert (meta["input_path"], meta["output_path"]) == ("chapters/modes.md", "chapters/modes.ipynb")
        assert meta["parameters"] == {"seed": 3}
        assert "/tmp" not in json.dumps(meta) and str(REPO_ROOT) not in json.dumps(meta)
