"""Side-by-side timing for the scripts in ``benchmarks/``: equal threads, interleaved best-of, the load.

A ratio between two implementations measures the code only if both sides ran under the same
conditions. On a shared machine three things break that, and this module handles each:

1. *Threads.* A side left with the library default (one BLAS/OpenMP/torch thread per core)
   competes for cores with everything else running; on a loaded machine its threads spin while
   they wait, and it can become 2–100× slower while the other side, mostly single-threaded,
   does not. So every side runs with the same explicit count, and each count is reported on
   its own: :func:`interleave` runs the sides under :func:`lib.book.threads.compute_threads`
   (torch's intra-op threads and every BLAS/OpenMP pool). Pools that are fixed when a process
   starts (polars', Rayon's) need a fresh process per count: :func:`run_per_thread_count`.
2. *Drift.* Load comes and goes, so one side timed after the other may see a different
   machine. The sides are interleaved (A B A B …, ``--repeats`` rounds) and each side's best
   run is reported: the best run is the one least disturbed. A side faster than
   :data:`MIN_RUN_SECONDS` is called several times per run (as ``timeit`` does) and its time per
   call kept, so that a run of a few milliseconds is not one timer reading and one cache state.
   Some sides' speed also depends on the process they run in (``collections.Counter``'s best
   moved by up to 32 % between two runs of one process each, our vectorised count's by 6.8 %):
   :func:`main_per_thread_count` can run each thread count in several fresh processes and merge
   their comparisons (:func:`merge_comparisons`: each side's best over all of them).
3. *Load.* The 1-minute load average is read before and after every timed run. A comparison in
   which it exceeded the cores by more than :data:`LOAD_MARGIN` (a run's own threads count in
   it), or which asked for more threads than there are cores, is
   flagged ``loaded``: its numbers are printed and written, but no timing requirement is
   decided on it (:meth:`Comparison.gate`). Correctness checks (equal results) always count.

Use::

    from benchmarks.harness import add_arguments, interleave

    add_arguments(parser)                          # --threads 1,2  --repeats 3
    for t in args.threads:
        c = interleave({"ours": f, "baseline": g}, threads=t, repeats=args.repeats)
        print(c.summary())                          # best times, load before → after, flag
        ok &= c.gate(c.ratio("baseline", "ours") >= 10)
        runs.append(c.as_dict())                    # JSON-ready

For sides that are not one call (a child process timing only its own solve, a side skipped
after it failed), build a :class:`Comparison` and call :meth:`Comparison.time` per run, inside
``with compute_threads(t):``.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from lib.book.threads import compute_threads, thread_environment

__all__ = ["DEFAULT_THREADS", "MIN_RUN_SECONDS", "TIMING_GATE_RULE", "WARM_UP_BELOW_SECONDS", "Comparison", "SideTimes",
           "add_arguments", "calls_per_run", "compute_threads", "comparison_lines", "comparisons", "cores",
           "cpu_seconds", "fixed_pools", "interleave", "is_comparison", "is_loaded", "load_average", "main_per_thread_count", "merge_comparisons", "merge_trees", "parse_threads",
           "positive_int", "run_per_thread_count", "strip_options", "thread_environment"]

#: A timed run of a side lasts at least this long: a faster side is called ``calls`` times in a row per
#: run, ``calls`` fixed by an untimed call after its first. With one call per run, sides of 5–90 ms moved
#: by 12–64 % between two quiet runs (bench_ngrams.py, bench_insensitivity.py, 2026-11-27).
MIN_RUN_SECONDS = 0.25

#: A side whose first call takes at least this long has that call as its first run; a faster side's first
#: call is an untimed warm-up (one-time costs: a first call of 0.8 s was followed by calls of 5 ms).
WARM_UP_BELOW_SECONDS = 2.5

#: The thread counts every benchmark reports by default, each on its own.
DEFAULT_THREADS = (1, 2)

#: How the load flag and the gates interact, written into every JSON result.
TIMING_GATE_RULE = ("timing requirements are decided only on clean runs: a run whose 1-minute load average "
                    "exceeded the cores by more than 0.5 (a run's own threads count in it), or which used more "
                    "threads than cores, is reported but not gated; correctness checks always apply")


def parse_threads(text: str) -> list[int]:
    """'1,2' → [1, 2]: thread counts, each an integer ≥ 1, in the order given, without repeats."""
    try:
        counts = [int(part) for part in str(text).split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"thread counts must be integers separated by commas; got {text!r}")
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"thread counts must be integers >= 1; got {text!r}")
    return list(dict.fromkeys(counts))


def positive_int(text: str) -> int:
    """An integer ≥ 1 from the command line."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1; got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser, *, repeats: int = 3, threads: Sequence[int] = DEFAULT_THREADS,
                  repeat_flags: Sequence[str] = ("--repeats",), processes: int | None = None) -> None:
    """Add ``--threads`` (comma-separated counts, default 1,2) and ``--repeats`` (interleaved
    rounds, each side's best reported) to a benchmark's command line; with ``processes`` (the
    default count) also ``--processes``, for a script run through :func:`main_per_thread_count`."""
    parser.add_argument("--threads", type=parse_threads, default=list(threads),
                        help="thread counts, comma-separated; every side runs with each count, reported "
                             "separately (torch and BLAS/OpenMP threads; default %(default)s)")
    parser.add_argument(*repeat_flags, dest="repeats", type=positive_int, default=repeats,
                        help="interleaved repetitions of every side (A B A B ...); the best is reported "
                             "(default %(default)s)")
    if processes is not None:
        parser.add_argument("--processes", type=positive_int, default=processes,
                            help="run each thread count in this many fresh processes, one after another, and "
                                 "report each side's best over all of their runs (default %(default)s)")


