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


# ----- several processes: comparisons merged, derived values refreshed ----------------------------

def _timed(threads, seconds, loads=((0.1, 0.2),), calls=1):
    """A comparison as Comparison.as_dict writes it: per side its runs' seconds (CPU = wall = seconds)."""
    return {"threads": threads, "repeats": len(next(iter(seconds.values()))), "cores": 2,
            "load_average_1min": [list(p) for p in loads], "loaded": False,
            "sides": {name: {"best_s": min(v), "best_cpu_s": min(v), "seconds": list(v), "wall_s": list(v),
                             "cpu_s": list(v), "calls_per_run": calls} for name, v in seconds.items()}}


def test_merged_comparisons_keep_every_run_and_each_sides_best_over_processes():
    a = _timed(1, {"ours": [2.0, 1.5], "base": [9.0, 10.0]})
    b = _timed(1, {"ours": [1.8, 1.9], "base": [7.0, 8.0]}, calls=3)
    m = harness.merge_comparisons([a, b])
    assert m["sides"]["ours"]["best_s"] == 1.5 and m["sides"]["base"]["best_s"] == 7.0
    assert m["sides"]["ours"]["seconds"] == [2.0, 1.5, 1.8, 1.9]
    assert m["sides"]["base"]["process_best_s"] == [9.0, 7.0]
    assert m["sides"]["ours"]["process_calls_per_run"] == [1, 3]
    assert m["repeats"] == 4 and m["processes"] == 2 and len(m["load_average_1min"]) == 2
    assert not m["loaded"] and m["gated"]
    # the merged comparison is a comparison to the stability script: its ratio is best over best
    from benchmarks import stability
    (key, found), = stability.harness_ratios(m).items()
    assert found["ratio"] == pytest.approx(7.0 / 1.5)
    # one loaded process makes the merged comparison loaded, judged on all loads together
    hot = _timed(1, {"ours": [1.0], "base": [5.0]}, loads=((3.5, 3.9),))
    assert harness.merge_comparisons([a, hot])["loaded"]
    # a side missing from one process (it failed there) has the other processes' runs
    partial = _timed(1, {"ours": [1.2]})
    assert harness.merge_comparisons([a, partial])["sides"]["base"]["process_best_s"] == [9.0]
    with pytest.raises(ValueError, match="thread counts"):
        harness.merge_comparisons([a, _timed(2, {"ours": [1.0], "base": [2.0]})])
    with pytest.raises(ValueError):
        harness.merge_comparisons([{"threads": 1}])


def test_merged_trees_merge_comparisons_wherever_they_sit_and_keep_other_values_of_the_first():
    one = {"ok": True, "cases": [{"case": "k=2", "ratio": 5.0, "timing": _timed(1, {"v": [1.0], "c": [5.0]})}]}
    two = {"ok": False, "cases": [{"case": "k=2", "ratio": 3.0, "timing": _timed(1, {"v": [2.0], "c": [3.0]})}]}
    m = harness.merge_trees([one, two])
    assert m["ok"] is True and m["cases"][0]["ratio"] == 5.0                   # not derived here: refresh does it
    assert m["cases"][0]["timing"]["sides"]["c"]["best_s"] == 3.0
    assert m["cases"][0]["timing"]["sides"]["v"]["best_s"] == 1.0
    assert "k=2" in harness.comparison_lines(m)[0] and "c 3000 ms (5000, 3000)" in harness.comparison_lines(m)[0]
    with pytest.raises(ValueError, match="shape"):
        harness.merge_trees([one, {"ok": True, "cases": []}])


def test_a_benchmark_runs_in_several_fresh_processes_and_reports_the_best_over_them(tmp_path):
    """A stand-in benchmark whose i-th process times its side at i seconds (a counter file): with three
    processes each thread count's merged best is the first process's, the refresh sees all three runs, and
    the processes alternate between the counts (1, 2, 1, 2, 1, 2)."""
    script = tmp_path / "bench_standin.py"
    script.write_text(f'''
import json, os, sys
sys.path.insert(0, {str(harness.Path(__file__).resolve().parents[1])!r})
from pathlib import Path
import argparse
from benchmarks import harness

log = Path({str(tmp_path / "log")!r})

def measure(args):
    with log.open("a") as f:
        f.write(f"{{args.threads[0]}} {{os.environ['POLARS_MAX_THREADS']}}\\n")
    i = len(log.read_text().splitlines())
    c = {{"threads": args.threads[0], "cores": 2, "load_average_1min": [[0.1, 0.1]],
         "sides": {{"ours": {{"best_s": float(i), "best_cpu_s": float(i), "seconds": [float(i)], "wall_s": [float(i)],
                             "cpu_s": [float(i)], "calls_per_run": 1}},
                   "base": {{"best_s": 10.0 * i, "best_cpu_s": 1.0, "seconds": [10.0 * i], "wall_s": [1.0],
                             "cpu_s": [1.0], "calls_per_run": 1}}}}}}
    args.json.write_text(json.dumps({{"threads": args.threads[0], "ok": i != 3, "ratio": -1, "timing": c}}))
    return 0

def refresh(merged, runs):
    sides = merged["timing"]["sides"]
    merged["ratio"] = sides["base"]["best_s"] / sides["ours"]["best_s"]
    merged["ok"] = all(r["ok"] for r in runs)

ap = argparse.ArgumentParser()
harness.add_arguments(ap, processes=3)
ap.add_argument("--json", type=Path)
args = ap.parse_args()
sys.exit(harness.main_per_thread_count(__file__, args, sys.argv[1:], measure, refresh))
''')
    out = tmp_path / "out.json"
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, str(script), "--threads", "1,2", "--json", str(out)],
                          capture_output=True, text=True)
    assert tmp_path.joinpath("log").read_text().split("\n")[:-1] == ["1 1", "2 2"] * 3
    data = json.loads(out.read_text())
    assert data["processes"] == 3 and [run["threads"] for run in data["runs"]] == [1, 2]
    one, two = data["runs"]
    assert one["timing"]["sides"]["ours"]["process_best_s"] == [1.0, 3.0, 5.0]
    assert two["timing"]["sides"]["ours"]["best_s"] == 2.0 and two["ratio"] == pytest.approx(10.0)
    assert one["ok"] is False and two["ok"] is True                      # process 3 (a 1-thread one) failed
    assert proc.returncode == 1 and not data["ok"]
    assert "best over 3 processes" in proc.stdout
    # one process: no merge, no refresh needed
    proc = subprocess.run([sys.executable, str(script), "--threads", "2", "--processes", "1", "--json", str(out)],
                          capture_output=True, text=True)
    assert json.loads(out.read_text())["runs"][0]["ratio"] == -1 and proc.returncode == 0


