"""The library's iterative linear-algebra loops run BLAS on one thread (lib.book.threads.solver_threads)."""
import numpy as np
import pytest
import scipy.sparse as sp
from threadpoolctl import threadpool_info, threadpool_limits

from lib import empirical_modes as em
from lib import modes as modes_module
from lib import ntp
from lib.book.threads import SOLVER_BLAS_THREADS
from lib.modes import Modes


def blas_counts() -> set[int]:
    return {lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"}


def spy(monkeypatch, owner, name: str) -> list[set[int]]:
    """Replace owner.name by a wrapper that records the BLAS thread counts at every call."""
    seen, original = [], getattr(owner, name)

    def wrapper(*args, **kwargs):
        seen.append(blas_counts())
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, wrapper)
    return seen


@pytest.fixture
def two_blas_threads():
    """A known starting point: two BLAS threads, so that the loops' one thread is a change."""
    with threadpool_limits(limits=2, user_api="blas"):
        yield blas_counts()


def random_joint(n=300, nnz=3000, seed=0):
    rng = np.random.default_rng(seed)
    J = sp.csr_matrix((rng.random(nnz), (rng.integers(0, n, nnz), rng.integers(0, n, nnz))), shape=(n, n))
    J.sum_duplicates()
    return J / J.sum()


@pytest.mark.parametrize("method", ["lanczos", "randomized"])
def test_top_modes_and_top_components_run_on_one_blas_thread(monkeypatch, two_blas_threads, method):
    seen = spy(monkeypatch, modes_module.spla, "svds") if method == "lanczos" else \
        spy(monkeypatch, modes_module, "randomized_svd")
    Modes.top(random_joint(), 5, method=method, zero_rows="drop")
    seen_em = spy(monkeypatch, em.spla, "svds") if method == "lanczos" else spy(monkeypatch, em, "randomized_svd")
    em.top_components(random_joint().tocsr(), 5, method)
    assert seen and seen_em and all(c == {SOLVER_BLAS_THREADS} for c in seen + seen_em)
    assert blas_counts() == two_blas_threads                     # restored


def test_admm_and_effective_run_on_one_blas_thread(monkeypatch, two_blas_threads):
    seen = spy(monkeypatch, np.linalg, "svd")
    ntp.ntp_svm_first_order(ntp.random_supports(12, 30, 3, seed=0), tol=1e-6)
    assert seen and all(c == {SOLVER_BLAS_THREADS} for c in seen)
    m = Modes.from_joint(random_joint(40, 600).toarray())
    seen = spy(monkeypatch, np.linalg, "solve")
    m.effective(3)
    assert seen and all(c == {SOLVER_BLAS_THREADS} for c in seen)
    assert blas_counts() == two_blas_threads
