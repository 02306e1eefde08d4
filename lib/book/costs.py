"""What a run will cost before it starts: each chapter's heavy steps, their memory and arithmetic, the device.

A chapter's declaration names a function of the library that lists its heavy steps for the
values a run will use (``costs: lib.logits:heavy_steps``). Each :class:`HeavyStep` carries its
estimated peak memory and its arithmetic (floating-point operations). ``lowrank-book plan``
prints them with the total time on this device's measured throughput, and the runner refuses,
before any work, a run whose largest step cannot fit the device's memory, naming the step, the
sizes that make it and the parameters that shrink it.

The device is described by :class:`Device`: its memory (a GPU's total memory; on the CPU the
memory available to this process) and its matmul throughput, measured once per device and
thread count with a square float32 product and kept in the book's cache. A named device
(``--gpu 24`` for a 24 GB GPU) can be planned for without having it, with the throughput
stated by the caller.
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from typing import Any, Callable

from .cache import cached

GB = 1e9


class DoesNotFit(ValueError):
    """A heavy step's estimated peak memory exceeds the device's."""


@dataclass(frozen=True)
class HeavyStep:
    """One heavy step of a chapter: ``name`` (what it computes), ``sizes`` (the quantities that set its
    cost, in words: "|H| = 10000, |F| = 10000, k = 50"), ``peak_bytes`` (estimated peak memory),
    ``flops`` (floating-point operations), ``shrink`` (the parameters that lower it), ``host`` (True for a step
    that runs in host memory on the CPU whatever the run's device: NumPy or SciPy work, counting, solvers; it is
    held to the host's memory and priced at the host's rate). A ``peak_bytes`` of 0 means not estimated."""

    name: str
    sizes: str
    peak_bytes: float
    flops: float
    shrink: str = ""
    host: bool = False

    def seconds(self, flops_per_s: float) -> float:
        return self.flops / flops_per_s


@dataclass(frozen=True)
class Device:
    """A device to plan for: its name, memory in bytes and matmul throughput in FLOP/s, and for an
    accelerator its ``host`` (the CPU that runs the host steps; None: the device is the CPU itself)."""

    name: str
    memory_bytes: float
    flops_per_s: float
    measured: bool = True
    host: "Device | None" = None

    def runs(self, step: HeavyStep) -> "Device":
        """The device that runs ``step``: the host for a host step on an accelerator, else this one."""
        return self.host if step.host and self.host is not None else self


def _available_cpu_memory() -> float:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024
    except OSError:
        pass
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def measure_matmul_flops(device: str = "cpu", n: int = 1024, repeats: int = 5) -> float:
    """The best rate of ``repeats`` float32 n×n matrix products on ``device`` (FLOP/s, 2n³ per product)."""
    import torch

    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    best = math.inf
    for _ in range(repeats + 1):  # the first warms up
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        (a @ b).sum().item()
        best = min(best, time.perf_counter() - start)
    return 2 * n ** 3 / best


def this_device(device: str = "auto", measure: bool = True) -> Device:
    """The device a run with ``device`` ('auto', 'cpu', 'cuda') would use: its memory, and (``measure``)
    its matmul throughput, measured once and cached; without ``measure`` the throughput is NaN."""
    import torch

    use_cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    if use_cuda:
        props = torch.cuda.get_device_properties(0)
        key = {"device": props.name, "torch": torch.__version__}
        rate = cached("matmul-throughput", key, lambda: {"flops": measure_matmul_flops("cuda", 4096)},
                      fmt="pickle")["flops"] if measure else math.nan
        return Device(f"{props.name} ({props.total_memory / GB:.0f} GB)", float(props.total_memory), rate,
                      host=this_device("cpu", measure))
    threads = torch.get_num_threads()
    key = {"device": "cpu", "threads": threads, "cpus": os.cpu_count(), "torch": torch.__version__}
    rate = cached("matmul-throughput", key, lambda: {"flops": measure_matmul_flops("cpu")},
                  fmt="pickle")["flops"] if measure else math.nan
    return Device(f"CPU ({threads} threads)", _available_cpu_memory(), rate)


def named_gpu(memory_gb: float, tflops: float, host: Device | None = None) -> Device:
    """A GPU planned for without having it: ``memory_gb`` of memory at ``tflops`` (stated, not measured), its
    host steps on ``host`` (the lowrank-book command passes this machine's CPU)."""
    return Device(f"a {memory_gb:g} GB GPU at {tflops:g} TFLOP/s (stated)", memory_gb * GB, tflops * 1e12, False,
                  host)


def heavy_steps(chapter, values: dict[str, Any]) -> list[HeavyStep]:
    """The heavy steps the chapter's declaration names (``costs: lib.module:function``) for ``values``;
    empty for a chapter without heavy steps."""
    function: Callable | None = getattr(chapter, "costs", None)
    return list(function(values)) if function is not None else []


def check_fits(chapter_id: str, steps: list[HeavyStep], device: Device) -> None:
    """Raise :class:`DoesNotFit` for the largest step that exceeds the device's memory."""
    too_big = [s for s in steps if s.peak_bytes > device.runs(s).memory_bytes]
    if too_big:
        worst = max(too_big, key=lambda s: s.peak_bytes)
        where = device.runs(worst)
        raise DoesNotFit(f"{chapter_id}: {worst.name} at {worst.sizes} needs {_bytes(worst.peak_bytes)}; "
                         f"{where.name} has {_bytes(where.memory_bytes)}"
                         + (f": lower {worst.shrink}" if worst.shrink else ""))


def _bytes(n: float) -> str:
    return f"{n / GB:.3g} GB" if n >= 0.1 * GB else f"{n / 2 ** 20:.3g} MB"


def _flops(n: float) -> str:
    for unit, size in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.3g} FLOP"


def _seconds(s: float) -> str:
    if s < 120:
        return f"{s:.3g} s"
    if s < 7200:
        return f"{s / 60:.3g} min"
    return f"{s / 3600:.3g} h"


def plan_lines(chapter_id: str, steps: list[HeavyStep], device: Device) -> list[str]:
    """What ``lowrank-book plan`` prints for one chapter on ``device``."""
    if not steps:
        return [f"{chapter_id}: no heavy steps declared (its declaration names no costs function: it runs in "
                "minutes at most on a CPU at any of its presets)"]
    lines = [f"{chapter_id} on {device.name}, {_bytes(device.memory_bytes)}, "
             f"{device.flops_per_s / 1e9:.3g} GFLOP/s {'measured' if device.measured else 'stated'}:"]
    for s in steps:
        where = device.runs(s)
        fits = "fits" if s.peak_bytes <= where.memory_bytes else "DOES NOT FIT"
        peak = f"peak {_bytes(s.peak_bytes)} ({fits})" if s.peak_bytes > 0 else "peak not estimated"
        on_host = f" on the host, {where.name}" if where is not device else ""
        lines.append(f"    {s.name} ({s.sizes}){on_host}: {peak}, {_flops(s.flops)}, "
                     f"~{_seconds(s.seconds(where.flops_per_s))}")
    total = sum(s.seconds(device.runs(s).flops_per_s) for s in steps)
    lines.append(f"    total: {_flops(sum(s.flops for s in steps))}, ~{_seconds(total)} at the matmul rate "
                 f"(a lower bound: the steps do not all run at it); largest peak "
                 f"{_bytes(max(s.peak_bytes for s in steps))}")
    return lines
