"""Wall-clock helpers shared by the scripts in ``benchmarks/`` (never used in timed unit tests)."""
from __future__ import annotations

import os
import platform
import time
from typing import Any, Callable


def best_of(fn: Callable[[], Any], repeats: int = 3) -> tuple[float, Any]:
    """Run ``fn`` ``repeats`` times; return the fastest wall time (s) and the last result."""
    times, result = [], None
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return min(times), result


def machine_info() -> dict[str, Any]:
    """What a benchmark's numbers depend on: versions, CPUs, BLAS threads and the current load."""
    import numpy
    import scipy

    return dict(python=platform.python_version(), machine=platform.machine(), numpy=numpy.__version__,
                scipy=scipy.__version__, cpus=os.cpu_count(),
                blas_threads=os.environ.get("OPENBLAS_NUM_THREADS", "default"),
                load_average=list(os.getloadavg()))
