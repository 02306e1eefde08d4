"""Tests of lib.text.corpus: the offline default corpus, local and hub sources, the registry, splits."""
from __future__ import annotations

import importlib.metadata
import os
import platform
import string
import subprocess
import sys
import time

import numpy as np
import pytest

from lib import REPO_ROOT
from lib.text import corpus as C
from lib.text.corpus import Corpus, CorpusUnavailable, load_corpus

DEFAULT_CACHE = "default-corpus-cache"  # shared with tests/text/test_tokenization.py (same pytest session)


@pytest.fixture(autouse=True)
def _tmp_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BOOK_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="session")
def default_build(tmp_path_factory):
    """The default corpus built in this process and, concurrently, in a fresh subprocess
    with another cache directory and hash seed: (corpus, seconds, subprocess sha256)."""
    base = tmp_path_factory.getbasetemp()
    other_cache = base / "default-corpus-cache-2"
    code = "from lib.text.corpus import load_corpus; print(load_corpus().sha256())"
    env = {**os.environ, "BOOK_CACHE_DIR": str(other_cache), "PYTHONHASHSEED": "12345"}
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO_ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BOOK_CACHE_DIR", str(base / DEFAULT_CACHE))
        start = time.perf_counter()
        corpus = load_corpus()
        seconds = time.perf_counter() - start
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return corpus, seconds, out.strip().splitlines()[-1]


# --------------------------------------------------------------------------- default corpus


def test_default_corpus_size_and_provenance(default_build):
    corpus, seconds, _ = default_build
    assert corpus.n_bytes >= 10_000_000
    assert corpus.n_documents > 1000 and len(corpus.titles) == corpus.n_documents
    prov = corpus.provenance
    assert prov["python"] == platform.python_version()
    for pkg in C.DEFAULT_PACKAGES:
        assert prov["packages"][pkg] == importlib.metadata.version(pkg)
        assert prov["parts"][pkg]["n_documents"] > 10
        assert prov["parts"][pkg]["n_files"] >= prov["parts"][pkg]["n_documents"]
    assert prov["parts"]["stdlib"]["n_documents"] > 100 and prov["parts"]["pydoc_topics"]["n_documents"] > 20
    assert sum(p["n_documents"] for p in prov["parts"].values()) == corpus.n_documents
    assert prov["n_bytes"] == corpus.n_bytes and prov["sha256"] == corpus.sha256()
    assert "numpy.linalg" in corpus.titles and "json" in corpus.titles
    assert not any(t.startswith(("tkinter", "idlelib", "lib2to3", "test.")) for t in corpus.titles)
    assert not any(".tests." in t or t.endswith(".tests") for t in corpus.titles)
    print(f"default corpus: {corpus.n_bytes / 1e6:.2f} MB, {corpus.n_documents} documents, built in {seconds:.1f} s")


def test_default_corpus_deterministic(default_build):
    corpus, _, other_sha = default_build
    assert corpus.sha256() == other_sha  # another process, hash seed and cache directory


def test_default_corpus_is_prose(default_build):
    corpus, _, _ = default_build
    text = corpus.text()
    letters = sum(text.count(ch) for ch in string.ascii_letters + " ")
    assert letters / len(text) > 0.75
    assert sum(ord(ch) > 127 for ch in text) / len(text) < 0.01
    assert not any(line.lstrip().startswith(">>>") for line in text.split("\n"))
    assert all(doc.strip() for doc in corpus.documents)


def test_default_corpus_cached_load_is_fast(default_build, tmp_path_factory, monkeypatch):
    corpus, _, _ = default_build
    monkeypatch.setenv("BOOK_CACHE_DIR", str(tmp_path_factory.getbasetemp() / DEFAULT_CACHE))
    start = time.perf_counter()
    again = load_corpus("pydocs")
    assert time.perf_counter() - start < 2.0
    assert again.sha256() == corpus.sha256()
    assert "n_documents=" in repr(again) and len(repr(again)) < 500


