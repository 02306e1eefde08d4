"""The command line refuses bad parameters before any cell runs, with a message naming them."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lib import REPO_ROOT
from lib.book.chapters import chapters
from lib.book.pages import is_notebook, source_path, toc_files
from lib.book.parameters import ParameterError
from lib.book.runner import absolute_paths, book_chapters, check_parameters, find_chapter, plan, read_notebook


def run_cli(*args, command=(sys.executable, "-m", "lib"), cwd=REPO_ROOT):
    start = time.perf_counter()
    proc = subprocess.run([*command, *args], cwd=cwd, capture_output=True, text=True, timeout=300)
    return proc, time.perf_counter() - start


BAD_INPUT = [
    (["intro", "hilbert", "--jobs", "0"], "--jobs: allowed values are an integer >= 1 (chapters at once); got 0"),
    (["intro", "hilbert", "--jobs", "2", "--verbose"], "--jobs and --verbose"),
    (["intro", "-p", "seeed", "1"], "unknown parameter 'seeed'; this chapter's parameters are: profile, seed"),
    (["intro", "-p", "sed", "1"], "(did you mean 'seed'?)"),
    (["intro", "-p", "seed", "abc"], "parameter 'seed': allowed values are int >= 0 <= 4294967295; got 'abc' (str)"),
    (["intro", "-p", "profile", "cpi"], "parameter 'profile': allowed values are one of 'ci', 'paper'; got 'cpi' (str) "
                                        "(did you mean 'ci'?)"),
    (["intro", "-p", "train_steps", "0"], "parameter 'train_steps': allowed values are int >= 1 or None (the profile's preset); got 0 (int)"),
    (["intro", "-p", "model_sizes", "['p-smal']"], "parameter 'model_sizes'"),
    (["intro", "-p", "model_sizes", "['p-smal']"], "(did you mean 'p-small'?)"),
    (["intro", "-p", "tokenizer", "bpe:abc"], "parameter 'tokenizer': allowed values are 'byte', 'bpe:<vocab size "
                                              "257..262144>'"),
    (["intro", "-p", "tokenizer", "bpe:abc"], "got 'bpe:abc' (str): the part after 'bpe:' must be an integer"),
    (["intro", "-p", "tokenizer", "bpe:12"], "the vocabulary size must be in [257, 262144]"),
    (["intro", "-p", "tokenizer", "hf:"], "a hub name must follow 'hf:'"),
    (["intro", "-p", "tokenizer", "./no/such/tokenizer"], "no such folder"),
    (["modes", "-p", "corpus", "/no/such/texts"], "parameter 'corpus': allowed values are 'default', a local "
                                                  ".txt/.md file or folder, or 'hf:<dataset>'"),
    (["modes", "-p", "corpus", "/no/such/texts"], "got '/no/such/texts' (str): no such file or folder"),
    (["modes", "-p", "max_corpus_mb", "0"], "parameter 'max_corpus_mb': allowed values are float >= 0.01 or None (the profile's preset); got 0.0"),
    (["--all", "-p", "nonsense", "1"], "no chapter has the parameter(s) 'nonsense'"),
    (["--all", "-p", "sede", "1"], "(did you mean 'seed'?)"),
    (["chapters/missing.md"], "unknown chapter"),
    (["modse"], "unknown chapter 'modse' (did you mean 'modes'?)"),
    (["hilbert", "--timeout", "-5"], "--timeout: allowed values are seconds > 0 (a per-cell limit); got -5"),
    (["hilbert", "--seeds", "0,a"], "--seeds: allowed values are comma-separated integers >= 0"),
    (["hilbert", "--seeds", "1,1"], "--seeds: each seed once"),
    (["hilbert", "--seeds", "0,1", "-p", "seed", "2"], "--seeds and -p seed"),
]


@pytest.mark.parametrize("args, message", BAD_INPUT)
def test_cli_refuses_before_running(args, message, tmp_path):
    """Each bad input: exit status 2, one line naming the parameter, what is allowed and what was given, before
    any kernel starts (nothing written, no "executing" line; the time it takes is measured in
    benchmarks/bench_cli.py, not here, so that a loaded machine cannot fail it)."""
    proc, _ = run_cli("run", *args, "--out", str(tmp_path))
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not any(tmp_path.iterdir())  # nothing executed, nothing written
    assert "executing" not in proc.stdout + proc.stderr


def wrong_inputs(tmp: Path) -> dict[str, Path]:
    """Folders and files a researcher might pass by mistake."""
    made = {}
    for name in ("empty", "binary", "latin1", "blank", "model", "tok", "records"):
        made[name] = tmp / name
        made[name].mkdir(parents=True)
    (made["binary"] / "data.txt").write_bytes(b"PK\x03\x04\0\0binary")
    (made["latin1"] / "good.txt").write_text("Some text.\n")
    (made["latin1"] / "notes.txt").write_bytes("café au lait\n".encode("latin-1"))
    (made["blank"] / "a.txt").write_text("\n\n")
    (made["model"] / "x.json").write_text("{}")
    (made["tok"] / "README").write_text("not a tokenizer")
    made["file"] = tmp / "a-file"
    made["file"].write_text("")
    return made


WRONG_RUNS = [  # (arguments with {name} for wrong_inputs' paths, the refusal's words)
    (["modes", "-p", "corpus", "{empty}"], "parameter 'corpus': allowed values are 'default', a local .txt/.md file "
                                          "or folder, or 'hf:<dataset>'"),
    (["modes", "-p", "corpus", "{empty}"], "holds no .txt or .md files"),
    (["modes", "-p", "corpus", "{binary}"], "data.txt' is binary, not text (a NUL byte at offset 4)"),
    (["modes", "-p", "corpus", "{latin1}"], "notes.txt' is not UTF-8 text (byte 0xe9 at offset 3)"),
    (["modes", "-p", "corpus", "{blank}"], "holds 1 .txt/.md files, all empty"),
    (["modes", "-p", "corpus", "{file}"], "is empty (no non-blank text)"),
    (["modes", "-p", "corpus", ""], "got '' (str): an empty name"),
    (["logit_rank", "-p", "hub_model", "/no/such/folder"], "parameter 'hub_model'"),
    (["logit_rank", "-p", "hub_model", "/no/such/folder"], "not 'suite' or a hub name 'org/name', and no such folder"),
    (["lenses", "-p", "hub_model", "{model}"], "holds no revision of a model"),
    (["intro", "-p", "tokenizer", "{tok}"], "holds no tokenizer (none of tokenizer.json"),
    (["intro", "-p", "tokenizer", "hf:{tok}"], "holds no tokenizer"),
    (["intro", "-p", "tokenizer", ""], "got '' (str): an empty name"),
    (["modes", "-p", "device", "cuda:7"], "parameter 'device': allowed values are one of 'auto', 'cpu', 'cuda'; got "
                                          "'cuda:7' (str) (did you mean 'cuda'?)"),
    (["modes", "--seeds", "-1"], "--seeds: allowed values are comma-separated integers >= 0"),
    (["hilbert", "--seeds", "0,4294967296"], "parameter 'seed': allowed values are int >= 0 <= 4294967295"),
    (["modes", "-p", "seed", "3", "-p", "seed", "4"], "-p seed: each parameter once; got it 2 times (3, 4)"),
    (["modes", "--profile", "ci", "-p", "profile", "paper"], "--profile and -p profile: give the profile once"),
    (["modes", "hilbert", "modes"], "chapters: each chapter once; modes named twice"),
    (["--all", "modes"], "--all runs every chapter; name chapters (modes) or give --all, not both"),
    (["report", "-p", "records_dir", "{empty}"], "parameter 'records_dir'"),
    (["report", "-p", "records_dir", "{empty}"], "holds no chapter records"),
]


@pytest.mark.parametrize("args, message", WRONG_RUNS, ids=[" ".join(a) for a, _ in WRONG_RUNS])
def test_wrong_inputs_are_refused_before_any_kernel_starts(args, message, tmp_path):
    """Inputs a researcher plausibly types by mistake: exit status 2, one line (the parameter, what is allowed,
    what was given), before any kernel starts and before anything is written."""
    made = wrong_inputs(tmp_path / "in")
    out = tmp_path / "out"
    proc, _ = run_cli("run", *[a.format(**made) for a in args], "--out", str(out))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message.format(**made) in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not out.exists() and "executing" not in proc.stdout + proc.stderr


def test_out_under_a_file_and_a_run_without_a_chapter_are_refused(tmp_path):
    (tmp_path / "a-file").write_text("")
    proc, _ = run_cli("run", "modes", "--out", str(tmp_path / "a-file" / "sub"))
    assert proc.returncode == 2 and proc.stderr.strip() == (
        f"error: --out: allowed values are a folder (existing or new); {str(tmp_path / 'a-file')!r}, on its path, "
        "is a file")
    proc, _ = run_cli("run", "--seeds", "0,1")
    assert proc.returncode == 2 and "name at least one chapter (or --all)" in proc.stderr


def test_report_and_diff_refuse_a_folder_without_records_of_the_book(tmp_path):
    """`report --records` on an empty folder, a file or records of no chapter of the book: exit 2 and one line
    (it said "0 claims" with exit 0); `diff` likewise."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "a-file").write_text("")
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "zz.json").write_text(json.dumps({"chapter": "zz", "values": {}, "meta": {}}))
    (tmp_path / "corrupt").mkdir()
    (tmp_path / "corrupt" / "hilbert.json").write_text('{"values": ')
    for folder, message in (("empty", "holds no chapter records (<chapter>.json)"),
                            ("a-file", "is a file, not a folder of chapter records"),
                            ("foreign", "holds records of zz, none of them a chapter of the book (intro, "),
                            ("corrupt", "is not valid JSON"), ("nowhere", "does not exist")):
        for command in ("report", "diff"):
            if (command, folder) == ("diff", "foreign"):  # the reference has none of its chapters
                message = "no chapter to compare: this run's records"
            proc, _ = run_cli(command, "--records", str(tmp_path / folder))
            assert proc.returncode == 2, (command, folder, proc.stdout, proc.stderr)
            assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, (command, proc.stderr)


