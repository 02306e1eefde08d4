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
from typing import Any, Callable, Sequence

from lib.book.threads import compute_threads, thread_environment

__all__ = ["DEFAULT_THREADS", "MIN_RUN_SECONDS", "TIMING_GATE_RULE", "WARM_UP_BELOW_SECONDS", "Comparison", "SideTimes",
           "add_arguments", "calls_per_run", "compute_threads",
           "cores", "cpu_seconds", "fixed_pools", "interleave", "is_loaded", "load_average", "parse_threads",
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
                  repeat_flags: Sequence[str] = ("--repeats",)) -> None:
    """Add ``--threads`` (comma-separated counts, default 1,2) and ``--repeats`` (interleaved
    rounds, each side's best reported) to a benchmark's command line."""
    parser.add_argument("--threads", type=parse_threads, default=list(threads),
                        help="thread counts, comma-separated; every side runs with each count, reported "
                             "separately (torch and BLAS/OpenMP threads; default %(default)s)")
    parser.add_argument(*repeat_flags, dest="repeats", type=positive_int, default=repeats,
                        help="interleaved repetitions of every side (A B A B ...); the best is reported "
                             "(default %(default)s)")


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


def run_per_thread_count(script: str | Path, argv: Sequence[str], threads: Sequence[int]) -> list[dict]:
    """Run ``script`` once per thread count, each in a fresh process whose every pool starts at
    that count (:func:`thread_environment`; polars and Rayon size theirs only at start), as
    ``script *argv --threads t --json FILE``; ``argv`` must not hold ``--threads`` or ``--json``
    (:func:`strip_options`). Each child's output is passed through; returns the JSON each wrote
    (a child that failed to write one raises RuntimeError)."""
    results = []
    for t in threads:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "result.json"
            cmd = [sys.executable, str(script), *argv, "--threads", str(t), "--json", str(out)]
            proc = subprocess.run(cmd, env={**os.environ, **thread_environment(t)})
            if not out.exists():
                raise RuntimeError(f"{Path(script).name} with {t} thread(s) wrote no result "
                                   f"(exit status {proc.returncode})")
            results.append({**json.loads(out.read_text()), "exit_status": proc.returncode})
    return results


def main_per_thread_count(script: str | Path, args, argv: Sequence[str], measure: Callable[[Any], int]) -> int:
    """A benchmark whose pools are sized only when a process starts (polars'): with one thread count,
    and this process started at it (``POLARS_MAX_THREADS``), ``measure(args)``; else every count of
    ``args.threads`` in its own process (:func:`run_per_thread_count`) and one JSON (``args.json``) with a
    run per count. Returns the exit status: 0 when every run was ok."""
    if len(args.threads) == 1 and os.environ.get("POLARS_MAX_THREADS") == str(args.threads[0]):
        return measure(args)
    runs = run_per_thread_count(script, strip_options(argv, ["--threads", "--json"]), args.threads)
    ok = all(run["ok"] for run in runs)
    print("\nOK" if ok else "\nFAIL (see the run above that failed)")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(dict(ok=ok, gate_rule=TIMING_GATE_RULE, runs=runs), indent=2) + "\n")
    return 0 if ok else 1
