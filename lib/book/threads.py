"""Thread counts of the linear-algebra libraries: how many threads BLAS, OpenMP and torch may use.

numpy and scipy call BLAS/LAPACK (OpenBLAS here), whose thread pool starts with one thread per
core. On an idle machine that can help large matrix products; on a busy one — a reader's laptop
running a browser, a shared server, two benchmarks side by side — each BLAS call waits until
*every* one of its threads has a core, and the waiting threads spin. A loop of many small BLAS
calls then runs many times slower than on one thread: the book's ADMM for the NTP-SVM took 160 s
with two BLAS threads on a loaded 2-core machine against 1.1–2.5 s on one thread, and
``scipy.sparse.linalg.svds`` took twice as long as on one thread.

This module sets those counts at run time (through ``threadpoolctl``, which finds every BLAS and
OpenMP library loaded in the process):

* :func:`blas_threads` — a block (or, as a decorator, a function) with at most n BLAS threads,
  the previous counts restored after;
* :func:`solver_threads` — the library's policy for its iterative linear-algebra loops (see there);
* :func:`compute_threads` — n threads for torch's intra-op pool *and* every BLAS/OpenMP pool, the
  equal thread counts a benchmark gives each side it compares;
* :func:`thread_environment` — the environment variables that start a child process's pools at n
  threads, for the pools that cannot be changed once running (polars', Rayon's).

torch's own intra-op count alone is :func:`lib.book.device.torch_threads`.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

from threadpoolctl import threadpool_limits

from .device import torch_threads

#: BLAS threads of the library's iterative linear-algebra loops (:func:`solver_threads`).
SOLVER_BLAS_THREADS = 1

#: The environment variables that fix a thread pool's size when a process starts.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS",
                    "NUMEXPR_NUM_THREADS", "POLARS_MAX_THREADS", "RAYON_NUM_THREADS")


def check_count(n) -> int:
    """n as a thread count (an integer ≥ 1), or ValueError."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"a thread count must be an integer >= 1; got {n!r}")
    return n


@contextlib.contextmanager
def blas_threads(n: int) -> Iterator[None]:
    """Run the block with at most ``n`` threads in every BLAS library loaded in this process
    (numpy's and scipy's OpenBLAS, MKL, ...), restoring each library's previous count after.
    Also usable as a decorator: ``@blas_threads(1)``. Costs a few milliseconds per entry (the
    loaded libraries are looked up each time), so wrap whole loops, not single small calls."""
    with threadpool_limits(limits=check_count(n), user_api="blas"):
        yield


def solver_threads():
    """The BLAS thread count of the library's iterative linear-algebra loops: one thread
    (:data:`SOLVER_BLAS_THREADS`), whatever the machine has. Used by the ADMM of the NTP-SVM
    (:func:`lib.ntp.ntp_svm_first_order`), the top-r SVDs, Lanczos and randomized
    (:meth:`lib.modes.Modes.top`, :func:`lib.empirical_modes.top_components`), and the Newton
    loop of the effective distribution (:meth:`lib.modes.Modes.effective`).

    Why one: these loops make many BLAS calls on small or thin matrices — a 10²×10³ SVD per ADMM
    iteration; ARPACK's vector updates on n × (2r + 1) blocks; the randomized SVD's n × (r + 10)
    products, whose sparse half scipy computes on one thread anyway. A second thread can save
    little of such work even on an idle machine, but on a loaded one every call waits for all of
    its threads to find a core, and the loop became 2× (svds), 45× (Newton) to 100× (ADMM)
    slower. One thread bounds that loss; results are the same up to the rounding of a different
    summation order.

    Returns a context manager, ``with solver_threads(): ...``, that also decorates a function:
    ``@solver_threads()``."""
    return blas_threads(SOLVER_BLAS_THREADS)


@contextlib.contextmanager
def compute_threads(n: int) -> Iterator[None]:
    """Run the block with ``n`` threads for torch's intra-op pool (``torch.set_num_threads``)
    and at most ``n`` in every BLAS and OpenMP library loaded in this process (threadpoolctl),
    restoring all of them after. torch is imported first (when installed), so that its OpenMP
    library is among those limited. Pools fixed when a process starts (polars', Rayon's) are
    not changed: give a child process :func:`thread_environment` instead."""
    check_count(n)
    try:
        import torch  # noqa: F401  (loads torch's OpenMP library before the limits are set)
        limit_torch = torch_threads(n)
    except ImportError:  # pragma: no cover - torch is a hard requirement
        limit_torch = contextlib.nullcontext()
    with limit_torch, threadpool_limits(limits=n):
        yield


def thread_environment(n: int) -> dict[str, str]:
    """Environment variables that start every thread pool of a new process at ``n`` threads
    (OpenMP, OpenBLAS, MKL, Accelerate, numexpr, polars, Rayon): ``{**os.environ, **thread_environment(1)}``."""
    return {name: str(check_count(n)) for name in THREAD_VARIABLES}
