"""Thread counts of BLAS, OpenMP and torch (lib.book.threads): set inside the block, restored after."""
import numpy as np
import pytest
import scipy.linalg  # noqa: F401  (loads scipy's BLAS too, so both libraries are checked)
import torch
from threadpoolctl import threadpool_info, threadpool_limits

from lib.book.threads import (SOLVER_BLAS_THREADS, blas_threads, compute_threads, solver_threads,
                              thread_environment)


def counts(api: str) -> list[int]:
    """The thread count of every loaded library of one kind ('blas' or 'openmp')."""
    return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == api]


def test_blas_threads_sets_every_blas_library_and_restores_it():
    assert counts("blas"), "no BLAS library found by threadpoolctl"
    with threadpool_limits(limits=2, user_api="blas"):       # a known starting point
        before = counts("blas")
        with blas_threads(1):
            assert counts("blas") == [1] * len(before)
        assert counts("blas") == before


def test_blas_threads_is_also_a_decorator_and_restores_after_an_error():
    @blas_threads(1)
    def inside():
        return counts("blas")

    with threadpool_limits(limits=2, user_api="blas"):
        before = counts("blas")
        assert inside() == [1] * len(before)
        assert counts("blas") == before
        with pytest.raises(RuntimeError):
            with blas_threads(1):
                raise RuntimeError("boom")
        assert counts("blas") == before


def test_solver_threads_is_the_documented_count():
    assert SOLVER_BLAS_THREADS == 1
    with threadpool_limits(limits=2, user_api="blas"):
        before = counts("blas")
        with solver_threads():
            assert counts("blas") == [SOLVER_BLAS_THREADS] * len(before)
        assert counts("blas") == before


def test_compute_threads_sets_torch_blas_and_openmp_and_restores_them():
    before_torch = torch.get_num_threads()
    before = {api: counts(api) for api in ("blas", "openmp")}
    with compute_threads(1):
        assert torch.get_num_threads() == 1
        assert set(counts("blas")) == {1}
        assert set(counts("openmp")) <= {1}
        np.linalg.svd(np.ones((50, 40)))                     # still computes
    assert torch.get_num_threads() == before_torch
    assert {api: counts(api) for api in ("blas", "openmp")} == before


def test_thread_environment_and_bad_counts():
    env = thread_environment(2)
    assert env["OMP_NUM_THREADS"] == env["OPENBLAS_NUM_THREADS"] == env["POLARS_MAX_THREADS"] == "2"
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="thread count"):
            blas_threads(bad).__enter__()
        with pytest.raises(ValueError, match="thread count"):
            thread_environment(bad)
