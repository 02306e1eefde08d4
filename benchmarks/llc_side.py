"""What every side of ``bench_llc.py`` does alike, in whichever venv it runs (torch and threadpoolctl only).

A *side* is one estimator sampling one case in its own process: ours (``bench_llc.py
--worker``, in the book's venv), devinterp (``devinterp_baseline.py``) and canonical-interp
(``canonical_baseline.py``), each in its own venv. They share, from here:

* :func:`read_spec`: the JSON spec written by ``bench_llc.py`` (an argument, a file or '-');
* :func:`limit_threads`: the same thread count for torch's intra-op pool and for every
  OpenMP/BLAS pool that threadpoolctl finds (the pools actually in force are reported);
* :func:`load_case`: the model at w* and its data, from the ``.pt`` file that
  ``bench_llc.py`` made once for every side;
* :class:`Sandbox`: a fresh directory as cwd, TMPDIR and HF_HOME, so that the bytes a run
  leaves on disk can be measured (and are then deleted);
* :func:`llc_summary` and :func:`peak_rss_bytes`: the fields every side reports.
"""

from __future__ import annotations

import json
import math
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))  # tiny_transformer


def read_spec(arg: str) -> dict:
    """The spec: a JSON object given inline, as a file path, or on stdin ('-'); ``data`` made absolute."""
    if arg == "-":
        spec = json.load(sys.stdin)
    elif arg.lstrip().startswith("{"):
        spec = json.loads(arg)
    else:
        spec = json.loads(Path(arg).read_text())
    spec = dict(spec)
    spec["data"] = str(Path(spec["data"]).resolve())
    return spec


_LIMITS = []  # the threadpool_limits in force (kept alive for the life of the process)


def limit_threads(threads: int) -> dict:
    """``threads`` threads for torch and for every OpenMP/BLAS pool loaded; returns {pool: threads} as in force."""
    import torch
    from threadpoolctl import threadpool_info, threadpool_limits

    torch.set_num_threads(threads)
    _LIMITS.append(threadpool_limits(limits=threads))
    pools = {f"{p['user_api']}:{p['internal_api']}": p["num_threads"] for p in threadpool_info()}
    return dict(pools, torch=torch.get_num_threads())


def start_side(argv: list[str], doc: str):
    """The start every baseline side shares: its spec from ``argv[0]`` (:func:`read_spec`), SIGTERM turned into
    an exit that runs the ``finally``s (temporary files go), the threads limited (:func:`limit_threads`) and
    warnings silenced. Returns (spec, pools), or None after printing ``doc`` when no spec was given."""
    import signal
    import warnings

    if not argv:
        print(doc)
        return None
    spec = read_spec(argv[0])
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    pools = limit_threads(int(spec["threads"]))
    warnings.simplefilter("ignore")
    return spec, pools


def supply_itertools_batched() -> None:
    """canonical-interp 0.1.x imports ``itertools.batched`` (Python ≥ 3.12) although it declares Python ≥ 3.10;
    on an older Python supply it (the recipe of the itertools docs) before that import."""
    import itertools

    if hasattr(itertools, "batched"):
        return

    def batched(iterable, n):
        it = iter(iterable)
        while batch := tuple(itertools.islice(it, n)):
            yield batch

    itertools.batched = batched


def synchronize(device) -> None:
    """Wait for ``device``'s queued work (CUDA); nothing to wait for on the CPU."""
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def matmul_peak(device="cpu", dtype=None, size=2048, repeats=7, warmup=1) -> float:
    """Best FLOP/s of a size² @ size² torch.matmul on ``device`` in ``dtype`` (default float32): the achievable
    matmul peak, against which a side's FLOP rate is read."""
    import torch

    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    for _ in range(warmup):
        a @ b
    best = math.inf
    for _ in range(repeats):
        synchronize(device)
        t0 = time.perf_counter()
        a @ b
        synchronize(device)
        best = min(best, time.perf_counter() - t0)
    return 2 * size ** 3 / best


def rrr_sample_loss(model, x, y):
    """Per-sample squared error of reduced-rank regression, averaged over the outputs (its batch mean is F.mse_loss)."""
    return ((model(x) - y) ** 2).mean(dim=1)


def load_case(spec: dict):
    """(model at w*, the blob of its data) for ``spec["case"]`` ("rrr" or "transformer")."""
    import torch

    from tiny_transformer import TinyTransformer, rrr_model

    blob = torch.load(spec["data"], weights_only=True)
    if spec["case"] == "rrr":
        m, h, n = (int(v) for v in blob["shape"])
        model = rrr_model(m, h, n)
    else:
        model = TinyTransformer(**blob["config"])
    model.load_state_dict(blob["state_dict"])
    return model, blob


def dir_bytes(root: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(root):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except OSError:
                pass
    return total


def _io_counters() -> dict:
    try:
        with open("/proc/self/io") as fh:
            return {k: int(v) for k, v in (line.split(":") for line in fh)}
    except OSError:
        return {}


class Sandbox:
    """``with Sandbox() as box:`` runs in a fresh directory (cwd, TMPDIR, HF_HOME); on exit ``box.disk_bytes``
    holds what the run left there and ``box.io`` the bytes it wrote (``write_bytes``, ``wchar``), then it is removed.
    Inductor's cache (under TMPDIR unless TORCHINDUCTOR_CACHE_DIR is set) lands there too: a compile is cold."""

    def __enter__(self):
        self.path = Path(tempfile.mkdtemp(prefix="llc-bench-"))
        (self.path / "tmp").mkdir()
        os.environ["TMPDIR"] = str(self.path / "tmp")
        os.environ["HF_HOME"] = str(self.path / "hf")
        tempfile.tempdir = str(self.path / "tmp")
        self._cwd = os.getcwd()
        os.chdir(self.path)
        self._io0 = _io_counters()
        self.disk_bytes, self.io = 0, {}
        return self

    def __exit__(self, *exc):
        io1 = _io_counters()
        self.io = {k: io1.get(k, 0) - self._io0.get(k, 0) for k in ("write_bytes", "wchar")}
        self.disk_bytes = dir_bytes(self.path)
        os.chdir(self._cwd)
        shutil.rmtree(self.path, ignore_errors=True)
        return False


def peak_rss_bytes() -> int:
    """The peak resident set of this process (``ru_maxrss``, imports included)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def llc_summary(per_chain) -> dict:
    """λ̂ mean and std over chains (ddof = 1), and the first 16 per-chain values."""
    values = [float(v) for v in per_chain]
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else math.nan
    return dict(llc_mean=mean, llc_std=std, llc_per_chain=values[:16])