def test_an_interrupt_before_the_first_record_leaves_the_incomplete_record_it_promises(tmp_path, monkeypatch):
    """Ctrl-C while the kernel starts (before the chapter's first record; simulated: papermill raises
    KeyboardInterrupt) writes the record the message promises, marked incomplete, so the report says
    "incomplete" for every claim instead of "not run"; a failure there leaves one too, saying "failed"."""
    import papermill

    from lib.book.claims import INCOMPLETE, evaluate
    from lib.book.records import load_records
    from lib.book.runner import ChapterInterrupted, execute

    hilbert = find_chapter("hilbert")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(papermill, "execute_notebook", interrupted)
    with pytest.raises(ChapterInterrupted, match="hilbert: interrupted before its first record; its record is marked "
                                                 "incomplete"):
        execute(hilbert, {"seed": 3}, out_dir=tmp_path / "run")
    record = load_records("hilbert", tmp_path / "run" / "records")
    assert record is not None and record["values"] == {}
    meta = record["meta"]
    assert meta["incomplete"] == "interrupted before its first record" and "finished" not in meta
    assert meta["profile"] == "ci" and meta["seed"] == 3 and meta["parameters_given"] == {"seed": 3}
    assert {evaluate(c, record).status for c in hilbert.claims} == {INCOMPLETE}
    proc, _ = run_cli("report", "--records", str(tmp_path / "run"))
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith("[")]
    assert len(lines) == len(hilbert.claims) and all(line.startswith("[incomplete] hilbert.") for line in lines)

    def failed(*args, **kwargs):
        raise RuntimeError("the kernel died")

    monkeypatch.setattr(papermill, "execute_notebook", failed)
    with pytest.raises(RuntimeError, match="the kernel died"):
        execute(hilbert, {}, out_dir=tmp_path / "failed")
    assert load_records("hilbert", tmp_path / "failed" / "records")["meta"]["incomplete"] == \
        "failed before its first record"


