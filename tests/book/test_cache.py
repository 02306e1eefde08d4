"""The artefact cache: keys, atomic writes, corruption and staleness detection, resume."""
import json

import numpy as np
import pytest

from lib.book import cache


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path))
    return tmp_path


def counting(value):
    calls = []

    def compute():
        calls.append(1)
        return value

    return compute, calls


def test_second_call_hits_and_params_change_the_key(root):
    compute, calls = counting({"a": np.arange(3)})
    first = cache.cached("thing", {"n": 3}, compute)
    second = cache.cached("thing", {"n": 3}, compute)
    assert len(calls) == 1 and np.array_equal(first["a"], second["a"])
    cache.cached("thing", {"n": 4}, compute)
    assert len(calls) == 2
    assert cache.params_hash({"b": 1, "a": [1, 2]}) == cache.params_hash({"a": (1, 2), "b": np.int64(1)})


def test_entry_is_checksummed(root):
    compute, _ = counting([1, 2, 3])
    cache.cached("thing", {"n": 1}, compute)
    entry = cache.entry_dir("thing", {"n": 1}, compute)
    meta = json.loads((entry / "meta.json").read_text())
    assert meta["sha256"]["payload.pkl"] == cache.file_sha256(entry / "payload.pkl")
    assert not entry.with_name(entry.name + ".partial").exists()


@pytest.mark.parametrize("damage", ["flip", "truncate", "delete_meta", "delete_payload", "garble_meta"])
def test_corrupt_entry_is_reported_and_recomputed(root, capsys, damage):
    compute, calls = counting(list(range(100)))
    cache.cached("thing", {"n": 1}, compute)
    entry = cache.entry_dir("thing", {"n": 1}, compute)
    payload = entry / "payload.pkl"
    if damage == "flip":
        data = bytearray(payload.read_bytes())
        data[len(data) // 2] ^= 0xFF
        payload.write_bytes(bytes(data))
    elif damage == "truncate":
        payload.write_bytes(payload.read_bytes()[:10])
    elif damage == "delete_meta":
        (entry / "meta.json").unlink()
    elif damage == "delete_payload":
        payload.unlink()
    else:
        (entry / "meta.json").write_text("{not json")
    assert cache.cached("thing", {"n": 1}, compute) == list(range(100))
    assert len(calls) == 2
    assert "corrupt entry" in capsys.readouterr().err
    assert cache.cached("thing", {"n": 1}, compute) == list(range(100)) and len(calls) == 2


def test_stale_entry_from_other_source_is_reported(root, tmp_path, capsys):
    src = tmp_path / "producer.py"
    src.write_text("VERSION = 1\n")
    compute, calls = counting(1)
    cache.cached("thing", {"n": 1}, compute, sources=[src])
    src.write_text("VERSION = 2\n")
    cache.cached("thing", {"n": 1}, compute, sources=[src])
    assert len(calls) == 2
    assert "stale entry" in capsys.readouterr().err
    assert len([p for p in (root / "thing").iterdir() if p.is_dir()]) == 1


def test_crash_leaves_no_entry_and_dir_producer_resumes(root):
    attempts = []

    def producer(workdir):
        attempts.append(sorted(p.name for p in workdir.iterdir()))
        (workdir / "part1.txt").write_text("done")
        if len(attempts) == 1:
            raise KeyboardInterrupt("simulated crash")
        (workdir / "part2.txt").write_text("done")

    with pytest.raises(KeyboardInterrupt):
        cache.cached("job", {"n": 1}, producer, fmt="dir")
    entry = cache.entry_dir("job", {"n": 1}, producer)
    assert not entry.exists()  # never half-written
    out = cache.cached("job", {"n": 1}, producer, fmt="dir")
    assert attempts == [[], ["part1.txt"]]  # the second attempt saw the first one's work
    assert out == entry and (out / "part2.txt").read_text() == "done"


def test_npz_format_and_bad_requests(root):
    got = cache.cached("arrays", {"n": 2}, lambda: {"x": np.eye(2)}, fmt="npz")
    assert np.array_equal(got["x"], np.eye(2))
    with pytest.raises(cache.CacheError, match="fmt"):
        cache.cached("arrays", {}, lambda: 1, fmt="zip")
    with pytest.raises(cache.CacheError, match="dict of arrays"):
        cache.cached("arrays2", {}, lambda: [1], fmt="npz")
    with pytest.raises(cache.CacheError, match="JSON-like"):
        cache.cached("arrays3", {"f": object()}, lambda: 1)


def test_concurrent_producers_compute_once(root):
    """Two processes asking for the same entry: one computes, the other waits and loads it."""
    import subprocess
    import sys

    script = (
        "import time, pathlib, sys\n"
        "from lib.book import cache\n"
        "def slow():\n"
        "    with open(sys.argv[1], 'a') as fh: fh.write('x')\n"
        "    time.sleep(1.0)\n"
        "    return 42\n"
        "print(cache.cached('shared', {'n': 1}, slow, sources=[sys.argv[2]]))\n"
    )
    marker = root / "calls.txt"
    src = root / "src.py"
    src.write_text("# producer source\n")
    procs = [subprocess.Popen([sys.executable, "-c", script, str(marker), str(src)], stdout=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=60)[0].strip() for p in procs]
    assert outs == ["42", "42"] and marker.read_text() == "x"


def test_messages_go_to_the_terminal_under_the_runner_and_to_stderr_otherwise(monkeypatch, capsys):
    """The rendered page keeps no housekeeping: under lib.book.runner (its environment
    variable set) cache messages and progress bars go to the process's own stderr."""
    import io
    import sys

    from lib.book import progress
    from lib.book.cache import _log

    terminal = io.StringIO()
    monkeypatch.setattr(sys, "__stderr__", terminal)
    monkeypatch.delenv(progress.TERMINAL_ENV, raising=False)
    _log("in a notebook")
    assert "in a notebook" in capsys.readouterr().err and terminal.getvalue() == ""
    monkeypatch.setenv(progress.TERMINAL_ENV, "1")
    _log("under the runner")
    for _ in progress.progress(range(3), desc="bar"):
        pass
    assert capsys.readouterr().err == ""
    assert "under the runner" in terminal.getvalue() and "bar" in terminal.getvalue()