def test_drop_doctest_lines():
    doc = ("Add numbers.\n\nExamples\n--------\n>>> add(1,\n...     2)\n3\n>>> x = [1,\n...  2]\n\n"
           "More prose.\n    >>> indented()\n    'out'\n\nEnd.")
    assert C.drop_doctest_lines(doc) == "Add numbers.\n\nExamples\n--------\n\nMore prose.\n\nEnd."


def test_module_docstrings_in_source_order():
    src = '"""Mod."""\nclass A:\n    """Class A."""\n    def f(self):\n        """Method f."""\n' \
          'def g():\n    """Func g."""\n    def inner():\n        """Inner."""\nasync def h():\n    """Async h."""\n'
    assert C.module_docstrings(src) == ["Mod.", "Class A.", "Method f.", "Func g.", "Inner.", "Async h."]


# --------------------------------------------------------------------------- local paths


def test_local_file_blocks(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("First block\nline two.\n\n\n  \nSecond block.\n\t\nThird — ünïcode 😀\n", encoding="utf-8")
    corpus = load_corpus(str(path))
    assert corpus.documents == ["First block\nline two.", "Second block.", "Third — ünïcode 😀"]
    assert corpus.name == "notes" and corpus.provenance["n_documents"] == 3
    assert load_corpus(path).sha256() == corpus.sha256()  # a Path works too


def test_local_folder(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "z.md").write_text("# Zed\n\nSecond file.")
    (tmp_path / "a.txt").write_text("First file.")
    (tmp_path / "ignored.py").write_text("print('no')")
    (tmp_path / "empty.txt").write_text("  \n")
    corpus = load_corpus(str(tmp_path))
    assert corpus.titles == ["a.txt", "b/z.md"]
    assert corpus.documents == ["First file.", "# Zed\n\nSecond file."]


def test_empty_sources(tmp_path):
    (tmp_path / "blank.txt").write_text("\n \n\n")
    with pytest.raises(ValueError, match="empty"):
        load_corpus(str(tmp_path / "blank.txt"))
    (tmp_path / "folder").mkdir()
    with pytest.raises(ValueError, match="no non-empty"):
        load_corpus(str(tmp_path / "folder"))


def test_a_binary_or_non_utf8_file_is_refused_by_name_by_the_check_and_the_loader(tmp_path):
    """One rule, two places: the check before a run (path_corpus_problem) and the loader refuse a folder
    holding a binary .txt (NUL bytes) or a Latin-1 file, naming the file; neither skips it silently."""
    for name, data, why in (("binary", b"abc\0\0\x01", "is binary, not text (a NUL byte at offset 3)"),
                            ("latin1", "café au lait\n".encode("latin-1"), "is not UTF-8 text (byte 0xe9 at offset 3)")):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "good.txt").write_text("Some text.\n")
        (folder / "z.txt").write_bytes(data)
        problem = C.path_corpus_problem(str(folder))
        assert problem is not None and str(folder / "z.txt") in problem and why in problem, problem
        with pytest.raises(ValueError, match="z.txt") as info:
            load_corpus(str(folder))
        assert why in str(info.value)
        assert C.path_corpus_problem(str(folder / "z.txt")).startswith(f"the file {str(folder / 'z.txt')!r} {why}")
        (folder / "z.txt").unlink()
        assert C.path_corpus_problem(str(folder)) is None and load_corpus(str(folder)).documents == ["Some text.\n"]


def test_empty_folders_and_files_are_refused_before_a_run(tmp_path):
    (tmp_path / "none").mkdir()
    (tmp_path / "none" / "notes.py").write_text("not a corpus file")
    assert C.path_corpus_problem(str(tmp_path / "none")) == f"the folder {str(tmp_path / 'none')!r} holds no .txt or .md files"
    (tmp_path / "blank").mkdir()
    (tmp_path / "blank" / "a.txt").write_text(" \n")
    (tmp_path / "blank" / "b.md").write_text("")
    assert "holds 2 .txt/.md files, all empty" in C.path_corpus_problem(str(tmp_path / "blank"))
    assert "is empty (no non-blank text)" in C.path_corpus_problem(str(tmp_path / "blank" / "a.txt"))
    assert "no such file or folder" in C.path_corpus_problem(str(tmp_path / "nope"))
    (tmp_path / "blank" / "c.txt").write_text("Text beside empty files: they are passed over.")
    assert C.path_corpus_problem(str(tmp_path / "blank")) is None