def test_list_and_a_refusal_start_within_2_s_of_cpu():
    """`list` reads every declaration and `run modes --seeds -1` none, and neither imports the library's
    validators, torch or matplotlib: both within 2 s of CPU time (about 1.1 and 0.4 s on the 2-core build
    machine while it ran other work; 5.2 and 5.0 s when every command read and checked the whole book)."""
    import resource

    for args, status in ((["list"], 0), (["run", "modes", "--seeds", "-1"], 2)):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc, _ = run_cli(*args)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        assert proc.returncode == status, proc.stderr
        assert cpu < 2.0, (args, cpu)


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has a GPU")
def test_out_naming_a_file_is_refused_before_running(tmp_path):
    target = tmp_path / "a-file"
    target.write_text("not a folder")
    proc, wall = run_cli("run", "hilbert", "--out", str(target))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "--out: allowed values are a folder (existing or new)" in proc.stderr and "executing" not in proc.stdout


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has a GPU")
def test_cli_refuses_cuda_without_a_gpu(tmp_path):
    proc, wall = run_cli("run", "hilbert", "-p", "device", "cuda", "--out", str(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: parameter 'device': allowed values are one of 'auto', 'cpu', 'cuda'; got "
                                  "'cuda' (str): ") and proc.stderr.endswith("; use 'auto' or 'cpu'\n")
    assert len(proc.stderr.splitlines()) == 1


def test_good_values_pass_the_same_checks(tmp_path, monkeypatch):
    """The other way round: the values the refusals above are next to pass the runner's checks (online: a hub
    name is checked for its form; offline, test_standins checks it against the local cache)."""
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    (tmp_path / "texts").mkdir()
    (tmp_path / "texts" / "a.txt").write_text("Some text.\n")
    (tmp_path / "texts" / "empty.md").write_text("")  # passed over beside a file with text
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "tokenizer.json").write_text("{}")  # what save_pretrained writes (its contents: the kernel's)
    intro, modes, hilbert = (chapters()[c] for c in ("intro", "modes", "hilbert"))
    for good in ({"seed": 1}, {"profile": "paper"}, {"train_steps": 1}, {"model_sizes": ["p-small"]},
                 {"tokenizer": "bpe:4096"}, {"tokenizer": "byte"}, {"tokenizer": "hf:EleutherAI/pythia-70m"},
                 {"tokenizer": str(tmp_path / "tok")}, {"device": "cpu"}, {"device": "auto"}):
        check_parameters(intro, good)
    for good in ({"corpus": str(tmp_path / "texts")}, {"corpus": str(tmp_path / "texts" / "a.txt")},
                 {"corpus": "default"}, {"corpus": "hf:monology/pile-uncopyrighted"}, {"max_corpus_mb": 0.01}):
        check_parameters(modes, good)
    check_parameters(hilbert, {"block_length": 3})
    assert [c.id for c, _ in plan([], {"seed": 2}, every=True)] == [c.id for c in book_chapters()]
    monkeypatch.chdir(tmp_path)  # a relative path is the reader's: the runner makes it absolute for the kernel
    assert absolute_paths({"corpus": "texts", "seed": 1}) == {"corpus": str(tmp_path / "texts"), "seed": 1}
    named = {"corpus": "default", "tokenizer": "bpe:300"}
    assert absolute_paths(named) == named