def cores() -> int:
    """The logical CPUs of this machine."""
    return os.cpu_count() or 1


def load_average() -> float:
    """The 1-minute load average (runnable and running threads, averaged)."""
    return os.getloadavg()[0]


# How far above the cores the 1-minute load average may read before a run counts as loaded. A run's
# own threads count in the load, so a clean run with t threads reads about t: quiet 2-thread runs on
# the 2-core machine read 2.00–2.07 (bench_llc_theorems.py, 2026-11-27), and a rule of "load > cores"
# flagged every one of them. bench_llc.py uses the same margin (--load-margin).
LOAD_MARGIN = 0.5


def is_loaded(loads: Sequence[float], threads: int, n_cores: int | None = None) -> bool:
    """Whether timings taken under these 1-minute load averages with ``threads`` threads may
    measure contention rather than code: the load exceeded the cores (``n_cores``, default this
    machine's) by more than :data:`LOAD_MARGIN`, or the threads exceeded the cores."""
    n_cores = cores() if n_cores is None else n_cores
    return max(loads, default=0.0) > n_cores + LOAD_MARGIN or threads > n_cores


def fixed_pools() -> dict[str, int]:
    """Thread pools of this process that are sized when it starts and cannot be limited later
    (polars'), with their sizes, for the record."""
    pools = {}
    if "polars" in sys.modules:
        pools["polars"] = int(sys.modules["polars"].thread_pool_size())
    return pools