def test_the_check_reads_a_bounded_prefix_and_the_loader_the_rest(tmp_path):
    """A large file is checked on its first CHECK_PREFIX_BYTES only (cheap), a character cut at that boundary
    is no problem; a bad byte past the prefix is found by the loader, which reads everything, by name."""
    n = C.CHECK_PREFIX_BYTES
    cut = tmp_path / "cut.txt"
    cut.write_bytes(b"a" * (n - 1) + "é tail\n".encode())  # 'é' is two bytes: the prefix ends inside it
    assert C.path_corpus_problem(str(cut)) is None and load_corpus(str(cut)).documents == ["a" * (n - 1) + "é tail"]
    late = tmp_path / "late"
    late.mkdir()
    (late / "big.txt").write_bytes(b"a" * (2 * n) + "caf\xe9".encode("latin-1") + b"\0")
    assert C.path_corpus_problem(str(late)) is None  # past the checked prefix
    with pytest.raises(ValueError, match="big.txt' is binary"):
        load_corpus(str(late))


def test_missing_path_error(tmp_path):
    missing = tmp_path / "nope" / "corpus.txt"
    for source in (str(missing), missing):
        with pytest.raises(FileNotFoundError) as info:
            load_corpus(source)
        message = str(info.value)
        assert str(missing) in message and "'source'" in message and "'default'" in message
        assert "does not exist" in message


def test_unknown_source_error():
    with pytest.raises(ValueError) as info:
        load_corpus("wikipedia-please")
    message = str(info.value)
    assert "'source'" in message and "'wikipedia-please'" in message
    assert "'default'" in message and "'pydocs'" in message and "hf:" in message


def test_bad_options():
    with pytest.raises(ValueError, match="takes no option"):
        load_corpus("default", max_bytes=10)


# --------------------------------------------------------------------------- hub source


@pytest.fixture
def online(monkeypatch):
    """Pretend the hub answers: no offline variables, reachability check passes."""
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(C, "hub_reachable", lambda timeout=5.0: True)


def test_hf_offline_env(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.perf_counter()
    with pytest.raises(CorpusUnavailable) as info:
        load_corpus("hf:monology/pile-uncopyrighted", max_documents=10)
    assert time.perf_counter() - start < 5
    message = str(info.value)
    assert "unreachable" in message and "network" in message and "'default'" in message
    assert isinstance(info.value, RuntimeError)


def test_hf_unreachable_is_quick(monkeypatch):
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(C, "hub_reachable", lambda timeout=5.0: False)
    with pytest.raises(CorpusUnavailable, match="unreachable"):
        load_corpus("hf:monology/pile-uncopyrighted")


def test_hf_connection_error(online, monkeypatch):
    import datasets

    def refuse(*args, **kwargs):
        try:
            raise OSError("[Errno -2] Name or service not known")
        except OSError as err:
            raise RuntimeError("Couldn't reach the hub") from ConnectionError(str(err))

    monkeypatch.setattr(datasets, "load_dataset", refuse)
    with pytest.raises(CorpusUnavailable, match="needs a network"):
        load_corpus("hf:monology/pile-uncopyrighted", max_documents=3)


def test_hf_limits_and_text_field(online, monkeypatch):
    import datasets

    rows = [{"text": t, "meta": i} for i, t in enumerate(["alpha", "", "beta gamma", "délta", "epsilon" * 10])]
    calls = []

    def fake_load(name, config=None, split=None, streaming=False):
        calls.append((name, config, split, streaming))
        return iter(rows)

    monkeypatch.setattr(datasets, "load_dataset", fake_load)
    corpus = load_corpus("hf:someone/data", max_documents=2)
    assert corpus.documents == ["alpha", "beta gamma"]  # the empty text is skipped
    assert calls[-1] == ("someone/data", None, "train", True)
    assert corpus.provenance["truncated"] and corpus.provenance["n_documents"] == 2
    # max_bytes: stop before the document that would exceed it ("délta" is 6 bytes)
    corpus = load_corpus("hf:someone/data", max_bytes=5 + 10 + 5, split="validation", config="en")
    assert corpus.documents == ["alpha", "beta gamma"] and corpus.n_bytes <= 20
    assert calls[-1] == ("someone/data", "en", "validation", True)
    corpus = load_corpus("hf:someone/data", max_bytes=None)
    assert len(corpus.documents) == 4 and not corpus.provenance["truncated"]
    with pytest.raises(ValueError) as info:
        load_corpus("hf:someone/data", text_field="content", max_documents=2)
    assert "'text_field'" in str(info.value) and "'meta'" in str(info.value) and "'text'" in str(info.value)
    with pytest.raises(ValueError, match="max_documents"):
        load_corpus("hf:someone/data", max_documents=0)
    # cached: once fetched, a corpus loads without the hub
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: (_ for _ in ()).throw(ConnectionError("offline")))
    assert load_corpus("hf:someone/data", max_documents=2).documents == ["alpha", "beta gamma"]