def test_cuda_is_checked_against_what_torch_sees(monkeypatch):
    import torch

    from lib.book import chapters as chapters_module

    assert chapters_module.torch_builds_cuda() == bool(torch.version.cuda or torch.version.hip)
    hilbert = chapters()["hilbert"]
    monkeypatch.setattr(chapters_module, "torch_builds_cuda", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert check_parameters(hilbert, {"device": "cuda"})["device"] == "cuda"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ParameterError, match="parameter 'device'.*got 'cuda'.*PyTorch sees no CUDA GPU"):
        check_parameters(hilbert, {"device": "cuda"})
    monkeypatch.setattr(chapters_module, "torch_builds_cuda", lambda: False)  # a CPU build: known without torch
    with pytest.raises(ParameterError, match="parameter 'device'.*got 'cuda'.*a CPU-only build"):
        check_parameters(hilbert, {"device": "cuda"})


def test_report_reads_a_records_folder(tmp_path):
    """`lowrank-book report --records DIR` decides every claim from DIR (or a `run --out` folder's records/)."""
    claim = chapters()["hilbert"].claims[0]
    (tmp_path / "records").mkdir()
    (tmp_path / "records" / "hilbert.json").write_text(json.dumps(
        {"chapter": "hilbert", "values": {claim.record: {"value": 0.0}}, "meta": {"profile": "ci"}}))
    for folder in (tmp_path, tmp_path / "records"):
        proc, _ = run_cli("report", "--records", str(folder))
        assert proc.returncode == 0, proc.stderr
        assert f"[pass] {claim.id} (must_hold): 0.0" in proc.stdout and "of 4 claims that must hold, 1 passes and 3 are not run" in proc.stdout
        # the chapters that ran, claim by claim; one line for the rest
        lines = proc.stdout.strip().splitlines()
        assert all(line.split("] ", 1)[1].startswith("hilbert.") for line in lines if line.startswith("["))
        assert sum(line.startswith("not run: ") for line in lines) == 1 and "intro" in proc.stdout
    proc, wall = run_cli("report", "--records", str(tmp_path / "nowhere"))
    assert proc.returncode == 2 and "records folder" in proc.stderr and "does not exist" in proc.stderr


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
    assert proc.returncode == 2 and "unknown parameter 'seeed'" in proc.stderr


