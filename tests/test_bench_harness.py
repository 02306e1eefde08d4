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
    c = interleave({"a": side("a"), "b": side("b")}, threads=1, repeats=3, min_seconds=0, warm_up_below=0)
    assert calls == ["a", "b"] * 3 and set(threads_seen) == {1}
    assert torch.get_num_threads() == before
    assert c.result("a") == 5 and c.result("b") == 6                 # the last result of each side
    assert c.best("a") == min(c.sides["a"].seconds) and len(c.load) == 6
    rotated = []
    interleave({k: (lambda k=k: rotated.append(k)) for k in "xyz"}, threads=1, repeats=3, rotate=True,
               min_seconds=0, warm_up_below=0)
    assert "".join(rotated) == "xyzyzxzxy"
    json.dumps(c.as_dict())                                          # JSON-ready


def test_a_fast_side_is_timed_over_several_calls_per_run(monkeypatch):
    """A side faster than warm_up_below has an untimed warm-up call; then one call sets the calls per run:
    a side faster than min_seconds runs ceil(min_seconds / that call) calls per run, timed per call (and
    that call is not kept), a slower one is called once per run (and that call is its first run). A side
    slower than warm_up_below has no warm-up. On a fake clock a call of a takes 0.01 s (its first 0.8 s,
    a one-time cost), of b 1 s and of c 3 s."""
    clock = {"now": 0.0}
    fake_time = type("FakeTime", (), {"perf_counter": staticmethod(lambda: clock["now"]),
                                      "process_time": staticmethod(lambda: clock["now"])})
    monkeypatch.setattr(harness, "time", fake_time)
    calls = {"a": 0, "b": 0}

    def side(name, seconds, first=None):
        def run():
            calls[name] += 1
            clock["now"] += first if first is not None and calls[name] == 1 else seconds
            return calls[name]
        return run

    calls["c"] = 0
    c = interleave({"a": side("a", 0.01, first=0.8), "b": side("b", 1.0), "c": side("c", 3.0)}, threads=1,
                   repeats=3, min_seconds=0.25, warm_up_below=2.5)
    assert calls == {"a": 2 + 3 * 25, "b": 1 + 3, "c": 3}
    assert c.sides["a"].seconds == pytest.approx([0.01] * 3) and c.sides["a"].calls == 25
    assert c.sides["b"].seconds == pytest.approx([1.0] * 3) and c.sides["b"].calls == 1
    assert c.sides["c"].seconds == pytest.approx([3.0] * 3) and c.sides["c"].calls == 1
    assert c.ratio("b", "a") == pytest.approx(100.0) and len(c.load) == 9
    assert c.as_dict()["sides"]["a"]["calls_per_run"] == 25
    assert harness.calls_per_run(0.3, 0.25) == 1 and harness.calls_per_run(0.1, 0.25) == 3
    assert harness.calls_per_run(0.0, 0.25, most=50) == 50
    with pytest.raises(ValueError, match="calls = 1"):
        Comparison(threads=1).time("a", lambda: 1.0, seconds_of=float, calls=2)


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
    # a 2-thread run on 2 cores reads about 2 by itself: up to cores + LOAD_MARGIN is clean, beyond it loaded
    assert harness.LOAD_MARGIN == 0.5
    monkeypatch.setattr(harness, "load_average", lambda: 2.07)
    assert not interleave({"a": lambda: None}, threads=2, repeats=1).loaded
    monkeypatch.setattr(harness, "load_average", lambda: 2.51)
    assert interleave({"a": lambda: None}, threads=2, repeats=1).loaded
    assert not harness.is_loaded([2.5], 2, n_cores=2) and harness.is_loaded([2.51], 2, n_cores=2)
    assert harness.is_loaded([4.4], 1, n_cores=4) is False and harness.is_loaded([1.0], 5, n_cores=4)


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


# ----- benchmarks/stability.py: two runs' ratios side by side ---------------------------------

def _comparison(threads, bests, loaded=False):
    return {"threads": threads, "loaded": loaded, "sides": {k: {"best_s": v} for k, v in bests.items()}}


def _write(folder, name, data):
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.json").write_text(json.dumps(data))