def cpu_seconds() -> float:
    """CPU seconds of this process and of its finished children (user + system)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


@dataclass
class SideTimes:
    """Every timed run of one side: wall and CPU seconds per call (``seconds`` is what is compared:
    wall time, or the time a side reported for itself), the calls in each run, and its last result."""

    seconds: list[float] = field(default_factory=list)
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    result: Any = None
    calls: int = 1

    @property
    def best(self) -> float:
        return min(self.seconds)

    @property
    def best_cpu(self) -> float:
        return min(self.cpu)


@dataclass
class Comparison:
    """The runs of several sides at one thread count, with the load average around each."""

    threads: int
    repeats: int = 1
    sides: dict[str, SideTimes] = field(default_factory=dict)
    load: list[tuple[float, float]] = field(default_factory=list)   # (before, after) of every timed run

    def time(self, side: str, fn: Callable[[], Any], seconds_of: Callable[[Any], float] | None = None,
             calls: int = 1) -> Any:
        """Run ``fn()`` ``calls`` times in a row as one run of ``side`` and record the time per call;
        return the last result. ``seconds_of(result)``, if given, is the time compared (e.g. a solve
        timed inside a child process, without its start-up; then ``calls`` must be 1); wall and CPU time
        are recorded either way. A run that raises is not timed (its load is recorded) and the
        exception passes on."""
        if seconds_of is not None and calls != 1:
            raise ValueError("a side that reports its own seconds runs one call per run (calls = 1)")
        before, c0, t0 = load_average(), cpu_seconds(), time.perf_counter()
        try:
            for _ in range(calls):
                result = fn()
            wall, cpu = (time.perf_counter() - t0) / calls, (cpu_seconds() - c0) / calls
        finally:
            self.load.append((before, load_average()))
        times = self.sides.setdefault(side, SideTimes())
        times.seconds.append(float(seconds_of(result)) if seconds_of else wall)
        times.wall.append(wall)
        times.cpu.append(cpu)
        times.result = result
        times.calls = calls
        return result

    def best(self, side: str) -> float:
        """The side's fastest run (s)."""
        return self.sides[side].best

    def result(self, side: str) -> Any:
        """The side's last result."""
        return self.sides[side].result

    def ratio(self, slow: str, fast: str, cpu: bool = False) -> float:
        """best(slow) / best(fast): how many times faster ``fast`` is (of CPU time with ``cpu``)."""
        a, b = self.sides[slow], self.sides[fast]
        return a.best_cpu / b.best_cpu if cpu else a.best / b.best

    @property
    def load_range(self) -> tuple[float, float]:
        values = [x for pair in self.load for x in pair] or [load_average()]
        return min(values), max(values)

    @property
    def loaded(self) -> bool:
        """Whether this comparison may measure contention (:func:`is_loaded`)."""
        return is_loaded([x for pair in self.load for x in pair], self.threads)

    def gate(self, passed: bool) -> bool:
        """A timing requirement's verdict for the exit status: ``passed`` on a clean run; a
        loaded run passes (it is reported, not gated)."""
        return bool(passed) or self.loaded

    def summary(self) -> str:
        """One line: threads, each side's best, the load range and whether it is gated."""
        lo, hi = self.load_range
        bests = ", ".join(f"{name} {times.best:.3g} s" for name, times in self.sides.items())
        flag = "LOADED: reported, not gated" if self.loaded else "clean"
        return (f"{self.threads} thread{'s' if self.threads > 1 else ''}, best of {self.repeats}: {bests}; "
                f"load {lo:.2f}–{hi:.2f} on {cores()} cores ({flag})")

    def as_dict(self) -> dict:
        """JSON-ready: every run's times, each side's best, the loads and the flag (a script
        writes :data:`TIMING_GATE_RULE` once beside them)."""
        lo, hi = self.load_range
        return {"threads": self.threads, "repeats": self.repeats, "cores": cores(),
                "load_average_1min": [list(pair) for pair in self.load], "load_min": lo, "load_max": hi,
                "loaded": self.loaded, "gated": not self.loaded, "fixed_pools": fixed_pools(),
                "sides": {name: {"best_s": t.best, "best_cpu_s": t.best_cpu, "seconds": t.seconds,
                                 "wall_s": t.wall, "cpu_s": t.cpu, "calls_per_run": t.calls}
                          for name, t in self.sides.items()}}


def calls_per_run(first_call_seconds: float, min_seconds: float = MIN_RUN_SECONDS, most: int = 1000) -> int:
    """How many calls of a side make a run of at least ``min_seconds``, from one call's seconds (1 for a
    side that already takes that long; at most ``most``)."""
    if first_call_seconds >= min_seconds:
        return 1
    return min(most, math.ceil(min_seconds / max(first_call_seconds, 1e-9)))


def interleave(sides: dict[str, Callable[[], Any]], *, threads: int, repeats: int, rotate: bool = False,
               verbose: bool = False, min_seconds: float = MIN_RUN_SECONDS,
               warm_up_below: float = WARM_UP_BELOW_SECONDS) -> Comparison:
    """Run every side ``repeats`` times, interleaved (A B A B …; with ``rotate`` the order turns
    each round: A B C, B C A, …), all with ``threads`` threads (:func:`compute_threads`), the load
    average read around each run. A side's first call is its first run if it takes at least
    ``warm_up_below`` seconds; otherwise it is an untimed warm-up, and the next call sets the calls per
    run (:func:`calls_per_run`: 1, and that call is the first run, if it takes at least ``min_seconds``;
    else enough calls in a row to last ``min_seconds``, timed per call, and that call is not kept).
    Each side's last result stays in the comparison."""
    names = list(sides)
    comparison = Comparison(threads=threads, repeats=repeats)
    calls = {}
    with compute_threads(threads):
        for r in range(repeats):
            order = names[r % len(names):] + names[:r % len(names)] if rotate else names
            for name in order:
                kept = None
                if name not in calls:  # the first call: a run if it is long, else a warm-up before the calibration
                    probe = Comparison(threads=threads)
                    probe.time(name, sides[name])
                    if probe.sides[name].wall[0] < warm_up_below:
                        probe = Comparison(threads=threads)
                        probe.time(name, sides[name])
                    calls[name] = calls_per_run(probe.sides[name].wall[0], min_seconds)
                    kept = probe if calls[name] == 1 else None
                if kept is not None:
                    comparison.load.extend(kept.load)
                    comparison.sides[name] = kept.sides[name]
                else:
                    comparison.time(name, sides[name], calls=calls[name])
                if verbose:
                    times = comparison.sides[name]
                    print(f"  {threads} thr, round {r}: {name:<12} {times.wall[-1]:8.3f} s wall, "
                          f"{times.cpu[-1]:8.3f} s CPU, load {comparison.load[-1][0]:.2f}→{comparison.load[-1][1]:.2f}",
                          flush=True)
    return comparison