def test_a_command_is_required():
    proc, _ = run_cli()
    assert proc.returncode == 2 and "COMMAND" in proc.stderr
    proc, _ = run_cli("run")
    assert proc.returncode == 2 and "name at least one chapter" in proc.stderr


def test_parameters_cells_agree_with_declarations_and_toc():
    toc = [str(source_path(e).relative_to(REPO_ROOT)) for e in toc_files() if is_notebook(source_path(e))]
    assert toc == [c.path for c in chapters().values()]  # every listed notebook is a chapter, in order
    assert [c.id for c in book_chapters()][-1] == "report"  # the report reads the others' records
    for chapter in chapters().values():
        assert read_notebook(chapter).cells
        assert find_chapter(chapter.path) is chapter
    with pytest.raises(ParameterError):
        check_parameters(chapters()["intro"], {"device": "tpu"})


def test_the_runners_kernel_is_quiet_but_still_interruptible(monkeypatch):
    """IPC at a unique absolute path (no 'running over TCP without encryption' warning); no SIGINT on shutdown."""
    import asyncio

    from jupyter_client import AsyncKernelManager

    from lib.book.runner import quiet_kernel_manager

    cls = quiet_kernel_manager()
    a, b = cls(kernel_name="python3"), cls(kernel_name="python3")
    if os.name == "posix":
        assert a.transport == "ipc" and os.path.isabs(a.ip) and a.ip != b.ip
    sent = []

    async def interrupt(self):
        sent.append(self.shutting_down)

    monkeypatch.setattr(AsyncKernelManager, "_async_interrupt_kernel", interrupt)
    asyncio.run(a._async_interrupt_kernel())  # a reader's interrupt (or a timeout's) goes through
    a.shutting_down = True
    asyncio.run(a._async_interrupt_kernel())  # the one jupyter_client sends before every shutdown does not
    assert sent == [False]
    cmd = a.format_kernel_cmd()  # the kernel's stderr is the runner's terminal, not the notebook's
    assert "--IPKernelApp.capture_fd_output=False" in cmd