def test_each_benchmark_run_in_processes_refreshes_its_ratios_and_verdict_from_the_merged_timings():
    """bench_ngrams, bench_insensitivity and bench_examples: after the merge, a ratio is best over best
    across processes, and a check that failed in any one process fails the merged run."""
    from benchmarks import bench_examples, bench_insensitivity, bench_ngrams

    def ngrams_run(vec, cnt, agree, loads=((0.1, 0.1),)):
        case = {"stream": "corpus", "case": "k=2,l=1", "tokens": 100, "gated": True, "agree": agree,
                "ratio": -1.0, "timing": _timed(1, {"vectorised": vec, "counter": cnt}, loads=loads)}
        return {"threads": 1, "min_ratio": 10.0, "ok": True, "cases": [case],
                "large": {"tokens": 50, "timing": _timed(1, {"vectorised": [0.5]})}}

    runs = [ngrams_run([1.0], [9.0], True), ngrams_run([0.8], [12.0], True)]
    merged = harness.merge_trees(runs)
    bench_ngrams.refresh(merged, runs)
    case = merged["cases"][0]
    assert case["ratio"] == pytest.approx(9.0 / 0.8) and case["tokens_per_s"] == pytest.approx(125.0)
    assert merged["ok"] and not merged["loaded"]                        # 11.25 ≥ 10, though neither process's own ratio was
    runs = [ngrams_run([1.0], [9.0], True), ngrams_run([1.0], [9.5], True)]
    merged = harness.merge_trees(runs)
    bench_ngrams.refresh(merged, runs)
    assert not merged["ok"]                                             # 9 < 10 on a clean run
    runs = [ngrams_run([1.0], [9.0], True), ngrams_run([1.0], [9.5], True, loads=((4.0, 4.0),))]
    merged = harness.merge_trees(runs)
    bench_ngrams.refresh(merged, runs)
    assert merged["ok"] and merged["loaded"]                            # loaded: reported, not gated
    runs = [ngrams_run([1.0], [20.0], True), ngrams_run([1.0], [20.0], False)]
    merged = harness.merge_trees(runs)
    bench_ngrams.refresh(merged, runs)
    assert not merged["ok"] and not merged["cases"][0]["agree"]         # a disagreement in one process

    def insensitivity_run(ours, base, diff):
        return {"threads": 1, "min_ratio": 10.0, "ok": True,
                "models": {"m": {"max_abs_diff": diff, "ratio": -1.0,
                                 "timing": _timed(1, {"ours": ours, "baseline": base})}}}

    runs = [insensitivity_run([2.0], [30.0], 1e-15), insensitivity_run([3.0], [25.0], 1e-15)]
    merged = harness.merge_trees(runs)
    bench_insensitivity.refresh(merged, runs)
    assert merged["models"]["m"]["ratio"] == pytest.approx(12.5) and merged["ok"]
    runs[1]["models"]["m"]["max_abs_diff"] = 1e-6
    bench_insensitivity.refresh(merged, runs)
    assert merged["models"]["m"]["max_abs_diff"] == 1e-6 and not merged["ok"]

    def examples_run(ours, scipy, svds, agree=True, sv=1e-12):
        counting = {"tokens": 10 ** 7, "counter_tokens": 10 ** 5, "agree_with_scipy": agree,
                    "timing": _timed(1, {"ours": ours, "scipy": scipy, "counter": [1.0]})}
        svd = {"agree_top10_rule": sv, "agree_all_rule": sv, "agree_top10_lanczos": sv,
               "timing": _timed(1, {"rule": [1.0], "lanczos": [2.0], "svds": svds})}
        return {"threads": 1, "quick": False, "ok": True, "counting": counting, "svd": svd}

    runs = [examples_run([2.0], [5.0], [3.0]), examples_run([1.0], [4.0], [4.0], sv=1e-9)]
    merged = harness.merge_trees(runs)
    bench_examples.refresh(merged, runs)
    assert merged["counting"]["speedup_vs_scipy"] == pytest.approx(4.0)
    assert merged["counting"]["speedup_vs_counter"] == pytest.approx(10 ** 7 / 10 ** 5)
    assert merged["svd"]["ratio_rule"] == pytest.approx(3.0) and merged["svd"]["ratio_lanczos"] == pytest.approx(1.5)
    assert merged["svd"]["agree_top10_rule"] == 1e-9 and merged["ok"]
    runs[0]["svd"]["agree_top10_rule"] = 1e-6                            # the worst agreement over processes counts
    bench_examples.refresh(merged, runs)
    assert not merged["ok"]
    runs = [examples_run([2.0], [5.0], [3.0]), examples_run([2.0], [5.0], [3.0], agree=False)]
    merged = harness.merge_trees(runs)
    bench_examples.refresh(merged, runs)
    assert not merged["ok"]