def test_stability_reads_every_comparison_and_flags_changes_both_ways(tmp_path):
    from benchmarks import stability

    one, two = tmp_path / "one", tmp_path / "two"
    # nested as the benchmarks write them: a list of runs, cases inside, a comparison per case
    _write(one, "ngrams", {"runs": [{"cases": [{"case": "k=2", "timing": _comparison(1, {"ours": 1.0, "base": 10.0})},
                                               {"case": "k=3", "timing": _comparison(1, {"ours": 2.0, "base": 10.0})}]}]})
    _write(two, "ngrams", {"runs": [{"cases": [{"case": "k=2", "timing": _comparison(1, {"ours": 1.0, "base": 10.9})},
                                               {"case": "k=3", "timing": _comparison(1, {"ours": 2.0, "base": 8.0})}]}]})
    rows, missing = stability.compare(one, two, max_change=10.0)
    assert missing == []
    by_case = {r["ratio"].split("k=")[1][0]: r for r in rows}
    assert by_case["2"]["run1"] == pytest.approx(10.0) and by_case["2"]["run2"] == pytest.approx(10.9)
    assert by_case["2"]["change_percent"] == pytest.approx(9.0) and by_case["2"]["stable"]
    assert by_case["3"]["run1"] == pytest.approx(5.0) and by_case["3"]["change_percent"] == pytest.approx(20.0)
    assert not by_case["3"]["stable"]
    # each side's own change: in k=3 the base side moved (10 → 8 s, −20 %), ours did not
    assert by_case["3"]["top_side"] == "base" and by_case["3"]["bottom_side"] == "ours"
    assert by_case["3"]["change_top_percent"] == pytest.approx(-20.0)
    assert by_case["3"]["change_bottom_percent"] == pytest.approx(0.0)
    assert by_case["2"]["change_top_percent"] == pytest.approx(9.0)
    assert stability.main([str(one), str(two)]) == 1                 # an unstable counted ratio fails
    assert stability.main([str(one), str(two), "--max-change", "25"]) == 0


def test_stability_does_not_count_loaded_comparisons_and_reports_missing_runs(tmp_path):
    from benchmarks import stability

    one, two = tmp_path / "one", tmp_path / "two"
    _write(one, "modes", {"a": _comparison(2, {"x": 1.0, "y": 2.0}, loaded=True)})
    _write(two, "modes", {"a": _comparison(2, {"x": 1.0, "y": 9.0})})
    rows, missing = stability.compare(one, two, max_change=10.0)
    assert len(rows) == 1 and not rows[0]["counted"] and not rows[0]["stable"]
    assert stability.main([str(one), str(two)]) == 0                 # loaded: listed, not counted
    _write(one, "ntp", {"a": _comparison(1, {"x": 1.0, "y": 2.0})})
    assert stability.compare(one, two, 10.0)[1] == ["ntp.json"]
    assert stability.main([str(one), str(two)]) == 1
    with pytest.raises(SystemExit):                                   # a wrong folder fails before comparing
        stability.main([str(one), str(tmp_path / "missing")])


def test_stability_reads_bench_llc_rows_against_ours(tmp_path):
    from benchmarks import stability

    rows = [{"case_label": "RRR", "arm": "devinterp 2.0.1", "chain_steps_per_s": 100.0, "clean": True},
            {"case_label": "RRR", "arm": "ours", "chain_steps_per_s": 2000.0, "clean": True},
            {"case_label": "RRR", "arm": "canonical-interp", "chain_steps_per_s": 1000.0, "clean": False}]
    found = stability.llc_ratios({"rows": rows, "goals": []})
    def judged(key):
        return {k: found[key][k] for k in ("ratio", "loaded")}

    assert judged("RRR: devinterp 2.0.1 / ours") == {"ratio": 0.05, "loaded": False}
    assert judged("RRR: canonical-interp / ours") == {"ratio": 0.5, "loaded": True}
    assert found["RRR: canonical-interp / ours"]["top"] == ("canonical-interp", 1000.0)
    assert found["RRR: canonical-interp / ours"]["bottom"] == ("ours", 2000.0)
    assert len(found) == 2