@pytest.mark.slow
def test_a_run_prints_no_kernel_noise(tmp_path):
    proc, _ = run_cli("run", "hilbert", "-p", "seed", "3", "--out", "out", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "", proc.stderr  # no transport warning, no KeyboardInterrupt from the shutdown
    assert (tmp_path / "out" / "records" / "hilbert.json").is_file()  # a relative --out is the reader's folder
    proc, _ = run_cli("report", "--records", str(tmp_path / "out"))
    assert "hilbert.lemma-4-5" in proc.stdout and "not run" in proc.stdout


@pytest.mark.parametrize("bad, good", [
    ({"parity_compare_n": 30}, {"parity_compare_n": 23}),
    ({"parity_compare_eps": 1.0}, {"parity_compare_eps": 0.3}),
    ({"scaling_eps": [1.5]}, {"scaling_eps": [0.4, 0.2]}),
    ({"grid_eps": [0.3, 0.0]}, {"grid_eps": [0.3]}),
    ({"horizon_T": [8, 12]}, {"horizon_T": [8, 12, 16]}),
    ({"scaling_alphabet": [1, 3]}, {"scaling_alphabet": [2, 3]}),
])
def test_isan_ranges_are_refused_before_the_kernel_starts(bad, good):
    """ISAN learning's accuracies, parity length and fitted axes are checked by the runner, each both ways."""
    isan = chapters()["isan"]
    name = next(iter(bad))
    with pytest.raises(ParameterError, match=f"parameter '{name}'"):
        check_parameters(isan, bad)
    check_parameters(isan, good)


@pytest.mark.slow
def test_ctrl_c_says_where_it_stopped_exits_130_and_leaves_an_incomplete_record(tmp_path):
    """Ctrl-C (SIGINT to the runner's process group, as a terminal sends it) during a chapter: one line,
    exit status 130, and a record that no report counts."""
    import signal

    proc = subprocess.Popen([sys.executable, "-m", "lib", "run", "hilbert", "--out", str(tmp_path)], cwd=REPO_ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    record = tmp_path / "records" / "hilbert.json"
    deadline = time.time() + 240
    while time.time() < deadline and not (record.is_file() and len(json.loads(record.read_text())["values"]) >= 2):
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, out + err
    assert err.strip().splitlines() == [err.strip()] and "Traceback" not in out + err, err
    assert err.startswith("[run] hilbert: interrupted in § ") and "a rerun resumes from the cache" in err
    meta = json.loads(record.read_text())["meta"]
    assert meta["incomplete"].startswith("interrupted in § ") and "finished" not in meta
    report, _ = run_cli("report", "--records", str(tmp_path))
    lines = [line for line in report.stdout.splitlines() if line.startswith("[")]
    assert lines and all(line.startswith("[incomplete] hilbert.") for line in lines)


@pytest.mark.slow
def test_seeds_run_one_record_per_seed_and_the_report_shows_each(tmp_path):
    proc, _ = run_cli("run", "hilbert", "--seeds", "0,1", "--out", str(tmp_path), "-p", "block_length", "2")
    assert proc.returncode == 0, proc.stderr
    seeds = [json.loads((tmp_path / f"seed-{s}" / "records" / "hilbert.json").read_text())["meta"]["seed"]
             for s in (0, 1)]
    assert seeds == [0, 1]
    report, _ = run_cli("report", "--records", str(tmp_path), "--markdown", str(tmp_path / "seeds.md"))
    assert report.returncode == 0, report.stderr
    claim = chapters()["hilbert"].claims[0].id
    assert f"[2/2 pass] {claim} (must_hold): seed 0: pass (" in report.stdout
    assert "| claim | kind | seed 0 | seed 1 | stability |" in (tmp_path / "seeds.md").read_text()
