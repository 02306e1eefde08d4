"""The timing harness of benchmarks/ (benchmarks/harness.py): interleaving, best-of, the load flag, threads."""
import argparse
import json

import pytest
import torch

from benchmarks import harness
from benchmarks.harness import Comparison, add_arguments, interleave, parse_threads, strip_options


def test_sides_are_interleaved_each_best_kept_and_threads_set():
    calls, threads_seen = [], []

    def side(name):
        def run():
            calls.append(name)
            threads_seen.append(torch.get_num_threads())
            return len(calls)
        return run

    before = torch.get_num_threads()
    c = interleave({"a": side("a"), "b": side("b")}, threads=1, repeats=3)
    assert calls == ["a", "b"] * 3 and set(threads_seen) == {1}
    assert torch.get_num_threads() == before
    assert c.result("a") == 5 and c.result("b") == 6                 # the last result of each side
    assert c.best("a") == min(c.sides["a"].seconds) and len(c.load) == 6
    rotated = []
    interleave({k: (lambda k=k: rotated.append(k)) for k in "xyz"}, threads=1, repeats=3, rotate=True)
    assert "".join(rotated) == "xyzyzxzxy"
    json.dumps(c.as_dict())                                          # JSON-ready


def test_a_loaded_run_is_reported_not_gated(monkeypatch):
    monkeypatch.setattr(harness, "cores", lambda: 2)
    monkeypatch.setattr(harness, "load_average", lambda: 1.5)
    clean = interleave({"a": lambda: None}, threads=2, repeats=1)
    assert not clean.loaded and clean.gate(True) and not clean.gate(False)
    monkeypatch.setattr(harness, "load_average", lambda: 3.2)
    loaded = interleave({"a": lambda: None}, threads=1, repeats=1)
    assert loaded.loaded and loaded.gate(False) and loaded.as_dict()["gated"] is False
    monkeypatch.setattr(harness, "load_average", lambda: 0.1)
    assert interleave({"a": lambda: None}, threads=4, repeats=1).loaded          # more threads than cores


def test_a_run_that_raises_is_not_timed_but_its_load_is_kept():
    c = Comparison(threads=1)
    with pytest.raises(RuntimeError):
        c.time("a", lambda: (_ for _ in ()).throw(RuntimeError("failed")))
    assert "a" not in c.sides and len(c.load) == 1
    c.time("a", lambda: {"seconds": 0.25}, seconds_of=lambda r: r["seconds"])
    assert c.best("a") == 0.25 and c.sides["a"].wall[0] >= 0


def test_command_line_options():
    ap = argparse.ArgumentParser()
    add_arguments(ap, repeat_flags=("--repeats", "--reps"))
    args = ap.parse_args([])
    assert args.threads == [1, 2] and args.repeats == 3
    assert ap.parse_args(["--threads", "2", "--reps", "5"]).threads == [2]
    assert ap.parse_args(["--reps", "5"]).repeats == 5
    assert parse_threads("1,2,1") == [1, 2]
    for bad in ("0", "a", "", "1,-2"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_threads(bad)
    with pytest.raises(SystemExit):
        ap.parse_args(["--repeats", "0"])
    assert strip_options(["--n", "3", "--threads", "1,2", "--json=x", "--quick"], ["--threads", "--json"]) == \
        ["--n", "3", "--quick"]