def strip_options(argv: Sequence[str], names: Sequence[str]) -> list[str]:
    """``argv`` without the options ``names`` (each taking one value, as ``--x v`` or ``--x=v``)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in names:
            skip = True
        elif not any(arg.startswith(name + "=") for name in names):
            out.append(arg)
    return out


def run_per_thread_count(script: str | Path, argv: Sequence[str], threads: Sequence[int],
                         processes: int | None = None) -> list[list[dict]]:
    """Run ``script`` in a fresh process per thread count, whose every pool starts at that count
    (:func:`thread_environment`; polars and Rayon size theirs only at start), as ``script *argv
    --threads t --json FILE`` (and ``--processes 1`` when ``processes`` is given); ``argv`` must not
    hold these options (:func:`strip_options`). With ``processes`` = P, P rounds, each running every
    count once, so that one count's processes are spread over the whole time. Each child's output is
    passed through; returns, per count, the JSON its processes wrote (a child that failed to write
    one raises RuntimeError), each with its ``exit_status``."""
    results: list[list[dict]] = [[] for _ in threads]
    for _ in range(processes or 1):
        for i, t in enumerate(threads):
            with tempfile.TemporaryDirectory() as tmp:
                out = Path(tmp) / "result.json"
                cmd = [sys.executable, str(script), *argv, "--threads", str(t), "--json", str(out)]
                if processes is not None:
                    cmd += ["--processes", "1"]
                proc = subprocess.run(cmd, env={**os.environ, **thread_environment(t)})
                if not out.exists():
                    raise RuntimeError(f"{Path(script).name} with {t} thread(s) wrote no result "
                                       f"(exit status {proc.returncode})")
                results[i].append({**json.loads(out.read_text()), "exit_status": proc.returncode})
    return results


def is_comparison(node: Any) -> bool:
    """Whether a JSON node is a :meth:`Comparison.as_dict`."""
    return isinstance(node, dict) and isinstance(node.get("sides"), dict) and "threads" in node


def merge_comparisons(nodes: Sequence[dict]) -> dict:
    """One comparison (as :meth:`Comparison.as_dict`) from the same comparison made in several processes:
    every run of every side, so that a side's ``best_s`` is its best over all processes; the loads of all
    runs, judged together (:func:`is_loaded`); and per side ``process_best_s`` and ``process_calls_per_run``,
    its best and its calls per run in each process, in order. A side absent from a process (one that
    failed there) has the runs of the others."""
    if not nodes or not all(is_comparison(n) for n in nodes):
        raise ValueError("merge_comparisons needs one or more comparisons (Comparison.as_dict)")
    threads = {n["threads"] for n in nodes}
    if len(threads) != 1:
        raise ValueError(f"comparisons made at different thread counts cannot be merged: {sorted(threads)}")
    loads = [list(pair) for n in nodes for pair in n.get("load_average_1min", [])]
    flat = [x for pair in loads for x in pair]
    n_cores = nodes[0].get("cores", cores())
    sides = {}
    for name in dict.fromkeys(k for n in nodes for k in n["sides"]):
        runs = [n["sides"][name] for n in nodes if name in n["sides"]]
        joined = {key: [x for r in runs for x in r.get(key, [])] for key in ("seconds", "wall_s", "cpu_s")}
        sides[name] = {"best_s": min(r["best_s"] for r in runs), "best_cpu_s": min(r["best_cpu_s"] for r in runs),
                       **joined, "calls_per_run": runs[0].get("calls_per_run", 1),
                       "process_best_s": [r["best_s"] for r in runs],
                       "process_calls_per_run": [r.get("calls_per_run", 1) for r in runs]}
    loaded = is_loaded(flat, nodes[0]["threads"], n_cores) if flat else any(n.get("loaded") for n in nodes)
    return {**nodes[0], "repeats": sum(n.get("repeats", 1) for n in nodes), "processes": len(nodes),
            "load_average_1min": loads, "load_min": min(flat, default=nodes[0].get("load_min", 0.0)),
            "load_max": max(flat, default=nodes[0].get("load_max", 0.0)), "loaded": loaded, "gated": not loaded,
            "sides": sides}


def merge_trees(trees: Sequence[Any]) -> Any:
    """One JSON tree from trees of the same shape (one benchmark run in several processes): every
    comparison in it merged across them (:func:`merge_comparisons`); any other value is the first
    tree's, so a benchmark recomputes what it derives from its timings (``refresh`` of
    :func:`main_per_thread_count`)."""
    first = trees[0]
    if is_comparison(first):
        return merge_comparisons(trees)
    if isinstance(first, dict):
        return {key: merge_trees([t[key] for t in trees if isinstance(t, dict) and key in t])
                for key in first}
    if isinstance(first, list):
        if any(not isinstance(t, list) or len(t) != len(first) for t in trees):
            raise ValueError("the processes' results differ in shape: a list has different lengths")
        return [merge_trees([t[i] for t in trees]) for i in range(len(first))]
    return first


def comparisons(tree: Any, path: str = "") -> Iterator[tuple[str, dict]]:
    """Every comparison (:func:`is_comparison`) in a JSON tree, with its path: dict keys joined by ``/``
    (under a dict with a ``case``, ``name`` or ``stream``, as ``label:key``), list items as ``[i]``. A
    comparison's own contents are not searched."""
    if is_comparison(tree):
        yield path, tree
    elif isinstance(tree, dict):
        label = tree.get("case") or tree.get("name") or tree.get("stream")
        for key, value in tree.items():
            yield from comparisons(value, f"{path}/{key}" if label is None else f"{path}/{label}:{key}")
    elif isinstance(tree, list):
        for i, value in enumerate(tree):
            yield from comparisons(value, f"{path}[{i}]")