# --------------------------------------------------------------------------- registry


def test_register_source():
    def toy(n_documents=3, seed=0):
        rng = np.random.default_rng(seed)
        docs = [" ".join(rng.choice(["a", "b", "c"], size=5)) for _ in range(n_documents)]
        return Corpus("toy", docs, "random letters", {"seed": seed})

    C.register_source("toy-test", toy, "random letters\nfor tests")
    try:
        assert C.available_sources()["toy-test"] == "random letters for tests"
        assert "default" in C.available_sources()
        corpus = load_corpus("toy-test", n_documents=5, seed=1)
        assert corpus.n_documents == 5 and corpus.provenance == {"seed": 1}
        C.register_source("toy-test", lambda: "not a corpus", "broken")
        with pytest.raises(TypeError, match="not a Corpus"):
            load_corpus("toy-test")
    finally:
        C.unregister_source("toy-test")
    assert "toy-test" not in C.available_sources()
    for reserved in ("default", "pydocs", "hf:x"):
        with pytest.raises(ValueError, match="reserved"):
            C.register_source(reserved, toy, "no")


# --------------------------------------------------------------------------- Corpus and split


def _corpus(n):
    return Corpus("n", [f"document {i}" for i in range(n)], "test", {})


def test_split_deterministic_disjoint_covering():
    corpus = _corpus(100)
    train, held = corpus.split(0.1, seed=3)
    assert len(held) == 10 and len(train) == 90
    assert np.array_equal(np.sort(np.concatenate([train, held])), np.arange(100))
    assert not set(train) & set(held)
    again = corpus.split(0.1, seed=3)
    assert np.array_equal(again[0], train) and np.array_equal(again[1], held)
    assert not np.array_equal(corpus.split(0.1, seed=4)[1], held)
    for n, fraction in ((2, 0.5), (3, 0.01), (5, 0.99)):
        train, held = _corpus(n).split(fraction, seed=0)
        assert len(train) >= 1 and len(held) >= 1 and len(train) + len(held) == n


def test_split_errors():
    with pytest.raises(ValueError, match="at least 2"):
        _corpus(1).split(0.5)
    for bad in (0, 1, 1.5, -0.1, "0.1", True):
        with pytest.raises(ValueError, match="'heldout_fraction'"):
            _corpus(10).split(bad)
    with pytest.raises(ValueError, match="'seed'"):
        _corpus(10).split(0.1, seed=-1)


def test_corpus_basics():
    corpus = Corpus("x", ["ab", "c", "é"], "d", {})
    assert corpus.n_bytes == 5 and corpus.n_documents == 3
    assert Corpus("x", ["ab", "c"]).sha256() != Corpus("x", ["a", "bc"]).sha256()
    assert Corpus("x", ["ab", "c"]).sha256() == Corpus("y", ["ab", "c"], "other").sha256()
    assert corpus.subset([2, 0]).documents == ["é", "ab"]
    with pytest.raises(TypeError):
        Corpus("x", ["ok", 3])