def comparison_lines(tree: Any) -> list[str]:
    """One line per comparison in a merged tree: each side's best, and its best in each process (ms)."""
    return [f"{path or '.'} [{c['threads']} thr]: " + "; ".join(
                f"{name} {times['best_s'] * 1e3:.4g} ms ("
                + ", ".join(f"{x * 1e3:.4g}" for x in times.get("process_best_s", [times["best_s"]])) + ")"
                for name, times in c["sides"].items())
            for path, c in comparisons(tree)]


def main_per_thread_count(script: str | Path, args, argv: Sequence[str], measure: Callable[[Any], int],
                          refresh: Callable[[dict, list[dict]], None] | None = None) -> int:
    """A benchmark run per thread count in its own process (polars sizes its pools only when a process
    starts): with one thread count, this process started at it (``POLARS_MAX_THREADS``) and one process
    asked for, ``measure(args)``; else every count of ``args.threads`` in ``args.processes`` fresh
    processes each (:func:`run_per_thread_count`) and one JSON (``args.json``) with a run per count.

    With several processes a count's run is their JSONs merged (:func:`merge_trees`: each side's best over
    all processes), and ``refresh(merged, runs)`` recomputes in ``merged`` what the benchmark derives from
    its timings (bests, ratios, ``ok``) from the merged comparisons and the processes' own ``runs`` (their
    correctness checks); a script that offers ``--processes`` must pass it. Returns the exit status: 0 when
    every run was ok."""
    processes = getattr(args, "processes", None)
    if (len(args.threads) == 1 and os.environ.get("POLARS_MAX_THREADS") == str(args.threads[0])
            and (processes or 1) == 1):
        return measure(args)
    if (processes or 1) > 1 and refresh is None:
        raise ValueError("a benchmark run in several processes needs a refresh function")
    groups = run_per_thread_count(script, strip_options(argv, ["--threads", "--json", "--processes"]),
                                  args.threads, processes)
    runs = []
    for group in groups:
        if len(group) == 1:
            runs.append(group[0])
            continue
        merged = merge_trees(group)
        merged.update(processes=len(group), exit_status=max(g["exit_status"] for g in group))
        refresh(merged, group)
        print(f"\n== {merged.get('threads', '?')} thread(s), best over {len(group)} processes (each process's best "
              f"in brackets):", *comparison_lines(merged), sep="\n  ")
        runs.append(merged)
    ok = all(run["ok"] for run in runs)
    print("\nOK" if ok else "\nFAIL (see the run above that failed)")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(dict(ok=ok, gate_rule=TIMING_GATE_RULE, processes=processes or 1, runs=runs),
                                        indent=2) + "\n")
    return 0 if ok else 1
